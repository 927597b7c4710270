//! `interrupt`: Linux NAPI. Poll every queue with a budget per queue; while
//! a round fills some queue's budget, poll again; when a round leaves every
//! queue drained, arm the queues' interrupt lines and poll once more, since
//! a packet that arrived between the drained round and the arming raised
//! nothing and would otherwise wait for the next one; block only when that
//! re-poll finds nothing too.
//!
//! With `busy_poll` set, a drained worker keeps polling until that long has
//! passed since its last packet before it arms (Linux's `busy_poll`, the
//! busy-polling an `SO_BUSY_POLL` socket or an epoll set with
//! `busy_poll_usecs` does before it sleeps). Request/response traffic gets
//! its answer within a round trip of the packet before it: a window that
//! covers that round trip takes the answer without a wake-up (an
//! interrupt, a scheduler wake of the worker and the return from the
//! syscall), at a CPU cost of at most the window per idle stretch.
//!
//! The decisions are pure functions of what the rounds found; the worker
//! carries them out (`crate::worker`).

use std::time::Duration;

/// NAPI settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Napi {
    /// Most packets taken from one queue per round (NAPI's weight).
    pub budget: usize,
    /// Sleep instead of blocking when a queue has no interrupt line.
    pub fallback_sleep: Duration,
    /// Keep polling this long after the last packet before arming (0: arm
    /// as soon as a round drains every queue).
    pub busy_poll: Duration,
}

impl Default for Napi {
    fn default() -> Self {
        Napi {
            budget: 64,
            fallback_sleep: Duration::from_micros(50),
            busy_poll: Duration::ZERO,
        }
    }
}

/// What a NAPI worker does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Poll another budgeted round (interrupts stay off).
    Poll,
    /// Arm every queue's interrupt line, then poll once more.
    Arm,
    /// Block until a line fires (the lines are armed), then disarm.
    Block,
}

/// After a budgeted round: `more` when some queue filled its budget (work
/// is left), so polling goes on; so it does while `idle` (time since the
/// last packet) is under `busy_poll` (same unit); otherwise it is time to
/// arm.
pub fn after_round(more: bool, idle: u64, busy_poll: u64) -> Next {
    if more || idle < busy_poll {
        Next::Poll
    } else {
        Next::Arm
    }
}

/// After the re-poll that follows arming: packets that came in the race
/// window are handled by polling on (the lines are disarmed again); only an
/// empty re-poll blocks.
pub fn after_rearm_poll(got: usize) -> Next {
    if got > 0 {
        Next::Poll
    } else {
        Next::Block
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One RX queue in virtual time with an edge-triggered interrupt line
    /// (as eventfd/rx-interrupt lines are: an arrival raises it only while
    /// it is armed).
    struct Queue {
        arrivals: Vec<u64>,
        next: usize,
        armed: bool,
        fired: bool,
    }

    impl Queue {
        fn new(arrivals: Vec<u64>) -> Self {
            Queue {
                arrivals,
                next: 0,
                armed: false,
                fired: false,
            }
        }

        /// Time passes to `now`: arrivals while armed raise the line.
        fn advance(&mut self, from: u64, now: u64) {
            if self.armed
                && self.arrivals[self.next..]
                    .iter()
                    .any(|&t| t > from && t <= now)
            {
                self.fired = true;
            }
        }

        /// Takes up to `budget` packets that have arrived by `now`; their
        /// arrival times.
        fn poll(&mut self, now: u64, budget: usize) -> Vec<u64> {
            let mut got = Vec::new();
            while self.next < self.arrivals.len()
                && self.arrivals[self.next] <= now
                && got.len() < budget
            {
                got.push(self.arrivals[self.next]);
                self.next += 1;
            }
            got
        }

        fn backlog(&self, now: u64) -> bool {
            self.arrivals.get(self.next).is_some_and(|&t| t <= now)
        }
    }

    /// What a run of the model did: each packet's wait, the wake-ups, and
    /// the time spent polling (not blocked).
    struct Run {
        waits: Vec<u64>,
        wakes: u32,
        polling: u64,
    }

    /// Runs a NAPI worker over `q` until `end`: a poll costs `poll_cost`,
    /// arming `arm_cost` (the race window), a block lasts until the line
    /// fires or `timeout` passes, and waking from it costs `wake_cost` (the
    /// interrupt, the scheduler, the return to the worker). `repoll` false
    /// is NAPI without the re-poll (the bug the re-poll exists for);
    /// `busy_poll` the window polled on after the last packet.
    fn run_with(q: &mut Queue, end: u64, repoll: bool, busy_poll: u64) -> Run {
        let (poll_cost, arm_cost, timeout, budget, wake_cost) = (10, 5, 10_000, 4, 50);
        let mut now = 0;
        let mut last = 0;
        let mut r = Run {
            waits: Vec::new(),
            wakes: 0,
            polling: 0,
        };
        let take = |q: &mut Queue, now: u64, r: &mut Run| {
            let got = q.poll(now, budget);
            r.waits.extend(got.iter().map(|&a| now - a));
            got.len()
        };
        while now < end {
            let start = now;
            let got = take(q, now, &mut r);
            if got > 0 {
                last = now;
            }
            let more = got == budget && q.backlog(now);
            let t = now;
            now += poll_cost;
            q.advance(t, now);
            if after_round(more, now - last, busy_poll) == Next::Poll {
                r.polling += now - start;
                continue;
            }
            // Arming takes `arm_cost`; it is in force at its end, so what
            // lands meanwhile raises nothing.
            let t = now;
            now += arm_cost;
            q.advance(t, now);
            q.armed = true;
            if repoll {
                let got = take(q, now, &mut r);
                if after_rearm_poll(got) == Next::Poll {
                    last = now;
                    q.armed = false;
                    r.polling += now - start;
                    continue;
                }
            }
            r.polling += now - start;
            // Block: wake at the first armed arrival or the timeout.
            let wake = q.arrivals[q.next..]
                .iter()
                .copied()
                .find(|&a| a > now)
                .filter(|&a| a <= now + timeout && !q.fired)
                .unwrap_or(now + timeout);
            let wake = if q.fired { now } else { wake };
            if wake < now + timeout || q.fired {
                r.wakes += 1;
            }
            q.fired = false;
            q.armed = false;
            now = wake + wake_cost;
        }
        r
    }

    fn run(q: &mut Queue, end: u64, repoll: bool) -> Vec<u64> {
        run_with(q, end, repoll, 0).waits
    }

    #[test]
    fn decisions() {
        assert_eq!(after_round(true, 0, 0), Next::Poll);
        assert_eq!(after_round(false, 0, 0), Next::Arm);
        assert_eq!(after_round(false, 99, 100), Next::Poll);
        assert_eq!(after_round(false, 100, 100), Next::Arm);
        assert_eq!(after_round(true, 500, 100), Next::Poll);
        assert_eq!(after_rearm_poll(1), Next::Poll);
        assert_eq!(after_rearm_poll(0), Next::Block);
    }

    #[test]
    fn a_packet_in_the_arming_window_is_not_stranded() {
        // The queue drains at t=0 (poll ends at 10); the packet lands at 12,
        // between the drained round and the end of arming (15): it raises
        // no interrupt.
        let mut q = Queue::new(vec![12]);
        let waits = run(&mut q, 100, true);
        assert_eq!(waits, vec![3], "picked up by the re-poll at t=15");
        // Without the re-poll it waits for the block's timeout.
        let mut q = Queue::new(vec![12]);
        let waits = run(&mut q, 20_000, false);
        assert_eq!(waits.len(), 1);
        assert!(waits[0] >= 10_000, "stranded: {waits:?}");
    }

    #[test]
    fn blocked_worker_wakes_on_an_armed_arrival_and_polls_a_burst_dry() {
        // Idle until 1000, then 10 packets at once: one wake, then budgeted
        // rounds (4, 4, 2) until drained, every packet within a few polls.
        let mut q = Queue::new(vec![1000; 10]);
        let waits = run(&mut q, 5000, true);
        assert_eq!(waits.len(), 10);
        assert!(waits.iter().all(|&w| w <= 50 + 20), "{waits:?}");
    }

    #[test]
    fn busy_poll_takes_an_answer_without_a_wake_up() {
        // A request at 1000 and its answer 100 later, then the next
        // request 5000 later and its answer: as a ping or a UDP
        // request/response through the router. Each request is taken at
        // its wake-up, 50 after it lands.
        let arrivals = vec![1000, 1100, 6000, 6100];
        // Without busy polling every packet waits for a wake-up.
        let plain = run_with(&mut Queue::new(arrivals.clone()), 8000, true, 0);
        assert_eq!(plain.wakes, 4);
        assert!(plain.waits.iter().all(|&w| w >= 50), "{:?}", plain.waits);
        // A 100-cycle window after each packet catches each answer.
        let bp = run_with(&mut Queue::new(arrivals.clone()), 8000, true, 100);
        assert_eq!(bp.wakes, 2, "only the requests wake it");
        assert!(bp.waits[1] <= 10 && bp.waits[3] <= 10, "{:?}", bp.waits);
        // A window shorter than the round trip catches nothing.
        let short = run_with(&mut Queue::new(arrivals), 8000, true, 30);
        assert_eq!(short.wakes, 4);
    }

    #[test]
    fn busy_poll_costs_at_most_its_window_per_idle_stretch() {
        // Packets 3000 apart: every idle stretch outlasts the window, so
        // each costs the window (and a round, arming, the re-poll) and
        // still ends in a block.
        let arrivals: Vec<u64> = (1..=10).map(|i| i * 3000).collect();
        let base = run_with(&mut Queue::new(arrivals.clone()), 31_000, true, 0);
        let bp = run_with(&mut Queue::new(arrivals), 31_000, true, 200);
        assert_eq!(bp.wakes, 10);
        assert_eq!(bp.waits.len(), 10);
        let extra = bp.polling - base.polling;
        assert!(
            extra <= 10 * (200 + 10),
            "{extra} cycles of polling over 10 stretches"
        );
        assert!(extra >= 10 * 190, "the window was not polled: {extra}");
    }
}
