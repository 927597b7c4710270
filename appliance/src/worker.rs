//! The run-to-completion worker loop.
//!
//! One worker per data-plane core, pinned, owning its RX queues and one TX
//! queue on each port its packets leave on (DPDK l3fwd's `lcore_conf`). Each
//! iteration: `rx_burst` on every RX queue, the forwarding stage on the
//! burst, packets appended to the output port's TX buffer, which is flushed
//! when it holds a whole burst or when the drain timer (TSC) expires.
//! Nothing in the loop allocates, locks or makes a syscall; every 10 ms the
//! worker samples its CPU time and hands its latency histograms over.
//!
//! The loop is generic over the buffer type and the forwarding mode, so it
//! is monomorphised per mode: the per-packet call is a direct, inlined call.

use crate::counters::{PortCounters, WorkerCounters};
use pipeline::fwd::ForwardMode;
use pipeline::Verdict;
use pmd::hist::HistWriter;
use pmd::sys::{rdtsc, thread_cpu_ns, Tsc};
use pmd::{Batch, PacketBuf, RxQueue, TxQueue};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often a worker publishes CPU time and histograms and checks for stop.
const PUBLISH: Duration = Duration::from_millis(10);

/// An RX queue a worker polls.
pub struct RxSlot<B> {
    /// Port id.
    pub port: u16,
    /// The queue.
    pub q: Box<dyn RxQueue<Buf = B>>,
}

/// A TX queue a worker owns, with its residency histogram.
pub struct TxSlot<B> {
    /// Port id.
    pub port: u16,
    /// The queue.
    pub q: Box<dyn TxQueue<Buf = B>>,
    /// RX→TX residency of packets sent on this port (TSC cycles).
    pub hist: HistWriter,
}

/// Everything a worker owns.
pub struct WorkerSetup<B> {
    /// RX queues.
    pub rx: Vec<RxSlot<B>>,
    /// TX queues.
    pub tx: Vec<TxSlot<B>>,
    /// Counters it publishes.
    pub counters: Arc<WorkerCounters>,
    /// Burst size.
    pub burst: usize,
    /// TX drain timer.
    pub drain: Duration,
    /// TSC frequency.
    pub tsc: Tsc,
}

struct Tx<B> {
    q: Box<dyn TxQueue<Buf = B>>,
    buf: Batch<B>,
    hist: HistWriter,
}

/// Sends what `tx` holds; counts what the ring did not take as `tx_full`.
#[inline]
fn flush<B: PacketBuf>(tx: &mut Tx<B>, now: u64, pc: &PortCounters) {
    let buf = &mut tx.buf;
    if buf.is_empty() {
        return;
    }
    // Packets of one RX burst share a timestamp: record runs, not packets.
    let mut cur = buf.as_slice()[0].rx_tsc();
    let mut run = 0u64;
    let mut bytes = 0usize;
    for m in buf.iter() {
        let t = m.rx_tsc();
        if t != cur {
            tx.hist.record_n(now.saturating_sub(cur), run);
            cur = t;
            run = 0;
        }
        run += 1;
        bytes += m.len();
    }
    tx.hist.record_n(now.saturating_sub(cur), run);
    let sent = tx.q.tx_burst(buf);
    let left = buf.len();
    if left > 0 {
        bytes -= buf.iter().map(|m| m.len()).sum::<usize>();
        pc.tx_full.add(left as u64);
        buf.clear();
    }
    pc.tx_pkts.add(sent as u64);
    pc.tx_bytes.add(bytes as u64);
}

/// Runs the worker until `stop` is set, then drains its RX queues (the
/// ports have stopped receiving by then) and flushes its TX buffers, so that
/// every packet it received is sent or counted as dropped.
pub fn run<B: PacketBuf, F: ForwardMode>(setup: WorkerSetup<B>, fwd: F, stop: &AtomicBool) {
    let WorkerSetup {
        mut rx,
        tx: tx_slots,
        counters,
        burst,
        drain,
        tsc,
    } = setup;
    let c = &*counters;
    let nports = c.ports.len();
    let mut tx: Vec<Option<Tx<B>>> = (0..nports).map(|_| None).collect();
    for s in tx_slots {
        tx[usize::from(s.port)] = Some(Tx {
            q: s.q,
            buf: Batch::new(burst),
            hist: s.hist,
        });
    }
    let mut rxb: Batch<B> = Batch::new(burst);
    let drain_cycles = tsc.cycles(drain);
    let publish_cycles = tsc.cycles(PUBLISH);
    let mut last_drain = rdtsc();
    let mut last_publish = last_drain;
    c.core.running.set(1);
    let mut stopping = false;
    let mut quiet_rounds = 0;
    loop {
        let t0 = rdtsc();
        let mut got = 0usize;
        for slot in rx.iter_mut() {
            let n = slot.q.rx_burst(&mut rxb);
            if n == 0 {
                continue;
            }
            got += n;
            let in_port = slot.port;
            let pc = &c.ports[usize::from(in_port)];
            let mut bytes = 0usize;
            for mut m in rxb.drain() {
                bytes += m.len();
                match fwd.process(m.data_mut(), in_port) {
                    Verdict::Forward(out) => match tx.get_mut(usize::from(out)) {
                        Some(Some(t)) => {
                            // Cannot fail: the buffer is flushed when full.
                            let _ = t.buf.push(m);
                            if t.buf.is_full() {
                                flush(t, rdtsc(), &c.ports[usize::from(out)]);
                            }
                        }
                        _ => pc.unroutable.add(1),
                    },
                    Verdict::Drop(r) => pc.drops[r as usize].add(1),
                }
            }
            pc.rx_pkts.add(n as u64);
            pc.rx_bytes.add(bytes as u64);
        }
        let t1 = rdtsc();
        if t1.wrapping_sub(last_drain) >= drain_cycles || stopping {
            for (p, t) in tx.iter_mut().enumerate() {
                if let Some(t) = t {
                    flush(t, t1, &c.ports[p]);
                }
            }
            last_drain = t1;
        }
        let t2 = rdtsc();
        let core = &c.core;
        core.polls.add(1);
        if got > 0 {
            core.busy_cycles.add(t2.wrapping_sub(t0));
            core.rx_pkts.add(got as u64);
        } else {
            core.empty_polls.add(1);
            core.idle_cycles.add(t2.wrapping_sub(t0));
        }
        if stopping {
            // Two rounds in a row with nothing received: drained.
            quiet_rounds = if got == 0 { quiet_rounds + 1 } else { 0 };
            if quiet_rounds >= 2 {
                break;
            }
        } else if t2.wrapping_sub(last_publish) >= publish_cycles {
            last_publish = t2;
            core.cpu_ns.set(thread_cpu_ns());
            for t in tx.iter_mut().flatten() {
                t.hist.publish();
            }
            stopping = stop.load(Ordering::Acquire);
        }
    }
    core_done(c, tx);
}

fn core_done<B>(c: &WorkerCounters, tx: Vec<Option<Tx<B>>>) {
    c.core.cpu_ns.set(thread_cpu_ns());
    for t in tx.into_iter().flatten() {
        t.hist.close();
    }
    c.core.running.set(0);
}
