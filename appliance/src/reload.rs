//! Hot reload (`sluice ctl reload`, SIGHUP): the config file is read and
//! validated in full first (a bad one is refused with the same file, line
//! and key errors as `sluice check`, and the running config stays); what
//! can change while running (firewall rules, NAT, routes, the route file,
//! neighbours, router settings, poll policies) is built here ([`prepare`],
//! on a thread of its own, so that the management thread keeps reporting
//! and answering meanwhile), off the fast path, and handed ([`commit`]) to
//! each worker, which takes it between two bursts at
//! its next 10 ms tick. Tracked flows and their NAT translations survive
//! (see `pipeline::gateway::GatewayUpdate`). What cannot change without
//! reopening devices or respawning threads (ports, workers and their
//! queues, burst, drain timer, conntrack size and timeouts, the generator,
//! the endpoints) is refused, naming each difference: restart for those.
//! The tables a reload replaced are freed on the management thread once
//! every worker has let go of them ([`Retired`]), never by a worker.

use crate::config::{self, Config};
use crate::stages::{build_gateway, build_router};
use pipeline::fib::FibWriter;
use pipeline::gateway::{GatewayConfig, GatewayUpdate, RuleHits};
use pipeline::router::{Router, RouterUpdate};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

pub use crate::worker::Update;

/// Set by SIGHUP: the management thread reloads at its next turn.
pub fn requested() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
        .clone()
}

/// Takes a pending SIGHUP request.
pub fn take_request() -> bool {
    requested().swap(false, Ordering::AcqRel)
}

/// What a reload installed: the engine keeps these as its current state.
pub struct Reloaded {
    /// The new config.
    pub cfg: Config,
    /// The new routing tables (for `show routes`).
    pub router: Option<Router>,
    /// Their writer.
    pub fib: Option<FibWriter>,
    /// The new gateway settings (for rule counters).
    pub gateway: Option<GatewayConfig>,
    /// The new rules' hit counters, one per gateway worker.
    pub hit_sinks: Vec<RuleHits>,
    /// What changed, for the operator.
    pub summary: String,
}

/// Something a worker may share with the management thread.
trait Shared: Send {
    /// Whether anyone but the holder has it.
    fn shared(&self) -> bool;
}

impl<T: Send + Sync> Shared for Arc<T> {
    fn shared(&self) -> bool {
        Arc::strong_count(self) > 1
    }
}

/// The tables a reload replaced, kept on the management thread until no
/// worker holds them, then dropped there: a worker taking an update only
/// lets go of its references and never frees a table itself (freeing a
/// full table's 64 MiB first level took a worker 7–12 ms here, longer
/// than its RX ring lasts at 1 Mpps).
#[derive(Default)]
pub struct Retired {
    held: Vec<Box<dyn Shared>>,
}

impl Retired {
    /// Keeps what `router` and `gateway` (about to be replaced) share with
    /// the workers.
    pub fn keep(&mut self, router: Option<&Router>, gateway: Option<&GatewayConfig>) {
        if let Some(r) = router {
            self.keep_arc(r.config().clone());
        }
        if let Some(g) = gateway {
            self.keep_arc(g.rules.clone());
            self.keep_arc(g.nat.clone());
        }
    }

    /// Keeps `a` until no one else holds it.
    fn keep_arc<T: Send + Sync + 'static>(&mut self, a: Arc<T>) {
        self.held.push(Box::new(a));
    }

    /// Drops what no worker holds any more; returns how many remain.
    pub fn collect(&mut self) -> usize {
        self.held.retain(|h| h.shared());
        self.held.len()
    }
}

/// How the reloads (SIGHUP, `sluice ctl reload`) went, for the metrics
/// (`sluice_config_*`, as Prometheus reports its own): an operator who
/// reloads with SIGHUP sees a refusal there, not only in the log.
#[derive(Debug, Clone)]
pub struct Outcomes {
    /// Whether the last reload was installed (true before any).
    pub last_ok: bool,
    /// When the running config was last loaded: the start, or the last
    /// reload installed (Unix time, seconds).
    pub last_success: f64,
    /// Reloads installed.
    pub succeeded: u64,
    /// Reloads refused (a bad file, a change needing a restart, another
    /// build running).
    pub failed: u64,
}

impl Outcomes {
    /// At start: the config just loaded.
    pub fn new() -> Outcomes {
        Outcomes {
            last_ok: true,
            last_success: unix_now(),
            succeeded: 0,
            failed: 0,
        }
    }

    /// A reload's outcome.
    pub fn record(&mut self, ok: bool) {
        self.last_ok = ok;
        if ok {
            self.succeeded += 1;
            self.last_success = unix_now();
        } else {
            self.failed += 1;
        }
    }
}

impl Default for Outcomes {
    fn default() -> Self {
        Outcomes::new()
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What differs between `old` and `new` that only a restart can change.
pub fn restart_needed(old: &Config, new: &Config) -> Vec<String> {
    let mut d = Vec::new();
    let dbg = |x: &dyn std::fmt::Debug| format!("{x:?}");
    if old.ports.len() != new.ports.len() {
        d.push(format!(
            "ports: {} now, {} in the file",
            old.ports.len(),
            new.ports.len()
        ));
    } else {
        for (a, b) in old.ports.iter().zip(&new.ports) {
            let (mut a, mut b) = (a.clone(), b.clone());
            // Where a key was written is not a setting.
            a.origin.clear();
            b.origin.clear();
            if dbg(&a) != dbg(&b) {
                d.push(format!("port {}", b.name));
            }
        }
    }
    if old.workers.len() != new.workers.len() {
        d.push(format!(
            "workers: {} now, {} in the file",
            old.workers.len(),
            new.workers.len()
        ));
    } else {
        for (a, b) in old.workers.iter().zip(&new.workers) {
            if (a.core, a.mode, &a.rx, &a.tx) != (b.core, b.mode, &b.rx, &b.tx) {
                d.push(format!("worker on core {} (core, mode or queues)", a.core));
            }
        }
    }
    let run = |c: &Config| (c.run.burst, c.run.drain);
    if run(old) != run(new) {
        d.push("run.burst or run.drain_us".into());
    }
    if old.generator_core != new.generator_core {
        d.push("generator.core".into());
    }
    if old.eal_args != new.eal_args {
        d.push("dpdk.eal_args".into());
    }
    if old.metrics != new.metrics || old.control_socket != new.control_socket {
        d.push("[management]".into());
    }
    if old.control_plane != new.control_plane {
        d.push("[control_plane]".into());
    }
    // The state file is written at the stop the start's config names, and
    // the sync thread runs with the start's addresses and key.
    if old.state_file != new.state_file || old.sync != new.sync {
        d.push("[ha]".into());
    }
    let (a, b) = (&old.gateway, &new.gateway);
    if a.enabled != b.enabled {
        d.push("firewall/NAT on or off".into());
    } else if a.ct_capacity != b.ct_capacity
        || dbg(&a.timeouts) != dbg(&b.timeouts)
        || a.ct_tcp_window != b.ct_tcp_window
    {
        d.push("conntrack size, timeouts or window tracking".into());
    }
    if a.mss_limits != b.mss_limits || a.mss_rules != b.mss_rules {
        d.push("clamp_mss".into());
    }
    d
}

/// A reload read, checked and built, not yet in the workers: what
/// [`prepare`] makes off the management thread and [`commit`] installs.
pub struct Prepared {
    cfg: Config,
    router: Option<Router>,
    fib: Option<FibWriter>,
    gateway: Option<GatewayConfig>,
    /// Prefixed to the summary.
    label: String,
}

/// The part of a reload that takes time and touches no worker: reads
/// `path`, checks it against the running config `old`, builds the tables.
pub fn prepare(path: &Path, old: &Config) -> Result<Prepared, String> {
    if !path.is_file() {
        return Err(format!(
            "nothing to reload: this run's config ({}) is not a file",
            old.source
        ));
    }
    let new =
        config::load_file(path).map_err(|e| format!("{e}\nthe running config is unchanged"))?;
    let mut p = build(new, old)?;
    p.label = format!("reloaded {}", path.display());
    Ok(p)
}

/// The part of a `sluice ctl` edit that cannot go into the FIB in place
/// (`new` is the running config `old` with the edit, named by `what`):
/// checked and built as [`prepare`] builds a reload, off the management
/// thread; refused when only a restart can make the change.
pub fn prepare_edit(new: Config, old: &Config, what: &str) -> Result<Prepared, String> {
    let mut p = build(new, old)?;
    p.label = format!("{what}: installed");
    Ok(p)
}

/// Checks `new` against `old` and builds its tables.
fn build(mut new: Config, old: &Config) -> Result<Prepared, String> {
    // The mirror thread writes the kernel's flows into the table it
    // started with.
    new.kernel_flows = old.kernel_flows.clone();
    let diffs = restart_needed(old, &new);
    if !diffs.is_empty() {
        return Err(format!(
            "a restart is needed to change: {}; nothing was changed",
            diffs.join(", ")
        ));
    }
    let l3 = new.l3fwd_workers();
    let (router, fib) = if l3 > 0 {
        let (r, w) = build_router(&new).map_err(|e| format!("{e:#}"))?;
        (Some(r), Some(w))
    } else {
        (None, None)
    };
    let gateway = match &router {
        Some(_) if new.gateway.enabled => Some(build_gateway(&new, l3)),
        _ => None,
    };
    Ok(Prepared {
        cfg: new,
        router,
        fib,
        gateway,
        label: String::new(),
    })
}

/// Changes the running routers' settings in place, without building
/// anything: `change` is made to `router`'s (the management thread's, for
/// `show`) and the result handed to every worker through `updates` (the
/// routing workers take it between two bursts; others ignore it). The
/// FIB is shared, so routes are untouched; each router keeps the
/// neighbours it learned and those the kernel's table gave it.
pub fn reconfigure_routers(
    router: &mut Router,
    workers: &[crate::worker::Link],
    change: impl FnOnce(&mut pipeline::router::RouterConfig),
) {
    let mut rc = (**router.config()).clone();
    change(&mut rc);
    let u = RouterUpdate(std::sync::Arc::new(rc));
    router.reconfigure(u.0.clone());
    for w in workers {
        let _ = w.update.send(Box::new(u.clone()));
    }
}

/// Hands what [`prepare`] (or [`prepare_edit`]) built to the workers; `old` is the
/// config running now (its poll policies are compared).
pub fn commit(p: Prepared, old: &Config, workers: &[crate::worker::Link]) -> Reloaded {
    let Prepared {
        cfg: new,
        router,
        fib,
        gateway,
        label,
    } = p;
    let mut hit_sinks = Vec::new();
    let mut policies = 0;
    for (i, w) in new.workers.iter().enumerate() {
        if w.mode == config::FwdMode::L3fwd {
            let update: Option<Update> = match (&router, &gateway) {
                (Some(r), Some(g)) => {
                    let sink: RuleHits = (0..g.rules.rules().len() + g.nat.entries())
                        .map(|_| AtomicU64::new(0))
                        .collect();
                    hit_sinks.push(sink.clone());
                    Some(Box::new(GatewayUpdate {
                        router: RouterUpdate(r.config().clone()),
                        rules: g.rules.clone(),
                        nat: g.nat.clone(),
                        hits: Some(sink),
                    }))
                }
                (Some(r), None) => Some(Box::new(RouterUpdate(r.config().clone()))),
                (None, _) => None,
            };
            if let (Some(u), Some(tx)) = (update, workers.get(i).map(|w| &w.update)) {
                // A worker that has stopped takes nothing; the run is
                // ending anyway.
                let _ = tx.try_send(u);
            }
        }
        if old.workers[i].poll != w.poll {
            if let Some(tx) = workers.get(i).map(|w| &w.policy) {
                if tx.try_send(w.poll.clone()).is_ok() {
                    policies += 1;
                }
            }
        }
    }
    let mut summary = String::new();
    if let Some(r) = &router {
        summary += &format!(": {} IPv4 and {} IPv6 routes", r.routes4(), r.routes6());
    }
    if let Some(g) = &gateway {
        summary += &format!(", {} firewall rules", g.rules.rules().len());
    }
    if policies > 0 {
        summary += &format!(", {policies} poll policies switched");
    }
    summary += "; tracked flows kept\n";
    Reloaded {
        cfg: new,
        router,
        fib,
        gateway,
        hit_sinks,
        summary: label + &summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::thread::{self, ThreadId};

    /// A table that records which thread freed it.
    struct Table(Arc<Mutex<Option<ThreadId>>>);

    impl Drop for Table {
        fn drop(&mut self) {
            *self.0.lock().unwrap() = Some(thread::current().id());
        }
    }

    #[test]
    fn a_replaced_table_is_freed_by_the_management_thread_not_the_worker() {
        let freed_by = Arc::new(Mutex::new(None));
        let table = Arc::new(Table(freed_by.clone()));
        let mut retired = Retired::default();
        // A worker holds the table; the management thread replaces its
        // own handle and keeps the old one.
        let (give, take) = crossbeam_channel::bounded::<()>(0);
        let workers = table.clone();
        let worker = thread::spawn(move || {
            take.recv().unwrap();
            // The update: the worker lets go of the old table.
            drop(workers);
        });
        retired.keep_arc(table);
        assert_eq!(retired.collect(), 1, "the worker still holds it");
        assert_eq!(*freed_by.lock().unwrap(), None);
        give.send(()).unwrap();
        worker.join().unwrap();
        assert_eq!(*freed_by.lock().unwrap(), None, "the worker freed it");
        assert_eq!(retired.collect(), 0);
        assert_eq!(*freed_by.lock().unwrap(), Some(thread::current().id()));
    }
}
