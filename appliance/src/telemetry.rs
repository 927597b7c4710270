//! The management thread's view: reads the workers' and ports' counters,
//! merges histograms, and turns two snapshots into a report (per period or
//! for the whole run), printed as a compact text block or as JSON lines.

use crate::counters::WorkerCounters;
use hdrhistogram::Histogram;
use pipeline::DropReason;
use pmd::hist::HistReader;
use pmd::sys::Tsc;
use pmd::{PortControl, PortStats};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// A port as the management thread sees it.
pub struct PortView {
    /// Name.
    pub name: String,
    /// Driver counters.
    pub control: Arc<dyn PortControl>,
    /// End-to-end latency from the softnic sink.
    pub e2e: Option<HistReader>,
    /// RX→TX residency of packets sent on this port, one reader per worker.
    pub resid: Vec<HistReader>,
}

/// A worker as the management thread sees it.
pub struct WorkerView {
    /// Core it is pinned to.
    pub core: usize,
    /// The RX queues it polls (port, queue), in its counters' order.
    pub rx: Vec<(u16, u16)>,
    /// Forwarding mode name.
    pub mode: &'static str,
    /// Poll-mode policy name.
    pub policy: &'static str,
    /// Its counters.
    pub counters: Arc<WorkerCounters>,
    /// One-way latency of the stamped packets its probe received (a
    /// tester's receiver).
    pub probe_hist: Option<pmd::hist::HistReader>,
}

/// Raw counter totals at one instant.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    tsc: u64,
    ports: Vec<PortSnap>,
    cores: Vec<CoreSnap>,
}

impl Snapshot {
    /// All counters zero at TSC `tsc` (the start of a run).
    pub fn zero(tsc: u64, nports: usize, ncores: usize) -> Self {
        Snapshot {
            tsc,
            ports: vec![PortSnap::default(); nports],
            cores: vec![CoreSnap::default(); ncores],
        }
    }

    /// When it was taken.
    pub fn tsc(&self) -> u64 {
        self.tsc
    }

    /// Each port's counters (totals since start).
    pub(crate) fn ports(&self) -> &[PortSnap] {
        &self.ports
    }

    /// Each worker's counters (totals since start).
    pub(crate) fn cores(&self) -> &[CoreSnap] {
        &self.cores
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct PortSnap {
    pub(crate) dev: PortStats,
    /// The device's counters per RX queue (empty where not kept).
    pub(crate) dev_rx_queues: Vec<PortStats>,
    pub(crate) xstats: BTreeMap<&'static str, u64>,
    pub(crate) rx_pkts: u64,
    pub(crate) tx_pkts: u64,
    pub(crate) tx_full: u64,
    pub(crate) unroutable: u64,
    pub(crate) injected: u64,
    pub(crate) punted: u64,
    pub(crate) handed_off: u64,
    pub(crate) generated: u64,
    pub(crate) drops: [u64; DropReason::COUNT],
}

#[derive(Clone, Debug, Default)]
pub(crate) struct CoreSnap {
    pub(crate) polls: u64,
    pub(crate) empty_polls: u64,
    pub(crate) busy: u64,
    pub(crate) idle: u64,
    pub(crate) rx: u64,
    pub(crate) cpu_ns: u64,
    pub(crate) blocks: u64,
    pub(crate) wakeups: u64,
    pub(crate) sleeps: u64,
    pub(crate) switches: u64,
    pub(crate) ticks: u64,
    pub(crate) late_ticks: u64,
    pub(crate) state: u64,
    pub(crate) policy: u64,
    pub(crate) fallback: u64,
    pub(crate) auto_busy: u64,
    pub(crate) burst: u64,
    /// Per RX queue it polls: packets, bursts.
    pub(crate) rx_queues: Vec<(u64, u64)>,
    pub(crate) events: Vec<u64>,
    pub(crate) gauges: Vec<u64>,
    /// The stage clock: running, packets and cycles per stage since it
    /// was switched on.
    pub(crate) stage_on: bool,
    pub(crate) stage_packets: u64,
    pub(crate) stage_cycles: Vec<u64>,
    pub(crate) tester: TesterSnap,
}

/// A tester's counters (a worker's generators and probe).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TesterSnap {
    pub(crate) generated: u64,
    pub(crate) late: u64,
    pub(crate) nombuf: u64,
    pub(crate) signed: u64,
    pub(crate) unsigned: u64,
    pub(crate) lost: u64,
    pub(crate) reordered: u64,
    pub(crate) duplicate: u64,
    pub(crate) running: bool,
}

/// What a tester worker (`txonly`, `flowgen`, `rxonly` with `measure`)
/// generated and what its probe received, over the interval.
#[derive(Clone, Debug, Serialize)]
pub struct TesterReport {
    /// Packets its generators made (all its TX ports).
    pub generated: u64,
    /// Packets skipped because a generator fell behind its schedule.
    pub gen_late: u64,
    /// Packets not made for want of a buffer.
    pub gen_nombuf: u64,
    /// Whether a generator is sending (at the end of the interval).
    pub running: bool,
    /// Received packets with the tester's signature.
    pub signed: u64,
    /// Received packets without one.
    pub unsigned: u64,
    /// Sequence numbers missing (net of those that came late).
    pub lost: i64,
    /// Packets that came after a later one of their flow.
    pub reordered: u64,
    /// Packets received twice.
    pub duplicate: u64,
    /// One-way latency of the signed packets (ns; sender's TSC stamp to
    /// the receiving burst's).
    pub latency_ns: Option<Latency>,
}

/// Latency percentiles in nanoseconds.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

/// Drops of one port, by reason.
#[derive(Clone, Debug, Serialize, Default)]
pub struct Drops {
    /// RX ring full (NIC imissed).
    pub rx_missed: u64,
    /// No buffer for a received packet.
    pub rx_nombuf: u64,
    /// TX ring full.
    pub tx_full: u64,
    /// No TX queue for the output port.
    pub unroutable: u64,
    /// Stage drops by reason.
    pub stage: BTreeMap<&'static str, u64>,
    /// Not a drop: ARP and Neighbor Discovery packets the router's slow
    /// path used up (learned from, or not for it).
    pub consumed: u64,
    /// Not a drop: packets handed to the worker that owns their NAT state
    /// (forwarded or dropped, and counted, there).
    pub handed_off: u64,
}

/// One RX queue's figures over an interval.
#[derive(Clone, Debug, Serialize)]
pub struct RxQueueReport {
    /// Queue index.
    pub queue: u16,
    /// The core of the worker that polls it.
    pub core: usize,
    /// Packets the worker received from it.
    pub rx_pkts: u64,
    /// Received packets per second.
    pub rx_pps: f64,
    /// Packets per burst that received any (the worker's burst size when
    /// the queue always has a backlog).
    pub pkts_per_burst: f64,
    /// Packets the device dropped on this queue for want of room in its
    /// ring; `None` where the driver does not count per queue.
    pub rx_missed: Option<u64>,
}

/// One port's figures over an interval.
#[derive(Clone, Debug, Serialize)]
pub struct PortReport {
    /// Port name.
    pub name: String,
    /// Driver.
    pub driver: &'static str,
    /// Packets the workers received.
    pub rx_pkts: u64,
    /// Packets the workers sent.
    pub tx_pkts: u64,
    /// Received packets per second.
    pub rx_pps: f64,
    /// Received bits per second (frame bytes × 8).
    pub rx_bps: f64,
    /// Sent packets per second.
    pub tx_pps: f64,
    /// Sent bits per second (frame bytes × 8).
    pub tx_bps: f64,
    /// Packets handed to the kernel through the port's TAP mirror.
    pub punted: u64,
    /// Packets sent in fresh buffers (held for ARP/ND, or the kernel's).
    pub injected: u64,
    /// Drops.
    pub drops: Drops,
    /// Driver-specific counters over the interval.
    pub xstats: BTreeMap<&'static str, u64>,
    /// Its RX queues that a worker polls, by queue.
    pub queues: Vec<RxQueueReport>,
    /// RX→TX residency of packets sent on this port (ns).
    pub residency_ns: Option<Latency>,
    /// End-to-end latency measured by the softnic sink (ns).
    pub e2e_ns: Option<Latency>,
}

/// One worker's figures over an interval.
#[derive(Clone, Debug, Serialize)]
pub struct CoreReport {
    /// Core id.
    pub core: usize,
    /// Forwarding mode.
    pub mode: &'static str,
    /// Poll-mode policy.
    pub policy: &'static str,
    /// What the worker was doing at the end of the interval (spin, pause,
    /// sleep, intr, tick; for auto: busy or interrupt).
    pub state: &'static str,
    /// The policy wanted interrupts but a queue has no interrupt line, so
    /// it sleeps instead.
    pub fallback_sleep: bool,
    /// Times it armed interrupts and blocked, per second.
    pub blocks_per_s: f64,
    /// Blocks ended by an interrupt, per second.
    pub wakeups_per_s: f64,
    /// Sleeps per second.
    pub sleeps_per_s: f64,
    /// `auto` policy switches in the interval.
    pub switches: u64,
    /// `timer`: ticks per second, ticks that started late, current quota.
    pub ticks_per_s: f64,
    /// `timer`: ticks that started late in the interval.
    pub late_ticks: u64,
    /// `timer`: per-queue quota at the end of the interval.
    pub timer_burst: u64,
    /// The forwarding stage's slow-path events in the interval (non-zero
    /// ones), by the names the stages give them.
    pub events: BTreeMap<&'static str, u64>,
    /// Share of loop cycles in iterations that received packets.
    pub busy: f64,
    /// Share of loop cycles in iterations that received nothing.
    pub idle: f64,
    /// Busy cycles per received packet.
    pub cycles_per_pkt: Option<f64>,
    /// Worker thread CPU time / wall time (1.0 = one whole core).
    pub cpu: f64,
    /// Poll-loop iterations per second.
    pub polls_per_s: f64,
    /// Share of polls that received nothing.
    pub empty_poll_ratio: f64,
    /// Packets per non-empty poll.
    pub pkts_per_poll: f64,
    /// Packets received per second.
    pub rx_pps: f64,
    /// A tester's figures (`txonly`, `flowgen`, `rxonly` with `measure`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tester: Option<TesterReport>,
}

/// The accounting identity over a whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Balance {
    /// Packets offered to the ports (softnic: generated; other drivers:
    /// delivered + missed + no buffer).
    pub offered: u64,
    /// Packets that left the appliance (softnic: received by the sink).
    pub delivered: u64,
    /// Packets the workers sent that they did not receive as such (held
    /// for ARP/ND, then sent in a fresh buffer): on the offered side.
    pub injected: u64,
    /// Packets the tester's generators made (`txonly`, `flowgen`): on the
    /// offered side.
    pub generated: u64,
    /// NIC drops: RX ring full.
    pub rx_missed: u64,
    /// NIC drops: no buffer.
    pub rx_nombuf: u64,
    /// TX ring full.
    pub tx_full: u64,
    /// Stage drops (all reasons).
    pub stage_drops: u64,
    /// Used up by the router's slow path (ARP, ND): not a drop.
    pub consumed: u64,
    /// Handed to the kernel (the ports' TAP mirrors): not a drop.
    pub punted: u64,
    /// Not part of the balance: packets the softnic generator should have
    /// offered at its configured rate but skipped because it fell behind
    /// (a busy machine). When this is more than 1% the offered load was
    /// below the configured one, and the report says so.
    pub gen_late: u64,
    /// No TX queue for the output port.
    pub unroutable: u64,
    /// Still in RX rings, TX buffers or TX rings (0 after a clean stop).
    pub in_flight: i64,
    /// offered == delivered + every drop + in flight, and in flight is 0.
    pub balanced: bool,
}

/// A report over an interval (`kind` = "period" or "summary").
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// "period" or "summary".
    pub kind: &'static str,
    /// Seconds since start at the end of the interval.
    pub t: f64,
    /// Interval length in seconds.
    pub interval: f64,
    /// Ports.
    pub ports: Vec<PortReport>,
    /// Workers.
    pub cores: Vec<CoreReport>,
    /// Only in the summary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balance: Option<Balance>,
    /// Firewall rules with `counter = true`: where the rule is, and the
    /// packets it matched (all workers, whole run). Only in the summary.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rule_hits: Vec<(String, u64)>,
}

/// The management thread's state.
pub struct Telemetry {
    /// Ports.
    pub ports: Vec<PortView>,
    /// Workers.
    pub workers: Vec<WorkerView>,
    tsc: Tsc,
    start: u64,
}

fn lat(h: &Histogram<u64>, tsc: &Tsc) -> Option<Latency> {
    if h.is_empty() {
        return None;
    }
    Some(Latency {
        count: h.len(),
        p50: tsc.ns(h.value_at_quantile(0.50)),
        p90: tsc.ns(h.value_at_quantile(0.90)),
        p99: tsc.ns(h.value_at_quantile(0.99)),
        p999: tsc.ns(h.value_at_quantile(0.999)),
        max: tsc.ns(h.max()),
    })
}

/// The sum of several histograms (`None` for none).
pub(crate) fn merged<'a>(hs: impl Iterator<Item = &'a Histogram<u64>>) -> Option<Histogram<u64>> {
    let mut out: Option<Histogram<u64>> = None;
    for h in hs {
        match &mut out {
            None => out = Some(h.clone()),
            Some(o) => {
                let _ = o.add(h);
            }
        }
    }
    out
}

impl Telemetry {
    /// Starts measuring now.
    pub fn new(ports: Vec<PortView>, workers: Vec<WorkerView>, tsc: Tsc) -> Self {
        Telemetry {
            ports,
            workers,
            tsc,
            start: pmd::sys::rdtsc(),
        }
    }

    /// Starts the probes' latency anew (a tester's new trial): what was
    /// published so far is merged and forgotten.
    pub fn restart_probes(&mut self) {
        for w in &mut self.workers {
            if let Some(h) = &mut w.probe_hist {
                h.collect();
                h.total.reset();
                h.period.reset();
            }
        }
    }

    /// TSC cycles per second.
    pub fn tsc_hz(&self) -> f64 {
        self.tsc.hz as f64
    }

    /// Seconds from the start to when `s` was taken.
    pub fn seconds_since_start(&self, s: &Snapshot) -> f64 {
        self.tsc.ns(s.tsc.saturating_sub(self.start)) / 1e9
    }

    /// Merges what the workers have published and hands them back their
    /// spares. A worker publishes once a tick if it holds a spare, so the
    /// management thread collects every turn: what a worker recorded is
    /// then in the histograms a turn and a tick later, as its counters
    /// are, even when nobody asks for a snapshot in between.
    pub fn collect(&mut self) {
        for p in &mut self.ports {
            if let Some(h) = &mut p.e2e {
                h.collect();
            }
            for h in &mut p.resid {
                h.collect();
            }
        }
        for w in &mut self.workers {
            if let Some(h) = &mut w.probe_hist {
                h.collect();
            }
        }
    }

    /// Reads every counter and merges published histograms.
    pub fn snapshot(&mut self) -> Snapshot {
        self.collect();
        let mut ports: Vec<PortSnap> = self
            .ports
            .iter()
            .map(|p| PortSnap {
                dev: p.control.stats(),
                dev_rx_queues: p.control.rx_queue_stats(),
                xstats: p.control.xstats().into_iter().collect(),
                ..PortSnap::default()
            })
            .collect();
        let mut cores = Vec::new();
        for w in &self.workers {
            let c = &w.counters;
            for (i, pc) in c.ports.iter().enumerate() {
                let s = &mut ports[i];
                s.rx_pkts += pc.rx_pkts.get();
                s.tx_pkts += pc.tx_pkts.get();
                s.tx_full += pc.tx_full.get();
                s.unroutable += pc.unroutable.get();
                s.injected += pc.injected.get();
                s.punted += pc.punted.get();
                s.handed_off += pc.handed_off.get();
                s.generated += pc.generated.get();
                for (d, v) in s.drops.iter_mut().zip(pc.drops.iter()) {
                    *d += v.get();
                }
            }
            let k = &c.core;
            cores.push(CoreSnap {
                polls: k.polls.get(),
                empty_polls: k.empty_polls.get(),
                busy: k.busy_cycles.get(),
                idle: k.idle_cycles.get(),
                rx: k.rx_pkts.get(),
                cpu_ns: k.cpu_ns.get(),
                blocks: k.blocks.get(),
                wakeups: k.wakeups.get(),
                sleeps: k.sleeps.get(),
                switches: k.switches.get(),
                ticks: k.ticks.get(),
                late_ticks: k.late_ticks.get(),
                state: k.state.get(),
                policy: k.policy.get(),
                fallback: k.fallback.get(),
                auto_busy: k.auto_busy.get(),
                burst: k.burst.get(),
                rx_queues: c
                    .rx_queues
                    .iter()
                    .map(|q| (q.rx_pkts.get(), q.rx_bursts.get()))
                    .collect(),
                events: c.events.iter().map(|e| e.get()).collect(),
                gauges: c.gauges.iter().map(|e| e.get()).collect(),
                stage_on: c.stage_on.get() == 1,
                stage_packets: c.stage_packets.get(),
                stage_cycles: c.stage_cycles.iter().map(|e| e.get()).collect(),
                tester: TesterSnap {
                    generated: c.ports.iter().map(|p| p.generated.get()).sum(),
                    late: c.ports.iter().map(|p| p.gen_late.get()).sum(),
                    nombuf: c.ports.iter().map(|p| p.gen_nombuf.get()).sum(),
                    signed: c.probe.signed.get(),
                    unsigned: c.probe.unsigned.get(),
                    lost: c.probe.lost.get(),
                    reordered: c.probe.reordered.get(),
                    duplicate: c.probe.duplicate.get(),
                    running: c.gen_running.get() == 1,
                },
            });
        }
        Snapshot {
            tsc: pmd::sys::rdtsc(),
            ports,
            cores,
        }
    }

    /// The report between two snapshots; `summary` uses whole-run
    /// histograms and adds the balance.
    pub fn report(&mut self, a: &Snapshot, b: &Snapshot, summary: bool) -> Report {
        let tsc = self.tsc;
        let dt = (tsc.ns(b.tsc.saturating_sub(a.tsc)) / 1e9).max(1e-9);
        let mut ports = Vec::new();
        for (i, p) in self.ports.iter_mut().enumerate() {
            let (x, y) = (&a.ports.get(i).cloned().unwrap_or_default(), &b.ports[i]);
            let d = |f: fn(&PortSnap) -> u64| f(y).saturating_sub(f(x));
            let resid = if summary {
                merged(p.resid.iter().map(|h| &h.total))
            } else {
                merged(p.resid.iter().map(|h| &h.period))
            };
            let e2e = p
                .e2e
                .as_ref()
                .map(|h| if summary { &h.total } else { &h.period });
            let mut stage = BTreeMap::new();
            let consumed = y.drops[DropReason::Consumed as usize]
                .saturating_sub(x.drops[DropReason::Consumed as usize]);
            for r in DropReason::ALL
                .iter()
                .copied()
                .filter(|&r| r != DropReason::Consumed)
            {
                stage.insert(
                    r.name(),
                    y.drops[r as usize].saturating_sub(x.drops[r as usize]),
                );
            }
            let mut queues = Vec::new();
            for (wi, w) in self.workers.iter().enumerate() {
                for (qi, &(port, queue)) in w.rx.iter().enumerate() {
                    if usize::from(port) != i {
                        continue;
                    }
                    let at = |c: Option<&CoreSnap>| {
                        c.and_then(|c| c.rx_queues.get(qi))
                            .copied()
                            .unwrap_or((0, 0))
                    };
                    let ((p0, b0), (p1, b1)) = (at(a.cores.get(wi)), at(b.cores.get(wi)));
                    let (pkts, bursts) = (p1.saturating_sub(p0), b1.saturating_sub(b0));
                    let dev =
                        |s: &PortSnap| s.dev_rx_queues.get(usize::from(queue)).map(|q| q.imissed);
                    queues.push(RxQueueReport {
                        queue,
                        core: w.core,
                        rx_pkts: pkts,
                        rx_pps: pkts as f64 / dt,
                        pkts_per_burst: if bursts > 0 {
                            pkts as f64 / bursts as f64
                        } else {
                            0.0
                        },
                        rx_missed: dev(y).map(|m| m.saturating_sub(dev(x).unwrap_or(0))),
                    });
                }
            }
            queues.sort_by_key(|q| q.queue);
            ports.push(PortReport {
                name: p.name.clone(),
                queues,
                driver: p.control.driver(),
                rx_pkts: d(|s| s.rx_pkts),
                tx_pkts: d(|s| s.tx_pkts),
                rx_pps: d(|s| s.rx_pkts) as f64 / dt,
                rx_bps: d(|s| s.dev.ibytes) as f64 * 8.0 / dt,
                tx_pps: d(|s| s.tx_pkts) as f64 / dt,
                tx_bps: d(|s| s.dev.obytes) as f64 * 8.0 / dt,
                punted: d(|s| s.punted),
                injected: d(|s| s.injected),
                drops: Drops {
                    rx_missed: d(|s| s.dev.imissed),
                    rx_nombuf: d(|s| s.dev.rx_nombuf),
                    tx_full: d(|s| s.tx_full),
                    unroutable: d(|s| s.unroutable),
                    stage,
                    consumed,
                    handed_off: d(|s| s.handed_off),
                },
                xstats: y
                    .xstats
                    .iter()
                    .map(|(k, v)| (*k, v.saturating_sub(x.xstats.get(k).copied().unwrap_or(0))))
                    .collect(),
                residency_ns: resid.as_ref().and_then(|h| lat(h, &tsc)),
                e2e_ns: e2e.and_then(|h| lat(h, &tsc)),
            });
            if !summary {
                for h in &mut p.resid {
                    h.reset_period();
                }
                if let Some(h) = &mut p.e2e {
                    h.reset_period();
                }
            }
        }
        let mut cores = Vec::new();
        for (i, w) in self.workers.iter_mut().enumerate() {
            let (x, y) = (&a.cores.get(i).cloned().unwrap_or_default(), &b.cores[i]);
            let busy = y.busy.saturating_sub(x.busy) as f64;
            let idle = y.idle.saturating_sub(x.idle) as f64;
            let polls = y.polls.saturating_sub(x.polls) as f64;
            let empty = y.empty_polls.saturating_sub(x.empty_polls) as f64;
            let rx = y.rx.saturating_sub(x.rx) as f64;
            let loop_cycles = (busy + idle).max(1.0);
            let policy = crate::poll::Policy::NAMES
                .get(y.policy as usize)
                .copied()
                .unwrap_or(w.policy);
            let state = if policy == "auto" {
                if y.auto_busy == 1 {
                    "busy"
                } else {
                    "interrupt"
                }
            } else {
                crate::poll::State::name_of(y.state)
            };
            let per_s = |f: fn(&CoreSnap) -> u64| f(y).saturating_sub(f(x)) as f64 / dt;
            cores.push(CoreReport {
                core: w.core,
                mode: w.mode,
                policy,
                state,
                fallback_sleep: y.fallback == 1,
                blocks_per_s: per_s(|c| c.blocks),
                wakeups_per_s: per_s(|c| c.wakeups),
                sleeps_per_s: per_s(|c| c.sleeps),
                switches: y.switches.saturating_sub(x.switches),
                ticks_per_s: per_s(|c| c.ticks),
                late_ticks: y.late_ticks.saturating_sub(x.late_ticks),
                timer_burst: y.burst,
                events: w
                    .counters
                    .event_names
                    .iter()
                    .enumerate()
                    .map(|(k, name)| {
                        let at = |c: &CoreSnap| c.events.get(k).copied().unwrap_or(0);
                        (*name, at(y).saturating_sub(at(x)))
                    })
                    .filter(|(_, v)| *v > 0)
                    .collect(),
                busy: busy / loop_cycles,
                idle: idle / loop_cycles,
                cycles_per_pkt: (rx > 0.0).then(|| busy / rx),
                cpu: y.cpu_ns.saturating_sub(x.cpu_ns) as f64 / 1e9 / dt,
                polls_per_s: polls / dt,
                empty_poll_ratio: if polls > 0.0 { empty / polls } else { 0.0 },
                pkts_per_poll: if polls > empty {
                    rx / (polls - empty)
                } else {
                    0.0
                },
                rx_pps: rx / dt,
                tester: tester_report(w, &x.tester, &y.tester, summary, &tsc),
            });
        }
        let balance = summary.then(|| balance(b));
        Report {
            kind: if summary { "summary" } else { "period" },
            t: tsc.ns(b.tsc.saturating_sub(self.start)) / 1e9,
            interval: dt,
            ports,
            cores,
            balance,
            rule_hits: Vec::new(),
        }
    }
}

/// A tester worker's figures between two snapshots (`None` for a worker
/// that neither generates nor measures); a period report starts a new
/// latency period.
fn tester_report(
    w: &mut WorkerView,
    x: &TesterSnap,
    y: &TesterSnap,
    summary: bool,
    tsc: &Tsc,
) -> Option<TesterReport> {
    let measures = w.probe_hist.is_some();
    if !measures && *y == TesterSnap::default() {
        return None;
    }
    let latency = w.probe_hist.as_mut().and_then(|h| {
        let l = lat(if summary { &h.total } else { &h.period }, tsc);
        if !summary {
            h.reset_period();
        }
        l
    });
    Some(TesterReport {
        generated: y.generated - x.generated,
        gen_late: y.late - x.late,
        gen_nombuf: y.nombuf - x.nombuf,
        running: y.running,
        signed: y.signed - x.signed,
        unsigned: y.unsigned - x.unsigned,
        lost: y.lost as i64 - x.lost as i64,
        reordered: y.reordered - x.reordered,
        duplicate: y.duplicate - x.duplicate,
        latency_ns: latency,
    })
}

fn balance(s: &Snapshot) -> Balance {
    let mut b = Balance {
        offered: 0,
        delivered: 0,
        injected: 0,
        generated: 0,
        rx_missed: 0,
        rx_nombuf: 0,
        tx_full: 0,
        stage_drops: 0,
        consumed: 0,
        punted: 0,
        gen_late: 0,
        unroutable: 0,
        in_flight: 0,
        balanced: false,
    };
    for p in &s.ports {
        b.offered += p
            .xstats
            .get("generated")
            .copied()
            .unwrap_or(p.dev.ipackets + p.dev.imissed + p.dev.rx_nombuf);
        b.delivered += p.dev.opackets;
        b.gen_late += p.xstats.get("gen_late").copied().unwrap_or(0);
        b.rx_missed += p.dev.imissed;
        b.rx_nombuf += p.dev.rx_nombuf;
        b.tx_full += p.tx_full;
        b.unroutable += p.unroutable;
        b.injected += p.injected;
        b.generated += p.generated;
        b.punted += p.punted;
        let consumed = p.drops[DropReason::Consumed as usize];
        b.consumed += consumed;
        b.stage_drops += p.drops.iter().sum::<u64>() - consumed;
    }
    let accounted = b.delivered
        + b.consumed
        + b.punted
        + b.rx_missed
        + b.rx_nombuf
        + b.tx_full
        + b.stage_drops
        + b.unroutable;
    b.in_flight = (b.offered + b.injected + b.generated) as i64 - accounted as i64;
    b.balanced = b.in_flight == 0;
    b
}

fn si(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn us(ns: f64) -> String {
    let u = ns / 1e3;
    if u >= 100.0 {
        format!("{u:.0}")
    } else if u >= 10.0 {
        format!("{u:.1}")
    } else {
        format!("{u:.2}")
    }
}

fn lat_text(name: &str, l: &Option<Latency>) -> String {
    match l {
        Some(l) => format!(
            "{name} p50 {} p90 {} p99 {} p99.9 {} max {} µs",
            us(l.p50),
            us(l.p90),
            us(l.p99),
            us(l.p999),
            us(l.max)
        ),
        None => format!("{name} -"),
    }
}

impl Report {
    /// The compact text block.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let head = if self.kind == "summary" {
            format!("== summary: {:.1} s ==", self.interval)
        } else {
            format!("[{:7.1} s]", self.t)
        };
        let _ = writeln!(s, "{head}");
        for p in &self.ports {
            let d = &p.drops;
            let stage: u64 = d.stage.values().sum();
            let reasons: Vec<String> = d
                .stage
                .iter()
                .filter(|(_, v)| **v > 0)
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let stage = if reasons.is_empty() {
                stage.to_string()
            } else {
                format!("{stage} ({})", reasons.join(", "))
            };
            let _ = writeln!(
                s,
                "  port {:<6} rx {:>8}pps {:>8}bps  tx {:>8}pps {:>8}bps  drops: missed {} nombuf {} tx_full {} stage {} unroutable {}",
                p.name,
                si(p.rx_pps),
                si(p.rx_bps),
                si(p.tx_pps),
                si(p.tx_bps),
                d.rx_missed,
                d.rx_nombuf,
                d.tx_full,
                stage,
                d.unroutable
            );
            if d.handed_off > 0 {
                let _ = writeln!(
                    s,
                    "              handed off to the owning core: {}",
                    d.handed_off
                );
            }
            if p.queues.len() > 1 {
                let q: Vec<String> = p
                    .queues
                    .iter()
                    .map(|q| {
                        let missed = q
                            .rx_missed
                            .map_or(String::new(), |m| format!(" missed {m}"));
                        format!(
                            "{} (core {}) {}pps {:.1}/burst{missed}",
                            q.queue,
                            q.core,
                            si(q.rx_pps),
                            q.pkts_per_burst
                        )
                    })
                    .collect();
                let _ = writeln!(s, "              rx queues: {}", q.join(", "));
            }
            if p.residency_ns.is_some() || p.e2e_ns.is_some() {
                let _ = writeln!(
                    s,
                    "              {}  |  {}",
                    lat_text("residency", &p.residency_ns),
                    lat_text("e2e", &p.e2e_ns)
                );
            }
        }
        for c in &self.cores {
            let cpp = c
                .cycles_per_pkt
                .map_or("-".to_string(), |v| format!("{v:.1}"));
            let _ = writeln!(
                s,
                "  core {:<3} {:<7} {}:{}  busy {:5.1}% idle {:5.1}%  {} cyc/pkt  cpu {:5.1}%  polls {}/s ({:.2}% empty, {:.1} pkt/poll)",
                c.core,
                c.mode,
                c.policy,
                c.state,
                c.busy * 100.0,
                c.idle * 100.0,
                cpp,
                c.cpu * 100.0,
                si(c.polls_per_s),
                c.empty_poll_ratio * 100.0,
                c.pkts_per_poll
            );
            let mut extra = String::new();
            if c.blocks_per_s > 0.0 || c.wakeups_per_s > 0.0 {
                extra += &format!(
                    "  blocks {}/s wakeups {}/s",
                    si(c.blocks_per_s),
                    si(c.wakeups_per_s)
                );
            }
            if c.sleeps_per_s > 0.0 {
                extra += &format!("  sleeps {}/s", si(c.sleeps_per_s));
            }
            if c.fallback_sleep {
                extra += "  (no interrupt line: sleeping instead)";
            }
            if c.switches > 0 {
                extra += &format!("  switches {}", c.switches);
            }
            if c.ticks_per_s > 0.0 {
                extra += &format!(
                    "  ticks {}/s late {} quota {}",
                    si(c.ticks_per_s),
                    c.late_ticks,
                    c.timer_burst
                );
            }
            for (k, v) in &c.events {
                extra += &format!("  {k} {v}");
            }
            if !extra.is_empty() {
                let _ = writeln!(s, "          {}", extra.trim_start());
            }
            if let Some(t) = &c.tester {
                let _ = writeln!(
                    s,
                    "          tester: generated {} (late {}, no buffer {}){}  received signed {} unsigned {}  lost {} reordered {} duplicate {}  {}",
                    t.generated,
                    t.gen_late,
                    t.gen_nombuf,
                    if t.running { " sending" } else { "" },
                    t.signed,
                    t.unsigned,
                    t.lost,
                    t.reordered,
                    t.duplicate,
                    lat_text("latency", &t.latency_ns)
                );
            }
        }
        for (origin, n) in &self.rule_hits {
            let _ = writeln!(s, "  rule {origin}: {n} packets");
        }
        if let Some(b) = &self.balance {
            let _ = writeln!(
                s,
                "  balance: offered {}{} = delivered {} + consumed {}{} + rx_missed {} + rx_nombuf {} + tx_full {} + stage {} + unroutable {} + in flight {}  [{}]",
                b.offered,
                if b.injected + b.generated > 0 {
                    format!(
                        "{}{}",
                        if b.injected > 0 {
                            format!(" + injected {}", b.injected)
                        } else {
                            String::new()
                        },
                        if b.generated > 0 {
                            format!(" + generated {}", b.generated)
                        } else {
                            String::new()
                        }
                    )
                } else {
                    String::new()
                },
                b.delivered,
                b.consumed,
                if b.punted > 0 {
                    format!(" + punted {}", b.punted)
                } else {
                    String::new()
                },
                b.rx_missed,
                b.rx_nombuf,
                b.tx_full,
                b.stage_drops,
                b.unroutable,
                b.in_flight,
                if self.kind == "stats" {
                    "running: in flight is what is inside now"
                } else if b.balanced {
                    "balanced"
                } else {
                    "NOT BALANCED"
                }
            );
            if b.gen_late * 100 > b.offered + b.gen_late {
                let _ = writeln!(
                    s,
                    "  warning: the generator fell behind and did not offer {} packets ({:.1}% of the configured load): the machine is busy; give the generator its own core ([generator] core) or lower the rate",
                    b.gen_late,
                    100.0 * b.gen_late as f64 / (b.offered + b.gen_late) as f64
                );
            }
        }
        s
    }

    /// One JSON line.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}
