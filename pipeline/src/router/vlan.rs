//! VLAN sub-interfaces: 802.1Q (one tag, TPID 0x8100) and 802.1ad QinQ
//! (an outer S-tag, TPID 0x88a8 or 0x8100, then an inner C-tag) as router
//! interfaces of their own, with addresses, routes and neighbours, as
//! Linux's `eth0.100` or VPP's `GigabitEthernet0/8/0.100` sub-interfaces.
//!
//! Interfaces are indexed ports first, then sub-interfaces; a verdict
//! names an interface until the router's last step, which tags a frame
//! leaving on a sub-interface and names its port. A tagged frame is
//! matched to the sub-interface of its port and tags, the tags are
//! stripped, and it is routed as received on that interface; one that
//! matches none is dropped as `unknown_vlan`. A priority-tagged frame
//! (VID 0, 802.1p) belongs to the port itself. Untagged frames take the
//! usual paths at no extra cost; tagged ones go the per-packet way. The
//! priority (PCP) and DEI bits of received tags are not kept; frames
//! leave with PCP 0.

use super::Router;
use crate::fwd::Frame;
use crate::verdict::{DropReason, Verdict};
use crate::wire::EtherType;

/// A sub-interface's place: its port and tags, outermost first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Vlan {
    /// The port it is on.
    pub port: u16,
    /// The outer tag's VLAN id (QinQ S-tag, TPID 0x88a8), if any.
    pub outer: Option<u16>,
    /// The (inner) VLAN id, 1–4094.
    pub id: u16,
}

impl Vlan {
    /// Bytes of tags it adds to a frame.
    pub fn tag_len(&self) -> usize {
        if self.outer.is_some() {
            8
        } else {
            4
        }
    }

    /// The tags it puts after a frame's MAC addresses (the first
    /// [`Vlan::tag_len`] bytes): QinQ's S-tag (TPID 0x88a8) first, then
    /// the 802.1Q tag (TPID 0x8100), PCP 0.
    pub fn tag_bytes(&self) -> [u8; 8] {
        let mut t = [0u8; 8];
        let mut o = 0;
        if let Some(outer) = self.outer {
            t[0..2].copy_from_slice(&EtherType::QINQ.to_be_bytes());
            t[2..4].copy_from_slice(&outer.to_be_bytes());
            o = 4;
        }
        t[o..o + 2].copy_from_slice(&EtherType::VLAN.to_be_bytes());
        t[o + 2..o + 4].copy_from_slice(&self.id.to_be_bytes());
        t
    }
}

/// The tags of a frame: (outer, inner) VLAN ids, `None` for the inner one
/// of a single-tagged frame; the bytes of tags.
fn tags(b: &[u8]) -> Option<((u16, Option<u16>), usize)> {
    let vid = |o: usize| u16::from_be_bytes([b[o], b[o + 1]]) & 0x0fff;
    if b.len() < 18 {
        return None;
    }
    let first = vid(14);
    let next = u16::from_be_bytes([b[16], b[17]]);
    if next == EtherType::VLAN {
        if b.len() < 22 {
            return None;
        }
        return Some(((first, Some(vid(18))), 8));
    }
    Some(((first, None), 4))
}

impl Router {
    /// A tagged frame received on `port`: strips its tags and names the
    /// interface it was received on, or drops it.
    #[cold]
    #[inline(never)]
    pub(crate) fn untag<P: Frame>(&mut self, pkt: &mut P, port: u16) -> Result<u16, Verdict> {
        let Some(((a, b), n)) = tags(pkt.bytes()) else {
            return Err(Verdict::Drop(DropReason::Truncated));
        };
        let iface = match (a, b) {
            // 802.1p priority tag: the port itself.
            (0, None) => Some(port),
            (id, None) => self.sub_iface(port, None, id),
            (outer, Some(id)) => self.sub_iface(port, Some(outer), id),
        }
        .ok_or(Verdict::Drop(DropReason::UnknownVlan))?;
        let b = pkt.bytes_mut();
        b.copy_within(0..12, n);
        if !pkt.cut_front(n) {
            return Err(Verdict::Drop(DropReason::Truncated));
        }
        Ok(iface)
    }

    fn sub_iface(&self, port: u16, outer: Option<u16>, id: u16) -> Option<u16> {
        let want = Vlan { port, outer, id };
        self.cfg
            .interfaces
            .iter()
            .position(|i| i.vlan == Some(want))
            .map(|i| i as u16)
    }

    /// A frame leaving on sub-interface `iface`: tags it and names its
    /// port.
    #[cold]
    #[inline(never)]
    pub(crate) fn tag<P: Frame>(&mut self, pkt: &mut P, iface: u16) -> Verdict {
        let Some(v) = self.iface(iface).and_then(|i| i.vlan) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        let n = v.tag_len();
        // Pool buffers keep 128 bytes of headroom: this cannot fail on
        // them.
        if pkt.bytes().len() < 14 || !pkt.grow_front(n) {
            return Verdict::Drop(DropReason::Truncated);
        }
        let b = pkt.bytes_mut();
        b.copy_within(n..n + 12, 0);
        b[12..12 + n].copy_from_slice(&v.tag_bytes()[..n]);
        Verdict::Forward(v.port)
    }
}
