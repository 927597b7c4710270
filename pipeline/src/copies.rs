//! A fixed store of frame copies that wait for something: the router's
//! packets waiting for ARP/ND (keyed by neighbour) and the gateway's
//! fragments waiting for their datagram's first (keyed by datagram).
//!
//! Its slots are made with the store, each with room for the largest
//! frame an interface carries, so holding a copy allocates nothing. A
//! copy waits under its key until the key is woken ([`Copies::wake`],
//! which gives the copies a tag: what the wait decided), or until it is
//! too old ([`Copies::expire`]); woken copies are taken oldest first
//! ([`Copies::take`]) and their slots given back ([`Copies::free`]).

/// What became of a copy offered to [`Copies::hold`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// It waits in a free slot.
    Stored,
    /// Its key had as many copies waiting as it may: the oldest of them
    /// was dropped and this one waits in its slot.
    Replaced,
    /// Not kept: no slot is free, or it is larger than a slot.
    Full,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    Waiting,
    Ready,
    /// Taken, until its slot is freed.
    Taken,
}

#[derive(Clone, Debug)]
struct Slot<K, T> {
    state: State,
    key: K,
    in_port: u16,
    /// When it was held (ns) and its order among the copies.
    at: u64,
    seq: u64,
    tag: T,
    bytes: Vec<u8>,
}

/// A copy taken to be sent: its slot, bytes, receiving port and tag.
#[derive(Debug)]
pub struct Taken<T> {
    /// The slot, for [`Copies::free`].
    pub slot: usize,
    /// The frame (the slot's buffer, given back with the slot).
    pub frame: Vec<u8>,
    /// The port it was received on.
    pub in_port: u16,
    /// What [`Copies::wake`] gave it.
    pub tag: T,
}

/// Copies of frames keyed by `K`, each woken with a `T`.
#[derive(Clone, Debug)]
pub struct Copies<K, T> {
    slots: Vec<Slot<K, T>>,
    /// Largest frame a slot takes.
    room: usize,
    /// Most copies of one key that wait at a time.
    per_key: usize,
    waiting: usize,
    ready: usize,
    seq: u64,
}

impl<K: Copy + PartialEq, T: Copy> Copies<K, T> {
    /// `slots` slots for frames of up to `room` bytes, at most `per_key`
    /// waiting per key; `key` and `tag` fill the free slots.
    pub fn new(slots: usize, room: usize, per_key: usize, key: K, tag: T) -> Self {
        let free = Slot {
            state: State::Free,
            key,
            in_port: 0,
            at: 0,
            seq: 0,
            tag,
            bytes: Vec::new(),
        };
        Copies {
            slots: (0..slots)
                .map(|_| Slot {
                    bytes: Vec::with_capacity(room),
                    ..free.clone()
                })
                .collect(),
            room,
            per_key,
            waiting: 0,
            ready: 0,
            seq: 0,
        }
    }

    /// Copies waiting to be woken.
    #[inline]
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Whether woken copies wait to be taken.
    #[inline]
    pub fn ready(&self) -> bool {
        self.ready > 0
    }

    /// Keeps a copy of `frame`, received on `in_port`, under `key` from
    /// `now` (ns).
    pub fn hold(&mut self, key: K, in_port: u16, now: u64, frame: &[u8]) -> Held {
        if frame.len() > self.room {
            return Held::Full;
        }
        let mut same = 0;
        let mut oldest: Option<usize> = None;
        let mut free = None;
        for (i, s) in self.slots.iter().enumerate() {
            match s.state {
                State::Free => {
                    free.get_or_insert(i);
                }
                State::Waiting if s.key == key => {
                    same += 1;
                    if oldest.is_none_or(|o| self.slots[o].seq > s.seq) {
                        oldest = Some(i);
                    }
                }
                _ => {}
            }
        }
        let (i, held) = match (same >= self.per_key, oldest, free) {
            (true, Some(o), _) => (o, Held::Replaced),
            (_, _, Some(f)) => {
                self.waiting += 1;
                (f, Held::Stored)
            }
            _ => return Held::Full,
        };
        self.seq += 1;
        let s = &mut self.slots[i];
        (s.state, s.key, s.in_port, s.at, s.seq) = (State::Waiting, key, in_port, now, self.seq);
        s.bytes.clear();
        s.bytes.extend_from_slice(frame);
        held
    }

    /// The copies waiting under `key` are ready to be taken, with `tag`.
    pub fn wake(&mut self, key: &K, tag: T) {
        if self.waiting == 0 {
            return;
        }
        for s in self.slots.iter_mut() {
            if s.state == State::Waiting && s.key == *key {
                (s.state, s.tag) = (State::Ready, tag);
                self.waiting -= 1;
                self.ready += 1;
            }
        }
    }

    /// Drops the copies that have waited more than `max_ns` at `now`:
    /// how many.
    pub fn expire(&mut self, now: u64, max_ns: u64) -> u64 {
        if self.waiting == 0 {
            return 0;
        }
        let mut expired = 0;
        for s in self.slots.iter_mut() {
            if s.state == State::Waiting && now.saturating_sub(s.at) > max_ns {
                s.state = State::Free;
                expired += 1;
            }
        }
        self.waiting -= expired;
        expired as u64
    }

    /// The oldest woken copy, if any; its slot stays taken until
    /// [`Copies::free`] gives its buffer back.
    pub fn take(&mut self) -> Option<Taken<T>> {
        if self.ready == 0 {
            return None;
        }
        let i = (0..self.slots.len())
            .filter(|&i| self.slots[i].state == State::Ready)
            .min_by_key(|&i| self.slots[i].seq)?;
        self.ready -= 1;
        let s = &mut self.slots[i];
        s.state = State::Taken;
        Some(Taken {
            slot: i,
            frame: std::mem::take(&mut s.bytes),
            in_port: s.in_port,
            tag: s.tag,
        })
    }

    /// Gives back the slot of a taken copy, with its buffer.
    pub fn free(&mut self, slot: usize, mut frame: Vec<u8>) {
        frame.clear();
        let s = &mut self.slots[slot];
        (s.state, s.bytes) = (State::Free, frame);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(c: &mut Copies<u8, char>) -> Vec<(Vec<u8>, u16, char)> {
        let mut out = vec![];
        while let Some(t) = c.take() {
            out.push((t.frame.clone(), t.in_port, t.tag));
            c.free(t.slot, t.frame);
        }
        out
    }

    /// Copies wait under their key, are woken with a tag and taken oldest
    /// first; other keys' copies go on waiting.
    #[test]
    fn woken_copies_are_taken_oldest_first_with_their_tag() {
        let mut c = Copies::new(4, 8, 4, 0u8, ' ');
        assert_eq!(c.hold(1, 5, 10, &[1]), Held::Stored);
        assert_eq!(c.hold(2, 6, 11, &[2]), Held::Stored);
        assert_eq!(c.hold(1, 7, 12, &[3]), Held::Stored);
        assert_eq!((c.waiting(), c.ready()), (3, false));
        c.wake(&1, 'a');
        assert_eq!((c.waiting(), c.ready()), (1, true));
        assert_eq!(drain(&mut c), [(vec![1], 5, 'a'), (vec![3], 7, 'a')]);
        assert!(!c.ready());
        // The freed slots take copies again.
        for k in 3..6 {
            assert_eq!(c.hold(k, 0, 20, &[k]), Held::Stored);
        }
        assert_eq!(c.hold(9, 0, 20, &[9]), Held::Full, "every slot taken");
        assert_eq!(c.hold(9, 0, 20, &[0; 9]), Held::Full, "larger than a slot");
    }

    /// A key at its limit replaces its oldest copy; the others' slots are
    /// untouched.
    #[test]
    fn a_key_at_its_limit_replaces_its_oldest_copy() {
        let mut c = Copies::new(8, 8, 2, 0u8, ' ');
        assert_eq!(c.hold(1, 0, 0, &[1]), Held::Stored);
        assert_eq!(c.hold(2, 0, 0, &[9]), Held::Stored);
        assert_eq!(c.hold(1, 0, 0, &[2]), Held::Stored);
        assert_eq!(c.hold(1, 0, 0, &[3]), Held::Replaced);
        assert_eq!(c.waiting(), 3);
        c.wake(&1, 'x');
        assert_eq!(drain(&mut c), [(vec![2], 0, 'x'), (vec![3], 0, 'x')]);
        c.wake(&2, 'y');
        assert_eq!(drain(&mut c), [(vec![9], 0, 'y')]);
    }

    /// Copies older than the limit go; younger ones and woken ones stay.
    #[test]
    fn old_copies_expire() {
        let mut c = Copies::new(4, 8, 4, 0u8, ' ');
        c.hold(1, 0, 100, &[1]);
        c.hold(2, 0, 200, &[2]);
        c.hold(3, 0, 100, &[3]);
        c.wake(&3, 'w');
        assert_eq!(c.expire(150, 100), 0);
        assert_eq!(c.expire(201, 100), 1, "key 1's");
        assert_eq!(c.waiting(), 1);
        assert_eq!(drain(&mut c), [(vec![3], 0, 'w')]);
        c.wake(&1, 'z');
        assert!(!c.ready(), "key 1's copy is gone");
    }

    /// A taken copy's slot is neither free nor woken again until it is
    /// given back, even if its key is woken or it is old.
    #[test]
    fn a_taken_slot_is_kept_until_freed() {
        let mut c = Copies::new(1, 8, 4, 0u8, ' ');
        c.hold(1, 0, 0, &[1]);
        c.wake(&1, 'a');
        let t = c.take().unwrap();
        assert_eq!(c.hold(2, 0, 0, &[2]), Held::Full);
        c.wake(&1, 'b');
        assert_eq!(c.expire(u64::MAX - 1, 0), 0);
        assert!(c.take().is_none());
        c.free(t.slot, t.frame);
        assert_eq!(c.hold(2, 0, 0, &[2]), Held::Stored);
    }
}
