//! `adaptive`: spin while packets come; after `spin_polls` empty polls,
//! poll with `pause_spins` PAUSE instructions between polls for
//! `pause_polls` polls, then sleep between polls (from `sleep_min`,
//! doubling up to `sleep_max`) for `sleep_polls` polls, then arm the
//! interrupts and block (NAPI). The first packet returns it to spinning.
//!
//! It measures the mean gap between packets (over windows, as elapsed time
//! over packets, so that its own waiting does not feed the estimate) and
//! how long its ladder takes; when the gap is longer than `predict` times
//! the ladder, it blocks at once instead of climbing it (like Linux's
//! hybrid block polling, which sleeps for half the mean completion time).
//!
//! [`Ladder`] is the policy as a state machine over an injected clock
//! (TSC cycles passed in): the worker asks how to poll, polls, tells it what
//! came and when, and carries out the wait it answers.

use super::{Napi, State};
use std::time::Duration;

/// `adaptive` settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Adaptive {
    /// Budget and fallback for the interrupt step.
    pub napi: Napi,
    /// Empty polls spent spinning before backing off.
    pub spin_polls: u32,
    /// Empty polls spent with PAUSE between polls.
    pub pause_polls: u32,
    /// PAUSE instructions between polls in that step.
    pub pause_spins: u32,
    /// Empty polls spent sleeping between polls.
    pub sleep_polls: u32,
    /// First sleep.
    pub sleep_min: Duration,
    /// Longest sleep (sleeps double up to it).
    pub sleep_max: Duration,
    /// Skip the back-off and block at once when the mean gap between
    /// packets is longer than this many times the back-off ladder's own
    /// length (0: never skip). Spinning through a ladder that ends long
    /// before the next packet only burns CPU.
    pub predict: f64,
}

impl Default for Adaptive {
    fn default() -> Self {
        Adaptive {
            napi: Napi::default(),
            spin_polls: 5000,
            pause_polls: 32,
            pause_spins: 16,
            sleep_polls: 3,
            sleep_min: Duration::from_micros(10),
            sleep_max: Duration::from_micros(40),
            predict: 2.0,
        }
    }
}

/// How the next poll is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Poll {
    /// A busy round (spinning is exactly busy polling).
    Busy,
    /// A NAPI step: a budgeted round, and arm and block when drained.
    Napi,
}

/// What the worker does after a poll, before the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Poll again at once.
    None,
    /// Execute this many PAUSE instructions.
    Pause(u32),
    /// Sleep this long (TX flushed first), then call [`Ladder::slept`].
    Sleep(Duration),
}

/// The `adaptive` policy's state.
#[derive(Clone, Debug)]
pub struct Ladder {
    spin_polls: u32,
    pause_until: u32,
    sleep_until: u32,
    pause_spins: u32,
    sleep_min: Duration,
    sleep_max: Duration,
    predict: f64,
    /// Empty polls in a row.
    empty: u32,
    /// The next sleep.
    sleep: Duration,
    /// Gap measurement window (cycles), its start and packets so far.
    window: u64,
    win_start: u64,
    win_pkts: u64,
    /// Mean gap between packets (cycles; 0 until measured).
    avg_gap: f64,
    /// When the current idle stretch began.
    idle_since: u64,
    /// Mean length of a whole ladder (cycles; 0 until measured).
    avg_ladder: f64,
    /// The sleep just answered was the ladder's last.
    last_sleep: bool,
    state: State,
}

impl Ladder {
    /// The policy at time `now`, measuring gaps over `window` cycles.
    pub fn new(a: &Adaptive, window: u64, now: u64) -> Self {
        let pause_until = a.spin_polls.saturating_add(a.pause_polls);
        Ladder {
            spin_polls: a.spin_polls,
            pause_until,
            sleep_until: pause_until.saturating_add(a.sleep_polls),
            pause_spins: a.pause_spins,
            sleep_min: a.sleep_min,
            sleep_max: a.sleep_max,
            predict: a.predict,
            empty: 0,
            sleep: a.sleep_min,
            window,
            win_start: now,
            win_pkts: 0,
            avg_gap: 0.0,
            idle_since: 0,
            avg_ladder: 0.0,
            last_sleep: false,
            state: State::Spin,
        }
    }

    /// How to make the next poll: busy rounds up the ladder, a NAPI step
    /// past it.
    pub fn poll(&self) -> Poll {
        if self.empty < self.sleep_until {
            Poll::Busy
        } else {
            Poll::Napi
        }
    }

    /// The state to publish after [`Ladder::after`].
    pub fn state(&self) -> State {
        self.state
    }

    /// Mean gap between packets and mean ladder length (cycles; 0 until
    /// measured).
    pub fn estimates(&self) -> (f64, f64) {
        (self.avg_gap, self.avg_ladder)
    }

    /// A poll at `now` received `got`: climbs or leaves the ladder and
    /// answers what to do before the next poll.
    pub fn after(&mut self, got: usize, now: u64) -> Wait {
        self.win_pkts += got as u64;
        let span = now.wrapping_sub(self.win_start);
        if span >= self.window {
            let gap = span as f64 / self.win_pkts.max(1) as f64;
            self.avg_gap = if self.avg_gap == 0.0 {
                gap
            } else {
                self.avg_gap + (gap - self.avg_gap) / 4.0
            };
            self.win_start = now;
            self.win_pkts = 0;
        }
        self.last_sleep = false;
        if got > 0 {
            self.empty = 0;
            self.sleep = self.sleep_min;
            self.state = State::Spin;
            return Wait::None;
        }
        self.empty = self.empty.saturating_add(1);
        if self.empty == 1 {
            self.idle_since = now;
            if self.predict > 0.0
                && self.avg_ladder > 0.0
                && self.avg_gap > self.predict * self.avg_ladder
            {
                // Past the ladder: block at the next step.
                self.empty = self.sleep_until.saturating_add(1);
            }
        }
        if self.empty <= self.spin_polls {
            self.state = State::Spin;
            Wait::None
        } else if self.empty <= self.pause_until {
            self.state = State::Pause;
            Wait::Pause(self.pause_spins)
        } else if self.empty <= self.sleep_until {
            self.state = State::Sleep;
            let d = self.sleep;
            self.sleep = (self.sleep * 2).min(self.sleep_max);
            self.last_sleep = self.empty == self.sleep_until;
            Wait::Sleep(d)
        } else {
            // Past the ladder: the NAPI step blocks on interrupts.
            self.state = State::Intr;
            Wait::None
        }
    }

    /// The sleep answered by [`Ladder::after`] ended at `now`; the end of
    /// the ladder's last sleep measures the ladder's length.
    pub fn slept(&mut self, now: u64) {
        if self.last_sleep {
            let ladder = now.wrapping_sub(self.idle_since) as f64;
            self.avg_ladder += (ladder - self.avg_ladder) / 4.0;
            self.last_sleep = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Adaptive {
        Adaptive {
            spin_polls: 3,
            pause_polls: 2,
            pause_spins: 7,
            sleep_polls: 3,
            sleep_min: Duration::from_micros(10),
            sleep_max: Duration::from_micros(25),
            ..Adaptive::default()
        }
    }

    /// Empty polls one cycle apart from `t` until the ladder says NAPI;
    /// the waits answered (sleeps take `sleep_cycles`).
    fn climb(l: &mut Ladder, t: &mut u64, sleep_cycles: u64) -> Vec<Wait> {
        let mut waits = Vec::new();
        while l.poll() == Poll::Busy {
            *t += 1;
            let w = l.after(0, *t);
            if let Wait::Sleep(_) = w {
                *t += sleep_cycles;
                l.slept(*t);
            }
            waits.push(w);
        }
        waits
    }

    #[test]
    fn climbs_spin_pause_sleep_then_blocks_and_a_packet_resets_it() {
        let mut l = Ladder::new(&settings(), 1_000_000, 0);
        let mut t = 0;
        let us = Duration::from_micros;
        let waits = climb(&mut l, &mut t, 100);
        assert_eq!(
            waits,
            vec![
                Wait::None,
                Wait::None,
                Wait::None,
                Wait::Pause(7),
                Wait::Pause(7),
                Wait::Sleep(us(10)),
                Wait::Sleep(us(20)),
                Wait::Sleep(us(25)),
            ]
        );
        assert_eq!(l.state(), State::Sleep);
        // Past the ladder: NAPI steps, published as interrupt mode.
        assert_eq!(l.poll(), Poll::Napi);
        assert_eq!(l.after(0, t + 1), Wait::None);
        assert_eq!(l.state(), State::Intr);
        assert_eq!(l.poll(), Poll::Napi);
        // One packet: back to spinning, the sleeps start over.
        assert_eq!(l.after(1, t + 2), Wait::None);
        assert_eq!((l.poll(), l.state()), (Poll::Busy, State::Spin));
        let waits = climb(&mut l, &mut t, 100);
        assert_eq!(waits[5], Wait::Sleep(us(10)));
    }

    #[test]
    fn the_ladder_length_is_measured_at_the_end_of_its_last_sleep() {
        let mut l = Ladder::new(&settings(), 1_000_000, 0);
        let mut t = 1000;
        climb(&mut l, &mut t, 100);
        // Idle from 1001 (the first empty poll) to the end of the third
        // sleep: 8 polls of one cycle and 3 sleeps of 100.
        assert_eq!(l.estimates().1, (8.0 + 300.0 - 1.0) / 4.0);
    }

    #[test]
    fn long_gaps_skip_the_ladder_and_short_ones_do_not() {
        let a = Adaptive {
            predict: 2.0,
            ..settings()
        };
        let window = 10_000;
        // Sparse traffic: one packet every 50_000 cycles, ladders of about
        // 300 cycles: after a few windows, an empty poll blocks at once.
        let mut l = Ladder::new(&a, window, 0);
        let mut t = 0;
        for _ in 0..8 {
            t += 50_000;
            assert_eq!(l.after(1, t), Wait::None);
            climb(&mut l, &mut t, 100);
            assert_eq!(l.after(0, t + 1), Wait::None); // a NAPI step
        }
        let (gap, ladder) = l.estimates();
        assert!(gap > 2.0 * ladder, "gap {gap} ladder {ladder}");
        t += 50_000;
        l.after(1, t);
        assert_eq!(l.after(0, t + 1), Wait::None);
        assert_eq!(
            l.poll(),
            Poll::Napi,
            "first empty poll goes straight to NAPI"
        );
        assert_eq!(l.state(), State::Intr);

        // Dense traffic: a packet every 10 cycles; the ladder is climbed.
        let mut l = Ladder::new(&a, window, 0);
        let mut t = 0;
        for _ in 0..4 {
            climb(&mut l, &mut t, 100);
            for _ in 0..5000 {
                t += 10;
                l.after(1, t);
            }
        }
        l.after(0, t + 1);
        assert_eq!(l.poll(), Poll::Busy);
        assert_eq!(l.state(), State::Spin);
    }

    #[test]
    fn prediction_off_always_climbs() {
        let a = Adaptive {
            predict: 0.0,
            ..settings()
        };
        let mut l = Ladder::new(&a, 1000, 0);
        let mut t = 0;
        for _ in 0..5 {
            t += 1_000_000;
            l.after(1, t);
            assert_eq!(climb(&mut l, &mut t, 100).len(), 8);
        }
    }
}
