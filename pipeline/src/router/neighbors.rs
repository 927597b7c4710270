//! The neighbour tables: ARP (RFC 826) and IPv6 Neighbor Discovery
//! (RFC 4861). Learning from requests, solicitations and advertisements on
//! connected subnets, answering for the router's own addresses, ageing, the
//! per-next-hop MAC cache and its generation, and the requests a neighbour
//! miss turns into.

use super::{emit, Event, HopMac, NextHop, Router};
use crate::fwd::Frame;
use crate::prefix;
use crate::verdict::{DropReason, Verdict};
use crate::wire::{
    ArpPacket, EtherType, Ipv6Packet, MacAddr, ARP_REPLY, ARP_REQUEST, ETHERNET_HEADER_LEN,
};
use rustc_hash::FxHashMap as HashMap;
use std::net::{IpAddr, Ipv4Addr};

/// The broadcast MAC.
pub(super) const BROADCAST: MacAddr = MacAddr([0xff; 6]);
/// "Learned at" of a configured neighbour: it never ages.
pub(super) const STATIC: u64 = u64::MAX;
/// "Learned at" of a neighbour mirrored from the kernel's table (netlink):
/// it never ages here (the kernel ages it and says so), a reload keeps
/// it, and only the kernel's word removes it.
pub(super) const MIRRORED: u64 = u64::MAX - 1;

impl Router {
    /// The neighbour MAC for `addr` on `port`, if known and fresh.
    pub fn neighbor4(&self, port: u16, addr: Ipv4Addr) -> Option<MacAddr> {
        self.fresh(self.neigh4.get(&(port, u32::from(addr))))
    }

    #[inline]
    pub(super) fn fresh(&self, e: Option<&(MacAddr, u64)>) -> Option<MacAddr> {
        let &(m, at) = e?;
        (at >= MIRRORED || self.now_ns.saturating_sub(at) <= self.cfg.neighbor_timeout_ns)
            .then_some(m)
    }

    /// Learns `a` at `m` from an ARP/ND message seen here: packets held
    /// for it are sent, and the other workers are told. True if the entry
    /// is new or its MAC changed.
    pub(super) fn learn_ip(&mut self, port: u16, a: IpAddr, m: MacAddr) -> bool {
        let changed = self.take_neighbor(port, a, m);
        if changed {
            self.bump();
        }
        self.share(port, a, m);
        changed
    }

    /// Puts `a` at `m` in its family's table as learned now (configured
    /// and kernel entries stay) and sends what was held for it; true if
    /// the entry is new or its MAC changed.
    fn take_neighbor(&mut self, port: u16, a: IpAddr, m: MacAddr) -> bool {
        match a {
            IpAddr::V4(v) => {
                let k = u32::from(v);
                let changed = learn(&mut self.neigh4, self.now_ns, (port, k), m);
                self.resolved(port, 4, u128::from(k));
                changed
            }
            IpAddr::V6(v) => {
                let k = u128::from(v);
                let changed = learn(&mut self.neigh6, self.now_ns, (port, k), m);
                self.resolved(port, 6, k);
                changed
            }
        }
    }

    /// Keeps a neighbour learned here (or confirmed: another worker's
    /// entry may have aged) for the other workers.
    fn share(&mut self, port: u16, a: IpAddr, m: MacAddr) {
        let full = self.learned.len() >= super::LEARNED_MAX;
        match self.learned.iter_mut().find(|e| e.0 == port && e.1 == a) {
            Some(e) => e.2 = m,
            None if !full => self.learned.push((port, a, m)),
            None => {}
        }
    }

    /// Takes neighbours another worker learned from ARP/ND (see
    /// [`super::LearnedNeighbors`]) as if learned here, now: packets
    /// held here for them are sent. Configured and kernel entries stay
    /// as they are, as with a message seen here.
    pub fn learn_shared(&mut self, learned: &[(u16, IpAddr, MacAddr)]) {
        let mut changed = false;
        for &(port, a, m) in learned {
            changed |= self.take_neighbor(port, a, m);
        }
        if changed {
            self.bump();
        }
    }

    /// A new generation: what was resolved in the last one is stale (the
    /// burst path's next hops go with it; the table keeps its memory).
    pub(super) fn bump(&mut self) {
        self.generation = self.generation.wrapping_add(1).max(1);
        self.adj4.clear();
        self.adj6.clear();
    }

    /// Takes the kernel's neighbours (`Some(mac)`: reachable or stale
    /// there; `None`: gone or failed). A configured neighbour stays as
    /// configured; a learned one gives way to the kernel's. Packets held
    /// for a neighbour the kernel resolved are sent. An ARP/ND message
    /// seen here with another MAC overrides the kernel's (the freshest
    /// word wins: a host that moved announces itself).
    pub fn mirror_neighbors(&mut self, changes: &[(u16, IpAddr, Option<MacAddr>)]) {
        let mut changed = false;
        for &(port, addr, mac) in changes {
            let (fam, key) = match addr {
                IpAddr::V4(a) => (4, u128::from(u32::from(a))),
                IpAddr::V6(a) => (6, u128::from(a)),
            };
            changed |= match (addr, mac) {
                (IpAddr::V4(a), m) => mirror(&mut self.neigh4, (port, u32::from(a)), m),
                (IpAddr::V6(a), m) => mirror(&mut self.neigh6, (port, u128::from(a)), m),
            };
            if mac.is_some() {
                self.resolved(port, fam, key);
            }
        }
        if changed {
            self.bump();
        }
    }

    /// The output port and next hop's MAC for `dst`, if routed and the
    /// neighbour is known and fresh (no side effects).
    pub(super) fn resolve4(
        &mut self,
        dst: u32,
        hash: impl FnOnce() -> u32,
    ) -> Option<(u16, MacAddr)> {
        if self.is_local4(dst) {
            return None;
        }
        let nh = self.cfg.fib.lpm4().lookup(dst)?;
        let (nh, hop) = self.cfg.fib.path(nh, hash)?;
        let mac = self.hop_mac4(nh, hop, dst).ok()?;
        Some((hop.port, mac))
    }

    /// The MAC of IPv4 next hop `nh` (`hop`) for `dst`, or the address to
    /// resolve when it is not known and fresh. A gateway's MAC is cached
    /// per next hop while the neighbour generation holds (no hash lookup
    /// per packet); connected destinations are looked up.
    #[inline(always)]
    pub(super) fn hop_mac4(&mut self, nh: u32, hop: NextHop, dst: u32) -> Result<MacAddr, u32> {
        if let Some(std::net::IpAddr::V4(g)) = hop.via {
            if let Some(e) = self.hop_macs.get(nh as usize) {
                if e.generation == self.generation && e.gw == u32::from(g) && e.port == hop.port {
                    return Ok(e.mac);
                }
            }
        }
        self.hop_mac4_fill(nh, hop, dst)
    }

    /// The MAC of IPv6 next hop `hop` for `dst` (its gateway's, or on a
    /// connected route `dst`'s own) when known and fresh, else the address
    /// to resolve.
    pub(super) fn hop_mac6(&self, hop: NextHop, dst: u128) -> Result<MacAddr, u128> {
        let gw = match hop.via {
            Some(IpAddr::V6(g)) => u128::from(g),
            _ => dst,
        };
        self.fresh(self.neigh6.get(&(hop.port, gw))).ok_or(gw)
    }

    /// [`Router::hop_mac4`] past its cache: the neighbour table, and the
    /// cache filled.
    #[inline(never)]
    fn hop_mac4_fill(&mut self, nh: u32, hop: NextHop, dst: u32) -> Result<MacAddr, u32> {
        let gw = match hop.via {
            Some(std::net::IpAddr::V4(g)) => u32::from(g),
            _ => dst,
        };
        let mac = self.fresh(self.neigh4.get(&(hop.port, gw))).ok_or(gw)?;
        if hop.via.is_some() && (nh as usize) < crate::fib::HOP_SLOTS {
            if self.hop_macs.len() <= nh as usize {
                self.hop_macs.resize(nh as usize + 1, HopMac::default());
            }
            if let Some(e) = self.hop_macs.get_mut(nh as usize) {
                *e = HopMac {
                    generation: self.generation,
                    gw,
                    port: hop.port,
                    mac,
                };
            }
        }
        Ok(mac)
    }

    /// Turns the packet (held by the caller, see `hold`) into an ARP
    /// request for `target` on `port`.
    pub(super) fn arp_request(&mut self, pkt: &mut impl Frame, port: u16, target: u32) -> Verdict {
        let Some((our, mac)) = self.source4(port) else {
            return Verdict::Drop(DropReason::NoNeighbor);
        };
        if !self.take_token() || !pkt.set_len(ETHERNET_HEADER_LEN + 28) {
            return Verdict::Drop(DropReason::NoNeighbor);
        }
        let b = pkt.bytes_mut();
        emit::ethernet(b, BROADCAST.0, mac, EtherType::ARP);
        let mut a = ArpPacket::new_unchecked(&mut b[ETHERNET_HEADER_LEN..]);
        a.set_fixed();
        a.set_oper(ARP_REQUEST);
        a.set_sender(mac, our.octets());
        a.set_target(MacAddr::default(), target.to_be_bytes());
        self.count(Event::ArpRequest);
        Verdict::Forward(port)
    }

    pub(super) fn arp(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        let Some(iface) = self.iface(in_port) else {
            return Verdict::Drop(DropReason::ToRouter);
        };
        let mac = iface.mac;
        let b = pkt.bytes_mut();
        let a = match ArpPacket::new_checked(&b[ETHERNET_HEADER_LEN..]) {
            Ok(a) => a,
            Err(e) => return Verdict::Drop(e.into()),
        };
        let (op, sha) = (a.oper(), a.sha());
        let (spa, tpa) = (a.spa(), a.tpa());
        let spa_u = u32::from_be_bytes(spa);
        let on_link = iface
            .ipv4
            .iter()
            .any(|(x, l)| prefix::in4(spa_u, (u32::from(*x), *l)));
        let ours = iface.ipv4.iter().any(|(x, _)| x.octets() == tpa);
        if on_link && spa_u != 0 && self.learn_ip(in_port, IpAddr::V4(Ipv4Addr::from(spa_u)), sha) {
            self.count(Event::ArpLearned);
        }
        if op == ARP_REQUEST && ours {
            let mut r = ArpPacket::new_unchecked(&mut b[ETHERNET_HEADER_LEN..]);
            r.set_oper(ARP_REPLY);
            r.set_target(sha, spa);
            r.set_sender(mac, tpa);
            b[0..6].copy_from_slice(&sha.0);
            b[6..12].copy_from_slice(&mac.0);
            self.count(Event::ArpReply);
            return Verdict::Forward(in_port);
        }
        // A reply to the router: the kernel's too, when it has a mirror
        // (it resolves its own neighbours through it).
        if op == ARP_REPLY && ours {
            if let Some(v) = self.punt_neighbor(in_port) {
                return v;
            }
        }
        Verdict::Drop(DropReason::Consumed)
    }

    /// Neighbor Discovery (RFC 4861): answer solicitations for the
    /// router's addresses, learn from solicitations and advertisements.
    pub(super) fn nd(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        let Some(iface) = self.iface(in_port) else {
            return Verdict::Drop(DropReason::ToRouter);
        };
        let mac = iface.mac;
        let b = pkt.bytes();
        let ip = Ipv6Packet::new_unchecked(&b[ETHERNET_HEADER_LEN..]);
        if ip.hop_limit() != 255 {
            return Verdict::Drop(DropReason::Malformed); // not from a neighbour
        }
        let src = u128::from_be_bytes(ip.src());
        let l4 = ETHERNET_HEADER_LEN + 40;
        let end = l4 + usize::from(ip.payload_len());
        let ty = b[l4];
        let mut target = [0u8; 16];
        target.copy_from_slice(&b[l4 + 8..l4 + 24]);
        let target_u = u128::from_be_bytes(target);
        // The link-layer address option (source for NS, target for NA).
        let mut lla = None;
        let mut o = l4 + 24;
        while o + 8 <= end {
            let (t, len) = (b[o], usize::from(b[o + 1]) * 8);
            if len == 0 || o + len > end {
                return Verdict::Drop(DropReason::Malformed);
            }
            if (t == 1 && ty == 135) || (t == 2 && ty == 136) {
                lla = Some(MacAddr(b[o + 2..o + 8].try_into().expect("6 bytes")));
            }
            o += len;
        }
        let ours = iface.ipv6.iter().any(|(a, _)| u128::from(*a) == target_u)
            || self
                .link_local6(in_port)
                .is_some_and(|a| u128::from(a) == target_u);
        let (learn_ip, learn_mac) = if ty == 135 {
            (src, lla)
        } else {
            (
                target_u,
                lla.or(Some(MacAddr([b[6], b[7], b[8], b[9], b[10], b[11]]))),
            )
        };
        if learn_ip != 0 {
            if let Some(m) = learn_mac {
                if self.learn_ip(in_port, IpAddr::V6(learn_ip.into()), m) {
                    self.count(Event::NdLearned);
                }
            }
        }
        if ty == 136 {
            if let Some(v) = self.punt_neighbor(in_port) {
                return v; // the kernel resolves its neighbours too
            }
        }
        if ty != 135 || !ours {
            return Verdict::Drop(DropReason::Consumed);
        }
        // Answer with a Neighbor Advertisement (router, solicited, override).
        let mut src_mac = [0u8; 6];
        src_mac.copy_from_slice(&b[6..12]);
        let dst: [u8; 16] = if src == 0 {
            [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
        } else {
            src.to_be_bytes()
        };
        let flags = if src == 0 { 0xa0 } else { 0xe0 };
        if !pkt.set_len(l4 + 32) {
            return Verdict::Drop(DropReason::ToRouter);
        }
        let b = pkt.bytes_mut();
        emit::ethernet(b, src_mac, mac, EtherType::IPV6);
        let icmp = &mut b[l4..l4 + 32];
        icmp[0..8].copy_from_slice(&[136, 0, 0, 0, flags, 0, 0, 0]);
        icmp[8..24].copy_from_slice(&target);
        icmp[24..26].copy_from_slice(&[2, 1]);
        icmp[26..32].copy_from_slice(&mac.0);
        emit::icmp6(b, 255, target, dst, 32);
        self.count(Event::NdAdvert);
        Verdict::Forward(in_port)
    }

    /// Turns the packet (held by the caller, see `hold`) into a Neighbor
    /// Solicitation for `target` on `port`.
    pub(super) fn solicit(&mut self, pkt: &mut impl Frame, port: u16, target: u128) -> Verdict {
        let Some((our, mac)) = self.source6(port) else {
            return Verdict::Drop(DropReason::NoNeighbor);
        };
        let l4 = ETHERNET_HEADER_LEN + 40;
        if !self.take_token() || !pkt.set_len(l4 + 32) {
            return Verdict::Drop(DropReason::NoNeighbor);
        }
        let t = target.to_be_bytes();
        // Solicited-node multicast ff02::1:ffXX:XXXX and its MAC 33:33:ff:XX:XX:XX.
        let mut snm = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
        snm[13..16].copy_from_slice(&t[13..16]);
        let b = pkt.bytes_mut();
        emit::ethernet(
            b,
            [0x33, 0x33, 0xff, t[13], t[14], t[15]],
            mac,
            EtherType::IPV6,
        );
        let icmp = &mut b[l4..l4 + 32];
        icmp[0..8].copy_from_slice(&[135, 0, 0, 0, 0, 0, 0, 0]);
        icmp[8..24].copy_from_slice(&t);
        icmp[24..26].copy_from_slice(&[1, 1]);
        icmp[26..32].copy_from_slice(&mac.0);
        emit::icmp6(b, 255, our.octets(), snm, 32);
        self.count(Event::NdSolicit);
        Verdict::Forward(port)
    }
}

/// Learns a neighbour at time `now` (static entries are kept); true when it
/// is new or its MAC changed.
/// One mirrored neighbour into `map`; true when the table changed.
fn mirror<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, (MacAddr, u64)>,
    key: K,
    mac: Option<MacAddr>,
) -> bool {
    match (map.get(&key), mac) {
        (Some(&(_, STATIC)), _) => false,
        (Some(&(old, MIRRORED)), Some(m)) if old == m => false,
        (_, Some(m)) => {
            map.insert(key, (m, MIRRORED));
            true
        }
        (Some(&(_, MIRRORED)), None) => {
            map.remove(&key);
            true
        }
        (_, None) => false,
    }
}

fn learn<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, (MacAddr, u64)>,
    now: u64,
    key: K,
    m: MacAddr,
) -> bool {
    match map.get_mut(&key) {
        Some((_, STATIC)) => false,
        // The kernel's entry, confirmed: it stays the kernel's.
        Some(&mut (old, MIRRORED)) if old == m => false,
        // Learned now (or a new MAC against the kernel's: the freshest
        // word wins, and ages like any learned entry).
        Some(e) => {
            let changed = e.0 != m;
            *e = (m, now);
            changed
        }
        None => {
            map.insert(key, (m, now));
            true
        }
    }
}
