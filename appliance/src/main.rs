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
use std::time::Duration;

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
                "softnic rate {:?} size {} flows {}",
                gen.rate, gen.size, gen.flows
            ),
            PortKind::Null { size } => format!("null size {size}"),
            PortKind::Dpdk { device } => format!("dpdk {device}"),
            PortKind::AfPacket { iface, .. } => format!("afpacket {iface}"),
            PortKind::AfXdp { iface, .. } => format!("afxdp {iface}"),
            PortKind::Pcap {
                rx_file, tx_file, ..
            } => format!("pcap rx {rx_file:?} tx {tx_file:?}"),
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
            "  firewall: {} rules ({} after port/state expansion, {} distinct bit vectors), default {:?}; classifier built in {:.2} ms, {:.1} KiB\n",
            set.rules().len(),
            set.expanded(),
            set.vectors(),
            g.default,
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
                print!("{}", describe(&c));
                // Build the tables as `run` will (route file included).
                let t0 = std::time::Instant::now();
                let router = appliance::app::build_router(&c)?;
                let (n4, n6) = (router.routes4(), router.routes6());
                println!(
                    "  routes: {n4} IPv4, {n6} IPv6 ({} from the route file); tables built in {:.1} ms",
                    c.router.file_routes.len(),
                    t0.elapsed().as_secs_f64() * 1e3
                );
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
            if let Some(d) = duration {
                match config::duration(d) {
                    Ok(d) => cfg.run.duration = d,
                    Err(e) => {
                        eprintln!("sluice: --duration {e}");
                        return Ok(ExitCode::from(1));
                    }
                }
            }
            if let Some(p) = stats_period {
                anyhow::ensure!(
                    (0.01..=3600.0).contains(&p),
                    "--stats-period must be 0.01..=3600"
                );
                cfg.run.stats_period = Duration::from_secs_f64(p);
            }
            if let Some(b) = burst {
                anyhow::ensure!((1..=pmd::MAX_BURST).contains(&b), "--burst must be 1..=512");
                cfg.run.burst = b;
            }
            // One instance per device: refused before anything is opened.
            let _locks = appliance::lock::acquire(&cfg, &appliance::lock::lock_dir())?;
            let stop = Arc::new(AtomicBool::new(false));
            let s = stop.clone();
            ctrlc::set_handler(move || s.store(true, Ordering::Release))
                .context("installing the Ctrl-C handler")?;
            warn(&cfg);
            if !json {
                print!("{}", describe(&cfg));
            }
            let mut emit = |r: &appliance::telemetry::Report| {
                if json {
                    println!("{}", r.json());
                } else {
                    print!("{}", r.text());
                }
            };
            // The management thread stays off the workers' cores.
            if let Some(core) = appliance::app::management_core(&cfg) {
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
