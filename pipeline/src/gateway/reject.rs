//! What the gateway answers instead of forwarding: a refused packet (drop,
//! TCP reset, ICMP/ICMPv6 unreachable through the router's token bucket),
//! and ICMP errors about tracked flows translated back through NAT.

use super::*;

impl<C: StageClock> Gateway<C> {
    /// Applies a non-accept action.
    pub(super) fn refuse<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        a: Action,
        tcp: bool,
    ) -> Verdict {
        let v6 = pkt.bytes()[12..14] == EtherType::IPV6.to_be_bytes();
        let v = match a {
            Action::Reject(RejectWith::Auto | RejectWith::TcpReset) if tcp => {
                self.tcp_reset(pkt, in_port, v6)
            }
            Action::Reject(w) => {
                let admin = w == RejectWith::AdminProhibited;
                if v6 {
                    let code = if admin { 1 } else { 4 };
                    self.router
                        .icmp6_error(pkt, in_port, 1, code, 0, DropReason::Filtered)
                } else {
                    let code = if admin { 13 } else { 3 };
                    self.router
                        .icmp4_error(pkt, in_port, 3, code, 0, DropReason::Filtered)
                }
            }
            _ => Verdict::Drop(DropReason::Filtered),
        };
        if matches!(v, Verdict::Forward(_)) {
            self.fw_events[firewall::Event::Reject as usize] += 1;
        }
        v
    }

    /// An ICMPv4 error (IPv4 header of `h` bytes): related if its quote
    /// belongs to a tracked flow (translated back if the flow is).
    pub(super) fn icmp_error4<P: Frame>(&mut self, pkt: &mut P, in_port: u16, h: usize) -> Verdict {
        let b = pkt.bytes();
        let l3 = &b[ETH..];
        let total = usize::from(u16::from_be_bytes([l3[2], l3[3]]));
        let outer_src = u32::from_be_bytes([l3[12], l3[13], l3[14], l3[15]]);
        let outer_dst = u32::from_be_bytes([l3[16], l3[17], l3[18], l3[19]]);
        // The error's ICMP type and code (what `icmp_type` rules match).
        let tc = u16::from_be_bytes([l3[h], l3[h + 1]]);
        let quote = &l3[h + 8..total];
        let q = Ipv4Packet::new_unchecked(quote);
        let ok = quote.len() >= 20 && q.version() == 4 && q.header_len() >= 20;
        let qh = if ok { q.header_len() } else { 0 };
        let inner = if ok && quote.len() >= qh + 8 {
            match ports(q.protocol(), &quote[qh..], false) {
                Ok(Some((sp, dp, _))) => Some(tuple4(
                    u32::from_be_bytes(q.src()),
                    u32::from_be_bytes(q.dst()),
                    sp,
                    dp,
                    q.protocol(),
                )),
                _ => None,
            }
        } else {
            None
        };
        let outer = tuple4(outer_src, outer_dst, 0, 0, IpProto::ICMP);
        let hit = inner.and_then(|t| self.ct.find(&t.reverse()));
        if hit.is_none() {
            if let Some(o) = inner.and_then(|t| self.owner(in_port, &t.reverse())) {
                return Verdict::Handoff(o);
            }
        }
        let Some((i, reply)) = hit else {
            if self.router.is_local4(outer_dst) {
                return self.router.process(pkt, in_port);
            }
            self.ct.count(conntrack::Event::Invalid);
            return self.invalid(
                pkt,
                in_port,
                &outer,
                tc,
                self.router
                    .route4(outer_dst, self.router.tuple_hash(&outer)),
            );
        };
        self.ct.count(conntrack::Event::Related);
        let f = *self.ct.flow(i);
        let to_inner = if reply { f.orig } else { f.reply };
        let new_dst = if f.nat() {
            addr4(to_inner.src)
        } else {
            outer_dst
        };
        let k = Key {
            meta: meta(
                in_port,
                self.router.route4(new_dst, self.router.tuple_hash(&outer)),
                state::RELATED,
            ) | self.ct_meta(&f),
            flags: tc,
            ..outer.key()
        };
        match self.decide(&k) {
            Action::Accept => {}
            a => return self.refuse(pkt, in_port, a, false),
        }
        if f.nat() {
            nat::rewrite_icmp_error4(&mut pkt.bytes_mut()[ETH..], &to_inner);
        }
        self.router.process(pkt, in_port)
    }

    /// Turns a TCP segment into the RST that refuses it (RFC 793 "Reset
    /// Generation"), sent back out of `in_port`.
    pub(super) fn tcp_reset<P: Frame>(&mut self, pkt: &mut P, in_port: u16, v6: bool) -> Verdict {
        let Some(mac) = self.router.iface(in_port).map(|i| i.mac) else {
            return Verdict::Drop(DropReason::Filtered);
        };
        let b = pkt.bytes();
        let (hl, total) = if v6 {
            let ip = Ipv6Packet::new_unchecked(&b[ETH..]);
            match ip.upper_layer() {
                Ok((IpProto::TCP, off)) => (off, 40 + usize::from(ip.payload_len())),
                _ => return Verdict::Drop(DropReason::Filtered),
            }
        } else {
            let ip = Ipv4Packet::new_unchecked(&b[ETH..]);
            (ip.header_len(), usize::from(ip.total_len()))
        };
        let tcp = &b[ETH + hl..ETH + total];
        let flags = u16::from(tcp[13]);
        if flags & RST != 0 || !self.router.take_token() {
            return Verdict::Drop(DropReason::Filtered);
        }
        let be32 = |i: usize| u32::from_be_bytes([tcp[i], tcp[i + 1], tcp[i + 2], tcp[i + 3]]);
        let (their_seq, their_ack) = (be32(4), be32(8));
        let seg = (total - hl).saturating_sub(usize::from(tcp[12] >> 4) * 4) as u32
            + u32::from(flags & SYN != 0)
            + u32::from(flags & FIN != 0);
        let (seq, ack, out_flags) = if flags & ACK != 0 {
            (their_ack, 0, RST as u8)
        } else {
            (0, their_seq.wrapping_add(seg), (RST | ACK) as u8)
        };
        let (sport, dport) = (
            u16::from_be_bytes([tcp[0], tcp[1]]),
            u16::from_be_bytes([tcp[2], tcp[3]]),
        );
        let mut peer = [0u8; 6];
        peer.copy_from_slice(&b[6..12]);
        let mut addrs = [0u8; 32];
        let al = if v6 { 16 } else { 4 };
        let (so, dof) = if v6 { (8, 24) } else { (12, 16) };
        addrs[..al].copy_from_slice(&b[ETH + so..ETH + so + al]);
        addrs[16..16 + al].copy_from_slice(&b[ETH + dof..ETH + dof + al]);
        let ihl = if v6 { 40 } else { 20 };
        if !pkt.set_len(ETH + ihl + 20) {
            return Verdict::Drop(DropReason::Filtered);
        }
        let b = pkt.bytes_mut();
        b[0..6].copy_from_slice(&peer);
        b[6..12].copy_from_slice(&mac.0);
        let (src, dst) = (&addrs[16..16 + al], &addrs[..al]); // swapped
        let pseudo = if v6 {
            b[12..14].copy_from_slice(&EtherType::IPV6.to_be_bytes());
            let mut ip = Ipv6Packet::new_unchecked(&mut b[ETH..ETH + 40]);
            ip.set_version();
            ip.set_payload_len(20);
            ip.set_next_header(IpProto::TCP);
            ip.set_hop_limit(64);
            let (mut s, mut d) = ([0u8; 16], [0u8; 16]);
            s.copy_from_slice(src);
            d.copy_from_slice(dst);
            ip.set_src(s);
            ip.set_dst(d);
            checksum::pseudo_v6(s, d, IpProto::TCP, 20)
        } else {
            b[12..14].copy_from_slice(&EtherType::IPV4.to_be_bytes());
            b[ETH + 1] = 0;
            let mut ip = Ipv4Packet::new_unchecked(&mut b[ETH..ETH + 20]);
            ip.set_version_ihl(20);
            ip.set_total_len(40);
            ip.set_ident(0);
            ip.set_flags_frag(0x4000);
            ip.set_ttl(64);
            ip.set_protocol(IpProto::TCP);
            let (mut s, mut d) = ([0u8; 4], [0u8; 4]);
            s.copy_from_slice(src);
            d.copy_from_slice(dst);
            ip.set_src(s);
            ip.set_dst(d);
            ip.fill_checksum();
            checksum::pseudo_v4(s, d, IpProto::TCP, 20)
        };
        let t = &mut b[ETH + ihl..ETH + ihl + 20];
        t[0..2].copy_from_slice(&dport.to_be_bytes());
        t[2..4].copy_from_slice(&sport.to_be_bytes());
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[8..12].copy_from_slice(&ack.to_be_bytes());
        t[12] = 5 << 4;
        t[13] = out_flags;
        t[14..20].copy_from_slice(&[0; 6]);
        let c = !checksum::fold(checksum::sum(t, pseudo));
        t[16..18].copy_from_slice(&c.to_be_bytes());
        Verdict::Forward(in_port)
    }
}
