//! UDP and TCP header views, and the port pair common to both.

use super::WireError;

/// UDP header length.
pub const UDP_HEADER_LEN: usize = 8;
/// Minimum TCP header length.
pub const TCP_MIN_HEADER_LEN: usize = 20;

/// A view of a UDP datagram (RFC 768).
#[derive(Debug)]
pub struct UdpPacket<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps `buf` after checking the header fits and the length field lies
    /// between 8 and the buffer length.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < UDP_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let len = usize::from(u16::from_be_bytes([b[4], b[5]]));
        if len < UDP_HEADER_LEN {
            return Err(WireError::Malformed);
        }
        if len > b.len() {
            return Err(WireError::Truncated);
        }
        Ok(UdpPacket { buf })
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

    /// Length field (header + payload).
    pub fn len(&self) -> u16 {
        let b = self.buf.as_ref();
        u16::from_be_bytes([b[4], b[5]])
    }

    /// True when the length field says no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) == UDP_HEADER_LEN
    }

    /// Checksum field (0: none, IPv4 only).
    pub fn checksum(&self) -> u16 {
        let b = self.buf.as_ref();
        u16::from_be_bytes([b[6], b[7]])
    }

    /// The payload, bounded by the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[UDP_HEADER_LEN..usize::from(self.len())]
    }
}

/// TCP flag bits (in the low byte of the flags word).
#[derive(Clone, Copy, Debug)]
pub struct TcpFlags;

impl TcpFlags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// A view of a TCP segment (RFC 9293).
#[derive(Debug)]
pub struct TcpPacket<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps `buf` after checking the data offset (>= 5 words) and that the
    /// header with its options fits.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < TCP_MIN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let hl = usize::from(b[12] >> 4) * 4;
        if hl < TCP_MIN_HEADER_LEN {
            return Err(WireError::Malformed);
        }
        if hl > b.len() {
            return Err(WireError::Truncated);
        }
        Ok(TcpPacket { buf })
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

    /// Sequence number.
    pub fn seq(&self) -> u32 {
        let b = self.buf.as_ref();
        u32::from_be_bytes([b[4], b[5], b[6], b[7]])
    }

    /// Acknowledgement number.
    pub fn ack(&self) -> u32 {
        let b = self.buf.as_ref();
        u32::from_be_bytes([b[8], b[9], b[10], b[11]])
    }

    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buf.as_ref()[12] >> 4) * 4
    }

    /// Flags (see [`TcpFlags`]).
    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[13]
    }

    /// Window.
    pub fn window(&self) -> u16 {
        let b = self.buf.as_ref();
        u16::from_be_bytes([b[14], b[15]])
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        let b = self.buf.as_ref();
        u16::from_be_bytes([b[16], b[17]])
    }

    /// The payload after the header and options.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.header_len()..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_fields_and_bounds() {
        // 1024 -> 53, length 12, checksum 0, 4 bytes of payload, 2 of padding
        let d = [0x04, 0x00, 0x00, 0x35, 0x00, 0x0c, 0, 0, 1, 2, 3, 4, 0, 0];
        let u = UdpPacket::new_checked(&d[..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.len()), (1024, 53, 12));
        assert_eq!(u.payload(), &[1, 2, 3, 4]);
        let mut bad = d;
        bad[5] = 7;
        assert_eq!(
            UdpPacket::new_checked(&bad[..]).unwrap_err(),
            WireError::Malformed
        );
        bad[5] = 40;
        assert_eq!(
            UdpPacket::new_checked(&bad[..]).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn tcp_fields_and_options() {
        // 80 -> 40000, seq 1, ack 2, data offset 6 (4 bytes of options), SYN|ACK
        let mut s = [0u8; 26];
        s[0..4].copy_from_slice(&[0x00, 0x50, 0x9c, 0x40]);
        s[4..8].copy_from_slice(&1u32.to_be_bytes());
        s[8..12].copy_from_slice(&2u32.to_be_bytes());
        s[12] = 6 << 4;
        s[13] = TcpFlags::SYN | TcpFlags::ACK;
        s[14..16].copy_from_slice(&1024u16.to_be_bytes());
        s[20..24].copy_from_slice(&[2, 4, 0x05, 0xb4]); // MSS 1460
        s[24..26].copy_from_slice(&[0xaa, 0xbb]);
        let t = TcpPacket::new_checked(&s[..]).unwrap();
        assert_eq!(
            (t.src_port(), t.dst_port(), t.seq(), t.ack()),
            (80, 40000, 1, 2)
        );
        assert_eq!(t.header_len(), 24);
        assert_eq!(t.flags() & TcpFlags::SYN, TcpFlags::SYN);
        assert_eq!(t.window(), 1024);
        assert_eq!(t.payload(), &[0xaa, 0xbb]);
        let mut bad = s;
        bad[12] = 4 << 4;
        assert_eq!(
            TcpPacket::new_checked(&bad[..]).unwrap_err(),
            WireError::Malformed
        );
        bad[12] = 15 << 4;
        assert_eq!(
            TcpPacket::new_checked(&bad[..]).unwrap_err(),
            WireError::Truncated
        );
    }
}
