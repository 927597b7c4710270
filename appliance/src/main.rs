//! `sluice`: run the appliance, or check a configuration.

/// Tables of tens of MiB (routes, rules, conntrack) get huge pages.
#[global_allocator]
static ALLOC: pmd::alloc::HugeAlloc = pmd::alloc::HugeAlloc;

use anyhow::{Context, Result};
use appliance::config::{self, Config};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Sluice, a poll-mode packet forwarding appliance.
#[derive(Parser)]
#[command(name = "sluice", version, about)]
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
    /// Ask a running sluice what it is doing, or change it, through its
    /// control socket (`[management] socket`). `sluice ctl help` lists the
    /// commands; `sluice ctl top` refreshes `show cores` and `show ports`.
    #[command(after_long_help = appliance::ctl::commands::HELP)]
    Ctl {
        /// The instance's control socket.
        #[arg(short, long, default_value = appliance::ctl::DEFAULT_SOCKET)]
        socket: PathBuf,
        /// Print the answer's data as JSON (for scripts).
        #[arg(long)]
        json: bool,
        /// `top`: seconds between refreshes.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// `top`: refreshes before it exits (0: until interrupted).
        #[arg(long, default_value_t = 0)]
        count: u64,
        /// Commands from FILE (`-`: standard input), one a line (`#`
        /// comments and blank lines skipped), as `ip -batch` reads them:
        /// each answer printed; the first refused command stops the batch
        /// (exit 1), naming its line.
        #[arg(short = 'b', long, value_name = "FILE", conflicts_with = "args")]
        batch: Option<PathBuf>,
        /// With --batch: go on past refused commands (exit 1 if any was).
        #[arg(long, requires = "batch")]
        force: bool,
        /// The command and its arguments.
        #[arg(
            required_unless_present = "batch",
            trailing_var_arg = true,
            allow_hyphen_values = true
        )]
        args: Vec<String>,
    },
    /// Benchmarks a device with a running Sluice tester.
    Bench {
        #[command(subcommand)]
        what: Bench,
    },
    /// Prints a shell's completion script for sluice (as the package
    /// installs them: bash, zsh, fish).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Writes the manual pages (sluice(1), sluice-run(1), …) into DIR,
    /// generated from this command line's definition.
    #[command(hide = true)]
    Man {
        /// Where the pages go (created if missing).
        dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum Bench {
    /// RFC 2544 throughput (no-drop rate) and latency for each frame size,
    /// with a running tester instance (a `txonly` or `flowgen` worker
    /// sending to the device under test, and what it forwards received by
    /// a probe: the same worker's RX ports, or an `rxonly` worker with
    /// `measure = true`), driven through its control socket.
    Ndr {
        /// The tester's control socket.
        #[arg(short, long, default_value = appliance::ctl::DEFAULT_SOCKET)]
        socket: PathBuf,
        /// Frame sizes in bytes with the FCS, as RFC 2544 counts them (the
        /// generator makes frames 4 bytes shorter; the NIC adds the FCS),
        /// and `imix` for a row of the simple IMIX (64, 594, 1518 bytes,
        /// 7:4:1; the tester's flows a multiple of 12).
        #[arg(long, value_delimiter = ',', default_values_t = [64usize, 128, 256, 512, 1024, 1280, 1518].map(appliance::ndr::FrameSize::Bytes))]
        sizes: Vec<appliance::ndr::FrameSize>,
        /// Seconds per trial.
        #[arg(long, default_value_t = 2.0)]
        trial: f64,
        /// Loss allowed, percent (RFC 2544: 0).
        #[arg(long, default_value_t = 0.0)]
        loss: f64,
        /// Stop the search when the bracket is this close, percent.
        #[arg(long, default_value_t = 1.0)]
        resolution: f64,
        /// Highest rate tried, packets per second per generating port
        /// (default: the tester's top rate).
        #[arg(long)]
        max_rate: Option<f64>,
        /// Percentages of the NDR at which latency is measured.
        #[arg(long, value_delimiter = ',', default_values_t = [10.0, 50.0, 90.0, 100.0])]
        latency_at: Vec<f64>,
        /// Seconds to wait after a trial for packets in flight.
        #[arg(long, default_value_t = 0.3)]
        settle: f64,
        /// Also write the results as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Also write a chart (NDR and latency against frame size) here.
        #[arg(long)]
        svg: Option<PathBuf>,
    },
}

fn load(file: Option<&PathBuf>) -> Result<Config, config::ConfigErrors> {
    match file {
        Some(f) => config::load_file(f),
        None => config::parse(config::QUICKSTART, config::QUICKSTART_NAME, None),
    }
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

/// The manual pages: `sluice.1`, and a page per subcommand at every level
/// (`sluice-run.1`, `sluice-bench-ndr.1`), hidden ones left out.
fn man_pages(dir: &std::path::Path) -> Result<Vec<PathBuf>> {
    use clap::CommandFactory;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    let mut todo = vec![(String::from("sluice"), Cli::command())];
    while let Some((name, cmd)) = todo.pop() {
        let cmd = cmd.name(name.clone());
        for sub in cmd.get_subcommands().filter(|c| !c.is_hide_set()) {
            if sub.get_name() != "help" {
                todo.push((format!("{name}-{}", sub.get_name()), sub.clone()));
            }
        }
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd)
            .date("2026-12-04")
            .source(format!("sluice {}", env!("CARGO_PKG_VERSION")))
            .manual("Sluice")
            .render(&mut out)?;
        std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

fn real_main() -> Result<ExitCode> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Completions { shell } => {
            use clap::CommandFactory;
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "sluice", &mut out);
            let _ = appliance::ctl::client::out(&String::from_utf8_lossy(&out));
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Man { dir } => {
            for p in man_pages(&dir)? {
                eprintln!("{}", p.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Ctl {
            batch: Some(file),
            socket,
            json,
            force,
            ..
        } => Ok(appliance::ctl::client::batch(&socket, json, force, &file)),
        Cmd::Ctl {
            socket,
            json,
            interval,
            count,
            args,
            ..
        } => Ok(appliance::ctl::client::run(
            &socket, json, interval, count, &args,
        )),
        Cmd::Bench {
            what:
                Bench::Ndr {
                    socket,
                    sizes,
                    trial,
                    loss,
                    resolution,
                    max_rate,
                    latency_at,
                    settle,
                    json,
                    svg,
                },
        } => {
            let secs = |v: f64, what: &str| {
                if v.is_finite() && v > 0.0 && v <= 3600.0 {
                    Ok(std::time::Duration::from_secs_f64(v))
                } else {
                    Err(anyhow::anyhow!("--{what} {v}: seconds, above 0"))
                }
            };
            if !(0.0..100.0).contains(&loss)
                || !(0.0..100.0).contains(&resolution)
                || resolution == 0.0
            {
                anyhow::bail!(
                    "--loss and --resolution are percentages (0 to 100; resolution above 0)"
                );
            }
            let o = appliance::ndr::Options {
                sizes,
                trial: secs(trial, "trial")?,
                loss: loss / 100.0,
                resolution: resolution / 100.0,
                max_rate,
                latency_at: latency_at.iter().map(|p| p / 100.0).collect(),
                settle: secs(settle, "settle")?,
            };
            let rs = appliance::ndr::run(&socket, &o, &mut |l| eprintln!("{l}"))?;
            if let Some(p) = json {
                std::fs::write(&p, serde_json::to_string_pretty(&rs)? + "\n")
                    .with_context(|| format!("writing {}", p.display()))?;
            }
            if let Some(p) = svg {
                std::fs::write(&p, appliance::ndr::svg(&rs))
                    .with_context(|| format!("writing {}", p.display()))?;
            }
            let _ = appliance::ctl::client::out(&appliance::ndr::table(&rs, &o));
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Check { file } => match config::load_file(&file) {
            Ok(c) => {
                warn(&c);
                // Build the tables as `run` will (route file included).
                let t0 = std::time::Instant::now();
                let (router, _) = appliance::stages::build_router(&c)?;
                let (n4, n6) = (router.routes4(), router.routes6());
                // A closed stdout (`sluice check f | head`) is no error.
                let _ = appliance::ctl::client::out(&format!(
                    "{}  routes: {n4} IPv4, {n6} IPv6 ({} from the route file); tables built in {:.1} ms; {}\n",
                    config::describe(&c),
                    c.router.file_routes.len(),
                    t0.elapsed().as_secs_f64() * 1e3,
                    appliance::stages::huge_pages_report()
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
            // Descriptors: the soft limit up to the hard one (systemd's
            // default soft limit is 1,024), as servers do; the management
            // servers bound their own use either way.
            pmd::sys::raise_nofile();
            // One instance per device: refused before anything is opened.
            let dir = appliance::lock::lock_dir().map_err(|e| anyhow::anyhow!(e))?;
            let _locks = appliance::lock::acquire(&cfg, &dir)?;
            // Ctrl-C and SIGTERM (systemd, container runtimes) stop the run
            // cleanly; SIGHUP reloads the config file.
            let stop = Arc::new(AtomicBool::new(false));
            for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
                signal_hook::flag::register(sig, stop.clone())
                    .context("installing the signal handlers")?;
            }
            signal_hook::flag::register(
                signal_hook::consts::SIGHUP,
                appliance::reload::requested(),
            )
            .context("installing the SIGHUP handler")?;
            warn(&cfg);
            if !json && !appliance::ctl::client::out(&config::describe(&cfg)) {
                stop.store(true, Ordering::Release);
            }
            // Reports go to stdout; when it is closed (`sluice run | head`),
            // the run stops cleanly as on SIGTERM.
            let stop_on_epipe = stop.clone();
            let mut emit = |r: &appliance::telemetry::Report| {
                let text = if json { r.json() + "\n" } else { r.text() };
                if !appliance::ctl::client::out(&text) {
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
