//! One poll round's data path: every RX queue polled once (a quota per
//! queue, rx_bursts of a chunk, an optional deadline), each burst through
//! the forwarding stage, each packet to its output port's TX buffer, a
//! handoff ring or the drop counters; whole bursts straight to an empty TX
//! queue; TX buffers flushed when full, on the drain timer and before any
//! wait; residency recorded when the round ends.

use super::{Handed, Worker};
use crate::capture::{Tap, DROP, RX, TX};
use crate::counters::{PortCounters, WorkerCounters};
use pipeline::fwd::ForwardMode;
use pipeline::{DropReason, Verdict};
use pmd::hist::HistWriter;
use pmd::sys::rdtsc;
use pmd::{Batch, PacketBuf, RxQueue, TxQueue};

/// What one poll round brought.
#[derive(Clone, Copy, Debug)]
pub(super) struct Polled {
    /// Packets: received, handed over by other workers, generated.
    pub(super) got: usize,
    /// Some queue may still hold packets (its quota or the deadline was
    /// hit on a full chunk).
    pub(super) more: bool,
    /// Some queue gave less than a full chunk, and more than nothing: it
    /// was drained. (A queue that gave nothing does not count: an idle
    /// port beside a loaded one, as a router's TX-only output.)
    pub(super) partial: bool,
}

/// A TX queue with its buffer of packets waiting for a whole burst.
pub(super) struct Tx<B, T> {
    pub(super) q: T,
    pub(super) buf: Batch<B>,
    /// When each buffered packet was received (TSC), parallel to `buf`:
    /// kept here, in a hot array, rather than in the buffer (for an
    /// `rte_mbuf` that would be a second cache line per packet).
    pub(super) rx_at: Box<[u64; pmd::MAX_BURST]>,
    pub(super) hist: HistWriter,
    /// Packets sent as whole bursts this round (residency not recorded yet).
    pub(super) direct: u64,
}

/// Counts `left` packets a TX queue did not take: `link_down` when the
/// link was down, else `tx_full`.
#[cold]
fn refused<T: TxQueue>(q: &T, left: usize, pc: &PortCounters) {
    if q.link_down() {
        pc.drops[pipeline::DropReason::LinkDown as usize].add(left as u64);
    } else {
        pc.tx_full.add(left as u64);
    }
}

/// Sends what `tx` holds; counts what the ring did not take as `tx_full`
/// (or `link_down`).
#[inline]
pub(super) fn flush<B: PacketBuf, T: TxQueue<Buf = B>>(
    tx: &mut Tx<B, T>,
    now: u64,
    pc: &PortCounters,
) {
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
        refused(&tx.q, left, pc);
        buf.clear();
    }
    pc.tx_pkts.add(sent as u64);
}

/// Hands a whole received burst to the empty TX buffer's queue; what the
/// ring does not take is counted as `tx_full` and freed.
#[inline]
pub(super) fn send_burst<B: PacketBuf, T: TxQueue<Buf = B>>(
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
        refused(&t.q, left, pc);
        burst.clear();
    }
    pc.tx_pkts.add(sent as u64);
}

/// Copies a frame for the kernel into the mirror's ring (counted as
/// `punted`, a term of the balance of its own), or drops it as
/// `punt_full`.
#[cold]
fn punt_one<B: PacketBuf>(
    punt: &mut Option<crate::taps::PuntEnd>,
    m: &B,
    in_port: u16,
    pc: &PortCounters,
) {
    let sent = punt.as_mut().is_some_and(|p| p.put(in_port, m.data()));
    if sent {
        pc.punted.add(1);
    } else {
        pc.drops[DropReason::PuntFull as usize].add(1);
    }
}

/// Sends one processed packet where its verdict says: the output port's
/// TX buffer, the owning worker's handoff ring (not again if it was handed
/// here already), or the drop counters of its input port.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn dispatch<B: PacketBuf, T: TxQueue<Buf = B>>(
    v: Verdict,
    m: B,
    in_port: u16,
    rx_at: u64,
    tx: &mut [Option<Tx<B, T>>],
    c: &WorkerCounters,
    out: &mut [Option<rtrb::Producer<Handed<B>>>],
    to: &mut [bool],
    handed: bool,
    punt: &mut Option<crate::taps::PuntEnd>,
) {
    let pc = &c.ports[usize::from(in_port)];
    match v {
        Verdict::Punt(i) => punt_one(punt, &m, i, pc),
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
                    if let Some(t) = to.get_mut(usize::from(w)) {
                        *t = true;
                    }
                }
            }
            _ => pc.drops[DropReason::HandoffFull as usize].add(1),
        },
    }
}

impl<B: PacketBuf, R: RxQueue<Buf = B>, T: TxQueue<Buf = B>, F: ForwardMode>
    Worker<'_, B, R, T, F>
{
    /// Polls every RX queue once: up to `quota` packets per queue, in
    /// rx_burst calls of at most `chunk`, stopping early at `deadline`
    /// (TSC; `u64::MAX` for none). See [`Polled`] for what it returns.
    #[inline]
    pub(super) fn poll_round(
        &mut self,
        quota: usize,
        chunk: usize,
        deadline: u64,
        t0: u64,
    ) -> Polled {
        let Worker {
            fwd,
            rx,
            tx,
            rxb,
            c,
            handoff,
            verdicts,
            drain_cycles,
            tap,
            inject,
            punt,
            from_kernel,
            gens,
            bulk,
            probe,
            burst,
            ..
        } = self;
        let mut got = 0usize;
        let mut more = false;
        let mut partial = false;
        // The stage enters its shared tables at the round's first packet
        // and leaves after its last (see `ForwardMode::enter`); an empty
        // round costs nothing.
        let mut entered = false;
        rxb.set_burst(chunk);
        for (qi, slot) in rx.iter_mut().enumerate() {
            let in_port = slot.port;
            let pc = &c.ports[usize::from(in_port)];
            let qc = &c.rx_queues[qi];
            let mut taken = 0usize;
            loop {
                let n = slot.q.rx_burst(rxb);
                if n == 0 {
                    break;
                }
                if !entered {
                    fwd.enter();
                    entered = true;
                }
                // One clock read per round (rdtsc costs ~23 cycles here):
                // the round's start is every burst's RX time.
                let rx_at = t0;
                taken += n;
                // A tester's receiver: signatures, latency, sequences
                // (the clock read per burst: a span's start may be old).
                if let Some(p) = probe.as_mut() {
                    let now = rdtsc();
                    for m in rxb.as_slice() {
                        p.record(m.data(), now);
                    }
                }
                // A capture sees the packets as received (stages rewrite
                // them in place); without one, one branch per burst.
                if let Some(tp) = tap.as_mut().filter(|t| t.takes(slot.queue)) {
                    tp.burst(
                        in_port,
                        RX,
                        t0,
                        rxb.as_slice().iter().map(|m| (m.data(), 0)),
                    );
                }
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
                    if let Some(tp) = tap.as_mut() {
                        tp.burst(o, TX, t0, rxb.as_slice().iter().map(|m| (m.data(), 0)));
                    }
                    send_burst(t, rxb, &c.ports[usize::from(o)]);
                } else {
                    if let Some(v) = same {
                        verdicts[..n].fill(v);
                    }
                    if let Some(tp) = tap.as_mut() {
                        capture_verdicts(
                            tp,
                            in_port,
                            slot.queue,
                            t0,
                            rxb.as_slice(),
                            &verdicts[..n],
                        );
                    }
                    for (m, v) in rxb.drain().zip(verdicts.iter()) {
                        dispatch(
                            *v,
                            m,
                            in_port,
                            rx_at,
                            tx,
                            c,
                            &mut handoff.out,
                            &mut handoff.handed,
                            false,
                            punt,
                        );
                    }
                }
                pc.rx_pkts.add(n as u64);
                qc.rx_pkts.add(n as u64);
                qc.rx_bursts.add(1);
                if n < chunk {
                    partial = true;
                    break; // drained
                }
                if taken >= quota || (deadline != u64::MAX && rdtsc() >= deadline) {
                    more = true;
                    break;
                }
            }
            got += taken;
        }
        // The workers handed packets this round, woken if they block.
        handoff.wake_handed();
        // Packets other workers handed over (received and counted there).
        for ring in handoff.inp.iter_mut() {
            let n = ring.slots().min(chunk);
            if n == 0 {
                continue;
            }
            let rx_at = t0;
            if !entered {
                fwd.enter();
                entered = true;
            }
            if let Ok(items) = ring.read_chunk(n) {
                for (mut m, in_port) in items {
                    let v = fwd.process(&mut m, in_port);
                    dispatch(v, m, in_port, rx_at, tx, c, &mut [], &mut [], true, punt);
                }
            }
            got += n;
        }
        // Packets the stage holds that can go now: also in a round
        // without packets (a neighbour learned by another worker, or from
        // the kernel, releases what waited here).
        if entered || fwd.pending() {
            if !entered {
                fwd.enter();
            }
            if fwd.pending() {
                emit(fwd, inject.as_ref(), tx, c, t0);
            }
            fwd.leave();
        }
        // Punted frames: the mirror thread woken if it may sleep.
        if let Some(p) = punt.as_mut() {
            p.wake();
        }
        // What the kernel sent on the ports' mirrors: one atomic load
        // when there is none.
        if let Some((k, scratch)) = from_kernel.as_mut() {
            if k.slots() > 0 {
                from_kernel_frames(k, scratch, inject.as_ref(), tx, c, t0);
            }
        }
        // A tester's generators: what is due now. Generated packets count
        // as the round's work.
        if !gens.is_empty() {
            got += generate(gens, inject.as_ref(), bulk.as_ref(), tx, c, *burst);
        }
        Polled { got, more, partial }
    }

    pub(super) fn flush_all(&mut self, now: u64) {
        for (p, t) in self.tx.iter_mut().enumerate() {
            if let Some(t) = t {
                flush(t, now, &self.c.ports[p]);
            }
        }
        self.last_drain = now;
    }

    #[inline]
    pub(super) fn maybe_drain(&mut self, now: u64) {
        if now.wrapping_sub(self.last_drain) >= self.drain_cycles {
            self.flush_all(now);
        }
    }

    /// Records the residency of the bursts sent whole this round (received
    /// from `t0` on, sent by `t1`: an upper bound).
    #[inline]
    pub(super) fn settle(&mut self, t0: u64, t1: u64) {
        for t in self.tx.iter_mut().flatten() {
            if t.direct > 0 {
                t.hist.record_n(t1.saturating_sub(t0), t.direct);
                t.direct = 0;
            }
        }
    }
}

/// Sends the stage's own packets ([`ForwardMode::emit`]: packets it held
/// for ARP/ND) in fresh buffers through the TX buffers, counted per output
/// port as `injected`; a port without a TX queue here, or no buffer, is a
/// refusal the stage counts.
#[cold]
fn emit<B: PacketBuf, T: TxQueue<Buf = B>, F: ForwardMode>(
    fwd: &mut F,
    inject: Option<&pmd::Injector<B>>,
    tx: &mut [Option<Tx<B, T>>],
    c: &WorkerCounters,
    t0: u64,
) {
    fwd.emit(&mut |port, frame| {
        let (Some(Some(t)), Some(make)) = (tx.get_mut(usize::from(port)), inject) else {
            return false;
        };
        let Some(m) = make(frame) else {
            return false;
        };
        let pc = &c.ports[usize::from(port)];
        t.rx_at[t.buf.len()] = t0;
        // Cannot fail: the buffer is flushed when full.
        let _ = t.buf.push(m);
        pc.injected.add(1);
        if t.buf.is_full() {
            flush(t, rdtsc(), pc);
        }
        true
    });
}

/// Sends the kernel's frames (from the mirror's ring, a burst at most) out
/// of their ports in fresh buffers, counted as `injected`; with no buffer
/// or no TX queue for the port here, as `tx_full` of that port.
#[cold]
fn from_kernel_frames<B: PacketBuf, T: TxQueue<Buf = B>>(
    k: &mut rtrb::Consumer<u8>,
    scratch: &mut Vec<u8>,
    inject: Option<&pmd::Injector<B>>,
    tx: &mut [Option<Tx<B, T>>],
    c: &WorkerCounters,
    t0: u64,
) {
    for _ in 0..pmd::MAX_BURST {
        let Some((port, frame)) = crate::taps::take(k, scratch) else {
            break;
        };
        let Some(pc) = c.ports.get(usize::from(port)) else {
            continue;
        };
        pc.injected.add(1);
        let (Some(Some(t)), Some(m)) = (
            tx.get_mut(usize::from(port)),
            inject.and_then(|make| make(frame)),
        ) else {
            pc.tx_full.add(1);
            continue;
        };
        t.rx_at[t.buf.len()] = t0;
        let _ = t.buf.push(m);
        if t.buf.is_full() {
            flush(t, rdtsc(), pc);
        }
    }
}

/// TX bursts a generator at the top rate makes per round.
const GEN_BURSTS: usize = 4;

/// Makes the packets each generator has due now ([`GEN_BURSTS`] bursts
/// per port at the top rate, up to four when paced) in fresh buffers,
/// queued on the port's TX buffer (flushed at once when paced) and counted
/// as `generated`; skipped ones as `gen_late`, those without a buffer (or
/// a TX queue here) as `gen_nombuf`. Returns how many it made.
#[inline(never)]
fn generate<B: PacketBuf, T: TxQueue<Buf = B>>(
    gens: &mut [crate::txgen::TxGen],
    inject: Option<&pmd::Injector<B>>,
    bulk: Option<&pmd::BulkAlloc<B>>,
    tx: &mut [Option<Tx<B, T>>],
    c: &WorkerCounters,
    burst: usize,
) -> usize {
    let now = rdtsc();
    let mut made = 0;
    for g in gens.iter_mut() {
        let pc = &c.ports[usize::from(g.port)];
        let (Some(Some(t)), Some(make)) = (tx.get_mut(usize::from(g.port)), inject) else {
            continue;
        };
        // Paced: up to four bursts' worth a round. At the top rate: what
        // fills the TX buffer GEN_BURSTS times over (each flush one TX
        // burst), so that a round's fixed costs (the RX poll, the clock
        // reads, the reports) spread over several bursts, as testpmd's
        // txonly spends no RX poll at all.
        let budget = if g.paced() {
            4 * burst
        } else {
            GEN_BURSTS * burst - t.buf.len()
        };
        let (n, skipped) = g.due(now, budget);
        if skipped > 0 {
            pc.gen_late.add(skipped);
        }
        let mut left = n;
        while left > 0 {
            // Buffers for what fits the TX buffer: in bulk when the pool
            // can, else one at a time.
            let want = left.min(t.buf.room()).max(1);
            // Bulk: straight into the TX buffer, then written in place.
            let start = t.buf.len();
            let fresh = bulk.map_or(0, |alloc| alloc(&mut t.buf, want));
            if fresh > 0 {
                let unfit = g.fill(&mut t.buf.as_mut_slice()[start..], now);
                if unfit > 0 {
                    drop_unfilled(&mut t.buf, start);
                    pc.gen_nombuf.add(unfit as u64);
                }
                let k = fresh - unfit;
                t.rx_at[start..start + k].fill(now);
                pc.generated.add(k as u64);
                made += k;
                left -= fresh;
            } else {
                match g.make(&**make, now) {
                    Some(m) => {
                        t.rx_at[t.buf.len()] = now;
                        // Cannot fail: the buffer is flushed when full.
                        let _ = t.buf.push(m);
                        pc.generated.add(1);
                        made += 1;
                    }
                    None => pc.gen_nombuf.add(1),
                }
                left -= 1;
            }
            if t.buf.is_full() {
                flush(t, now, pc);
            }
        }
        // Paced packets leave when due, not when a burst fills or the
        // drain timer fires (that would bunch them).
        if n > 0 && g.paced() {
            flush(t, now, pc);
        }
    }
    made
}

/// Frees the buffers from `start` on that a generator could not fill (a
/// frame larger than the pool's buffers: still empty), keeping the rest in
/// order.
#[cold]
fn drop_unfilled<B: PacketBuf>(buf: &mut Batch<B>, start: usize) {
    let mut i = 0;
    buf.retain(|m| {
        i += 1;
        i <= start || !m.is_empty()
    });
}

/// Offers a processed burst to a capture: the packets leaving on its port
/// (as sent), and those received on its port (from RX queue `queue`) that
/// a stage dropped (with the reason).
#[cold]
fn capture_verdicts<B: PacketBuf>(
    tap: &mut Tap,
    in_port: u16,
    queue: u16,
    t0: u64,
    pkts: &[B],
    verdicts: &[Verdict],
) {
    let port = tap.port();
    tap.burst(
        port,
        TX,
        t0,
        pkts.iter()
            .zip(verdicts)
            .filter(|(_, v)| **v == Verdict::Forward(port))
            .map(|(m, _)| (m.data(), 0)),
    );
    if !tap.takes(queue) {
        return;
    }
    tap.burst(
        in_port,
        DROP,
        t0,
        pkts.iter().zip(verdicts).filter_map(|(m, v)| match v {
            Verdict::Drop(r) => Some((m.data(), *r as u8)),
            _ => None,
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue that takes nothing, its link down or its ring full.
    struct Refusing(bool);

    impl TxQueue for Refusing {
        type Buf = pmd::Mbuf;
        fn tx_burst(&mut self, _: &mut Batch<pmd::Mbuf>) -> usize {
            0
        }
        fn link_down(&self) -> bool {
            self.0
        }
    }

    /// What a queue refuses with its link down is `link_down`, not
    /// `tx_full` (the first second of a link going down used to be
    /// counted as full rings).
    #[test]
    fn refused_with_the_link_down_is_link_down() {
        let pc = PortCounters::default();
        refused(&Refusing(true), 5, &pc);
        refused(&Refusing(false), 3, &pc);
        assert_eq!(pc.drops[pipeline::DropReason::LinkDown as usize].get(), 5);
        assert_eq!(pc.tx_full.get(), 3);
    }
}
