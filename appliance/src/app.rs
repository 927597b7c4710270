//! Start-up, the management loop and shutdown: opens the ports, hands each
//! queue to exactly one worker, spawns the pinned workers and the softnic
//! generator, reports every stats period, and stops in an order that leaves
//! nothing uncounted.

use crate::config::{Config, FwdMode, PortKind};
use crate::counters::WorkerCounters;
use crate::poll::Switch;
use crate::telemetry::{PortView, Report, Snapshot, Telemetry, WorkerView};
use crate::worker::{self, Handed, Handoff, RxSlot, TxSlot, WorkerSetup};
use anyhow::{anyhow, Context, Result};
use pipeline::firewall::RuleSet;
use pipeline::fwd::{FiveTupleSwap, ForwardMode, Io, Mac, MacSwap, Peers};
use pipeline::gateway::{Gateway, GatewayConfig, RuleHits};
use pipeline::lpm::{Lpm4Builder, Lpm6Builder};
use pipeline::router::{Router, RouterConfig};
use pmd::hist::hist_pair;
use pmd::softnic::{Generator, SoftnicConfig};
use pmd::sys::Tsc;
use pmd::{PacketBuf, RxQueue, TxQueue};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Packets each handoff ring holds.
const HANDOFF_RING: usize = 4096;

/// Buffers in each null / pcap port's pool.
const POOL_SIZE: usize = 8192;

fn pin(core: usize, who: &str) {
    if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        eprintln!("warning: could not pin {who} to core {core}; running unpinned");
    }
}

type Leftovers<B> = Vec<rtrb::Consumer<Handed<B>>>;

fn spawn_worker<B, R, T, F>(
    core: usize,
    setup: WorkerSetup<B, R, T>,
    fwd: F,
    stop: Arc<AtomicBool>,
    on_start: fn(),
) -> Result<JoinHandle<Leftovers<B>>>
where
    B: PacketBuf,
    R: RxQueue<Buf = B> + 'static,
    T: TxQueue<Buf = B> + 'static,
    F: ForwardMode,
{
    std::thread::Builder::new()
        .name(format!("worker-{core}"))
        .spawn(move || {
            pin(core, "worker");
            on_start();
            // Sleeps of the poll-mode policies end when asked, not up to
            // 50 µs later.
            pmd::sys::set_timer_slack(1_000);
            worker::run(setup, fwd, &stop)
        })
        .context("spawning a worker thread")
}

/// Builds the route tables and the router stage (control path).
pub fn build_router(cfg: &Config) -> Result<Router> {
    use pipeline::router::NextHop;
    use std::collections::HashMap;
    use std::net::IpAddr;
    let rs = &cfg.router;
    let mut hops: Vec<NextHop> = Vec::new();
    let mut index: HashMap<(u16, Option<IpAddr>), u32> = HashMap::new();
    let mut hop = |nh: NextHop| -> u32 {
        *index.entry((nh.port, nh.via)).or_insert_with(|| {
            hops.push(nh);
            (hops.len() - 1) as u32
        })
    };
    let (mut b4, mut b6) = (Lpm4Builder::new(), Lpm6Builder::new());
    // The route file first, so that static routes for the same prefix win.
    if let Some((_, via4, via6)) = &rs.route_file {
        let (mut i4, mut i6) = (0usize, 0usize);
        for &(a, len) in &rs.file_routes {
            match a {
                IpAddr::V4(a) if !via4.is_empty() => {
                    b4.add(a, len, hop(via4[i4 % via4.len()]));
                    i4 += 1;
                }
                IpAddr::V6(a) if !via6.is_empty() => {
                    b6.add(a, len, hop(via6[i6 % via6.len()]));
                    i6 += 1;
                }
                _ => {}
            }
        }
    }
    for r in &rs.routes {
        let nh = hop(r.next_hop);
        match r.addr {
            IpAddr::V4(a) => {
                b4.add(a, r.len, nh);
            }
            IpAddr::V6(a) => {
                b6.add(a, r.len, nh);
            }
        }
    }
    let (mut n4, mut n6) = (Vec::new(), Vec::new());
    for &(p, a, m) in &rs.neighbors {
        match a {
            IpAddr::V4(a) => n4.push((p, a, m)),
            IpAddr::V6(a) => n6.push((p, a, m)),
        }
    }
    Ok(Router::new(RouterConfig {
        interfaces: rs.interfaces.clone(),
        next_hops: hops,
        lpm4: Arc::new(b4.build().context("IPv4 routes")?),
        lpm6: Arc::new(b6.build().context("IPv6 routes")?),
        neighbors4: n4,
        neighbors6: n6,
        icmp_rate: rs.icmp_rate,
        neighbor_timeout_ns: rs.neighbor_timeout.as_nanos() as u64,
    }))
}

/// Builds the firewall rule set and the gateway settings (control path).
pub fn build_gateway(cfg: &Config, workers: u16) -> GatewayConfig {
    let g = &cfg.gateway;
    GatewayConfig {
        rules: Arc::new(RuleSet::build(
            g.rules.clone(),
            g.default,
            &g.nat.original_dsts(),
        )),
        nat: Arc::new(g.nat.clone()),
        ct_capacity: g.ct_capacity,
        timeouts: g.timeouts,
        workers: workers.max(1),
    }
}

/// A core for the management thread that no worker uses: the generator's
/// if it has one, else the first free core; `None` if every core has a
/// worker.
pub fn management_core(cfg: &Config) -> Option<usize> {
    let busy: Vec<usize> = cfg.workers.iter().map(|w| w.core).collect();
    if let Some(c) = cfg.generator_core.filter(|c| !busy.contains(c)) {
        return Some(c);
    }
    core_affinity::get_core_ids()?
        .into_iter()
        .map(|c| c.id)
        .find(|c| !busy.contains(c))
}

/// Runs the appliance until the configured duration passes or `stop` is
/// set; calls `emit` with each period's report and returns the summary.
pub fn run(cfg: &Config, stop: &AtomicBool, emit: &mut dyn FnMut(&Report)) -> Result<Report> {
    let tsc = Tsc::calibrate(Duration::from_millis(50));
    if cfg
        .ports
        .iter()
        .any(|p| matches!(p.kind, PortKind::Dpdk { .. }))
    {
        #[cfg(feature = "dpdk")]
        return crate::dpdk::run(cfg, tsc, stop, emit);
        #[cfg(not(feature = "dpdk"))]
        anyhow::bail!("DPDK ports need a build with `--features dpdk`");
    }

    // Ports. All AF_XDP ports share one UMEM (the sum of their frames;
    // rings of half the smallest port's), so frames move between them
    // without copies.
    #[cfg(feature = "afxdp")]
    let umem = {
        let frames: Vec<u32> = cfg
            .ports
            .iter()
            .filter_map(|p| match p.kind {
                PortKind::AfXdp { frames, .. } => Some(frames),
                _ => None,
            })
            .collect();
        match frames.iter().min() {
            Some(&min) => Some(pmd::afxdp::Umem::new(frames.iter().sum(), min / 2)?),
            None => None,
        }
    };
    let mut gen = Generator::new(tsc);
    let mut opened = Vec::new();
    for (i, p) in cfg.ports.iter().enumerate() {
        let port = i as u16;
        let (open, e2e) = match &p.kind {
            PortKind::Softnic { gen: g, coalesce } => {
                let (o, h) = gen
                    .add_port(&SoftnicConfig {
                        port,
                        rxq: p.rxq,
                        txq: p.txq,
                        rxd: p.rxd,
                        txd: p.txd,
                        coalesce: *coalesce,
                        gen: g.clone(),
                    })
                    .with_context(|| format!("port {} ({})", p.name, p.origin))?;
                (o, Some(h))
            }
            PortKind::Null { size } => (
                pmd::null::open(&pmd::null::NullConfig {
                    port,
                    size: *size,
                    rxq: p.rxq,
                    txq: p.txq,
                    pool_size: POOL_SIZE,
                })
                .with_context(|| format!("port {} ({})", p.name, p.origin))?,
                None,
            ),
            PortKind::Pcap {
                rx_file,
                tx_file,
                loops,
            } => (
                pmd::pcap::open(&pmd::pcap::PcapConfig {
                    port,
                    rx_file: rx_file.clone(),
                    tx_file: tx_file.clone(),
                    loops: *loops,
                    pool_size: POOL_SIZE,
                })
                .with_context(|| format!("port {} ({})", p.name, p.origin))?,
                None,
            ),
            PortKind::AfPacket {
                iface,
                blocks,
                qdisc_bypass,
            } => (
                pmd::afpacket::open(&pmd::afpacket::AfPacketConfig {
                    port,
                    iface: iface.clone(),
                    rxq: p.rxq,
                    txq: p.txq,
                    blocks: *blocks,
                    qdisc_bypass: *qdisc_bypass,
                    pool_size: POOL_SIZE.max(4 * usize::from(p.rxq) * 2048),
                })
                .with_context(|| format!("port {} ({})", p.name, p.origin))?,
                None,
            ),
            #[cfg(feature = "afxdp")]
            PortKind::AfXdp {
                iface,
                zerocopy,
                skb_mode,
                ..
            } => (
                pmd::afxdp::open(
                    &pmd::afxdp::AfXdpConfig {
                        port,
                        iface: iface.clone(),
                        zerocopy: *zerocopy,
                        skb_mode: *skb_mode,
                    },
                    umem.as_ref().expect("a UMEM for AF_XDP ports"),
                )
                .with_context(|| format!("port {} ({})", p.name, p.origin))?,
                None,
            ),
            #[cfg(not(feature = "afxdp"))]
            PortKind::AfXdp { .. } => {
                anyhow::bail!(
                    "port {}: AF_XDP ports need a build with `--features afxdp`",
                    p.name
                )
            }
            PortKind::Dpdk { .. } => unreachable!("handled above"),
        };
        opened.push((open, e2e));
    }
    let gen = (!gen.is_empty()).then_some(gen);
    run_ports(cfg, tsc, opened, gen, || {}, stop, emit)
}

/// Runs the appliance on opened ports of one buffer family: hands each
/// queue to its worker, spawns the workers (each calls `on_start` first,
/// after pinning) and the generator, runs the management loop, and stops.
pub(crate) fn run_ports<B, R, T>(
    cfg: &Config,
    tsc: Tsc,
    opened: Vec<(pmd::OpenPort<B, R, T>, Option<pmd::hist::HistReader>)>,
    gen: Option<Generator>,
    on_start: fn(),
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&Report),
) -> Result<Report>
where
    B: PacketBuf,
    R: RxQueue<Buf = B> + 'static,
    T: TxQueue<Buf = B> + 'static,
{
    let nports = cfg.ports.len();
    let mut rx: Vec<Vec<Option<R>>> = Vec::new();
    let mut tx: Vec<Vec<Option<T>>> = Vec::new();
    let mut views = Vec::new();
    for ((open, e2e), p) in opened.into_iter().zip(&cfg.ports) {
        rx.push(open.rx.into_iter().map(Some).collect());
        tx.push(open.tx.into_iter().map(Some).collect());
        views.push(PortView {
            name: p.name.clone(),
            control: open.control,
            e2e,
            resid: Vec::new(),
        });
    }

    // Hand each queue to its worker.
    let worker_stop = Arc::new(AtomicBool::new(false));
    let peers = Peers::new(cfg.ports.iter().map(|p| p.peer).collect());
    let macs: Vec<_> = cfg.ports.iter().map(|p| (p.mac, p.peer_mac)).collect();
    let mut setups = Vec::new();
    let mut wviews = Vec::new();
    let (switch_tx, switch_rx) = crossbeam_channel::bounded::<Switch>(256);
    // Handoff rings between the workers that run the gateway (NAT return
    // traffic to the core that owns the mapping).
    let l3_workers = cfg.l3fwd_workers();
    let mut meshes = if cfg.gateway.enabled && l3_workers > 1 {
        Handoff::mesh(usize::from(l3_workers), HANDOFF_RING)
    } else {
        Vec::new()
    }
    .into_iter();
    let mut all_counters = Vec::new();
    for w in &cfg.workers {
        let counters = Arc::new(WorkerCounters::new(nports));
        all_counters.push(counters.clone());
        let handoff = if w.mode == FwdMode::L3fwd {
            meshes.next().unwrap_or_default()
        } else {
            Handoff::default()
        };
        let mut rxs = Vec::new();
        for &(p, q) in &w.rx {
            let queue = rx[usize::from(p)][usize::from(q)]
                .take()
                .ok_or_else(|| anyhow!("RX queue {p}:{q} handed out twice"))?;
            rxs.push(RxSlot { port: p, q: queue });
        }
        let mut txs = Vec::new();
        for &(p, q) in &w.tx {
            let queue = tx[usize::from(p)][usize::from(q)]
                .take()
                .ok_or_else(|| anyhow!("TX queue {p}:{q} handed out twice"))?;
            let (hw, hr) = hist_pair();
            views[usize::from(p)].resid.push(hr);
            txs.push(TxSlot {
                port: p,
                q: queue,
                hist: hw,
            });
        }
        wviews.push(WorkerView {
            core: w.core,
            mode: w.mode.name(),
            policy: w.poll.name(),
            counters: counters.clone(),
        });
        setups.push(WorkerSetup {
            core: w.core,
            policy: w.poll.clone(),
            switches: Some(switch_tx.clone()),
            rx: rxs,
            tx: txs,
            counters,
            burst: cfg.run.burst,
            drain: cfg.run.drain,
            tsc,
            handoff,
        });
    }

    let router = if l3_workers > 0 {
        Some(build_router(cfg)?)
    } else {
        None
    };
    let gateway = match &router {
        Some(_) if cfg.gateway.enabled => Some(build_gateway(cfg, l3_workers)),
        _ => None,
    };
    let nrules = cfg.gateway.rules.len();
    let mut hit_sinks: Vec<RuleHits> = Vec::new();
    let mut l3_index = 0u16;
    let mut tel = Telemetry::new(views, wviews, tsc);
    let zero = Snapshot::zero(pmd::sys::rdtsc(), nports, cfg.workers.len());

    // Threads: the generator first, so that packets wait for the workers.
    let gen_handle = match gen {
        None => None,
        Some(gen) => {
            let core = cfg.generator_core;
            Some(
                gen.spawn(move || {
                    if let Some(c) = core {
                        pin(c, "the softnic generator");
                    }
                })
                .context("spawning the generator thread")?,
            )
        }
    };
    let mut handles = Vec::new();
    for (w, setup) in cfg.workers.iter().zip(setups) {
        let s = worker_stop.clone();
        let h = match w.mode {
            FwdMode::Io => spawn_worker(w.core, setup, Io(peers.clone()), s, on_start),
            FwdMode::Mac => spawn_worker(
                w.core,
                setup,
                Mac::new(peers.clone(), macs.clone()),
                s,
                on_start,
            ),
            FwdMode::MacSwap => spawn_worker(w.core, setup, MacSwap(peers.clone()), s, on_start),
            FwdMode::FiveTupleSwap => {
                spawn_worker(w.core, setup, FiveTupleSwap(peers.clone()), s, on_start)
            }
            FwdMode::L3fwd => match (&router, &gateway) {
                (Some(r), Some(g)) => {
                    let mut gw = Gateway::new(r.clone(), g, l3_index);
                    l3_index += 1;
                    let sink: RuleHits = (0..nrules).map(|_| AtomicU64::new(0)).collect();
                    gw.publish_hits(sink.clone());
                    hit_sinks.push(sink);
                    spawn_worker(w.core, setup, gw, s, on_start)
                }
                (Some(r), None) => spawn_worker(w.core, setup, r.clone(), s, on_start),
                (None, _) => Err(anyhow!("l3fwd worker without a router")),
            },
        };
        match h {
            Ok(h) => handles.push(h),
            Err(e) => {
                worker_stop.store(true, Ordering::Release);
                return Err(e);
            }
        }
    }

    // Management loop.
    let started = Instant::now();
    let mut prev = tel.snapshot();
    let mut next = started + cfg.run.stats_period;
    let start_tsc = pmd::sys::rdtsc();
    let log_switches = |rx: &crossbeam_channel::Receiver<Switch>| {
        for s in rx.try_iter() {
            eprintln!(
                "[{:7.3} s] core {}: auto switched to {} at {:.0} pps",
                tsc.ns(s.tsc.saturating_sub(start_tsc)) / 1e9,
                s.core,
                if s.to_busy { "busy" } else { "interrupt" },
                s.pps
            );
        }
    };
    loop {
        log_switches(&switch_rx);
        let now = Instant::now();
        let done = cfg.run.duration.is_some_and(|d| now >= started + d);
        if stop.load(Ordering::Acquire) || done {
            break;
        }
        if now >= next {
            let cur = tel.snapshot();
            emit(&tel.report(&prev, &cur, false));
            prev = cur;
            next += cfg.run.stats_period;
            if next < now {
                next = now + cfg.run.stats_period;
            }
        }
        let mut wake = next;
        if let Some(d) = cfg.run.duration {
            wake = wake.min(started + d);
        }
        let nap = wake.saturating_duration_since(Instant::now());
        std::thread::sleep(nap.min(Duration::from_millis(50)));
    }

    // Shutdown: stop the wire, drain the workers, drain the sink.
    if let Some(g) = &gen_handle {
        g.stop_generating();
    }
    for p in &tel.ports {
        p.control.stop_rx();
    }
    worker_stop.store(true, Ordering::Release);
    let mut panicked = 0;
    let mut leftovers = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(l) => leftovers.push((i, l)),
            Err(_) => panicked += 1,
        }
    }
    // Packets handed to a worker after it had drained: dropped, counted on
    // that worker (every worker has stopped, so nothing else writes its
    // counters now).
    for (i, rings) in leftovers {
        let c = &all_counters[i];
        for mut r in rings {
            while let Ok((_, in_port)) = r.pop() {
                c.ports[usize::from(in_port)].drops[pipeline::DropReason::HandoffFull as usize]
                    .add(1);
            }
        }
    }
    if let Some(g) = gen_handle {
        g.finish();
    }
    log_switches(&switch_rx);
    let last = tel.snapshot();
    if last.tsc() > prev.tsc() + tsc.cycles(cfg.run.stats_period / 10) {
        emit(&tel.report(&prev, &last, false));
    }
    let mut summary = tel.report(&zero, &last, true);
    if let Some(g) = &gateway {
        for (i, r) in g.rules.rules().iter().enumerate() {
            if r.counter {
                let n = hit_sinks.iter().map(|h| h[i].load(Ordering::Relaxed)).sum();
                summary.rule_hits.push((r.origin.clone(), n));
            }
        }
    }
    if panicked > 0 {
        return Err(anyhow!("{panicked} worker thread(s) panicked"));
    }
    Ok(summary)
}
