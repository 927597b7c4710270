//! Fragments through the gateway: virtual reassembly, as VPP's shallow
//! virtual reassembly (`ip4-sv-reass`) does it for its NAT.
//!
//! The gateway tracks, filters and translates flows by their ports, and
//! only a datagram's first fragment carries them. Nothing is reassembled
//! here: the first fragment goes through conntrack, the rules and NAT as
//! any packet of its flow, and what became of it is kept for its datagram
//! (source, destination, protocol, identification): forwarded with its
//! flow's addresses, dropped for a reason, handed to the worker that owns
//! its NAT mapping, or taken by the router itself. The datagram's other
//! fragments, which hold no ports, share that [`Fate`]: their addresses
//! are translated as the first's were (the L4 checksum, which covers the
//! whole datagram, was adjusted in the first) and they are routed, or
//! they are dropped with the first's reason. The receiver reassembles, as behind VPP; Linux's
//! conntrack instead reassembles whole datagrams before it tracks them
//! (`nf_defrag_ipv4`) and fragments them again on the way out.
//!
//! A fragment that comes before its datagram's first waits as a copy in
//! a fixed store ([`EARLY`] frames of up to the largest frame an
//! interface carries, per worker: nothing is allocated per packet) and is
//! sent when the first has been decided, from the worker's next
//! [`emit`](crate::fwd::ForwardMode::emit) (`injected`); after
//! [`TIMEOUT_NS`] without its first it is dropped. A datagram's record
//! goes when all its bytes have passed (its last fragment gives its
//! length) or after [`TIMEOUT_NS`]; at most [`DATAGRAMS`] are followed at
//! a time per worker, so a flood of fragments whose datagrams never
//! complete holds at most that many records, each for at most a second.
//!
//! A NAT64 ICMP message's first fragment cannot be translated alone: the
//! ICMPv6 checksum's pseudo-header holds the whole message's length
//! (ICMPv4's has none), which only its last fragment gives. It waits as a
//! copy in a second store ([`FIRSTS`] frames) until the last has come,
//! and then goes the way of any first fragment from the worker's next
//! `emit` (the fragments after it wait for it as above); a datagram whose
//! last came first does not wait.
//!
//! Counted: `reass_fragments` (fragments the gateway took this way, the
//! first ones included), `reass_held` (fragments that waited for their
//! first, or a first for its length), `reass_timeout` (held ones dropped:
//! what they waited for did not come in time), `reass_dropped` (held ones
//! dropped when their first came:
//! the datagram was dropped, or handed to another worker, which a held
//! copy cannot follow, or sent nowhere) and `reass_full` (fragments
//! refused, as `fragment`, for want of a record or a slot).

use crate::copies::{Copies, Held};
use crate::verdict::DropReason;

/// Datagrams followed at a time, per worker.
pub const DATAGRAMS: usize = 1024;
/// Fragments that may wait for their datagram's first, per worker.
pub const EARLY: usize = 32;
/// NAT64 ICMP first fragments that may wait for their message's length,
/// per worker.
pub const FIRSTS: usize = 8;
/// How long a datagram is followed, and a fragment waits for its first:
/// a datagram's fragments leave their sender back to back, so a second
/// is ample (VPP's virtual reassembly allows 100 ms, Linux's
/// reassembly 30 s).
pub const TIMEOUT_NS: u64 = 1_000_000_000;
/// Records tried for a datagram (from its hash on).
const PROBES: usize = 8;

crate::counter_enum! {
    /// What the gateway's virtual reassembly counts.
    pub enum Event {
        /// Fragments taken through virtual reassembly (first ones too).
        Fragments = "reass_fragments",
        /// Fragments that came before their datagram's first and waited.
        Held = "reass_held",
        /// Waiting fragments dropped: their first did not come in time.
        Timeout = "reass_timeout",
        /// Waiting fragments dropped when their first came (the datagram
        /// dropped or handed to another worker, or not sent).
        Dropped = "reass_dropped",
        /// Fragments refused for want of a record or a waiting slot.
        Full = "reass_full",
    }
}

/// A datagram: the addresses (IPv4 mapped), the identification, the
/// protocol (IPv6: the fragment header's next header) and the family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Key {
    /// Source address.
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// Identification (IPv4: 16 bits).
    pub id: u32,
    /// Protocol.
    pub proto: u8,
    /// IPv6.
    pub v6: bool,
}

impl Key {
    fn hash(&self) -> usize {
        let m = |x: u64, y: u64| {
            let p = u128::from(x ^ 0x9e37_79b9_7f4a_7c15) * u128::from(y ^ 0xd6e8_feb8_6659_fd93);
            (p as u64) ^ ((p >> 64) as u64)
        };
        let rest = u64::from(self.id) << 16 | u64::from(self.proto) << 8 | u64::from(self.v6);
        let a = m(self.src as u64 ^ (self.src >> 64) as u64, self.dst as u64);
        m(a, (self.dst >> 64) as u64 ^ rest) as usize
    }
}

/// What became of a datagram's first fragment, which its other fragments
/// share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Forwarded with these addresses (its flow's, translated or not).
    Forward {
        /// Source address.
        src: u128,
        /// Destination address.
        dst: u128,
    },
    /// A NAT64 flow's datagram from the IPv6 client: translated to IPv4
    /// with these addresses (the pool's, the server's) and routed.
    Nat64To4 {
        /// Source address.
        src: u32,
        /// Destination address.
        dst: u32,
    },
    /// A NAT64 flow's datagram from the IPv4 server: translated to IPv6
    /// with these addresses (the server's in the prefix, the client's)
    /// and routed.
    Nat64To6 {
        /// Source address.
        src: u128,
        /// Destination address.
        dst: u128,
    },
    /// For the router itself (no flow: it answers, or punts it).
    Router,
    /// Dropped (or refused with an answer), for this reason.
    Drop(DropReason),
    /// Handed to this worker, which owns its mapping.
    Handoff(u16),
}

/// What to do with a fragment that is not its datagram's first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Later {
    /// Its datagram's fate.
    Fate(Fate),
    /// The first has not come: hold it ([`Reass::hold`]).
    Wait,
    /// No record for its datagram could be made: drop it.
    Full,
}

#[derive(Clone, Copy, Debug)]
struct Datagram {
    key: Key,
    live: bool,
    /// When it was first seen.
    at: u64,
    fate: Option<Fate>,
    /// Payload bytes of the fragments seen, and the datagram's (0 until
    /// its last fragment came).
    seen: u32,
    len: u32,
}

/// One worker's records and waiting fragments.
#[derive(Clone, Debug)]
pub struct Reass {
    table: Vec<Datagram>,
    store: Copies<Key, Fate>,
    /// First fragments waiting for their datagram's length.
    firsts: Copies<Key, ()>,
    /// The largest frame held.
    frame: usize,
    now: u64,
    events: [u64; Event::COUNT],
}

impl Reass {
    /// Records and a store for frames of up to `room` bytes (with room to
    /// grow by [`GROWTH6`](crate::nat64::GROWTH6) bytes: an IPv4 fragment
    /// translated to IPv6 in its copy).
    pub fn new(room: usize) -> Self {
        let (frame, room) = (room, room + crate::nat64::GROWTH6);
        let none = Datagram {
            key: Key::default(),
            live: false,
            at: 0,
            fate: None,
            seen: 0,
            len: 0,
        };
        Reass {
            table: vec![none; DATAGRAMS],
            // No limit per datagram: a full store refuses (`reass_full`),
            // never drops a held fragment for a newer one.
            store: Copies::new(
                EARLY,
                room,
                usize::MAX,
                Key::default(),
                Fate::Drop(DropReason::Fragment),
            ),
            firsts: Copies::new(FIRSTS, room, 1, Key::default(), ()),
            frame,
            now: 0,
            events: [0; Event::COUNT],
        }
    }

    /// The counters, as [`Event`] names them.
    pub fn events(&self) -> &[u64; Event::COUNT] {
        &self.events
    }

    /// Counts `e`.
    pub fn count(&mut self, e: Event) {
        self.events[e as usize] += 1;
    }

    /// Whether held fragments wait to be sent.
    #[inline]
    pub fn ready(&self) -> bool {
        self.store.ready()
    }

    /// Whether held first fragments may go: their datagram's length is
    /// known.
    #[inline]
    pub fn firsts_ready(&self) -> bool {
        self.firsts.ready()
    }

    fn stale(&self, d: &Datagram) -> bool {
        !d.live || self.now.saturating_sub(d.at) > TIMEOUT_NS
    }

    /// The record of `key`, made if there is none (`None`: no room).
    fn record(&mut self, key: &Key) -> Option<usize> {
        let mask = DATAGRAMS - 1;
        let h = key.hash();
        let mut free = None;
        for i in (0..PROBES).map(|k| (h + k) & mask) {
            let d = &self.table[i];
            if self.stale(d) {
                free = free.or(Some(i));
            } else if d.key == *key {
                return Some(i);
            }
        }
        let i = free?;
        self.table[i] = Datagram {
            key: *key,
            live: true,
            at: self.now,
            fate: None,
            seen: 0,
            len: 0,
        };
        Some(i)
    }

    /// Counts a fragment of `len` payload bytes at byte `at` (`last`: More
    /// Fragments clear) against record `i`, which goes once every byte of
    /// its datagram has passed and its fate is known.
    fn account(&mut self, i: usize, at: u32, len: u32, last: bool) {
        let d = &mut self.table[i];
        d.seen = d.seen.saturating_add(len);
        if last {
            d.len = at.saturating_add(len);
        }
        if d.fate.is_some() && d.len != 0 && d.seen >= d.len {
            d.live = false;
        }
    }

    /// A datagram's first fragment (`len` payload bytes; `last`: it is
    /// the whole datagram's last too) met `fate`: kept for the others, and
    /// given to those that wait.
    pub fn first(&mut self, key: &Key, len: u32, last: bool, fate: Fate) {
        self.count(Event::Fragments);
        let Some(i) = self.record(key) else {
            // No room: the others, if they come, are refused.
            self.count(Event::Full);
            return;
        };
        let d = &mut self.table[i];
        if d.fate.is_some() {
            // A first fragment came already: this is a new datagram with
            // the identification of one whose other fragments were lost.
            (d.at, d.seen, d.len) = (self.now, 0, 0);
        }
        d.fate = Some(fate);
        self.store.wake(key, fate);
        self.account(i, 0, len, last);
    }

    /// A fragment at payload byte `at` (not 0) of `len` bytes (`last`:
    /// More Fragments clear): its datagram's fate if known.
    pub fn later(&mut self, key: &Key, at: u32, len: u32, last: bool) -> Later {
        self.count(Event::Fragments);
        let Some(i) = self.record(key) else {
            self.count(Event::Full);
            return Later::Full;
        };
        let fate = self.table[i].fate;
        self.account(i, at, len, last);
        if last {
            self.firsts.wake(key, ());
        }
        fate.map_or(Later::Wait, Later::Fate)
    }

    /// The payload length of `key`'s datagram, once its last fragment has
    /// come (and its record is still followed).
    pub fn length(&self, key: &Key) -> Option<u32> {
        let h = key.hash();
        (0..PROBES)
            .map(|k| &self.table[(h + k) & (DATAGRAMS - 1)])
            .find(|d| !self.stale(d) && d.key == *key)
            .and_then(|d| (d.len != 0).then_some(d.len))
    }

    /// Keeps a copy of `frame`, the first fragment of `key`'s datagram
    /// received on `in_port`, until the datagram's last fragment gives its
    /// length; `false` when there is no slot or it is larger than one
    /// (counted `reass_full`).
    pub fn hold_first(&mut self, key: &Key, in_port: u16, frame: &[u8]) -> bool {
        let held = if frame.len() > self.frame {
            Held::Full
        } else {
            self.firsts.hold(*key, in_port, self.now, frame)
        };
        match held {
            Held::Full => {
                self.count(Event::Full);
                return false;
            }
            // The same datagram's first again (sent again): the older
            // copy is dropped for it.
            Held::Replaced => self.count(Event::Dropped),
            Held::Stored => {}
        }
        self.count(Event::Held);
        true
    }

    /// A held first fragment whose datagram's length is now known, oldest
    /// first: its slot, frame and receiving port ([`Reass::free_first`]
    /// gives the slot back).
    pub fn take_first(&mut self) -> Option<crate::copies::Taken<()>> {
        self.firsts.take()
    }

    /// Gives back a taken first fragment's slot.
    pub fn free_first(&mut self, slot: usize, frame: Vec<u8>) {
        self.firsts.free(slot, frame);
    }

    /// Keeps a copy of `frame` (a fragment of `key`'s datagram received
    /// on `in_port`) until the datagram's first comes; `false` when there
    /// is no slot or it is larger than a slot (counted `reass_full`).
    pub fn hold(&mut self, key: &Key, in_port: u16, frame: &[u8]) -> bool {
        if frame.len() > self.frame || self.store.hold(*key, in_port, self.now, frame) == Held::Full
        {
            self.count(Event::Full);
            return false;
        }
        self.count(Event::Held);
        true
    }

    /// Gives each held fragment whose first has come, oldest first, to
    /// `send(frame, in_port, fate)`, which says whether it was sent;
    /// those not sent are counted `reass_dropped`.
    pub fn release(&mut self, mut send: impl FnMut(&mut Vec<u8>, u16, Fate) -> bool) {
        while let Some(mut t) = self.store.take() {
            if !send(&mut t.frame, t.in_port, t.tag) {
                self.count(Event::Dropped);
            }
            self.store.free(t.slot, t.frame);
        }
    }

    /// Moves the clock to `now` (ns): fragments that waited longer than
    /// [`TIMEOUT_NS`] are dropped (records time out as they are met).
    pub fn tick(&mut self, now: u64) {
        self.now = now;
        self.events[Event::Timeout as usize] +=
            self.store.expire(now, TIMEOUT_NS) + self.firsts.expire(now, TIMEOUT_NS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn key(id: u32) -> Key {
        Key {
            src: 1,
            dst: 2,
            id,
            proto: 17,
            v6: false,
        }
    }

    const FWD: Fate = Fate::Forward { src: 3, dst: 4 };

    /// In order: the first's fate goes to the others, and the record goes
    /// with the last byte (a datagram with the same identification later
    /// is a new one).
    #[test]
    fn the_first_fragments_fate_is_the_others_and_the_record_goes_when_done() {
        let mut r = Reass::new(100);
        r.tick(S);
        r.first(&key(1), 16, false, FWD);
        assert_eq!(r.later(&key(1), 16, 16, false), Later::Fate(FWD));
        assert_eq!(r.later(&key(1), 32, 5, true), Later::Fate(FWD));
        assert_eq!(r.later(&key(1), 16, 16, false), Later::Wait, "gone");
        assert_eq!(r.events()[Event::Fragments as usize], 4);
        // Another datagram's is its own.
        r.first(&key(2), 8, false, Fate::Drop(DropReason::Filtered));
        assert_eq!(
            r.later(&key(2), 8, 8, true),
            Later::Fate(Fate::Drop(DropReason::Filtered))
        );
    }

    /// Early fragments wait and go, oldest first, when the first comes;
    /// those whose first does not come time out; a full store refuses.
    #[test]
    fn early_fragments_wait_for_their_first_or_time_out() {
        let mut r = Reass::new(100);
        r.tick(S);
        for (k, at) in [(1u32, 16u32), (1, 32), (2, 16)] {
            assert_eq!(r.later(&key(k), at, 16, false), Later::Wait);
            assert!(r.hold(&key(k), 7, &[k as u8, at as u8]));
        }
        assert!(!r.ready());
        r.first(&key(1), 16, false, FWD);
        assert!(r.ready());
        let mut sent = vec![];
        r.release(|f, p, fate| {
            sent.push((f.clone(), p, fate));
            true
        });
        assert_eq!(sent, [(vec![1, 16], 7, FWD), (vec![1, 32], 7, FWD)]);
        assert!(!r.ready());
        r.tick(S + TIMEOUT_NS);
        assert_eq!(r.events()[Event::Timeout as usize], 0);
        r.tick(S + TIMEOUT_NS + 1);
        assert_eq!(r.events()[Event::Timeout as usize], 1, "datagram 2's");
        // The record timed out too: its first now opens a new one.
        r.first(&key(2), 16, false, FWD);
        assert!(!r.ready());
        for i in 0..EARLY as u32 {
            assert!(r.hold(&key(100 + i), 0, &[0]));
        }
        assert!(!r.hold(&key(999), 0, &[0]), "store full");
        assert!(
            !Reass::new(1).hold(&key(1), 0, &[0, 0]),
            "larger than a slot"
        );
        assert_eq!(r.events()[Event::Held as usize], 3 + EARLY as u64);
        assert_eq!(r.events()[Event::Full as usize], 1);
    }

    /// A first fragment again, while the record of an earlier datagram
    /// with the same identification waits for bytes that were lost,
    /// starts the count again: the new datagram's record lasts until its
    /// own last byte.
    #[test]
    fn an_identification_used_again_starts_a_new_datagram() {
        let mut r = Reass::new(100);
        r.tick(S);
        r.first(&key(1), 16, false, FWD);
        assert_eq!(
            r.later(&key(1), 32, 8, true),
            Later::Fate(FWD),
            "16..32 lost"
        );
        r.first(&key(1), 16, false, Fate::Drop(DropReason::Filtered));
        let drop = Later::Fate(Fate::Drop(DropReason::Filtered));
        assert_eq!(r.later(&key(1), 16, 16, false), drop, "not done yet");
        assert_eq!(r.later(&key(1), 32, 8, true), drop);
        assert_eq!(r.later(&key(1), 32, 8, true), Later::Wait, "done");
    }

    /// One datagram's early fragments may fill the store, and the next is
    /// refused: none that waits is dropped for it (all are sent when the
    /// first comes).
    #[test]
    fn a_datagram_filling_the_store_is_refused_more_not_replaced() {
        let mut r = Reass::new(100);
        r.tick(S);
        for i in 0..EARLY as u8 {
            assert!(r.hold(&key(1), 0, &[i]));
        }
        assert!(!r.hold(&key(1), 0, &[99]), "store full");
        assert_eq!(r.events()[Event::Full as usize], 1);
        r.first(&key(1), 8, false, FWD);
        let mut sent = vec![];
        r.release(|f, _, _| {
            sent.push(f[0]);
            true
        });
        assert_eq!(sent, (0..EARLY as u8).collect::<Vec<_>>());
    }

    /// A (NAT64 ICMP) first fragment held for its datagram's length may go
    /// once the last fragment has come, which gives the length; one whose
    /// last does not come times out; the store is bounded.
    #[test]
    fn a_first_fragment_waits_for_its_datagrams_length() {
        let mut r = Reass::new(100);
        r.tick(S);
        assert_eq!(r.length(&key(1)), None);
        assert!(r.hold_first(&key(1), 3, &[1]));
        assert!(!r.firsts_ready());
        assert_eq!(r.later(&key(1), 16, 16, false), Later::Wait);
        assert!(!r.firsts_ready(), "not the last yet");
        assert_eq!(r.length(&key(1)), None);
        assert_eq!(r.later(&key(1), 32, 8, true), Later::Wait);
        assert!(r.firsts_ready());
        assert_eq!(r.length(&key(1)), Some(40));
        let t = r.take_first().unwrap();
        assert_eq!((&t.frame[..], t.in_port), (&[1u8][..], 3));
        r.free_first(t.slot, t.frame);
        assert!(!r.firsts_ready());
        assert!(r.hold_first(&key(2), 0, &[2]));
        r.tick(S + TIMEOUT_NS + 1);
        assert_eq!(r.events()[Event::Timeout as usize], 1);
        assert!(r.take_first().is_none());
        for i in 0..FIRSTS as u32 {
            assert!(r.hold_first(&key(10 + i), 0, &[0]));
        }
        assert!(!r.hold_first(&key(99), 0, &[0]), "store full");
        assert_eq!(r.events()[Event::Full as usize], 1);
        assert_eq!(r.events()[Event::Held as usize], 2 + FIRSTS as u64);
    }

    /// A held fragment whose datagram is dropped (or not sent) is counted.
    #[test]
    fn held_fragments_of_a_dropped_datagram_are_counted() {
        let mut r = Reass::new(100);
        r.tick(S);
        assert_eq!(r.later(&key(1), 8, 8, true), Later::Wait);
        assert!(r.hold(&key(1), 0, &[1]));
        r.first(&key(1), 8, false, Fate::Drop(DropReason::Filtered));
        let mut fates = vec![];
        r.release(|_, _, f| {
            fates.push(f);
            false
        });
        assert_eq!(fates, [Fate::Drop(DropReason::Filtered)]);
        assert_eq!(r.events()[Event::Dropped as usize], 1);
    }

    /// A flood of datagrams that never complete fills the records within
    /// reach of a key, and they are refused until the records time out.
    #[test]
    fn a_flood_of_incomplete_datagrams_is_bounded_in_time() {
        let mut r = Reass::new(100);
        r.tick(S);
        let mut full = 0;
        for id in 0..4 * DATAGRAMS as u32 {
            if r.later(&key(id), 8, 8, false) == Later::Full {
                full += 1;
            }
        }
        assert!(full >= 3 * DATAGRAMS, "{full}");
        let refused = (0..64u32)
            .filter(|&i| r.later(&key(100_000 + i), 8, 8, false) == Later::Full)
            .count();
        assert!(refused > 0);
        r.tick(S + TIMEOUT_NS + 1);
        for i in 0..64u32 {
            assert_eq!(r.later(&key(200_000 + i), 8, 8, false), Later::Wait);
        }
    }
}
