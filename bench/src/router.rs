//! `router`: the router (l3fwd) with the full Internet table against io
//! forwarding of the same traffic, side by side: forwarded packets per
//! second and the worker's busy cycles per packet, at a fixed rate and at
//! the generator's maximum.

use anyhow::{bail, Context, Result};
use clap::Parser;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Arguments of `router`.
#[derive(Parser)]
pub struct RouterArgs {
    /// The sluice binary.
    #[arg(long, default_value = "target/release/sluice")]
    sluice: PathBuf,
    /// The router configs (two softnic ports, full table), comma-separated:
    /// each is run in every round, alternating with the others.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "configs/router-fulltable.toml"
    )]
    config: Vec<PathBuf>,
    /// Offered rates per port (`max`: the generator's top rate).
    #[arg(long, value_delimiter = ',', default_value = "1000000,max")]
    rates: Vec<String>,
    /// Seconds per run.
    #[arg(long, default_value_t = 4)]
    seconds: u64,
    /// Runs per point (alternating modes); medians are reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

struct Run {
    fwd_mpps: f64,
    cycles: f64,
    busy: f64,
    stage_drops: f64,
}

fn run(
    a: &RouterArgs,
    config: &std::path::Path,
    mode: &str,
    rate: &str,
    dir: &std::path::Path,
) -> Result<Run> {
    let text =
        std::fs::read_to_string(config).with_context(|| format!("reading {}", config.display()))?;
    let rate_v = if rate == "max" {
        "\"max\"".to_string()
    } else {
        rate.to_string()
    };
    let base = config
        .parent()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()))
        .unwrap_or_default();
    let text = text
        .replace("rate = 1000000", &format!("rate = {rate_v}"))
        .replace("mode = \"l3fwd\"", &format!("mode = \"{mode}\""))
        .replace(
            "route_file = \"../",
            &format!("route_file = \"{}/../", base.display()),
        );
    let stem = config.file_stem().unwrap_or_default().to_string_lossy();
    let path = dir.join(format!("{stem}-{mode}-{rate}.toml"));
    std::fs::write(&path, text)?;
    let out = Command::new(&a.sluice)
        .arg("run")
        .arg(&path)
        .args(["--json", "--duration", &a.seconds.to_string()])
        .stderr(Stdio::inherit())
        .output()?;
    let t = String::from_utf8_lossy(&out.stdout);
    let Some(last) = t.lines().last() else {
        bail!("sluice printed nothing ({mode}, {rate})");
    };
    let s: serde_json::Value = serde_json::from_str(last)?;
    let dt = s["interval"].as_f64().unwrap_or(1.0);
    let ports = s["ports"].as_array().context("ports")?;
    let tx: f64 = ports
        .iter()
        .map(|p| p["tx_pps"].as_f64().unwrap_or(0.0))
        .sum();
    let c = &s["cores"][0];
    Ok(Run {
        fwd_mpps: tx / 1e6,
        cycles: c["cycles_per_pkt"].as_f64().unwrap_or(f64::NAN),
        busy: c["busy"].as_f64().unwrap_or(0.0),
        stage_drops: s["balance"]["stage_drops"].as_f64().unwrap_or(0.0) / dt,
    })
}

/// The comment a config opens with (what it carries), as one line.
fn opening_comment(text: &str) -> String {
    text.lines()
        .map_while(|l| l.strip_prefix('#'))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the comparison and prints a Markdown table.
pub fn router(a: RouterArgs) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("sluice-router-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    for c in &a.config {
        let text =
            std::fs::read_to_string(c).with_context(|| format!("reading {}", c.display()))?;
        println!("`{}`: {}\n", c.display(), opening_comment(&text));
    }
    println!(
        "Two softnic ports, frames as the config makes them; one worker core; {} s per run, median of {} rounds, each running every config and mode in turn. Cycles/packet are the worker's busy cycles per received packet.\n",
        a.seconds, a.runs
    );
    println!("| offered per port | config | mode | forwarded Mpps (both ports) | cycles/packet | worker busy | stage drops/s |");
    println!("|---|---|---|---|---|---|---|");
    for rate in &a.rates {
        let mut cells: Vec<(&std::path::Path, &str, Vec<Run>)> = Vec::new();
        for c in &a.config {
            for mode in ["io", "l3fwd"] {
                cells.push((c, mode, Vec::new()));
            }
        }
        for i in 0..a.runs {
            for (c, mode, v) in cells.iter_mut() {
                let r = run(&a, c, mode, rate, &dir)?;
                eprintln!(
                    "{rate} {} {mode} run {i}: {:.2} Mpps {:.1} cyc/pkt busy {:.0}%",
                    c.display(),
                    r.fwd_mpps,
                    r.cycles,
                    r.busy * 100.0
                );
                v.push(r);
            }
        }
        for (c, mode, v) in &cells {
            let m = |f: fn(&Run) -> f64| {
                let mut x: Vec<f64> = v.iter().map(f).collect();
                crate::median(&mut x)
            };
            println!(
                "| {rate} | {} | {mode} | {:.2} | {:.1} | {:.0}% | {:.0} |",
                c.file_stem().unwrap_or_default().to_string_lossy(),
                m(|r| r.fwd_mpps),
                m(|r| r.cycles),
                m(|r| r.busy) * 100.0,
                m(|r| r.stage_drops)
            );
        }
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
