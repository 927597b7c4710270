//! The softnic's traffic generator and sink: one thread per process, like a
//! hardware tester with a TX side (filling the ports' RX rings) and an RX
//! side (draining their TX rings).
//!
//! Below its top rate the thread sleeps between batches (with 1 µs timer
//! slack), so that on a two-core machine the workers' CPU figures stay
//! clean; it wakes early by its measured sleep overshoot and spins only that
//! remainder, so packets and coalescing timers fire on time. At `Rate::Max`
//! it spins.

use super::{Coalesce, Intr, Rate, Shared, SinkCounters, SoftRx, SoftTx};
use super::{Control, SoftnicConfig};
use crate::hist::{hist_pair, HistReader, HistWriter};
use crate::mbuf::{Mbuf, Pool, CACHE_SIZE};
use crate::probe::{build_flows, Flow, Pacer};
use crate::sys::{rdtsc, set_timer_slack, EventFd, Tsc};
use crate::{BoxRx, BoxTx, Counter, OpenPort, PacketBuf, PortError, QueueCounters};
use std::sync::atomic::{fence, AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Shortest sleep between batches below the top rate.
const MIN_SLEEP: Duration = Duration::from_micros(5);
/// Longest the sink goes without draining the TX rings.
const SINK_INTERVAL: Duration = Duration::from_micros(100);
/// Packets offered per queue per iteration at `Rate::Max`.
const MAX_BURST_OFFER: usize = 32;
/// Packets the sink prefetches, then reads and frees, at a time: their
/// lines stay in the first-level cache until read.
const SINK_PIECE: usize = 32;
/// Most packets one port emits per iteration (keeps the sink responsive).
const EMIT_BUDGET: usize = 4096;
/// A generator that fell further behind than this skips the backlog.
const MAX_LAG: Duration = Duration::from_millis(1);

const RUN: u8 = 0;
const STOP_GEN: u8 = 1;
const FINISH: u8 = 2;

struct Ctl {
    phase: AtomicU8,
    gen_stopped: AtomicBool,
}

struct GenPort {
    port: u16,
    shared: Arc<Shared>,
    pool: Pool,
    rx: Vec<rtrb::Producer<Mbuf>>,
    tx: Vec<rtrb::Consumer<Mbuf>>,
    flows: Vec<Flow>,
    next_flow: usize,
    /// Per flow, its next sequence number.
    seq: Vec<u32>,
    rate: Rate,
    /// Whether packets carry the signature.
    signature: bool,
    pacer: Pacer,
    coalesce_cycles: u64,
    coalesce_frames: usize,
    pending_since: Vec<u64>,
    hist: HistWriter,
}

/// Builds softnic ports and then runs their shared generator/sink thread.
pub struct Generator {
    tsc: Tsc,
    ports: Vec<GenPort>,
}

/// The running generator/sink thread.
pub struct GenHandle {
    ctl: Arc<Ctl>,
    thread: JoinHandle<()>,
}

impl Generator {
    /// A generator with no ports yet.
    pub fn new(tsc: Tsc) -> Self {
        Generator {
            tsc,
            ports: Vec::new(),
        }
    }

    /// True when no port was added.
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty()
    }

    /// Creates a softnic port fed by this generator. Returns the port and
    /// the reader of its end-to-end latency histogram (TSC cycles).
    pub fn add_port(&mut self, cfg: &SoftnicConfig) -> Result<(OpenPort, HistReader), PortError> {
        if cfg.rxq == 0 || cfg.txq == 0 || cfg.rxd == 0 || cfg.txd == 0 {
            return Err(PortError::Config(
                "softnic needs at least one queue and one descriptor per ring".into(),
            ));
        }
        let g = &cfg.gen;
        if g.flows == 0 {
            return Err(PortError::Config(
                "softnic generator needs at least one flow".into(),
            ));
        }
        // Rings, plus what workers hold in TX buffers and per-thread caches.
        let pool_size =
            cfg.rxd * usize::from(cfg.rxq) + cfg.txd * usize::from(cfg.txq) + 16 * CACHE_SIZE;
        // Buffers for the longest frame the generator makes (jumbo
        // frames: a larger room).
        let longest = g.sizes.iter().copied().max().unwrap_or(g.size);
        let room = crate::mbuf::data_room_for(longest.saturating_sub(22))
            .min(crate::mbuf::data_room_for(crate::probe::MAX_FRAME_LEN - 14));
        let pool = Pool::new(&format!("softnic{}", cfg.port), pool_size, room)?;
        let mut rng = crate::probe::rng_for(g.seed, cfg.port);
        let flows = build_flows(g, &mut rng, cfg.rxq, room.min(crate::probe::MAX_FRAME_LEN));
        let intr = (0..cfg.rxq)
            .map(|_| {
                Ok(Intr {
                    armed: AtomicBool::new(false),
                    efd: EventFd::new().map_err(|e| PortError::Io {
                        path: "eventfd".into(),
                        error: e,
                    })?,
                    raised: Counter::default(),
                })
            })
            .collect::<Result<Vec<_>, PortError>>()?;
        let shared = Arc::new(Shared {
            rx: (0..cfg.rxq).map(|_| QueueCounters::default()).collect(),
            tx: (0..cfg.txq).map(|_| QueueCounters::default()).collect(),
            intr,
            sink: SinkCounters::default(),
        });
        let (mut rx_prod, mut rx_q) = (Vec::new(), Vec::new());
        for q in 0..usize::from(cfg.rxq) {
            let (p, c) = rtrb::RingBuffer::new(cfg.rxd);
            rx_prod.push(p);
            rx_q.push(Box::new(SoftRx {
                ring: c,
                shared: shared.clone(),
                queue: q,
            }) as BoxRx);
        }
        let (mut tx_cons, mut tx_q) = (Vec::new(), Vec::new());
        for _ in 0..cfg.txq {
            let (p, c) = rtrb::RingBuffer::new(cfg.txd);
            tx_cons.push(c);
            tx_q.push(Box::new(SoftTx { ring: p }) as BoxTx);
        }
        let pacer = Pacer::new(g.rate, g.pattern, self.tsc.hz, g.seed ^ u64::from(cfg.port));
        let (hist_w, hist_r) = hist_pair();
        let Coalesce {
            rx_usecs,
            rx_frames,
        } = cfg.coalesce;
        self.ports.push(GenPort {
            port: cfg.port,
            shared: shared.clone(),
            pool,
            rx: rx_prod,
            tx: tx_cons,
            seq: vec![0; flows.len()],
            flows,
            next_flow: 0,
            rate: g.rate,
            signature: g.signature,
            pacer,
            coalesce_cycles: self.tsc.cycles(Duration::from_micros(u64::from(rx_usecs))),
            coalesce_frames: rx_frames.max(1) as usize,
            pending_since: vec![0; usize::from(cfg.rxq)],
            hist: hist_w,
        });
        Ok((
            OpenPort {
                control: Arc::new(Control(shared)),
                rx: rx_q,
                tx: tx_q,
                _buf: std::marker::PhantomData,
            },
            hist_r,
        ))
    }

    /// Starts the generator/sink thread; `on_start` runs first in it (to
    /// pin it to a core).
    pub fn spawn(self, on_start: impl FnOnce() + Send + 'static) -> std::io::Result<GenHandle> {
        let ctl = Arc::new(Ctl {
            phase: AtomicU8::new(RUN),
            gen_stopped: AtomicBool::new(false),
        });
        let c = ctl.clone();
        let thread = std::thread::Builder::new()
            .name("softnic-gen".into())
            .spawn(move || {
                on_start();
                self.run(&c);
            })?;
        Ok(GenHandle { ctl, thread })
    }

    fn run(mut self, ctl: &Ctl) {
        set_timer_slack(1_000);
        let tsc = self.tsc;
        let start = rdtsc();
        for p in &mut self.ports {
            p.pacer.start(start);
        }
        let sink_cycles = tsc.cycles(SINK_INTERVAL);
        let max_lag = tsc.cycles(MAX_LAG) as f64;
        let spin = self.ports.iter().any(|p| p.rate == Rate::Max);
        let mut last_publish = 0u64;
        let min_sleep = tsc.cycles(MIN_SLEEP);
        let max_overshoot = tsc.cycles(Duration::from_micros(100)) as f64;
        let max_spin = tsc.cycles(Duration::from_micros(100));
        let mut overshoot = 0f64;
        let publish_cycles = tsc.cycles(Duration::from_millis(10));
        loop {
            let phase = ctl.phase.load(Ordering::Acquire);
            let now = rdtsc();
            if phase == RUN {
                for p in &mut self.ports {
                    p.generate(now, max_lag);
                }
            } else {
                ctl.gen_stopped.store(true, Ordering::Release);
            }
            for p in &mut self.ports {
                p.sink();
                p.interrupts(now);
            }
            if now.wrapping_sub(last_publish) > publish_cycles {
                last_publish = now;
                for p in &mut self.ports {
                    p.hist.publish();
                }
            }
            if phase == FINISH {
                // Workers have stopped: drain what they left in the TX rings.
                for p in &mut self.ports {
                    while p.sink() > 0 {}
                    p.hist.publish();
                }
                break;
            }
            if phase == RUN && spin {
                continue;
            }
            let mut next = now + sink_cycles;
            for p in &self.ports {
                if let Some(due) = p.pacer.next_due().filter(|_| phase == RUN) {
                    next = next.min(due);
                }
                for &since in &p.pending_since {
                    if since != 0 {
                        next = next.min(since + p.coalesce_cycles);
                    }
                }
            }
            // Sleeps overshoot (by about 18 µs on a VM here): sleep for the
            // wait less the measured overshoot, then spin the rest, so that
            // packets and coalescing timers fire on time.
            let now = rdtsc();
            let wait = next.saturating_sub(now);
            let nap = wait.saturating_sub(overshoot as u64).max(min_sleep);
            std::thread::sleep(Duration::from_nanos(tsc.ns(nap) as u64));
            let woke = rdtsc();
            let over = woke.saturating_sub(now + nap) as f64;
            overshoot += (over.min(max_overshoot) - overshoot) / 8.0;
            while rdtsc() < next && next - woke < max_spin {
                crate::sys::cpu_relax();
            }
        }
        for p in self.ports {
            p.pool.flush_cache();
            p.hist.close();
        }
    }
}

impl GenPort {
    /// Offers the packets that are due by `now` to the RX rings.
    fn generate(&mut self, now: u64, max_lag: f64) {
        if self.rate == Rate::Max {
            for q in 0..self.rx.len() {
                self.offer_burst(q, now);
            }
            self.kick();
            return;
        }
        // Behind by more than MAX_LAG (the thread did not run): the
        // backlog is skipped rather than burst, and counted.
        let (n, skipped) = self.pacer.due(now, EMIT_BUDGET, max_lag);
        self.shared.sink.late.add(skipped);
        for _ in 0..n {
            let q = usize::from(self.flows[self.next_flow].queue);
            self.emit_to(q, now);
        }
        if n > 0 {
            self.kick();
        }
    }

    /// The next flow's index, moving on to the one after.
    #[inline]
    fn take_flow(&mut self) -> usize {
        let fi = self.next_flow;
        self.next_flow = if fi + 1 == self.flows.len() {
            0
        } else {
            fi + 1
        };
        fi
    }

    /// Builds the next flow's packet for RX queue `q` (counted as
    /// generated); `None` when the pool is dry (counted as `nombuf`).
    #[inline]
    fn build(&mut self, q: usize, now: u64) -> Option<Mbuf> {
        self.shared.sink.generated.add(1);
        let fi = self.take_flow();
        let Some(mut m) = self.pool.alloc() else {
            self.shared.rx[q].nombuf.add(1);
            return None;
        };
        let f = &self.flows[fi];
        m.copy_from(&f.frame);
        let seq = self.seq[fi];
        self.seq[fi] = seq.wrapping_add(1);
        if self.signature {
            f.stamp(m.data_mut(), fi as u16, seq, now);
        }
        m.set_rx_meta(self.port, q as u16, now, f.rss);
        Some(m)
    }

    /// Builds the next flow's packet into RX queue `q` (or counts why not).
    /// Below the top rate a full ring is checked first (saves building a
    /// packet that would be dropped).
    #[inline]
    fn emit_to(&mut self, q: usize, now: u64) {
        if self.rx[q].is_full() {
            self.shared.sink.generated.add(1);
            self.take_flow();
            self.shared.rx[q].missed.add(1);
            return;
        }
        let Some(m) = self.build(q, now) else {
            return;
        };
        let len = m.len() as u64;
        let c = &self.shared.rx[q];
        if self.rx[q].push(m).is_ok() {
            c.packets.add(1);
            c.bytes.add(len);
        } else {
            c.missed.add(1);
        }
    }

    /// At `Rate::Max`: builds a burst for RX queue `q` and publishes what
    /// its ring has room for in one write: the ring's tail, which the
    /// polling worker reads, moves once a burst instead of once a packet
    /// (each move a cache-line transfer between the two cores). Every
    /// offered packet is built, so that the offered rate is the
    /// generator's real top rate and not how fast it can count drops;
    /// what finds no room is freed and counted as missed.
    fn offer_burst(&mut self, q: usize, now: u64) {
        let mut staged = arrayvec::ArrayVec::<Mbuf, MAX_BURST_OFFER>::new();
        for _ in 0..MAX_BURST_OFFER {
            if let Some(m) = self.build(q, now) {
                staged.push(m);
            }
        }
        let c = &self.shared.rx[q];
        let k = staged.len().min(self.rx[q].slots());
        if let Ok(chunk) = self.rx[q].write_chunk_uninit(k) {
            let bytes: u64 = staged[..k].iter().map(|m| m.len() as u64).sum();
            let sent = chunk.fill_from_iter(staged.drain(..k));
            c.packets.add(sent as u64);
            c.bytes.add(bytes);
        }
        // Dropped here: back to the pool.
        c.missed.add(staged.len() as u64);
    }

    /// After publishing packets: raise interrupts that are armed and due.
    fn kick(&mut self) {
        // Pairs with the fence in `Intr::enable`.
        fence(Ordering::SeqCst);
        self.interrupts(rdtsc());
    }

    /// Interrupt coalescing for every RX queue of this port.
    fn interrupts(&mut self, now: u64) {
        for q in 0..self.rx.len() {
            let intr: &Intr = &self.shared.intr[q];
            if !intr.armed.load(Ordering::SeqCst) {
                self.pending_since[q] = 0;
                continue;
            }
            let waiting = self.rx[q].buffer().capacity() - self.rx[q].slots();
            if waiting == 0 {
                self.pending_since[q] = 0;
                continue;
            }
            if self.pending_since[q] == 0 {
                self.pending_since[q] = now.max(1);
            }
            let due = waiting >= self.coalesce_frames
                || now.saturating_sub(self.pending_since[q]) >= self.coalesce_cycles;
            if due
                && intr
                    .armed
                    .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                intr.efd.signal();
                intr.raised.add(1);
                self.pending_since[q] = 0;
            }
        }
    }

    /// Drains the TX rings: checks packets, records latency, frees them.
    /// Returns how many it drained.
    fn sink(&mut self) -> usize {
        let mut total = 0;
        for q in 0..self.tx.len() {
            let n = self.tx[q].slots();
            if n == 0 {
                continue;
            }
            let c = &self.shared.tx[q];
            let mut bytes = 0;
            let mut left = n;
            while left > 0 {
                let k = left.min(SINK_PIECE);
                left -= k;
                let Ok(chunk) = self.tx[q].read_chunk(k) else {
                    break;
                };
                // The workers wrote these buffers (the TX time in the
                // header, a stage's rewrites in the data): their lines
                // come back from the workers' cores, a piece's all at once
                // rather than one packet's misses after another's. Read
                // one at a time, they were the generator's limit: the top
                // rate changed 2x with where the host ran the two vCPUs.
                let (a, b) = chunk.as_slices();
                for m in a.iter().chain(b) {
                    m.prefetch();
                }
                for m in chunk {
                    bytes += m.len() as u64;
                    match crate::probe::read(m.data()) {
                        Some(s) => self.hist.record(m.aux().saturating_sub(s.tsc)),
                        None => self.shared.sink.bad.add(1),
                    }
                }
            }
            c.packets.add(n as u64);
            c.bytes.add(bytes);
            total += n;
        }
        total
    }
}

impl GenHandle {
    /// Stops offering packets and waits until the generator has stopped;
    /// the sink keeps draining.
    pub fn stop_generating(&self) {
        let _ = self
            .ctl
            .phase
            .compare_exchange(RUN, STOP_GEN, Ordering::AcqRel, Ordering::Acquire);
        while !self.ctl.gen_stopped.load(Ordering::Acquire) && !self.thread.is_finished() {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Drains the TX rings one last time and ends the thread. Call after the
    /// workers have stopped.
    pub fn finish(self) {
        self.stop_generating();
        self.ctl.phase.store(FINISH, Ordering::Release);
        let _ = self.thread.join();
    }
}
