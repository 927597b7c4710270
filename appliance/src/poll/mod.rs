//! Poll-mode policies: how a worker waits when its queues are empty.
//!
//! - `busy`: spin on `rx_burst` forever (DPDK).
//! - `interrupt` ([`napi`]): Linux NAPI, budgeted rounds, then arm, re-poll
//!   and block.
//! - `adaptive` ([`adaptive`]): spin, PAUSE, sleep, block, with a predictor
//!   that skips the ladder when packets are far apart.
//! - `timer` ([`timer`]): FreeBSD polling(4), a quota per tick.
//! - `auto` ([`auto`]): interrupt or busy by the measured rate, with
//!   hysteresis.
//!
//! Each policy's module holds its settings and its decisions as a state
//! machine over an injected clock, tested in virtual time; the worker
//! (`crate::worker`) polls, reads the clock and carries the decisions out.
//! A new policy is a module here, a variant of [`Policy`], its config keys
//! (`crate::config`'s policy section) and a `run_` loop in the worker.
//!
//! Where a queue has no interrupt line (null, pcap), the interrupt-using
//! policies sleep `fallback_sleep_us` instead of blocking, and the worker's
//! report says so.

pub mod adaptive;
pub mod auto;
pub mod napi;
pub mod timer;

pub use adaptive::Adaptive;
pub use auto::Auto;
pub use napi::Napi;
pub use timer::Timer;

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
    /// The policies' names, in [`Policy::index`] order.
    pub const NAMES: [&'static str; 5] = ["busy", "interrupt", "adaptive", "timer", "auto"];

    /// The name used in config and reports.
    pub fn name(&self) -> &'static str {
        Self::NAMES[self.index()]
    }

    /// Its position in [`Policy::NAMES`] (as workers publish it).
    pub fn index(&self) -> usize {
        match self {
            Policy::Busy => 0,
            Policy::Interrupt(_) => 1,
            Policy::Adaptive(_) => 2,
            Policy::Timer(_) => 3,
            Policy::Auto(_) => 4,
        }
    }

    /// Whether it blocks on interrupt lines (or sleeps where there are
    /// none).
    pub fn wants_interrupts(&self) -> bool {
        !matches!(self, Policy::Busy | Policy::Timer(_))
    }
}

pipeline::counter_enum! {
    /// What a worker is doing right now (published for the reports).
    pub enum State {
        /// Polling without pause.
        Spin = "spin",
        /// Polling with PAUSE between polls.
        Pause = "pause",
        /// Sleeping between polls.
        Sleep = "sleep",
        /// Interrupts armed, blocked or about to block.
        Intr = "intr",
        /// Waiting for the next timer tick.
        Tick = "tick",
    }
}

impl State {
    /// The name of a state published as a number (`?` for none).
    pub fn name_of(v: u64) -> &'static str {
        usize::try_from(v)
            .ok()
            .and_then(|i| Self::NAMES.get(i))
            .unwrap_or(&"?")
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
