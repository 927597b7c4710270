//! The ICMP errors a router owes its hosts (RFC 1812 4.3.2.7, RFC 4443):
//! Time Exceeded, Destination Unreachable, Fragmentation Needed / Packet
//! Too Big, never about ICMP errors, non-first fragments or martian
//! sources, and all under one per-core token bucket shared with ARP and
//! ND requests.

use super::ipv4::martian;
use super::{emit, Event, Router};
use crate::fwd::Frame;
use crate::verdict::{DropReason, Verdict};
use crate::wire::{EtherType, IcmpPacket, IpProto, Ipv4Packet, Ipv6Packet, ETHERNET_HEADER_LEN};

/// Longest IPv4 header plus 8 bytes: what an ICMP error quotes.
const QUOTE_MAX: usize = 60 + 8;

impl Router {
    pub(super) fn burst(rate: u32) -> f64 {
        f64::from(rate / 10).max(1.0)
    }

    pub(crate) fn take_token(&mut self) -> bool {
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            self.count(Event::IcmpRateLimited);
            false
        }
    }

    /// Turns the packet into an ICMPv4 error back to its source, or drops it
    /// with `reason` when no error may be sent (RFC 1812 4.3.2.7) or the
    /// rate limit is spent.
    pub(crate) fn icmp4_error(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        ty: u8,
        code: u8,
        extra: u32,
        reason: DropReason,
    ) -> Verdict {
        self.icmp4_error_from(pkt, in_port, ty, code, extra, reason, false)
    }

    /// [`Router::icmp4_error`], sent from the packet's destination when
    /// `from_dst` (a packet for one of the router's own addresses: a host
    /// answers from the address it was sent to), else from the receiving
    /// interface's address.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn icmp4_error_from(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        ty: u8,
        code: u8,
        extra: u32,
        reason: DropReason,
        from_dst: bool,
    ) -> Verdict {
        let Some((mut our, our_mac)) = self.source4(in_port) else {
            return Verdict::Drop(reason);
        };
        let b = pkt.bytes();
        let ip = Ipv4Packet::new_unchecked(&b[ETHERNET_HEADER_LEN..]);
        if from_dst {
            our = ip.dst().into();
        }
        let src = u32::from_be_bytes(ip.src());
        let h = ip.header_len();
        let payload = ip.payload();
        let is_icmp_error = ip.protocol() == IpProto::ICMP
            && IcmpPacket::new_checked(payload).is_ok_and(|i| i.is_v4_error());
        if ip.flags_frag() & 0x1fff != 0 || is_icmp_error || martian(src) || src == 0 {
            return Verdict::Drop(reason);
        }
        if !self.take_token() {
            return Verdict::Drop(reason);
        }
        let qlen = h + payload.len().min(8);
        let mut quote = [0u8; QUOTE_MAX];
        quote[..qlen].copy_from_slice(&b[ETHERNET_HEADER_LEN..ETHERNET_HEADER_LEN + qlen]);
        let mut src_mac = [0u8; 6];
        src_mac.copy_from_slice(&b[6..12]);
        let len = ETHERNET_HEADER_LEN + 20 + 8 + qlen;
        if !pkt.set_len(len) {
            return Verdict::Drop(reason);
        }
        let b = pkt.bytes_mut();
        emit::ethernet(b, src_mac, our_mac, EtherType::IPV4);
        b[ETHERNET_HEADER_LEN + 1] = 0; // TOS
        {
            let mut ip =
                Ipv4Packet::new_unchecked(&mut b[ETHERNET_HEADER_LEN..ETHERNET_HEADER_LEN + 20]);
            ip.set_version_ihl(20);
            ip.set_total_len((20 + 8 + qlen) as u16);
            ip.set_ident(0);
            ip.set_flags_frag(0);
            ip.set_ttl(64);
            ip.set_protocol(IpProto::ICMP);
            ip.set_src(our.octets());
            ip.set_dst(src.to_be_bytes());
            ip.fill_checksum();
        }
        let mut icmp = IcmpPacket::new_unchecked(&mut b[ETHERNET_HEADER_LEN + 20..len]);
        icmp.set_type_code(ty, code);
        icmp.set_rest(extra);
        icmp.body_mut().copy_from_slice(&quote[..qlen]);
        icmp.fill_v4();
        self.count(match ty {
            11 => Event::TimeExceeded,
            12 => Event::ParamProblem,
            _ if code == 4 => Event::FragNeeded,
            _ => Event::Unreachable,
        });
        Verdict::Forward(in_port)
    }

    /// Turns the packet into an ICMPv6 error back to its source (RFC 4443:
    /// as much of the invoking packet as fits in 1280 bytes), or drops it
    /// with `reason`.
    pub(crate) fn icmp6_error(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        ty: u8,
        code: u8,
        extra: u32,
        reason: DropReason,
    ) -> Verdict {
        self.icmp6_error_from(pkt, in_port, ty, code, extra, reason, false)
    }

    /// [`Router::icmp6_error`], from the packet's destination when
    /// `from_dst` (see [`Router::icmp4_error_from`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn icmp6_error_from(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        ty: u8,
        code: u8,
        extra: u32,
        reason: DropReason,
        from_dst: bool,
    ) -> Verdict {
        let Some((mut our, our_mac)) = self.source6(in_port) else {
            return Verdict::Drop(reason);
        };
        let b = pkt.bytes();
        let ip = Ipv6Packet::new_unchecked(&b[ETHERNET_HEADER_LEN..]);
        if from_dst {
            our = ip.dst().into();
        }
        let src = u128::from_be_bytes(ip.src());
        let l4 = ETHERNET_HEADER_LEN + 40;
        let is_error = match ip.upper_layer() {
            Ok((IpProto::ICMPV6, off)) => {
                b.get(ETHERNET_HEADER_LEN + off).is_some_and(|t| *t < 128)
            }
            _ => false,
        };
        if src == 0 || src >> 120 == 0xff || is_error {
            return Verdict::Drop(reason);
        }
        if !self.take_token() {
            return Verdict::Drop(reason);
        }
        let orig_len = (40 + usize::from(ip.payload_len())).min(b.len() - ETHERNET_HEADER_LEN);
        let q = orig_len.min(1280 - 48);
        let mut src_mac = [0u8; 6];
        src_mac.copy_from_slice(&b[6..12]);
        if !pkt.set_len(ETHERNET_HEADER_LEN + 48 + q) {
            return Verdict::Drop(reason);
        }
        let b = pkt.bytes_mut();
        b.copy_within(
            ETHERNET_HEADER_LEN..ETHERNET_HEADER_LEN + q,
            ETHERNET_HEADER_LEN + 48,
        );
        emit::ethernet(b, src_mac, our_mac, EtherType::IPV6);
        let icmp = &mut b[l4..l4 + 8 + q];
        icmp[0] = ty;
        icmp[1] = code;
        icmp[2..4].copy_from_slice(&[0, 0]);
        icmp[4..8].copy_from_slice(&extra.to_be_bytes());
        emit::icmp6(b, 64, our.octets(), src.to_be_bytes(), 8 + q);
        self.count(match ty {
            3 => Event::TimeExceeded,
            2 => Event::FragNeeded,
            _ => Event::Unreachable,
        });
        Verdict::Forward(in_port)
    }
}
