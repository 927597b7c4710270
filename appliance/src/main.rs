//! `sluice`: run the appliance, or check a configuration.

/// Tables of tens of MiB (routes, rules, conntrack) get huge pages.
#[global_allocator]
static ALLOC: pmd::alloc::HugeAlloc = pmd::alloc::HugeAlloc;

use anyhow::{Context, Result};
use appliance::config::{self, Config, PortKind};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Sluice, a poll-mode packet forwarding appliance.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the appliance (with no FILE: the embedded quickstart config).
    Run {
        /// Configuration file.
        file: Option<PathBuf>,
        /// Run for this many seconds (0: until Ctrl-C); overrides run.duration.
        #[arg(long)]
        duration: Option<f64>,
        /// Seconds between stats reports; overrides run.stats_period.
        #[arg(long)]
        stats_period: Option<f64>,
        /// Packets per burst (1..=512); overrides run.burst.
        #[arg(long)]
        burst: Option<usize>,
        /// Print reports as JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Validate a configuration file without running it.
    Check {
        /// Configuration file.
        file: PathBuf,
    },
}

fn load(file: Option<&PathBuf>) -> Result<Config, config::ConfigErrors> {
    match file {
        Some(f) => config::load_file(f),
        None => config::parse(config::QUICKSTART, config::QUICKSTART_NAME, None),
    }
}

fn describe(c: &Config) -> String {
    let mut s = format!("{}: ok\n", c.source);
    for p in &c.ports {
        let kind = match &p.kind {
            PortKind::Softnic { gen, .. } => format!(
                "softnic rate {} size {} flows {}",
                match gen.rate {
                    pmd::softnic::Rate::Pps(p) => format!("{p} pps"),
                    pmd::softnic::Rate::Max => "max".into(),
                },
                gen.size,
                gen.flows
            ),
            PortKind::Null { size } => format!("null size {size}"),
            PortKind::Dpdk { device } => format!("dpdk {device}"),
            PortKind::AfPacket { iface, .. } => format!("afpacket {iface}"),
            PortKind::AfXdp { iface, .. } => format!("afxdp {iface}"),
            PortKind::Pcap {
                rx_file, tx_file, ..
            } => {
                let f = |p: &Option<PathBuf>| {
                    p.as_ref().map_or("-".into(), |p| p.display().to_string())
                };
                format!("pcap rx {} tx {}", f(rx_file), f(tx_file))
            }
        };
        s += &format!(
            "  port {:<6} {kind}; rxq {} txq {} rxd {} txd {}; peer {}\n",
            p.name,
            p.rxq,
            p.txq,
            p.rxd,
            p.txd,
            c.ports[usize::from(p.peer)].name
        );
    }
    for w in &c.workers {
        let q = |v: &[(u16, u16)]| {
            v.iter()
                .map(|&(p, q)| format!("{}:{q}", c.ports[usize::from(p)].name))
                .collect::<Vec<_>>()
                .join(" ")
        };
        s += &format!(
            "  worker core {} mode {}: rx [{}] tx [{}]\n",
            w.core,
            w.mode.name(),
            q(&w.rx),
            q(&w.tx)
        );
    }
    let g = &c.gateway;
    if g.enabled {
        let set =
            pipeline::firewall::RuleSet::build(g.rules.clone(), g.default, &g.nat.original_dsts());
        s += &format!(
            "  firewall: {} rules ({} after port/state expansion, {} distinct bit vectors), default {}; classifier built in {:.2} ms, {:.1} KiB\n",
            set.rules().len(),
            set.expanded(),
            set.vectors(),
            match g.default {
                pipeline::firewall::Action::Accept => "accept",
                pipeline::firewall::Action::Drop => "drop",
                pipeline::firewall::Action::Reject(_) => "reject",
            },
            set.build_ns() as f64 / 1e6,
            set.memory() as f64 / 1024.0
        );
        let workers = c.l3fwd_workers().max(1);
        let per = g.nat.ports.slice(0, workers).map_or(0, |r| r.len());
        s += &format!(
            "  conntrack: {} flows per worker; nat: {} snat, {} dnat, {} static; ports {}-{} ({} per worker)\n",
            g.ct_capacity,
            g.nat.snat.len(),
            g.nat.dnat.len(),
            g.nat.statics.len(),
            g.nat.ports.lo,
            g.nat.ports.hi,
            per
        );
    }
    s
}

/// Writes to stdout; false when it is closed (a reader that went away).
fn out(s: &str) -> bool {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    o.write_all(s.as_bytes()).and_then(|()| o.flush()).is_ok()
}

/// Prints the config's warnings (legal but odd settings) to stderr.
fn warn(c: &Config) {
    for w in &c.warnings {
        eprintln!("warning: {w}");
    }
}

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluice: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<ExitCode> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Check { file } => match config::load_file(&file) {
            Ok(c) => {
                warn(&c);
                // Build the tables as `run` will (route file included).
                let t0 = std::time::Instant::now();
                let router = appliance::stages::build_router(&c)?;
                let (n4, n6) = (router.routes4(), router.routes6());
                // A closed stdout (`sluice check f | head`) is no error.
                let _ = out(&format!(
                    "{}  routes: {n4} IPv4, {n6} IPv6 ({} from the route file); tables built in {:.1} ms\n",
                    describe(&c),
                    c.router.file_routes.len(),
                    t0.elapsed().as_secs_f64() * 1e3
                ));
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("{e}");
                Ok(ExitCode::from(1))
            }
        },
        Cmd::Run {
            file,
            duration,
            stats_period,
            burst,
            json,
        } => {
            let mut cfg = match load(file.as_ref()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return Ok(ExitCode::from(1));
                }
            };
            // The options override the config, checked by the same rules.
            let overrides = (|| -> Result<(), String> {
                if let Some(d) = duration {
                    cfg.run.duration =
                        config::duration(d).map_err(|e| format!("--duration {e}"))?;
                }
                if let Some(p) = stats_period {
                    cfg.run.stats_period =
                        config::stats_period(p).map_err(|e| format!("--stats-period {e}"))?;
                }
                if let Some(b) = burst {
                    cfg.run.burst = config::burst(b).map_err(|e| format!("--burst {e}"))?;
                }
                Ok(())
            })();
            if let Err(e) = overrides {
                eprintln!("sluice: {e}");
                return Ok(ExitCode::from(1));
            }
            // One instance per device: refused before anything is opened.
            let _locks = appliance::lock::acquire(&cfg, &appliance::lock::lock_dir())?;
            let stop = Arc::new(AtomicBool::new(false));
            let s = stop.clone();
            ctrlc::set_handler(move || s.store(true, Ordering::Release))
                .context("installing the Ctrl-C handler")?;
            warn(&cfg);
            if !json && !out(&describe(&cfg)) {
                stop.store(true, Ordering::Release);
            }
            // Reports go to stdout; when it is closed (`sluice run | head`),
            // the run stops cleanly as on SIGTERM.
            let stop_on_epipe = stop.clone();
            let mut emit = |r: &appliance::telemetry::Report| {
                let text = if json { r.json() + "\n" } else { r.text() };
                if !out(&text) {
                    stop_on_epipe.store(true, Ordering::Release);
                }
            };
            // The management thread stays off the workers' cores.
            if let Some(core) = appliance::engine::management_core(&cfg) {
                core_affinity::set_for_current(core_affinity::CoreId { id: core });
            }
            let summary = appliance::app::run(&cfg, &stop, &mut emit)?;
            emit(&summary);
            let balanced = summary.balance.as_ref().is_some_and(|b| b.balanced);
            Ok(if balanced {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            })
        }
    }
}
