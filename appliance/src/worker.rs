//! The run-to-completion worker loop and its poll-mode policies.
//!
//! One worker per data-plane core, pinned, owning its RX queues and one TX
//! queue on each port its packets leave on (DPDK l3fwd's `lcore_conf`). A
//! poll round calls `rx_burst` on every RX queue, runs the forwarding stage
//! on each burst and appends packets to the output port's TX buffer, which
//! is flushed when it holds a whole burst, when the drain timer (TSC)
//! expires, and always before the worker sleeps or blocks. The policy
//! ([`crate::poll`]) decides what happens between rounds. Nothing in the
//! loop allocates, locks or makes a syscall per packet; every 10 ms the
//! worker samples its CPU time, hands its latency histograms over and checks
//! for stop.
//!
//! The loop is generic over the buffer type and the forwarding mode, so it
//! is monomorphised per mode: the per-packet call is a direct, inlined call.

use crate::counters::{PortCounters, WorkerCounters};
use crate::poll::{Adaptive, Auto, Napi, Policy, State, Switch, Timer};
use crossbeam_channel::Sender;
use pipeline::fwd::ForwardMode;
use pipeline::{DropReason, Verdict};
use pmd::hist::HistWriter;
use pmd::sys::{cpu_relax, rdtsc, thread_cpu_ns, Epoll, Tsc};
use pmd::{Batch, PacketBuf, RxQueue, TxQueue};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often a worker publishes CPU time and histograms and checks for stop;
/// also the longest it blocks on interrupts.
const PUBLISH: Duration = Duration::from_millis(10);

/// A busy worker reads the clock once per this many rounds that each bring
/// at least a full burst (`Worker::busy_span_round`).
const CLOCK_EVERY: u32 = 4;

/// An RX queue a worker polls.
pub struct RxSlot<R> {
    /// Port id.
    pub port: u16,
    /// The queue (a driver's own type, or a `BoxRx`).
    pub q: R,
}

/// A TX queue a worker owns, with its residency histogram.
pub struct TxSlot<T> {
    /// Port id.
    pub port: u16,
    /// The queue (a driver's own type, or a `BoxTx`).
    pub q: T,
    /// RX→TX residency of packets sent on this port (TSC cycles).
    pub hist: HistWriter,
}

/// A packet handed from one worker to another, with its input port.
pub type Handed<B> = (B, u16);

/// A worker's handoff rings (SPSC, one per ordered pair of workers running
/// the gateway): where it hands packets whose state another worker owns
/// (`out`, indexed by that worker's index) and where it receives them.
pub struct Handoff<B> {
    /// To each worker (`None` for itself).
    pub out: Vec<Option<rtrb::Producer<Handed<B>>>>,
    /// From the others.
    pub inp: Vec<rtrb::Consumer<Handed<B>>>,
}

impl<B> Default for Handoff<B> {
    fn default() -> Self {
        Handoff {
            out: Vec::new(),
            inp: Vec::new(),
        }
    }
}

impl<B> Handoff<B> {
    /// Rings between `n` workers, `cap` packets each: `n` ends.
    pub fn mesh(n: usize, cap: usize) -> Vec<Handoff<B>> {
        let mut v: Vec<Handoff<B>> = (0..n)
            .map(|_| Handoff {
                out: (0..n).map(|_| None).collect(),
                inp: Vec::new(),
            })
            .collect();
        for from in 0..n {
            for to in 0..n {
                if from != to {
                    let (p, c) = rtrb::RingBuffer::new(cap);
                    v[from].out[to] = Some(p);
                    v[to].inp.push(c);
                }
            }
        }
        v
    }
}

/// Everything a worker owns. The queue types are a driver's own (DPDK: no
/// dynamic dispatch per burst) or boxed (a mix of drivers).
pub struct WorkerSetup<B, R = pmd::BoxRx<B>, T = pmd::BoxTx<B>> {
    /// Core it runs on (for logs).
    pub core: usize,
    /// RX queues.
    pub rx: Vec<RxSlot<R>>,
    /// TX queues.
    pub tx: Vec<TxSlot<T>>,
    /// Counters it publishes.
    pub counters: Arc<WorkerCounters>,
    /// Burst size.
    pub burst: usize,
    /// TX drain timer.
    pub drain: Duration,
    /// TSC frequency.
    pub tsc: Tsc,
    /// Poll-mode policy.
    pub policy: Policy,
    /// Where `auto` reports its switches.
    pub switches: Option<Sender<Switch>>,
    /// Handoff rings (empty unless several workers run the gateway).
    pub handoff: Handoff<B>,
}

struct Tx<B, T> {
    q: T,
    buf: Batch<B>,
    /// When each buffered packet was received (TSC), parallel to `buf`:
    /// kept here, in a hot array, rather than in the buffer (for an
    /// `rte_mbuf` that would be a second cache line per packet).
    rx_at: Box<[u64; pmd::MAX_BURST]>,
    hist: HistWriter,
    /// Packets sent as whole bursts this round (residency not recorded yet).
    direct: u64,
}

/// Sends what `tx` holds; counts what the ring did not take as `tx_full`.
#[inline]
fn flush<B: PacketBuf, T: TxQueue<Buf = B>>(tx: &mut Tx<B, T>, now: u64, pc: &PortCounters) {
    let buf = &mut tx.buf;
    if buf.is_empty() {
        return;
    }
    // Packets of one RX burst share a timestamp: record runs, not packets.
    let stamps = &tx.rx_at[..buf.len()];
    let mut cur = stamps[0];
    let mut run = 0u64;
    for &t in stamps {
        if t != cur {
            tx.hist.record_n(now.saturating_sub(cur), run);
            cur = t;
            run = 0;
        }
        run += 1;
    }
    tx.hist.record_n(now.saturating_sub(cur), run);
    let sent = tx.q.tx_burst(buf);
    let left = buf.len();
    if left > 0 {
        pc.tx_full.add(left as u64);
        buf.clear();
    }
    pc.tx_pkts.add(sent as u64);
}

struct Worker<'a, B, R, T, F> {
    fwd: F,
    rx: Vec<RxSlot<R>>,
    tx: Vec<Option<Tx<B, T>>>,
    rxb: Batch<B>,
    c: &'a WorkerCounters,
    stop: &'a AtomicBool,
    burst: usize,
    drain_cycles: u64,
    publish_cycles: u64,
    last_drain: u64,
    /// End of the last busy round (0: something else ran since).
    last_end: u64,
    /// `run_busy`'s rounds and packets since it last read the clock.
    span_rounds: u32,
    span_got: usize,
    /// A round extends a span only when it brought this many packets: a
    /// full burst from every RX queue.
    span_min: usize,
    last_publish: u64,
    /// All RX queues have interrupt lines, registered here.
    epoll: Option<Epoll>,
    tsc: Tsc,
    handoff: Handoff<B>,
    /// Verdicts of the burst being processed.
    verdicts: Box<[Verdict; pmd::MAX_BURST]>,
}

/// Runs the worker until `stop` is set, then drains its RX queues (the
/// ports have stopped receiving by then) and flushes its TX buffers, so that
/// every packet it received is sent or counted as dropped.
///
/// Returns its handoff rings' receiving ends: packets other workers handed
/// it after it stopped are still in them, for the caller to count.
pub fn run<B: PacketBuf, R: RxQueue<Buf = B>, T: TxQueue<Buf = B>, F: ForwardMode>(
    setup: WorkerSetup<B, R, T>,
    fwd: F,
    stop: &AtomicBool,
) -> Vec<rtrb::Consumer<Handed<B>>> {
    let WorkerSetup {
        core,
        rx,
        tx: tx_slots,
        counters,
        burst,
        drain,
        tsc,
        policy,
        switches,
        handoff,
    } = setup;
    let c = &*counters;
    let mut tx: Vec<Option<Tx<B, T>>> = (0..c.ports.len()).map(|_| None).collect();
    for s in tx_slots {
        tx[usize::from(s.port)] = Some(Tx {
            q: s.q,
            buf: Batch::new(burst),
            rx_at: Box::new([0; pmd::MAX_BURST]),
            hist: s.hist,
            direct: 0,
        });
    }
    let wants_intr = !matches!(policy, Policy::Busy | Policy::Timer(_));
    let epoll = if wants_intr { intr_set(&rx) } else { None };
    if wants_intr && epoll.is_none() {
        c.core.fallback.set(1);
    }
    let now = rdtsc();
    let mut fwd = fwd;
    // The stage's clock starts before the first packet.
    fwd.tick(tsc.ns(now) as u64);
    let span_min = burst * rx.len().max(1);
    let mut w = Worker {
        fwd,
        rx,
        tx,
        rxb: Batch::new(burst),
        c,
        stop,
        burst,
        drain_cycles: tsc.cycles(drain),
        publish_cycles: tsc.cycles(PUBLISH),
        last_drain: now,
        last_end: 0,
        span_rounds: 0,
        span_got: 0,
        span_min,
        last_publish: now,
        epoll,
        tsc,
        handoff,
        verdicts: Box::new([Verdict::Drop(DropReason::Truncated); pmd::MAX_BURST]),
    };
    c.core.running.set(1);
    match policy {
        Policy::Busy => w.run_busy(),
        Policy::Interrupt(n) => w.run_interrupt(&n),
        Policy::Adaptive(a) => w.run_adaptive(&a),
        Policy::Timer(t) => w.run_timer(&t, &tsc),
        Policy::Auto(a) => w.run_auto(&a, &tsc, core, switches.as_ref()),
    }
    w.drain_and_close()
}

/// Hands a whole received burst to the empty TX buffer's queue; what the
/// ring does not take is counted as `tx_full` and freed.
#[inline]
fn send_burst<B: PacketBuf, T: TxQueue<Buf = B>>(
    t: &mut Tx<B, T>,
    burst: &mut Batch<B>,
    pc: &PortCounters,
) {
    let n = burst.len();
    let sent = t.q.tx_burst(burst);
    // Residency is recorded when the round ends (`Worker::settle`).
    t.direct += n as u64;
    let left = burst.len();
    if left > 0 {
        pc.tx_full.add(left as u64);
        burst.clear();
    }
    pc.tx_pkts.add(sent as u64);
}

/// Sends one processed packet where its verdict says: the output port's
/// TX buffer, the owning worker's handoff ring (not again if it was handed
/// here already), or the drop counters of its input port.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn dispatch<B: PacketBuf, T: TxQueue<Buf = B>>(
    v: Verdict,
    m: B,
    in_port: u16,
    rx_at: u64,
    tx: &mut [Option<Tx<B, T>>],
    c: &WorkerCounters,
    out: &mut [Option<rtrb::Producer<Handed<B>>>],
    handed: bool,
) {
    let pc = &c.ports[usize::from(in_port)];
    match v {
        Verdict::Forward(o) => match tx.get_mut(usize::from(o)) {
            Some(Some(t)) => {
                t.rx_at[t.buf.len()] = rx_at;
                // Cannot fail: the buffer is flushed when full.
                let _ = t.buf.push(m);
                if t.buf.is_full() {
                    flush(t, rdtsc(), &c.ports[usize::from(o)]);
                }
            }
            _ => pc.unroutable.add(1),
        },
        Verdict::Drop(r) => pc.drops[r as usize].add(1),
        Verdict::Handoff(w) => match out.get_mut(usize::from(w)) {
            Some(Some(p)) if !handed => {
                if p.push((m, in_port)).is_err() {
                    pc.drops[DropReason::HandoffFull as usize].add(1);
                } else {
                    pc.handed_off.add(1);
                }
            }
            _ => pc.drops[DropReason::HandoffFull as usize].add(1),
        },
    }
}

/// An epoll set over the queues' interrupt lines, or `None` if a queue has
/// none (or epoll fails).
fn intr_set<R: RxQueue>(rx: &[RxSlot<R>]) -> Option<Epoll> {
    let ep = Epoll::new(rx.len()).ok()?;
    for (i, s) in rx.iter().enumerate() {
        ep.add(s.q.interrupt()?.fd(), i as u64).ok()?;
    }
    Some(ep)
}

impl<B: PacketBuf, R: RxQueue<Buf = B>, T: TxQueue<Buf = B>, F: ForwardMode>
    Worker<'_, B, R, T, F>
{
    /// Polls every RX queue once: up to `quota` packets per queue, in
    /// rx_burst calls of at most `chunk`, stopping early at `deadline`
    /// (TSC; `u64::MAX` for none). Returns the packets received and whether
    /// some queue may still hold packets (quota or deadline hit on a full
    /// chunk).
    #[inline]
    fn poll_round(&mut self, quota: usize, chunk: usize, deadline: u64, t0: u64) -> (usize, bool) {
        let Worker {
            fwd,
            rx,
            tx,
            rxb,
            c,
            handoff,
            verdicts,
            drain_cycles,
            ..
        } = self;
        let mut got = 0usize;
        let mut more = false;
        rxb.set_burst(chunk);
        for slot in rx.iter_mut() {
            let in_port = slot.port;
            let pc = &c.ports[usize::from(in_port)];
            let mut taken = 0usize;
            loop {
                let n = slot.q.rx_burst(rxb);
                if n == 0 {
                    break;
                }
                // One clock read per round (rdtsc costs ~23 cycles here):
                // the round's start is every burst's RX time.
                let rx_at = t0;
                taken += n;
                fwd.prefetch(rxb.as_slice(), pmd::sys::prefetch);
                // Process the burst in place; when every packet leaves on
                // one port whose TX buffer is empty, and the burst is full
                // (or TX is not buffered), the whole burst goes to that TX
                // queue as it is — testpmd's array hand-off, no per-packet
                // move.
                // The same verdict for every packet: without looking at
                // them (io), or from the mode's burst loop.
                let same = match fwd.burst_verdict(in_port) {
                    Some(v) => Some(v),
                    None => fwd.process_burst(rxb.as_mut_slice(), in_port, &mut verdicts[..]),
                };
                let first = match same {
                    Some(Verdict::Forward(o)) => Some(o),
                    _ => None,
                };
                let direct = match first {
                    Some(o) if n == chunk || *drain_cycles == 0 => {
                        match tx.get_mut(usize::from(o)) {
                            Some(Some(t)) if t.buf.is_empty() => Some((o, t)),
                            _ => None,
                        }
                    }
                    _ => None,
                };
                if let Some((o, t)) = direct {
                    send_burst(t, rxb, &c.ports[usize::from(o)]);
                } else {
                    if let Some(v) = same {
                        verdicts[..n].fill(v);
                    }
                    for (m, v) in rxb.drain().zip(verdicts.iter()) {
                        dispatch(*v, m, in_port, rx_at, tx, c, &mut handoff.out, false);
                    }
                }
                pc.rx_pkts.add(n as u64);
                if n < chunk {
                    break; // drained
                }
                if taken >= quota || (deadline != u64::MAX && rdtsc() >= deadline) {
                    more = true;
                    break;
                }
            }
            got += taken;
        }
        // Packets other workers handed over (received and counted there).
        for ring in handoff.inp.iter_mut() {
            let n = ring.slots().min(chunk);
            if n == 0 {
                continue;
            }
            let rx_at = t0;
            if let Ok(items) = ring.read_chunk(n) {
                for (mut m, in_port) in items {
                    let v = fwd.process(&mut m, in_port);
                    dispatch(v, m, in_port, rx_at, tx, c, &mut [], true);
                }
            }
            got += n;
        }
        (got, more)
    }

    fn flush_all(&mut self, now: u64) {
        for (p, t) in self.tx.iter_mut().enumerate() {
            if let Some(t) = t {
                flush(t, now, &self.c.ports[p]);
            }
        }
        self.last_drain = now;
    }

    #[inline]
    fn maybe_drain(&mut self, now: u64) {
        if now.wrapping_sub(self.last_drain) >= self.drain_cycles {
            self.flush_all(now);
        }
    }

    /// Accounts one poll round from `t0` to `t1` that received `got`.
    #[inline]
    fn account(&self, t0: u64, t1: u64, got: usize) {
        self.account_rounds(t0, t1, 1, got, got == 0);
    }

    /// Accounts `rounds` poll rounds from `t0` to `t1` that received `got`
    /// together (busy if any packets came), the last of them empty or not.
    #[inline]
    fn account_rounds(&self, t0: u64, t1: u64, rounds: u64, got: usize, last_empty: bool) {
        let k = &self.c.core;
        k.polls.add(rounds);
        if last_empty {
            k.empty_polls.add(1);
        }
        if got > 0 {
            k.busy_cycles.add(t1.wrapping_sub(t0));
            k.rx_pkts.add(got as u64);
        } else {
            k.idle_cycles.add(t1.wrapping_sub(t0));
        }
    }

    /// Every `PUBLISH`: CPU time, histograms, stop flag. True when asked to
    /// stop.
    #[inline]
    fn tick(&mut self, now: u64) -> bool {
        if now.wrapping_sub(self.last_publish) < self.publish_cycles {
            return false;
        }
        self.last_publish = now;
        self.c.core.cpu_ns.set(thread_cpu_ns());
        self.fwd.tick(self.tsc.ns(now) as u64);
        for (c, v) in self.c.events.iter().zip(self.fwd.events()) {
            c.set(*v);
        }
        for t in self.tx.iter_mut().flatten() {
            t.hist.publish();
        }
        self.stop.load(Ordering::Acquire)
    }

    /// One busy iteration: poll, drain timer, account. Returns packets.
    #[inline]
    fn busy_round(&mut self, quota: usize) -> usize {
        // Back-to-back rounds: this one starts where the last one ended
        // (one clock read per round; the time between rounds counts too).
        let t0 = if self.last_end != 0 {
            self.last_end
        } else {
            rdtsc()
        };
        let (got, _) = self.poll_round(quota, self.burst, u64::MAX, t0);
        let t1 = rdtsc();
        self.last_end = t1;
        self.settle(t0, t1);
        self.maybe_drain(t1);
        self.account(t0, t1, got);
        got
    }

    /// Records the residency of the bursts sent whole this round (received
    /// from `t0` on, sent by `t1`: an upper bound).
    #[inline]
    fn settle(&mut self, t0: u64, t1: u64) {
        for t in self.tx.iter_mut().flatten() {
            if t.direct > 0 {
                t.hist.record_n(t1.saturating_sub(t0), t.direct);
                t.direct = 0;
            }
        }
    }

    /// Sleeps `d` (TX flushed first); the time counts as idle.
    fn sleep(&mut self, d: Duration) {
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
    fn block(&mut self, fallback: Duration) -> usize {
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
        let (got, _) = self.poll_round(self.burst, self.burst, u64::MAX, t0);
        let t1 = rdtsc();
        self.settle(t0, t1);
        self.account(t0, t1, got);
        if got == 0 {
            self.flush_all(t1);
            self.c.core.blocks.add(1);
            let ms = PUBLISH.as_millis() as i32;
            let mut fired = 0u64;
            if let Some(ep) = self.epoll.as_mut() {
                for tok in ep.wait(ms) {
                    fired |= 1 << (tok % 64);
                }
            }
            if fired != 0 {
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
        for s in &self.rx {
            if let Some(i) = s.q.interrupt() {
                i.disable();
            }
        }
        got
    }

    fn run_busy(&mut self) {
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
    /// [`CLOCK_EVERY`]th round while every round finds at least a full
    /// burst (and at the first that does not): at 64 packets a round the TSC read, the
    /// residency record and the accounting cost about a cycle per packet,
    /// as much as all of testpmd's io loop. The rounds of a span are
    /// accounted together: busy if any found packets, and each burst's
    /// residency is the span's mean round length. Returns the clock when
    /// it was read.
    #[inline]
    fn busy_span_round(&mut self) -> Option<u64> {
        if self.last_end == 0 {
            self.last_end = rdtsc();
        }
        let t0 = self.last_end;
        let (got, _) = self.poll_round(self.burst, self.burst, u64::MAX, t0);
        self.span_rounds += 1;
        self.span_got += got;
        // Only saturated rounds (a full burst from every queue) extend a
        // span: below that the per-round costs do not matter, and spans
        // over partly filled rounds slowed the softnic generator (another
        // thread filling the rings) fourfold; why is not understood.
        if got >= self.span_min && self.span_rounds < CLOCK_EVERY {
            return None;
        }
        Some(self.close_span(t0, got))
    }

    /// Ends a span of busy rounds that began at `t0` (the last round
    /// received `got`): reads the clock, records residency, drains TX on
    /// time and accounts the span's rounds. Kept out of line, so that the
    /// round loop stays small.
    #[inline(never)]
    fn close_span(&mut self, t0: u64, got: usize) -> u64 {
        let t1 = rdtsc();
        self.last_end = t1;
        let rounds = u64::from(self.span_rounds);
        self.settle(t0, t0 + t1.wrapping_sub(t0) / rounds);
        self.maybe_drain(t1);
        self.account_rounds(t0, t1, rounds, self.span_got, got == 0);
        self.span_rounds = 0;
        self.span_got = 0;
        t1
    }

    /// One NAPI step: a round with a budget; block when it drained every
    /// queue.
    #[inline]
    fn napi_step(&mut self, n: &Napi) -> usize {
        let t0 = rdtsc();
        let (got, more) = self.poll_round(n.budget, self.burst, u64::MAX, t0);
        let t1 = rdtsc();
        self.settle(t0, t1);
        self.maybe_drain(t1);
        self.account(t0, t1, got);
        if more {
            self.c.core.state.set(State::Spin as u64);
            return got;
        }
        self.c.core.state.set(State::Intr as u64);
        got + self.block(n.fallback_sleep)
    }

    fn run_interrupt(&mut self, n: &Napi) {
        loop {
            self.napi_step(n);
            if self.tick(rdtsc()) {
                return;
            }
        }
    }

    fn run_adaptive(&mut self, a: &Adaptive) {
        let mut empty: u32 = 0;
        let mut sleep = a.sleep_min;
        let pause_until = a.spin_polls.saturating_add(a.pause_polls);
        let sleep_until = pause_until.saturating_add(a.sleep_polls);
        // Prediction, in TSC cycles: the mean gap between packets, measured
        // over windows as elapsed time / packets (blocking delays packets
        // but does not change how many arrive, so the estimate does not feed
        // on the policy's own waiting), and the mean length of the ladder.
        let window = self.publish_cycles;
        let mut win_start = rdtsc();
        let mut win_pkts = 0u64;
        let mut avg_gap = 0f64;
        let mut idle_since = 0u64;
        let mut avg_ladder = 0f64;
        loop {
            let got = if empty < sleep_until {
                // Spinning is exactly busy polling.
                self.busy_round(self.burst)
            } else {
                self.napi_step(&a.napi)
            };
            let now = rdtsc();
            win_pkts += got as u64;
            let span = now.wrapping_sub(win_start);
            if span >= window {
                let gap = span as f64 / win_pkts.max(1) as f64;
                avg_gap = if avg_gap == 0.0 {
                    gap
                } else {
                    avg_gap + (gap - avg_gap) / 4.0
                };
                win_start = now;
                win_pkts = 0;
            }
            if got > 0 {
                empty = 0;
                sleep = a.sleep_min;
                self.c.core.state.set(State::Spin as u64);
            } else {
                empty = empty.saturating_add(1);
                if empty == 1 {
                    idle_since = now;
                    if a.predict > 0.0 && avg_ladder > 0.0 && avg_gap > a.predict * avg_ladder {
                        // Past the ladder: block at the next step.
                        empty = sleep_until.saturating_add(1);
                    }
                }
                if empty <= a.spin_polls {
                    self.c.core.state.set(State::Spin as u64);
                } else if empty <= pause_until {
                    self.c.core.state.set(State::Pause as u64);
                    for _ in 0..a.pause_spins {
                        cpu_relax();
                    }
                } else if empty <= sleep_until {
                    self.c.core.state.set(State::Sleep as u64);
                    self.sleep(sleep);
                    sleep = (sleep * 2).min(a.sleep_max);
                    if empty == sleep_until {
                        let ladder = rdtsc().wrapping_sub(idle_since) as f64;
                        avg_ladder += (ladder - avg_ladder) / 4.0;
                    }
                }
                // Past sleep_until: napi_step blocks on interrupts.
            }
            if self.tick(now) {
                return;
            }
        }
    }

    fn run_timer(&mut self, t: &Timer, tsc: &Tsc) {
        let tick = tsc.hz / u64::from(t.hz.max(1));
        let cap = tick * u64::from(100 - t.user_frac.min(99)) / 100;
        let each = (t.each_burst.max(1) as usize).min(pmd::MAX_BURST);
        let burst_max = t.burst_max.max(1);
        let mut burst = t.burst.clamp(1, burst_max);
        let mut next = rdtsc() + tick;
        loop {
            // Wait for the tick.
            self.c.core.state.set(State::Tick as u64);
            if t.idle_poll {
                while rdtsc() < next {
                    self.busy_round(self.burst);
                }
            } else {
                let now = rdtsc();
                self.flush_all(now);
                let wait = next.saturating_sub(now);
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
            let (got, more) = self.poll_round(burst as usize, each, t0 + cap, t0);
            burst = if more {
                burst.saturating_mul(2).min(burst_max)
            } else {
                (burst - burst / 8).max(1)
            };
            let t1 = rdtsc();
            self.settle(t0, t1);
            self.flush_all(t1);
            self.account(t0, t1, got);
            self.c.core.ticks.add(1);
            self.c.core.burst.set(u64::from(burst));
            next += tick;
            if next <= t1 {
                self.c.core.late_ticks.add(1);
                next = t1 + tick;
            }
            if self.tick(t1) {
                return;
            }
        }
    }

    fn run_auto(&mut self, a: &Auto, tsc: &Tsc, core: usize, log: Option<&Sender<Switch>>) {
        let window = tsc.cycles(a.window).max(1);
        let mut busy = false;
        let mut start = rdtsc();
        let mut pkts = 0u64;
        let mut streak = 0u32;
        loop {
            let got = if busy {
                self.c.core.state.set(State::Spin as u64);
                self.busy_round(self.burst)
            } else {
                self.napi_step(&a.napi)
            };
            pkts += got as u64;
            let now = rdtsc();
            if now.wrapping_sub(start) >= window {
                let pps = pkts as f64 * tsc.hz as f64 / now.wrapping_sub(start) as f64;
                let past = if busy {
                    pps < a.down_pps
                } else {
                    pps >= a.up_pps
                };
                streak = if past { streak + 1 } else { 0 };
                if streak >= a.hold {
                    busy = !busy;
                    streak = 0;
                    self.c.core.auto_busy.set(u64::from(busy));
                    self.c.core.switches.add(1);
                    if let Some(tx) = log {
                        // Never blocks: a full log drops the message, the
                        // switch counter still counts it.
                        let _ = tx.try_send(Switch {
                            core,
                            tsc: now,
                            to_busy: busy,
                            pps,
                        });
                    }
                }
                start = now;
                pkts = 0;
            }
            if self.tick(now) {
                return;
            }
        }
    }

    /// Polls until the RX queues and handoff rings are empty twice in a
    /// row, flushes the TX buffers, hands over the histograms; returns the
    /// handoff rings' receiving ends.
    fn drain_and_close(mut self) -> Vec<rtrb::Consumer<Handed<B>>> {
        self.c.core.state.set(State::Spin as u64);
        let mut quiet = 0;
        while quiet < 2 {
            let got = self.busy_round(self.burst);
            self.flush_all(rdtsc());
            quiet = if got == 0 { quiet + 1 } else { 0 };
        }
        self.c.core.cpu_ns.set(thread_cpu_ns());
        for (c, v) in self.c.events.iter().zip(self.fwd.events()) {
            c.set(*v);
        }
        for t in self.tx.into_iter().flatten() {
            t.hist.close();
        }
        self.c.core.running.set(0);
        self.handoff.inp
    }
}
