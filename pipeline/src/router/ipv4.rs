//! IPv4 forwarding (RFC 1812): header checks, the router's own
//! addresses (echo), TTL and MTU (fragmentation: `frag`), the route and
//! neighbour lookups, the TTL
//! decrement with its incremental checksum update, and the per-flow cached
//! path the gateway uses.

use super::{options, Event, Router};
use crate::checksum;
use crate::fib::NextHop;
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
        if ip.header_len() > 20 && !self.options_outside {
            return self.with_options4(pkt, in_port, |r, pkt| r.ipv4_valid(pkt, in_port));
        }
        self.ipv4_valid(pkt, in_port)
    }

    /// An IPv4 packet with options (its header validated) that `route`
    /// forwards or answers: see [`Router::options4`] and
    /// [`Router::stamp4`].
    #[cold]
    #[inline(never)]
    fn with_options4<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        route: impl FnOnce(&mut Self, &mut P) -> Verdict,
    ) -> Verdict {
        match self.options4(pkt, in_port) {
            Ok(o) => {
                let v = route(self, pkt);
                self.stamp4(pkt, &o, v);
                v
            }
            Err(v) => v,
        }
    }

    /// The options of IPv4 packet `pkt` (its header validated, longer
    /// than 20 bytes), to be stamped when it leaves ([`Router::stamp4`]),
    /// or what becomes of it instead: one with a malformed option is
    /// answered with Parameter Problem, one with a source route dropped
    /// (to the router itself too, as Linux drops it).
    #[cold]
    #[inline(never)]
    pub(crate) fn options4(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
    ) -> Result<options::Options, Verdict> {
        let b = pkt.bytes();
        let ip = Ipv4Packet::new_unchecked(&b[ETHERNET_HEADER_LEN..]);
        let h = ip.header_len();
        match options::check(&b[ETHERNET_HEADER_LEN..ETHERNET_HEADER_LEN + h]) {
            Ok(o) if o.source_route => Err(Verdict::Drop(DropReason::SourceRoute)),
            Ok(o) => Ok(o),
            Err(at) => Err(self.icmp4_error(
                pkt,
                in_port,
                12,
                0,
                (at as u32) << 24,
                DropReason::Malformed,
            )),
        }
    }

    /// Stamps the Record Route and Timestamp options `o` of a packet whose
    /// verdict is `v`, if it is forwarded with its header's options (not
    /// turned into an ICMP error): the address of the interface it leaves
    /// by, the time.
    #[cold]
    #[inline(never)]
    pub(crate) fn stamp4(&mut self, pkt: &mut impl Frame, o: &options::Options, v: Verdict) {
        let Verdict::Forward(port) = v else {
            return;
        };
        if !o.stamps() {
            return;
        }
        let b = pkt.bytes();
        let same = b.len() > ETHERNET_HEADER_LEN + 20
            && b[12..14] == [0x08, 0x00]
            && o.fits(usize::from(b[ETHERNET_HEADER_LEN] & 0x0f) * 4);
        if !same {
            return;
        }
        let out = self.source4(port).map(|(a, _)| a.octets());
        let local = |a: u32| self.is_local4(a);
        if options::stamp(pkt.bytes_mut(), o, out, options::now_ms(), local) {
            self.count(Event::OptionsStamped);
        }
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
            return self.fragment4(pkt, in_port, mtu);
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
    /// ([`Router::ipv4_valid`]). `rewriting` is called when the cached
    /// path takes the packet, just before its header is rewritten (the
    /// gateway's stage clock marks the route's end there). Inlined into
    /// the gateway's established path; the fill is out of line.
    #[inline(always)]
    pub(crate) fn forward4_cached(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        cache: &mut RouteCache,
        hash: impl FnOnce() -> u32,
        rewriting: impl FnOnce(),
    ) -> Verdict {
        if cache.generation != self.flow_generation() && !self.fill4(pkt.bytes(), cache, hash) {
            return self.ipv4_valid(pkt, in_port);
        }
        let Some(oif) = self
            .cfg
            .interfaces
            .get(usize::from(cache.port))
            .filter(|i| !i.down)
        else {
            return self.ipv4_valid(pkt, in_port);
        };
        let (mtu, src) = (oif.mtu, oif.mac.0);
        let Some(h) = header4(pkt.bytes_mut()) else {
            return self.ipv4_valid(pkt, in_port);
        };
        if u16::from_be_bytes([h[16], h[17]]) > mtu {
            return self.ipv4_valid(pkt, in_port);
        }
        rewriting();
        rewrite_header4(h, cache.mac, src);
        Verdict::Forward(cache.port)
    }

    /// Fills `cache` for the flow of IPv4 frame `b` (a miss of
    /// [`Router::forward4_cached`]): false when its destination is martian
    /// or has no route or no resolved neighbour (the full way then says
    /// what happens to it).
    #[cold]
    #[inline(never)]
    fn fill4(&mut self, b: &[u8], cache: &mut RouteCache, hash: impl FnOnce() -> u32) -> bool {
        let Some(h) = b.get(..ETHERNET_HEADER_LEN + 20) else {
            return false;
        };
        // A flow's packets (in one direction) go to one destination:
        // checked to be routable once, when the cache is filled.
        let dst = u32::from_be_bytes([h[30], h[31], h[32], h[33]]);
        if martian(dst) {
            return false;
        }
        let Some((port, mac)) = self.resolve4(dst, hash) else {
            return false;
        };
        *cache = RouteCache {
            generation: self.flow_generation(),
            port,
            mac: mac.0,
        };
        true
    }

    /// Fills `cache` for a flow to `dst` over the single-path route
    /// `(nh, hop)` the caller has looked up (the gateway's new flow, which
    /// routed it for the rules), when the neighbour is resolved: what
    /// [`Router::forward4_cached`] would fill it with, without the lookups
    /// again. A martian destination or the router's own is left to it.
    #[inline]
    pub(crate) fn fill4_route(&mut self, cache: &mut RouteCache, nh: u32, hop: NextHop, dst: u32) {
        if martian(dst) || self.is_local4(dst) {
            return;
        }
        if let Ok(mac) = self.hop_mac4(nh, hop, dst) {
            *cache = RouteCache {
                generation: self.flow_generation(),
                port: hop.port,
                mac: mac.0,
            };
        }
    }

    /// Packets for the router itself: answer echo requests, consume the rest.
    pub(super) fn local4(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        let Some(mac) = self.iface(in_port).map(|i| i.mac) else {
            return Verdict::Drop(DropReason::ToRouter);
        };
        let is_echo = {
            let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ETHERNET_HEADER_LEN..]);
            ip.protocol() == IpProto::ICMP
                && ip.flags_frag() & 0x3fff == 0
                && IcmpPacket::new_checked(ip.payload())
                    .is_ok_and(|i| (i.msg_type(), i.code()) == (8, 0))
        };
        if !is_echo {
            return self.for_router(pkt, in_port, true);
        }
        if let Some(v) = self.echo_rule(pkt, in_port) {
            return v;
        }
        let b = pkt.bytes_mut();
        let mut ip = Ipv4Packet::new_unchecked(&mut b[ETHERNET_HEADER_LEN..]);
        let h = ip.header_len();
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
            self.for_router(pkt, in_port, false)
        } else {
            Verdict::Drop(DropReason::NotForUs)
        }
    }
}

/// Forwards an IPv4 frame whose TTL is above 1: decrements the TTL
/// (with its checksum) and sets the destination and source MACs.
#[inline(always)]
pub(super) fn forward4_rewrite(b: &mut [u8], dst: [u8; 6], src: [u8; 6]) {
    if let Some(h) = header4(b) {
        rewrite_header4(h, dst, src);
    }
}

/// The Ethernet and IPv4 headers of frame `b` (a 20-byte IPv4 header's
/// worth), as a fixed array: no bounds checks on what is read and
/// written through it.
#[inline(always)]
fn header4(b: &mut [u8]) -> Option<&mut [u8; ETHERNET_HEADER_LEN + 20]> {
    b.get_mut(..ETHERNET_HEADER_LEN + 20)?.try_into().ok()
}

/// [`forward4_rewrite`] on the headers.
#[inline(always)]
fn rewrite_header4(h: &mut [u8; ETHERNET_HEADER_LEN + 20], dst: [u8; 6], src: [u8; 6]) {
    dec_ttl4(h);
    h[0..6].copy_from_slice(&dst);
    h[6..12].copy_from_slice(&src);
}

/// Decrements the TTL (above 0) of the IPv4 header in the Ethernet frame
/// headers `h` and updates the header checksum. The TTL is the high byte
/// of the word at 8, which drops by 0x100: RFC 1624's
/// HC' = ~(~HC + ~m + m') with ~m + m' = 0xfeff whatever m is (nothing
/// borrows: the TTL is not 0), which is HC + 0x0100 with the end-around
/// carry. It is added as Linux's `ip_decrease_ttl` adds it: in native byte
/// order (RFC 1071 2.B: 0x0100 is the bytes `[1, 0]`), the carry added
/// back by a compare, a sum of exactly 0xffff becoming 0 as equation 3
/// makes it (neither form ever gives 0xffff).
#[inline(always)]
pub(super) fn dec_ttl4<const N: usize>(h: &mut [u8; N]) {
    const { assert!(N >= ETHERNET_HEADER_LEN + 12) };
    let c = u32::from(u16::from_ne_bytes([h[24], h[25]])) + u32::from(u16::from_ne_bytes([1, 0]));
    let c = c + u32::from(c >= 0xffff);
    h[22] -= 1;
    h[24..26].copy_from_slice(&(c as u16).to_ne_bytes());
}

/// Destinations and sources a router never forwards for (RFC 1812 5.3.7):
/// 0/8, 127/8, multicast and reserved 224/3, limited broadcast.
pub(super) fn martian(a: u32) -> bool {
    let first = a >> 24;
    first == 0 || first == 127 || first >= 224
}
