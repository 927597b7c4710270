//! The per-flow next-hop cache: what the router resolved for a flow (output
//! port and next hop's MAC), kept in the flow's conntrack entry and valid
//! while the router's neighbour generation is unchanged.
//!
//! A leaf: it imports nothing from the crate, so conntrack can hold one
//! without depending on the router.

/// A next hop resolved for a flow: valid while the router's generation is
/// the one recorded (0 = empty).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct RouteCache {
    pub(crate) generation: u32,
    pub(crate) port: u16,
    pub(crate) mac: [u8; 6],
}
