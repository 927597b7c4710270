//! Poll-mode policies: how a worker waits when its queues are empty.
//!
//! - `busy`: spin on `rx_burst` forever (DPDK).
//! - `interrupt`: NAPI. Poll every queue with a budget per queue; when a
//!   round leaves every queue drained, arm the queues' interrupt lines,
//!   poll once more (packets that arrived before arming raise nothing), and
//!   block in epoll until a line fires; then disarm and poll again.
//! - `adaptive`: spin while packets come; after `spin_polls` empty polls,
//!   poll with `pause_spins` PAUSE instructions between polls for
//!   `pause_polls` polls, then sleep between polls (from `sleep_min_us`,
//!   doubling up to `sleep_max_us`) for `sleep_polls` polls, then arm the
//!   interrupts and block. The first packet returns it to spinning. It
//!   measures the mean gap between packets (over 10 ms windows) and how
//!   long its ladder takes; when the gap is longer than `predict` times the
//!   ladder, it blocks at once instead of climbing it (like Linux's hybrid
//!   block polling, which sleeps for half the mean completion time).
//! - `timer`: FreeBSD polling(4). A tick at `hz`; on each tick every queue
//!   is polled in rx_bursts of `each_burst` packets up to a quota of `burst`
//!   packets, which doubles while work remains at the end of a tick and
//!   shrinks by an eighth otherwise (multiplicative increase: polling(4)
//!   grows by one per tick, which at 1000 Hz takes a second to reach a
//!   burst of 1000 and overflows the ring meanwhile), between 1 and
//!   `burst_max`; polling stops for the tick once it has used
//!   `100 - user_frac` percent of the tick. With `idle_poll` the worker
//!   keeps polling between ticks instead of sleeping.
//! - `auto`: `interrupt` until the measured receive rate stays at or above
//!   `up_pps` for `hold` windows of `window_ms`, then `busy` until it stays
//!   below `down_pps` for `hold` windows; every switch is logged.
//!
//! Where a queue has no interrupt line (null, pcap), the interrupt-using
//! policies sleep `fallback_sleep_us` instead of blocking, and the worker's
//! report says so.

use std::time::Duration;

/// NAPI settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Napi {
    /// Most packets taken from one queue per round (NAPI's weight).
    pub budget: usize,
    /// Sleep instead of blocking when a queue has no interrupt line.
    pub fallback_sleep: Duration,
}

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

/// A worker's poll-mode policy.
#[derive(Clone, Debug, PartialEq)]
pub enum Policy {
    /// Spin forever.
    Busy,
    /// NAPI.
    Interrupt(Napi),
    /// Spin, back off, block.
    Adaptive(Adaptive),
    /// polling(4).
    Timer(Timer),
    /// Interrupt or busy by measured load.
    Auto(Auto),
}

impl Policy {
    /// The name used in config and reports.
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Busy => "busy",
            Policy::Interrupt(_) => "interrupt",
            Policy::Adaptive(_) => "adaptive",
            Policy::Timer(_) => "timer",
            Policy::Auto(_) => "auto",
        }
    }
}

impl Default for Napi {
    fn default() -> Self {
        Napi {
            budget: 64,
            fallback_sleep: Duration::from_micros(50),
        }
    }
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

/// What a worker is doing right now (published for the reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Polling without pause.
    Spin = 0,
    /// Polling with PAUSE between polls.
    Pause = 1,
    /// Sleeping between polls.
    Sleep = 2,
    /// Interrupts armed, blocked or about to block.
    Intr = 3,
    /// Waiting for the next timer tick.
    Tick = 4,
}

impl State {
    /// Name for reports.
    pub fn name(v: u64) -> &'static str {
        match v {
            0 => "spin",
            1 => "pause",
            2 => "sleep",
            3 => "intr",
            4 => "tick",
            _ => "?",
        }
    }
}

/// A policy switch of an `auto` worker, sent to the management thread.
#[derive(Clone, Copy, Debug)]
pub struct Switch {
    /// Core of the worker.
    pub core: usize,
    /// TSC when it switched.
    pub tsc: u64,
    /// True: to busy; false: to interrupt.
    pub to_busy: bool,
    /// Receive rate over the last window.
    pub pps: f64,
}
