//! A flow written out and read back: what a restart keeps (`[ha]
//! state_file`, `sluice ctl state save`) and, later, what a peer is sent.
//!
//! A [`Saved`] flow is its two tuples (with NAT, the reply tuple holds the
//! mapping: a flow read back holds its public address and port, and no
//! new flow can be given them while it lives), its state and the time it
//! had left. Its TCP windows are not kept: a flow read back picks each
//! side's window up from that side's next segment (as conntrackd's
//! default, without `TCPWindowTracking`, has the kernel do), so the first
//! segment each way after a restart is taken as it comes and the windows
//! are checked from then on. Route caches are not kept either: the first
//! packet each way looks its route up again.
//!
//! The record is [`RECORD`] bytes, little-endian, fixed offsets, so that
//! a file of a million flows is read and checked in one pass with no
//! parser, and the same bytes can go into a datagram.

use super::{ConnTrack, Flow, Refused, State, Tuple, STATES};

/// Bytes per record.
pub const RECORD: usize = 96;

/// A flow as it is kept across a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Saved {
    /// The originator's direction.
    pub orig: Tuple,
    /// The replies' direction (with NAT: the mapping).
    pub reply: Tuple,
    /// Its state.
    pub state: State,
    /// Nanoseconds it had left when written unless a packet came.
    pub remaining_ns: u64,
    /// The worker it was on (its gateway index), for the reader to put it
    /// back where its packets go.
    pub worker: u16,
}

/// Why a record was not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// The state byte names no state.
    State,
    /// A TCP state on another protocol, or the reverse.
    StateForProtocol,
    /// The two tuples are one, or differ in protocol or zone.
    Tuples,
    /// The bytes the format leaves zero are not.
    Padding,
}

impl Bad {
    /// The reason as a report says it.
    pub fn name(self) -> &'static str {
        match self {
            Bad::State => "unknown state",
            Bad::StateForProtocol => "a state its protocol cannot have",
            Bad::Tuples => "tuples that do not make a flow",
            Bad::Padding => "non-zero padding",
        }
    }
}

const TCP: u8 = 6;

/// Where each field lies in a record.
const ORIG: usize = 0;
const REPLY: usize = 40;
const STATE: usize = 80;
const WORKER: usize = 82;
const REMAINING: usize = 88;
/// A tuple: source, destination (16 each), ports (2 each), protocol,
/// a zero byte, zone.
const TUPLE: usize = 40;

fn put_tuple(b: &mut [u8], t: &Tuple) {
    let (src, dst, sport, dport, zone) = (t.src, t.dst, t.sport, t.dport, t.zone);
    b[0..16].copy_from_slice(&src.to_le_bytes());
    b[16..32].copy_from_slice(&dst.to_le_bytes());
    b[32..34].copy_from_slice(&sport.to_le_bytes());
    b[34..36].copy_from_slice(&dport.to_le_bytes());
    b[36] = t.proto;
    b[37] = 0;
    b[38..40].copy_from_slice(&zone.to_le_bytes());
}

fn get_tuple(b: &[u8]) -> Result<Tuple, Bad> {
    let word = |r: std::ops::Range<usize>| -> u128 {
        let mut x = [0u8; 16];
        x.copy_from_slice(&b[r]);
        u128::from_le_bytes(x)
    };
    let half = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    if b[37] != 0 {
        return Err(Bad::Padding);
    }
    Ok(Tuple {
        src: word(0..16),
        dst: word(16..32),
        sport: half(32),
        dport: half(34),
        proto: b[36],
        zone: half(38),
    })
}

impl Saved {
    /// Flow `f` with `remaining_ns` left, on worker `worker`.
    pub fn of(f: &Flow, remaining_ns: u64, worker: u16) -> Saved {
        Saved {
            orig: f.orig,
            reply: f.reply,
            state: f.state,
            remaining_ns,
            worker,
        }
    }

    /// The record's bytes.
    pub fn encode(&self) -> [u8; RECORD] {
        let mut b = [0u8; RECORD];
        put_tuple(&mut b[ORIG..ORIG + TUPLE], &self.orig);
        put_tuple(&mut b[REPLY..REPLY + TUPLE], &self.reply);
        b[STATE] = self.state as u8;
        b[WORKER..WORKER + 2].copy_from_slice(&self.worker.to_le_bytes());
        b[REMAINING..REMAINING + 8].copy_from_slice(&self.remaining_ns.to_le_bytes());
        b
    }

    /// A record read back, checked: what [`ConnTrack::install`] could not
    /// take apart from a clash with a tracked flow is refused here.
    pub fn decode(b: &[u8; RECORD]) -> Result<Saved, Bad> {
        let orig = get_tuple(&b[ORIG..ORIG + TUPLE])?;
        let reply = get_tuple(&b[REPLY..REPLY + TUPLE])?;
        let state = *STATES
            .iter()
            .find(|s| **s as u8 == b[STATE])
            .ok_or(Bad::State)?;
        if b[STATE + 1] != 0 || b[WORKER + 2..REMAINING].iter().any(|&x| x != 0) {
            return Err(Bad::Padding);
        }
        let tcp_state = !matches!(state, State::Unreplied | State::Replied);
        if tcp_state != (orig.proto == TCP) {
            return Err(Bad::StateForProtocol);
        }
        if orig == reply || orig.proto != reply.proto || { orig.zone } != { reply.zone } {
            return Err(Bad::Tuples);
        }
        let mut r = [0u8; 8];
        r.copy_from_slice(&b[REMAINING..REMAINING + 8]);
        Ok(Saved {
            orig,
            reply,
            state,
            remaining_ns: u64::from_le_bytes(r),
            worker: u16::from_le_bytes([b[WORKER], b[WORKER + 1]]),
        })
    }
}

impl ConnTrack {
    /// Tracks flow `s` as it was: its tuples, its state, expiring when it
    /// would have (`remaining_ns` from now; never later than its state's
    /// timeout from now), its TCP windows picked up from the next segments
    /// and checked liberally ([`super::Window::taken_over`]: the flow's
    /// packets went through another box, or this one before a restart, and
    /// the segments in flight then are not known here) (control path: a
    /// restart, before the worker runs; the HA peer's changes). Refused when
    /// either tuple is tracked already (`Exists`) or the table is full.
    pub fn install(&mut self, s: &Saved) -> Result<u32, Refused> {
        let (ho, hr) = (s.orig.hash(), s.reply.hash());
        if self.locate(&s.orig, ho).is_some() || self.locate(&s.reply, hr).is_some() {
            return Err(Refused::Exists);
        }
        let limit = self.limits[s.state as usize];
        let last_ns = self
            .now_ns
            .saturating_sub(limit.saturating_sub(s.remaining_ns));
        let i = self.enter_as(s.orig, ho, s.reply, hr, None, s.state, last_ns)?;
        if self.tcp_window && s.orig.proto == super::TCP {
            self.windows[i as usize] = super::Window::taken_over();
        }
        Ok(i)
    }

    /// Sets the table's clock (before the worker's first tick: flows
    /// installed then expire by the worker's clock).
    pub fn set_now(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conntrack::Timeouts;

    fn v4(a: [u8; 4]) -> u128 {
        0xffff_0000_0000 | u128::from(u32::from_be_bytes(a))
    }

    fn tuple(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, proto: u8) -> Tuple {
        Tuple {
            src: v4(src),
            dst: v4(dst),
            sport,
            dport,
            proto,
            zone: 0,
        }
    }

    /// A NAT flow written and read back is the same flow; a record whose
    /// bytes do not make one is refused with its reason.
    #[test]
    fn a_record_reads_back_as_written_and_bad_ones_are_named() {
        let orig = tuple([10, 0, 0, 2], 40000, [198, 51, 100, 7], 443, TCP);
        let reply = tuple([198, 51, 100, 7], 443, [203, 0, 113, 1], 2048, TCP);
        let s = Saved {
            orig,
            reply,
            state: State::Established,
            remaining_ns: 123_456_789_012,
            worker: 3,
        };
        let b = s.encode();
        assert_eq!(Saved::decode(&b), Ok(s));
        let mut x = b;
        x[STATE] = 200;
        assert_eq!(Saved::decode(&x), Err(Bad::State));
        let mut x = b;
        x[STATE] = State::Replied as u8;
        assert_eq!(Saved::decode(&x), Err(Bad::StateForProtocol));
        let mut x = b;
        x[REPLY + 36] = 17;
        assert_eq!(Saved::decode(&x), Err(Bad::Tuples));
        let mut x = b;
        x[REPLY..REPLY + TUPLE].copy_from_slice(&b[ORIG..ORIG + TUPLE]);
        assert_eq!(Saved::decode(&x), Err(Bad::Tuples));
        let mut x = b;
        x[85] = 1;
        assert_eq!(Saved::decode(&x), Err(Bad::Padding));
    }

    /// A flow installed from its record is found from both directions,
    /// holds its mapping against a second install, keeps its state and
    /// expires when the record says, not a full timeout later.
    #[test]
    fn an_installed_flow_is_tracked_and_expires_on_time() {
        let t = Timeouts::default();
        let mut ct = ConnTrack::new(16, t);
        ct.set_now(1_000_000_000_000);
        let orig = tuple([10, 0, 0, 2], 5000, [198, 51, 100, 7], 53, 17);
        let reply = tuple([198, 51, 100, 7], 53, [203, 0, 113, 1], 1030, 17);
        let s = Saved {
            orig,
            reply,
            state: State::Replied,
            remaining_ns: 2_000_000_000,
            worker: 0,
        };
        let i = ct.install(&s).unwrap();
        assert_eq!(ct.flow(i).state, State::Replied);
        assert!(ct.flow(i).nat());
        assert_eq!(ct.find(&orig).map(|h| h.1), Some(false));
        assert_eq!(ct.find(&reply).map(|h| h.1), Some(true));
        assert_eq!(ct.expires_in(ct.flow(i)), 2_000_000_000);
        assert_eq!(ct.install(&s), Err(Refused::Exists));
        let other = Saved {
            orig: tuple([10, 0, 0, 3], 5000, [198, 51, 100, 7], 53, 17),
            ..s
        };
        assert_eq!(
            ct.install(&other),
            Err(Refused::Exists),
            "the mapping is held"
        );
        // Past its time, it goes.
        ct.tick(1_000_000_000_000 + 2_000_000_001);
        assert!(ct.find(&orig).is_none());
        // A record with more left than its state's timeout gets the
        // timeout.
        let long = Saved {
            remaining_ns: u64::MAX,
            ..s
        };
        let i = ct.install(&long).unwrap();
        assert_eq!(ct.expires_in(ct.flow(i)), t.replied);
        // A TCP flow's windows are picked up and checked liberally (see
        // `Window::taken_over`); a UDP flow has none.
        let tcp = Saved {
            orig: tuple([10, 0, 0, 4], 40000, [198, 51, 100, 7], 443, TCP),
            reply: tuple([198, 51, 100, 7], 443, [203, 0, 113, 1], 1031, TCP),
            state: State::Established,
            ..s
        };
        let j = ct.install(&tcp).unwrap();
        assert!(ct.windows[j as usize].is_liberal());
        assert!(!ct.windows[i as usize].is_liberal());
    }
}
