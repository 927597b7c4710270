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
            Action::Reject(w) => {
                self.router
                    .reject(pkt, in_port, w, tcp, v6, DropReason::Filtered, false)
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
            match quoted_ports(q.protocol(), &quote[qh..], false) {
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
        if reply && super::nat64::is_nat64(&f) {
            return self.nat64_error_to6(pkt, in_port, h, &f.orig);
        }
        if f.nat() {
            nat::rewrite_icmp_error4(&mut pkt.bytes_mut()[ETH..], &to_inner);
        }
        self.router.process(pkt, in_port)
    }
}
