//! Packets waiting for ARP/ND: a neighbour miss keeps a copy of the
//! packet (the kernel's `unres_qlen` queue per neighbour entry) while the
//! packet's own buffer becomes the ARP request or Neighbor Solicitation;
//! when the neighbour is learned the copies are routed again and handed to
//! the worker ([`ForwardMode::emit`](crate::fwd::ForwardMode::emit)), which
//! sends them in fresh buffers. So the first packet to a new neighbour (the
//! first ping, a TCP SYN) is delayed by one resolution, not lost.
//!
//! The store is fixed at the router's creation ([`SLOTS`] copies of up to
//! the largest frame an interface carries, per worker): holding copies into
//! a free slot, nothing is allocated per packet. At most [`PER_NEIGHBOR`]
//! packets wait per neighbour (a further one replaces the oldest, as the
//! kernel drops the head of a full `arp_queue`); a full store, a frame
//! larger than a slot and a copy older than [`HOLD_NS`] are counted as
//! `held_dropped` / `held_expired`.

use super::{Event, Router};
use crate::fwd::ForwardMode;
use crate::verdict::Verdict;

/// Copies kept per worker.
pub const SLOTS: usize = 64;
/// Copies kept per unresolved neighbour (Linux's `unres_qlen` was 3 for
/// years; the first packets of a TCP handshake and a ping fit).
pub const PER_NEIGHBOR: usize = 4;
/// How long a copy waits: the kernel's three probes a second apart.
pub const HOLD_NS: u64 = 3_000_000_000;

const FREE: u8 = 0;
const WAITING: u8 = 1;
const READY: u8 = 2;

/// The neighbour a copy waits for: output port, family (4 or 6), address.
type Key = (u16, u8, u128);

#[derive(Clone, Debug)]
struct Slot {
    state: u8,
    key: Key,
    in_port: u16,
    /// When it was held (ns) and its order among the copies.
    at: u64,
    seq: u64,
    bytes: Vec<u8>,
}

/// The per-worker store of copies.
#[derive(Clone, Debug)]
pub(super) struct Hold {
    slots: Vec<Slot>,
    /// Largest frame a slot takes.
    room: usize,
    waiting: usize,
    ready: usize,
    seq: u64,
    /// Set while copies are routed again: a miss then is not held twice.
    releasing: bool,
}

impl Hold {
    /// A store for frames of up to `room` bytes.
    pub(super) fn new(room: usize) -> Self {
        Hold {
            slots: (0..SLOTS)
                .map(|_| Slot {
                    state: FREE,
                    key: (0, 0, 0),
                    in_port: 0,
                    at: 0,
                    seq: 0,
                    bytes: Vec::with_capacity(room),
                })
                .collect(),
            room,
            waiting: 0,
            ready: 0,
            seq: 0,
            releasing: false,
        }
    }

    /// Copies ready to be sent.
    #[inline]
    pub(super) fn ready(&self) -> bool {
        self.ready > 0
    }
}

impl Router {
    /// Keeps a copy of `frame` (received on `in_port`) until neighbour
    /// `addr` of family `fam` on `port` is resolved.
    pub(super) fn hold(&mut self, frame: &[u8], in_port: u16, port: u16, fam: u8, addr: u128) {
        let h = &mut self.hold;
        if h.releasing {
            return;
        }
        if frame.len() > h.room {
            self.count(Event::HeldDropped);
            return;
        }
        let key = (port, fam, addr);
        let mut same = 0;
        let mut oldest: Option<usize> = None;
        let mut free = None;
        for (i, s) in h.slots.iter().enumerate() {
            if s.state == FREE {
                free.get_or_insert(i);
            } else if s.state == WAITING && s.key == key {
                same += 1;
                if oldest.is_none_or(|o| h.slots[o].seq > s.seq) {
                    oldest = Some(i);
                }
            }
        }
        let i = match (same >= PER_NEIGHBOR, oldest, free) {
            (true, Some(o), _) => {
                // The neighbour's queue is full: the oldest copy goes.
                self.events[Event::HeldDropped as usize] += 1;
                o
            }
            (_, _, Some(f)) => {
                h.waiting += 1;
                f
            }
            _ => {
                self.events[Event::HeldDropped as usize] += 1;
                return;
            }
        };
        h.seq += 1;
        let s = &mut h.slots[i];
        s.state = WAITING;
        s.key = key;
        s.in_port = in_port;
        s.at = self.now_ns;
        s.seq = h.seq;
        s.bytes.clear();
        s.bytes.extend_from_slice(frame);
        self.events[Event::Held as usize] += 1;
    }

    /// Neighbour `addr` on `port` was learned: its copies are ready.
    pub(super) fn resolved(&mut self, port: u16, fam: u8, addr: u128) {
        let h = &mut self.hold;
        if h.waiting == 0 {
            return;
        }
        for s in h.slots.iter_mut() {
            if s.state == WAITING && s.key == (port, fam, addr) {
                s.state = READY;
                h.waiting -= 1;
                h.ready += 1;
            }
        }
    }

    /// Drops copies older than [`HOLD_NS`] (a neighbour that never
    /// answered).
    pub(super) fn expire_held(&mut self) {
        let h = &mut self.hold;
        if h.waiting == 0 {
            return;
        }
        let now = self.now_ns;
        let mut expired = 0;
        for s in h.slots.iter_mut() {
            if s.state == WAITING && now.saturating_sub(s.at) > HOLD_NS {
                s.state = FREE;
                h.waiting -= 1;
                expired += 1;
            }
        }
        self.events[Event::HeldExpired as usize] += expired;
    }

    /// Routes `frame` (the stage's own packet, received on `in_port`) and
    /// hands it to `send(port, frame)` if it is forwarded: whether it was
    /// sent (`send` refuses when it has no buffer).
    pub(crate) fn route_and_send(
        &mut self,
        frame: &mut Vec<u8>,
        in_port: u16,
        send: &mut dyn FnMut(u16, &[u8]) -> bool,
    ) -> bool {
        match ForwardMode::process(self, frame, in_port) {
            Verdict::Forward(o) => send(o, frame),
            _ => false,
        }
    }

    /// Routes the ready copies again, oldest first, and hands each one
    /// that is forwarded to `send(port, frame)`; one `send` refuses (no
    /// buffer) or that is not forwarded now is counted as `held_dropped`.
    pub(super) fn release(&mut self, send: &mut dyn FnMut(u16, &[u8]) -> bool) {
        self.hold.releasing = true;
        while self.hold.ready > 0 {
            let Some(i) = (0..self.hold.slots.len())
                .filter(|&i| self.hold.slots[i].state == READY)
                .min_by_key(|&i| self.hold.slots[i].seq)
            else {
                break;
            };
            let in_port = self.hold.slots[i].in_port;
            let mut frame = std::mem::take(&mut self.hold.slots[i].bytes);
            let sent = self.route_and_send(&mut frame, in_port, send);
            self.count(if sent {
                Event::HeldSent
            } else {
                Event::HeldDropped
            });
            frame.clear();
            let s = &mut self.hold.slots[i];
            s.bytes = frame;
            s.state = FREE;
            self.hold.ready -= 1;
        }
        self.hold.releasing = false;
    }
}
