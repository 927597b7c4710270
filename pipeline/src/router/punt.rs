//! What the router hands the kernel (the TAP mirrors of
//! `[control_plane] tap`), and how much: the punt policy.
//!
//! Without rules, everything for the router that it does not answer
//! itself goes to the receiving interface's mirror (TCP, UDP and other
//! protocols to its addresses, link-local multicast). With rules, as a
//! router's control-plane policing (Cisco's CoPP, Juniper's lo0 filter,
//! VPP's punt registrations), only IP traffic a rule admits is punted,
//! each rule with an optional rate (packets per second per core, a token
//! bucket); the rest is dropped as `punt_denied`, the excess as
//! `punt_policed`, so a flood at the router's addresses reaches neither
//! the kernel nor its mirror ring. The neighbour messages the kernel needs
//! to resolve its own neighbours (ARP replies, Neighbor Advertisements)
//! are never subject to rules. Rules match the frame as received on its
//! interface (tags stripped): protocol (IPv6: the first next header, so
//! no match on a protocol behind extension headers), destination and
//! source port ranges (TCP, UDP, SCTP; not fragments after the first),
//! source prefixes, the interface it came in on.

use super::Router;
use crate::verdict::{DropReason, Verdict};
use crate::wire::ETHERNET_HEADER_LEN;
use std::net::IpAddr;

/// One punt rule: what it admits (every field it has must match).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PuntRule {
    /// IP protocol (IPv6: next header), any if `None`.
    pub proto: Option<u8>,
    /// Destination port range (inclusive), for TCP, UDP and SCTP.
    pub ports: Option<(u16, u16)>,
    /// Source port range (inclusive), for TCP, UDP and SCTP: the replies
    /// to connections the kernel opened (a BGP session from an ephemeral
    /// port to a peer's 179).
    pub sports: Option<(u16, u16)>,
    /// Source prefixes, any if empty.
    pub from: Vec<(IpAddr, u8)>,
    /// Interfaces (ports, then sub-interfaces) it must come in on, any if
    /// empty (nftables' `iifname` in an input chain: SSH from the LAN
    /// only).
    pub in_ifaces: Vec<u16>,
    /// Packets per second per core; unlimited if `None`.
    pub rate: Option<u32>,
}

/// What goes to the kernel.
#[derive(Clone, Debug, Default)]
pub struct PuntPolicy {
    /// Interfaces (ports, then sub-interfaces) that have a mirror: what is
    /// for the router and received there can be punted; elsewhere it is
    /// dropped as `to_router`. Empty: no mirrors, nothing punted.
    pub mirrored: Vec<bool>,
    /// Rules, first match wins; empty: everything is punted.
    pub rules: Vec<PuntRule>,
}

impl PuntPolicy {
    /// Whether interface `i` has a mirror.
    #[inline]
    pub fn mirrored(&self, i: u16) -> bool {
        self.mirrored.get(usize::from(i)).copied().unwrap_or(false)
    }

    /// Whether any interface has a mirror.
    #[inline]
    pub fn any(&self) -> bool {
        self.mirrored.iter().any(|m| *m)
    }
}

/// A rule's token bucket on one core.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Bucket {
    tokens: f64,
    at_ns: u64,
}

/// What a rule looks at in an IP packet.
struct Fields {
    proto: u8,
    src: IpAddr,
    /// (source, destination) ports.
    ports: Option<(u16, u16)>,
}

/// Reads protocol, source and destination port from the IP packet after
/// the Ethernet header (`None`: too short to say).
fn fields(b: &[u8]) -> Option<Fields> {
    let l3 = b.get(ETHERNET_HEADER_LEN..)?;
    let (proto, src, l4, first) = match l3.first()? >> 4 {
        4 => {
            let ihl = usize::from(l3[0] & 0x0f) * 4;
            let h = l3.get(..20)?;
            let frag = u16::from_be_bytes([h[6], h[7]]) & 0x1fff;
            let src = IpAddr::from([h[12], h[13], h[14], h[15]]);
            (h[9], src, ihl, frag == 0)
        }
        6 => {
            let h = l3.get(..40)?;
            let mut s = [0u8; 16];
            s.copy_from_slice(&h[8..24]);
            (h[6], IpAddr::from(s), 40, true)
        }
        _ => return None,
    };
    let ports = match proto {
        6 | 17 | 132 if first => l3.get(l4..l4 + 4).map(|p| {
            (
                u16::from_be_bytes([p[0], p[1]]),
                u16::from_be_bytes([p[2], p[3]]),
            )
        }),
        _ => None,
    };
    Some(Fields { proto, src, ports })
}

fn within(a: IpAddr, (p, len): (IpAddr, u8)) -> bool {
    match (a, p) {
        (IpAddr::V4(a), IpAddr::V4(p)) => crate::prefix::in4(u32::from(a), (u32::from(p), len)),
        (IpAddr::V6(a), IpAddr::V6(p)) => crate::prefix::in6(u128::from(a), (u128::from(p), len)),
        _ => false,
    }
}

impl PuntRule {
    fn admits(&self, f: &Fields, in_if: u16) -> bool {
        let in_range = |r: Option<(u16, u16)>, p: Option<u16>| {
            r.is_none_or(|(lo, hi)| p.is_some_and(|p| (lo..=hi).contains(&p)))
        };
        self.proto.is_none_or(|p| p == f.proto)
            && in_range(self.ports, f.ports.map(|p| p.1))
            && in_range(self.sports, f.ports.map(|p| p.0))
            && (self.from.is_empty() || self.from.iter().any(|p| within(f.src, *p)))
            && (self.in_ifaces.is_empty() || self.in_ifaces.contains(&in_if))
    }
}

impl Router {
    /// What happens to an IP packet for the router that it does not
    /// answer itself (`b`: the frame, tags stripped): punted to the
    /// receiving interface's mirror if it has one and a rule admits it
    /// (within the rule's rate), else dropped.
    pub(super) fn for_router(&mut self, b: &[u8], in_port: u16) -> Verdict {
        if !self.cfg.punt.mirrored(in_port) {
            return Verdict::Drop(DropReason::ToRouter);
        }
        if self.cfg.punt.rules.is_empty() {
            return Verdict::Punt(in_port);
        }
        let Some(f) = fields(b) else {
            return Verdict::Drop(DropReason::PuntDenied);
        };
        let Some(i) = self
            .cfg
            .punt
            .rules
            .iter()
            .position(|r| r.admits(&f, in_port))
        else {
            return Verdict::Drop(DropReason::PuntDenied);
        };
        let Some(rate) = self.cfg.punt.rules[i].rate else {
            return Verdict::Punt(in_port);
        };
        if self.punt_buckets.len() <= i {
            self.punt_buckets.resize(i + 1, Bucket::default());
        }
        let now = self.now_ns;
        let burst = Self::burst(rate);
        let b = &mut self.punt_buckets[i];
        if b.at_ns == 0 {
            b.tokens = burst;
        } else {
            let dt = now.saturating_sub(b.at_ns) as f64 / 1e9;
            b.tokens = (b.tokens + dt * f64::from(rate)).min(burst);
        }
        b.at_ns = now.max(1);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Verdict::Punt(in_port)
        } else {
            Verdict::Drop(DropReason::PuntPoliced)
        }
    }

    /// The kernel's copy of a neighbour message received on `in_port`
    /// (never subject to rules), if it has a mirror.
    pub(super) fn punt_neighbor(&self, in_port: u16) -> Option<Verdict> {
        self.cfg
            .punt
            .mirrored(in_port)
            .then_some(Verdict::Punt(in_port))
    }
}
