//! The poll-mode policies carried out: each `run_` loop asks its policy's
//! state machine (`crate::poll`) what to do, polls, reads the clock and
//! does it (spin, PAUSE, sleep, arm and block on the interrupt lines,
//! wait for a tick), accounting every cycle as busy or idle.

use super::account;
use super::{Worker, PUBLISH};
use crate::poll::adaptive::{self, Ladder};
use crate::poll::auto::Switcher;
use crate::poll::napi;
use crate::poll::timer::Ticker;
use crate::poll::{Adaptive, Auto, Napi, State, Switch, Timer};
use crossbeam_channel::Sender;
use pipeline::fwd::ForwardMode;
use pmd::sys::{cpu_relax, rdtsc, Tsc};
use pmd::{PacketBuf, RxQueue, TxQueue};
use std::time::Duration;

impl<B: PacketBuf, R: RxQueue<Buf = B>, T: TxQueue<Buf = B>, F: ForwardMode>
    Worker<'_, B, R, T, F>
{
    /// Accounts one poll round from `t0` to `t1` that received `got`.
    #[inline]
    fn account(&self, t0: u64, t1: u64, got: usize) {
        self.account_rounds(t0, t1, 1, got, got == 0);
    }

    /// Accounts `rounds` poll rounds from `t0` to `t1` that received `got`
    /// together (see [`account::delta`]).
    #[inline]
    fn account_rounds(&self, t0: u64, t1: u64, rounds: u64, got: usize, last_empty: bool) {
        let d = account::delta(t0, t1, rounds, got, last_empty);
        let k = &self.c.core;
        k.polls.add(d.polls);
        if d.empty_polls > 0 {
            k.empty_polls.add(d.empty_polls);
        }
        if d.rx_pkts > 0 {
            k.busy_cycles.add(d.busy_cycles);
            k.rx_pkts.add(d.rx_pkts);
        } else {
            k.idle_cycles.add(d.idle_cycles);
        }
    }

    /// One busy iteration: poll, drain timer, account. Returns packets.
    #[inline]
    pub(super) fn busy_round(&mut self, quota: usize) -> usize {
        // Back-to-back rounds: this one starts where the last one ended
        // (one clock read per round; the time between rounds counts too).
        let t0 = if self.last_end != 0 {
            self.last_end
        } else {
            rdtsc()
        };
        let got = self.poll_round(quota, self.burst, u64::MAX, t0).got;
        let t1 = rdtsc();
        self.last_end = t1;
        self.settle(t0, t1);
        self.maybe_drain(t1);
        self.account(t0, t1, got);
        got
    }

    /// Sleeps `d` (TX flushed first); the time counts as idle.
    pub(super) fn sleep(&mut self, d: Duration) {
        self.last_end = 0;
        let t0 = rdtsc();
        self.flush_all(t0);
        std::thread::sleep(d);
        self.c.core.sleeps.add(1);
        self.c.core.idle_cycles.add(rdtsc().wrapping_sub(t0));
    }

    /// Arms every queue's interrupt, polls once more, and if that finds
    /// nothing blocks until a line fires (at most `PUBLISH`). Without
    /// interrupt lines it sleeps `fallback` instead. Returns packets the
    /// re-poll received.
    pub(super) fn block(&mut self, fallback: Duration) -> usize {
        self.last_end = 0;
        if self.epoll.is_none() {
            self.sleep(fallback);
            return 0;
        }
        let t0 = rdtsc();
        self.flush_all(t0);
        for s in &self.rx {
            if let Some(i) = s.q.interrupt() {
                i.enable();
            }
        }
        // Before the last poll: packets handed (or the HA peer's changes
        // queued) after it ring the bell.
        if let Some(w) = self.handoff.waker() {
            w.asleep(true);
        }
        if let Some(s) = &self.sync {
            s.waker.asleep(true);
        }
        let got = self.poll_round(self.burst, self.burst, u64::MAX, t0).got;
        let t1 = rdtsc();
        self.settle(t0, t1);
        self.account(t0, t1, got);
        // Changes the HA peer queued before the flag was up rang no bell:
        // applied by the next tick instead of blocking on them.
        let synced = self.sync.as_ref().is_some_and(|s| !s.apply.is_empty());
        if got == 0 && !synced {
            self.flush_all(t1);
            self.c.core.blocks.add(1);
            let ms = PUBLISH.as_millis() as i32;
            let mut fired = 0u64;
            let (mut woke, mut handed, mut synced) = (false, false, false);
            if let Some(ep) = self.epoll.as_mut() {
                for tok in ep.wait(ms) {
                    if tok == super::DOORBELL {
                        // The kernel's frames: sent by the next round.
                        woke = true;
                    } else if tok == super::HANDED {
                        // Packets handed over: taken by the next round.
                        handed = true;
                    } else if tok == super::SYNCED {
                        // The peer's changes: applied by the next tick.
                        synced = true;
                    } else {
                        fired |= 1 << (tok % 64);
                    }
                }
            }
            if woke {
                if let Some(d) = &self.doorbell {
                    d.clear();
                }
            }
            if handed {
                if let Some(w) = self.handoff.waker() {
                    w.bell.clear();
                }
            }
            if synced {
                if let Some(s) = &self.sync {
                    s.waker.bell.clear();
                }
            }
            if fired != 0 || woke || handed || synced {
                self.c.core.wakeups.add(1);
            }
            for (i, s) in self.rx.iter().enumerate() {
                if let Some(l) = s.q.interrupt() {
                    if fired & (1 << (i % 64)) != 0 {
                        l.ack();
                    }
                }
            }
            self.c.core.idle_cycles.add(rdtsc().wrapping_sub(t1));
        }
        if let Some(w) = self.handoff.waker() {
            w.asleep(false);
        }
        if let Some(s) = &self.sync {
            s.waker.asleep(false);
        }
        for s in &self.rx {
            if let Some(i) = s.q.interrupt() {
                i.disable();
            }
        }
        got
    }

    pub(super) fn run_busy(&mut self) {
        self.c.core.state.set(State::Spin as u64);
        loop {
            if let Some(t1) = self.busy_span_round() {
                if self.tick(t1) {
                    return;
                }
            }
        }
    }

    /// A busy-poll round that reads the clock only every
    /// [`account::CLOCK_EVERY`]th round while every round finds at least a full
    /// burst (and at the first that does not): at 64 packets a round the TSC read, the
    /// residency record and the accounting cost about a cycle per packet,
    /// as much as all of testpmd's io loop. The rounds of a span are
    /// accounted together: busy if any found packets, and each burst's
    /// residency is the span's mean round length. Returns the clock when
    /// it was read.
    #[inline]
    pub(super) fn busy_span_round(&mut self) -> Option<u64> {
        if self.last_end == 0 {
            self.last_end = rdtsc();
        }
        let t0 = self.last_end;
        let p = self.poll_round(self.burst, self.burst, u64::MAX, t0);
        if !self.span.round(p.got, p.partial) {
            return None;
        }
        Some(self.close_span(t0, p.got))
    }

    /// Ends a span of busy rounds that began at `t0` (the last round
    /// received `got`): reads the clock, records residency, drains TX on
    /// time and accounts the span's rounds. Kept out of line, so that the
    /// round loop stays small.
    #[inline(never)]
    pub(super) fn close_span(&mut self, t0: u64, got: usize) -> u64 {
        let t1 = rdtsc();
        self.last_end = t1;
        let (rounds, span_got) = self.span.close();
        self.settle(t0, account::span_residency_end(t0, t1, rounds));
        self.maybe_drain(t1);
        self.account_rounds(t0, t1, u64::from(rounds), span_got, got == 0);
        t1
    }

    /// One NAPI step: a round with a budget; block when it drained every
    /// queue and `busy_poll` (`n.busy_poll` in TSC cycles, converted once
    /// by the policy's loop) has passed since the last packet.
    #[inline]
    pub(super) fn napi_step(&mut self, n: &Napi, busy_poll: u64) -> usize {
        let t0 = rdtsc();
        let super::round::Polled { got, more, .. } =
            self.poll_round(n.budget, self.burst, u64::MAX, t0);
        let t1 = rdtsc();
        self.settle(t0, t1);
        self.maybe_drain(t1);
        self.account(t0, t1, got);
        if got > 0 {
            self.last_rx = t1;
        }
        if napi::after_round(more, t1.wrapping_sub(self.last_rx), busy_poll) == napi::Next::Poll {
            self.c.core.state.set(State::Spin as u64);
            return got;
        }
        self.c.core.state.set(State::Intr as u64);
        let late = self.block(n.fallback_sleep);
        if late > 0 {
            self.last_rx = rdtsc();
        }
        got + late
    }

    pub(super) fn run_interrupt(&mut self, n: &Napi) {
        let busy_poll = self.tsc.cycles(n.busy_poll);
        loop {
            self.napi_step(n, busy_poll);
            if self.tick(rdtsc()) {
                return;
            }
        }
    }

    pub(super) fn run_adaptive(&mut self, a: &Adaptive) {
        let mut ladder = Ladder::new(a, self.publish_cycles, rdtsc());
        let busy_poll = self.tsc.cycles(a.napi.busy_poll);
        loop {
            let got = match ladder.poll() {
                adaptive::Poll::Busy => self.busy_round(self.burst),
                adaptive::Poll::Napi => self.napi_step(&a.napi, busy_poll),
            };
            let now = rdtsc();
            let wait = ladder.after(got, now);
            if ladder.state() != State::Intr {
                // In interrupt mode the NAPI step publishes its own state.
                self.c.core.state.set(ladder.state() as u64);
            }
            match wait {
                adaptive::Wait::None => {}
                adaptive::Wait::Pause(n) => {
                    for _ in 0..n {
                        cpu_relax();
                    }
                }
                adaptive::Wait::Sleep(d) => {
                    self.sleep(d);
                    ladder.slept(rdtsc());
                }
            }
            if self.tick(now) {
                return;
            }
        }
    }

    pub(super) fn run_timer(&mut self, t: &Timer, tsc: &Tsc) {
        let mut ticker = Ticker::new(t, tsc.hz, pmd::MAX_BURST, rdtsc());
        loop {
            // Wait for the tick.
            self.c.core.state.set(State::Tick as u64);
            if t.idle_poll {
                while ticker.until_tick(rdtsc()) > 0 {
                    self.busy_round(self.burst);
                }
            } else {
                let now = rdtsc();
                self.flush_all(now);
                let wait = ticker.until_tick(now);
                if wait > 0 {
                    let t0 = rdtsc();
                    std::thread::sleep(Duration::from_nanos(tsc.ns(wait) as u64));
                    self.c.core.sleeps.add(1);
                    self.c.core.idle_cycles.add(rdtsc().wrapping_sub(t0));
                }
            }
            // The tick: poll every queue up to the quota, within the cap.
            self.c.core.state.set(State::Spin as u64);
            self.last_end = 0;
            let t0 = rdtsc();
            let super::round::Polled { got, more, .. } = self.poll_round(
                ticker.quota() as usize,
                ticker.each(),
                ticker.deadline(t0),
                t0,
            );
            let t1 = rdtsc();
            self.settle(t0, t1);
            self.flush_all(t1);
            self.account(t0, t1, got);
            self.c.core.ticks.add(1);
            if ticker.ticked(more, t1) {
                self.c.core.late_ticks.add(1);
            }
            self.c.core.burst.set(u64::from(ticker.quota()));
            if self.tick(t1) {
                return;
            }
        }
    }

    pub(super) fn run_auto(
        &mut self,
        a: &Auto,
        tsc: &Tsc,
        core: usize,
        log: Option<&Sender<Switch>>,
    ) {
        let mut sw = Switcher::new(a, tsc.hz, rdtsc());
        let busy_poll = tsc.cycles(a.napi.busy_poll);
        loop {
            let got = if sw.busy() {
                self.c.core.state.set(State::Spin as u64);
                self.busy_round(self.burst)
            } else {
                self.napi_step(&a.napi, busy_poll)
            };
            let now = rdtsc();
            if let Some(pps) = sw.after(got, now) {
                self.c.core.auto_busy.set(u64::from(sw.busy()));
                self.c.core.switches.add(1);
                if let Some(tx) = log {
                    // Never blocks: a full log drops the message, the
                    // switch counter still counts it.
                    let _ = tx.try_send(Switch {
                        core,
                        tsc: now,
                        to_busy: sw.busy(),
                        pps,
                    });
                }
            }
            if self.tick(now) {
                return;
            }
        }
    }
}
