//! Where a worker's cycles and rounds go, as arithmetic over clock readings
//! (no clock of its own, no counters): what one span of poll rounds adds to
//! the core's counters, and when a busy worker's span of rounds must end
//! with a clock read.
//!
//! A busy worker reads the TSC once per [`CLOCK_EVERY`] rounds while every
//! round is saturated: at least a full burst, and no queue drained by a
//! partial one (at 64 packets a round the clock read, the residency record
//! and the accounting cost about a cycle per packet, as much as testpmd's
//! whole io loop), and after every round that is not. A queue that gives
//! nothing does not end a span: a router's output port, or a port whose
//! traffic has stopped, beside a loaded input. A span's rounds are
//! accounted together: busy when any brought packets, idle otherwise.

/// A busy worker reads the clock once per this many saturated rounds.
pub const CLOCK_EVERY: u32 = 4;

/// Rounds since the clock was last read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    rounds: u32,
    got: usize,
    /// A round extends a span only when it brought at least this many
    /// packets (a full burst) and no queue gave a partial burst.
    min: usize,
}

impl Span {
    /// A span for a worker whose bursts are `min` packets.
    pub fn new(min: usize) -> Self {
        Span {
            rounds: 0,
            got: 0,
            min,
        }
    }

    /// A round received `got`, and `partial` when some queue gave a
    /// partial burst (it was drained); true when the span ends here (the
    /// caller reads the clock and calls [`Span::close`]).
    #[inline]
    pub fn round(&mut self, got: usize, partial: bool) -> bool {
        self.rounds += 1;
        self.got += got;
        // Only saturated rounds extend a span: below that the per-round
        // costs do not matter, and spans over partly filled rounds slowed
        // the softnic generator (another thread filling the rings)
        // fourfold; why is not understood. An empty queue beside full
        // ones (a router's output port) leaves the round saturated: ending
        // every span there cost DPDK's l3fwd bench 2 cycles a packet.
        !(got >= self.min && !partial && self.rounds < CLOCK_EVERY)
    }

    /// Ends the span: its rounds and packets, and it starts over.
    #[inline]
    pub fn close(&mut self) -> (u32, usize) {
        let r = (self.rounds, self.got);
        self.rounds = 0;
        self.got = 0;
        r
    }
}

/// What rounds from `t0` to `t1` add to a core's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// Poll rounds.
    pub polls: u64,
    /// Empty rounds (the last of a span, when it was empty).
    pub empty_polls: u64,
    /// Cycles with packets.
    pub busy_cycles: u64,
    /// Cycles without.
    pub idle_cycles: u64,
    /// Packets received.
    pub rx_pkts: u64,
}

/// `rounds` poll rounds from `t0` to `t1` (TSC) received `got` together,
/// the last of them empty or not.
#[inline]
pub fn delta(t0: u64, t1: u64, rounds: u64, got: usize, last_empty: bool) -> Delta {
    let cycles = t1.wrapping_sub(t0);
    let busy = got > 0;
    Delta {
        polls: rounds,
        empty_polls: u64::from(last_empty),
        busy_cycles: if busy { cycles } else { 0 },
        idle_cycles: if busy { 0 } else { cycles },
        rx_pkts: got as u64,
    }
}

/// The residency end of the bursts of a span of `rounds` rounds from `t0`
/// to `t1`: one mean round after `t0` (each burst was sent within the
/// round it came in).
#[inline]
pub fn span_residency_end(t0: u64, t1: u64, rounds: u32) -> u64 {
    t0 + t1.wrapping_sub(t0) / u64::from(rounds.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturated_rounds_read_the_clock_every_fourth_round() {
        let mut s = Span::new(32);
        let ends: Vec<bool> = (0..4).map(|_| s.round(64, false)).collect();
        assert_eq!(ends, [false, false, false, true]);
        assert_eq!(s.close(), (4, 4 * 64));
        // One full burst from one queue, nothing from the others (a
        // router's output port): saturated too.
        let ends: Vec<bool> = (0..4).map(|_| s.round(32, false)).collect();
        assert_eq!(ends, [false, false, false, true]);
        assert_eq!(s.close(), (4, 4 * 32));
    }

    #[test]
    fn a_drained_queue_or_less_than_a_burst_ends_the_span_at_once() {
        let mut s = Span::new(32);
        assert!(!s.round(64, false));
        // A full burst from one queue and a partial one from another.
        assert!(s.round(40, true));
        assert_eq!(s.close(), (2, 104));
        assert!(!s.round(32, false));
        assert!(s.round(31, true));
        assert_eq!(s.close(), (2, 63));
        // Nothing at all.
        assert!(s.round(0, false));
        assert_eq!(s.close(), (1, 0));
        assert_eq!(s.close(), (0, 0));
    }

    #[test]
    fn spans_count_as_busy_or_idle_whole() {
        assert_eq!(
            delta(100, 500, 4, 200, false),
            Delta {
                polls: 4,
                empty_polls: 0,
                busy_cycles: 400,
                idle_cycles: 0,
                rx_pkts: 200,
            }
        );
        assert_eq!(
            delta(100, 130, 1, 0, true),
            Delta {
                polls: 1,
                empty_polls: 1,
                busy_cycles: 0,
                idle_cycles: 30,
                rx_pkts: 0,
            }
        );
        // The TSC wraps without a panic or a huge figure.
        assert_eq!(delta(u64::MAX - 9, 10, 1, 1, false).busy_cycles, 20);
    }

    #[test]
    fn residency_is_the_mean_round() {
        assert_eq!(span_residency_end(1000, 1400, 4), 1100);
        assert_eq!(span_residency_end(1000, 1400, 1), 1400);
        assert_eq!(span_residency_end(1000, 1400, 0), 1400);
    }
}
