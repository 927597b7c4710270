//! ICMPv4 and ICMPv6 headers: type, code, checksum and the rest-of-header
//! word, with the body an error quotes.

use super::WireError;
use crate::checksum;

/// Bytes of the ICMP (v4 and v6) header: type, code, checksum, and the
/// 4-byte rest-of-header (identifier/sequence, MTU, or unused).
pub const ICMP_HEADER_LEN: usize = 8;

/// A view of an ICMPv4 or ICMPv6 message (RFC 792, RFC 4443). The
/// checksum of ICMPv4 covers the message; that of ICMPv6 also a
/// pseudo-header.
#[derive(Debug)]
pub struct IcmpPacket<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// Wraps `buf` without checks. Use only on bytes this program built.
    pub fn new_unchecked(buf: T) -> Self {
        IcmpPacket { buf }
    }

    /// Wraps `buf` after checking it holds the 8-byte header.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < ICMP_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(IcmpPacket { buf })
    }

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buf.as_ref()[0]
    }

    /// Message code.
    pub fn code(&self) -> u8 {
        self.buf.as_ref()[1]
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        let b = self.buf.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }

    /// The rest-of-header word.
    pub fn rest(&self) -> u32 {
        let b = self.buf.as_ref();
        u32::from_be_bytes([b[4], b[5], b[6], b[7]])
    }

    /// The body after the header (the quoted packet, echo data, ...).
    pub fn body(&self) -> &[u8] {
        &self.buf.as_ref()[ICMP_HEADER_LEN..]
    }

    /// True when an ICMPv4 checksum verifies.
    pub fn verify_v4(&self) -> bool {
        checksum::checksum(self.buf.as_ref()) == 0
    }

    /// True when an ICMPv6 checksum verifies with the given pseudo-header
    /// sum ([`checksum::pseudo_v6`]).
    pub fn verify_v6(&self, pseudo: u64) -> bool {
        checksum::fold(checksum::sum(self.buf.as_ref(), pseudo)) == 0xffff
    }

    /// True for an ICMPv4 error message (which never causes another error).
    pub fn is_v4_error(&self) -> bool {
        matches!(self.msg_type(), 3 | 4 | 5 | 11 | 12)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpPacket<T> {
    /// Sets type and code.
    pub fn set_type_code(&mut self, ty: u8, code: u8) {
        let b = self.buf.as_mut();
        b[0] = ty;
        b[1] = code;
    }

    /// Sets the rest-of-header word.
    pub fn set_rest(&mut self, v: u32) {
        self.buf.as_mut()[4..8].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.buf.as_mut()[2..4].copy_from_slice(&v.to_be_bytes());
    }

    /// Computes the ICMPv4 checksum over the whole message.
    pub fn fill_v4(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buf.as_ref());
        self.set_checksum(c);
    }

    /// Computes the ICMPv6 checksum with the given pseudo-header sum.
    pub fn fill_v6(&mut self, pseudo: u64) {
        self.set_checksum(0);
        let c = !checksum::fold(checksum::sum(self.buf.as_ref(), pseudo));
        self.set_checksum(c);
    }

    /// The body, mutable.
    pub fn body_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[ICMP_HEADER_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Echo request id 0x1234 seq 1 with 4 bytes of data; checksum 0x482d.
    const ECHO: [u8; 12] = [
        0x08, 0x00, 0x48, 0x2d, // type 8, code 0, checksum
        0x12, 0x34, 0x00, 0x01, // id, seq
        0xde, 0xad, 0xbe, 0xef, // data
    ];

    #[test]
    fn echo_request() {
        let p = IcmpPacket::new_checked(&ECHO[..]).unwrap();
        assert_eq!((p.msg_type(), p.code(), p.rest()), (8, 0, 0x1234_0001));
        assert!(p.verify_v4(), "checksum {:04x}", p.checksum());
        assert!(!p.is_v4_error());
        assert_eq!(p.body(), &[0xde, 0xad, 0xbe, 0xef]);
        let mut b = ECHO;
        let mut r = IcmpPacket::new_checked(&mut b[..]).unwrap();
        r.set_type_code(0, 0);
        r.fill_v4();
        assert!(r.verify_v4());
        assert_eq!(
            IcmpPacket::new_checked(&ECHO[..7]).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn v6_checksum_with_pseudo_header() {
        let src = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let dst = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let mut b = [128u8, 0, 0, 0, 0, 1, 0, 1];
        let ph = checksum::pseudo_v6(src, dst, 58, 8);
        let mut p = IcmpPacket::new_checked(&mut b[..]).unwrap();
        p.fill_v6(ph);
        assert!(p.verify_v6(ph));
        assert!(!p.verify_v6(checksum::pseudo_v6(dst, dst, 58, 8)));
    }
}
