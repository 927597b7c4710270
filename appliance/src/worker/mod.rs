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

mod account;
mod policies;
mod round;

use crate::counters::WorkerCounters;
use crate::poll::{Policy, State, Switch};
use account::Span;
use crossbeam_channel::Sender;
use pipeline::fwd::ForwardMode;
use pipeline::{DropReason, Verdict};
use pmd::hist::HistWriter;
use pmd::sys::{rdtsc, thread_cpu_ns, Epoll, EventFd, Tsc};
use pmd::{Batch, PacketBuf, RxQueue, TxQueue};
use round::Tx;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often a worker publishes CPU time and histograms and checks for stop;
/// also the longest it blocks on interrupts.
const PUBLISH: Duration = Duration::from_millis(10);

/// An RX queue a worker polls.
pub struct RxSlot<R> {
    /// Port id.
    pub port: u16,
    /// Queue index on the port.
    pub queue: u16,
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

/// A request about a page of the forwarding stage's tracked flows (those
/// `filter` selects), from slot `from`; each answer carries the slot to
/// ask from next (`None`: none left).
pub enum DumpRequest {
    /// Copies of at most `max` flows (`show conntrack`).
    List {
        from: usize,
        max: usize,
        filter: pipeline::conntrack::Filter,
        reply: crossbeam_channel::Sender<(Vec<pipeline::conntrack::Listed>, Option<usize>)>,
    },
    /// The flows deleted, how many (`clear conntrack`).
    Delete {
        from: usize,
        filter: pipeline::conntrack::Filter,
        reply: crossbeam_channel::Sender<(u64, Option<usize>)>,
    },
    /// Fault injection (`sluice ctl debug wedge`, only with
    /// `SLUICE_FAULT_INJECTION=1`): the worker stops polling for this long,
    /// as a worker stuck in a driver would, so that the watchdog's
    /// reaction can be tested end to end.
    Wedge(std::time::Duration),
}

/// Slots of its table a worker walks per tick for an HA peer's bulk sync.
pub const BULK_SCAN: usize = 65536;

/// Conntrack slots a worker scans for one page of a dump, in one tick
/// (2 MiB of flows: a fraction of a millisecond).
pub const DUMP_SCAN: usize = 16 << 10;

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
    /// Each worker's waker, by index (empty without rings).
    pub wakers: Vec<Arc<Waker>>,
    /// This worker's index.
    pub me: usize,
    /// The workers it handed packets to in this round.
    pub handed: Vec<bool>,
}

impl<B> Default for Handoff<B> {
    fn default() -> Self {
        Handoff {
            out: Vec::new(),
            inp: Vec::new(),
            wakers: Vec::new(),
            me: 0,
            handed: Vec::new(),
        }
    }
}

/// How a worker blocked on its interrupts learns that packets were handed
/// to it: an eventfd in its interrupt set, which a worker that handed it
/// packets in a round rings at the round's end if it is asleep. A worker
/// that polls is never rung (no syscall); one that blocks says so before
/// its last poll, so either that poll sees the packets or the bell rings
/// (both sides order the flag and the ring with `SeqCst`). Without it a
/// handed packet waited for the owner's next interrupt or its 10 ms
/// timeout.
pub struct Waker {
    bell: EventFd,
    asleep: AtomicBool,
}

impl Waker {
    /// A bell not rung, its worker awake.
    pub fn new() -> std::io::Result<Waker> {
        Ok(Waker {
            bell: EventFd::new()?,
            asleep: AtomicBool::new(false),
        })
    }

    /// Rings the bell if the worker is blocked, or about to block.
    #[inline]
    pub fn wake(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::Relaxed) {
            self.bell.signal();
        }
    }

    /// Says that the worker is about to block (`true`) or has woken.
    #[inline]
    pub fn asleep(&self, yes: bool) {
        self.asleep.store(yes, Ordering::SeqCst);
    }
}

impl<B> Handoff<B> {
    /// Rings between `n` workers, `cap` packets each: `n` ends.
    pub fn mesh(n: usize, cap: usize) -> std::io::Result<Vec<Handoff<B>>> {
        let wakers = (0..n)
            .map(|_| Waker::new().map(Arc::new))
            .collect::<std::io::Result<Vec<_>>>()?;
        let mut v: Vec<Handoff<B>> = (0..n)
            .map(|me| Handoff {
                out: (0..n).map(|_| None).collect(),
                inp: Vec::new(),
                wakers: wakers.clone(),
                me,
                handed: vec![false; n],
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
        Ok(v)
    }

    /// Its own waker, if it has rings.
    #[inline]
    pub fn waker(&self) -> Option<&Waker> {
        self.wakers.get(self.me).map(|w| &**w)
    }

    /// Rings the workers it handed packets to in this round (if asleep).
    #[inline]
    pub fn wake_handed(&mut self) {
        for (h, w) in self.handed.iter_mut().zip(&self.wakers) {
            if std::mem::take(h) {
                w.wake();
            }
        }
    }
}

/// An update on its way to one worker's forwarding stage (a reload's
/// tables, a route or neighbour change, a learned neighbour), taken
/// between two bursts by [`pipeline::fwd::ForwardMode::reconfigure`].
pub type Update = Box<dyn std::any::Any + Send>;

/// The management side's ways to one worker (one per worker, in config
/// order), each read by the worker every `PUBLISH` and never waited on.
pub struct Link {
    /// Where a new poll policy goes (`sluice ctl set poll`, a reload).
    pub policy: Sender<crate::poll::Policy>,
    /// Where its forwarding stage's updates go (a reload, route and
    /// neighbour changes, `set runtime`, learned neighbours).
    pub update: Sender<Update>,
    /// Where a capture's tap goes (`None` takes it back).
    pub tap: Sender<Option<crate::capture::Tap>>,
    /// Where to ask for its flows (`show conntrack`, `clear conntrack`).
    pub dump: Sender<DumpRequest>,
    /// Where its generators' commands go (`None`: it does not generate).
    pub gen: Option<Sender<crate::txgen::GenCommand>>,
    /// Whether it routes (`l3fwd`): it takes learned neighbours.
    pub routes: bool,
}

/// A gateway worker's flows as it stopped, with its gateway index
/// (`[ha] state_file`).
pub type SavedFlows = (u16, Vec<pipeline::conntrack::Listed>);

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
    /// Policies to switch to while running (`sluice ctl set poll`), read
    /// every `PUBLISH`.
    pub policy_changes: Option<crossbeam_channel::Receiver<Policy>>,
    /// Updates for the forwarding stage (a hot reload), read every
    /// `PUBLISH` and taken between two bursts.
    pub updates: Option<crossbeam_channel::Receiver<Update>>,
    /// Capture taps to install (`Some`) or remove (`None`), read every
    /// `PUBLISH`.
    pub taps: Option<crossbeam_channel::Receiver<Option<crate::capture::Tap>>>,
    /// Requests about the stage's flows (`show conntrack`, `clear
    /// conntrack`), read every `PUBLISH`.
    pub dumps: Option<crossbeam_channel::Receiver<DumpRequest>>,
    /// Handoff rings (empty unless several workers run the gateway).
    pub handoff: Handoff<B>,
    /// Fresh buffers for the packets the stage sends of its own
    /// ([`ForwardMode::emit`]); without one they are counted as dropped.
    pub inject: Option<pmd::Injector<B>>,
    /// The control-plane mirror's rings ([`crate::taps`]): where punted
    /// frames go, where the kernel's frames come from.
    pub mirror: Option<(crate::taps::PuntEnd, crate::taps::FromKernel)>,
    /// `txonly`/`flowgen`: a generator per TX port.
    pub gens: Vec<crate::txgen::TxGen>,
    /// Their buffers, in bulk (else one at a time from `inject`).
    pub bulk: Option<pmd::BulkAlloc<B>>,
    /// Changes to the generators (`sluice ctl gen`), read every `PUBLISH`.
    pub gen_ctl: Option<crossbeam_channel::Receiver<crate::txgen::GenCommand>>,
    /// Checks what it receives for the tester's signatures.
    pub probe: Option<pmd::probe::Probe>,
    /// Where what the stage learned for the other workers goes
    /// ([`ForwardMode::take_learned`]), with this worker's index; `None`
    /// when no other worker runs the stage.
    pub learned: Option<(usize, Sender<(usize, pipeline::router::LearnedNeighbors)>)>,
    /// Where its flows go when it stops (`[ha] state_file`), with its
    /// gateway index.
    pub save: Option<(u16, Sender<SavedFlows>)>,
    /// `[ha]` state sync: the peer's changes to apply, and the flag that
    /// asks for a bulk sync (its gateway logs into the other ring).
    pub sync: Option<HaSync>,
}

/// A gateway worker's side of the HA sync thread's rings.
pub struct HaSync {
    /// The peer's changes, applied as they come: each round looks (one
    /// load of the ring's index), and a worker blocked on its interrupts
    /// is woken by `waker`, which the sync thread rings after it queued
    /// changes (flow created on the active to installed here: the sync
    /// thread's 1 ms loop, the link, one round).
    pub apply: rtrb::Consumer<pipeline::conntrack::sync::Change>,
    /// Rung by the sync thread when it queued changes and this worker is
    /// blocked.
    pub waker: Arc<Waker>,
    /// Set by the sync thread: walk the table into the log.
    pub bulk: Arc<AtomicBool>,
    /// Where the walk is (`None`: not walking).
    pub cursor: Option<usize>,
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
    /// `run_busy`'s rounds since it last read the clock.
    span: Span,
    /// When a NAPI round last received packets (for `busy_poll`).
    last_rx: u64,
    last_publish: u64,
    /// All RX queues have interrupt lines, registered here.
    epoll: Option<Epoll>,
    tsc: Tsc,
    handoff: Handoff<B>,
    inject: Option<pmd::Injector<B>>,
    /// The mirror's rings, and room to copy a frame out of one.
    punt: Option<crate::taps::PuntEnd>,
    from_kernel: Option<(rtrb::Consumer<u8>, Vec<u8>)>,
    /// Rung when the kernel's frames are in `from_kernel` (in `epoll`).
    doorbell: Option<Arc<EventFd>>,
    /// Verdicts of the burst being processed.
    verdicts: Box<[Verdict; pmd::MAX_BURST]>,
    /// Where policy switches come from, and one received.
    policy_changes: Option<crossbeam_channel::Receiver<Policy>>,
    next_policy: Option<Policy>,
    /// Where hot-reload updates come from.
    updates: Option<crossbeam_channel::Receiver<Update>>,
    /// Where capture taps come from, and the one installed.
    taps: Option<crossbeam_channel::Receiver<Option<crate::capture::Tap>>>,
    tap: Option<crate::capture::Tap>,
    /// Where requests for the stage's state come from.
    dumps: Option<crossbeam_channel::Receiver<DumpRequest>>,
    /// The generators, where their commands come from, and the probe;
    /// the generators' buffers in bulk (straight into the TX buffers).
    gens: Vec<crate::txgen::TxGen>,
    bulk: Option<pmd::BulkAlloc<B>>,
    gen_ctl: Option<crossbeam_channel::Receiver<crate::txgen::GenCommand>>,
    probe: Option<pmd::probe::Probe>,
    learned: Option<(usize, Sender<(usize, pipeline::router::LearnedNeighbors)>)>,
    save: Option<(u16, Sender<SavedFlows>)>,
    sync: Option<HaSync>,
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
        mut policy,
        switches,
        policy_changes,
        updates,
        taps,
        dumps,
        handoff,
        inject,
        mirror,
        gens,
        bulk,
        gen_ctl,
        probe,
        learned,
        save,
        sync,
    } = setup;
    let (punt, from_kernel, doorbell) = match mirror {
        Some((p, (k, bell))) => (
            Some(p),
            Some((k, Vec::with_capacity(crate::taps::MAX_FRAME))),
            Some(bell),
        ),
        None => (None, None, None),
    };
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
    // Built whatever the policy, so that a switch to one that blocks finds
    // it (None when a queue has no interrupt line).
    let epoll = intr_set(
        &rx,
        doorbell.as_deref(),
        handoff.waker().map(|w| &w.bell),
        sync.as_ref().map(|s| &s.waker.bell),
    );
    let now = rdtsc();
    let mut fwd = fwd;
    // The stage's clock starts before the first packet.
    fwd.tick(tsc.ns(now) as u64);
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
        span: Span::new(burst),
        last_rx: 0,
        last_publish: now,
        epoll,
        tsc,
        handoff,
        inject,
        punt,
        from_kernel,
        doorbell,
        verdicts: Box::new([Verdict::Drop(DropReason::Truncated); pmd::MAX_BURST]),
        policy_changes,
        next_policy: None,
        updates,
        taps,
        tap: None,
        dumps,
        gens,
        bulk,
        gen_ctl,
        probe,
        learned,
        save,
        sync,
    };
    c.gen_running
        .set(u64::from(w.gens.iter().any(|g| g.running())));
    c.core.running.set(1);
    loop {
        c.core.policy.set(policy.index() as u64);
        c.core
            .fallback
            .set(u64::from(policy.wants_interrupts() && w.epoll.is_none()));
        c.core.auto_busy.set(0);
        match &policy {
            Policy::Busy => w.run_busy(),
            Policy::Interrupt(n) => w.run_interrupt(n),
            Policy::Adaptive(a) => w.run_adaptive(a),
            Policy::Timer(t) => w.run_timer(t, &tsc),
            Policy::Auto(a) => w.run_auto(a, &tsc, core, switches.as_ref()),
        }
        // The loop returns when asked to stop or to switch policies.
        match w.next_policy.take() {
            Some(p) => policy = p,
            None => break,
        }
    }
    w.drain_and_close()
}

/// An epoll set over the queues' interrupt lines, or `None` if a queue has
/// none (or epoll fails).
fn intr_set<R: RxQueue>(
    rx: &[RxSlot<R>],
    doorbell: Option<&EventFd>,
    handed: Option<&EventFd>,
    synced: Option<&EventFd>,
) -> Option<Epoll> {
    let ep = Epoll::new(rx.len() + 3).ok()?;
    for (i, s) in rx.iter().enumerate() {
        ep.add(s.q.interrupt()?.fd(), i as u64).ok()?;
    }
    if let Some(d) = doorbell {
        ep.add(d.as_raw_fd(), DOORBELL).ok()?;
    }
    if let Some(d) = handed {
        ep.add(d.as_raw_fd(), HANDED).ok()?;
    }
    if let Some(d) = synced {
        ep.add(d.as_raw_fd(), SYNCED).ok()?;
    }
    Some(ep)
}

/// The epoll token of the mirror's doorbell.
pub(super) const DOORBELL: u64 = u64::MAX;
/// The epoll token of the bell rung for handed packets ([`Waker`]).
pub(super) const HANDED: u64 = u64::MAX - 1;
/// The epoll token of the bell the HA sync thread rings ([`HaSync`]).
pub(super) const SYNCED: u64 = u64::MAX - 2;

impl<B: PacketBuf, R: RxQueue<Buf = B>, T: TxQueue<Buf = B>, F: ForwardMode>
    Worker<'_, B, R, T, F>
{
    /// Every `PUBLISH`: CPU time, histograms, stop flag, policy switches.
    /// True when the policy's loop must return: asked to stop, or to switch
    /// to another policy (then in `next_policy`).
    #[inline]
    fn tick(&mut self, now: u64) -> bool {
        // The HA peer's changes as soon as they are here, not at the next
        // publish (10 ms): one load of the ring's index a round.
        if let Some(s) = &mut self.sync {
            while let Ok(c) = s.apply.pop() {
                self.fwd.apply_sync(&c);
            }
        }
        if now.wrapping_sub(self.last_publish) < self.publish_cycles {
            return false;
        }
        self.last_publish = now;
        if let Some(rx) = &self.updates {
            while let Ok(u) = rx.try_recv() {
                self.fwd.reconfigure(&*u);
            }
        }
        // Taken whether or not anyone listens, so it never piles up.
        if let Some(l) = self.fwd.take_learned() {
            if let Some((me, tx)) = &self.learned {
                let _ = tx.send((*me, l));
            }
        }
        if let Some(rx) = &self.taps {
            while let Ok(t) = rx.try_recv() {
                self.tap = t;
            }
        }
        match self.dumps.as_ref().and_then(|d| d.try_recv().ok()) {
            Some(DumpRequest::List {
                from,
                max,
                filter,
                reply,
            }) => {
                // Copies, not text: the management thread formats them.
                let mut page = Vec::with_capacity(max.min(DUMP_SCAN));
                let next = self.fwd.dump(from, DUMP_SCAN, max, &filter, &mut page);
                let _ = reply.try_send((page, next));
            }
            Some(DumpRequest::Delete {
                from,
                filter,
                reply,
            }) => {
                let _ = reply.try_send(self.fwd.delete_flows(from, DUMP_SCAN, &filter));
            }
            Some(DumpRequest::Wedge(d)) => std::thread::sleep(d),
            None => {}
        }
        let mut applied = None;
        if let Some(rx) = &self.gen_ctl {
            while let Ok(cmd) = rx.try_recv() {
                for g in &mut self.gens {
                    g.apply(&cmd, now);
                }
                applied = Some(cmd.seq);
            }
        }
        if !self.gens.is_empty() {
            self.c
                .gen_running
                .set(u64::from(self.gens.iter().any(|g| g.running())));
        }
        // After `gen_running`: a command is answered once this shows it.
        if let Some(seq) = applied {
            self.c.gen_applied.set(seq);
        }
        if let Some(p) = &mut self.probe {
            p.hist.publish();
        }
        if let Some(s) = &mut self.sync {
            // A step of a bulk sync the peer asked for (as much as the log
            // has room for).
            if s.bulk.swap(false, Ordering::AcqRel) {
                s.cursor = Some(0);
            }
            if let Some(from) = s.cursor {
                s.cursor = self.fwd.bulk_sync(from, BULK_SCAN);
            }
        }
        self.c.core.cpu_ns.set(thread_cpu_ns());
        self.fwd.tick(self.tsc.ns(now) as u64);
        for (c, v) in self.c.events.iter().zip(self.fwd.events()) {
            c.set(*v);
        }
        for (c, v) in self.c.gauges.iter().zip(self.fwd.gauges()) {
            c.set(*v);
        }
        self.publish_stage_clock();
        for t in self.tx.iter_mut().flatten() {
            t.hist.publish();
        }
        if let Some(p) = self.policy_changes.as_ref().and_then(|c| c.try_recv().ok()) {
            self.next_policy = Some(p);
            return true;
        }
        self.stop.load(Ordering::Acquire)
    }

    /// Copies the stage clock's totals (`sluice ctl show runtime`).
    fn publish_stage_clock(&self) {
        if let Some((on, packets, cycles)) = self.fwd.stage_clock() {
            self.c.stage_on.set(u64::from(on));
            self.c.stage_packets.set(packets);
            for (c, v) in self.c.stage_cycles.iter().zip(cycles) {
                c.set(*v);
            }
        }
    }

    /// Polls until the RX queues and handoff rings are empty twice in a
    /// row, flushes the TX buffers, hands over the histograms; returns the
    /// handoff rings' receiving ends.
    fn drain_and_close(mut self) -> Vec<rtrb::Consumer<Handed<B>>> {
        self.c.core.state.set(State::Spin as u64);
        // What the stage says as it goes, sent by the rounds below.
        self.fwd.stopping();
        for g in &mut self.gens {
            g.stop();
        }
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
        for (c, v) in self.c.gauges.iter().zip(self.fwd.gauges()) {
            c.set(*v);
        }
        self.publish_stage_clock();
        for t in self.tx.into_iter().flatten() {
            t.hist.close();
        }
        if let Some(p) = self.probe {
            p.hist.close();
        }
        // Flow export: the records of the flows still open, as the
        // exporter thread (stopped after the workers) makes room, for at
        // most a second.
        let mut at = Some(0);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while let Some(from) = at {
            at = self.fwd.export_open(from, self.save.is_none());
            if at.is_some() {
                if std::time::Instant::now() > until {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        if let Some((index, to)) = &self.save {
            // Every flow, after the last packet (control path: the worker
            // has stopped forwarding).
            let mut all = Vec::new();
            let filter = pipeline::conntrack::Filter::default();
            self.fwd.dump(0, usize::MAX, usize::MAX, &filter, &mut all);
            let _ = to.send((*index, all));
        }
        self.c.gen_running.set(0);
        self.c.core.running.set(0);
        self.handoff.inp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A worker that polls is never rung for what is handed to it (no
    /// syscall); one that blocks is woken at once by a packet handed
    /// after its last poll, not at its timeout.
    #[test]
    fn a_blocked_owner_is_woken_for_handed_packets() {
        let mut mesh = Handoff::<u32>::mesh(2, 16).unwrap();
        let mut owner = mesh.pop().unwrap();
        let mut from = mesh.pop().unwrap();
        let mut ep = Epoll::new(2).unwrap();
        ep.add(owner.waker().unwrap().bell.as_raw_fd(), HANDED)
            .unwrap();
        let hand = |h: &mut Handoff<u32>, v: u32| {
            h.out[1].as_mut().unwrap().push((v, 0)).unwrap();
            h.handed[1] = true;
            h.wake_handed();
        };
        hand(&mut from, 1);
        assert_eq!(ep.wait(0).count(), 0, "a polling owner is not rung");
        assert_eq!(owner.inp[0].pop().unwrap().0, 1);
        // About to block: its last poll finds nothing, then it waits.
        owner.waker().unwrap().asleep(true);
        assert!(owner.inp[0].pop().is_err());
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            hand(&mut from, 2);
        });
        let start = Instant::now();
        let woke: Vec<u64> = ep.wait(20_000).collect();
        assert_eq!(woke, [HANDED]);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "woken, not timed out"
        );
        owner.waker().unwrap().asleep(false);
        owner.waker().unwrap().bell.clear();
        assert_eq!(owner.inp[0].pop().unwrap().0, 2);
        t.join().unwrap();
    }
}
