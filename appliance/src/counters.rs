//! Data-plane counters: one struct per worker and per (worker, port), each
//! on its own cache line, written only by the worker that owns it (plain
//! loads and stores, no locked instructions) and read by the management
//! thread at any time.

use pipeline::DropReason;
use pmd::Counter;

/// What one worker did with the packets of one port.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct PortCounters {
    /// Packets received from this port's RX queues.
    pub rx_pkts: Counter,
    /// Bytes received from this port's RX queues.
    pub rx_bytes: Counter,
    /// Packets this port's TX queue took.
    pub tx_pkts: Counter,
    /// Bytes this port's TX queue took.
    pub tx_bytes: Counter,
    /// Packets dropped because this port's TX ring was full.
    pub tx_full: Counter,
    /// Packets received on this port whose output port has no TX queue on
    /// this worker.
    pub unroutable: Counter,
    /// Packets received on this port that a stage dropped, by reason.
    pub drops: [Counter; DropReason::COUNT],
}

/// One worker's loop counters.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct CoreCounters {
    /// Iterations of the poll loop.
    pub polls: Counter,
    /// Iterations that received nothing.
    pub empty_polls: Counter,
    /// TSC cycles spent in iterations that received packets.
    pub busy_cycles: Counter,
    /// TSC cycles spent in iterations that received nothing.
    pub idle_cycles: Counter,
    /// Packets received (all ports).
    pub rx_pkts: Counter,
    /// CPU time of the worker thread (ns), sampled every publish.
    pub cpu_ns: Counter,
    /// 1 while the loop runs.
    pub running: Counter,
}

/// All counters of one worker.
#[derive(Debug)]
pub struct WorkerCounters {
    /// Loop counters.
    pub core: CoreCounters,
    /// Per port, index = port id.
    pub ports: Box<[PortCounters]>,
}

impl WorkerCounters {
    /// Counters for a worker in an appliance with `nports` ports.
    pub fn new(nports: usize) -> Self {
        WorkerCounters {
            core: CoreCounters::default(),
            ports: (0..nports).map(|_| PortCounters::default()).collect(),
        }
    }
}
