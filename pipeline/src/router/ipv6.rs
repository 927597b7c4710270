//! IPv6 forwarding: header checks, hop limit, the route and neighbour
//! lookups, Neighbor Discovery hand-off, and echo for the router's own
//! addresses.

use super::Event;
use super::{NextHop, Router};
use crate::checksum;
use crate::fwd::Frame;
use crate::route_cache::RouteCache;
use crate::verdict::{DropReason, Verdict};
use crate::wire::{IpProto, Ipv6Packet, ETHERNET_HEADER_LEN};

impl Router {
    pub(crate) fn ipv6(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        let b = pkt.bytes_mut();
        let ip = match Ipv6Packet::new_checked(&b[ETHERNET_HEADER_LEN..]) {
            Ok(ip) => ip,
            Err(e) => return Verdict::Drop(e.into()),
        };
        let dst = u128::from_be_bytes(ip.dst());
        let (hop, plen) = (ip.hop_limit(), ip.payload_len());
        let (proto, off) = match ip.upper_layer() {
            Ok(x) => x,
            Err(e) => return Verdict::Drop(e.into()),
        };
        let icmp_type = (proto == IpProto::ICMPV6)
            .then(|| b.get(ETHERNET_HEADER_LEN + off).copied())
            .flatten();
        if let Some(135 | 136) = icmp_type {
            if off != 40 || plen < 24 {
                return Verdict::Drop(DropReason::Malformed);
            }
            return self.nd(pkt, in_port);
        }
        if icmp_type == Some(133) && (dst >> 112 == 0xff02 || self.is_local6(dst)) {
            // A Router Solicitation (to link-local multicast or to the
            // router): answered where the port advertises.
            if let Some(v) = self.solicited(pkt, in_port, off, usize::from(plen)) {
                return v;
            }
        }
        if dst >> 120 == 0xff {
            // Link-local multicast (ff02::/16: router solicitations and
            // advertisements, MLD, OSPFv3, DHCPv6) is the kernel's where
            // it has a mirror; other multicast is not routed.
            if dst >> 112 == 0xff02 && self.cfg.punt.mirrored(in_port) {
                return self.for_router(pkt, in_port, false);
            }
            return Verdict::Drop(DropReason::NotRoutable);
        }
        if !self.for_us6(pkt.bytes()) {
            return Verdict::Drop(DropReason::NotForUs);
        }
        if self.is_local6(dst) {
            return self.local6(pkt, in_port, icmp_type, off);
        }
        // Link-local scope is never forwarded (RFC 4291 2.5.6): to
        // another's link-local address, not routable; from a link-local
        // address, Destination Unreachable "beyond scope of source
        // address" (RFC 4443 3.1), as Linux's ip6_forward answers.
        let src = u128::from_be_bytes(
            Ipv6Packet::new_unchecked(&pkt.bytes()[ETHERNET_HEADER_LEN..]).src(),
        );
        if super::link_scoped(src, dst) {
            if super::is_link_local(dst) {
                return Verdict::Drop(DropReason::NotRoutable);
            }
            return self.icmp6_error(pkt, in_port, 1, 2, 0, DropReason::NotRoutable);
        }
        if hop <= 1 {
            return self.icmp6_error(pkt, in_port, 3, 0, 0, DropReason::TtlExceeded);
        }
        let Some(nh) = self.cfg.fib.lpm6().lookup(dst) else {
            return self.icmp6_error(pkt, in_port, 1, 0, 0, DropReason::NoRoute);
        };
        let l3 = &pkt.bytes()[ETHERNET_HEADER_LEN..];
        let Some((_, h)) = self.cfg.fib.path(nh, || Router::flow_hash(l3)) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        let Some(oif) = self.iface(h.port) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        if oif.down {
            return Verdict::Drop(DropReason::LinkDown);
        }
        let mtu = oif.mtu;
        let split = self.split6(pkt.bytes()).map(|most| most.min(mtu));
        if 40 + plen > split.unwrap_or(mtu) {
            if let Some(most) = split {
                return self.fragment6(pkt, in_port, most);
            }
            return self.icmp6_error(pkt, in_port, 2, 0, u32::from(mtu), DropReason::MtuExceeded);
        }
        let out_mac = oif.mac;
        let mac = match self.hop_mac6(h, dst) {
            Ok(m) => m,
            Err(gw) => {
                self.hold(pkt.bytes(), in_port, h.port, 6, gw);
                return self.solicit(pkt, h.port, gw);
            }
        };
        let b = pkt.bytes_mut();
        b[ETHERNET_HEADER_LEN + 7] = hop - 1;
        b[0..6].copy_from_slice(&mac.0);
        b[6..12].copy_from_slice(&out_mac.0);
        Verdict::Forward(h.port)
    }

    /// Forwards a valid IPv6 frame (not for the router, hop limit above
    /// 1, no extension header the router looks at) through `cache`, a
    /// flow's next hop (NAT64's replies), as [`Router::forward4_cached`]
    /// does for IPv4: filled from the route and neighbour tables when its
    /// generation is stale; anything it cannot take (no route, no
    /// neighbour, over the MTU) goes the full way.
    #[inline]
    pub(crate) fn forward6_cached(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        cache: &mut RouteCache,
    ) -> Verdict {
        if cache.generation != self.flow_generation() && !self.fill6(pkt.bytes(), cache) {
            return self.ipv6(pkt, in_port);
        }
        let Some(oif) = self
            .cfg
            .interfaces
            .get(usize::from(cache.port))
            .filter(|i| !i.down)
        else {
            return self.ipv6(pkt, in_port);
        };
        let (mtu, src) = (oif.mtu, oif.mac.0);
        let b = pkt.bytes_mut();
        let (hop, plen) = (
            b[ETHERNET_HEADER_LEN + 7],
            u16::from_be_bytes([b[ETHERNET_HEADER_LEN + 4], b[ETHERNET_HEADER_LEN + 5]]),
        );
        if hop <= 1 || u32::from(plen) + 40 > u32::from(mtu) {
            return self.ipv6(pkt, in_port);
        }
        b[ETHERNET_HEADER_LEN + 7] = hop - 1;
        b[0..6].copy_from_slice(&cache.mac);
        b[6..12].copy_from_slice(&src);
        Verdict::Forward(cache.port)
    }

    /// Fills `cache` for the flow of IPv6 frame `b` (a miss of
    /// [`Router::forward6_cached`]): false for a destination the router
    /// takes or does not route, or whose neighbour is not resolved.
    #[cold]
    #[inline(never)]
    fn fill6(&mut self, b: &[u8], cache: &mut RouteCache) -> bool {
        let Some(l3) = b.get(ETHERNET_HEADER_LEN..ETHERNET_HEADER_LEN + 40) else {
            return false;
        };
        let mut d = [0u8; 16];
        d.copy_from_slice(&l3[24..40]);
        let dst = u128::from_be_bytes(d);
        if dst >> 120 == 0xff || self.is_local6(dst) {
            return false;
        }
        let Some(nh) = self.cfg.fib.lpm6().lookup(dst) else {
            return false;
        };
        // The whole packet hashed, as the full way hashes it (the ports
        // past the fixed header count).
        let Some((_, h)) = self
            .cfg
            .fib
            .path(nh, || Router::flow_hash(&b[ETHERNET_HEADER_LEN..]))
        else {
            return false;
        };
        self.keep6(cache, h, dst)
    }

    /// Fills `cache` with the single-path route `hop` to `dst`, just
    /// looked up (a new flow's first packet, which
    /// then goes through it), as [`Router::fill6`] would: left as it is
    /// for a destination the router takes or whose neighbour is not
    /// resolved (the full way's then, which solicits it).
    pub(crate) fn fill6_route(&self, cache: &mut RouteCache, hop: NextHop, dst: u128) {
        if dst >> 120 != 0xff && !self.is_local6(dst) {
            self.keep6(cache, hop, dst);
        }
    }

    /// `cache` filled with path `hop` to `dst` (a destination the router
    /// forwards), its neighbour's MAC: false, and `cache` as it was, when
    /// that neighbour is not resolved.
    fn keep6(&self, cache: &mut RouteCache, hop: NextHop, dst: u128) -> bool {
        let Ok(mac) = self.hop_mac6(hop, dst) else {
            return false;
        };
        *cache = RouteCache {
            generation: self.flow_generation(),
            port: hop.port,
            mac: mac.0,
        };
        true
    }

    /// Unicast IPv6 frames must be addressed to the port (multicast frames
    /// are let through for ND only).
    pub(super) fn for_us6(&self, b: &[u8]) -> bool {
        b[0] & 1 == 0
    }

    /// Packets for the router's IPv6 addresses: answer echo requests
    /// (`icmp_type` 128, ICMPv6 at `off` from the IPv6 header), consume the
    /// rest.
    pub(super) fn local6(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        icmp_type: Option<u8>,
        off: usize,
    ) -> Verdict {
        let Some(mac) = self.iface(in_port).map(|i| i.mac) else {
            return Verdict::Drop(DropReason::ToRouter);
        };
        let l4 = ETHERNET_HEADER_LEN + off;
        if icmp_type != Some(128) || pkt.bytes().len() < l4 + 8 {
            return self.for_router(pkt, in_port, true);
        }
        if let Some(v) = self.echo_rule(pkt, in_port) {
            return v;
        }
        let b = pkt.bytes_mut();
        // Swapping the addresses leaves the pseudo-header sum unchanged;
        // type 128 → 129 changes one word.
        let mut ip = Ipv6Packet::new_unchecked(&mut b[ETHERNET_HEADER_LEN..]);
        ip.swap_addrs();
        ip.set_hop_limit(64);
        b[l4] = 129;
        let c = u16::from_be_bytes([b[l4 + 2], b[l4 + 3]]);
        b[l4 + 2..l4 + 4].copy_from_slice(&checksum::update16(c, 0x8000, 0x8100).to_be_bytes());
        b.copy_within(6..12, 0);
        b[6..12].copy_from_slice(&mac.0);
        self.count(Event::EchoReply);
        Verdict::Forward(in_port)
    }
}
