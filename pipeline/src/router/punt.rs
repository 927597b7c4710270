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
//!
//! The rules are also the router's input chain (nftables' `chain input`):
//! a rule's action is `accept` (punt it; where the interface has no
//! mirror, answer as a host with nothing listening: [`super::local`]),
//! `drop` (counted `punt_denied`, as a packet no rule admits) or `reject`
//! (a TCP reset or an ICMP unreachable from the router's address, within
//! the ICMP rate).

use super::Router;
use crate::firewall::Action;
use crate::fwd::Frame;
use crate::verdict::{DropReason, Verdict};
use crate::wire::ETHERNET_HEADER_LEN;
use std::net::IpAddr;

/// One punt rule: what it matches (every field it has must match) and
/// what it does with it.
#[derive(Clone, Debug, PartialEq)]
pub struct PuntRule {
    /// What becomes of a packet it matches: `Accept` punts it (or, with
    /// no mirror, answers it as a closed port), `Drop` drops it as
    /// `punt_denied`, `Reject` answers it.
    pub action: Action,
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
    /// Connection states it matches (the firewall's state bits, as the
    /// kernel's flows say: [`PuntPolicy::kernel_flows`]), any if 0.
    pub states: u8,
}

impl Default for PuntRule {
    /// A rule that admits everything.
    fn default() -> Self {
        PuntRule {
            action: Action::Accept,
            proto: None,
            ports: None,
            sports: None,
            from: Vec::new(),
            in_ifaces: Vec::new(),
            rate: None,
            states: 0,
        }
    }
}

/// What goes to the kernel.
#[derive(Clone, Debug, Default)]
pub struct PuntPolicy {
    /// Interfaces (ports, then sub-interfaces) that have a mirror: what is
    /// for the router and received there can be punted; elsewhere it is
    /// dropped as `to_router`. Empty: no mirrors, nothing punted.
    pub mirrored: Vec<bool>,
    /// Rules, first match wins; empty: everything is punted (answered as
    /// a closed port without a mirror); a packet no rule matches is
    /// dropped as `punt_denied`.
    pub rules: Vec<PuntRule>,
    /// The kernel's connections (what it sent through the mirrors), for
    /// rules with `states`; none without mirrors (every packet is then
    /// `new`).
    pub kernel_flows: Option<std::sync::Arc<super::kernel_flows::KernelFlows>>,
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
    fn matches(&self, f: &Fields, in_if: u16, state: u8) -> bool {
        let in_range = |r: Option<(u16, u16)>, p: Option<u16>| {
            r.is_none_or(|(lo, hi)| p.is_some_and(|p| (lo..=hi).contains(&p)))
        };
        self.proto.is_none_or(|p| p == f.proto)
            && in_range(self.ports, f.ports.map(|p| p.1))
            && in_range(self.sports, f.ports.map(|p| p.0))
            && (self.from.is_empty() || self.from.iter().any(|p| within(f.src, *p)))
            && (self.in_ifaces.is_empty() || self.in_ifaces.contains(&in_if))
            && (self.states == 0 || self.states & state != 0)
    }
}

impl Router {
    /// What happens to an IP packet for the router that it does not
    /// answer itself (tags stripped; `unicast`: sent to one of its
    /// addresses, not multicast or broadcast): the first rule that
    /// matches decides (within its rate); admitted, it is punted to the
    /// receiving interface's mirror, or without one answered as a closed
    /// port ([`Router::closed_port`]), a multicast one dropped as
    /// `to_router`; refused, it is dropped or answered
    /// ([`Router::reject_local`]).
    pub(super) fn for_router(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        unicast: bool,
    ) -> Verdict {
        let action = match self.input_rule(pkt.bytes(), in_port) {
            Ok(a) => a,
            Err(reason) => return Verdict::Drop(reason),
        };
        match action {
            Action::Accept if self.cfg.punt.mirrored(in_port) => Verdict::Punt(in_port),
            Action::Accept if unicast => self.closed_port(pkt, in_port),
            Action::Accept => Verdict::Drop(DropReason::ToRouter),
            Action::Reject(w) if unicast => self.reject_local(pkt, in_port, w),
            _ => Verdict::Drop(DropReason::PuntDenied),
        }
    }

    /// What the rules make of an echo request for the router, if a rule
    /// decides it: dropped or rejected by a rule that matches it (an
    /// input chain's `iifname "wan" drop`), `None` (answered here) when
    /// no rule matches it or an `accept` rule does: rules written only
    /// for what reaches the kernel (control-plane policing) leave pings
    /// answered.
    pub(super) fn echo_rule(&mut self, pkt: &mut impl Frame, in_port: u16) -> Option<Verdict> {
        if self.cfg.punt.rules.is_empty() {
            return None;
        }
        match self.input_rule(pkt.bytes(), in_port) {
            Ok(Action::Accept) | Err(DropReason::PuntDenied) => None,
            Ok(Action::Reject(w)) => Some(self.reject_local(pkt, in_port, w)),
            Ok(Action::Drop) => Some(Verdict::Drop(DropReason::PuntDenied)),
            Err(reason) => Some(Verdict::Drop(reason)),
        }
    }

    /// The action of the first rule that matches frame `b` received on
    /// `in_port` (`Accept` without rules), or why it is dropped: no rule
    /// matches (`punt_denied`), the rule's rate is spent (`punt_policed`).
    fn input_rule(&mut self, b: &[u8], in_port: u16) -> Result<Action, DropReason> {
        if self.cfg.punt.rules.is_empty() {
            return Ok(Action::Accept);
        }
        let f = fields(b).ok_or(DropReason::PuntDenied)?;
        // The packet's connection state, looked up only for rules that
        // ask (`new` or, for TCP flags no connection sends, `invalid`
        // where the kernel has no flows to say otherwise).
        let punt = &self.cfg.punt;
        let state = if punt.rules.iter().any(|r| r.states != 0) {
            let l3 = &b[ETHERNET_HEADER_LEN..];
            match &punt.kernel_flows {
                Some(k) => k.state(l3, k.now_s()),
                None if super::kernel_flows::invalid_tcp(l3) => crate::firewall::state::INVALID,
                None => crate::firewall::state::NEW,
            }
        } else {
            crate::firewall::state::NEW
        };
        let i = punt
            .rules
            .iter()
            .position(|r| r.matches(&f, in_port, state))
            .ok_or(DropReason::PuntDenied)?;
        let rule = &self.cfg.punt.rules[i];
        let action = rule.action;
        let Some(rate) = rule.rate else {
            return Ok(action);
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
            Ok(action)
        } else {
            Err(DropReason::PuntPoliced)
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
