//! Zero-copy header views over buffer bytes, in the style of smoltcp's
//! `wire` module: byte ranges in a private `field` module, a checked
//! constructor that validates the length once so that every accessor is
//! panic-free, then plain getters and setters.
//!
//! This module covers what the foundation needs (Ethernet, IPv4, IPv6 and the
//! UDP/TCP port fields); the router issue extends it.

mod ethernet;
mod ip;

pub use ethernet::{EtherType, EthernetFrame, MacAddr, ETHERNET_HEADER_LEN};
pub use ip::{
    IpProto, Ipv4Packet, Ipv6Packet, L4Ports, IPV4_MIN_HEADER_LEN, IPV6_HEADER_LEN, L4_PORTS_LEN,
};

/// A view could not be created: the buffer is too short or a field that
/// fixes the layout (version, header length) is invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the header needs.
    Truncated,
    /// A layout field is invalid.
    Malformed,
}

impl From<WireError> for crate::DropReason {
    fn from(e: WireError) -> Self {
        match e {
            WireError::Truncated => crate::DropReason::Truncated,
            WireError::Malformed => crate::DropReason::Malformed,
        }
    }
}
