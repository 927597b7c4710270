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
