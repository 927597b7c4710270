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
    /// Packets this port's TX queue took.
    pub tx_pkts: Counter,
    /// Packets dropped because this port's TX ring was full.
    pub tx_full: Counter,
    /// Packets received on this port whose output port has no TX queue on
    /// this worker.
    pub unroutable: Counter,
    /// Packets the worker made and queued to this port's TX (held for
    /// ARP/ND, sent once resolved; the kernel's, from the port's mirror).
    pub injected: Counter,
    /// Packets received on this port and handed to the kernel (the
    /// port's TAP mirror).
    pub punted: Counter,
    /// Packets the worker's generator (`txonly`, `flowgen`) made for this
    /// port's TX (a source of the balance, like `injected`).
    pub generated: Counter,
    /// Packets the generator skipped because it fell behind its schedule
    /// (not made: a tester does not burst its backlog).
    pub gen_late: Counter,
    /// Packets the generator could not make: no buffer.
    pub gen_nombuf: Counter,
    /// Packets received on this port that this worker handed to the
    /// worker owning their state (forwarded or dropped there).
    pub handed_off: Counter,
    /// Packets received on this port that a stage dropped, by reason.
    pub drops: [Counter; DropReason::COUNT],
}

/// What one worker received from one of its RX queues.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct RxQueueCounters {
    /// Packets received.
    pub rx_pkts: Counter,
    /// Bursts that received at least one packet (packets per burst says
    /// how loaded the queue is: a full burst each time, a backlog).
    pub rx_bursts: Counter,
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
    /// Times the worker armed its interrupts and blocked.
    pub blocks: Counter,
    /// Blocks that ended because an interrupt fired.
    pub wakeups: Counter,
    /// Sleeps (adaptive back-off, timer ticks, fallback for queues without
    /// an interrupt line).
    pub sleeps: Counter,
    /// Current state (`poll::State` as a number).
    pub state: Counter,
    /// Current policy (its index in `poll::Policy::NAMES`); it changes when
    /// `sluice ctl set poll` switches it.
    pub policy: Counter,
    /// 1 when the policy wanted interrupts but a queue has none, so it sleeps.
    pub fallback: Counter,
    /// `auto`: 1 while in busy mode.
    pub auto_busy: Counter,
    /// `auto`: policy switches.
    pub switches: Counter,
    /// `timer`: ticks run.
    pub ticks: Counter,
    /// `timer`: ticks that started late (the previous one overran).
    pub late_ticks: Counter,
    /// `timer`: current per-queue quota.
    pub burst: Counter,
}

/// All counters of one worker.
#[derive(Debug)]
pub struct WorkerCounters {
    /// Loop counters.
    pub core: CoreCounters,
    /// Per port, index = port id.
    pub ports: Box<[PortCounters]>,
    /// Per RX queue it polls, in the order of its `rx` list.
    pub rx_queues: Box<[RxQueueCounters]>,
    /// The forwarding stage's slow-path events, copied from the stage every
    /// publish; [`WorkerCounters::event_names`] names them.
    pub events: Box<[Counter]>,
    /// The names of `events` (the stage's `ForwardMode::EVENTS`).
    pub event_names: &'static [&'static str],
    /// The forwarding stage's gauges (levels), copied every publish.
    pub gauges: Box<[Counter]>,
    /// The names of `gauges` (the stage's `ForwardMode::GAUGES`).
    pub gauge_names: &'static [&'static str],
    /// The stage clock (`sluice ctl set runtime`), copied every publish:
    /// 1 while it runs.
    pub stage_on: Counter,
    /// Packets the stage processed since its clock was last switched on.
    pub stage_packets: Counter,
    /// Cycles per stage since then, as `stage_names` names them.
    pub stage_cycles: Box<[Counter]>,
    /// The stage's `ForwardMode::STAGES` (empty: no stage clock).
    pub stage_names: &'static [&'static str],
    /// What its probe saw of stamped streams (`txonly`, `flowgen`, and
    /// `rxonly` with `measure`).
    pub probe: std::sync::Arc<pmd::probe::ProbeCounters>,
    /// 1 while its generator is sending (`sluice ctl gen`).
    pub gen_running: Counter,
    /// The sequence number of the last `sluice ctl gen` command it
    /// applied (the command is answered once every generator has).
    pub gen_applied: Counter,
}

impl WorkerCounters {
    /// Counters for a worker in an appliance with `nports` ports, polling
    /// `nrx` RX queues, whose forwarding stage counts the events
    /// `event_names` names, keeps the gauges `gauge_names` names and
    /// profiles the stages `stage_names` names.
    pub fn new(
        nports: usize,
        nrx: usize,
        event_names: &'static [&'static str],
        gauge_names: &'static [&'static str],
        stage_names: &'static [&'static str],
    ) -> Self {
        WorkerCounters {
            core: CoreCounters::default(),
            ports: (0..nports).map(|_| PortCounters::default()).collect(),
            rx_queues: (0..nrx).map(|_| RxQueueCounters::default()).collect(),
            events: event_names.iter().map(|_| Counter::default()).collect(),
            event_names,
            gauges: gauge_names.iter().map(|_| Counter::default()).collect(),
            gauge_names,
            stage_on: Counter::default(),
            stage_packets: Counter::default(),
            stage_cycles: stage_names.iter().map(|_| Counter::default()).collect(),
            stage_names,
            probe: Default::default(),
            gen_running: Counter::default(),
            gen_applied: Counter::default(),
        }
    }
}
