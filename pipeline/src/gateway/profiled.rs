//! A gateway whose stage clock an operator switches on and off while it
//! forwards (`sluice ctl set runtime on|off`, read with `sluice ctl show
//! runtime`), as VPP's `show runtime` gives clocks per graph node.
//!
//! Off, it is the appliance's plain gateway ([`NoClock`]: the stage marks
//! compile to nothing; the switch costs one branch a burst). On, it is the
//! same gateway (tables, flows, translations and counters moved over by
//! [`Gateway::reclock`]) with its stages profiled by a [`CycleClock`]:
//! each mark reads the clock, whose cost (measured when the clock is
//! switched on) is taken off each stage's cycles; the packets themselves
//! are slower by about one read a stage while it runs.

use super::{CycleClock, Gateway, NoClock, Stage};
use crate::conntrack::{Filter, Listed};
use crate::fwd::{read_cost, ForwardMode, Frame, LearnedNeighbors, Profile};
use crate::verdict::Verdict;

/// The gateway as it runs: unprofiled or profiled.
enum Mode {
    Off(Gateway<NoClock>),
    On(Gateway<CycleClock>),
}

/// A gateway stage whose clock can be switched on and off while it runs
/// (see the module).
pub struct Profiled {
    /// `None` only inside [`Profiled::switch`], which moves the gateway
    /// from one mode to the other.
    mode: Option<Mode>,
    /// What one read of the clock costs, in its units, measured when the
    /// clock was last switched on.
    read: u64,
    /// Since the clock was last switched on: the packets processed, and
    /// per stage their cycles less the clock's reads (refreshed on each
    /// tick and when the clock is switched off).
    packets: u64,
    cycles: [u64; Stage::COUNT],
}

/// Runs `$e` on the gateway (`$g`) whichever its mode.
macro_rules! on_gateway {
    ($mode:expr, $g:ident => $e:expr) => {
        match $mode.expect("a mode but inside `switch`") {
            Mode::Off($g) => $e,
            Mode::On($g) => $e,
        }
    };
}

impl Profiled {
    /// `gw` with its clock off.
    pub fn new(gw: Gateway<NoClock>) -> Self {
        Profiled {
            mode: Some(Mode::Off(gw)),
            read: 0,
            packets: 0,
            cycles: [0; Stage::COUNT],
        }
    }

    /// Whether the stage clock runs.
    pub fn profiling(&self) -> bool {
        matches!(self.mode, Some(Mode::On(_)))
    }

    /// Switches the clock on, reading `now`, or off (nothing when it
    /// already is): the gateway moves over as it is. On starts the totals
    /// afresh, also when it already runs (VPP's `clear runtime`).
    fn switch(&mut self, now: Option<fn() -> u64>) {
        self.refresh();
        self.mode = match (self.mode.take(), now) {
            (Some(m), Some(now)) => {
                self.read = read_cost(now);
                self.packets = 0;
                self.cycles = [0; Stage::COUNT];
                Some(Mode::On(
                    on_gateway!(Some(m), g => g.reclock(CycleClock::new(now))),
                ))
            }
            (Some(Mode::On(g)), None) => Some(Mode::Off(g.reclock(NoClock))),
            (m, _) => m,
        };
    }

    /// The totals from the running clock (nothing when it is off).
    fn refresh(&mut self) {
        if let Some(Mode::On(g)) = &self.mode {
            self.cycles = g.clock().net_of_reads(self.read);
        }
    }
}

impl Clone for Profiled {
    /// A fresh worker instance (see [`Gateway`]'s `Clone`): same rules, an
    /// empty table, the clock off.
    fn clone(&self) -> Self {
        let gw = match self.mode.as_ref().expect("a mode but inside `switch`") {
            Mode::Off(g) => g.clone(),
            Mode::On(g) => g.clone().reclock(NoClock),
        };
        Profiled::new(gw)
    }
}

impl ForwardMode for Profiled {
    const NAME: &'static str = <Gateway as ForwardMode>::NAME;

    #[inline]
    fn prefetch<P: Frame>(&mut self, pkts: &[P], pf: fn(*const u8)) {
        on_gateway!(self.mode.as_mut(), g => g.prefetch(pkts, pf))
    }

    #[inline]
    fn burst_verdict(&self, in_port: u16) -> Option<Verdict> {
        on_gateway!(self.mode.as_ref(), g => g.burst_verdict(in_port))
    }

    #[inline]
    fn process_burst<P: Frame>(
        &mut self,
        pkts: &mut [P],
        in_port: u16,
        verdicts: &mut [Verdict],
    ) -> Option<Verdict> {
        match self.mode.as_mut().expect("a mode but inside `switch`") {
            Mode::Off(g) => g.process_burst(pkts, in_port, verdicts),
            Mode::On(g) => {
                self.packets += pkts.len().min(verdicts.len()) as u64;
                g.process_burst(pkts, in_port, verdicts)
            }
        }
    }

    #[inline]
    fn process<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        match self.mode.as_mut().expect("a mode but inside `switch`") {
            Mode::Off(g) => g.process(pkt, in_port),
            Mode::On(g) => {
                self.packets += 1;
                g.process(pkt, in_port)
            }
        }
    }

    #[inline]
    fn enter(&mut self) {
        on_gateway!(self.mode.as_mut(), g => g.enter())
    }

    #[inline]
    fn leave(&mut self) {
        on_gateway!(self.mode.as_mut(), g => g.leave())
    }

    #[inline]
    fn pending(&self) -> bool {
        on_gateway!(self.mode.as_ref(), g => g.pending())
    }

    fn emit(&mut self, send: &mut dyn FnMut(u16, &[u8]) -> bool) {
        on_gateway!(self.mode.as_mut(), g => g.emit(send))
    }

    fn tick(&mut self, now_ns: u64) {
        on_gateway!(self.mode.as_mut(), g => g.tick(now_ns));
        self.refresh();
    }

    fn stopping(&mut self) {
        on_gateway!(self.mode.as_mut(), g => g.stopping())
    }

    const EVENTS: &'static [&'static str] = <Gateway as ForwardMode>::EVENTS;

    fn events(&self) -> &[u64] {
        on_gateway!(self.mode.as_ref(), g => g.events())
    }

    const GAUGES: &'static [&'static str] = <Gateway as ForwardMode>::GAUGES;

    fn gauges(&self) -> &[u64] {
        on_gateway!(self.mode.as_ref(), g => g.gauges())
    }

    const STAGES: &'static [&'static str] = &Stage::NAMES;

    fn stage_clock(&self) -> Option<(bool, u64, &[u64])> {
        Some((self.profiling(), self.packets, &self.cycles))
    }

    fn dump(
        &self,
        from: usize,
        scan: usize,
        max: usize,
        filter: &Filter,
        out: &mut Vec<Listed>,
    ) -> Option<usize> {
        on_gateway!(self.mode.as_ref(), g => g.dump(from, scan, max, filter, out))
    }

    fn delete_flows(&mut self, from: usize, scan: usize, filter: &Filter) -> (u64, Option<usize>) {
        on_gateway!(self.mode.as_mut(), g => g.delete_flows(from, scan, filter))
    }

    fn apply_sync(&mut self, c: &crate::conntrack::sync::Change) -> bool {
        on_gateway!(self.mode.as_mut(), g => g.apply_sync(c))
    }

    fn bulk_sync(&mut self, from: usize, scan: usize) -> Option<usize> {
        on_gateway!(self.mode.as_mut(), g => g.bulk_sync(from, scan))
    }

    fn export_open(&mut self, from: usize, end: bool) -> Option<usize> {
        on_gateway!(self.mode.as_mut(), g => g.export_open(from, end))
    }

    fn install_flows(
        &mut self,
        flows: &[crate::conntrack::saved::Saved],
        now_ns: u64,
    ) -> (u64, u64) {
        on_gateway!(self.mode.as_mut(), g => g.install_flows(flows, now_ns))
    }

    fn reconfigure(&mut self, update: &dyn std::any::Any) -> bool {
        if let Some(&Profile(now)) = update.downcast_ref::<Profile>() {
            self.switch(now);
            return true;
        }
        on_gateway!(self.mode.as_mut(), g => ForwardMode::reconfigure(g, update))
    }

    fn take_learned(&mut self) -> Option<LearnedNeighbors> {
        on_gateway!(self.mode.as_mut(), g => g.take_learned())
    }
}
