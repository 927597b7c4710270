//! `interrupt`: Linux NAPI. Poll every queue with a budget per queue; while
//! a round fills some queue's budget, poll again; when a round leaves every
//! queue drained, arm the queues' interrupt lines and poll once more, since
//! a packet that arrived between the drained round and the arming raised
//! nothing and would otherwise wait for the next one; block only when that
//! re-poll finds nothing too.
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
}

impl Default for Napi {
    fn default() -> Self {
        Napi {
            budget: 64,
            fallback_sleep: Duration::from_micros(50),
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
/// is left), so polling goes on; otherwise it is time to arm.
pub fn after_round(more: bool) -> Next {
    if more {
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

    /// Runs a NAPI worker over `q` until `end`: a poll costs `poll_cost`,
    /// arming `arm_cost` (the race window), a block lasts until the line
    /// fires or `timeout` passes. `repoll` false is NAPI without the re-poll
    /// (the bug the re-poll exists for). Returns each packet's wait.
    fn run(q: &mut Queue, end: u64, repoll: bool) -> Vec<u64> {
        let (poll_cost, arm_cost, timeout, budget) = (10, 5, 10_000, 4);
        let mut now = 0;
        let mut waits = Vec::new();
        let take = |q: &mut Queue, now: u64, waits: &mut Vec<u64>| {
            let got = q.poll(now, budget);
            waits.extend(got.iter().map(|&a| now - a));
            got.len()
        };
        while now < end {
            let got = take(q, now, &mut waits);
            let more = got == budget && q.backlog(now);
            let t = now;
            now += poll_cost;
            q.advance(t, now);
            if after_round(more) == Next::Poll {
                continue;
            }
            // Arming takes `arm_cost`; it is in force at its end, so what
            // lands meanwhile raises nothing.
            let t = now;
            now += arm_cost;
            q.advance(t, now);
            q.armed = true;
            if repoll {
                let got = take(q, now, &mut waits);
                if after_rearm_poll(got) == Next::Poll {
                    q.armed = false;
                    continue;
                }
            }
            // Block: wake at the first armed arrival or the timeout.
            let wake = q.arrivals[q.next..]
                .iter()
                .copied()
                .find(|&a| a > now)
                .filter(|&a| a <= now + timeout && !q.fired)
                .unwrap_or(now + timeout);
            let wake = if q.fired { now } else { wake };
            q.fired = false;
            q.armed = false;
            now = wake;
        }
        waits
    }

    #[test]
    fn decisions() {
        assert_eq!(after_round(true), Next::Poll);
        assert_eq!(after_round(false), Next::Arm);
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
        assert!(waits.iter().all(|&w| w <= 20), "{waits:?}");
    }
}
