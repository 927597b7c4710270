//! What a worker's conntrack table tells the HA peer, and takes from it
//! (`[ha] peer`; pfsync(4) and conntrackd are the models).
//!
//! With a [`Log`] set ([`ConnTrack::set_sync`]), the table writes a
//! [`Change`] into a bounded single-producer ring for every flow it
//! creates, every state change (TCP's handshake and close, a UDP flow's
//! first reply) and every removal (expiry, eviction, deletion), and, at
//! most once every [`REFRESH_NS`], a refresh of each flow that saw traffic
//! since the last (its timer, so the peer's copy does not expire while it
//! lives here): the sweep that expires flows walks the table for it, so an
//! established packet costs nothing more. A full ring is never waited on:
//! the change is counted (`ha_sync_dropped`) and the next bulk sync
//! repairs it. The HA thread, never a worker, empties the rings.
//!
//! What the peer sent is applied with [`ConnTrack::apply`], without being
//! logged again (no echo between the two).

use super::saved::Saved;
use super::{ConnTrack, Event, State, STATES};

/// How often, at most, a flow that sees traffic is refreshed at the peer.
pub const REFRESH_NS: u64 = 5_000_000_000;

/// What happened to a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// It was opened.
    Created = 1,
    /// Its state changed.
    Updated = 2,
    /// It saw traffic: its timer starts again.
    Refreshed = 3,
    /// It is gone.
    Deleted = 4,
}

impl Kind {
    /// The kind of byte `b`.
    pub fn of(b: u8) -> Option<Kind> {
        [Kind::Created, Kind::Updated, Kind::Refreshed, Kind::Deleted]
            .into_iter()
            .find(|k| *k as u8 == b)
    }
}

/// A change to one flow, as the peer is told it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    /// What happened.
    pub kind: Kind,
    /// The flow as it is now (deleted: as it was), with its time left.
    pub flow: Saved,
}

/// A table's [`Log`], if it has one. A copy of the table has none: the
/// ring belongs to one worker.
#[derive(Default)]
pub struct Slot(pub(super) Option<Box<Log>>);

impl Clone for Slot {
    fn clone(&self) -> Self {
        Slot(None)
    }
}

/// A worker's sync ring, and what the sweep's refreshes need.
pub struct Log {
    out: rtrb::Producer<Change>,
    worker: u16,
    /// When the running refresh cycle began, and the one before (flows
    /// with traffic since then are refreshed in this one).
    refresh_started: u64,
    since: u64,
    refreshing: bool,
}

impl ConnTrack {
    /// Logs this table's changes into `out` for the HA peer, as gateway
    /// worker `worker`'s.
    pub fn set_sync(&mut self, out: rtrb::Producer<Change>, worker: u16) {
        self.sync.0 = Some(Box::new(Log {
            out,
            worker,
            refresh_started: self.now_ns,
            since: 0,
            refreshing: false,
        }));
    }

    /// Logs `kind` for the flow in slot `i`.
    #[cold]
    #[inline(never)]
    pub(super) fn log(&mut self, kind: Kind, i: usize) {
        let f = self.slots[i];
        let left = if kind == Kind::Deleted {
            0
        } else {
            self.expires_in(&f)
        };
        let Some(log) = self.sync.0.as_mut() else {
            return;
        };
        let c = Change {
            kind,
            flow: Saved::of(&f, left, log.worker),
        };
        if log.out.push(c).is_err() {
            self.events[Event::SyncDropped as usize] += 1;
        }
    }

    /// The sweep's visit of slot `i` (not expired): a refresh of its flow
    /// if this is a refresh cycle and it saw traffic since the last one.
    #[cold]
    #[inline(never)]
    pub(super) fn sweep_sync(&mut self, i: usize) {
        let now = self.now_ns;
        let Some(log) = self.sync.0.as_mut() else {
            return;
        };
        if i == 0 {
            log.refreshing = now.saturating_sub(log.refresh_started) >= REFRESH_NS;
            if log.refreshing {
                log.since = log.refresh_started;
                log.refresh_started = now;
            }
        }
        let f = &self.slots[i];
        if log.refreshing && f.live && !f.remote && f.last_ns >= log.since {
            self.log(Kind::Refreshed, i);
        }
    }

    /// A bulk sync's step: logs every live flow of its own (not taken
    /// from the peer) in at most `scan` slots
    /// from slot `from`, as far as the ring has room (the rest next time:
    /// a full ring is not a loss here); the slot to go on from, or `None`
    /// past the last.
    pub fn bulk(&mut self, from: usize, scan: usize) -> Option<usize> {
        let end = from.saturating_add(scan).min(self.slots.len());
        for i in from..end {
            let room = self.sync.0.as_ref().map_or(0, |l| l.out.slots());
            if room == 0 {
                return Some(i);
            }
            // Only what this table holds on its own account: a flow taken
            // from the peer (and not seen here since) is the peer's.
            if self.slots[i].live && !self.slots[i].remote {
                self.log(Kind::Created, i);
            }
        }
        (end < self.slots.len()).then_some(end)
    }

    /// The last-seen time that leaves a flow in `state` `left_ns` to
    /// live (never more than its state's timeout).
    pub(super) fn last_for(&self, state: State, left_ns: u64) -> u64 {
        let limit = self.limits[state as usize];
        self.now_ns.saturating_sub(limit.saturating_sub(left_ns))
    }

    /// Applies a change the peer sent, without logging it back: a flow
    /// created, changed or refreshed there is installed or brought to its
    /// state and timer here; one deleted there is removed here. False
    /// when it could not be (one of its tuples tracked for another flow,
    /// or the table full; counted `ha_sync_refused`).
    pub fn apply(&mut self, c: &Change) -> bool {
        let log = self.sync.0.take();
        let done = self.apply_quietly(c);
        self.sync.0 = log;
        let e = if done {
            Event::SyncApplied
        } else {
            Event::SyncRefused
        };
        self.events[e as usize] += 1;
        done
    }

    fn apply_quietly(&mut self, c: &Change) -> bool {
        let s = &c.flow;
        let found = self
            .find(&s.orig)
            .filter(|&(i, reply)| !reply && self.slots[i as usize].reply == s.reply);
        match (c.kind, found) {
            (Kind::Deleted, Some((i, _))) => {
                self.remove(i, super::export::EndReason::End);
                true
            }
            // Gone here already (expired, or never seen).
            (Kind::Deleted, None) => true,
            // A flow this table moves itself (its packets pass here): the
            // peer's copy of it (sent in a bulk sync, or a refresh that
            // crossed) is older, and must not set it back.
            (Kind::Created | Kind::Refreshed, Some((i, _))) if !self.slots[i as usize].remote => {
                true
            }
            (_, Some((i, _))) => {
                let last = self.last_for(s.state, s.remaining_ns);
                let f = &mut self.slots[i as usize];
                f.state = s.state;
                f.last_ns = last;
                f.remote = true;
                true
            }
            (_, None) => match self.install(s) {
                Ok(i) => {
                    // Counted as applied, not as created here.
                    self.events[Event::Created as usize] -= 1;
                    self.slots[i as usize].remote = true;
                    true
                }
                Err(_) => false,
            },
        }
    }
}

const _: () = assert!(STATES.len() == 8);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conntrack::{Timeouts, Tuple};

    const S: u64 = 1_000_000_000;

    fn v4(a: u32) -> u128 {
        0xffff_0000_0000 | u128::from(a)
    }

    fn udp(sport: u16) -> (Tuple, Tuple) {
        let orig = Tuple {
            src: v4(0x0a00_0002),
            dst: v4(0xc633_6407),
            sport,
            dport: 53,
            proto: 17,
            zone: 0,
        };
        let reply = Tuple {
            src: orig.dst,
            dst: v4(0xcb00_7101),
            sport: 53,
            dport: 1024 + sport,
            ..orig
        };
        (orig, reply)
    }

    fn drain(c: &mut rtrb::Consumer<Change>) -> Vec<Change> {
        std::iter::from_fn(|| c.pop().ok()).collect()
    }

    /// One table logs what happens to its flows (created, a state change,
    /// refreshes at most once a refresh period for flows with traffic,
    /// deletion); another applies the log and ends with the same flows,
    /// states and mappings, logging nothing back. A full ring drops and
    /// counts.
    #[test]
    fn a_peer_applying_the_log_holds_the_same_flows() {
        let t = Timeouts::default();
        let mut a = ConnTrack::new(64, t);
        let mut b = ConnTrack::new(64, t);
        let (tx, mut rx) = rtrb::RingBuffer::new(8);
        let (btx, mut brx) = rtrb::RingBuffer::new(8);
        a.tick(100 * S);
        b.tick(100 * S);
        a.set_sync(tx, 2);
        b.set_sync(btx, 0);
        let (o1, r1) = udp(1);
        let (o2, r2) = udp(2);
        a.open(o1, r1, 0, None).unwrap();
        a.open(o2, r2, 0, None).unwrap();
        // The first reply of flow 1: Unreplied -> Replied.
        let (i1, _) = a.find(&r1).unwrap();
        a.advance(i1, true, 0, None);
        let log = drain(&mut rx);
        let kinds: Vec<Kind> = log.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, [Kind::Created, Kind::Created, Kind::Updated]);
        assert!(log.iter().all(|c| c.flow.worker == 2));
        assert_eq!(log[2].flow.state, State::Replied);
        for c in &log {
            assert!(b.apply(c));
        }
        assert!(drain(&mut brx).is_empty(), "nothing echoed back");
        assert_eq!(b.len(), 2);
        let (j, _) = b.find(&r1).unwrap();
        assert_eq!(b.flow(j).state, State::Replied);
        assert_eq!(b.flow(j).orig, o1);
        assert_eq!(b.event(Event::SyncApplied), 3);
        // The peer's flows are not refreshed back to it.
        for now in [106, 112, 118] {
            for _ in 0..4 {
                b.tick(now * S);
            }
        }
        assert!(drain(&mut brx).is_empty(), "no refresh echoed");
        // Nor does a bulk sync send them back.
        assert_eq!(b.bulk(0, 64), None);
        assert!(
            drain(&mut brx).is_empty(),
            "no flow of the peer's in a bulk"
        );
        // A stale copy from the peer (Created, in an older state) does
        // not set back a flow this table moves itself.
        let stale = Change {
            kind: Kind::Created,
            flow: Saved {
                state: State::Unreplied,
                ..log[2].flow
            },
        };
        assert!(a.apply(&stale));
        let (i, _) = a.find(&o1).unwrap();
        assert_eq!(a.flow(i).state, State::Replied);
        drain(&mut rx);

        // Refreshes: none before a refresh period has passed; then one
        // per flow with traffic since.
        for _ in 0..4 {
            a.tick(101 * S);
        }
        assert!(drain(&mut rx).is_empty());
        a.tick(106 * S);
        // Traffic on flow 1 only, then a whole sweep.
        a.advance(i1, false, 0, None);
        for _ in 0..4 {
            a.tick(112 * S);
        }
        let refreshed: Vec<Change> = drain(&mut rx);
        assert!(
            refreshed.iter().all(|c| c.kind == Kind::Refreshed),
            "{refreshed:?}"
        );
        assert!(refreshed.iter().any(|c| c.flow.orig == o1));

        // Deleted there: gone here.
        a.delete_flows(0, 64, &Default::default());
        let gone = drain(&mut rx);
        assert_eq!(gone.len(), 2);
        assert!(gone.iter().all(|c| c.kind == Kind::Deleted));
        for c in &gone {
            assert!(b.apply(c));
        }
        assert!(b.is_empty());

        // A ring that is full drops and counts.
        for p in 10..30 {
            let (o, r) = udp(p);
            a.open(o, r, 0, None).unwrap();
        }
        assert_eq!(a.event(Event::SyncDropped), 20 - 8);
        assert_eq!(drain(&mut rx).len(), 8);

        // A flow whose reply tuple is another flow's here: refused.
        let (o, r) = udp(40);
        let clash = Change {
            kind: Kind::Created,
            flow: Saved {
                orig: Tuple { sport: 41, ..o },
                reply: r,
                state: State::Unreplied,
                remaining_ns: 10 * S,
                worker: 0,
            },
        };
        b.open(o, r, 0, None).unwrap();
        assert!(!b.apply(&clash));
        assert_eq!(b.event(Event::SyncRefused), 1);
    }
}
