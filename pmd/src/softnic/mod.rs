//! The software NIC: an in-process NIC model that behaves like hardware.
//!
//! Each port has RX and TX descriptor rings of a fixed size (`rxd`, `txd`;
//! lock-free single-producer single-consumer rings). A traffic generator
//! thread ([`Generator`]) plays the wire: it fills the RX rings at a
//! configured rate and flow mix, drops and counts `imissed` when a ring is
//! full and `rx_nombuf` when the pool is empty, and, as the sink on the other
//! side, drains the TX rings, checks every packet and records end-to-end
//! latency from the TSC timestamp it wrote into the payload (against the TX
//! time the TX queue stamps, like a tester's RX timestamp).
//!
//! Each RX queue has an interrupt line: an eventfd that the generator raises
//! while the queue's interrupt is enabled and packets wait, with coalescing
//! like `ethtool -C rx-usecs/rx-frames`: it fires once `rx_frames` packets
//! wait or the first waiting packet has waited `rx_usecs`, whichever comes
//! first, then disarms itself until the driver enables it again.
//!
//! RSS: a flow's RX queue is a symmetric hash of its addresses and ports
//! (both directions of a flow land on the same queue), modulo the queue
//! count; the hash is stored in the buffer.

mod gen;

pub use crate::probe::{GenConfig, Pattern, Rate, Span, Walk};
pub use gen::{GenHandle, Generator};

use crate::mbuf::Mbuf;
use crate::sys::{rdtsc, EventFd};
use crate::{
    Batch, Caps, Counter, PortControl, PortStats, QueueCounters, RxInterrupt, RxQueue, TxQueue,
    MAX_BURST,
};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;

/// Interrupt coalescing, as `ethtool -C`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coalesce {
    /// Raise the interrupt once the first waiting packet has waited this
    /// long (µs; 0 = at once).
    pub rx_usecs: u32,
    /// Raise the interrupt once this many packets wait (0 or 1 = at once).
    pub rx_frames: u32,
}

impl Default for Coalesce {
    fn default() -> Self {
        Coalesce {
            rx_usecs: 50,
            rx_frames: 32,
        }
    }
}

/// Settings of one softnic port.
#[derive(Clone, Debug)]
pub struct SoftnicConfig {
    /// Port index in the appliance.
    pub port: u16,
    /// RX queues.
    pub rxq: u16,
    /// TX queues.
    pub txq: u16,
    /// RX ring size (descriptors).
    pub rxd: usize,
    /// TX ring size (descriptors).
    pub txd: usize,
    /// Interrupt coalescing.
    pub coalesce: Coalesce,
    /// Traffic the generator offers to this port.
    pub gen: GenConfig,
}

/// Interrupt line state of one RX queue.
struct Intr {
    armed: AtomicBool,
    efd: EventFd,
    /// Interrupts raised (written by the generator thread).
    raised: Counter,
}

/// Counters shared between the generator thread and the control path.
#[derive(Default)]
struct SinkCounters {
    /// Packets the generator offered (delivered + missed + no buffer).
    generated: Counter,
    /// Packets due that the generator skipped because it fell behind (the
    /// machine was busy): the configured rate less what it offered.
    late: Counter,
    /// Packets the sink received that failed its checks.
    bad: Counter,
}

struct Shared {
    rx: Vec<QueueCounters>,
    tx: Vec<QueueCounters>,
    intr: Vec<Intr>,
    sink: SinkCounters,
}

struct Control(Arc<Shared>);

impl PortControl for Control {
    fn driver(&self) -> &'static str {
        "softnic"
    }

    fn stats(&self) -> PortStats {
        PortStats::from_queues(&self.0.rx, &self.0.tx)
    }

    fn rx_queue_stats(&self) -> Vec<PortStats> {
        PortStats::per_rx_queue(&self.0.rx)
    }

    fn caps(&self) -> Caps {
        Caps {
            max_burst: MAX_BURST,
            rx_interrupt: true,
            // Its sink takes any frame; its generator makes them up to
            // this long, its buffers sized for the longest it makes.
            max_frame: crate::probe::MAX_FRAME_LEN,
        }
    }

    fn xstats(&self) -> Vec<(&'static str, u64)> {
        let s = &self.0;
        vec![
            ("generated", s.sink.generated.get()),
            ("gen_late", s.sink.late.get()),
            ("sink_rx", s.tx.iter().map(|q| q.packets.get()).sum()),
            ("sink_bad", s.sink.bad.get()),
            ("rx_interrupts", s.intr.iter().map(|i| i.raised.get()).sum()),
        ]
    }
}

struct SoftRx {
    ring: rtrb::Consumer<Mbuf>,
    shared: Arc<Shared>,
    queue: usize,
}

impl RxQueue for SoftRx {
    type Buf = Mbuf;

    #[inline]
    fn rx_burst(&mut self, out: &mut Batch<Mbuf>) -> usize {
        let n = out.room().min(self.ring.slots());
        if n == 0 {
            return 0;
        }
        let Ok(chunk) = self.ring.read_chunk(n) else {
            return 0;
        };
        // The generator wrote port, queue, RSS hash and RX time (when it
        // put the packet on the ring, as a NIC stamps arrival): the
        // buffers pass as they are. Nothing here reads or writes them, so
        // their lines stay on the generator's core (a write per packet
        // here cost a cross-core transfer each).
        for m in chunk {
            // Cannot fail: n <= out.room().
            let _ = out.push(m);
        }
        n
    }

    fn interrupt(&self) -> Option<&dyn RxInterrupt> {
        Some(&self.shared.intr[self.queue] as &dyn RxInterrupt)
    }
}

impl RxInterrupt for Intr {
    fn fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }

    fn enable(&self) {
        self.armed.store(true, Ordering::SeqCst);
        // Pairs with the generator's fence between publishing packets and
        // reading `armed`: either it sees the interrupt armed, or the
        // driver's re-check after enabling sees its packets.
        fence(Ordering::SeqCst);
    }

    fn disable(&self) {
        self.armed.store(false, Ordering::SeqCst);
    }

    fn ack(&self) {
        self.efd.clear();
    }
}

struct SoftTx {
    ring: rtrb::Producer<Mbuf>,
}

impl TxQueue for SoftTx {
    type Buf = Mbuf;

    #[inline]
    fn tx_burst(&mut self, pkts: &mut Batch<Mbuf>) -> usize {
        let n = pkts.len().min(self.ring.slots());
        if n == 0 {
            return 0;
        }
        let now = rdtsc();
        match self.ring.write_chunk_uninit(n) {
            Ok(chunk) => chunk.fill_from_iter(pkts.drain_front(n).map(|mut m| {
                // The wire time the sink measures end-to-end latency against.
                m.set_aux(now);
                m
            })),
            Err(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests;
