//! The gateway's IPv4 path, packet by packet: header checks and the tuple,
//! fragments by their first fragment (virtual reassembly, `reass`), a
//! tracked flow's packets (state machine, translation), a new flow's
//! planning (DNAT, route, rules, SNAT) and opening.

use super::*;

impl<C: StageClock> Gateway<C> {
    pub(super) fn ipv4<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        let b = pkt.bytes();
        // A plain header (20 bytes, valid, TTL above 1) is checked in a few
        // machine words, as the router's burst path does; anything else
        // the full way.
        if !crate::router::plain4(b, pkt.ip4_csum()) {
            let ip = match Ipv4Packet::new_checked(&b[ETH..]) {
                Ok(ip) => ip,
                Err(e) => return Verdict::Drop(e.into()),
            };
            if !ip.verify_checksum() {
                return Verdict::Drop(DropReason::BadChecksum);
            }
            if ip.ttl() <= 1 {
                // A port forward's packet (to the router's address, for an
                // inside host) is translated and then forwarded, as the
                // kernel's PREROUTING DNAT and forward path do: its TTL
                // runs out there and is answered with Time Exceeded
                // (traceroute through a port forward), not taken by the
                // router as its own.
                if self.port_forwarded4(&ip, in_port) {
                    return self.router.icmp4_error(
                        pkt,
                        in_port,
                        11,
                        0,
                        0,
                        DropReason::TtlExceeded,
                    );
                }
                return self.router.process(pkt, in_port);
            }
        }
        let ip = Ipv4Packet::new_unchecked(&b[ETH..]);
        let h = ip.header_len();
        if h > 20 {
            return self.with_options4(pkt, in_port, h);
        }
        if ip.flags_frag() & 0x3fff != 0 {
            return self.fragment4(pkt, in_port);
        }
        self.l4_4(pkt, in_port, h)
    }

    /// [`Gateway::ipv4`] for a packet with options (`h` header bytes):
    /// checked before anything else sees it (a malformed one answered,
    /// a source-routed one dropped), stamped as it leaves
    /// (`Router::options4`).
    #[cold]
    #[inline(never)]
    fn with_options4<P: Frame>(&mut self, pkt: &mut P, in_port: u16, h: usize) -> Verdict {
        let o = match self.router.options4(pkt, in_port) {
            Ok(o) => o,
            Err(v) => return v,
        };
        let frag = Ipv4Packet::new_unchecked(&pkt.bytes()[ETH..]).flags_frag() & 0x3fff != 0;
        self.router.options_outside = true;
        let v = if frag {
            self.fragment4(pkt, in_port)
        } else {
            self.l4_4(pkt, in_port, h)
        };
        self.router.options_outside = false;
        self.router.stamp4(pkt, &o, v);
        v
    }

    /// Whether the valid IPv4 packet `ip` received on `in_port` is to the
    /// router's own address but translated to another host: a destination
    /// NAT rule (port forward, 1:1) takes it or it belongs to a tracked
    /// flow (whose packets are translated).
    #[cold]
    fn port_forwarded4(&mut self, ip: &Ipv4Packet<&[u8]>, in_port: u16) -> bool {
        let dst = u32::from_be_bytes(ip.dst());
        if !self.router.is_local4(dst) || ip.flags_frag() & 0x1fff != 0 {
            return false;
        }
        let l4 = ip.payload();
        let Ok(Some((sport, dport, _))) = ports(ip.protocol(), l4, false) else {
            return false;
        };
        let proto = ip.protocol();
        let src = u32::from_be_bytes(ip.src());
        self.nat.dnat(in_port, proto, dst, dport).is_some()
            || self
                .ct
                .find(&tuple4(src, dst, sport, dport, proto))
                .is_some()
    }

    /// The part of [`Gateway::ipv4`] from the L4 header on, for a packet
    /// whose IPv4 header (`h` bytes) was validated.
    #[inline(always)]
    pub(super) fn l4_4<P: Frame>(&mut self, pkt: &mut P, in_port: u16, h: usize) -> Verdict {
        let b = pkt.bytes();
        let ip = Ipv4Packet::new_unchecked(&b[ETH..]);
        let l4 = &b[ETH + h..ETH + usize::from(ip.total_len())];
        let (sport, dport, flags) = match ports(ip.protocol(), l4, false) {
            Ok(Some(p)) => p,
            Ok(None) => return self.icmp_error4(pkt, in_port, h),
            Err(r) => return Verdict::Drop(r),
        };
        let (src, dst) = (u32::from_be_bytes(ip.src()), u32::from_be_bytes(ip.dst()));
        let t = tuple4(src, dst, sport, dport, ip.protocol());
        self.clock.mark(Stage::Parse);
        let lane = Lane {
            t,
            flags,
            h: t.hash(),
            hint: None,
            plan: None,
            way: Way::V4,
        };
        self.track4(pkt, in_port, &lane)
    }

    /// An IPv4 fragment (its header validated): a datagram's first goes
    /// the way of any packet (its ports are in it) and its fate is kept
    /// for the others (`reass`), which are then translated, routed, given
    /// to the router or dropped as it was, or wait for it.
    #[cold]
    #[inline(never)]
    pub(super) fn fragment4<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        let b = pkt.bytes();
        let ip = Ipv4Packet::new_unchecked(&b[ETH..]);
        let (h, total, proto) = (ip.header_len(), usize::from(ip.total_len()), ip.protocol());
        let (src, dst) = (u32::from_be_bytes(ip.src()), u32::from_be_bytes(ip.dst()));
        let key = reass::Key {
            src: v4(src),
            dst: v4(dst),
            id: u32::from(ip.ident()),
            proto,
            v6: false,
        };
        let ff = ip.flags_frag();
        let (at, len, last) = (
            u32::from(ff & 0x1fff) * 8,
            (total - h) as u32,
            ff & 0x2000 == 0,
        );
        if at == 0 {
            let t = match ports(proto, &b[ETH + h..ETH + total], false) {
                Ok(Some((sport, dport, _))) => Some(tuple4(src, dst, sport, dport, proto)),
                _ => None,
            };
            // A NAT64 flow's ICMP message in fragments: translated once
            // its length is known (its last fragment came), else it
            // waits for that.
            if proto == IpProto::ICMP && !last {
                match self.reass.length(&key) {
                    Some(l) => self.frag_len = l,
                    None if t.is_some_and(|t| self.nat64_reply(&t)) => {
                        return self.hold_first(pkt, in_port, &key, ETH + total);
                    }
                    None => {}
                }
            }
            self.first_fragment = true;
            let v = self.l4_4(pkt, in_port, h);
            (self.frag_len, self.first_fragment) = (0, false);
            let fate = self.fate(v, t, self.router.is_local4(dst));
            self.reass.first(&key, len, last, fate);
            return v;
        }
        // A TCP fragment at byte 8 would overwrite the first's flags (RFC
        // 1858's overlapping fragment attack).
        if proto == IpProto::TCP && at == 8 {
            return Verdict::Drop(DropReason::Fragment);
        }
        self.later(pkt, in_port, &key, (at, len, last), ETH + total)
    }

    /// Whether `t` is the reply tuple of a NAT64 flow.
    fn nat64_reply(&mut self, t: &Tuple) -> bool {
        let ct = &mut self.ct;
        match ct.find(t) {
            Some((i, reply)) => reply && nat64::is_nat64(ct.flow(i)),
            None => false,
        }
    }

    /// Holds a datagram's first fragment (`key`, the frame `frame` bytes
    /// long) until its last gives the datagram's length (its buffer
    /// `consumed`: a copy waits).
    pub(super) fn hold_first<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        key: &reass::Key,
        frame: usize,
    ) -> Verdict {
        if self.reass.hold_first(key, in_port, &pkt.bytes()[..frame]) {
            Verdict::Drop(DropReason::Consumed)
        } else {
            Verdict::Drop(DropReason::Fragment)
        }
    }

    /// Sends the first fragments that waited for their datagram's length,
    /// each the whole way through the gateway now (a frame that is not
    /// forwarded at once, or could not grow into the other family's
    /// headers in its buffer, is counted `reass_dropped`).
    pub(super) fn release_firsts(&mut self, send: &mut dyn FnMut(u16, &[u8]) -> bool) {
        while let Some(mut t) = self.reass.take_first() {
            // IPv4 to IPv6 takes more (a fragment header).
            let grow = if t.frame.get(12..14) == Some(&[0x86, 0xdd]) {
                0
            } else {
                crate::nat64::GROWTH6
            };
            let sent = t.frame.len() + grow <= t.frame.capacity()
                && match ForwardMode::process(self, &mut t.frame, t.in_port) {
                    Verdict::Forward(o) => send(o, &t.frame),
                    _ => false,
                };
            if !sent {
                self.reass.count(reass::Event::Dropped);
            }
            self.reass.free_first(t.slot, t.frame);
        }
    }

    /// A fragment that is not its datagram's first (`key`), at payload
    /// byte `at` with `len` bytes (`last`: the datagram's last), the frame
    /// `frame` bytes long: it meets the datagram's fate if the first has
    /// come, else waits for it (its buffer `consumed`: a copy waits).
    pub(super) fn later<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        key: &reass::Key,
        (at, len, last): (u32, u32, bool),
        frame: usize,
    ) -> Verdict {
        match self.reass.later(key, at, len, last) {
            reass::Later::Fate(f) => self.follow(pkt, in_port, f),
            reass::Later::Wait if self.reass.hold(key, in_port, &pkt.bytes()[..frame]) => {
                Verdict::Drop(DropReason::Consumed)
            }
            reass::Later::Wait | reass::Later::Full => Verdict::Drop(DropReason::Fragment),
        }
    }

    /// What became of a datagram's first fragment, whose verdict was `v`
    /// (`t`: its tuple, when it had ports; `local`: it is addressed to
    /// the router): handed over or dropped as it was; if it went on,
    /// forwarded with its flow's addresses, or, without a flow, given to
    /// the router if it is the router's (which answers or punts it to the
    /// kernel); any other first fragment that went on without a flow was
    /// refused with an answer, or was invalid and let through: the others
    /// are dropped.
    pub(super) fn fate(&mut self, v: Verdict, t: Option<Tuple>, local: bool) -> reass::Fate {
        let flow = match v {
            Verdict::Handoff(w) => return reass::Fate::Handoff(w),
            Verdict::Drop(r) if r != DropReason::Consumed => return reass::Fate::Drop(r),
            _ => t.and_then(|t| Some((t, self.ct.find(&t)?))),
        };
        match flow {
            Some((t, (i, reply))) => {
                let f = self.ct.flow(i);
                if nat64::is_nat64(f) {
                    return if reply {
                        reass::Fate::Nat64To6 {
                            src: f.orig.dst,
                            dst: f.orig.src,
                        }
                    } else {
                        reass::Fate::Nat64To4 {
                            src: addr4(f.reply.dst),
                            dst: addr4(f.reply.src),
                        }
                    };
                }
                let to = if f.nat() { f.translated(reply) } else { t };
                reass::Fate::Forward {
                    src: to.src,
                    dst: to.dst,
                }
            }
            None if local => reass::Fate::Router,
            None if t.is_none() => reass::Fate::Drop(DropReason::Fragment),
            None => reass::Fate::Drop(DropReason::Filtered),
        }
    }

    /// A fragment (not its datagram's first) meets its datagram's `fate`.
    pub(super) fn follow<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        fate: reass::Fate,
    ) -> Verdict {
        match fate {
            reass::Fate::Forward { src, dst } => {
                readdress(&mut pkt.bytes_mut()[ETH..], src, dst);
                self.router.process(pkt, in_port)
            }
            reass::Fate::Nat64To4 { src, dst } => {
                let Some((cut, end)) = nat64::frag6_to4(pkt.bytes_mut(), src, dst) else {
                    return Verdict::Drop(DropReason::Untranslatable);
                };
                if pkt.bytes().len() > end {
                    pkt.set_len(end);
                }
                if !pkt.cut_front(cut) {
                    return Verdict::Drop(DropReason::Truncated);
                }
                self.nat_events[nat::Event::Nat64To4 as usize] += 1;
                self.router.process(pkt, in_port)
            }
            reass::Fate::Nat64To6 { src, dst } => {
                if !nat64::frag4_to6(pkt, src, dst) {
                    return Verdict::Drop(DropReason::Untranslatable);
                }
                self.nat_events[nat::Event::Nat64To6 as usize] += 1;
                // (An IPv4 fragment: split again where too long.)
                let most = nat64::lowest_mtu6(&self.nat.nat64, src);
                self.router
                    .fragmentable6(most, |r| ForwardMode::process(r, pkt, in_port))
            }
            reass::Fate::Router => self.router.process(pkt, in_port),
            reass::Fate::Drop(r) => Verdict::Drop(r),
            reass::Fate::Handoff(w) => Verdict::Handoff(w),
        }
    }

    /// Sends the fragments that waited for their datagram's first, as
    /// [`Gateway::follow`] would have (a fragment handed to another
    /// worker cannot be: it is dropped).
    pub(super) fn release_fragments(&mut self, send: &mut dyn FnMut(u16, &[u8]) -> bool) {
        let router = &mut self.router;
        let events = &mut self.nat_events;
        let nat = &self.nat;
        self.reass.release(|frame, in_port, fate| match fate {
            reass::Fate::Forward { src, dst } => {
                readdress(&mut frame[ETH..], src, dst);
                router.route_and_send(frame, in_port, send)
            }
            reass::Fate::Nat64To4 { src, dst } => match nat64::frag6_to4(frame, src, dst) {
                Some((cut, end)) => {
                    events[nat::Event::Nat64To4 as usize] += 1;
                    frame.truncate(end);
                    frame.drain(..cut);
                    router.route_and_send(frame, in_port, send)
                }
                None => false,
            },
            // Into the IPv6 headers, in the copy's buffer (a fragment
            // header more).
            reass::Fate::Nat64To6 { src, dst }
                if frame.len() + crate::nat64::GROWTH6 <= frame.capacity() =>
            {
                if !nat64::frag4_to6(frame, src, dst) {
                    return false;
                }
                events[nat::Event::Nat64To6 as usize] += 1;
                let most = nat64::lowest_mtu6(&nat.nat64, src);
                router.fragmentable6(most, |r| r.route_and_send(frame, in_port, send))
            }
            // (A copy cannot be handed over: dropped.)
            _ => false,
        });
    }

    /// The part of [`Gateway::ipv4`] past the parse, for a TCP/UDP/ICMP
    /// query packet whose header was validated: conntrack, then the
    /// established path (translation, the flow's cached route) or a new
    /// flow's.
    #[inline(always)]
    pub(super) fn track4<P: Frame>(&mut self, pkt: &mut P, in_port: u16, lane: &Lane) -> Verdict {
        // The tuple by reference: a packet of a flow that is not
        // translated never copies it.
        let (t, flags) = (&lane.t, lane.flags);
        let dst = addr4(t.dst);
        let seg = if t.proto == IpProto::TCP && self.ct.tcp_window() {
            segment4(pkt.bytes())
        } else {
            None
        };
        // The IP length, read only when flows are accounted.
        let b = pkt.bytes();
        let bytes = || usize::from(u16::from_be_bytes([b[ETH + 2], b[ETH + 3]]));
        if let Some((f, reply, conn)) =
            self.ct
                .track_hashed(t, lane.h, lane.hint, flags, seg.as_ref(), bytes, in_port)
        {
            self.clock.mark(Stage::Conntrack);
            if conn == crate::conntrack::Conn::Invalid {
                return self.invalid(
                    pkt,
                    in_port,
                    t,
                    flags,
                    self.router.route4(dst, self.router.tuple_hash(t)),
                );
            }
            // The tuple as sent.
            let translated;
            let to = if f.nat() {
                if nat64::is_nat64(f) {
                    let (o, delta) = (f.orig, f.nat_deltas(true).1);
                    return nat64::nat64_in(
                        &mut self.router,
                        (self.min_mtu, self.frag_len, &self.nat.nat64),
                        &mut self.nat_events,
                        pkt,
                        in_port,
                        &o,
                        f.hop_mut(true),
                        delta,
                    );
                }
                translated = f.translated(reply);
                &translated
            } else {
                t
            };
            let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ETH..]);
            if f.nat()
                && !too_big4(
                    &self.router,
                    self.min_mtu,
                    ip.total_len(),
                    ip.flags_frag(),
                    to,
                )
            {
                nat::rewrite4_flow(&mut pkt.bytes_mut()[ETH..], to, f.nat_deltas(reply));
                self.clock.mark(Stage::Nat);
            }
            // Validated above (the rewrite kept the checksum right); the
            // flow caches its next hop, a multipath route's path chosen
            // by the packet as sent (hashed only when the cache is filled
            // with such a route: `Fib::path` asks for the hash then).
            let hop = f.hop_mut(reply);
            // The route's end where the cached path takes the packet
            // (else the full way's is all route).
            let clock = &mut self.clock;
            let mut cached = false;
            let v = self.router.forward4_cached(
                pkt,
                in_port,
                hop,
                || crate::fib::tuple_hash(to.src, to.dst, to.proto, to.sport, to.dport),
                || {
                    clock.mark(Stage::Route);
                    cached = true;
                },
            );
            self.clock
                .mark(if cached { Stage::Rewrite } else { Stage::Route });
            return v;
        }
        self.clock.mark(Stage::Conntrack);
        self.miss4(pkt, in_port, lane, seg.as_ref())
    }

    /// A packet that no flow here accounts for: another worker's, or a
    /// new flow's. Out of line, with the lane and the TCP segment (parsed
    /// for the lookup, when windows are tracked) by reference: the
    /// established path it branches from is not made to keep anything
    /// for it.
    #[inline(never)]
    pub(super) fn miss4<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        lane: &Lane,
        seg: Option<&Segment>,
    ) -> Verdict {
        if let Some(o) = self.owner(in_port, &lane.t) {
            return Verdict::Handoff(o);
        }
        self.new4(pkt, in_port, lane, seg)
    }

    /// A packet that no flow accounts for (or that its flow's state
    /// machine refused): the rules decide with state `invalid`; accepted,
    /// it is forwarded as it is and opens nothing.
    pub(super) fn invalid<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        t: &Tuple,
        flags: u16,
        out: Option<u16>,
    ) -> Verdict {
        let k = Key {
            src: t.src,
            dst: t.dst,
            sport: t.sport,
            dport: t.dport,
            proto: t.proto,
            flags,
            meta: meta(in_port, out, state::INVALID),
        };
        match self.decide(&k) {
            Action::Accept => self.router.process(pkt, in_port),
            a => self.refuse(pkt, in_port, a, false),
        }
    }

    /// A packet whose tuple `t` (hashed `h`) conntrack has just looked up
    /// and not found: the rules decide whether it opens a flow (its
    /// windows starting from `seg`, its TCP segment when they are
    /// tracked).
    pub(super) fn new4<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        lane: &Lane,
        seg: Option<&Segment>,
    ) -> Verdict {
        let (t, h, flags) = (lane.t, lane.h, lane.flags);
        let proto = t.proto;
        let tcp = proto == IpProto::TCP;
        if !opens_flow(proto, flags) {
            self.ct.count(conntrack::Event::Invalid);
            if self.router.is_local4(addr4(t.dst)) {
                return self.router.process(pkt, in_port);
            }
            return self.invalid(
                pkt,
                in_port,
                &t,
                flags,
                self.router.route4(addr4(t.dst), self.router.tuple_hash(&t)),
            );
        }
        // Destination NAT, the route, the reply tuple: planned ahead for
        // the burst's likely new flows (`Plan4`), else here.
        let here;
        let plan = match &lane.plan {
            Some(p) => p,
            None => {
                here = self.plan4::<P>(&t, in_port, 0);
                &here
            }
        };
        self.clock.mark(Stage::Route);
        let &Open4 {
            dst,
            dport,
            dnat,
            entry,
            snat_entry,
            nh,
            hop,
            multi,
            mut reply,
            pick,
            hash: mut first_hash,
        } = match plan {
            Plan4::Open(o) => o,
            // Local, or an ICMP unreachable.
            Plan4::Local | Plan4::NoRoute { dnat: false } => {
                return self.router.process(pkt, in_port);
            }
            Plan4::NoRoute { dnat: true } => return Verdict::Drop(DropReason::NoRoute),
        };
        let out = hop.port;
        // A deterministic mapping's flow: its port from this worker's
        // share of its host's block (worked out again: the plan does not
        // carry it, which would cost every new flow its copy).
        let det = if pick && self.det {
            self.det_share_of(addr4(t.src), snat_entry)
        } else {
            None
        };
        // A port-block pool's flow: its port from its host's blocks.
        let blocked =
            pick && det.is_none() && self.ct.blocks().is_some_and(|b| b.has(addr4(reply.dst)));
        // A translated source's port as it is to be tried now: the planned
        // one unless the flows opened since went past it (its bucket then
        // on its way only from here).
        if pick && det.is_none() && !blocked {
            let planned = reply.dport;
            self.next_port_of(&mut reply);
            if reply.dport != planned {
                first_hash = reply.hash();
                P::prefetch(self.ct.bucket_of(first_hash));
            }
        }
        self.clock.mark(Stage::Nat);
        // Firewall.
        let k = Key {
            src: t.src,
            dst: v4(dst),
            sport: t.sport,
            dport,
            proto,
            flags,
            meta: meta(in_port, Some(out), state::NEW)
                | meta_ct(if dnat { status::DNAT } else { 0 }, entry),
        };
        let action = self.decide(&k);
        self.clock.mark(Stage::Firewall);
        match action {
            Action::Accept => {}
            a => {
                if self.ct.exports() {
                    let len = Ipv4Packet::new_unchecked(&pkt.bytes()[ETH..]).total_len();
                    self.ct.export_denied(&t, usize::from(len), flags, in_port);
                }
                return self.refuse(pkt, in_port, a, tcp);
            }
        }
        let hr = if pick {
            let picked = match det {
                Some((lo, len)) => self.pick_det(&mut reply, first_hash, lo, len),
                None if blocked => self.pick_block(&mut reply, addr4(t.src), first_hash),
                None => self.pick_port(&mut reply, first_hash),
            };
            match picked {
                Some(h) => h,
                None => {
                    self.nat_events[nat::Event::Exhausted as usize] += 1;
                    if self.ct.nat_events() {
                        self.ct.export_exhausted(&t, &reply);
                    }
                    return Verdict::Drop(DropReason::NatExhausted);
                }
            }
        } else {
            first_hash
        };
        self.clock.mark(Stage::Nat);
        // A picked port's reply tuple was just found untracked (and
        // `opens_flow` holds, checked above): not looked up again.
        let opened = if pick {
            self.ct.open_picked(t, h, reply, hr, flags, seg)
        } else {
            self.ct.open_missed(t, h, reply, hr, flags, seg)
        };
        self.clock.mark(Stage::Conntrack);
        match opened {
            Ok(i) => {
                if self.ct.exporting() {
                    let len = Ipv4Packet::new_unchecked(&pkt.bytes()[ETH..]).total_len();
                    self.ct.export_opened(i, usize::from(len), flags, in_port);
                }
                let f = self.ct.flow(i);
                // The tuple as sent.
                let to = if f.nat() { f.translated(false) } else { t };
                if f.nat() {
                    self.nat_events[nat::Event::Mapped as usize] += 1;
                    let rules = self.rules.rules().len();
                    super::nat_hit(&mut self.hits, rules, entry);
                    super::nat_hit(&mut self.hits, rules, snat_entry);
                    let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ETH..]);
                    if !too_big4(
                        &self.router,
                        self.min_mtu,
                        ip.total_len(),
                        ip.flags_frag(),
                        &to,
                    ) {
                        nat::rewrite4_flow(&mut pkt.bytes_mut()[ETH..], &to, f.nat_deltas(false));
                    }
                    self.clock.mark(Stage::Nat);
                }
                // The header was validated on the way in (`ipv4`, or the
                // burst path's `plain_l4`) and the translation kept its
                // checksum right: the packet goes the established path's
                // way, through the flow's route cache, which it fills for
                // the packets after it (a destination that is the router's
                // own, or any other case the cache does not take, goes the
                // router's full way from there).
                let cache = self.ct.hop_mut(i, false);
                // A single-path route (the one the rules saw) fills the
                // cache as it is; a multipath route's path is the one the
                // flow's packets as sent hash to, picked by the fill below
                // (as every later fill picks it).
                if !multi {
                    self.router.fill4_route(cache, nh, hop, dst);
                }
                let clock = &mut self.clock;
                let mut cached = false;
                let v = self.router.forward4_cached(
                    pkt,
                    in_port,
                    cache,
                    || crate::fib::tuple_hash(to.src, to.dst, to.proto, to.sport, to.dport),
                    || {
                        clock.mark(Stage::Route);
                        cached = true;
                    },
                );
                self.clock
                    .mark(if cached { Stage::Rewrite } else { Stage::Route });
                v
            }
            Err(Refused::Full) => Verdict::Drop(DropReason::CtFull),
            Err(_) => Verdict::Drop(DropReason::CtClash),
        }
    }

    /// The plan ([`Plan4`]) of the flow that a packet of tuple `t` from
    /// `in_port` opens, if it opens one: destination NAT, the route, and
    /// the reply tuple (source NAT), a translated port being the one
    /// [`Gateway::pick_port`] tries `ahead` picks from now; the reply
    /// tuple's index bucket is prefetched. Inlined into both callers (the
    /// burst path's look-ahead, `new4`): 44 instructions a new flow fewer
    /// than as a call (counted). The burst path still copies the plan
    /// into the packet's lane (~45 instructions the compiler does not
    /// elide).
    #[inline(always)]
    pub(super) fn plan4<P: Frame>(&self, t: &Tuple, in_port: u16, ahead: u32) -> Plan4 {
        let (src, proto) = (addr4(t.src), t.proto);
        let (mut dst, mut dport) = (addr4(t.dst), t.dport);
        let mut dnat = false;
        let mut entry = 0;
        if !self.nat.is_empty() {
            if let Some((e, a, p)) = self.nat.dnat_entry(in_port, proto, dst, dport) {
                (dst, dport, dnat) = (a, if has_ports(proto) { p } else { dport }, true);
                entry = e;
                if proto == IpProto::ICMP {
                    dport = t.dport; // the identifier stays
                }
            }
        }
        if !dnat && self.router.is_local4(dst) {
            return Plan4::Local;
        }
        let Some((nh, hop, multi)) = self.router.route4_path(dst, self.router.tuple_hash(t)) else {
            return Plan4::NoRoute { dnat };
        };
        let out = hop.port;
        // Source NAT: the reply tuple, worked out before the rules are
        // matched (it does not depend on their verdict).
        let mut reply = tuple4(dst, src, dport, t.sport, proto);
        let mut snat_entry = 0;
        let mut det = None;
        let mut blocked = false;
        let snat_addr = if dnat && out == in_port && !self.nat.no_hairpin {
            self.router.source4(out).map(|(a, _)| u32::from(a))
        } else if let Some((e, o)) = self.nat.static_out_entry(src) {
            reply.dst = v4(o);
            snat_entry = e;
            None
        } else {
            match self.nat.snat_entry(out, src, dnat) {
                Some((e, r)) => {
                    snat_entry = e;
                    match &r.to {
                        SnatTo::Masquerade => self.router.source4(out).map(|(a, _)| u32::from(a)),
                        SnatTo::Pool(p) if !p.is_empty() => {
                            let hsh = src.wrapping_mul(0x9e37_79b1) >> 16;
                            Some(p[hsh as usize % p.len()])
                        }
                        SnatTo::Pool(_) => None,
                        SnatTo::Blocks(b) if !b.addrs.is_empty() => {
                            blocked = true;
                            let hsh = src.wrapping_mul(0x9e37_79b1) >> 16;
                            Some(b.addrs[hsh as usize % b.addrs.len()])
                        }
                        SnatTo::Blocks(_) => None,
                        SnatTo::Deterministic(d) => self.det_share(d, src).map(|(a, share)| {
                            det = Some(share);
                            a
                        }),
                    }
                }
                None => None,
            }
        };
        let pick = snat_addr.is_some() && has_ports(proto);
        if let Some(a) = snat_addr {
            reply.dst = v4(a);
        }
        match det {
            // A deterministic mapping's port: from this worker's share of
            // the host's block, first tried where the flow's ports put it.
            Some((lo, len)) if pick => {
                let k = (u32::from(t.sport).wrapping_mul(0x9e37) ^ u32::from(t.dport))
                    % u32::from(len.max(1));
                let p = (u32::from(lo) + k) as u16;
                reply.dport = p;
                if proto == IpProto::ICMP {
                    reply.sport = p;
                }
            }
            // A port block's: where the host's newest block tries next
            // (the pick tries it first; a host with no block yet, the
            // range's next port, as good a guess as any).
            _ if pick && blocked => match self.ct.blocks().and_then(|b| b.next_port(src)) {
                Some((a, p)) => {
                    (reply.dst, reply.dport) = (v4(a), p);
                    if proto == IpProto::ICMP {
                        reply.sport = p;
                    }
                }
                None => self.port_ahead(&mut reply, ahead),
            },
            _ if pick => self.port_ahead(&mut reply, ahead),
            _ => {}
        }
        // Hashed once: the prefetch, the port's check or the reply's
        // lookup, and the insert use it.
        let hash = reply.hash();
        P::prefetch(self.ct.bucket_of(hash));
        Plan4::Open(Open4 {
            dst,
            dport,
            dnat,
            entry,
            snat_entry,
            nh,
            hop,
            multi,
            reply,
            pick,
            hash,
        })
    }
}
