//! The gateway's IPv6 path: tracked and filtered as IPv4 is; masquerade
//! (a flow from an inside prefix leaves from the outside interface's
//! address and a NAT port, its replies matched before the router takes
//! them as its own) and prefix translation (NPTv6, stateless: the
//! destination translated back inside as a packet comes in, before
//! conntrack and the rules; the source out as it leaves, after them), and
//! packets to a NAT64 prefix handed to `nat64`; fragments followed by
//! their first fragment; Neighbor Discovery and packets for the router
//! straight to the router.

use super::*;

impl<C: StageClock> Gateway<C> {
    pub(super) fn ipv6<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        let v = self.ipv6_inner(pkt, in_port);
        if self.nat.npt.is_empty() {
            return v;
        }
        // What leaves by a translating interface, as it leaves: besides
        // forwarded packets (translated before the router, which may hold
        // them for a neighbour), the router's own ICMPv6 errors about a
        // packet that came in translated (Time Exceeded, Packet Too Big,
        // unreachable), whose quote must name the address its sender
        // used, or its stack does not match the error to a socket.
        match v {
            Verdict::Forward(o) => {
                let b = pkt.bytes();
                let at = Ipv6Packet::new_checked(&b[ETH..]).and_then(|ip| ip.headers());
                match at {
                    Ok((proto, off, _)) if !self.npt_out(pkt, Some(o), proto, off) => {
                        Verdict::Drop(DropReason::NotRoutable)
                    }
                    _ => v,
                }
            }
            v => v,
        }
    }

    fn ipv6_inner<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        let b = pkt.bytes();
        let ip = match Ipv6Packet::new_checked(&b[ETH..]) {
            Ok(ip) => ip,
            Err(_) => return self.router.process(pkt, in_port),
        };
        let (proto, off, frag) = match ip.headers() {
            Ok(x) => x,
            Err(_) => return self.router.process(pkt, in_port),
        };
        let npt = !self.nat.npt.is_empty();
        if npt && crate::npt::inbound(&self.nat.npt, in_port, pkt.bytes_mut(), proto, off).is_err()
        {
            return Verdict::Drop(DropReason::NotRoutable);
        }
        let ip = Ipv6Packet::new_unchecked(&pkt.bytes()[ETH..]);
        let dst = u128::from_be_bytes(ip.dst());
        if ip.hop_limit() <= 1 || dst >> 120 == 0xff {
            return self.router.process(pkt, in_port);
        }
        let src = u128::from_be_bytes(ip.src());
        if crate::router::link_scoped(src, dst) {
            // The router's own (link-local echo), or not forwarded.
            return self.router.process(pkt, in_port);
        }
        if self.router.is_local6(dst) {
            // To the router's own address: a masqueraded flow's reply,
            // or the router's.
            if self.nat.masq6.is_empty() || proto == 44 || frag.is_some() {
                return self.router.process(pkt, in_port);
            }
            match self.masq6_reply(pkt, in_port, proto, off) {
                Some(v) => return v,
                None => return self.router.process(pkt, in_port),
            }
        }
        let nat64 = !self.nat.nat64.is_empty() && self.nat64_of(dst).is_some();
        if proto == 44 || frag.is_some() {
            return self.fragment6(pkt, in_port, proto, off, frag, nat64);
        }
        if nat64 {
            return self.nat64_out(pkt, in_port, proto, off);
        }
        self.l4_6(pkt, in_port, proto, off, true)
    }

    /// A burst's plain IPv6 lane ([`plain6`], not to a NAT64 prefix nor
    /// the router, NPTv6 off): its flow tracked with the hash and hint
    /// the burst found, then translated if masqueraded and forwarded
    /// through the flow's cached next hop (the verdict and bytes
    /// [`Gateway::l4_6`] gives a tracked flow's packet); a
    /// packet of no flow (a new flow's first) goes to [`Gateway::new6`]
    /// with what the lane found.
    #[inline(always)]
    pub(super) fn track6<P: Frame>(&mut self, pkt: &mut P, in_port: u16, l: &Lane) -> Verdict {
        let t = &l.t;
        let b = pkt.bytes();
        let end = ETH + 40 + usize::from(u16::from_be_bytes([b[ETH + 4], b[ETH + 5]]));
        let seg = (t.proto == IpProto::TCP && self.ct.tcp_window())
            .then(|| Segment::parse(&b[ETH + 40..end]));
        let bytes = end - ETH;
        let Some((i, reply, conn)) =
            self.ct
                .track_index(t, l.h, l.hint, l.flags, seg.as_ref(), || bytes, in_port)
        else {
            self.clock.mark(Stage::Conntrack);
            return self.new6(pkt, in_port, l, seg.as_ref());
        };
        self.clock.mark(Stage::Conntrack);
        if conn == crate::conntrack::Conn::Invalid {
            let out = self
                .router
                .route6(t.dst, self.router.packet_hash(&b[ETH..]));
            return self.invalid(pkt, in_port, t, l.flags, out);
        }
        let f = self.ct.flow(i);
        if f.nat() {
            let (to, d) = (f.translated(reply), f.nat_deltas(reply).1);
            nat::rewrite6_flow(&mut pkt.bytes_mut()[ETH..], t.proto, 40, &to, d);
            self.clock.mark(Stage::Nat);
        }
        // The flow's next hop, cached in it as IPv4's are (filled from
        // the route and neighbour tables when stale; what it cannot take
        // goes the router's full way).
        let hop = self.ct.hop_mut(i, reply);
        self.router.forward6_cached(pkt, in_port, hop)
    }

    /// A plain IPv6 lane's packet whose tuple conntrack has just looked
    /// up (hashed `l.h`) and not found: [`Gateway::l4_6`]'s way for a
    /// packet of no flow (the same verdicts, bytes and counters), from
    /// what the lane found instead of the frame parsed again, the tuple
    /// not looked up again nor hashed, and the route looked up once: the
    /// rules' output port, and, a single-path route, the new flow's
    /// cached next hop, through which the packet leaves (a multipath
    /// route's path is picked by the packet as sent, after masquerade,
    /// as every later fill picks it). Out of line: the established path
    /// it branches from keeps nothing for it.
    #[inline(never)]
    fn new6<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        l: &Lane,
        seg: Option<&Segment>,
    ) -> Verdict {
        let (t, h, flags) = (l.t, l.h, l.flags);
        let proto = t.proto;
        let b = pkt.bytes();
        let bytes = 40 + usize::from(u16::from_be_bytes([b[ETH + 4], b[ETH + 5]]));
        let path = self
            .router
            .route6_path(t.dst, self.router.packet_hash(&b[ETH..]));
        let out = path.map(|(_, hop, _)| hop.port);
        self.clock.mark(Stage::Route);
        if !opens_flow(proto, flags) {
            self.ct.count(conntrack::Event::Invalid);
            return self.invalid(pkt, in_port, &t, flags, out);
        }
        let Some((_, hop, multi)) = path else {
            return self.router.process(pkt, in_port);
        };
        let out = hop.port;
        let k = Key {
            flags,
            meta: meta(in_port, Some(out), state::NEW),
            ..t.key()
        };
        let action = self.decide(&k);
        self.clock.mark(Stage::Firewall);
        match action {
            Action::Accept => {}
            a => {
                if self.ct.exports() {
                    self.ct.export_denied(&t, bytes, flags, in_port);
                }
                return self.refuse(pkt, in_port, a, proto == IpProto::TCP);
            }
        }
        // IPv6 masquerade's reply tuple, found untracked by the pick.
        let opened = match self.masq6_pick(&t, flags, out) {
            Err(v) => return v,
            Ok(Some((r, hr))) => {
                self.clock.mark(Stage::Nat);
                self.ct.open_picked(t, h, r, hr, flags, seg)
            }
            Ok(None) => {
                let r = t.reverse();
                self.ct.open_missed(t, h, r, r.hash(), flags, seg)
            }
        };
        self.clock.mark(Stage::Conntrack);
        let i = match self.opened6(pkt, opened, bytes, flags, in_port, proto, 40) {
            Ok(i) => i,
            Err(v) => return v,
        };
        if self.ct.flow(i).nat() {
            self.clock.mark(Stage::Nat);
        }
        let cache = self.ct.hop_mut(i, false);
        if !multi {
            self.router.fill6_route(cache, hop, t.dst);
        }
        let v = self.router.forward6_cached(pkt, in_port, cache);
        self.clock.mark(Stage::Rewrite);
        v
    }

    /// An IPv6 packet (upper layer `proto` at `off`) to one of the
    /// router's addresses, with IPv6 masquerade on: a masqueraded flow's
    /// reply (or an ICMPv6 error about one of its packets) goes the
    /// gateway's way (`Some`); one whose port another worker owns is
    /// handed to it; anything else is the router's (`None`).
    #[cold]
    #[inline(never)]
    fn masq6_reply<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        proto: u8,
        off: usize,
    ) -> Option<Verdict> {
        let b = pkt.bytes();
        let ip = Ipv6Packet::new_unchecked(&b[ETH..]);
        let end = ETH + 40 + usize::from(ip.payload_len());
        let l4 = b.get(ETH + off..end)?;
        let (src, dst) = (u128::from_be_bytes(ip.src()), u128::from_be_bytes(ip.dst()));
        let t = match ports(proto, l4, true) {
            Ok(Some((sport, dport, flags))) if has_ports6(proto, flags) => Tuple {
                src,
                dst,
                sport,
                dport,
                proto,
                zone: 0,
            },
            // An ICMPv6 error: its quote, reversed, is the reply tuple of
            // the flow it is about.
            Ok(None) => quoted6(l4)?.reverse(),
            _ => return None,
        };
        if self.ct.find(&t).is_some() {
            return Some(self.l4_6(pkt, in_port, proto, off, true));
        }
        // Another worker's port: handed over as NAT44's replies are.
        if self.workers > 1
            && has_ports(if t.proto == IpProto::ICMPV6 {
                IpProto::ICMP
            } else {
                t.proto
            })
        {
            if let Some(o) = self.nat.ports.owner(t.dport, self.workers) {
                if o != self.worker {
                    return Some(Verdict::Handoff(o));
                }
            }
        }
        None
    }

    /// A packet about to leave by `out`: its inside source translated to
    /// the outside prefix there (and, in an ICMPv6 error, the destination
    /// of the packet it quotes), if `out` has a prefix translation. False
    /// if an address cannot be translated (RFC 6296 3.5: dropped).
    #[inline]
    fn npt_out<P: Frame>(&self, pkt: &mut P, out: Option<u16>, proto: u8, off: usize) -> bool {
        match out {
            Some(o) if !self.nat.npt.is_empty() => {
                crate::npt::outbound(&self.nat.npt, o, pkt.bytes_mut(), proto, off).is_ok()
            }
            _ => true,
        }
    }

    /// An IPv6 fragment not for the router, whose extension headers end
    /// with upper-layer protocol `proto` at `off` (a datagram's first,
    /// whose fragment header is at `frag`), or with the fragment header at
    /// `off` (`proto` 44: any other): as [`Gateway::fragment4`]; to a
    /// NAT64 prefix (`nat64`), translated to IPv4 (`nat64`'s fragments).
    #[cold]
    #[inline(never)]
    pub(super) fn fragment6<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        proto: u8,
        off: usize,
        frag: Option<usize>,
        nat64: bool,
    ) -> Verdict {
        let b = pkt.bytes();
        let ip = Ipv6Packet::new_unchecked(&b[ETH..]);
        let end = 40 + usize::from(ip.payload_len());
        let fh = frag.unwrap_or(off);
        // (A later fragment's header was found within the frame, not
        // checked against the payload length.)
        if fh + 8 > end {
            return Verdict::Drop(DropReason::Truncated);
        }
        let f = &b[ETH + fh..ETH + fh + 8];
        let fo = u16::from_be_bytes([f[2], f[3]]);
        let key = reass::Key {
            src: u128::from_be_bytes(ip.src()),
            dst: u128::from_be_bytes(ip.dst()),
            id: u32::from_be_bytes([f[4], f[5], f[6], f[7]]),
            proto: f[0],
            v6: true,
        };
        let (at, len, last) = (u32::from(fo >> 3) * 8, (end - fh - 8) as u32, fo & 1 == 0);
        if frag.is_some() {
            self.first_fragment = true;
            let v = self.first_fragment6(
                pkt,
                in_port,
                (proto, off, fh, end),
                &key,
                (len, last),
                nat64,
            );
            self.first_fragment = false;
            return v;
        }
        self.later(pkt, in_port, &key, (at, len, last), ETH + end)
    }

    /// [`Gateway::fragment6`]'s datagram's first fragment (`key`; upper
    /// layer `proto` at `off`, the fragment header at `fh`, the packet's
    /// end at `end` past its Ethernet header; `len` payload bytes,
    /// `last`: the datagram's last too).
    fn first_fragment6<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        (proto, off, fh, end): (u8, usize, usize, usize),
        key: &reass::Key,
        (len, last): (u32, bool),
        nat64: bool,
    ) -> Verdict {
        let b = pkt.bytes();
        let t = match ports(proto, &b[ETH + off..ETH + end], true) {
            Ok(Some((sport, dport, _))) => Some(Tuple {
                src: key.src,
                dst: key.dst,
                sport,
                dport,
                proto,
                zone: 0,
            }),
            _ => None,
        };
        let v = if !nat64 {
            self.l4_6(pkt, in_port, proto, off, false)
        } else if proto == IpProto::ICMPV6 && matches!(b.get(ETH + off), Some(128 | 129)) {
            // A fragmented ICMPv6 message: its checksum's pseudo-
            // header has the whole message's length, known once the
            // last fragment came (its own first: it waits for that).
            // The message starts `off - fh - 8` bytes into the
            // fragmentable part.
            let whole = if last {
                Some(len)
            } else {
                self.reass.length(key)
            };
            match whole.and_then(|l| l.checked_sub((off - fh - 8) as u32)) {
                Some(l) if l > 0 => {
                    self.frag_len = l;
                    let v = self.nat64_out(pkt, in_port, proto, off);
                    self.frag_len = 0;
                    v
                }
                Some(_) => Verdict::Drop(DropReason::Truncated),
                None => return self.hold_first(pkt, in_port, key, ETH + end),
            }
        } else if matches!(proto, IpProto::TCP | IpProto::UDP) {
            self.nat64_out(pkt, in_port, proto, off)
        } else {
            Verdict::Drop(DropReason::Untranslatable)
        };
        if !last {
            let fate = self.fate(v, t, false);
            self.reass.first(key, len, last, fate);
        }
        v
    }

    /// The part of [`Gateway::ipv6`] from the L4 header on (protocol
    /// `proto` at `off`), for a packet the router does not take itself.
    pub(super) fn l4_6<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        proto: u8,
        off: usize,
        whole: bool,
    ) -> Verdict {
        let b = pkt.bytes();
        let ip = Ipv6Packet::new_unchecked(&b[ETH..]);
        let dst = u128::from_be_bytes(ip.dst());
        let src = u128::from_be_bytes(ip.src());
        let end = ETH + 40 + usize::from(ip.payload_len());
        let l4 = &b[ETH + off..end];
        if proto == IpProto::ICMPV6 && l4.first().is_some_and(|t| (133..=137).contains(t)) {
            return self.router.process(pkt, in_port);
        }
        let out = self.router.route6(dst, self.router.packet_hash(&b[ETH..]));
        let (sport, dport, flags) = match ports(proto, l4, true) {
            Ok(Some(p)) => p,
            Ok(None) => {
                // ICMPv6 error: related if the quoted packet's flow is
                // tracked.
                let hit = quoted6(l4).and_then(|t| self.ct.find(&t.reverse()));
                let st = if hit.is_some() {
                    self.ct.count(conntrack::Event::Related);
                    state::RELATED
                } else {
                    self.ct.count(conntrack::Event::Invalid);
                    state::INVALID
                };
                // About a masqueraded flow's packet (sent from the
                // router's address): back to the inside host, the quote
                // as it sent it.
                let masq = hit
                    .map(|(i, reply)| (*self.ct.flow(i), reply))
                    .filter(|(f, reply)| f.nat() && *reply && !nat64::is_nat64(f))
                    .map(|(f, _)| f.orig);
                let out = match masq {
                    Some(o) => self
                        .router
                        .route6(o.src, self.router.packet_hash(&b[ETH..])),
                    None => out,
                };
                let k = Key {
                    src,
                    dst,
                    sport: 0,
                    dport: 0,
                    proto,
                    // The error's ICMPv6 type and code.
                    flags: u16::from_be_bytes([l4[0], l4[1]]),
                    meta: meta(in_port, out, st),
                };
                return match self.decide(&k) {
                    Action::Accept if !self.npt_out(pkt, out, proto, off) => {
                        Verdict::Drop(DropReason::NotRoutable)
                    }
                    Action::Accept => {
                        if let Some(o) = masq {
                            let sport = o.sport;
                            nat::rewrite_icmp_error6(
                                &mut pkt.bytes_mut()[ETH..],
                                off,
                                o.src,
                                sport,
                            );
                        }
                        self.router.process(pkt, in_port)
                    }
                    a => self.refuse(pkt, in_port, a, false),
                };
            }
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
        // The TCP segment for window tracking (not a fragment's: its
        // length is the datagram's).
        let seg = (proto == IpProto::TCP && whole && self.ct.tcp_window()).then(|| {
            let b = pkt.bytes();
            let end = ETH + 40 + usize::from(Ipv6Packet::new_unchecked(&b[ETH..]).payload_len());
            Segment::parse(&b[ETH + off..end])
        });
        let bytes = 40 + usize::from(Ipv6Packet::new_unchecked(&pkt.bytes()[ETH..]).payload_len());
        if let Some((i, reply)) = self.ct.find(&t) {
            if self.ct.advance(i, reply, flags, seg.as_ref()) == crate::conntrack::Conn::Invalid {
                return self.invalid(pkt, in_port, &t, flags, out);
            }
            self.ct.account(i, reply, bytes, flags, in_port);
            let f = self.ct.flow(i);
            if f.nat() {
                // Masqueraded (NAT64's flows do not come this way).
                let (to, d) = (f.translated(reply), f.nat_deltas(reply).1);
                nat::rewrite6_flow(&mut pkt.bytes_mut()[ETH..], proto, off, &to, d);
                return self.router.process(pkt, in_port);
            }
            if !self.npt_out(pkt, out, proto, off) {
                return Verdict::Drop(DropReason::NotRoutable);
            }
            return self.router.process(pkt, in_port);
        }
        if let Some(o) = self.spread_owner(in_port, &t) {
            return Verdict::Handoff(o);
        }
        let tcp = proto == IpProto::TCP;
        if !opens_flow(proto, flags) {
            self.ct.count(conntrack::Event::Invalid);
            return self.invalid(pkt, in_port, &t, flags, out);
        }
        let Some(out) = out else {
            return self.router.process(pkt, in_port);
        };
        let k = Key {
            flags,
            meta: meta(in_port, Some(out), state::NEW),
            ..t.key()
        };
        match self.decide(&k) {
            Action::Accept => {}
            a => {
                if self.ct.exports() {
                    self.ct.export_denied(&t, bytes, flags, in_port);
                }
                return self.refuse(pkt, in_port, a, tcp);
            }
        }
        // IPv6 masquerade: the reply tuple to the interface's address
        // and a port of this worker's.
        let reply = match self.masq6_pick(&t, flags, out) {
            Err(v) => return v,
            Ok(Some((r, _))) => r,
            Ok(None) => {
                if !self.npt_out(pkt, Some(out), proto, off) {
                    return Verdict::Drop(DropReason::NotRoutable);
                }
                t.reverse()
            }
        };
        let opened = self.ct.open(t, reply, flags, seg.as_ref());
        match self.opened6(pkt, opened, bytes, flags, in_port, proto, off) {
            Ok(_) => self.router.process(pkt, in_port),
            Err(v) => v,
        }
    }

    /// IPv6 masquerade's reply tuple for a new flow of tuple `t` (TCP
    /// `flags`, or an ICMPv6 type and code) leaving by `out`: to the
    /// interface's address and a port of this worker's found untracked,
    /// with its hash; `None` when the flow is not masqueraded; the drop
    /// when the interface has no address or no port is free.
    fn masq6_pick(
        &mut self,
        t: &Tuple,
        flags: u16,
        out: u16,
    ) -> Result<Option<(Tuple, u64)>, Verdict> {
        if self.nat.masq6_for(out, t.src).is_none() || !has_ports6(t.proto, flags) {
            return Ok(None);
        }
        let Some((a, _)) = self.router.source6(out) else {
            return Err(Verdict::Drop(DropReason::NotRoutable));
        };
        let mut r = Tuple {
            src: t.dst,
            dst: u128::from(a),
            sport: t.dport,
            dport: t.sport,
            proto: t.proto,
            zone: 0,
        };
        self.next_port_of(&mut r);
        let first = r.hash();
        match self.pick_port(&mut r, first) {
            Some(hr) => Ok(Some((r, hr))),
            None => {
                self.nat_events[nat::Event::Exhausted as usize] += 1;
                Err(Verdict::Drop(DropReason::NatExhausted))
            }
        }
    }

    /// What conntrack made of a new IPv6 flow's opening (`opened`): its
    /// first packet (`bytes` of IP, upper layer `proto` at `off`)
    /// accounted and, masqueraded, translated; the drop if it was
    /// refused.
    #[allow(clippy::too_many_arguments)]
    fn opened6<P: Frame>(
        &mut self,
        pkt: &mut P,
        opened: Result<u32, Refused>,
        bytes: usize,
        flags: u16,
        in_port: u16,
        proto: u8,
        off: usize,
    ) -> Result<u32, Verdict> {
        let i = match opened {
            Ok(i) => i,
            Err(Refused::Full) => return Err(Verdict::Drop(DropReason::CtFull)),
            Err(_) => return Err(Verdict::Drop(DropReason::CtClash)),
        };
        self.ct.account(i, false, bytes, flags, in_port);
        let f = self.ct.flow(i);
        if f.nat() {
            self.nat_events[nat::Event::Mapped as usize] += 1;
            let (to, d) = (f.translated(false), f.nat_deltas(false).1);
            nat::rewrite6_flow(&mut pkt.bytes_mut()[ETH..], proto, off, &to, d);
        }
        Ok(i)
    }
}

/// Whether an IPv6 packet of protocol `proto` (flags `flags`: an ICMPv6
/// type and code) has ports IPv6 masquerade can pick: TCP, UDP, an echo
/// request or reply.
fn has_ports6(proto: u8, flags: u16) -> bool {
    match proto {
        IpProto::TCP | IpProto::UDP => true,
        IpProto::ICMPV6 => matches!(flags >> 8, 128 | 129),
        _ => false,
    }
}

/// A burst's IPv6 packet that may take a lane (NAT64's,
/// [`Gateway::nat64_lane`], or conntrack's, [`Gateway::track6`], as the
/// caller decides by its destination): an IPv6 frame to `mac` with no
/// extension header, hop limit above 1, TCP, UDP or an echo (request or
/// reply) whole in the frame: its tuple and flags, as [`ports`] gives
/// them. Anything else takes the full way.
#[inline(always)]
pub(super) fn plain6(b: &[u8], mac: [u8; 6]) -> Option<(Tuple, u16)> {
    // The Ethernet and IPv6 headers and the first 8 bytes of the upper
    // layer as a fixed array: no bounds checks on the reads below (as
    // `plain_l4` reads IPv4's).
    let h: &[u8; ETH + 48] = b.get(..ETH + 48)?.try_into().ok()?;
    if h[..6] != mac || h[12..14] != EtherType::IPV6.to_be_bytes() || h[ETH] >> 4 != 6 {
        return None;
    }
    let l3 = &h[ETH..];
    let (proto, hop) = (l3[6], l3[7]);
    let plen = usize::from(u16::from_be_bytes([l3[4], l3[5]]));
    // Link-scoped packets (fe80::/10 either way) take the full way too:
    // one test each way on the top byte, fe00::/7 (multicast
    // destinations with them).
    if hop <= 1 || ETH + 40 + plen > b.len() || l3[8] >= 0xfe || l3[24] >= 0xfe {
        return None;
    }
    let be16 = |i: usize| u16::from_be_bytes([l3[i], l3[i + 1]]);
    let (sport, dport, flags) = match proto {
        IpProto::TCP if plen >= 20 => {
            // Inside the frame: `plen` (at least 20) fits in it.
            let f = b.get(ETH + 52..ETH + 54)?;
            (
                be16(40),
                be16(42),
                u16::from(f[1]) | u16::from(f[0] & 1) << 8,
            )
        }
        IpProto::UDP if plen >= 8 => (be16(40), be16(42), 0),
        IpProto::ICMPV6 if plen >= 8 && matches!(l3[40], 128 | 129) => {
            (be16(44), be16(44), be16(40))
        }
        _ => return None,
    };
    Some((
        Tuple {
            src: u128::from_be_bytes(l3[8..24].try_into().ok()?),
            dst: u128::from_be_bytes(l3[24..40].try_into().ok()?),
            sport,
            dport,
            proto,
            zone: 0,
        },
        flags,
    ))
}
