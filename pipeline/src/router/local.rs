//! What the router answers for its own addresses when no kernel does: a
//! TCP segment or UDP datagram that no TAP mirror carries to a real stack
//! is answered as Linux answers a port nothing listens on (a reset, an
//! ICMP port unreachable), and the input rules' rejects; the TCP reset
//! the gateway's firewall sends is built here too. Every answer leaves
//! from the address the packet was sent to, within the per-core ICMP
//! token bucket.

use super::{Event, Router};
use crate::checksum;
use crate::conntrack::{ACK, FIN, RST, SYN};
use crate::firewall::RejectWith;
use crate::fwd::Frame;
use crate::verdict::{DropReason, Verdict};
use crate::wire::{EtherType, IpProto, Ipv4Packet, Ipv6Packet, ETHERNET_HEADER_LEN as ETH};

impl Router {
    /// A packet for one of the router's addresses that nothing takes
    /// (the interface has no mirror): TCP is answered with a reset, UDP
    /// with port unreachable, as by a host with no socket there; the rest
    /// (other protocols, fragments, a reset, what the rate leaves) is
    /// dropped as `to_router`.
    pub(super) fn closed_port(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        match upper(pkt.bytes()) {
            Some((IpProto::TCP, v6)) => self.reject_counted(
                pkt,
                in_port,
                RejectWith::TcpReset,
                true,
                v6,
                DropReason::ToRouter,
            ),
            Some((IpProto::UDP, v6)) => self.reject_counted(
                pkt,
                in_port,
                RejectWith::PortUnreachable,
                false,
                v6,
                DropReason::ToRouter,
            ),
            _ => Verdict::Drop(DropReason::ToRouter),
        }
    }

    /// A packet for the router that an input rule rejects: a reset for
    /// TCP (`auto`, `tcp-reset`), else the ICMP unreachable `w` names;
    /// dropped as `punt_denied` when it may not be answered.
    pub(super) fn reject_local(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        w: RejectWith,
    ) -> Verdict {
        let reason = DropReason::PuntDenied;
        let Some((proto, v6)) = upper(pkt.bytes()) else {
            return Verdict::Drop(reason);
        };
        self.reject_counted(pkt, in_port, w, proto == IpProto::TCP, v6, reason)
    }

    /// [`Router::reject`] of a packet for the router (answered from the
    /// address it was sent to), its resets counted.
    fn reject_counted(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        w: RejectWith,
        tcp: bool,
        v6: bool,
        reason: DropReason,
    ) -> Verdict {
        let v = self.reject(pkt, in_port, w, tcp, v6, reason, true);
        if matches!(v, Verdict::Forward(_)) && resets(w, tcp) {
            self.count(Event::TcpReset);
        }
        v
    }

    /// A refused packet (IPv6 if `v6`) answered as `w` says: a TCP
    /// segment (`tcp`) with a reset under `auto` or `tcp-reset`, anything
    /// else with an ICMP/ICMPv6 destination unreachable (port unreachable,
    /// or administratively prohibited), sent from the packet's destination
    /// when `from_dst`, else from the receiving interface's address;
    /// dropped with `reason` when it may not be answered. The firewall's
    /// rejects and the router's own.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reject(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        w: RejectWith,
        tcp: bool,
        v6: bool,
        reason: DropReason,
        from_dst: bool,
    ) -> Verdict {
        if resets(w, tcp) {
            return self.tcp_reset(pkt, in_port, v6, reason);
        }
        let admin = w == RejectWith::AdminProhibited;
        if v6 {
            let code = if admin { 1 } else { 4 };
            self.icmp6_error_from(pkt, in_port, 1, code, 0, reason, from_dst)
        } else {
            let code = if admin { 13 } else { 3 };
            self.icmp4_error_from(pkt, in_port, 3, code, 0, reason, from_dst)
        }
    }

    /// Turns a TCP segment (a valid IPv4 or IPv6 packet) into the RST
    /// that refuses it (RFC 793 "Reset Generation"), from its
    /// destination, sent back out of `in_port`; dropped with `reason` if
    /// the segment is a reset itself or the ICMP rate is spent.
    fn tcp_reset(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        v6: bool,
        reason: DropReason,
    ) -> Verdict {
        let Some(mac) = self.iface(in_port).map(|i| i.mac) else {
            return Verdict::Drop(reason);
        };
        let b = pkt.bytes();
        let (hl, total) = if v6 {
            let ip = Ipv6Packet::new_unchecked(&b[ETH..]);
            match ip.upper_layer() {
                Ok((IpProto::TCP, off)) => (off, 40 + usize::from(ip.payload_len())),
                _ => return Verdict::Drop(reason),
            }
        } else {
            let ip = Ipv4Packet::new_unchecked(&b[ETH..]);
            (ip.header_len(), usize::from(ip.total_len()))
        };
        let Some(tcp) = b.get(ETH + hl..ETH + total).filter(|t| t.len() >= 20) else {
            return Verdict::Drop(reason);
        };
        let flags = u16::from(tcp[13]);
        if flags & RST != 0 || !self.take_token() {
            return Verdict::Drop(reason);
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
            return Verdict::Drop(reason);
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

/// Whether `w` answers a TCP segment (`tcp`) with a reset.
fn resets(w: RejectWith, tcp: bool) -> bool {
    tcp && matches!(w, RejectWith::Auto | RejectWith::TcpReset)
}

/// The transport protocol of the valid IP packet in frame `b` and whether
/// it is IPv6, if it can be answered: not a fragment (IPv4: neither a
/// later fragment nor one with more to come; IPv6: no fragment header).
fn upper(b: &[u8]) -> Option<(u8, bool)> {
    let l3 = b.get(ETH..)?;
    match l3.first()? >> 4 {
        4 => {
            let ip = Ipv4Packet::new_checked(l3).ok()?;
            (ip.flags_frag() & 0x3fff == 0).then(|| (ip.protocol(), false))
        }
        6 => {
            let ip = Ipv6Packet::new_checked(l3).ok()?;
            match ip.headers() {
                Ok((p, _, None)) if p != 44 => Some((p, true)),
                _ => None,
            }
        }
        _ => None,
    }
}
