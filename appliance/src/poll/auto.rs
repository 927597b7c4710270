//! `auto`: `interrupt` until the measured receive rate stays at or above
//! `up_pps` for `hold` windows of `window`, then `busy` until it stays below
//! `down_pps` for `hold` windows; every switch is logged. The gap between
//! the two thresholds and the hold are the hysteresis: a rate between them,
//! or one window past a threshold, switches nothing.
//!
//! [`Switcher`] is the policy as a state machine over an injected clock
//! (TSC cycles passed in).

use super::Napi;
use std::time::Duration;

/// `auto` settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Auto {
    /// The interrupt-mode settings.
    pub napi: Napi,
    /// Switch to busy at or above this receive rate.
    pub up_pps: f64,
    /// Switch back to interrupt below this receive rate.
    pub down_pps: f64,
    /// Measurement window.
    pub window: Duration,
    /// Consecutive windows past a threshold before switching.
    pub hold: u32,
}

impl Default for Auto {
    fn default() -> Self {
        Auto {
            napi: Napi::default(),
            up_pps: 200_000.0,
            down_pps: 50_000.0,
            window: Duration::from_millis(10),
            hold: 10,
        }
    }
}

/// The `auto` policy's state.
#[derive(Clone, Debug)]
pub struct Switcher {
    up: f64,
    down: f64,
    hold: u32,
    /// Window length (cycles) and the clock's rate (cycles per second).
    window: u64,
    clock_hz: u64,
    busy: bool,
    start: u64,
    pkts: u64,
    streak: u32,
}

impl Switcher {
    /// In interrupt mode at `now`, on a clock of `clock_hz` cycles per
    /// second.
    pub fn new(a: &Auto, clock_hz: u64, now: u64) -> Self {
        let window = (a.window.as_secs_f64() * clock_hz as f64) as u64;
        Switcher {
            up: a.up_pps,
            down: a.down_pps,
            hold: a.hold,
            window: window.max(1),
            clock_hz,
            busy: false,
            start: now,
            pkts: 0,
            streak: 0,
        }
    }

    /// Whether it is busy polling now (else interrupt mode).
    pub fn busy(&self) -> bool {
        self.busy
    }

    /// A poll ending at `now` received `got`. At the end of a window, the
    /// window's rate; `Some(rate)` when that window switched the mode (to
    /// [`Switcher::busy`]).
    pub fn after(&mut self, got: usize, now: u64) -> Option<f64> {
        self.pkts += got as u64;
        let span = now.wrapping_sub(self.start);
        if span < self.window {
            return None;
        }
        let pps = self.pkts as f64 * self.clock_hz as f64 / span as f64;
        let past = if self.busy {
            pps < self.down
        } else {
            pps >= self.up
        };
        self.streak = if past { self.streak + 1 } else { 0 };
        self.start = now;
        self.pkts = 0;
        if self.streak >= self.hold {
            self.busy = !self.busy;
            self.streak = 0;
            return Some(pps);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1 MHz clock, windows of 1 ms (1000 cycles), hold 3, up at
    /// 200 kpps (200 packets a window), down below 50 kpps (50).
    fn switcher() -> Switcher {
        let a = Auto {
            up_pps: 200_000.0,
            down_pps: 50_000.0,
            window: Duration::from_millis(1),
            hold: 3,
            ..Auto::default()
        };
        Switcher::new(&a, 1_000_000, 0)
    }

    /// Feeds windows with these packet counts (one poll per window);
    /// returns the busy state after each and the switches' rates.
    fn windows(s: &mut Switcher, t: &mut u64, counts: &[usize]) -> (Vec<bool>, Vec<f64>) {
        let mut busy = Vec::new();
        let mut switches = Vec::new();
        for &n in counts {
            *t += 1000;
            switches.extend(s.after(n, *t));
            busy.push(s.busy());
        }
        (busy, switches)
    }

    #[test]
    fn switches_up_after_hold_windows_at_or_above_up_pps() {
        let mut s = switcher();
        let mut t = 0;
        let (busy, sw) = windows(&mut s, &mut t, &[200, 300, 250]);
        assert_eq!(busy, vec![false, false, true]);
        assert_eq!(sw, vec![250_000.0]);
    }

    #[test]
    fn one_window_below_the_threshold_restarts_the_hold() {
        let mut s = switcher();
        let mut t = 0;
        let (busy, sw) = windows(&mut s, &mut t, &[300, 300, 199, 300, 300, 300]);
        assert_eq!(busy, vec![false, false, false, false, false, true]);
        assert_eq!(sw.len(), 1);
    }

    #[test]
    fn rates_between_the_thresholds_never_switch_either_way() {
        let mut s = switcher();
        let mut t = 0;
        let (busy, _) = windows(&mut s, &mut t, &[120; 50]);
        assert!(busy.iter().all(|b| !b));
        windows(&mut s, &mut t, &[500; 3]);
        assert!(s.busy());
        let (busy, sw) = windows(&mut s, &mut t, &[120; 50]);
        assert!(busy.iter().all(|b| *b) && sw.is_empty());
        // Below down_pps for `hold` windows: back to interrupt.
        let (busy, sw) = windows(&mut s, &mut t, &[49, 0, 10]);
        assert_eq!(busy, vec![true, true, false]);
        assert_eq!(sw, vec![10_000.0]);
    }

    #[test]
    fn a_window_is_closed_by_the_poll_that_ends_it() {
        let mut s = switcher();
        // Polls inside a window only count; the one past its end rates it
        // over the time actually elapsed (2000 cycles for 400 packets).
        assert_eq!(s.after(200, 500), None);
        assert_eq!(s.after(200, 2000), None);
        assert_eq!(s.after(400, 4000), None);
        assert!(!s.busy());
        assert_eq!(s.after(400, 6000), Some(200_000.0));
        assert!(s.busy());
    }
}
