//! The engine: hands each queue of the opened ports to exactly one worker,
//! spawns the pinned workers and the softnic generator, hands over to the
//! management thread ([`crate::manage`]) until the run ends, and stops in
//! an order that leaves nothing uncounted. It runs ports of any buffer family; the
//! backends that open them ([`crate::app`] for the native drivers,
//! `crate::eal` for DPDK) call in here, never the other way round.

use crate::config::{Config, FwdMode};
use crate::counters::WorkerCounters;
use crate::manage::{Live, Management};
use crate::poll::Switch;
use crate::stages::{build_gateway, build_router};
use crate::telemetry::{PortView, Report, Snapshot, Telemetry, WorkerView};
use crate::worker::{self, Handed, Handoff, RxSlot, TxSlot, WorkerSetup};
use anyhow::{anyhow, Context, Result};
use pipeline::fwd::{FiveTupleSwap, ForwardMode, Io, Mac, MacSwap, Peers};
use pipeline::gateway::{Gateway, Profiled, RuleHits};
use pipeline::router::Router;
use pipeline::tester::{Csum, IcmpEcho, RxOnly};
use pmd::hist::hist_pair;
use pmd::softnic::Generator;
use pmd::sys::Tsc;
use pmd::{PacketBuf, RxQueue, TxQueue};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

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
            crate::privilege::shed_thread();
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
    // `[ha] state_file`: each gateway worker's flows, as it stops.
    let (saved_tx, saved_rx) = crossbeam_channel::unbounded::<worker::SavedFlows>();
    let keeps_state = cfg.state_file.is_some() && cfg.gateway.enabled;
    // `[ha]` state sync: rings between each gateway worker and the sync
    // thread.
    let syncs = cfg.sync.is_some() && cfg.gateway.enabled;
    let mut sync_threads = Vec::new();
    let mut sync_logs = Vec::new();
    let mut gateway_index = 0u16;
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
        let save =
            (keeps_state && w.mode == FwdMode::L3fwd).then(|| (gateway_index, saved_tx.clone()));
        let sync = if syncs && w.mode == FwdMode::L3fwd {
            let (thread, ends) = crate::ha::rings().context("the HA sync rings' bell")?;
            sync_threads.push(thread);
            sync_logs.push(Some(ends.log));
            Some(worker::HaSync {
                apply: ends.apply,
                bulk: ends.bulk,
                waker: ends.waker,
                cursor: None,
            })
        } else {
            None
        };
        gateway_index += u16::from(w.mode == FwdMode::L3fwd);
        setups.push(WorkerSetup {
            learned,
            save,
            sync,
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
        let kernel_flows = cfg.kernel_flows.clone();
        Some(
            std::thread::Builder::new()
                .name("sluice-mirror".into())
                .spawn(move || {
                    crate::privilege::shed_thread();
                    crate::taps::run(taps, ends, &bell, sender, counters, kernel_flows, &stop)
                })
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
    // `[ha] state_file`: the flows of the last clean stop, per worker.
    let mut restored = match (&gateway, &cfg.state_file) {
        (Some(g), Some(path)) => crate::state::restore(path, g),
        _ => None,
    };
    let mut installed = (0u64, 0u64);
    // The firewall's rules, then the NAT's entries (their hit counts).
    let nrules = cfg.gateway.rules.len() + cfg.gateway.nat.entries();
    let mut hit_sinks: Vec<RuleHits> = Vec::new();
    // The netlink route mirror: a thread follows the kernel table, this
    // (the FIB's one writer) applies what it sees.
    let netlink = match (&cfg.control_plane, fib.is_some()) {
        (Some(cp), true) => Some(crate::netlink::start(cp).context("the netlink route mirror")?),
        (Some(_), false) => {
            eprintln!("warning: [control_plane] netlink needs an l3fwd worker; not mirroring");
            None
        }
        _ => None,
    };
    let rib = crate::rib::Rib::default();
    let spreads = spreads(cfg, |p| views[p].control.flow_hash_spread());
    let mut l3_index = 0u16;
    // `[export]`: a ring between each gateway worker and the exporter,
    // and the workers' time 0 for the records' times (the TSC's and the
    // monotonic clock's, read together).
    let exports = cfg.export.as_ref().filter(|_| cfg.gateway.enabled);
    let (export_rings, mut export_logs): (Vec<_>, Vec<_>) = match exports {
        Some(e) => {
            let (c, p) = crate::export::rings(usize::from(l3_workers), e.ring);
            (c, p.into_iter().map(Some).collect())
        }
        None => (Vec::new(), Vec::new()),
    };
    let export_epoch = (std::time::Instant::now(), tsc.ns(pmd::sys::rdtsc()) as u64);
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
    let tel = Telemetry::new(views, wviews, tsc);
    let zero = Snapshot::zero(pmd::sys::rdtsc(), nports, cfg.workers.len());
    // Where `sluice ctl stats` counts from: the start, or the last `clear stats`.
    let cleared = zero.clone();

    let mut handles = Vec::new();
    let advertisers = advertisers(cfg);
    for (wi, (w, setup)) in cfg.workers.iter().zip(setups).enumerate() {
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
                    let mut r = r.clone();
                    r.advertise_on(&advertisers[wi]);
                    let mut gw = Gateway::new(r, g, l3_index);
                    gw.set_spreads(spreads.clone());
                    gw.start_ports_at(random_u32());
                    if let Some(flows) = restored
                        .as_mut()
                        .and_then(|r| r.get_mut(usize::from(l3_index)))
                    {
                        let now_ns = tsc.ns(pmd::sys::rdtsc()) as u64;
                        let (ok, refused) = gw.install_flows(&std::mem::take(flows)[..], now_ns);
                        installed = (installed.0 + ok, installed.1 + refused);
                    }
                    // After the restored flows: the peer gets those by
                    // the bulk sync it asks for, not through the ring.
                    if let Some(log) = sync_logs
                        .get_mut(usize::from(l3_index))
                        .and_then(Option::take)
                    {
                        gw.set_sync(log);
                    }
                    if let (Some(e), Some(log)) = (
                        exports,
                        export_logs
                            .get_mut(usize::from(l3_index))
                            .and_then(Option::take),
                    ) {
                        let s = pipeline::conntrack::export::Settings {
                            flows: !e.collectors.is_empty(),
                            active_ns: e.active_timeout_s * 1_000_000_000,
                            denied: e.denied,
                            nat_events: e.nat_events,
                        };
                        gw.set_export(log, export_epoch.1, &s);
                    }
                    l3_index += 1;
                    let sink: RuleHits = (0..nrules).map(|_| AtomicU64::new(0)).collect();
                    gw.publish_hits(sink.clone());
                    hit_sinks.push(sink);
                    // Its stage clock off until `sluice ctl set runtime on`.
                    let gw = Profiled::new(gw);
                    spawn_worker(w.core, setup, gw, s, on_start)
                }
                (Some(r), None) => {
                    let mut r = r.clone();
                    r.advertise_on(&advertisers[wi]);
                    spawn_worker(w.core, setup, r, s, on_start)
                }
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

    if let (Some(r), Some(path)) = (&restored, &cfg.state_file) {
        eprintln!(
            "state: {} flows restored from {} into {} worker(s){}",
            installed.0,
            path.display(),
            r.len(),
            if installed.1 > 0 {
                format!(
                    " ({} refused: a tuple tracked twice, or the table full)",
                    installed.1
                )
            } else {
                String::new()
            }
        );
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
                    crate::privilege::shed_thread();
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

    // The HA sync thread, once every gateway worker logs.
    let sync_stop = Arc::new(AtomicBool::new(false));
    let sync = match &cfg.sync {
        Some(sc) if syncs => {
            match crate::ha::start(sc, std::mem::take(&mut sync_threads), sync_stop.clone()) {
                Ok((h, stats)) => {
                    eprintln!("ha: syncing flows with {} from {}", sc.peer, sc.listen);
                    Some((h, stats))
                }
                Err(e) => {
                    worker_stop.store(true, Ordering::Release);
                    return Err(e);
                }
            }
        }
        _ => None,
    };

    // The flow exporter.
    let export_stop = Arc::new(AtomicBool::new(false));
    let export = match exports {
        Some(e) => match crate::export::start(e, export_rings, export_epoch.0, export_stop.clone())
        {
            Ok((h, stats)) => {
                let to: Vec<String> = e.collectors.iter().map(|c| c.to_string()).collect();
                if !to.is_empty() {
                    eprintln!(
                        "export: IPFIX flow records{} to {}",
                        if e.nat_events { " and NAT events" } else { "" },
                        to.join(", ")
                    );
                }
                if let Some(s) = e.syslog {
                    eprintln!("export: NAT events as syslog lines to {s}");
                }
                Some((h, stats))
            }
            Err(e) => {
                worker_stop.store(true, Ordering::Release);
                return Err(e);
            }
        },
        None => None,
    };

    // The management loop. `live` is what a reload replaces: the running
    // config (the run's duration stays the one it started with) and the
    // tables built from it.
    let live = Live {
        cfg: cfg.clone(),
        router,
        fib,
        gateway,
        hit_sinks,
        edits: crate::ctl::edit::Edits::new(cfg),
    };
    let mut m = Management {
        cfg,
        tel,
        links,
        live,
        rib,
        netlink,
        taps: mirror_thread.as_ref().map(|_| mirror_counters.clone()),
        ha: sync.as_ref().map(|(_, s)| s.clone()),
        export: export.as_ref().map(|(_, s)| s.clone()),
        notify: crate::service::Notifier::from_env(),
        metrics,
        control,
        cleared,
        learned_rx,
        switch_rx,
        start_tsc: pmd::sys::rdtsc(),
        state: crate::manage::Turns::default(),
    };
    // Every port is open and every worker polls: what the run still needs
    // of its privileges is kept, the rest dropped; then ready.
    let keep = crate::privilege::kept(m.cfg);
    // A drop that fails stops the run (cleanly) and fails it.
    let dropped = crate::privilege::drop_after_start(m.cfg.run_as.as_ref(), &keep);
    match &dropped {
        Ok(line) => eprintln!("{line}"),
        Err(_) => stop.store(true, Ordering::Release),
    }
    if m.notify.is_some() && dropped.is_ok() {
        let (status, polls) = (m.status(), m.polls());
        if let Some(n) = m.notify.as_mut() {
            n.ready(&status, polls);
        }
    }
    let prev = m.run(stop, emit);
    if let Some(n) = &m.notify {
        n.stopping();
    }

    // Shutdown: a running capture ends first (its writer closes the file,
    // unless the file hangs), then stop the wire, drain the workers, drain
    // the sink.
    if let Some(c) = m.capture().filter(|c| c.running()) {
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
    for p in &m.tel.ports {
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
    sync_stop.store(true, Ordering::Release);
    if let Some((h, _)) = sync {
        let _ = h.join();
    }
    export_stop.store(true, Ordering::Release);
    if let Some((h, _)) = export {
        let _ = h.join();
    }
    // `[ha] state_file`: the flows as the workers stopped, for the next
    // start.
    if let (true, Some(path)) = (keeps_state, &cfg.state_file) {
        drop(saved_tx);
        let mut flows: Vec<_> = saved_rx.try_iter().collect();
        flows.sort_by_key(|(w, _)| *w);
        let t = std::time::Instant::now();
        match crate::state::write(path, &flows) {
            Ok(n) => eprintln!(
                "state: {n} flows written to {} in {:.0} ms",
                path.display(),
                t.elapsed().as_secs_f64() * 1e3
            ),
            Err(e) => eprintln!("state: not written: {e:#}"),
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
    m.log_switches();
    let last = m.tel.snapshot();
    if last.tsc() > prev.tsc() + tsc.cycles(cfg.run.stats_period / 10) {
        emit(&m.tel.report(&prev, &last, false));
    }
    drop(m.metrics.take());
    drop(m.control.take());
    let mut summary = m.tel.report(&zero, &last, true);
    summary.rule_hits = m.rule_hits();
    if panicked > 0 {
        return Err(anyhow!("{panicked} worker thread(s) panicked"));
    }
    dropped.context("dropping privileges")?;
    Ok(summary)
}

/// A random number from the OS (std's hash keys are seeded from it).
fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish() as u32
}

/// By port, how it spreads flows over the gateway workers, where the port
/// says the queue a flow reaches can be computed (`flow_hash(port)`) and
/// gateway workers poll all its queues: the gateway worker (its index
/// among the l3fwd workers) of each queue.
/// The interfaces whose periodic Router Advertisements each worker sends
/// (by its index in `cfg.workers`), where they have an `ra` table now or
/// after a reload: an interface (a port, or a VLAN sub-interface by its
/// port) is the first l3fwd worker's that polls its port and has a TX
/// queue on it (or, where none polls it, the first with a TX queue on
/// it), so that its hosts see one router.
fn advertisers(cfg: &Config) -> Vec<Vec<u16>> {
    let mut by_worker = vec![Vec::new(); cfg.workers.len()];
    for (i, iface) in cfg.router.interfaces.iter().enumerate() {
        let p = iface.vlan.map_or(i as u16, |v| v.port);
        let l3 = || {
            cfg.workers
                .iter()
                .enumerate()
                .filter(|(_, w)| w.mode == FwdMode::L3fwd && w.tx.iter().any(|t| t.0 == p))
        };
        let polls = l3().find(|(_, w)| w.rx.iter().any(|q| q.0 == p));
        if let Some((w, _)) = polls.or_else(|| l3().next()) {
            by_worker[w].push(i as u16);
        }
    }
    by_worker
}

fn spreads(
    cfg: &Config,
    flow_hash: impl Fn(usize) -> bool,
) -> Arc<[Option<pipeline::steer::Spread>]> {
    let mut by_queue: Vec<Vec<Option<u16>>> = cfg
        .ports
        .iter()
        .map(|p| vec![None; usize::from(p.rxq)])
        .collect();
    let l3 = cfg.workers.iter().filter(|w| w.mode == FwdMode::L3fwd);
    for (i, w) in l3.enumerate() {
        for &(p, q) in &w.rx {
            if let Some(slot) = by_queue
                .get_mut(usize::from(p))
                .and_then(|v| v.get_mut(usize::from(q)))
            {
                *slot = Some(i as u16);
            }
        }
    }
    by_queue
        .into_iter()
        .enumerate()
        .map(|(p, qs)| {
            let workers: Option<Vec<u16>> = qs.into_iter().collect();
            workers
                .filter(|w| w.len() > 1 && flow_hash(p))
                .map(|w| pipeline::steer::Spread { workers: w.into() })
        })
        .collect()
}
