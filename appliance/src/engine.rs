//! The engine: hands each queue of the opened ports to exactly one worker,
//! spawns the pinned workers and the softnic generator, runs the
//! management loop (a report every stats period), and stops in an order
//! that leaves nothing uncounted. It runs ports of any buffer family; the
//! backends that open them ([`crate::app`] for the native drivers,
//! `crate::eal` for DPDK) call in here, never the other way round.

use crate::config::{Config, FwdMode};
use crate::counters::WorkerCounters;
use crate::poll::Switch;
use crate::stages::{build_gateway, build_router};
use crate::telemetry::{PortView, Report, Snapshot, Telemetry, WorkerView};
use crate::worker::{self, Handed, Handoff, RxSlot, TxSlot, WorkerSetup};
use anyhow::{anyhow, Context, Result};
use pipeline::fib::FibWriter;
use pipeline::fwd::{FiveTupleSwap, ForwardMode, Io, Mac, MacSwap, Peers};
use pipeline::gateway::{Gateway, GatewayConfig, Profiled, RuleHits};
use pipeline::router::Router;
use pipeline::tester::{Csum, IcmpEcho, RxOnly};
use pmd::hist::hist_pair;
use pmd::softnic::Generator;
use pmd::sys::Tsc;
use pmd::{PacketBuf, RxQueue, TxQueue};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Packets each handoff ring holds.
const HANDOFF_RING: usize = 4096;

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

/// What a buffer family brings besides its ports.
pub(crate) struct Family<B: PacketBuf> {
    /// The softnic generator, if a port has one.
    pub gen: Option<Generator>,
    /// Fresh buffers for the packets workers send of their own.
    pub inject: Option<pmd::Injector<B>>,
    /// The same in bulk, for the tester's generators.
    pub bulk: Option<pmd::BulkAlloc<B>>,
    /// Called by each worker thread first, after pinning.
    pub on_start: fn(),
}

/// Runs the appliance on opened ports of one buffer family: hands each
/// queue to its worker, spawns the workers (each calls `on_start` first,
/// after pinning) and the generator, runs the management loop, and stops.
pub(crate) fn run_ports<B, R, T>(
    cfg: &Config,
    tsc: Tsc,
    opened: Vec<(pmd::OpenPort<B, R, T>, Option<pmd::hist::HistReader>)>,
    family: Family<B>,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&Report),
) -> Result<Report>
where
    B: PacketBuf,
    R: RxQueue<Buf = B> + 'static,
    T: TxQueue<Buf = B> + 'static,
{
    let Family {
        gen,
        inject,
        bulk,
        on_start,
    } = family;
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
        Handoff::mesh(usize::from(l3_workers), HANDOFF_RING).context("the handoff rings' bells")?
    } else {
        Vec::new()
    }
    .into_iter();
    let mut all_counters = Vec::new();
    // Per worker: the management side's ways to it.
    let mut links: Vec<worker::Link> = Vec::new();
    // The next generator's first flow number (unique in the process).
    let mut flow_base = 0u32;
    // Neighbours a routing worker learned, for the others (kept open here:
    // the management loop waits on it).
    let (learned_tx, learned_rx) =
        crossbeam_channel::unbounded::<(usize, pipeline::router::LearnedNeighbors)>();
    for w in &cfg.workers {
        let (ptx, prx) = crossbeam_channel::bounded::<crate::poll::Policy>(1);
        let (utx, urx) = crossbeam_channel::unbounded::<crate::reload::Update>();
        let (ttx, trx) = crossbeam_channel::unbounded::<Option<crate::capture::Tap>>();
        let (dtx, drx) = crossbeam_channel::bounded::<crate::worker::DumpRequest>(1);
        let (events, gauges, stages) = match w.mode {
            FwdMode::L3fwd if cfg.gateway.enabled => {
                (Profiled::EVENTS, Profiled::GAUGES, Profiled::STAGES)
            }
            FwdMode::L3fwd => (Router::EVENTS, Router::GAUGES, Router::STAGES),
            FwdMode::Csum => (Csum::EVENTS, &[][..], &[][..]),
            _ => (&[][..], &[][..], &[][..]),
        };
        let counters = Arc::new(WorkerCounters::new(
            nports,
            w.rx.len(),
            events,
            gauges,
            stages,
        ));
        // Published by the worker from its start on; set here for the
        // reports taken before it starts.
        counters.core.policy.set(w.poll.index() as u64);
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
            rxs.push(RxSlot {
                port: p,
                queue: q,
                q: queue,
            });
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
        // A tester: a generator per TX port (the port's MAC as source, its
        // peer's as destination), and a probe on what it receives.
        let (probe, probe_hist) = if w.measure {
            let (hw, hr) = hist_pair();
            (
                Some(pmd::probe::Probe::new(counters.probe.clone(), hw)),
                Some(hr),
            )
        } else {
            (None, None)
        };
        let now = pmd::sys::rdtsc();
        let mut gens: Vec<crate::txgen::TxGen> = Vec::new();
        if let Some(g) = &w.gen {
            for &(p, _) in &w.tx {
                let port = &cfg.ports[usize::from(p)];
                let mut g = g.clone();
                g.src_mac = port.mac;
                g.dst_mac = port.peer_mac;
                let n = g.flows;
                gens.push(crate::txgen::TxGen::new(
                    p,
                    g,
                    tsc.hz,
                    now,
                    flow_base as u16,
                ));
                flow_base += n;
            }
        }
        let (gen, gen_ctl) = if gens.is_empty() {
            (None, None)
        } else {
            let (gtx, grx) = crossbeam_channel::bounded::<crate::txgen::GenCommand>(16);
            (Some(gtx), Some(grx))
        };
        links.push(worker::Link {
            policy: ptx,
            update: utx,
            tap: ttx,
            dump: dtx,
            gen,
            routes: w.mode == FwdMode::L3fwd,
        });
        wviews.push(WorkerView {
            core: w.core,
            rx: w.rx.clone(),
            mode: w.mode.name(),
            policy: w.poll.name(),
            counters: counters.clone(),
            probe_hist,
        });
        // Every routing worker reports what it learns: to the other
        // workers, and to `show neighbors`.
        let learned = (w.mode == FwdMode::L3fwd).then(|| (setups.len(), learned_tx.clone()));
        setups.push(WorkerSetup {
            learned,
            core: w.core,
            policy: w.poll.clone(),
            switches: Some(switch_tx.clone()),
            policy_changes: Some(prx),
            updates: Some(urx),
            taps: Some(trx),
            dumps: Some(drx),
            rx: rxs,
            tx: txs,
            counters,
            burst: cfg.run.burst,
            drain: cfg.run.drain,
            tsc,
            handoff,
            inject: inject.clone(),
            bulk: if gens.is_empty() { None } else { bulk.clone() },
            mirror: None,
            gens,
            gen_ctl,
            probe,
        });
    }

    // The control-plane mirror (`[control_plane] tap`): TAPs made now (a
    // name in use fails the start), rings to each routing worker, one
    // thread between them.
    let mirror_stop = Arc::new(AtomicBool::new(false));
    let mirror_counters = Arc::new(crate::taps::MirrorCounters::default());
    let mirror_thread = if cfg.taps.is_empty() || l3_workers == 0 {
        None
    } else {
        let mut taps = Vec::new();
        for (i, name) in &cfg.taps {
            let Some(iface) = cfg.router.interfaces.get(usize::from(*i)) else {
                continue;
            };
            let port = iface.vlan.map_or(*i, |v| v.port);
            let what = &cfg.router.names[usize::from(*i)];
            let tap = pmd::tap::Tap::create(name, iface.mac.0, iface.mtu)
                .with_context(|| format!("the TAP mirror {name} of {what}"))?;
            eprintln!("control plane: {what} mirrored by TAP {name}");
            taps.push(crate::taps::Mirror {
                iface: *i,
                port,
                vlan: iface.vlan,
                tap,
                control: views[usize::from(port)].control.clone(),
            });
        }
        let mut ends = Vec::new();
        let bell = Arc::new(pmd::sys::EventFd::new().context("the TAP mirror's doorbell")?);
        let mut sender: Vec<Option<usize>> = vec![None; nports];
        for (w, s) in cfg.workers.iter().zip(setups.iter_mut()) {
            if w.mode != FwdMode::L3fwd {
                continue;
            }
            let rings = crate::taps::WorkerRings::new(&bell).context("a worker's doorbell")?;
            for &(p, _) in &w.tx {
                sender[usize::from(p)].get_or_insert(ends.len());
            }
            s.mirror = Some((rings.punt, rings.from_kernel));
            ends.push(rings.mirror);
        }
        let counters = mirror_counters.clone();
        let stop = mirror_stop.clone();
        Some(
            std::thread::Builder::new()
                .name("sluice-mirror".into())
                .spawn(move || crate::taps::run(taps, ends, &bell, sender, counters, &stop))
                .context("spawning the TAP mirror thread")?,
        )
    };

    // The management thread keeps the FIB's writer: routes change in
    // place through it (`sluice ctl route`).
    let (router, fib) = if l3_workers > 0 {
        let (r, w) = build_router(cfg)?;
        (Some(r), Some(w))
    } else {
        (None, None)
    };
    let gateway = match &router {
        Some(_) if cfg.gateway.enabled => Some(build_gateway(cfg, l3_workers)),
        _ => None,
    };
    let nrules = cfg.gateway.rules.len();
    let mut hit_sinks: Vec<RuleHits> = Vec::new();
    // The netlink route mirror: a thread follows the kernel table, this
    // (the FIB's one writer) applies what it sees.
    let mirror = match (&cfg.control_plane, fib.is_some()) {
        (Some(cp), true) => Some(crate::netlink::start(cp).context("the netlink route mirror")?),
        (Some(_), false) => {
            eprintln!("warning: [control_plane] netlink needs an l3fwd worker; not mirroring");
            None
        }
        _ => None,
    };
    let mut mirrored = crate::rib::Rib::default();
    let mut l3_index = 0u16;
    // The Prometheus endpoint, before any thread starts: a port in use
    // fails the start, not the run.
    let metrics = match cfg.metrics {
        Some(addr) => {
            let (server, scrapes) = crate::metrics::Server::start(addr)?;
            eprintln!("metrics: http://{}/metrics", server.addr());
            Some((server, scrapes))
        }
        None => None,
    };
    let control = match &cfg.control_socket {
        Some(path) => {
            let (server, commands) = crate::ctl::Server::start(path)?;
            eprintln!(
                "control socket: {} (sluice ctl -s {})",
                server.path().display(),
                server.path().display()
            );
            Some((server, commands))
        }
        None => None,
    };
    let mut tel = Telemetry::new(views, wviews, tsc);
    let zero = Snapshot::zero(pmd::sys::rdtsc(), nports, cfg.workers.len());
    // Where `sluice ctl stats` counts from: the start, or the last `clear stats`.
    let mut cleared = zero.clone();

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
            FwdMode::RxOnly | FwdMode::TxOnly | FwdMode::FlowGen => {
                spawn_worker(w.core, setup, RxOnly, s, on_start)
            }
            FwdMode::Csum => spawn_worker(
                w.core,
                setup,
                Csum::new(peers.clone(), macs.clone()),
                s,
                on_start,
            ),
            FwdMode::IcmpEcho => spawn_worker(
                w.core,
                setup,
                IcmpEcho::new(cfg.ports.iter().map(|p| p.mac).collect()),
                s,
                on_start,
            ),
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
                    // Its stage clock off until `sluice ctl set runtime on`.
                    let gw = Profiled::new(gw);
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

    // The generator last, once every worker polls: packets offered to a
    // worker still starting would wait in its ring, and on a busy host a
    // start can outlast a ring (4,096 descriptors last 82 ms at 50 kpps),
    // counting misses that are no fault of the forwarding.
    while !all_counters
        .iter()
        .zip(&handles)
        .all(|(c, h)| c.core.running.get() == 1 || h.is_finished())
    {
        std::thread::sleep(Duration::from_micros(200));
    }
    let gen_handle = match gen {
        None => None,
        Some(gen) => {
            let core = cfg.generator_core;
            let spawned = gen
                .spawn(move || {
                    if let Some(c) = core {
                        pin(c, "the softnic generator");
                    }
                })
                .context("spawning the generator thread");
            match spawned {
                Ok(g) => Some(g),
                Err(e) => {
                    worker_stop.store(true, Ordering::Release);
                    return Err(e);
                }
            }
        }
    };

    // Management loop. `live` is what a reload replaces: the running
    // config (the run's duration stays the one it started with) and the
    // tables built from it.
    let mut live = Live {
        cfg: cfg.clone(),
        router,
        fib,
        gateway,
        hit_sinks,
        edits: crate::ctl::edit::Edits::new(cfg),
    };
    let mut capture: Option<crate::capture::Capture> = None;
    let mut retired = crate::reload::Retired::default();
    let mut reloads = crate::reload::Outcomes::new();
    // Neighbours the workers learned from ARP/ND, as they reported them
    // (for `show neighbors`).
    let mut learned = crate::ctl::commands::Learned::default();
    // A reload or an edit being built on a thread of its own (reports,
    // scrapes and other commands go on meanwhile).
    let mut building: Option<Building> = None;
    // A SIGHUP to take: now, or once the running build is done.
    let mut hup_waiting = false;
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
            next += live.cfg.run.stats_period;
            if next < now {
                next = now + live.cfg.run.stats_period;
            }
        }
        let mut wake = next;
        if let Some(d) = cfg.run.duration {
            wake = wake.min(started + d);
        }
        let most = Duration::from_millis(50);
        // Tables a reload replaced, dropped once the workers have let go.
        retired.collect();
        let nap = wake.saturating_duration_since(Instant::now()).min(most);
        // SIGHUP: the outcome goes to the log. One that comes while a
        // build runs is taken when the build is done: a signal gets no
        // answer, so a refusal would go unnoticed (the file it was sent
        // for may well be newer than the build's).
        if crate::reload::take_request() {
            if building.is_some() && !hup_waiting {
                eprintln!("SIGHUP: a build is running; reloading when it is done");
            }
            hup_waiting = true;
        }
        if hup_waiting && building.is_none() {
            hup_waiting = false;
            building = Some(start_reload(&live.cfg, None));
        }
        // Scrapes and control requests, answered here, where the
        // telemetry lives (a fresh snapshot of the counters each time; the
        // workers do not notice); otherwise a nap until the next report.
        let never_s = crossbeam_channel::never();
        let never_c = crossbeam_channel::never();
        let never_n = crossbeam_channel::never();
        let scrapes = metrics.as_ref().map_or(&never_s, |(_, r)| r);
        let commands = control.as_ref().map_or(&never_c, |(_, r)| r);
        let kernel = mirror.as_ref().map_or(&never_n, |m| &m.changes);
        let never_b = crossbeam_channel::never();
        let built = building.as_ref().map_or(&never_b, |b| &b.done);
        crossbeam_channel::select! {
            recv(learned_rx) -> l => {
                // A neighbour one routing worker learned: to the others.
                if let Ok((from, l)) = l {
                    learned.note(&l.0, live.cfg.router.neighbor_timeout);
                    for (i, link) in links.iter().enumerate() {
                        if i != from && link.routes {
                            let _ = link.update.send(Box::new(l.clone()));
                        }
                    }
                }
            }
            recv(kernel) -> change => {
                // Everything pending, then the other duties.
                if let (Ok(c), Some(w)) = (change, live.fib.as_mut()) {
                    mirrored.apply(c, w, &live.cfg.router);
                    for c in kernel.try_iter().take(1 << 16) {
                        mirrored.apply(c, w, &live.cfg.router);
                    }
                }
            }
            recv(built) -> done => {
                // A reload built off this thread: installed here.
                let b = building.take().expect("a build was running");
                let outcome = match done {
                    Ok(r) => r.map(|p| crate::reload::commit(p, &live.cfg, &links)),
                    Err(_) => Err("the build failed; the running config is unchanged".into()),
                };
                let reload = b.edits.is_none();
                let key = if reload { "reloaded" } else { "installed" };
                if reload {
                    reloads.record(outcome.is_ok());
                }
                let outcome = outcome.map(|r| {
                    let edits = b.edits.unwrap_or_else(|| crate::ctl::edit::Edits::new(&r.cfg));
                    live.replace(r, edits, &mut retired, &mut mirrored)
                });
                match (b.reply, outcome) {
                    (Some(a), outcome) => {
                        let resp = match outcome {
                            Ok(s) => crate::ctl::Response::ok(s.clone(), serde_json::json!({ key: s.trim_end() })),
                            Err(e) => crate::ctl::Response::error(e),
                        };
                        eprintln!("{}", crate::ctl::log_line(&a.who, &a.args, &resp));
                        let _ = a.reply.send(resp);
                    }
                    (None, Ok(s)) => eprint!("SIGHUP: {s}"),
                    (None, Err(e)) => eprintln!("SIGHUP: reload refused: {e}"),
                }
            }
            recv(scrapes) -> reply => {
                if let Ok(reply) = reply {
                    let cur = tel.snapshot();
                    let hits = rule_hits(&live.gateway, &live.hit_sinks);
                    let _ = reply.send(crate::metrics::render(&tel, &cur, &hits, &crate::metrics::ControlPlane {
                        netlink: mirror.as_ref().map(|m| (&*m.stats, &mirrored)),
                        taps: mirror_thread.as_ref().map(|_| &*mirror_counters),
                        reloads: &reloads,
                    }));
                }
            }
            recv(commands) -> cmd => {
                if let Ok(cmd) = cmd {
                    let resp = if cmd.args.first().is_some_and(|a| a == "capture") {
                        capture_command(&cmd, &mut capture, cfg, &links, tel.tsc_hz())
                    } else if cmd.args == ["reload"] {
                        if building.is_some() {
                            reloads.record(false);
                            Some(crate::ctl::Response::error(BUILDING))
                        } else {
                            // Answered when the build is installed.
                            building = Some(start_reload(&live.cfg, Some(Asker::of(&cmd))));
                            None
                        }
                    } else if crate::ctl::edit::is_edit(&cmd.args) {
                        if building.is_some() {
                            // Made on the running config, which the build
                            // replaces.
                            Some(crate::ctl::Response::error(BUILDING))
                        } else {
                            match crate::ctl::edit::apply(&cmd.args, &live.cfg, &live.edits) {
                                // A route change goes into the running FIB
                                // in place, a neighbour change into the
                                // routers' neighbour tables; the rest is
                                // built as a reload is.
                                Ok((change, e)) => {
                                    let done = match &change {
                                        crate::ctl::edit::Change::Route(p, add) => crate::ctl::edit::route_in_place(&cmd.args, *p, add, &mut live.cfg, live.fib.as_mut(), &mut mirrored),
                                        crate::ctl::edit::Change::Neighbor(a, add) => crate::ctl::edit::neighbors_in_place(&cmd.args, (*a, *add), &mut live.cfg, live.router.as_mut(), &links).map(Ok),
                                        crate::ctl::edit::Change::Build(_) => None,
                                    };
                                    match done {
                                        Some(Ok(s)) => {
                                            live.edits = e;
                                            Some(crate::ctl::Response::ok(s.clone(), serde_json::json!({ "installed": s.trim_end() })))
                                        }
                                        Some(Err(err)) => Some(crate::ctl::Response::error(err)),
                                        None => {
                                            // Answered when the build is installed.
                                            let (old, what) = (live.cfg.clone(), cmd.args.join(" "));
                                            let new = change.applied_to(&live.cfg);
                                            building = Some(start_build(
                                                move || crate::reload::prepare_edit(new, &old, &what),
                                                Some(Asker::of(&cmd)),
                                                Some(e),
                                            ));
                                            None
                                        }
                                    }
                                }
                                Err(e) => Some(crate::ctl::Response::error(e)),
                            }
                        }
                    } else {
                        let mut cx = crate::ctl::commands::Context {
                            cfg: &live.cfg,
                            tel: &mut tel,
                            cleared: &mut cleared,
                            router: live.router.as_ref(),
                            netlink: mirror.as_ref().map(|m| (&*m.stats, &mirrored)),
                            rule_hits: rule_hits(&live.gateway, &live.hit_sinks),
                            workers: &links,
                            switched: None,
                            learned: &learned,
                        };
                        let resp = crate::ctl::commands::run(&cmd.args, &mut cx);
                        // The running config keeps a switched policy: a
                        // reload puts the file's back.
                        if let Some((i, p)) = cx.switched.take() {
                            live.cfg.workers[i].poll = p;
                        }
                        Some(resp)
                    };
                    if let Some(resp) = resp {
                        if crate::ctl::changes(&cmd.args) {
                            eprintln!("{}", crate::ctl::log_line(&cmd.who, &cmd.args, &resp));
                        }
                        let _ = cmd.reply.send(resp);
                    }
                }
            }
            default(nap) => {}
        }
        // Neighbours and addresses from the kernel (the netlink mirror):
        // to the workers, and to this thread's router (`show`).
        if let Some(u) = mirrored.take_neighbors() {
            for link in &links {
                let _ = link.update.send(Box::new(u.clone()));
            }
            if let Some(r) = live.router.as_mut() {
                r.mirror_neighbors(&u.0);
            }
        }
        if mirrored.take_readdress() {
            if let Some(r) = live.router.as_mut() {
                crate::reload::reconfigure_routers(r, &links, |rc| {
                    rc.interfaces = mirrored.interfaces(&live.cfg.router.interfaces);
                });
            }
        }
    }

    // Shutdown: a running capture ends first (its writer closes the file,
    // unless the file hangs), then stop the wire, drain the workers, drain
    // the sink.
    if let Some(c) = capture.as_ref().filter(|c| c.running()) {
        if !c.finish_within(Duration::from_secs(2)) {
            eprintln!(
                "capture: {} was not closed within 2 s (a slow file system?)",
                c.spec.file.display()
            );
        }
    }
    if let Some(g) = &gen_handle {
        g.stop_generating();
    }
    for p in &tel.ports {
        p.control.stop_rx();
    }
    worker_stop.store(true, Ordering::Release);
    mirror_stop.store(true, Ordering::Release);
    if let Some(t) = mirror_thread {
        let _ = t.join();
    }
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
    drop(metrics);
    drop(control);
    let mut summary = tel.report(&zero, &last, true);
    summary.rule_hits = rule_hits(&live.gateway, &live.hit_sinks);
    if panicked > 0 {
        return Err(anyhow!("{panicked} worker thread(s) panicked"));
    }
    Ok(summary)
}

/// What the management thread holds of the running config: everything a
/// reload or a `sluice ctl` edit replaces.
struct Live {
    /// The running config.
    cfg: Config,
    /// Its routing tables (for `show routes`).
    router: Option<Router>,
    /// The FIB's writer: routes change in place through it.
    fib: Option<FibWriter>,
    /// Its gateway settings (for rule counters).
    gateway: Option<GatewayConfig>,
    /// The rules' hit counters, one per gateway worker.
    hit_sinks: Vec<RuleHits>,
    /// Route and neighbour changes made with `sluice ctl` since the file
    /// was loaded.
    edits: crate::ctl::edit::Edits,
}

impl Live {
    /// Takes what a reload or an install built (already handed to the
    /// workers) in place of the running state; the replaced tables wait in
    /// `retired` until no worker holds them, and the routes the netlink
    /// mirror learned go into the new FIB. Returns what changed.
    fn replace(
        &mut self,
        r: crate::reload::Reloaded,
        edits: crate::ctl::edit::Edits,
        retired: &mut crate::reload::Retired,
        mirrored: &mut crate::rib::Rib,
    ) -> String {
        retired.keep(self.router.as_ref(), self.gateway.as_ref());
        self.cfg = r.cfg;
        self.router = r.router;
        self.fib = r.fib;
        self.gateway = r.gateway;
        self.hit_sinks = r.hit_sinks;
        self.edits = edits;
        if let Some(w) = self.fib.as_mut() {
            mirrored.reinstall(w, &self.cfg.router);
        }
        r.summary
    }
}

/// Tables being built off the management thread: a reload, or a `sluice
/// ctl` edit that cannot go into the FIB in place.
struct Building {
    /// The build's outcome.
    done: crossbeam_channel::Receiver<Result<crate::reload::Prepared, String>>,
    /// Who asked (`sluice ctl`); `None` for SIGHUP, whose outcome goes to
    /// the log.
    reply: Option<Asker>,
    /// For an edit, the edits made since the file was loaded, this one
    /// included; `None` for a reload, which starts them afresh.
    edits: Option<crate::ctl::edit::Edits>,
}

/// A `sluice ctl` command answered when its build is done: where the
/// answer goes, the command and who asked (for the log).
struct Asker {
    reply: crate::serve::Reply<crate::ctl::Response>,
    args: Vec<String>,
    who: String,
}

impl Asker {
    fn of(cmd: &crate::ctl::Command) -> Asker {
        Asker {
            reply: cmd.reply.clone(),
            args: cmd.args.clone(),
            who: cmd.who.clone(),
        }
    }
}

/// Why a command that would change the tables is refused while others
/// build.
const BUILDING: &str =
    "a reload or a route/neighbor change is being built; try again when it is done";

/// Runs `build` on a thread of its own (a full table takes seconds, during
/// which the management thread keeps answering); its outcome arrives on
/// the returned `Building`.
fn start_build(
    build: impl FnOnce() -> Result<crate::reload::Prepared, String> + Send + 'static,
    reply: Option<Asker>,
    edits: Option<crate::ctl::edit::Edits>,
) -> Building {
    let (tx, done) = crossbeam_channel::bounded(1);
    let spawned = std::thread::Builder::new()
        .name("reload".into())
        .spawn(move || {
            let _ = tx.send(build());
        });
    if let Err(e) = spawned {
        // `done`'s sender is gone with the closure: the outcome is an
        // error, reported where the answer goes.
        eprintln!("spawning the reload thread: {e}");
    }
    Building { done, reply, edits }
}

/// Reads and builds the config file `current` came from again (see
/// [`start_build`]).
fn start_reload(current: &Config, reply: Option<Asker>) -> Building {
    let old = current.clone();
    start_build(
        move || crate::reload::prepare(std::path::Path::new(&old.source), &old),
        reply,
        None,
    )
}

/// Packets each firewall rule with `counter = true` matched so far, all
/// workers together, by where the rule is written.
fn rule_hits(gateway: &Option<GatewayConfig>, sinks: &[RuleHits]) -> Vec<(String, u64)> {
    let Some(g) = gateway else {
        return Vec::new();
    };
    g.rules
        .rules()
        .iter()
        .enumerate()
        .filter(|(_, r)| r.counter)
        .map(|(i, r)| {
            let n = sinks.iter().map(|h| h[i].load(Ordering::Relaxed)).sum();
            (r.origin.clone(), n)
        })
        .collect()
}

/// `capture start ...`, `capture status`, `capture stop`: `start` and
/// `stop` are answered by the capture's writer thread once it has started
/// (the filter compiled, the file created) or stopped (`None` here).
fn capture_command(
    cmd: &crate::ctl::Command,
    capture: &mut Option<crate::capture::Capture>,
    cfg: &Config,
    workers: &[worker::Link],
    tsc_hz: f64,
) -> Option<crate::ctl::Response> {
    use crate::ctl::Response;
    let args = &cmd.args[1..];
    let ports: Vec<String> = cfg.ports.iter().map(|p| p.name.clone()).collect();
    let status = |s: crate::capture::Status| {
        let text = match &s.error {
            Some(e) => format!(
                "failed: {} packets to {} ({} lost to full rings): {e}\n",
                s.written, s.file, s.dropped
            ),
            None => format!(
                "{} {} packets to {} ({} lost to full rings)\n",
                if s.running { "capturing:" } else { "done:" },
                s.written,
                s.file,
                s.dropped
            ),
        };
        Response::ok(text, serde_json::to_value(&s).unwrap_or_default())
    };
    // The answer, from the writer thread: logged, then sent.
    let answer = |cmd: &crate::ctl::Command| {
        let (reply, args, who) = (cmd.reply.clone(), cmd.args.clone(), cmd.who.clone());
        move |r: Response| {
            eprintln!("{}", crate::ctl::log_line(&who, &args, &r));
            reply.send(r)
        }
    };
    Some(match args.first().map(String::as_str) {
        Some("start") => {
            if capture.as_ref().is_some_and(|c| c.running()) {
                return Some(Response::error(
                    "a capture is running (or starting); `capture stop` it first",
                ));
            }
            let spec = match crate::capture::parse_spec(&args[1..], &ports) {
                Ok(s) => s,
                Err(e) => return Some(Response::error(e)),
            };
            let port = &cfg.ports[usize::from(spec.port)];
            if let Some(q) = spec.queue.filter(|&q| q >= port.rxq.max(port.txq)) {
                return Some(Response::error(format!(
                    "port `{}` has {} RX and {} TX queue(s); queue {q} does not exist",
                    port.name, port.rxq, port.txq
                )));
            }
            // The TX queue each worker sends on through the port.
            let tx_queues: Vec<Option<u16>> = cfg
                .workers
                .iter()
                .map(|w| w.tx.iter().find(|(p, _)| *p == spec.port).map(|&(_, q)| q))
                .collect();
            let send = answer(cmd);
            *capture = Some(crate::capture::Capture::start(
                spec,
                ports,
                tx_queues,
                workers.iter().map(|w| w.tap.clone()).collect(),
                tsc_hz,
                Box::new(move |r| {
                    send(match r {
                        Ok(s) => status(s),
                        Err(e) => Response::error(e),
                    })
                }),
            ));
            return None;
        }
        Some("status") => match capture {
            Some(c) => status(c.status()),
            None => Response::error("no capture has run"),
        },
        Some("stop") => match capture {
            Some(c) if c.running() => {
                let send = answer(cmd);
                c.stop(Box::new(move |s| {
                    let _ = send(status(s));
                }));
                return None;
            }
            _ => Response::error("no capture is running"),
        },
        _ => Response::error(
            "capture start --port P [--queue N] [--direction rx|tx|drop|all] [--count N] [--duration S] [--filter EXPR] -w FILE | capture status | capture stop",
        ),
    })
}
