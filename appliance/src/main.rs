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
    /// Ask a running sluice what it is doing, or change it, through its
    /// control socket (`[management] socket`). `sluice ctl help` lists the
    /// commands; `sluice ctl top` refreshes `show cores` and `show ports`.
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

/// `sluice ctl capture ...`: starts it (with `-w` made absolute: the
/// appliance may run elsewhere in the file system), then, when it has a
/// count or a duration, waits for it to finish and says what it wrote.
/// `-w -` streams the pcapng to stdout (for `| tshark -r -` or Wireshark):
/// the appliance writes a file in the temporary directory, flushed at
/// every turn, and this follows it to the end; it needs a count or a
/// duration, so that it ends.
fn capture(
    socket: &std::path::Path,
    args: &[String],
    ask: &dyn Fn(&[String]) -> Result<appliance::ctl::Response, ExitCode>,
) -> ExitCode {
    let mut req = vec!["capture".to_string(), "start".to_string()];
    let start = usize::from(args.first().is_some_and(|a| a == "start"));
    let mut it = args[start..].iter();
    let mut bounded = false;
    let mut stream: Option<std::path::PathBuf> = None;
    while let Some(a) = it.next() {
        req.push(a.clone());
        bounded |= matches!(a.as_str(), "--count" | "-c" | "--duration");
        if matches!(a.as_str(), "-w" | "--write") {
            if let Some(f) = it.next() {
                let abs = if f == "-" {
                    let t = std::env::temp_dir()
                        .join(format!("sluice-capture-{}.pcapng", std::process::id()));
                    stream = Some(t.clone());
                    t
                } else if std::path::Path::new(f).is_absolute() {
                    std::path::PathBuf::from(f)
                } else {
                    std::env::current_dir().unwrap_or_default().join(f)
                };
                req.push(abs.display().to_string());
            }
        }
    }
    if stream.is_some() && !bounded {
        eprintln!("sluice ctl: -w - needs --count or --duration");
        return ExitCode::from(1);
    }
    let r = match ask(&req) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if !r.ok {
        eprintln!("sluice ctl: {}", r.error.unwrap_or_default());
        return ExitCode::from(1);
    }
    if !bounded {
        let _ = out(&format!(
            "{}stop it with `sluice ctl -s {} capture stop`\n",
            r.text,
            socket.display()
        ));
        return ExitCode::SUCCESS;
    }
    let status = vec!["capture".to_string(), "status".to_string()];
    // `-w -`: copy what the appliance has written so far, each turn.
    let mut follow = stream.as_ref().and_then(|p| std::fs::File::open(p).ok());
    let copy = |f: &mut Option<std::fs::File>| {
        if let Some(f) = f {
            let mut o = std::io::stdout().lock();
            let _ = std::io::copy(f, &mut o);
            let _ = std::io::Write::flush(&mut o);
        }
    };
    loop {
        std::thread::sleep(std::time::Duration::from_millis(100));
        copy(&mut follow);
        match ask(&status) {
            Ok(r) if r.ok && r.data["running"] == false => {
                if let Some(p) = &stream {
                    copy(&mut follow);
                    let _ = std::fs::remove_file(p);
                    eprint!("{}", r.text);
                } else {
                    let _ = out(&r.text);
                }
                return ExitCode::SUCCESS;
            }
            Ok(r) if r.ok => {}
            Ok(r) => {
                eprintln!("sluice ctl: {}", r.error.unwrap_or_default());
                return ExitCode::from(1);
            }
            Err(code) => return code,
        }
    }
}

/// `sluice ctl`: 0 when the command did what was asked, 1 when the
/// appliance refused it, 2 when it could not be reached.
fn ctl(
    socket: &std::path::Path,
    json: bool,
    interval: f64,
    count: u64,
    args: &[String],
) -> ExitCode {
    let ask = |args: &[String]| match appliance::ctl::request(socket, args) {
        Ok(r) => Ok(r),
        Err(e) => {
            eprintln!("sluice ctl: {e:#}");
            Err(ExitCode::from(2))
        }
    };
    if args == ["top"] {
        if !(0.05..=3600.0).contains(&interval) {
            eprintln!("sluice ctl: --interval must be 0.05..=3600 seconds");
            return ExitCode::from(1);
        }
        let mut n = 0;
        loop {
            let mut screen = String::from("\x1b[H\x1b[2J");
            for cmd in [["show", "cores"], ["show", "ports"]] {
                let words: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
                match ask(&words) {
                    Ok(r) if r.ok => screen += &(r.text + "\n"),
                    Ok(r) => {
                        eprintln!("sluice ctl: {}", r.error.unwrap_or_default());
                        return ExitCode::from(1);
                    }
                    Err(code) => return code,
                }
            }
            if !out(&screen) {
                return ExitCode::SUCCESS;
            }
            n += 1;
            if count > 0 && n >= count {
                return ExitCode::SUCCESS;
            }
            std::thread::sleep(std::time::Duration::from_secs_f64(interval));
        }
    }
    if starts_capture(args) {
        return capture(socket, &args[1..], &ask);
    }
    match ask(args) {
        Err(code) => code,
        Ok(r) if r.ok => {
            let text = if json {
                serde_json::to_string_pretty(&r.data).unwrap_or_default() + "\n"
            } else {
                r.text
            };
            let _ = out(&text);
            ExitCode::SUCCESS
        }
        Ok(r) => {
            eprintln!("sluice ctl: {}", r.error.unwrap_or_else(|| "failed".into()));
            ExitCode::from(1)
        }
    }
}

/// Whether `args` starts a capture (which the client waits on and
/// writes out), not `capture status` or `capture stop`.
fn starts_capture(args: &[String]) -> bool {
    args.first().is_some_and(|a| a == "capture")
        && !matches!(args.get(1).map(String::as_str), Some("status" | "stop"))
}

/// `sluice ctl --batch FILE`: each line of FILE a command, in order, one
/// connection each (the protocol's), as `ip -batch` runs them.
fn ctl_batch(
    socket: &std::path::Path,
    json: bool,
    force: bool,
    file: &std::path::Path,
) -> ExitCode {
    let text = if file == std::path::Path::new("-") {
        let mut t = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut t).map(|_| t)
    } else {
        std::fs::read_to_string(file)
    };
    let text = match text {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sluice ctl: cannot read {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    let mut failed = false;
    for (n, line) in text.lines().enumerate() {
        let words: Vec<String> = line
            .split('#')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_string)
            .collect();
        if words.is_empty() {
            continue;
        }
        let at = format!("{}:{}", file.display(), n + 1);
        // What waits or streams has no place in a batch.
        let refused = if words[0] == "top" {
            Some("`top` is interactive")
        } else if starts_capture(&words) {
            Some("`capture` writes a file: run it on its own")
        } else {
            None
        };
        let answer = match refused {
            Some(why) => Err(why.to_string()),
            None => match appliance::ctl::request(socket, &words) {
                Ok(r) if r.ok => Ok(if json {
                    serde_json::to_string(&r.data).unwrap_or_default() + "\n"
                } else {
                    r.text
                }),
                Ok(r) => Err(r.error.unwrap_or_else(|| "failed".into())),
                Err(e) => {
                    eprintln!("sluice ctl: {at}: {e:#}");
                    return ExitCode::from(2);
                }
            },
        };
        match answer {
            Ok(text) => {
                if !out(&text) {
                    return ExitCode::SUCCESS;
                }
            }
            Err(e) => {
                eprintln!("sluice ctl: {at}: {}: {e}", words.join(" "));
                failed = true;
                if !force {
                    return ExitCode::from(1);
                }
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn load(file: Option<&PathBuf>) -> Result<Config, config::ConfigErrors> {
    match file {
        Some(f) => config::load_file(f),
        None => config::parse(config::QUICKSTART, config::QUICKSTART_NAME, None),
    }
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
        Cmd::Ctl {
            batch: Some(file),
            socket,
            json,
            force,
            ..
        } => Ok(ctl_batch(&socket, json, force, &file)),
        Cmd::Ctl {
            socket,
            json,
            interval,
            count,
            args,
            ..
        } => Ok(ctl(&socket, json, interval, count, &args)),
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
            let _ = out(&appliance::ndr::table(&rs, &o));
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
                let _ = out(&format!(
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
            if !json && !out(&config::describe(&cfg)) {
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
