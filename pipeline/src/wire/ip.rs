//! IPv4 (options inside the header length) and IPv6 header views, the IPv6
//! extension-header walk to the upper layer, and the protocol numbers.

use super::WireError;
use crate::checksum;

mod field {
    use std::ops::Range;
    // IPv4 (RFC 791)
    pub const VER_IHL: usize = 0;
    pub const TOTAL_LEN: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLAGS_FRAG: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTO: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC4: Range<usize> = 12..16;
    pub const DST4: Range<usize> = 16..20;
    // IPv6 (RFC 8200)
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC6: Range<usize> = 8..24;
    pub const DST6: Range<usize> = 24..40;
}

/// Minimum IPv4 header length (IHL 5).
pub const IPV4_MIN_HEADER_LEN: usize = 20;
/// Fixed IPv6 header length.
pub const IPV6_HEADER_LEN: usize = 40;
/// Bytes of a UDP or TCP header that hold the two ports.
pub const L4_PORTS_LEN: usize = 4;

/// IP protocol numbers the pipeline knows.
#[derive(Clone, Copy, Debug)]
pub struct IpProto;

impl IpProto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// A view of an IPv4 packet (header and payload).
#[derive(Debug)]
pub struct Ipv4Packet<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps `buf` without checks. Use only on bytes this program built.
    pub fn new_unchecked(buf: T) -> Self {
        Ipv4Packet { buf }
    }

    /// Wraps `buf` after checking version 4, IHL >= 5, the header within the
    /// buffer and a total length between the header length and the buffer
    /// length (the frame may carry Ethernet padding after the packet).
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < IPV4_MIN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let p = Ipv4Packet { buf };
        if p.version() != 4 || p.header_len() < IPV4_MIN_HEADER_LEN {
            return Err(WireError::Malformed);
        }
        let len = p.buf.as_ref().len();
        if p.header_len() > len {
            return Err(WireError::Truncated);
        }
        let total = usize::from(p.total_len());
        if total < p.header_len() {
            return Err(WireError::Malformed);
        }
        if total > len {
            return Err(WireError::Truncated);
        }
        Ok(p)
    }

    /// IP version (4 for a valid packet).
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buf.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// Total length field.
    pub fn total_len(&self) -> u16 {
        let b = &self.buf.as_ref()[field::TOTAL_LEN];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Identification field.
    pub fn ident(&self) -> u16 {
        let b = &self.buf.as_ref()[field::IDENT];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Flags and fragment offset word.
    pub fn flags_frag(&self) -> u16 {
        let b = &self.buf.as_ref()[field::FLAGS_FRAG];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buf.as_ref()[field::TTL]
    }

    /// Protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.buf.as_ref()[field::PROTO]
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        let b = &self.buf.as_ref()[field::CHECKSUM];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Source address.
    pub fn src(&self) -> [u8; 4] {
        let b = &self.buf.as_ref()[field::SRC4];
        [b[0], b[1], b[2], b[3]]
    }

    /// Destination address.
    pub fn dst(&self) -> [u8; 4] {
        let b = &self.buf.as_ref()[field::DST4];
        [b[0], b[1], b[2], b[3]]
    }

    /// True when the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(&self.buf.as_ref()[..self.header_len()]) == 0
    }

    /// The payload, bounded by the total length field.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Writes version 4 and the header length (bytes, a multiple of 4).
    pub fn set_version_ihl(&mut self, header_len: usize) {
        self.buf.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, v: u16) {
        self.buf.as_mut()[field::TOTAL_LEN].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, v: u16) {
        self.buf.as_mut()[field::IDENT].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets flags and fragment offset.
    pub fn set_flags_frag(&mut self, v: u16) {
        self.buf.as_mut()[field::FLAGS_FRAG].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the TTL.
    pub fn set_ttl(&mut self, v: u8) {
        self.buf.as_mut()[field::TTL] = v;
    }

    /// Sets the protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.buf.as_mut()[field::PROTO] = v;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.buf.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the source address.
    pub fn set_src(&mut self, a: [u8; 4]) {
        self.buf.as_mut()[field::SRC4].copy_from_slice(&a);
    }

    /// Sets the destination address.
    pub fn set_dst(&mut self, a: [u8; 4]) {
        self.buf.as_mut()[field::DST4].copy_from_slice(&a);
    }

    /// Swaps source and destination (checksum-neutral).
    pub fn swap_addrs(&mut self) {
        let b = &mut self.buf.as_mut()[field::SRC4.start..field::DST4.end];
        let (s, d) = b.split_at_mut(4);
        s.swap_with_slice(d);
    }

    /// Recomputes the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(&self.buf.as_ref()[..self.header_len()]);
        self.set_checksum(c);
    }

    /// The payload, bounded by the total length field, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, t) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buf.as_mut()[h..t]
    }
}

/// A view of an IPv6 packet (fixed header and payload).
#[derive(Debug)]
pub struct Ipv6Packet<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps `buf` without checks. Use only on bytes this program built.
    pub fn new_unchecked(buf: T) -> Self {
        Ipv6Packet { buf }
    }

    /// Wraps `buf` after checking version 6 and that the payload length fits.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < IPV6_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let p = Ipv6Packet { buf };
        if p.version() != 6 {
            return Err(WireError::Malformed);
        }
        if IPV6_HEADER_LEN + usize::from(p.payload_len()) > p.buf.as_ref().len() {
            return Err(WireError::Truncated);
        }
        Ok(p)
    }

    /// IP version (6 for a valid packet).
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[0] >> 4
    }

    /// Payload length field.
    pub fn payload_len(&self) -> u16 {
        let b = &self.buf.as_ref()[field::PAYLOAD_LEN];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buf.as_ref()[field::NEXT_HEADER]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buf.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buf.as_ref()[field::SRC6]);
        a
    }

    /// Destination address.
    pub fn dst(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buf.as_ref()[field::DST6]);
        a
    }

    /// The payload, bounded by the payload length field.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[IPV6_HEADER_LEN..IPV6_HEADER_LEN + usize::from(self.payload_len())]
    }

    /// Walks the extension headers (hop-by-hop, routing, fragment,
    /// destination options, AH) to the upper-layer header: its protocol and
    /// its offset from the start of the IPv6 header. A non-first fragment
    /// has no upper-layer header: it yields protocol 44 (fragment) and the
    /// fragment header's offset. More than 8 extension headers, or one that
    /// runs past the payload, is an error.
    pub fn upper_layer(&self) -> Result<(u8, usize), WireError> {
        self.headers().map(|(p, off, _)| (p, off))
    }

    /// [`Ipv6Packet::upper_layer`], with the offset of the fragment header
    /// it passed on the way, if any (a first fragment's).
    pub fn headers(&self) -> Result<(u8, usize, Option<usize>), WireError> {
        let b = self.buf.as_ref();
        let end = IPV6_HEADER_LEN + usize::from(self.payload_len());
        let mut next = self.next_header();
        let mut off = IPV6_HEADER_LEN;
        let mut frag = None;
        for _ in 0..8 {
            let len = match next {
                0 | 43 | 60 => {
                    let l = b.get(off + 1).ok_or(WireError::Truncated)?;
                    (usize::from(*l) + 1) * 8
                }
                51 => {
                    let l = b.get(off + 1).ok_or(WireError::Truncated)?;
                    (usize::from(*l) + 2) * 4
                }
                44 => {
                    let f = b.get(off..off + 8).ok_or(WireError::Truncated)?;
                    if u16::from_be_bytes([f[2], f[3]]) >> 3 != 0 {
                        return Ok((44, off, None));
                    }
                    frag = Some(off);
                    8
                }
                _ => return Ok((next, off, frag)),
            };
            if off + len > end {
                return Err(WireError::Truncated);
            }
            next = b[off];
            off += len;
        }
        Err(WireError::Malformed)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Writes version 6 with traffic class and flow label zero.
    pub fn set_version(&mut self) {
        self.buf.as_mut()[..4].copy_from_slice(&[0x60, 0, 0, 0]);
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        self.buf.as_mut()[field::PAYLOAD_LEN].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buf.as_mut()[field::NEXT_HEADER] = v;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buf.as_mut()[field::HOP_LIMIT] = v;
    }

    /// Sets the source address.
    pub fn set_src(&mut self, a: [u8; 16]) {
        self.buf.as_mut()[field::SRC6].copy_from_slice(&a);
    }

    /// Sets the destination address.
    pub fn set_dst(&mut self, a: [u8; 16]) {
        self.buf.as_mut()[field::DST6].copy_from_slice(&a);
    }

    /// Swaps source and destination (checksum-neutral).
    pub fn swap_addrs(&mut self) {
        let b = &mut self.buf.as_mut()[field::SRC6.start..field::DST6.end];
        let (s, d) = b.split_at_mut(16);
        s.swap_with_slice(d);
    }

    /// The payload, bounded by the payload length field, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = IPV6_HEADER_LEN + usize::from(self.payload_len());
        &mut self.buf.as_mut()[IPV6_HEADER_LEN..end]
    }
}

/// A view of the port fields at the start of a UDP or TCP header.
#[derive(Debug)]
pub struct L4Ports<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> L4Ports<T> {
    /// Wraps `buf` after checking it holds both ports.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < L4_PORTS_LEN {
            return Err(WireError::Truncated);
        }
        Ok(L4Ports { buf })
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        let b = self.buf.as_ref();
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        let b = self.buf.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> L4Ports<T> {
    /// Swaps source and destination port (checksum-neutral).
    pub fn swap(&mut self) {
        let b = self.buf.as_mut();
        b.swap(0, 2);
        b.swap(1, 3);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // IPv4/UDP 198.18.0.1:1024 -> 198.19.0.1:80, TTL 64, 4 payload bytes,
    // followed by 2 bytes of Ethernet padding.
    const V4_UDP: [u8; 34] = [
        0x45, 0x00, 0x00, 0x20, // ver 4 ihl 5, tos, total len 32
        0x00, 0x01, 0x40, 0x00, // ident 1, DF
        0x40, 0x11, 0x00, 0x00, // ttl 64, udp, checksum (filled in test)
        198, 18, 0, 1, // src
        198, 19, 0, 1, // dst
        0x04, 0x00, 0x00, 0x50, // sport 1024, dport 80
        0x00, 0x0c, 0x00, 0x00, // udp len 12, no checksum
        0xde, 0xad, 0xbe, 0xef, // payload
        0x00, 0x00, // padding
    ];

    #[test]
    fn ipv4_parse_and_checksum() {
        let mut b = V4_UDP;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 32);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), IpProto::UDP);
        assert_eq!(p.src(), [198, 18, 0, 1]);
        assert_eq!(
            p.payload().len(),
            12,
            "payload stops at total length, not padding"
        );
        p.swap_addrs();
        assert!(p.verify_checksum(), "swap is checksum-neutral");
        assert_eq!(p.dst(), [198, 18, 0, 1]);
        let mut l4 = L4Ports::new_checked(p.payload_mut()).unwrap();
        l4.swap();
        assert_eq!((l4.src_port(), l4.dst_port()), (80, 1024));
    }

    #[test]
    fn ipv4_rejects_bad_layouts() {
        let mut bad_ihl = V4_UDP;
        bad_ihl[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&bad_ihl[..]).unwrap_err(),
            WireError::Malformed
        );
        let mut bad_ver = V4_UDP;
        bad_ver[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&bad_ver[..]).unwrap_err(),
            WireError::Malformed
        );
        let mut too_long = V4_UDP;
        too_long[3] = 0xff;
        assert_eq!(
            Ipv4Packet::new_checked(&too_long[..]).unwrap_err(),
            WireError::Truncated
        );
        let mut too_short = V4_UDP;
        too_short[3] = 19;
        assert_eq!(
            Ipv4Packet::new_checked(&too_short[..]).unwrap_err(),
            WireError::Malformed
        );
        assert_eq!(
            Ipv4Packet::new_checked(&V4_UDP[..19]).unwrap_err(),
            WireError::Truncated
        );
    }

    /// IPv6 with hop-by-hop (8 bytes) and a first fragment header before
    /// UDP; then a non-first fragment.
    #[test]
    fn ipv6_extension_walk() {
        let mut b = [0u8; 40 + 8 + 8 + 8];
        {
            let mut p = Ipv6Packet::new_unchecked(&mut b[..]);
            p.set_version();
            p.set_payload_len(24);
            p.set_next_header(0); // hop-by-hop
        }
        b[40] = 44; // next: fragment
        b[41] = 0; // 8 bytes
        b[48] = IpProto::UDP; // fragment header: next UDP, offset 0
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer().unwrap(), (IpProto::UDP, 56));
        b[50] = 0x01; // fragment offset 32 (non-first)
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer().unwrap(), (44, 48));
        b[41] = 9; // hop-by-hop claims 80 bytes
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer().unwrap_err(), WireError::Truncated);
    }

    #[test]
    fn ipv6_parse() {
        let mut b = [0u8; 48];
        let mut p = Ipv6Packet::new_unchecked(&mut b[..]);
        p.set_version();
        p.set_payload_len(8);
        p.set_next_header(IpProto::UDP);
        p.set_hop_limit(64);
        p.set_src([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 8);
        assert_eq!(p.next_header(), IpProto::UDP);
        assert_eq!(p.src()[15], 1);
        assert_eq!(
            Ipv6Packet::new_checked(&b[..47]).unwrap_err(),
            WireError::Truncated
        );
    }
}
