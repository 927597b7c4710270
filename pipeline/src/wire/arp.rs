//! ARP for IPv4 over Ethernet (RFC 826): the 28-byte packet view.

use super::{MacAddr, WireError};

mod field {
    use std::ops::Range;
    pub const FIXED: Range<usize> = 0..6; // htype, ptype, hlen, plen
    pub const OPER: Range<usize> = 6..8;
    pub const SHA: Range<usize> = 8..14;
    pub const SPA: Range<usize> = 14..18;
    pub const THA: Range<usize> = 18..24;
    pub const TPA: Range<usize> = 24..28;
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const ARP_LEN: usize = 28;

/// ARP operation: request.
pub const ARP_REQUEST: u16 = 1;
/// ARP operation: reply.
pub const ARP_REPLY: u16 = 2;

/// A view of an ARP packet for IPv4 over Ethernet (RFC 826).
#[derive(Debug)]
pub struct ArpPacket<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wraps `buf` without checks. Use only on bytes this program built.
    pub fn new_unchecked(buf: T) -> Self {
        ArpPacket { buf }
    }

    /// Wraps `buf` after checking the length and that it is Ethernet/IPv4
    /// ARP (htype 1, ptype 0x0800, hlen 6, plen 4).
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < ARP_LEN {
            return Err(WireError::Truncated);
        }
        if b[field::FIXED] != [0, 1, 0x08, 0x00, 6, 4] {
            return Err(WireError::Malformed);
        }
        Ok(ArpPacket { buf })
    }

    /// Operation (1 request, 2 reply).
    pub fn oper(&self) -> u16 {
        let b = &self.buf.as_ref()[field::OPER];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Sender hardware address.
    pub fn sha(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buf.as_ref()[field::SHA]);
        MacAddr(m)
    }

    /// Sender protocol address.
    pub fn spa(&self) -> [u8; 4] {
        let b = &self.buf.as_ref()[field::SPA];
        [b[0], b[1], b[2], b[3]]
    }

    /// Target hardware address.
    pub fn tha(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buf.as_ref()[field::THA]);
        MacAddr(m)
    }

    /// Target protocol address.
    pub fn tpa(&self) -> [u8; 4] {
        let b = &self.buf.as_ref()[field::TPA];
        [b[0], b[1], b[2], b[3]]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Writes the Ethernet/IPv4 fixed fields.
    pub fn set_fixed(&mut self) {
        self.buf.as_mut()[field::FIXED].copy_from_slice(&[0, 1, 0x08, 0x00, 6, 4]);
    }

    /// Sets the operation.
    pub fn set_oper(&mut self, op: u16) {
        self.buf.as_mut()[field::OPER].copy_from_slice(&op.to_be_bytes());
    }

    /// Sets the sender addresses.
    pub fn set_sender(&mut self, mac: MacAddr, ip: [u8; 4]) {
        self.buf.as_mut()[field::SHA].copy_from_slice(&mac.0);
        self.buf.as_mut()[field::SPA].copy_from_slice(&ip);
    }

    /// Sets the target addresses.
    pub fn set_target(&mut self, mac: MacAddr, ip: [u8; 4]) {
        self.buf.as_mut()[field::THA].copy_from_slice(&mac.0);
        self.buf.as_mut()[field::TPA].copy_from_slice(&ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Who has 198.18.0.1? Tell 198.18.0.10 (02:aa:00:00:00:01)
    const REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, // Ethernet, IPv4, 6, 4
        0x00, 0x01, // request
        0x02, 0xaa, 0x00, 0x00, 0x00, 0x01, // sha
        198, 18, 0, 10, // spa
        0, 0, 0, 0, 0, 0, // tha
        198, 18, 0, 1, // tpa
    ];

    #[test]
    fn parse_and_answer() {
        let a = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(a.oper(), ARP_REQUEST);
        assert_eq!(a.sha().to_string(), "02:aa:00:00:00:01");
        assert_eq!((a.spa(), a.tpa()), ([198, 18, 0, 10], [198, 18, 0, 1]));
        let mut b = REQUEST;
        let mut r = ArpPacket::new_checked(&mut b[..]).unwrap();
        r.set_oper(ARP_REPLY);
        r.set_target(MacAddr([2, 0xaa, 0, 0, 0, 1]), [198, 18, 0, 10]);
        r.set_sender(MacAddr([2, 0x51, 0, 0, 0, 0]), [198, 18, 0, 1]);
        assert_eq!(r.tha().0, [2, 0xaa, 0, 0, 0, 1]);
        assert_eq!(r.oper(), ARP_REPLY);
    }

    #[test]
    fn rejects_other_hardware_and_short() {
        let mut b = REQUEST;
        b[5] = 16; // IPv6-sized protocol addresses
        assert_eq!(
            ArpPacket::new_checked(&b[..]).unwrap_err(),
            WireError::Malformed
        );
        assert_eq!(
            ArpPacket::new_checked(&REQUEST[..27]).unwrap_err(),
            WireError::Truncated
        );
    }
}
