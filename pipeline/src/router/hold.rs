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
use crate::copies::{Copies, Held};
use crate::fwd::ForwardMode;
use crate::verdict::Verdict;

/// Copies kept per worker.
pub const SLOTS: usize = 64;
/// Copies kept per unresolved neighbour (Linux's `unres_qlen` was 3 for
/// years; the first packets of a TCP handshake and a ping fit).
pub const PER_NEIGHBOR: usize = 4;
/// How long a copy waits: the kernel's three probes a second apart.
pub const HOLD_NS: u64 = 3_000_000_000;

/// The neighbour a copy waits for: output port, family (4 or 6), address.
type Key = (u16, u8, u128);

/// The per-worker store of copies.
#[derive(Clone, Debug)]
pub(super) struct Hold {
    copies: Copies<Key, ()>,
    /// Set while copies are routed again: a miss then is not held twice.
    releasing: bool,
}

impl Hold {
    /// A store for frames of up to `room` bytes.
    pub(super) fn new(room: usize) -> Self {
        Hold {
            copies: Copies::new(SLOTS, room, PER_NEIGHBOR, (0, 0, 0), ()),
            releasing: false,
        }
    }

    /// Copies ready to be sent.
    #[inline]
    pub(super) fn ready(&self) -> bool {
        self.copies.ready()
    }
}

impl Router {
    /// Keeps a copy of `frame` (received on `in_port`) until neighbour
    /// `addr` of family `fam` on `port` is resolved.
    pub(super) fn hold(&mut self, frame: &[u8], in_port: u16, port: u16, fam: u8, addr: u128) {
        if self.hold.releasing {
            return;
        }
        let held = self
            .hold
            .copies
            .hold((port, fam, addr), in_port, self.now_ns, frame);
        match held {
            Held::Stored => self.count(Event::Held),
            Held::Replaced => {
                // The neighbour's queue is full: its oldest copy went.
                self.count(Event::HeldDropped);
                self.count(Event::Held);
            }
            Held::Full => self.count(Event::HeldDropped),
        }
    }

    /// Neighbour `addr` on `port` was learned: its copies are ready.
    pub(super) fn resolved(&mut self, port: u16, fam: u8, addr: u128) {
        self.hold.copies.wake(&(port, fam, addr), ());
    }

    /// Drops copies older than [`HOLD_NS`] (a neighbour that never
    /// answered).
    pub(super) fn expire_held(&mut self) {
        let expired = self.hold.copies.expire(self.now_ns, HOLD_NS);
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
        while let Some(mut t) = self.hold.copies.take() {
            let sent = self.route_and_send(&mut t.frame, t.in_port, send);
            self.count(if sent {
                Event::HeldSent
            } else {
                Event::HeldDropped
            });
            self.hold.copies.free(t.slot, t.frame);
        }
        self.hold.releasing = false;
    }
}
