//! The management thread: a report every stats period, and everything
//! that reaches the running appliance from outside the workers, answered
//! here where the telemetry and the tables' one writer live. Each turn
//! waits (at most until the next report) for one of: a neighbour a routing
//! worker learned (to the others), the kernel's changes (into the RIB and
//! the FIB), a reload or an edit built off this thread (installed), a
//! scrape, a `sluice ctl` command (the dispatcher: captures, reloads,
//! route and neighbour edits, then everything else in
//! [`crate::ctl::commands`]); then it hands the kernel's neighbours and
//! addresses to the workers. The engine ([`crate::engine`]) starts the
//! workers before and stops them after.

use crate::config::Config;
use crate::poll::Switch;
use crate::telemetry::{Report, Snapshot, Telemetry};
use crate::worker;
use crossbeam_channel::Receiver;
use pipeline::fib::FibWriter;
use pipeline::gateway::{GatewayConfig, RuleHits};
use pipeline::router::Router;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What changes from turn to turn and starts empty.
#[derive(Default)]
pub(crate) struct Turns {
    /// The capture running or last run.
    capture: Option<crate::capture::Capture>,
    /// Tables a reload replaced, until no worker holds them.
    retired: crate::reload::Retired,
    /// Reloads done and refused.
    reloads: crate::reload::Outcomes,
    /// Neighbours the workers learned from ARP/ND, as they reported them
    /// (for `show neighbors`).
    learned: crate::ctl::commands::Learned,
    /// A reload or an edit being built on a thread of its own (reports,
    /// scrapes and other commands go on meanwhile).
    building: Option<Building>,
    /// A SIGHUP to take: now, or once the running build is done.
    hup_waiting: bool,
}

/// The management thread's state: the workers' links, the running config
/// and tables, the servers and the RIB.
pub(crate) struct Management<'a> {
    /// The config the run started with (its duration).
    pub cfg: &'a Config,
    /// The counters' reader.
    pub tel: Telemetry,
    /// Per worker: the ways to it.
    pub links: Vec<worker::Link>,
    /// What a reload or an edit replaces.
    pub live: Live,
    /// The routes and where each came from.
    pub rib: crate::rib::Rib,
    /// The netlink listener, when `[control_plane] netlink` is on.
    pub netlink: Option<crate::netlink::Mirror>,
    /// The TAP mirrors' counters, when they run.
    pub taps: Option<Arc<crate::taps::MirrorCounters>>,
    /// The HA sync thread's counters, when it runs (its settings are the
    /// start's, `cfg.sync`: a reload does not restart it).
    pub ha: Option<Arc<crate::ha::Stats>>,
    /// The flow exporter's counters, when it runs (its settings are the
    /// start's, `cfg.export`).
    pub export: Option<Arc<crate::export::Stats>>,
    /// The service manager, when one listens (`NOTIFY_SOCKET`).
    pub notify: Option<crate::service::Notifier>,
    /// The Prometheus endpoint and its scrapes.
    pub metrics: Option<(crate::metrics::Server, crate::metrics::Scrapes)>,
    /// The control socket and its commands.
    pub control: Option<(crate::ctl::Server, Receiver<crate::ctl::Command>)>,
    /// Where `sluice ctl stats` counts from.
    pub cleared: Snapshot,
    /// Neighbours the routing workers learned.
    pub learned_rx: Receiver<(usize, pipeline::router::LearnedNeighbors)>,
    /// The `auto` policies' switches.
    pub switch_rx: Receiver<Switch>,
    /// The TSC at the start (the switches' log times from it).
    pub start_tsc: u64,
    /// What changes from turn to turn.
    pub state: Turns,
}

impl Management<'_> {
    /// Turns until `stop` is set or the run's duration is over, a report
    /// to `emit` every stats period; returns the snapshot of the last one.
    pub fn run(&mut self, stop: &AtomicBool, emit: &mut dyn FnMut(&Report)) -> Snapshot {
        let started = Instant::now();
        let mut prev = self.tel.snapshot();
        let mut next = started + self.cfg.run.stats_period;
        loop {
            self.log_switches();
            let now = Instant::now();
            let done = self.cfg.run.duration.is_some_and(|d| now >= started + d);
            if stop.load(Ordering::Acquire) || done {
                return prev;
            }
            if now >= next {
                let cur = self.tel.snapshot();
                emit(&self.tel.report(&prev, &cur, false));
                prev = cur;
                next += self.live.cfg.run.stats_period;
                if next < now {
                    next = now + self.live.cfg.run.stats_period;
                }
            }
            let mut wake = next;
            if let Some(d) = self.cfg.run.duration {
                wake = wake.min(started + d);
            }
            // Tables a reload replaced, dropped once the workers have let go.
            self.state.retired.collect();
            self.tel.collect();
            self.watchdog();
            let nap = wake
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50));
            self.sighup();
            self.turn(nap);
            self.after_turn();
        }
    }

    /// Each worker's poll count (its progress, for the watchdog).
    pub fn polls(&self) -> Vec<u64> {
        self.tel
            .workers
            .iter()
            .map(|w| w.counters.core.polls.get())
            .collect()
    }

    /// A one-line summary for the service manager's `STATUS=`.
    pub fn status(&self) -> String {
        format!(
            "forwarding: {} ports, {} workers",
            self.cfg.ports.len(),
            self.cfg.workers.len()
        )
    }

    /// The watchdog's ping, while every worker makes progress.
    fn watchdog(&mut self) {
        if self.notify.is_none() {
            return;
        }
        let polls = self.polls();
        let cores: Vec<usize> = self.tel.workers.iter().map(|w| w.core).collect();
        let status = self.status();
        if let Some(n) = self.notify.as_mut() {
            n.turn(&polls, &cores, || status);
        }
    }

    /// Logs what the `auto` policies switched.
    pub fn log_switches(&self) {
        for s in self.switch_rx.try_iter() {
            eprintln!(
                "[{:7.3} s] core {}: auto switched to {} at {:.0} pps",
                s.tsc.saturating_sub(self.start_tsc) as f64 / self.tel.tsc_hz(),
                s.core,
                if s.to_busy { "busy" } else { "interrupt" },
                s.pps
            );
        }
    }

    /// SIGHUP: the outcome goes to the log. One that comes while a build
    /// runs is taken when the build is done: a signal gets no answer, so a
    /// refusal would go unnoticed (the file it was sent for may well be
    /// newer than the build's).
    fn sighup(&mut self) {
        let st = &mut self.state;
        if crate::reload::take_request() {
            if st.building.is_some() && !st.hup_waiting {
                eprintln!("SIGHUP: a build is running; reloading when it is done");
            }
            st.hup_waiting = true;
        }
        if st.hup_waiting && st.building.is_none() {
            st.hup_waiting = false;
            st.building = Some(start_reload(&self.live.cfg, None));
        }
    }

    /// Waits up to `nap` for one thing to do, and does it. Scrapes and
    /// control requests are answered here, where the telemetry lives (a
    /// fresh snapshot of the counters each time; the workers do not
    /// notice).
    fn turn(&mut self, nap: Duration) {
        let scrapes = self
            .metrics
            .as_ref()
            .map_or_else(crossbeam_channel::never, |(_, r)| r.clone());
        let commands = self
            .control
            .as_ref()
            .map_or_else(crossbeam_channel::never, |(_, r)| r.clone());
        let kernel = self
            .netlink
            .as_ref()
            .map_or_else(crossbeam_channel::never, |m| m.changes.clone());
        let built = self
            .state
            .building
            .as_ref()
            .map_or_else(crossbeam_channel::never, |b| b.done.clone());
        let learned = self.learned_rx.clone();
        crossbeam_channel::select! {
            recv(learned) -> l => {
                if let Ok((from, l)) = l {
                    self.learned_neighbors(from, &l);
                }
            }
            recv(kernel) -> change => {
                // Everything pending, then the other duties.
                if let Ok(c) = change {
                    self.kernel(c, &kernel);
                }
            }
            recv(built) -> done => self.built(done),
            recv(scrapes) -> reply => {
                if let Ok(reply) = reply {
                    self.scrape(&reply);
                }
            }
            recv(commands) -> cmd => {
                if let Ok(cmd) = cmd {
                    self.command(&cmd);
                }
            }
            default(nap) => {}
        }
    }

    /// A neighbour one routing worker learned: to the others.
    fn learned_neighbors(&mut self, from: usize, l: &pipeline::router::LearnedNeighbors) {
        self.state
            .learned
            .note(&l.0, self.live.cfg.router.neighbor_timeout);
        for (i, link) in self.links.iter().enumerate() {
            if i != from && link.routes {
                let _ = link.update.send(Box::new(l.clone()));
            }
        }
    }

    /// The kernel's changes, into the RIB and the FIB.
    fn kernel(&mut self, c: crate::rib::Change, more: &Receiver<crate::rib::Change>) {
        if let Some(w) = self.live.fib.as_mut() {
            self.rib.apply(c, w, &self.live.cfg.router);
            for c in more.try_iter().take(1 << 16) {
                self.rib.apply(c, w, &self.live.cfg.router);
            }
        }
    }

    /// A reload or an edit built off this thread: installed here.
    fn built(
        &mut self,
        done: Result<Result<crate::reload::Prepared, String>, crossbeam_channel::RecvError>,
    ) {
        let b = self.state.building.take().expect("a build was running");
        let outcome = match done {
            Ok(r) => r.map(|p| crate::reload::commit(p, &self.live.cfg, &self.links)),
            Err(_) => Err("the build failed; the running config is unchanged".into()),
        };
        let reload = b.edits.is_none();
        let key = if reload { "reloaded" } else { "installed" };
        if reload {
            self.state.reloads.record(outcome.is_ok());
        }
        let outcome = outcome.map(|r| {
            let edits = b
                .edits
                .unwrap_or_else(|| crate::ctl::edit::Edits::new(&r.cfg));
            self.live
                .replace(r, edits, &mut self.state.retired, &mut self.rib)
        });
        match (b.reply, outcome) {
            (Some(a), outcome) => {
                let resp = match outcome {
                    Ok(s) => crate::ctl::Response::ok(
                        s.clone(),
                        serde_json::json!({ key: s.trim_end() }),
                    ),
                    Err(e) => crate::ctl::Response::error(e),
                };
                eprintln!("{}", crate::ctl::log_line(&a.who, &a.args, &resp));
                let _ = a.reply.send(resp);
            }
            (None, Ok(s)) => eprint!("SIGHUP: {s}"),
            (None, Err(e)) => eprintln!("SIGHUP: reload refused: {e}"),
        }
    }

    /// A scrape: the exposition text of a fresh snapshot.
    fn scrape(&mut self, reply: &crate::metrics::Scrape) {
        let cur = self.tel.snapshot();
        let hits = self.rule_hits();
        let _ = reply.send(crate::metrics::render(
            &self.tel,
            &cur,
            &hits,
            &crate::metrics::ControlPlane {
                netlink: self.netlink.as_ref().map(|m| (&*m.stats, &self.rib)),
                taps: self.taps.as_deref(),
                reloads: &self.state.reloads,
                ha: self.ha.as_deref(),
                export: self.export.as_deref(),
            },
        ));
    }

    /// A `sluice ctl` command: dispatched (captures, reloads, route and
    /// neighbour edits here; the rest in [`crate::ctl::commands`]),
    /// answered now or, for what is built off this thread, when it is
    /// installed; changes logged with who asked.
    fn command(&mut self, cmd: &crate::ctl::Command) {
        let resp = if cmd.args.first().is_some_and(|a| a == "capture") {
            let tsc_hz = self.tel.tsc_hz();
            capture_command(cmd, &mut self.state.capture, self.cfg, &self.links, tsc_hz)
        } else if cmd.args == ["reload"] {
            if self.state.building.is_some() {
                self.state.reloads.record(false);
                Some(crate::ctl::Response::error(BUILDING))
            } else {
                // Answered when the build is installed.
                self.state.building = Some(start_reload(&self.live.cfg, Some(Asker::of(cmd))));
                None
            }
        } else if crate::ctl::edit::is_edit(&cmd.args) {
            self.edit(cmd)
        } else {
            let rule_hits = self.rule_hits();
            let nat_hits = self.nat_hits();
            let mut cx = crate::ctl::commands::Context {
                cfg: &self.live.cfg,
                tel: &mut self.tel,
                cleared: &mut self.cleared,
                router: self.live.router.as_ref(),
                ha: self.ha.as_deref().zip(self.cfg.sync.as_ref()),
                export: self.export.as_deref().zip(self.cfg.export.as_ref()),
                netlink: self.netlink.as_ref().map(|m| (&*m.stats, &self.rib)),
                rule_hits,
                nat_hits,
                workers: &self.links,
                switched: None,
                learned: &self.state.learned,
            };
            let resp = crate::ctl::commands::run(&cmd.args, &mut cx);
            // The running config keeps a switched policy: a reload puts
            // the file's back.
            if let Some((i, p)) = cx.switched.take() {
                self.live.cfg.workers[i].poll = p;
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

    /// A route or neighbour edit: into the running FIB or the routers'
    /// neighbour tables in place, or built as a reload is (answered when
    /// installed: `None`).
    fn edit(&mut self, cmd: &crate::ctl::Command) -> Option<crate::ctl::Response> {
        use crate::ctl::edit::{self as edit, Change};
        use crate::ctl::Response;
        if self.state.building.is_some() {
            // Made on the running config, which the build replaces.
            return Some(Response::error(BUILDING));
        }
        let (change, e) = match edit::apply(&cmd.args, &self.live.cfg, &self.live.edits) {
            Ok(c) => c,
            Err(e) => return Some(Response::error(e)),
        };
        let live = &mut self.live;
        let done = match &change {
            Change::Route(p, add) => edit::route_in_place(
                &cmd.args,
                *p,
                add,
                &mut live.cfg,
                live.fib.as_mut(),
                &mut self.rib,
            ),
            Change::Neighbor(a, add) => edit::neighbors_in_place(
                &cmd.args,
                (*a, *add),
                &mut live.cfg,
                live.router.as_mut(),
                &self.links,
            )
            .map(Ok),
            Change::Build(_) => None,
        };
        match done {
            Some(Ok(s)) => {
                live.edits = e;
                Some(Response::ok(
                    s.clone(),
                    serde_json::json!({ "installed": s.trim_end() }),
                ))
            }
            Some(Err(err)) => Some(Response::error(err)),
            None => {
                // Answered when the build is installed.
                let (old, what) = (live.cfg.clone(), cmd.args.join(" "));
                let new = change.applied_to(&live.cfg);
                self.state.building = Some(start_build(
                    move || crate::reload::prepare_edit(new, &old, &what),
                    Some(Asker::of(cmd)),
                    Some(e),
                ));
                None
            }
        }
    }

    /// Neighbours and addresses from the kernel (the netlink mirror): to
    /// the workers, and to this thread's router (`show`).
    fn after_turn(&mut self) {
        if let Some(u) = self.rib.take_neighbors() {
            for link in &self.links {
                let _ = link.update.send(Box::new(u.clone()));
            }
            if let Some(r) = self.live.router.as_mut() {
                r.mirror_neighbors(&u.0);
            }
        }
        if self.rib.take_readdress() {
            if let Some(r) = self.live.router.as_mut() {
                let rib = &self.rib;
                let base = &self.live.cfg.router.interfaces;
                crate::reload::reconfigure_routers(r, &self.links, |rc| {
                    rc.interfaces = rib.interfaces(base);
                });
            }
        }
    }

    /// Packets each firewall rule with `counter = true` matched so far.
    pub fn rule_hits(&self) -> Vec<(String, u64)> {
        rule_hits(&self.live.gateway, &self.live.hit_sinks)
    }

    /// New flows each NAT entry translated so far, all workers together
    /// (`NatConfig::entries`' order: port forwards, 1:1 mappings, source
    /// NAT rules).
    pub fn nat_hits(&self) -> Vec<u64> {
        let Some(g) = &self.live.gateway else {
            return Vec::new();
        };
        let first = g.rules.rules().len();
        (first..first + g.nat.entries())
            .map(|i| {
                self.live
                    .hit_sinks
                    .iter()
                    .map(|h| h.get(i).map_or(0, |n| n.load(Ordering::Relaxed)))
                    .sum()
            })
            .collect()
    }

    /// The running capture, if any (the engine ends it first at shutdown).
    pub fn capture(&self) -> Option<&crate::capture::Capture> {
        self.state.capture.as_ref()
    }
}

/// What the management thread holds of the running config: everything a
/// reload or a `sluice ctl` edit replaces.
pub(crate) struct Live {
    /// The running config.
    pub cfg: Config,
    /// Its routing tables (for `show routes`).
    pub router: Option<Router>,
    /// The FIB's writer: routes change in place through it.
    pub fib: Option<FibWriter>,
    /// Its gateway settings (for rule counters).
    pub gateway: Option<GatewayConfig>,
    /// The rules' hit counters, one per gateway worker.
    pub hit_sinks: Vec<RuleHits>,
    /// Route and neighbour changes made with `sluice ctl` since the file
    /// was loaded.
    pub edits: crate::ctl::edit::Edits,
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
            Some(c) if c.running() => status(c.status()),
            // Not running: said so first, then how the last one ended.
            Some(c) => {
                let mut r = status(c.status());
                r.text = format!("no capture running; the last one: {}", r.text);
                r
            }
            None => Response::ok(
                "no capture running (none has run)\n".into(),
                serde_json::json!({ "running": false }),
            ),
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
