//! Ethernet II: MAC addresses, EtherTypes and the 14-byte frame header view.

use super::WireError;
use std::fmt;
use std::str::FromStr;

mod field {
    use std::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
}

/// Length of an untagged Ethernet II header.
pub const ETHERNET_HEADER_LEN: usize = 14;

/// A 48-bit MAC address.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Error parsing a MAC address string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MacParseError;

impl fmt::Display for MacParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected a MAC address such as 02:00:00:00:00:01")
    }
}

impl std::error::Error for MacParseError {}

impl FromStr for MacAddr {
    type Err = MacParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for b in &mut out {
            let p = parts.next().ok_or(MacParseError)?;
            if p.len() != 2 {
                return Err(MacParseError);
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| MacParseError)?;
        }
        if parts.next().is_some() {
            return Err(MacParseError);
        }
        Ok(MacAddr(out))
    }
}

/// EtherType values the pipeline knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtherType;

impl EtherType {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service tag (QinQ outer).
    pub const QINQ: u16 = 0x88a8;
}

/// A view of an Ethernet II frame.
#[derive(Debug)]
pub struct EthernetFrame<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buf` without checking its length; accessors may panic on a
    /// short buffer. Use only on bytes this program built itself.
    pub fn new_unchecked(buf: T) -> Self {
        EthernetFrame { buf }
    }

    /// Wraps `buf` after checking that it holds a whole Ethernet header.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < ETHERNET_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(EthernetFrame { buf })
    }

    /// Destination MAC.
    pub fn dst(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buf.as_ref()[field::DST]);
        MacAddr(m)
    }

    /// Source MAC.
    pub fn src(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buf.as_ref()[field::SRC]);
        MacAddr(m)
    }

    /// EtherType (or TPID of the first tag).
    pub fn ethertype(&self) -> u16 {
        let b = &self.buf.as_ref()[field::ETHERTYPE];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[ETHERNET_HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC.
    pub fn set_dst(&mut self, m: MacAddr) {
        self.buf.as_mut()[field::DST].copy_from_slice(&m.0);
    }

    /// Sets the source MAC.
    pub fn set_src(&mut self, m: MacAddr) {
        self.buf.as_mut()[field::SRC].copy_from_slice(&m.0);
    }

    /// Sets the EtherType.
    pub fn set_ethertype(&mut self, t: u16) {
        self.buf.as_mut()[field::ETHERTYPE].copy_from_slice(&t.to_be_bytes());
    }

    /// Swaps source and destination MAC in place.
    pub fn swap_addrs(&mut self) {
        // Both addresses are read (one 8- and one 4-byte load) before
        // either is written: byte-wise swapping interleaves loads with
        // stores to the same 16 bytes, which stalls store forwarding.
        let b = &mut self.buf.as_mut()[..12];
        let lo = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        let hi = u64::from(u32::from_le_bytes([b[8], b[9], b[10], b[11]]));
        let dst = lo & 0xffff_ffff_ffff;
        let src = (lo >> 48) | (hi << 16);
        b[..8].copy_from_slice(&(src | (dst << 48)).to_le_bytes());
        b[8..].copy_from_slice(&((dst >> 16) as u32).to_le_bytes());
    }

    /// The bytes after the header, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[ETHERNET_HEADER_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // dst 00:11:22:33:44:55, src 66:77:88:99:aa:bb, type IPv4, 2 payload bytes
    const FRAME: [u8; 16] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, // dst
        0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, // src
        0x08, 0x00, // ethertype
        0xde, 0xad, // payload
    ];

    #[test]
    fn parse_fields() {
        let f = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst().to_string(), "00:11:22:33:44:55");
        assert_eq!(f.src().to_string(), "66:77:88:99:aa:bb");
        assert_eq!(f.ethertype(), EtherType::IPV4);
        assert_eq!(f.payload(), &[0xde, 0xad]);
    }

    #[test]
    fn short_frame_is_truncated() {
        assert_eq!(
            EthernetFrame::new_checked(&FRAME[..13]).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn swap_and_set() {
        let mut b = FRAME;
        let mut f = EthernetFrame::new_checked(&mut b[..]).unwrap();
        f.swap_addrs();
        assert_eq!(f.dst().to_string(), "66:77:88:99:aa:bb");
        assert_eq!(f.src().to_string(), "00:11:22:33:44:55");
        f.set_src("02:00:00:00:00:01".parse().unwrap());
        assert_eq!(f.src().0, [2, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn mac_parse() {
        assert_eq!(
            "02-00-00-00-00-0a".parse::<MacAddr>().unwrap().0,
            [2, 0, 0, 0, 0, 10]
        );
        assert!("02:00:00:00:00".parse::<MacAddr>().is_err());
        assert!("02:00:00:00:00:01:02".parse::<MacAddr>().is_err());
        assert!("zz:00:00:00:00:01".parse::<MacAddr>().is_err());
    }
}
