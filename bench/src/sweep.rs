//! `poll-sweep`: the polling-versus-interrupts study.
//!
//! For every offered load and every poll-mode policy, one run of Sluice on a
//! softnic port (the generator on one core, the worker on the other, io
//! forwarding back to the generator's sink), fixed duration, and from its
//! JSON summary: achieved rate, loss, worker CPU, CPU per packet,
//! end-to-end latency p50/p99/max, interrupt wake-ups and sleeps per second.
//! Writes a Markdown table and two SVG plots (CPU% and p99 latency against
//! offered load, one line per policy).

use anyhow::{bail, Context, Result};
use clap::Parser;
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Arguments of `poll-sweep`.
#[derive(Parser)]
pub struct Sweep {
    /// The sluice binary.
    #[arg(long, default_value = "target/release/sluice")]
    sluice: PathBuf,
    /// Seconds per point.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Offered loads in packets per second (`max`: the generator's top rate).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "100,1000,10000,100000,1000000,max"
    )]
    loads: Vec<String>,
    /// Policies to run at each load.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "busy,interrupt,adaptive,timer,auto"
    )]
    policies: Vec<String>,
    /// Core of the worker.
    #[arg(long, default_value_t = 1)]
    worker_core: usize,
    /// Core of the softnic generator.
    #[arg(long, default_value_t = 0)]
    gen_core: usize,
    /// Runs per point (policies alternate within each round); the table
    /// shows the median of each figure.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Where the table and plots go.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
}

struct Point {
    load: String,
    policy: String,
    offered: f64,
    achieved: f64,
    loss: f64,
    missed: f64,
    tx_full: f64,
    cpu: f64,
    cpu_ns_per_pkt: f64,
    p50: f64,
    p99: f64,
    max: f64,
    wakeups: f64,
    sleeps: f64,
}

fn config(a: &Sweep, load: &str, policy: &str) -> String {
    let rate = if load == "max" {
        "\"max\"".to_string()
    } else {
        load.to_string()
    };
    format!(
        r#"# poll-sweep point: {load} pps, {policy}
[run]
duration = {secs}
stats_period = {secs}
burst = 32
drain_us = 0

[generator]
core = {gen}

[[port]]
name = "p0"
driver = "softnic"
rxd = 4096
txd = 4096

[port.softnic]
rate = {rate}
size = 64
flows = 1024
pattern = "poisson"
rx_usecs = 50
rx_frames = 32

[[worker]]
core = {core}
mode = "io"
rx = ["p0"]

[worker.poll]
mode = "{policy}"
"#,
        secs = a.seconds,
        gen = a.gen_core,
        core = a.worker_core,
    )
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn run_point(a: &Sweep, load: &str, policy: &str, dir: &Path) -> Result<Point> {
    let path = dir.join(format!("{policy}-{load}.toml"));
    std::fs::write(&path, config(a, load, policy))?;
    let out = Command::new(&a.sluice)
        .arg("run")
        .arg(&path)
        .arg("--json")
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", a.sluice.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(last) = text.lines().last() else {
        bail!("sluice printed nothing for {policy} at {load}");
    };
    let s: serde_json::Value = serde_json::from_str(last)?;
    if s["kind"] != "summary" {
        bail!("no summary for {policy} at {load}: {last}");
    }
    let dt = f(&s["interval"]);
    let b = &s["balance"];
    let offered = f(&b["offered"]);
    let delivered = f(&b["delivered"]);
    let c = &s["cores"][0];
    let e2e = &s["ports"][0]["e2e_ns"];
    let rx = f(&c["rx_pps"]) * dt;
    Ok(Point {
        load: load.to_string(),
        policy: policy.to_string(),
        offered: offered / dt,
        achieved: delivered / dt,
        missed: f(&b["rx_missed"]) / offered.max(1.0),
        tx_full: f(&b["tx_full"]) / offered.max(1.0),
        loss: if offered > 0.0 {
            1.0 - delivered / offered
        } else {
            0.0
        },
        cpu: f(&c["cpu"]),
        cpu_ns_per_pkt: if rx > 0.0 {
            f(&c["cpu"]) * dt * 1e9 / rx
        } else {
            f64::NAN
        },
        p50: f(&e2e["p50"]) / 1e3,
        p99: f(&e2e["p99"]) / 1e3,
        max: f(&e2e["max"]) / 1e3,
        wakeups: f(&c["wakeups_per_s"]),
        sleeps: f(&c["sleeps_per_s"]),
    })
}

/// The median of each figure over several runs of one point.
fn median_point(runs: Vec<Point>) -> Point {
    let m = |f: fn(&Point) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        crate::median(&mut v)
    };
    Point {
        load: runs[0].load.clone(),
        policy: runs[0].policy.clone(),
        offered: m(|p| p.offered),
        achieved: m(|p| p.achieved),
        loss: m(|p| p.loss),
        missed: m(|p| p.missed),
        tx_full: m(|p| p.tx_full),
        cpu: m(|p| p.cpu),
        cpu_ns_per_pkt: m(|p| p.cpu_ns_per_pkt),
        p50: m(|p| p.p50),
        p99: m(|p| p.p99),
        max: m(|p| p.max),
        wakeups: m(|p| p.wakeups),
        sleeps: m(|p| p.sleeps),
    }
}

fn si(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn table(points: &[Point], a: &Sweep) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "Softnic, 1 port, 64-byte IPv4/UDP, 1024 flows, Poisson arrivals, io forwarding back to the sink; worker on core {}, generator on core {}; {} s per run, median of {} runs per point (policies alternating); coalescing rx_usecs 50, rx_frames 32; policies at their defaults. `max`: the generator offers as fast as it can (a packet that does not fit the RX ring is built and counted as missed), so there the generator, not the worker, sets the rate.\n",
        a.worker_core, a.gen_core, a.seconds, a.repeat
    );
    t += "| offered pps | policy | achieved pps | loss (RX ring full + TX ring full) | worker CPU | CPU ns/pkt | e2e p50 µs | e2e p99 µs | e2e max µs | wake-ups/s | sleeps/s |\n";
    t += "|---|---|---|---|---|---|---|---|---|---|---|\n";
    for p in points {
        let _ = writeln!(
            t,
            "| {} | {} | {} | {:.2}% ({:.2}% + {:.2}%) | {:.1}% | {:.0} | {:.1} | {:.1} | {:.0} | {} | {} |",
            if p.load == "max" {
                format!("max ({})", si(p.offered))
            } else {
                si(p.offered)
            },
            p.policy,
            si(p.achieved),
            p.loss * 100.0,
            p.missed * 100.0,
            p.tx_full * 100.0,
            p.cpu * 100.0,
            p.cpu_ns_per_pkt,
            p.p50,
            p.p99,
            p.max,
            si(p.wakeups),
            si(p.sleeps)
        );
    }
    t
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// One line per series of (x, y) points, x on a log scale (labelled
/// `xlabel`), y too when `log_y`; points that are not positive and finite
/// are left out.
pub(crate) fn plot_series(
    path: &Path,
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_y: bool,
) -> Result<()> {
    let ok = |v: f64| v.is_finite() && v > 0.0;
    let series: Vec<(&str, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(n, pts)| {
            let pts = pts.iter().copied().filter(|&(x, y)| ok(x) && ok(y));
            (n.as_str(), pts.collect())
        })
        .collect();
    let all = || series.iter().flat_map(|(_, p)| p.iter().copied());
    let (x0, x1) = (
        all().map(|p| p.0).fold(f64::MAX, f64::min) / 1.5,
        all().map(|p| p.0).fold(0.0, f64::max) * 1.5,
    );
    let (y0, y1) = (
        all().map(|p| p.1).fold(f64::MAX, f64::min),
        all().map(|p| p.1).fold(0.0, f64::max),
    );
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    macro_rules! draw {
        ($yr:expr) => {{
            let mut chart = ChartBuilder::on(&root)
                .caption(title, ("sans-serif", 22))
                .margin(15)
                .x_label_area_size(45)
                .y_label_area_size(70)
                .build_cartesian_2d((x0..x1).log_scale(), $yr)?;
            chart
                .configure_mesh()
                .x_desc(xlabel)
                .y_desc(ylabel)
                .x_label_formatter(&|v| si(*v))
                .draw()?;
            for (i, (name, line)) in series.iter().enumerate() {
                let color = COLORS[i % COLORS.len()];
                chart
                    .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))?
                    .label(*name)
                    .legend(move |(x, yy)| {
                        PathElement::new(vec![(x, yy), (x + 20, yy)], color.stroke_width(2))
                    });
                chart.draw_series(
                    line.iter()
                        .map(|&(x, yy)| Circle::new((x, yy), 3, color.filled())),
                )?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }};
    }
    if log_y {
        draw!((y0 / 1.5..y1 * 1.5).log_scale());
    } else {
        draw!(0.0..(y1 * 1.1).max(1.0));
    }
    root.present()?;
    Ok(())
}

/// One line per policy of `y(point)` against offered load (log x).
fn plot(
    path: &Path,
    title: &str,
    ylabel: &str,
    points: &[Point],
    policies: &[String],
    y: fn(&Point) -> f64,
    log_y: bool,
) -> Result<()> {
    let series: Vec<(String, Vec<(f64, f64)>)> = policies
        .iter()
        .map(|pol| {
            let line = points.iter().filter(|p| &p.policy == pol);
            (pol.clone(), line.map(|p| (p.offered, y(p))).collect())
        })
        .collect();
    plot_series(
        path,
        title,
        "offered load (packets/s, log scale)",
        ylabel,
        &series,
        log_y,
    )
}

/// Runs the sweep and writes `poll-sweep.md`, `poll-cpu.svg`, `poll-p99.svg`.
pub fn sweep(a: Sweep) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("sluice-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut points = Vec::new();
    for load in &a.loads {
        let mut runs: Vec<Vec<Point>> = a.policies.iter().map(|_| Vec::new()).collect();
        for round in 0..a.repeat.max(1) {
            for (i, pol) in a.policies.iter().enumerate() {
                let p = run_point(&a, load, pol, &dir)?;
                eprintln!(
                    "{load:>8} {pol:<9} run {round}: achieved {:>8} loss {:.2}% cpu {:5.1}% p99 {:.1} µs",
                    si(p.achieved),
                    p.loss * 100.0,
                    p.cpu * 100.0,
                    p.p99
                );
                runs[i].push(p);
            }
        }
        for r in runs {
            points.push(median_point(r));
        }
    }
    std::fs::remove_dir_all(&dir)?;
    std::fs::create_dir_all(&a.out)?;
    let md = table(&points, &a);
    print!("{md}");
    std::fs::write(a.out.join("poll-sweep-table.md"), &md)?;
    plot(
        &a.out.join("poll-cpu.svg"),
        "Worker CPU vs offered load",
        "worker CPU (% of one core)",
        &points,
        &a.policies,
        |p| p.cpu * 100.0,
        false,
    )?;
    plot(
        &a.out.join("poll-p99.svg"),
        "End-to-end p99 latency vs offered load",
        "p99 latency (µs, log scale)",
        &points,
        &a.policies,
        |p| p.p99,
        true,
    )?;
    Ok(())
}
