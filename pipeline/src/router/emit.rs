//! Writing the headers of the packets the router sends itself (ICMP
//! errors, ARP requests, Neighbor Solicitations and Advertisements): the
//! Ethernet header, and an IPv6 header carrying ICMPv6 with the ICMPv6
//! checksum.

use crate::checksum;
use crate::wire::{IpProto, Ipv6Packet, MacAddr, ETHERNET_HEADER_LEN};

/// Writes the Ethernet header of frame `b`.
#[inline]
pub(super) fn ethernet(b: &mut [u8], dst: [u8; 6], src: MacAddr, ethertype: u16) {
    b[0..6].copy_from_slice(&dst);
    b[6..12].copy_from_slice(&src.0);
    b[12..14].copy_from_slice(&ethertype.to_be_bytes());
}

/// Writes the IPv6 header of frame `b` for an ICMPv6 message of `len`
/// bytes already in place behind it (checksum field zero), and fills the
/// message's checksum.
pub(super) fn icmp6(b: &mut [u8], hop_limit: u8, src: [u8; 16], dst: [u8; 16], len: usize) {
    {
        let mut ip = Ipv6Packet::new_unchecked(&mut b[ETHERNET_HEADER_LEN..]);
        ip.set_version();
        ip.set_payload_len(len as u16);
        ip.set_next_header(IpProto::ICMPV6);
        ip.set_hop_limit(hop_limit);
        ip.set_src(src);
        ip.set_dst(dst);
    }
    let l4 = ETHERNET_HEADER_LEN + 40;
    let icmp = &mut b[l4..l4 + len];
    let c = !checksum::fold(checksum::sum(
        icmp,
        checksum::pseudo_v6(src, dst, IpProto::ICMPV6, len as u32),
    ));
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
}
