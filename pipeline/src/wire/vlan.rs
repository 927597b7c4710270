//! 802.1Q and 802.1ad (QinQ) tags: where the L3 header starts behind up to
//! two of them.

use super::{EtherType, WireError, ETHERNET_HEADER_LEN};

/// Bytes of one 802.1Q / 802.1ad tag.
pub const VLAN_TAG_LEN: usize = 4;

/// A view of one VLAN tag (the 4 bytes after a TPID of 0x8100 or 0x88a8:
/// TCI, then the next EtherType).
#[derive(Debug)]
pub struct VlanTag<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// Wraps `buf` after checking it holds a whole tag.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < VLAN_TAG_LEN {
            return Err(WireError::Truncated);
        }
        Ok(VlanTag { buf })
    }

    fn tci(&self) -> u16 {
        let b = self.buf.as_ref();
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Priority code point (802.1p).
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// Drop eligible indicator.
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// VLAN id.
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// EtherType (or TPID of the next tag) after this tag.
    pub fn ethertype(&self) -> u16 {
        let b = self.buf.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }
}

/// The layer-3 EtherType of a frame and where its header starts, after up to
/// two VLAN tags (single 802.1Q, or QinQ with an 802.1ad outer tag), with the
/// VLAN ids found (outer first; 0 where absent).
pub fn l3_offset(frame: &[u8]) -> Result<(u16, usize, [u16; 2]), WireError> {
    if frame.len() < ETHERNET_HEADER_LEN {
        return Err(WireError::Truncated);
    }
    let mut ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    let mut off = ETHERNET_HEADER_LEN;
    let mut vids = [0u16; 2];
    for vid in &mut vids {
        if ethertype != EtherType::VLAN && ethertype != EtherType::QINQ {
            break;
        }
        let tag = VlanTag::new_checked(&frame[off..])?;
        *vid = tag.vid();
        ethertype = tag.ethertype();
        off += VLAN_TAG_LEN;
    }
    if ethertype == EtherType::VLAN || ethertype == EtherType::QINQ {
        return Err(WireError::Malformed); // more than two tags
    }
    Ok((ethertype, off, vids))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_and_double_tags() {
        // dst, src, 802.1ad outer vid 100, 802.1Q inner vid 5 pcp 3, IPv4
        let qinq = [
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, //
            0x88, 0xa8, 0x00, 0x64, // outer: TPID 802.1ad, vid 100
            0x81, 0x00, 0x60, 0x05, // inner: TPID 802.1Q, pcp 3, vid 5
            0x08, 0x00, // IPv4
            0x45,
        ];
        assert_eq!(l3_offset(&qinq).unwrap(), (0x0800, 22, [100, 5]));
        let tag = VlanTag::new_checked(&qinq[18..]).unwrap();
        assert_eq!((tag.pcp(), tag.dei(), tag.vid()), (3, false, 5));
        let untagged = [0u8; 12]
            .iter()
            .chain(&[0x86, 0xdd])
            .copied()
            .collect::<Vec<_>>();
        assert_eq!(l3_offset(&untagged).unwrap(), (0x86dd, 14, [0, 0]));
        assert_eq!(l3_offset(&qinq[..17]).unwrap_err(), WireError::Truncated);
        let mut triple = qinq.to_vec();
        triple[20..22].copy_from_slice(&[0x81, 0x00]);
        triple.extend_from_slice(&[0, 7, 8, 0]);
        assert_eq!(l3_offset(&triple).unwrap_err(), WireError::Malformed);
    }
}
