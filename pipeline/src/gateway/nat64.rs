//! The gateway's NAT64 path (RFC 6146): an IPv6 packet to an address of a
//! NAT64 prefix opens or follows a flow whose original tuple is the
//! client's IPv6 one and whose reply tuple is IPv4 (the server's embedded
//! address, and a pool address with a port picked from this worker's share
//! of `nat.ports`, as NAT44's: replies come back to the worker that owns
//! the port); the rules see the IPv6 packet as the client sent it. Each
//! packet is translated (`crate::nat64`) and routed by the router's other
//! family. ICMP errors about a flow are translated with what they quote.
//!
//! Fragments (RFC 7915 4.1, 5.1.1) follow their datagram's first, as
//! NAT44's do (`reass`: virtual reassembly, nothing reassembled): the
//! first goes through conntrack, the rules and NAT with the fragment
//! fields carried over (the identification, the offset, More Fragments;
//! IPv4's 16-bit identification is IPv6's low half, and IPv6's zero-
//! extended IPv4's), a fragment header added or taken away; the L4
//! checksum, which covers the whole datagram, is adjusted in the first by
//! the pseudo-header's change, which is the same for every fragment. The
//! others get their flow's addresses from the first's fate. A fragmented
//! ICMP message's checksum covers (in IPv6) a pseudo-header with the whole
//! message's length, which its first fragment does not know: the first
//! waits until the last has come (`reass`: the receiver needs the last
//! anyway), and is then translated with it. A fragmented UDP datagram
//! without a checksum cannot get one (dropped as `untranslatable`, as RFC
//! 7915 allows).

use super::*;
use crate::nat64::{self as n64, Rewrite};

/// Whether flow `f` is a NAT64 one (IPv6 original, IPv4 reply).
#[inline(always)]
pub(super) fn is_nat64(f: &crate::conntrack::Flow) -> bool {
    !crate::acl::is_v4(f.orig.src) && crate::acl::is_v4(f.reply.src)
}

impl<C: StageClock> Gateway<C> {
    /// The NAT64 translator whose prefix holds `dst`.
    #[inline]
    pub(super) fn nat64_of(&self, dst: u128) -> Option<usize> {
        self.nat.nat64.iter().position(|n| n.contains(dst))
    }

    /// An IPv6 packet (not a fragment; upper layer `proto` at `off`) to an
    /// address of a NAT64 prefix: its flow's, or a new
    /// flow's if it opens one and the rules accept it; translated to
    /// IPv4.
    #[inline(never)]
    pub(super) fn nat64_out<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        proto: u8,
        off: usize,
    ) -> Verdict {
        let b = pkt.bytes();
        let ip = Ipv6Packet::new_unchecked(&b[ETH..]);
        let (src, dst) = (u128::from_be_bytes(ip.src()), u128::from_be_bytes(ip.dst()));
        let end = ETH + 40 + usize::from(ip.payload_len());
        let l4 = &b[ETH + off..end];
        let (sport, dport, flags) = match ports(proto, l4, true) {
            Ok(Some(p))
                if matches!(proto, IpProto::TCP | IpProto::UDP)
                    || (proto == IpProto::ICMPV6 && matches!(l4[0], 128 | 129)) =>
            {
                p
            }
            Ok(Some(_)) => return Verdict::Drop(DropReason::Untranslatable),
            Ok(None) => return self.nat64_error_to4(pkt, in_port, off),
            Err(r) => return Verdict::Drop(r),
        };
        let t = Tuple {
            src,
            dst,
            sport,
            dport,
            proto,
            zone: 0,
        };
        self.nat64_track(pkt, in_port, &t, t.hash(), None, flags, off)
    }

    /// A burst's NAT64 lane ([`plain6`] to a NAT64 prefix: a plain IPv6 TCP, UDP or
    /// echo packet to a NAT64 prefix, its flow's entry on its way when
    /// conntrack had a hint).
    #[inline(never)]
    pub(super) fn nat64_lane<P: Frame>(&mut self, pkt: &mut P, in_port: u16, l: &Lane) -> Verdict {
        self.nat64_track(pkt, in_port, &l.t, l.h, l.hint, l.flags, 40)
    }

    /// [`Gateway::nat64_out`] from the tuple `t` on (hashed `h`; `hint`,
    /// conntrack's hint for it, if the burst looked): conntrack, then the
    /// flow's translation, or a new flow's if the packet opens one.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn nat64_track<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        t: &Tuple,
        h: u64,
        hint: Option<u32>,
        flags: u16,
        off: usize,
    ) -> Verdict {
        let (src, dst, proto) = (t.src, t.dst, t.proto);
        let (sport, dport) = (t.sport, t.dport);
        let b = pkt.bytes();
        let end = ETH + 40 + usize::from(u16::from_be_bytes([b[ETH + 4], b[ETH + 5]]));
        let seg = (proto == IpProto::TCP && self.ct.tcp_window())
            .then(|| Segment::parse(&b[ETH + off..end]));
        let bytes = end - ETH;
        let tcp = proto == IpProto::TCP;
        if let Some((i, reply, conn)) =
            self.ct
                .track_index(t, h, hint, flags, seg.as_ref(), || bytes, in_port)
        {
            let f = self.ct.flow(i);
            if reply || !is_nat64(f) {
                // A plain IPv6 flow's tuple (opened before a NAT64
                // prefix took its destination): forwarded as it is.
                return self.router.process(pkt, in_port);
            }
            let (r, d) = (f.reply, f.nat_deltas(false));
            if conn == crate::conntrack::Conn::Invalid {
                let k = Key {
                    flags,
                    meta: meta(in_port, None, state::INVALID),
                    ..t.key()
                };
                match self.decide(&k) {
                    Action::Accept => {}
                    a => return self.refuse(pkt, in_port, a, false),
                }
            }
            if let Some(v) = self.to4(pkt, in_port, proto, off, &to4_of(&r), d) {
                return v;
            }
            return self.forward4(pkt, in_port, i, &r);
        }
        if let Some(o) = self.spread_owner(in_port, t) {
            return Verdict::Handoff(o);
        }
        let Some(n) = self.nat64_of(dst) else {
            return Verdict::Drop(DropReason::Untranslatable);
        };
        let dst4 = self.nat.nat64[n].extract(dst);
        let hash = crate::fib::tuple_hash(dst, src, proto, dport, sport);
        if !opens_flow(proto, flags) {
            self.ct.count(conntrack::Event::Invalid);
            let k = Key {
                flags,
                meta: meta(in_port, self.router.route4(dst4, hash), state::INVALID),
                ..t.key()
            };
            return match self.decide(&k) {
                // No flow to translate it by.
                Action::Accept => Verdict::Drop(DropReason::Untranslatable),
                a => self.refuse(pkt, in_port, a, tcp),
            };
        }
        let Some((nh, hop, multi)) = self.router.route4_path(dst4, hash) else {
            return self
                .router
                .icmp6_error(pkt, in_port, 1, 0, 0, DropReason::NoRoute);
        };
        // The reply tuple, its index bucket on its way while the rules
        // decide.
        let nat = &self.nat.nat64[n];
        let pool = match nat.pool_for(src) {
            Some(a) => a,
            None => match self.router.source4(nat.out_port) {
                Some((a, _)) => u32::from(a),
                None => return Verdict::Drop(DropReason::NoRoute),
            },
        };
        let proto4 = if proto == IpProto::ICMPV6 {
            IpProto::ICMP
        } else {
            proto
        };
        let mut reply = tuple4(dst4, pool, dport, 0, proto4);
        self.next_port_of(&mut reply);
        let first = reply.hash();
        P::prefetch(self.ct.bucket_of(first));
        let k = Key {
            flags,
            meta: meta(in_port, Some(hop.port), state::NEW),
            ..t.key()
        };
        match self.decide(&k) {
            Action::Accept => {}
            a => {
                if self.ct.exports() {
                    self.ct.export_denied(t, bytes, flags, in_port);
                }
                return self.refuse(pkt, in_port, a, tcp);
            }
        }
        let Some(hr) = self.pick_port(&mut reply, first) else {
            self.nat_events[nat::Event::Exhausted as usize] += 1;
            return Verdict::Drop(DropReason::NatExhausted);
        };
        match self.ct.open_picked(*t, h, reply, hr, flags, seg.as_ref()) {
            Ok(i) => {
                if self.ct.exporting() {
                    self.ct.export_opened(i, bytes, flags, in_port);
                }
                self.nat_events[nat::Event::Mapped as usize] += 1;
                let d = self.ct.flow(i).nat_deltas(false);
                if let Some(v) = self.to4(pkt, in_port, proto, off, &to4_of(&reply), d) {
                    return v;
                }
                // A single-path route (the one the rules saw) fills the
                // flow's cache as it is; a multipath one's path is picked
                // by the fill (as later fills pick it).
                if !multi {
                    let cache = self.ct.hop_mut(i, false);
                    self.router.fill4_route(cache, nh, hop, dst4);
                }
                self.forward4(pkt, in_port, i, &reply)
            }
            Err(Refused::Full) => Verdict::Drop(DropReason::CtFull),
            Err(_) => Verdict::Drop(DropReason::CtClash),
        }
    }

    /// The translated IPv4 packet of NAT64 flow `i` (reply tuple `r`)
    /// forwarded through the flow's cached next hop (filled by its first
    /// packet), as NAT44's established packets are.
    #[inline(always)]
    fn forward4<P: Frame>(&mut self, pkt: &mut P, in_port: u16, i: u32, r: &Tuple) -> Verdict {
        let hop = self.ct.hop_mut(i, false);
        self.router.forward4_cached(
            pkt,
            in_port,
            hop,
            || crate::fib::tuple_hash(r.dst, r.src, r.proto, r.dport, r.sport),
            || {},
        )
    }

    /// The IPv6 packet (upper layer `proto` at `off`) translated to IPv4
    /// as `to` says (`None`: to be routed), or what answers it instead:
    /// one too long for the IPv4 link gets Packet Too Big (its MTU 20
    /// bytes more, RFC 7915 5.1) unless it is a fragment (DF clear: the
    /// router fragments it again).
    #[inline(always)]
    fn to4<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        proto: u8,
        off: usize,
        to: &Rewrite<u32>,
        (base, delta): (u16, u16),
    ) -> Option<Verdict> {
        let b = pkt.bytes();
        let (tc, hop) = ((b[ETH] & 0x0f) << 4 | b[ETH + 1] >> 4, b[ETH + 7]);
        let end = ETH + 40 + usize::from(u16::from_be_bytes([b[ETH + 4], b[ETH + 5]]));
        let l4len = end - ETH - off;
        let total = 20 + l4len;
        // Behind extension headers: a first fragment's fields, carried
        // over (its header found again: the cold way; read before the
        // IPv4 header is written over it). TCP and UDP only.
        let frag = if off == 40 {
            None
        } else {
            let b = pkt.bytes();
            let f = Ipv6Packet::new_unchecked(&b[ETH..])
                .headers()
                .ok()
                .and_then(|(_, _, f)| f)
                .map(|fh| {
                    let fr = &b[ETH + fh..ETH + fh + 8];
                    (u16::from_be_bytes([fr[2], fr[3]]), [fr[6], fr[7]])
                });
            if f.is_some()
                && !matches!(proto, IpProto::TCP | IpProto::UDP)
                && (proto != IpProto::ICMPV6 || self.frag_len == 0)
            {
                return Some(Verdict::Drop(DropReason::Untranslatable));
            }
            f
        };
        // The upper layer's length in its checksum: a fragmented ICMP
        // message's whole.
        let msg_len = if frag.is_some() && proto == IpProto::ICMPV6 {
            self.frag_len
        } else {
            l4len as u32
        };
        // Too long for the IPv4 link: Packet Too Big, unless it is a
        // fragment, which leaves without DF and may be fragmented again
        // (RFC 7915 5.1).
        if frag.is_none() && total > usize::from(self.min_mtu) {
            let mtu = self
                .router
                .route4(to.dst, 0)
                .and_then(|o| self.router.iface(o))
                .map_or(u16::MAX, |i| i.mtu);
            if total > usize::from(mtu) {
                return Some(self.router.icmp6_error(
                    pkt,
                    in_port,
                    2,
                    0,
                    u32::from(mtu) + 20,
                    DropReason::MtuExceeded,
                ));
            }
        }
        let df = n64::df_for(total);
        // (A fragment keeps its own identification's low half.)
        let id = if df || frag.is_some() {
            0
        } else {
            self.nat64_id = self.nat64_id.wrapping_add(1);
            self.nat64_id
        };
        // In place, in one pass over the frame: the L4 header (TCP and
        // UDP by the flow's delta; the rest the long way), then the new
        // Ethernet and IPv4 headers where the IPv6 header ends, and the
        // frame's front moved to them (Ethernet padding cut off).
        let b = pkt.bytes_mut();
        let (l3, l4) = b[ETH..end].split_at_mut(off);
        let fast = base != 0
            && matches!(proto, IpProto::TCP | IpProto::UDP)
            && n64::l4_delta(l4, proto, delta, to.sport, to.dport);
        let proto4 = if fast {
            proto
        } else {
            let (mut src6, mut dst6) = ([0u8; 16], [0u8; 16]);
            src6.copy_from_slice(&l3[8..24]);
            dst6.copy_from_slice(&l3[24..40]);
            match n64::l4_to4(l4, proto, msg_len, src6, dst6, to) {
                Some(p) => p,
                None => return Some(Verdict::Drop(DropReason::Untranslatable)),
            }
        };
        let cut = off - 20;
        b.copy_within(..12, cut);
        b[cut + 12..cut + 14].copy_from_slice(&EtherType::IPV4.to_be_bytes());
        let h = &mut b[cut + ETH..cut + ETH + 20];
        if base != 0 {
            n64::write4_based(
                h,
                base,
                tc,
                total as u16,
                id,
                df,
                hop,
                proto4,
                to.src,
                to.dst,
            );
        } else {
            n64::write4(h, tc, total as u16, id, df, hop, proto4, to.src, to.dst);
        }
        if let Some((fo, id)) = frag {
            frag_fields4(&mut b[cut + ETH..cut + ETH + 20], fo, id);
        }
        if b.len() > end {
            pkt.set_len(end);
        }
        if !pkt.cut_front(cut) {
            return Some(Verdict::Drop(DropReason::Truncated));
        }
        self.nat_events[nat::Event::Nat64To4 as usize] += 1;
        None
    }

    /// An ICMPv4 error (IPv4 header `h` bytes) quoting a packet of NAT64
    /// flow `o` (its original tuple), accepted by the rules: translated
    /// to an ICMPv6 error to the client (RFC 7915 4.2), from the
    /// prefix's address of the error's source.
    pub(super) fn nat64_error_to6<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        h: usize,
        o: &Tuple,
    ) -> Verdict {
        let Some(n) = self.nat64_of(o.dst) else {
            return Verdict::Drop(DropReason::Untranslatable);
        };
        let l3 = &pkt.bytes()[ETH..];
        let src4 = u32::from_be_bytes([l3[12], l3[13], l3[14], l3[15]]);
        let src = self.nat.nat64[n].embed(src4);
        let inner = Rewrite {
            src: o.src,
            dst: o.dst,
            sport: o.sport,
            dport: o.dport,
        };
        let mtu6 = self
            .router
            .route6(o.src, 0)
            .and_then(|p| self.router.iface(p))
            .map_or(1500, |i| i.mtu);
        let mut out = [0u8; n64::MIN_MTU6];
        let Some(len) = n64::error_to6(l3, h, src, o.src, &inner, mtu6, &mut out) else {
            return Verdict::Drop(DropReason::Untranslatable);
        };
        self.nat_events[nat::Event::Nat64To6 as usize] += 1;
        replace_l3(pkt, EtherType::IPV6, &out[..len])
            .unwrap_or_else(|| self.router.process(pkt, in_port))
    }

    /// An ICMPv6 error (upper layer at `off`) to an address of a NAT64
    /// prefix: if it quotes a packet of a NAT64 flow and the rules accept
    /// it, translated to an ICMPv4 error to the server, from the flow's
    /// pool address (RFC 7915 5.2); else dropped.
    #[cold]
    #[inline(never)]
    fn nat64_error_to4<P: Frame>(&mut self, pkt: &mut P, in_port: u16, off: usize) -> Verdict {
        let b = pkt.bytes();
        let ip = Ipv6Packet::new_unchecked(&b[ETH..]);
        let end = ETH + 40 + usize::from(ip.payload_len());
        let l4 = &b[ETH + off..end];
        // The quoted packet went from the server to the client: its
        // reverse is the flow's original tuple.
        let Some(orig) = quoted6(l4).map(|t| t.reverse()) else {
            return Verdict::Drop(DropReason::Untranslatable);
        };
        let i = match self.ct.find(&orig) {
            Some((i, false)) if is_nat64(self.ct.flow(i)) => i,
            _ => {
                self.ct.count(conntrack::Event::Invalid);
                return Verdict::Drop(DropReason::Untranslatable);
            }
        };
        self.ct.count(conntrack::Event::Related);
        let f = *self.ct.flow(i);
        let k = Key {
            src: u128::from_be_bytes(ip.src()),
            dst: u128::from_be_bytes(ip.dst()),
            sport: 0,
            dport: 0,
            proto: IpProto::ICMPV6,
            flags: u16::from_be_bytes([l4[0], l4[1]]),
            meta: meta(in_port, None, state::RELATED) | self.ct_meta(&f),
        };
        match self.decide(&k) {
            Action::Accept => {}
            a => return self.refuse(pkt, in_port, a, false),
        }
        let r = f.reply;
        let inner = Rewrite {
            src: addr4(r.src),
            dst: addr4(r.dst),
            sport: r.sport,
            dport: r.dport,
        };
        let mut out = [0u8; n64::MIN_MTU6];
        let Some(len) = n64::error_to4(
            &b[ETH..end],
            off,
            addr4(r.dst),
            addr4(r.src),
            &inner,
            &mut out,
        ) else {
            return Verdict::Drop(DropReason::Untranslatable);
        };
        self.nat_events[nat::Event::Nat64To4 as usize] += 1;
        replace_l3(pkt, EtherType::IPV4, &out[..len])
            .unwrap_or_else(|| self.router.process(pkt, in_port))
    }
}

/// An IPv4 packet (header validated, TTL above 1) of NAT64 flow `o`
/// (its original tuple), received in the reply direction: translated
/// to IPv6 and routed through the flow's next hop `hop` (the
/// gateway's parts by name: the flow is borrowed from its table), its
/// TCP/UDP checksum updated by the flow's `delta`. A datagram's first
/// fragment gets a fragment header (the others follow it: `reass`; an
/// ICMP message's only with its whole length, `msg_len`, else 0); a
/// packet too long for the IPv6 link is answered with Fragmentation
/// Needed (its MTU 20 bytes less) when it may not be fragmented, else
/// dropped.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(super) fn nat64_in<P: Frame>(
    router: &mut Router,
    (min_mtu, msg_len, nat64s): (u16, u32, &[n64::Nat64]),
    events: &mut [u64],
    pkt: &mut P,
    in_port: u16,
    o: &Tuple,
    hop: &mut crate::route_cache::RouteCache,
    delta: u16,
) -> Verdict {
    let b = pkt.bytes();
    let ip = Ipv4Packet::new_unchecked(&b[ETH..]);
    let (ff, ident) = (ip.flags_frag(), ip.ident());
    let h = ip.header_len();
    let total = usize::from(ip.total_len());
    let (tos, ttl, proto) = (b[ETH + 1], ip.ttl(), ip.protocol());
    // A datagram's first fragment (the others follow it by `reass`):
    // TCP, UDP, and ICMP whose length is known, with a fragment header.
    let frag = ff & 0x3fff != 0;
    let icmp = proto == IpProto::ICMP && msg_len != 0;
    if frag && (ff & 0x1fff != 0 || !(matches!(proto, IpProto::TCP | IpProto::UDP) || icmp)) {
        return Verdict::Drop(DropReason::Untranslatable);
    }
    let (src4, dst4) = (ip.src(), ip.dst());
    let df = ff & 0x4000 != 0;
    // Too big for the IPv6 link: Fragmentation Needed with DF. Without
    // DF, longer than the translator's `lowest-ipv6-mtu` (or the link's
    // MTU, where less): sent as IPv6 fragments no longer (RFC 7915
    // 5.1.1); a packet that is not a fragment gets a fragment header
    // (offset 0, the last), and the router splits it
    // (`Router::fragmentable6`).
    let mut split = None;
    let len6 = 40 + if frag { 8 } else { 0 } + total - h;
    if len6 > usize::from(min_mtu.min(n64::LOWEST_MTU6)) {
        let mtu = router
            .route6(o.src, 0)
            .and_then(|p| router.iface(p))
            .map_or(u16::MAX, |i| i.mtu);
        if df && len6 > usize::from(mtu) {
            return router.icmp4_error(
                pkt,
                in_port,
                3,
                4,
                u32::from(mtu - 20),
                DropReason::MtuExceeded,
            );
        }
        let most = lowest_mtu6(nat64s, o.dst);
        if !df && len6 > usize::from(most.min(mtu)) {
            split = Some(most);
        }
    }
    let fh = if frag || split.is_some() { 8 } else { 0 };
    let to = Rewrite {
        src: o.dst,
        dst: o.src,
        sport: o.dport,
        dport: o.sport,
    };
    let end = ETH + total;
    let l4 = &mut pkt.bytes_mut()[ETH + h..end];
    let fast = delta != 0
        && matches!(proto, IpProto::TCP | IpProto::UDP)
        && n64::l4_delta(l4, proto, delta, to.sport, to.dport);
    let proto6 = if fast {
        proto
    } else {
        let len = if frag && icmp {
            msg_len
        } else {
            (total - h) as u32
        };
        match n64::l4_to6(l4, proto, len, src4, dst4, &to) {
            Some(p) => p,
            None => return Verdict::Drop(DropReason::Untranslatable),
        }
    };
    let mut eth = [0u8; 12];
    eth.copy_from_slice(&pkt.bytes()[..12]);
    if pkt.bytes().len() > end {
        pkt.set_len(end);
    }
    if !resize_l3(pkt, h, 40 + fh) {
        return Verdict::Drop(DropReason::Truncated);
    }
    let b = pkt.bytes_mut();
    b[..12].copy_from_slice(&eth);
    b[12..14].copy_from_slice(&EtherType::IPV6.to_be_bytes());
    if fh != 0 {
        write_frag6(
            &mut b[ETH..],
            tos,
            total - h,
            proto6,
            ttl,
            (to.src, to.dst),
            (ff, ident),
        );
    } else {
        n64::write6(
            &mut b[ETH..ETH + 40],
            tos,
            (total - h) as u16,
            proto6,
            ttl,
            to.src,
            to.dst,
        );
    }
    events[nat::Event::Nat64To6 as usize] += 1;
    match split {
        None => router.forward6_cached(pkt, in_port, hop),
        Some(most) => router.fragmentable6(most, |r| r.ipv6(pkt, in_port)),
    }
}

/// The `lowest-ipv6-mtu` of the NAT64 translator whose prefix holds `a`
/// (RFC 7915's default where none does).
pub(super) fn lowest_mtu6(nat64: &[n64::Nat64], a: u128) -> u16 {
    nat64
        .iter()
        .find(|n| n.contains(a))
        .map_or(n64::LOWEST_MTU6, |n| n.lowest_mtu6)
}

/// An IPv4 header `h` (written, 20 bytes) given an IPv6 fragment's
/// fields: its fragment offset word `fo` (offset and More Fragments) and
/// the low half `id` of its identification; its checksum made again.
fn frag_fields4(h: &mut [u8], fo: u16, id: [u8; 2]) {
    let ff = fo >> 3 | if fo & 1 != 0 { 0x2000 } else { 0 };
    h[4..6].copy_from_slice(&id);
    h[6..8].copy_from_slice(&ff.to_be_bytes());
    h[10..12].fill(0);
    let c = crate::checksum::checksum(h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
}

/// Writes an IPv6 header and a fragment header (48 bytes at the front of
/// `l3`) for an IPv4 fragment: `len` bytes after its header, the upper
/// layer `next`, its flags and fragment offset word `ff` and its
/// identification `ident`.
fn write_frag6(
    l3: &mut [u8],
    tos: u8,
    len: usize,
    next: u8,
    ttl: u8,
    (src, dst): (u128, u128),
    (ff, ident): (u16, u16),
) {
    n64::write6(&mut l3[..40], tos, (len + 8) as u16, 44, ttl, src, dst);
    let fo = (ff & 0x1fff) << 3 | u16::from(ff & 0x2000 != 0);
    l3[40..48].copy_from_slice(&[
        next,
        0,
        (fo >> 8) as u8,
        fo as u8,
        0,
        0,
        (ident >> 8) as u8,
        ident as u8,
    ]);
}

/// A NAT64 datagram's later fragment from the client (the IPv6 frame
/// `f`, its fragment header found again) as IPv4 from `src` to `dst`,
/// in place: where the frame now starts in `f` and ends; `None` for
/// anything else (not such a fragment, not TCP, UDP or ICMPv6, cut
/// short).
pub(super) fn frag6_to4(f: &mut [u8], src: u32, dst: u32) -> Option<(usize, usize)> {
    let ip = Ipv6Packet::new_checked(f.get(ETH..)?).ok()?;
    let (proto, fh, _) = ip.headers().ok()?;
    let end = ETH + 40 + usize::from(ip.payload_len());
    let (tc, hop) = ((f[ETH] & 0x0f) << 4 | f[ETH + 1] >> 4, ip.hop_limit());
    let fr = f.get(ETH + fh..ETH + fh + 8)?;
    let (next, fo, id) = (fr[0], u16::from_be_bytes([fr[2], fr[3]]), [fr[6], fr[7]]);
    if proto != 44
        || !matches!(next, IpProto::TCP | IpProto::UDP | IpProto::ICMPV6)
        || end > f.len()
    {
        return None;
    }
    let next = if next == IpProto::ICMPV6 {
        IpProto::ICMP
    } else {
        next
    };
    let payload = end.checked_sub(ETH + fh + 8)?;
    let cut = fh + 8 - 20;
    f.copy_within(..12, cut);
    f[cut + 12..cut + 14].copy_from_slice(&EtherType::IPV4.to_be_bytes());
    let h = &mut f[cut + ETH..cut + ETH + 20];
    n64::write4(h, tc, (20 + payload) as u16, 0, false, hop, next, src, dst);
    frag_fields4(h, fo, id);
    Some((cut, end))
}

/// A NAT64 datagram's later fragment from the server (the IPv4 frame
/// `pkt`) as IPv6 from `src` to `dst`, with a fragment header; false for
/// anything else (not TCP, UDP or ICMP, no room).
pub(super) fn frag4_to6<P: Frame>(pkt: &mut P, src: u128, dst: u128) -> bool {
    let b = pkt.bytes();
    let ip = Ipv4Packet::new_unchecked(&b[ETH..]);
    let (h, total, proto) = (ip.header_len(), usize::from(ip.total_len()), ip.protocol());
    let (tos, ttl, ff, ident) = (b[ETH + 1], ip.ttl(), ip.flags_frag(), ip.ident());
    if !matches!(proto, IpProto::TCP | IpProto::UDP | IpProto::ICMP)
        || ETH + total > b.len()
        || total < h
    {
        return false;
    }
    let proto = if proto == IpProto::ICMP {
        IpProto::ICMPV6
    } else {
        proto
    };
    let mut eth = [0u8; 12];
    eth.copy_from_slice(&b[..12]);
    if b.len() > ETH + total {
        pkt.set_len(ETH + total);
    }
    if !resize_l3(pkt, h, 48) {
        return false;
    }
    let b = pkt.bytes_mut();
    b[..12].copy_from_slice(&eth);
    b[12..14].copy_from_slice(&EtherType::IPV6.to_be_bytes());
    write_frag6(
        &mut b[ETH..],
        tos,
        total - h,
        proto,
        ttl,
        (src, dst),
        (ff, ident),
    );
    true
}

/// What a packet of a NAT64 flow with reply tuple `r` leaves with as
/// IPv4.
fn to4_of(r: &Tuple) -> Rewrite<u32> {
    Rewrite {
        src: addr4(r.dst),
        dst: addr4(r.src),
        sport: r.dport,
        dport: r.sport,
    }
}

/// Makes room for a network header of `new` bytes where one of `old` is
/// (the frame's front moved, or without the headroom, its payload): the
/// Ethernet header's bytes are then unspecified. False when the buffer
/// cannot hold it.
fn resize_l3<P: Frame>(pkt: &mut P, old: usize, new: usize) -> bool {
    if new <= old {
        return pkt.cut_front(old - new);
    }
    let d = new - old;
    if pkt.grow_front(d) {
        return true;
    }
    let len = pkt.bytes().len();
    if !pkt.set_len(len + d) {
        return false;
    }
    pkt.bytes_mut().copy_within(ETH + old..len, ETH + new);
    true
}

/// The frame's network layer replaced by `l3` (of `ether` type), the
/// Ethernet addresses kept: `None` when done (to be routed), else the
/// drop.
fn replace_l3<P: Frame>(pkt: &mut P, ether: u16, l3: &[u8]) -> Option<Verdict> {
    if !pkt.set_len(ETH + l3.len()) {
        return Some(Verdict::Drop(DropReason::Truncated));
    }
    let b = pkt.bytes_mut();
    b[12..14].copy_from_slice(&ether.to_be_bytes());
    b[ETH..].copy_from_slice(l3);
    None
}
