//! IPv4 forwarding (RFC 1812): header checks, the router's own
//! addresses (echo), TTL and MTU, the route and neighbour lookups, the TTL
//! decrement with its incremental checksum update, and the per-flow cached
//! path the gateway uses.

use super::{Event, Router};
use crate::checksum;
use crate::fwd::Frame;
use crate::route_cache::RouteCache;
use crate::verdict::{DropReason, Verdict};
use crate::wire::{IcmpPacket, IpProto, Ipv4Packet, ETHERNET_HEADER_LEN};

impl Router {
    pub(super) fn ipv4(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        let b = pkt.bytes_mut();
        let ip = match Ipv4Packet::new_checked(&b[ETHERNET_HEADER_LEN..]) {
            Ok(ip) => ip,
            Err(e) => return Verdict::Drop(e.into()),
        };
        if !ip.verify_checksum() {
            return Verdict::Drop(DropReason::BadChecksum);
        }
        self.ipv4_valid(pkt, in_port)
    }

    /// Routes an IPv4 packet addressed to `in_port`'s MAC whose header the
    /// caller has validated (version, lengths, checksum): the gateway's
    /// entry, which checks the header before conntrack.
    #[inline]
    pub(crate) fn ipv4_valid(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ETHERNET_HEADER_LEN..]);
        let dst = u32::from_be_bytes(ip.dst());
        let (ttl, total) = (ip.ttl(), ip.total_len());
        let df = ip.flags_frag() & 0x4000 != 0;
        if martian(dst) {
            return Verdict::Drop(DropReason::NotRoutable);
        }
        if self.is_local4(dst) {
            return self.local4(pkt, in_port);
        }
        if ttl <= 1 {
            return self.icmp4_error(pkt, in_port, 11, 0, 0, DropReason::TtlExceeded);
        }
        let Some(nh) = self.cfg.fib.lpm4().lookup(dst) else {
            return self.icmp4_error(pkt, in_port, 3, 0, 0, DropReason::NoRoute);
        };
        let l3 = &pkt.bytes()[ETHERNET_HEADER_LEN..];
        let Some((nh, hop)) = self.cfg.fib.path(nh, || Router::flow_hash(l3)) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        let out = hop.port;
        let Some(oif) = self.iface(out) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        if oif.down {
            return Verdict::Drop(DropReason::LinkDown);
        }
        let (out_mac, mtu) = (oif.mac, oif.mtu);
        if total > mtu {
            if df {
                return self.icmp4_error(
                    pkt,
                    in_port,
                    3,
                    4,
                    u32::from(mtu),
                    DropReason::MtuExceeded,
                );
            }
            return Verdict::Drop(DropReason::MtuExceeded);
        }
        let mac = match self.hop_mac4(nh, hop, dst) {
            Ok(m) => m,
            Err(gw) => {
                self.hold(pkt.bytes(), in_port, out, 4, u128::from(gw));
                return self.arp_request(pkt, out, gw);
            }
        };
        forward4_rewrite(pkt.bytes_mut(), mac.0, out_mac.0);
        Verdict::Forward(out)
    }

    /// Forwards an IPv4 packet whose header the caller validated (TTL > 1,
    /// not for the router) through `cache`, filling it on a miss (a
    /// multipath route picks the path of flow hash `hash`): TTL
    /// decrement with its checksum update and MAC rewrite, without the
    /// route and neighbour lookups while the cache holds (the flow hash,
    /// `hash`, is computed only to fill it). A cache serves one flow in
    /// one direction, so one destination: whether that is routable at
    /// all (not martian) is checked when it is filled. Anything else
    /// (no route, no neighbour, over the MTU) goes the full way
    /// ([`Router::ipv4_valid`]).
    #[inline]
    pub(crate) fn forward4_cached(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        cache: &mut RouteCache,
        hash: impl FnOnce() -> u32,
    ) -> Verdict {
        let b = pkt.bytes_mut();
        let l3 = &b[ETHERNET_HEADER_LEN..];
        let total = u16::from_be_bytes([l3[2], l3[3]]);
        if cache.generation != self.flow_generation() {
            // A flow's packets (in one direction) go to one destination:
            // checked to be routable once, when the cache is filled.
            let dst = u32::from_be_bytes([l3[16], l3[17], l3[18], l3[19]]);
            if martian(dst) {
                return self.ipv4_valid(pkt, in_port);
            }
            let Some((port, mac)) = self.resolve4(dst, hash) else {
                return self.ipv4_valid(pkt, in_port);
            };
            *cache = RouteCache {
                generation: self.flow_generation(),
                port,
                mac: mac.0,
            };
        }
        let Some(oif) = self
            .cfg
            .interfaces
            .get(usize::from(cache.port))
            .filter(|i| !i.down)
        else {
            return self.ipv4_valid(pkt, in_port);
        };
        if total > oif.mtu {
            return self.ipv4_valid(pkt, in_port);
        }
        forward4_rewrite(b, cache.mac, oif.mac.0);
        Verdict::Forward(cache.port)
    }

    /// Packets for the router itself: answer echo requests, consume the rest.
    pub(super) fn local4(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        let Some(mac) = self.iface(in_port).map(|i| i.mac) else {
            return Verdict::Drop(DropReason::ToRouter);
        };
        let b = pkt.bytes_mut();
        let mut ip = Ipv4Packet::new_unchecked(&mut b[ETHERNET_HEADER_LEN..]);
        let h = ip.header_len();
        let is_echo = ip.protocol() == IpProto::ICMP
            && ip.flags_frag() & 0x3fff == 0
            && IcmpPacket::new_checked(ip.payload())
                .is_ok_and(|i| (i.msg_type(), i.code()) == (8, 0));
        if !is_echo {
            return self.for_router(pkt.bytes(), in_port);
        }
        ip.swap_addrs();
        ip.set_ttl(64);
        ip.fill_checksum();
        let icmp = &mut b[ETHERNET_HEADER_LEN + h..];
        icmp[0] = 0; // echo reply
        let c = u16::from_be_bytes([icmp[2], icmp[3]]);
        icmp[2..4].copy_from_slice(&checksum::update16(c, 0x0800, 0x0000).to_be_bytes());
        b.copy_within(6..12, 0);
        b[6..12].copy_from_slice(&mac.0);
        self.count(Event::EchoReply);
        Verdict::Forward(in_port)
    }
}

impl Router {
    /// A multicast or broadcast IPv4 frame on a port with a mirror: link-
    /// local multicast (224.0.0.0/24: OSPF's 224.0.0.5 and .6, VRRP, RIP,
    /// IGMP) and limited broadcast (DHCP) are the kernel's, never
    /// forwarded; the rest is not for the router.
    #[cold]
    pub(super) fn ipv4_link_local(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        let b = pkt.bytes();
        let ip = match Ipv4Packet::new_checked(&b[ETHERNET_HEADER_LEN..]) {
            Ok(ip) => ip,
            Err(e) => return Verdict::Drop(e.into()),
        };
        if !ip.verify_checksum() {
            return Verdict::Drop(DropReason::BadChecksum);
        }
        let dst = u32::from_be_bytes(ip.dst());
        if dst >> 8 == 0xe0_00_00 || dst == u32::MAX {
            self.for_router(pkt.bytes(), in_port)
        } else {
            Verdict::Drop(DropReason::NotForUs)
        }
    }
}

/// Destinations and sources a router never forwards for (RFC 1812 5.3.7):
/// 0/8, 127/8, multicast and reserved 224/3, limited broadcast.
/// Forwards an IPv4 frame whose TTL is above 1: decrements the TTL
/// (the high byte of the TTL/protocol word, so an RFC 1624 update of the
/// header checksum) and sets the destination and source MACs.
#[inline(always)]
pub(super) fn forward4_rewrite(b: &mut [u8], dst: [u8; 6], src: [u8; 6]) {
    let l3 = &mut b[ETHERNET_HEADER_LEN..];
    let old = u16::from_be_bytes([l3[8], l3[9]]);
    l3[8] -= 1;
    let new = u16::from_be_bytes([l3[8], l3[9]]);
    let c = u16::from_be_bytes([l3[10], l3[11]]);
    l3[10..12].copy_from_slice(&checksum::update16(c, old, new).to_be_bytes());
    b[0..6].copy_from_slice(&dst);
    b[6..12].copy_from_slice(&src);
}

pub(super) fn martian(a: u32) -> bool {
    let first = a >> 24;
    first == 0 || first == 127 || first >= 224
}
