//! IPv4 fragmentation (RFC 791 §3.2, RFC 1812 §5.2.6): a packet larger
//! than its output interface's MTU without Don't Fragment set is sent as
//! fragments, as Linux's `ip_fragment` sends it, where the router used to
//! drop it (`mtu_exceeded`: with DF clear the sender gets no ICMP and
//! cannot learn the path MTU, so such a drop was a black hole). With DF
//! set the router answers Fragmentation Needed, as before.
//!
//! The packet's own buffer becomes the first fragment and goes its way at
//! once; a copy of the packet waits in a fixed store ([`SLOTS`] frames of
//! up to the largest frame an interface carries, per worker: nothing is
//! allocated per packet) and the other fragments are made from it when
//! the worker next asks for the stage's own packets
//! ([`ForwardMode::emit`](crate::fwd::ForwardMode::emit)), each routed
//! again as a packet of its own (so a neighbour still unresolved holds it,
//! and a VLAN sub-interface tags it). A fragment's payload is a multiple
//! of 8 bytes but for the last; each carries the header, its options that
//! RFC 791 copies into every fragment kept and the others overwritten
//! with NOPs (as Linux's `ip_options_fragment`), so every fragment's
//! header has the packet's length; a packet that is itself a fragment is
//! split into fragments of the same original datagram (offsets from its
//! own, its More Fragments flag kept by the last).
//!
//! IPv6 routers do not fragment (RFC 8200 5): an IPv6 packet too big for
//! its link gets Packet Too Big. The exception is NAT64's, which is the
//! IPv6 packet's source: an IPv4 packet without Don't Fragment that
//! becomes an IPv6 packet longer than the translator's `lowest-ipv6-mtu`
//! (1,280 by default, which every IPv6 path carries) or its link's MTU is
//! sent as IPv6 fragments no longer (RFC 7915 5.1.1), as Jool sends them.
//! The translator marks such packets ([`Router::fragmentable6`]) and
//! gives them a fragment header after the fixed header (the IPv4
//! datagram's identification); they are split here the same way, each
//! fragment with the fixed header and that fragment header. Counted:
//! `frag_packets`
//! (packets split), `frag_sent` (fragments made and sent, the first
//! included), `frag_dropped` (a packet not split: the store full, or a
//! fragment not sent).

use super::{Event, Router};
use crate::fwd::Frame;
use crate::nat64::GROWTH6;
use crate::verdict::{DropReason, Verdict};
use crate::wire::ETHERNET_HEADER_LEN as ETH;

/// Packets whose later fragments wait, per worker.
pub const SLOTS: usize = 16;

#[derive(Clone, Debug)]
struct Slot {
    /// Waiting to be sent from payload byte `next` on.
    busy: bool,
    /// An IPv6 packet (its fragment header after the fixed header).
    v6: bool,
    in_port: u16,
    /// Payload bytes per fragment (a multiple of 8).
    chunk: usize,
    next: usize,
    bytes: Vec<u8>,
}

/// The per-worker store of packets being fragmented.
#[derive(Clone, Debug)]
pub(super) struct Frags {
    slots: Vec<Slot>,
    /// Largest frame a slot takes.
    room: usize,
    busy: usize,
    /// The fragment being made.
    scratch: Vec<u8>,
    /// The IPv6 packet in hand is NAT64's from an IPv4 packet without
    /// Don't Fragment: it is split into fragments no longer than this
    /// (0: it is not).
    translated6: u16,
}

impl Frags {
    /// A store for frames of up to `room` bytes.
    pub(super) fn new(room: usize) -> Self {
        Frags {
            slots: (0..SLOTS)
                .map(|_| Slot {
                    busy: false,
                    v6: false,
                    in_port: 0,
                    chunk: 0,
                    next: 0,
                    bytes: Vec::with_capacity(room + GROWTH6),
                })
                .collect(),
            room,
            busy: 0,
            scratch: Vec::with_capacity(room + GROWTH6),
            translated6: 0,
        }
    }

    /// Fragments waiting to be made.
    #[inline]
    pub(super) fn ready(&self) -> bool {
        self.busy > 0
    }
}

/// `opts`, the options of a first fragment's header, as a later
/// fragment's header carries them: those with the copy flag kept, the
/// others (and anything after a malformed one) overwritten with NOPs; an
/// End of Options list stays.
fn later_options(opts: &mut [u8]) {
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => return,
            1 => i += 1,
            t => {
                let len = opts.get(i + 1).map_or(0, |&l| usize::from(l));
                if len < 2 || i + len > opts.len() {
                    opts[i..].fill(1);
                    return;
                }
                if t & 0x80 == 0 {
                    opts[i..i + len].fill(1);
                }
                i += len;
            }
        }
    }
}

/// Writes IPv4 header `h` as the fragment of `payload` bytes at payload
/// offset `at` (bytes) of a packet whose own offset field is `base` (8-byte
/// units) and More Fragments flag `mf`; `last`: no fragment follows it.
fn set_fragment(h: &mut [u8], payload: usize, base: u16, at: usize, last_mf: bool, last: bool) {
    let ihl = h.len();
    h[2..4].copy_from_slice(&((ihl + payload) as u16).to_be_bytes());
    let off = base + (at / 8) as u16;
    let mf = if last { last_mf } else { true };
    let flags = u16::from(mf) << 13 | off;
    h[6..8].copy_from_slice(&flags.to_be_bytes());
    h[10..12].copy_from_slice(&[0, 0]);
    let c = crate::checksum::checksum(h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
}

/// Writes the fixed IPv6 header and fragment header `h` (48 bytes) as the
/// fragment of `payload` bytes at payload offset `at` (bytes) of a packet
/// whose own fragment offset word is `fo`; `last`: no fragment follows it.
fn set_fragment6(h: &mut [u8], payload: usize, fo: u16, at: usize, last: bool) {
    h[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    let off = (fo >> 3) + (at / 8) as u16;
    let m = if last { fo & 1 } else { 1 };
    h[42..44].copy_from_slice(&(off << 3 | m).to_be_bytes());
}

impl Router {
    /// `f` with the IPv6 packets it routes (NAT64's translation of an
    /// IPv4 packet without Don't Fragment, with a fragment header after
    /// the fixed header) split into fragments no longer than `most`, or
    /// than their link's MTU where that is less, instead of answered
    /// with Packet Too Big.
    pub(crate) fn fragmentable6<R>(&mut self, most: u16, f: impl FnOnce(&mut Router) -> R) -> R {
        self.frags.translated6 = most;
        let r = f(self);
        self.frags.translated6 = 0;
        r
    }

    /// The longest fragments IPv6 frame `b` is split into, if it is to be
    /// split ([`Router::fragmentable6`]).
    #[inline]
    pub(super) fn split6(&self, b: &[u8]) -> Option<u16> {
        (self.frags.translated6 != 0 && b.get(ETH + 6) == Some(&44))
            .then_some(self.frags.translated6)
    }

    /// Splits IPv6 packet `pkt` (received on `in_port`, a fragment header
    /// after its fixed header, larger than `mtu`) as
    /// [`Router::fragment4`] splits an IPv4 one.
    #[cold]
    #[inline(never)]
    pub(super) fn fragment6(&mut self, pkt: &mut impl Frame, in_port: u16, mtu: u16) -> Verdict {
        let b = pkt.bytes();
        let plen = usize::from(u16::from_be_bytes([b[ETH + 4], b[ETH + 5]]));
        let chunk = usize::from(mtu).saturating_sub(48) & !7;
        if chunk == 0 || plen < 8 || ETH + 40 + plen > b.len() {
            return Verdict::Drop(DropReason::MtuExceeded);
        }
        let f = &mut self.frags;
        let free = f.slots.iter().position(|s| !s.busy);
        let (Some(i), true) = (free, ETH + 40 + plen <= f.room + GROWTH6) else {
            self.count(Event::FragDropped);
            return Verdict::Drop(DropReason::MtuExceeded);
        };
        let s = &mut f.slots[i];
        s.bytes.clear();
        s.bytes.extend_from_slice(&b[..ETH + 40 + plen]);
        (s.busy, s.v6, s.in_port, s.chunk, s.next) = (true, true, in_port, chunk, chunk);
        f.busy += 1;
        let fo = u16::from_be_bytes([b[ETH + 42], b[ETH + 43]]);
        set_fragment6(&mut pkt.bytes_mut()[ETH..ETH + 48], chunk, fo, 0, false);
        pkt.set_len(ETH + 48 + chunk);
        self.count(Event::FragPackets);
        match self.ipv6(pkt, in_port) {
            v @ Verdict::Forward(_) => {
                self.count(Event::FragSent);
                v
            }
            v => v,
        }
    }

    /// Splits IPv4 packet `pkt` (received on `in_port`, header validated,
    /// Don't Fragment clear, larger than `mtu`): its buffer becomes the
    /// first fragment and is routed on (the verdict), a copy waits for the
    /// others. Dropped as `mtu_exceeded` when the MTU leaves no room for
    /// 8 bytes of payload past the header, or the store has none
    /// (counted `frag_dropped` then).
    #[cold]
    #[inline(never)]
    pub(super) fn fragment4(&mut self, pkt: &mut impl Frame, in_port: u16, mtu: u16) -> Verdict {
        let b = pkt.bytes();
        let ihl = usize::from(b[ETH] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([b[ETH + 2], b[ETH + 3]]));
        let chunk = usize::from(mtu).saturating_sub(ihl) & !7;
        if chunk == 0 {
            return Verdict::Drop(DropReason::MtuExceeded);
        }
        let f = &mut self.frags;
        let free = f.slots.iter().position(|s| !s.busy);
        let (Some(i), true) = (free, ETH + total <= f.room) else {
            self.count(Event::FragDropped);
            return Verdict::Drop(DropReason::MtuExceeded);
        };
        let s = &mut f.slots[i];
        s.bytes.clear();
        s.bytes.extend_from_slice(&b[..ETH + total]);
        (s.busy, s.v6, s.in_port, s.chunk, s.next) = (true, false, in_port, chunk, chunk);
        f.busy += 1;
        let ff = u16::from_be_bytes([b[ETH + 6], b[ETH + 7]]);
        let h = &mut pkt.bytes_mut()[ETH..ETH + ihl];
        set_fragment(h, chunk, ff & 0x1fff, 0, ff & 0x2000 != 0, false);
        pkt.set_len(ETH + ihl + chunk);
        self.count(Event::FragPackets);
        match self.ipv4_valid(pkt, in_port) {
            v @ Verdict::Forward(_) => {
                self.count(Event::FragSent);
                v
            }
            v => v,
        }
    }

    /// Makes the waiting fragments, routes each and hands each one that
    /// is forwarded to `send(port, frame)`; one not forwarded, or that
    /// `send` refuses (no buffer), is counted as `frag_dropped`.
    pub(super) fn send_fragments(&mut self, send: &mut dyn FnMut(u16, &[u8]) -> bool) {
        for i in 0..self.frags.slots.len() {
            if !self.frags.slots[i].busy {
                continue;
            }
            let (in_port, chunk, start, v6) = {
                let s = &self.frags.slots[i];
                (s.in_port, s.chunk, s.next, s.v6)
            };
            let bytes = std::mem::take(&mut self.frags.slots[i].bytes);
            let mut frame = std::mem::take(&mut self.frags.scratch);
            let head = if v6 {
                48
            } else {
                usize::from(bytes[ETH] & 0x0f) * 4
            };
            let payload = &bytes[ETH + head..];
            let ff = u16::from_be_bytes([bytes[ETH + 6], bytes[ETH + 7]]);
            let fo = if v6 {
                u16::from_be_bytes([bytes[ETH + 42], bytes[ETH + 43]])
            } else {
                0
            };
            let mut at = start;
            while at < payload.len() {
                let n = chunk.min(payload.len() - at);
                frame.clear();
                frame.extend_from_slice(&bytes[..ETH + head]);
                let last = at + n == payload.len();
                if v6 {
                    set_fragment6(&mut frame[ETH..], n, fo, at, last);
                } else {
                    later_options(&mut frame[ETH + 20..]);
                    set_fragment(
                        &mut frame[ETH..],
                        n,
                        ff & 0x1fff,
                        at,
                        ff & 0x2000 != 0,
                        last,
                    );
                }
                frame.extend_from_slice(&payload[at..at + n]);
                let sent = self.route_and_send(&mut frame, in_port, send);
                self.count(if sent {
                    Event::FragSent
                } else {
                    Event::FragDropped
                });
                at += n;
            }
            frame.clear();
            self.frags.scratch = frame;
            let s = &mut self.frags.slots[i];
            s.bytes = bytes;
            s.busy = false;
            self.frags.busy -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_fragments_keep_only_the_options_copied() {
        // Record Route (7, not copied), Loose Source Route (0x83,
        // copied), NOP, End.
        let mut o = vec![7, 7, 4, 0, 0, 0, 0, 0x83, 7, 4, 10, 0, 0, 1, 1, 0, 0xaa];
        later_options(&mut o);
        assert_eq!(
            o,
            [1, 1, 1, 1, 1, 1, 1, 0x83, 7, 4, 10, 0, 0, 1, 1, 0, 0xaa]
        );
        // A length running past the end, or under 2: NOPs from there.
        let mut o = vec![0x83, 3, 4, 7, 9, 1];
        later_options(&mut o);
        assert_eq!(o, [0x83, 3, 4, 1, 1, 1]);
        let mut o = vec![0x83, 1, 4, 4];
        later_options(&mut o);
        assert_eq!(o, [1, 1, 1, 1]);
    }
}
