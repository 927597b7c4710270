//! testpmd's tester modes that receive: `rxonly` (receive, count, free),
//! `icmpecho` (answer ARP requests and ICMP echo requests on the port they
//! came in on, exactly as testpmd's `icmpecho` engine rewrites them, and
//! free the rest) and `csum` (verify and fill in IP and TCP/UDP checksums,
//! counting the bad ones, and forward with the `mac` mode's addresses, as
//! testpmd's `csum` engine does in software). What they free is counted as
//! `consumed` (used up, not lost).

use crate::checksum;
use crate::fwd::{ForwardMode, Frame, Peers};
use crate::verdict::{DropReason, Verdict};
use crate::wire::{
    l3_offset, ArpPacket, EtherType, IcmpPacket, IpProto, Ipv4Packet, Ipv6Packet, MacAddr,
    ARP_REPLY, ARP_REQUEST,
};

/// `rxonly`: every packet received is counted and freed.
#[derive(Clone, Copy, Debug, Default)]
pub struct RxOnly;

impl ForwardMode for RxOnly {
    const NAME: &'static str = "rxonly";

    #[inline]
    fn process<P: Frame>(&mut self, _pkt: &mut P, _in_port: u16) -> Verdict {
        Verdict::Drop(DropReason::Consumed)
    }

    #[inline]
    fn burst_verdict(&self, _in_port: u16) -> Option<Verdict> {
        Some(Verdict::Drop(DropReason::Consumed))
    }
}

/// `icmpecho`: ARP requests (for any address: the answer claims it with
/// the receiving port's MAC) and ICMP echo requests get their reply, sent
/// back out of the receiving port; everything else is freed. Up to two
/// VLAN tags are skipped and kept, as testpmd does.
#[derive(Clone, Debug)]
pub struct IcmpEcho {
    /// Per port, its MAC.
    macs: Box<[MacAddr]>,
}

impl IcmpEcho {
    /// `macs[p]` is port `p`'s MAC.
    pub fn new(macs: Vec<MacAddr>) -> Self {
        IcmpEcho {
            macs: macs.into_boxed_slice(),
        }
    }
}

impl ForwardMode for IcmpEcho {
    const NAME: &'static str = "icmpecho";

    fn process<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        let consumed = Verdict::Drop(DropReason::Consumed);
        let b = pkt.bytes_mut();
        let Ok((ethertype, off, _)) = l3_offset(b) else {
            return Verdict::Drop(DropReason::Truncated);
        };
        let port_mac = self
            .macs
            .get(usize::from(in_port))
            .copied()
            .unwrap_or_default();
        match ethertype {
            EtherType::ARP => {
                let Ok(a) = ArpPacket::new_checked(&b[off..]) else {
                    return consumed;
                };
                if a.oper() != ARP_REQUEST {
                    return consumed;
                }
                let (sha, spa, tpa) = (a.sha(), a.spa(), a.tpa());
                let mut src = [0u8; 6];
                src.copy_from_slice(&b[6..12]);
                b[0..6].copy_from_slice(&src);
                b[6..12].copy_from_slice(&port_mac.0);
                let mut r = ArpPacket::new_unchecked(&mut b[off..]);
                r.set_oper(ARP_REPLY);
                r.set_target(sha, spa);
                r.set_sender(port_mac, tpa);
                Verdict::Forward(in_port)
            }
            EtherType::IPV4 => {
                let Ok(ip) = Ipv4Packet::new_checked(&b[off..]) else {
                    return consumed;
                };
                let h = ip.header_len();
                let is_echo = ip.protocol() == IpProto::ICMP
                    && IcmpPacket::new_checked(ip.payload())
                        .is_ok_and(|i| (i.msg_type(), i.code()) == (8, 0));
                if !is_echo {
                    return consumed;
                }
                let (src, dst) = (ip.src(), ip.dst());
                // MACs swapped.
                let mut mac = [0u8; 6];
                mac.copy_from_slice(&b[0..6]);
                b.copy_within(6..12, 0);
                b[6..12].copy_from_slice(&mac);
                let mut ip = Ipv4Packet::new_unchecked(&mut b[off..]);
                if dst[0] & 0xf0 == 0xe0 {
                    // To a multicast group: answer from a unicast address
                    // next to the asker's (testpmd's rule).
                    let s = u32::from_be_bytes(src);
                    let me = if s & 3 == 1 {
                        (s & !3) | 2
                    } else {
                        (s & !3) | 1
                    };
                    ip.set_src(me.to_be_bytes());
                    ip.set_dst(src);
                    ip.fill_checksum();
                } else {
                    ip.set_src(dst);
                    ip.set_dst(src);
                }
                let icmp = &mut b[off + h..];
                icmp[0] = 0; // echo reply
                let c = u16::from_be_bytes([icmp[2], icmp[3]]);
                icmp[2..4].copy_from_slice(&checksum::update16(c, 0x0800, 0x0000).to_be_bytes());
                Verdict::Forward(in_port)
            }
            _ => consumed,
        }
    }
}

crate::counter_enum! {
    /// What `csum` counts.
    pub enum CsumEvent {
        /// IPv4 headers whose checksum did not verify (then fixed).
        BadIp = "bad_ip_csum",
        /// TCP/UDP checksums that did not verify (then fixed).
        BadL4 = "bad_l4_csum",
    }
}

/// `csum`: for every packet, the IPv4 header checksum and the TCP/UDP
/// checksum (UDP only when it is in use, not 0) are verified, counted when
/// bad, and filled in; the packet leaves on its peer port with that port's
/// MAC as source and its `peer_mac` as destination (testpmd's `csum`
/// engine with its checksums computed in software). Up to two VLAN tags
/// are skipped; IP fragments get their IP checksum only.
#[derive(Clone, Debug)]
pub struct Csum {
    peers: Peers,
    /// Per output port: (source MAC, destination MAC).
    addrs: Box<[(MacAddr, MacAddr)]>,
    events: [u64; CsumEvent::COUNT],
}

impl Csum {
    /// `addrs[p]` is (own MAC, peer MAC) of port `p`.
    pub fn new(peers: Peers, addrs: Vec<(MacAddr, MacAddr)>) -> Self {
        Csum {
            peers,
            addrs: addrs.into_boxed_slice(),
            events: [0; CsumEvent::COUNT],
        }
    }

    /// Verifies and fills the TCP/UDP checksum of `l4` (whose pseudo-header
    /// sums to `pseudo`).
    fn l4(&mut self, proto: u8, l4: &mut [u8], pseudo: u64) {
        let at = match proto {
            IpProto::UDP if l4.len() >= 8 && l4[6..8] != [0, 0] => 6,
            IpProto::TCP if l4.len() >= 20 => 16,
            _ => return,
        };
        if checksum::fold(checksum::sum(l4, pseudo)) != 0xffff {
            self.events[CsumEvent::BadL4 as usize] += 1;
        }
        l4[at..at + 2].copy_from_slice(&[0, 0]);
        let mut c = !checksum::fold(checksum::sum(l4, pseudo));
        if c == 0 && proto == IpProto::UDP {
            c = 0xffff;
        }
        l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
}

impl ForwardMode for Csum {
    const NAME: &'static str = "csum";
    const EVENTS: &'static [&'static str] = CsumEvent::NAMES;

    fn process<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        let out = self.peers.of(in_port);
        let b = pkt.bytes_mut();
        let Ok((ethertype, off, _)) = l3_offset(b) else {
            return Verdict::Drop(DropReason::Truncated);
        };
        if let Some(&(src, dst)) = self.addrs.get(usize::from(out)) {
            b[0..6].copy_from_slice(&dst.0);
            b[6..12].copy_from_slice(&src.0);
        }
        match ethertype {
            EtherType::IPV4 => {
                let Ok(ip) = Ipv4Packet::new_checked(&b[off..]) else {
                    return Verdict::Forward(out);
                };
                if !ip.verify_checksum() {
                    self.events[CsumEvent::BadIp as usize] += 1;
                }
                let (h, total) = (ip.header_len(), usize::from(ip.total_len()));
                let (src, dst, proto) = (ip.src(), ip.dst(), ip.protocol());
                let fragment = ip.flags_frag() & 0x3fff != 0;
                Ipv4Packet::new_unchecked(&mut b[off..]).fill_checksum();
                if !fragment {
                    let end = (off + total).min(b.len());
                    let l4 = &mut b[off + h..end];
                    let pseudo = checksum::pseudo_v4(src, dst, proto, l4.len() as u16);
                    self.l4(proto, l4, pseudo);
                }
            }
            EtherType::IPV6 => {
                let Ok(ip) = Ipv6Packet::new_checked(&b[off..]) else {
                    return Verdict::Forward(out);
                };
                let (src, dst) = (ip.src(), ip.dst());
                let end = (off + 40 + usize::from(ip.payload_len())).min(b.len());
                if let Ok((proto, at)) = ip.upper_layer() {
                    if off + at <= end {
                        let l4 = &mut b[off + at..end];
                        let pseudo = checksum::pseudo_v6(src, dst, proto, l4.len() as u32);
                        self.l4(proto, l4, pseudo);
                    }
                }
            }
            _ => {}
        }
        Verdict::Forward(out)
    }

    fn events(&self) -> &[u64] {
        &self.events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PORT: MacAddr = MacAddr([2, 0x51, 0, 0, 0, 0]);
    const HOST: MacAddr = MacAddr([2, 0x5e, 0, 0, 0, 1]);

    fn arp_request(vlan: bool) -> Vec<u8> {
        let mut f = vec![0xffu8; 6];
        f.extend_from_slice(&HOST.0);
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        }
        f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&HOST.0);
        f.extend_from_slice(&[198, 18, 0, 2]);
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&[198, 18, 0, 77]);
        f
    }

    fn echo(dst: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 16];
        f[0..6].copy_from_slice(&PORT.0);
        f[6..12].copy_from_slice(&HOST.0);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut f[14..34]);
            ip.set_version_ihl(20);
            ip.set_total_len(36);
            ip.set_ttl(9);
            ip.set_protocol(IpProto::ICMP);
            ip.set_src([198, 18, 0, 2]);
            ip.set_dst(dst);
            ip.fill_checksum();
        }
        f[34] = 8;
        f[38..42].copy_from_slice(&[0, 7, 0, 1]);
        f[42..50].copy_from_slice(b"pingpong");
        let c = !checksum::fold(checksum::sum(&f[34..], 0));
        f[36..38].copy_from_slice(&c.to_be_bytes());
        f
    }

    #[test]
    fn answers_arp_for_any_address_with_the_port_mac() {
        let mut m = IcmpEcho::new(vec![PORT]);
        for vlan in [false, true] {
            let mut f = arp_request(vlan);
            assert_eq!(m.process(&mut f, 0), Verdict::Forward(0));
            let off = if vlan { 18 } else { 14 };
            assert_eq!(&f[0..6], &HOST.0);
            assert_eq!(&f[6..12], &PORT.0);
            if vlan {
                assert_eq!(&f[12..16], &[0x81, 0x00, 0x00, 0x07], "the tag stays");
            }
            let a = ArpPacket::new_checked(&f[off..]).unwrap();
            assert_eq!(a.oper(), ARP_REPLY);
            assert_eq!((a.sha(), a.spa()), (PORT, [198, 18, 0, 77]));
            assert_eq!((a.tha(), a.tpa()), (HOST, [198, 18, 0, 2]));
        }
        // A reply is not answered.
        let mut f = arp_request(false);
        f[21] = 2;
        assert_eq!(m.process(&mut f, 0), Verdict::Drop(DropReason::Consumed));
    }

    #[test]
    fn answers_echo_requests_with_valid_checksums() {
        let mut m = IcmpEcho::new(vec![PORT]);
        let mut f = echo([198, 18, 0, 1]);
        assert_eq!(m.process(&mut f, 0), Verdict::Forward(0));
        assert_eq!((&f[0..6], &f[6..12]), (&HOST.0[..], &PORT.0[..]));
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(
            (ip.src(), ip.dst(), ip.ttl()),
            ([198, 18, 0, 1], [198, 18, 0, 2], 9)
        );
        assert!(ip.verify_checksum());
        assert_eq!(f[34], 0);
        assert_eq!(checksum::fold(checksum::sum(&f[34..], 0)), 0xffff);
        assert_eq!(&f[42..50], b"pingpong");
        // To a group: from the asker's neighbour address.
        let mut f = echo([224, 0, 0, 1]);
        assert_eq!(m.process(&mut f, 0), Verdict::Forward(0));
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert_eq!((ip.src(), ip.dst()), ([198, 18, 0, 1], [198, 18, 0, 2]));
        assert!(ip.verify_checksum());
        // Anything else is used up; a runt is truncated.
        let mut f = echo([198, 18, 0, 1]);
        f[34] = 0;
        assert_eq!(m.process(&mut f, 0), Verdict::Drop(DropReason::Consumed));
        assert_eq!(
            m.process(&mut vec![0u8; 10], 0),
            Verdict::Drop(DropReason::Truncated)
        );
        assert_eq!(
            RxOnly.process(&mut echo([1, 2, 3, 4]), 0),
            Verdict::Drop(DropReason::Consumed)
        );
    }

    #[test]
    fn csum_counts_and_fixes_bad_checksums_and_keeps_good_ones() {
        let peer = MacAddr([2, 0, 0, 0, 0, 0]);
        let mut m = Csum::new(Peers::paired(1), vec![(PORT, peer)]);
        // A UDP packet with a valid checksum, an ICMP echo.
        let mut udp = echo([198, 18, 0, 1]);
        udp[23] = IpProto::UDP;
        udp[34..42].copy_from_slice(&[0x04, 0x00, 0x00, 0x09, 0x00, 0x10, 0, 0]);
        Ipv4Packet::new_unchecked(&mut udp[14..34]).fill_checksum();
        let ph = checksum::pseudo_v4([198, 18, 0, 2], [198, 18, 0, 1], IpProto::UDP, 16);
        let c = !checksum::fold(checksum::sum(&udp[34..], ph));
        udp[40..42].copy_from_slice(&c.to_be_bytes());
        let good = udp.clone();
        assert_eq!(m.process(&mut udp, 0), Verdict::Forward(0));
        assert_eq!(&udp[0..6], &peer.0);
        assert_eq!(&udp[6..12], &PORT.0);
        assert_eq!(&udp[12..], &good[12..], "good checksums stay");
        assert_eq!(m.events(), &[0, 0]);
        // Both checksums broken: counted, and fixed to what they were.
        let mut bad = good.clone();
        bad[24] ^= 0xff;
        bad[40] ^= 0xff;
        m.process(&mut bad, 0);
        assert_eq!(m.events(), &[1, 1]);
        assert_eq!(&bad[12..], &good[12..]);
        // UDP without a checksum keeps none.
        let mut none = good.clone();
        none[40..42].copy_from_slice(&[0, 0]);
        m.process(&mut none, 0);
        assert_eq!(&none[40..42], &[0, 0]);
        assert_eq!(m.events(), &[1, 1]);
    }
}
