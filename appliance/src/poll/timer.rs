//! `timer`: FreeBSD's polling(4). A tick at `hz`; on each tick every queue
//! is polled in rx_bursts of `each_burst` packets up to a quota of `burst`
//! packets, which doubles while work remains at the end of a tick and
//! shrinks by an eighth otherwise (multiplicative increase: polling(4)
//! grows by one per tick, which at 1000 Hz takes a second to reach a burst
//! of 1000 and overflows the ring meanwhile), between 1 and `burst_max`;
//! polling stops for the tick once it has used `100 - user_frac` percent of
//! the tick. With `idle_poll` the worker keeps polling between ticks instead
//! of sleeping.
//!
//! [`Ticker`] is the policy as a state machine over an injected clock (TSC
//! cycles passed in).

/// `timer` (polling(4)) settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Timer {
    /// Ticks per second.
    pub hz: u32,
    /// Initial per-queue quota per tick.
    pub burst: u32,
    /// Packets per rx_burst call.
    pub each_burst: u32,
    /// Largest quota.
    pub burst_max: u32,
    /// Percent of each tick left to other work (polling may use the rest).
    pub user_frac: u32,
    /// Keep polling between ticks.
    pub idle_poll: bool,
}

impl Default for Timer {
    fn default() -> Self {
        Timer {
            hz: 1000,
            burst: 32,
            each_burst: 32,
            burst_max: 1024,
            user_frac: 50,
            idle_poll: false,
        }
    }
}

/// The `timer` policy's state.
#[derive(Clone, Debug)]
pub struct Ticker {
    /// Tick length and the polling cap within it (cycles).
    tick: u64,
    cap: u64,
    each: usize,
    burst_max: u32,
    /// The current per-queue quota.
    burst: u32,
    /// When the next tick is due.
    next: u64,
}

impl Ticker {
    /// The policy on a clock of `clock_hz` cycles per second at `now`
    /// (the first tick is due one tick later); `max_burst` bounds one
    /// rx_burst call.
    pub fn new(t: &Timer, clock_hz: u64, max_burst: usize, now: u64) -> Self {
        let tick = clock_hz / u64::from(t.hz.max(1));
        let burst_max = t.burst_max.max(1);
        Ticker {
            tick,
            cap: tick * u64::from(100 - t.user_frac.min(99)) / 100,
            each: (t.each_burst.max(1) as usize).min(max_burst),
            burst_max,
            burst: t.burst.clamp(1, burst_max),
            next: now + tick,
        }
    }

    /// Cycles from `now` until the next tick is due (0: due).
    pub fn until_tick(&self, now: u64) -> u64 {
        self.next.saturating_sub(now)
    }

    /// The per-queue quota of the next tick.
    pub fn quota(&self) -> u32 {
        self.burst
    }

    /// Packets per rx_burst call.
    pub fn each(&self) -> usize {
        self.each
    }

    /// When a tick polled from `t0` must stop polling.
    pub fn deadline(&self, t0: u64) -> u64 {
        t0 + self.cap
    }

    /// A tick's polling ended at `t1`, `more` when some queue still had
    /// packets at its quota: adapts the quota and schedules the next tick.
    /// True when the next tick was already due (the tick overran): it is
    /// then due a whole tick after `t1`, not at once.
    pub fn ticked(&mut self, more: bool, t1: u64) -> bool {
        self.burst = if more {
            self.burst.saturating_mul(2).min(self.burst_max)
        } else {
            // By an eighth, and by at least one: integer eighths of a
            // quota under 8 are 0, which left it stuck at 7 or below.
            (self.burst - (self.burst / 8).max(1)).max(1)
        };
        self.next += self.tick;
        if self.next <= t1 {
            self.next = t1 + self.tick;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timer() -> Timer {
        Timer {
            hz: 1000,
            burst: 32,
            each_burst: 500,
            burst_max: 200,
            user_frac: 30,
            idle_poll: false,
        }
    }

    #[test]
    fn ticks_and_cap_follow_hz_and_user_frac() {
        // A 1 MHz clock: ticks of 1000 cycles, polling capped at 70%.
        let k = Ticker::new(&timer(), 1_000_000, 256, 5);
        assert_eq!(k.until_tick(5), 1000);
        assert_eq!(k.until_tick(900), 105);
        assert_eq!(k.until_tick(2000), 0);
        assert_eq!(k.deadline(1005), 1705);
        assert_eq!(k.each(), 256, "each_burst is bounded by one rx_burst");
        // user_frac 100 would leave no time to poll: at least 1% is kept.
        let all_user = Timer {
            user_frac: 100,
            ..timer()
        };
        assert_eq!(Ticker::new(&all_user, 1_000_000, 256, 0).deadline(0), 10);
    }

    #[test]
    fn quota_doubles_under_load_to_burst_max_and_decays_by_an_eighth() {
        let mut k = Ticker::new(&timer(), 1_000_000, 256, 0);
        let mut t = 0;
        let mut quotas = Vec::new();
        for _ in 0..4 {
            t += 1000;
            k.ticked(true, t + 10);
            quotas.push(k.quota());
        }
        assert_eq!(quotas, vec![64, 128, 200, 200]);
        let mut quotas = Vec::new();
        for _ in 0..3 {
            t += 1000;
            k.ticked(false, t + 10);
            quotas.push(k.quota());
        }
        assert_eq!(quotas, vec![175, 154, 135]);
        // It keeps shrinking under 8, and never falls below 1.
        for _ in 0..100 {
            t += 1000;
            k.ticked(false, t + 10);
        }
        assert_eq!(k.quota(), 1);
        k.ticked(true, t + 1010);
        assert_eq!(k.quota(), 2);
    }

    #[test]
    fn an_overrun_tick_is_late_and_the_next_is_a_whole_tick_later() {
        let mut k = Ticker::new(&timer(), 1_000_000, 256, 0);
        // Tick due at 1000 ends at 1700: the next is due at 2000.
        assert!(!k.ticked(false, 1700));
        assert_eq!(k.until_tick(1700), 300);
        // Tick at 2000 overruns to 3500: late; the next at 4500.
        assert!(k.ticked(true, 3500));
        assert_eq!(k.until_tick(3500), 1000);
        // Back on time.
        assert!(!k.ticked(false, 4600));
        assert_eq!(k.until_tick(4600), 900);
    }
}
