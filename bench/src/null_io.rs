//! `null-io`: io forwarding on two null ports, Sluice vs dpdk-testpmd.

use crate::{have, mean, median};
use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use pmd::sys::Tsc;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Huge {
    /// Use hugepages if present or if they can be set up (as root).
    Auto,
    /// Only --no-huge.
    Off,
}

#[derive(Parser)]
pub struct NullIo {
    /// The sluice binary.
    #[arg(long, default_value = "target/release/sluice")]
    sluice: PathBuf,
    /// The config to run (two null ports, one worker).
    #[arg(long, default_value = "configs/null-io.toml")]
    config: PathBuf,
    /// Runs of each side (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Seconds per run.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Packets per burst, both sides.
    #[arg(long, default_value_t = 32)]
    burst: usize,
    /// Forwarding core for both sides (testpmd gets `-l 0,CORE`).
    #[arg(long, default_value_t = 1)]
    core: usize,
    /// Hugepages for testpmd.
    #[arg(long, value_enum, default_value_t = Huge::Auto)]
    hugepages: Huge,
    /// Forwarding mode on both sides (io, mac, macswap, 5tswap; txonly
    /// with a txonly config: one `no-rx` net_null port; `ring` with a
    /// txonly -> rxonly config over net_ring0, against testpmd's txonly in
    /// a primary process and rxonly in a secondary one on the same ring).
    #[arg(long, default_value = "io")]
    forward_mode: String,
}

/// One Sluice run: (forwarded Mpps, cycles per packet).
fn sluice_run(a: &NullIo) -> Result<(f64, f64)> {
    let text = std::fs::read_to_string(&a.config)
        .with_context(|| format!("reading {}", a.config.display()))?
        .replace("mode = \"io\"", &format!("mode = \"{}\"", a.forward_mode));
    let path = std::env::temp_dir().join(format!("sluice-bench-{}.toml", std::process::id()));
    std::fs::write(&path, text)?;
    let out = Command::new(&a.sluice)
        .arg("run")
        .arg(&path)
        .args([
            "--json",
            "--duration",
            &a.seconds.to_string(),
            "--burst",
            &a.burst.to_string(),
        ])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", a.sluice.display()))?;
    if !out.status.success() {
        bail!("sluice exited with {}", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().context("sluice printed nothing")?;
    let r: serde_json::Value = serde_json::from_str(last)?;
    // Skip the first second (start-up) by using the period reports.
    // Over a ring: what the rxonly worker took out of it.
    let key = if a.forward_mode == "ring" {
        "rx_pps"
    } else {
        "tx_pps"
    };
    let periods: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["kind"] == "period")
        .skip(1)
        .collect();
    let src = if periods.is_empty() { vec![r] } else { periods };
    let mut pps = Vec::new();
    let mut cpp = Vec::new();
    for v in &src {
        let p: f64 = v["ports"]
            .as_array()
            .context("ports")?
            .iter()
            .map(|p| p[key].as_f64().unwrap_or(0.0))
            .sum();
        pps.push(p / 1e6);
        cpp.push(v["cores"][0]["cycles_per_pkt"].as_f64().unwrap_or(f64::NAN));
    }
    Ok((mean(&pps), mean(&cpp)))
}

/// Makes sure 2 MiB hugepages are available; returns whether they are.
fn setup_hugepages() -> bool {
    if pmd::sys::free_hugepages() < 512 {
        eprintln!("bench: reserving 512 hugepages and mounting hugetlbfs (needs root)");
        let _ = std::fs::write(Path::new("/proc/sys/vm/nr_hugepages"), "1024");
        if !pmd::sys::hugetlbfs_mounted() {
            let _ = std::fs::create_dir_all("/mnt/huge");
            let _ = Command::new("mount")
                .args(["-t", "hugetlbfs", "nodev", "/mnt/huge"])
                .status();
        }
    }
    let ok = pmd::sys::free_hugepages() >= 512;
    if !ok {
        eprintln!("bench: no hugepages (not root, or none free); testpmd runs with --no-huge");
    }
    ok
}

/// One testpmd run: forwarded Mpps over all ports, after the first
/// non-zero stats period.
fn testpmd_run(a: &NullIo, huge: bool, run: usize) -> Result<f64> {
    let prefix = format!("sluice-bench-{}-{run}", std::process::id());
    if a.forward_mode == "ring" {
        return testpmd_ring_run(a, &prefix);
    }
    // txonly: one port that receives nothing (as the Sluice config).
    let tx = a.forward_mode == "txonly";
    let mut cmd = Command::new("timeout");
    cmd.args(["-s", "INT", &(a.seconds + 3).to_string(), "dpdk-testpmd"])
        .args(["-l", &format!("0,{}", a.core), "--no-pci"]);
    if tx {
        cmd.args(["--vdev", "net_null0,no-rx=1"]);
    } else {
        cmd.args(["--vdev", "net_null0", "--vdev", "net_null1"]);
    }
    cmd.args(["--file-prefix", &prefix]);
    if !huge {
        cmd.args(["--no-huge", "-m", "1024"]);
    }
    let fm = format!("--forward-mode={}", a.forward_mode);
    cmd.args([
        "--",
        fm.as_str(),
        &format!("--burst={}", a.burst),
        "--stats-period=1",
    ]);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .context("running dpdk-testpmd")?;
    let text = String::from_utf8_lossy(&out.stdout);
    // Each stats period prints one "Rx-pps: … Rx-bps" and one "Tx-pps:"
    // line per port (2 ports; txonly: 1, and what it sent counts).
    let (key, ports) = if tx { ("Tx-pps:", 1) } else { ("Rx-pps:", 2) };
    testpmd_pps(&text, key, ports).with_context(|| {
        format!(
            "dpdk-testpmd printed no throughput (exit {}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The Mpps of the periods after the first busy one in testpmd's stats
/// output (`key`: "Rx-pps:" or "Tx-pps:"), each period summed over
/// `ports` lines; `None` when it printed no throughput.
fn testpmd_pps(text: &str, key: &str, ports: usize) -> Option<f64> {
    let per_port: Vec<f64> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix(key))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    let busy: Vec<f64> = per_port
        .chunks_exact(ports)
        .map(|c| c.iter().sum())
        .skip_while(|&p: &f64| p == 0.0)
        .skip(1)
        .filter(|&p| p > 0.0)
        .collect();
    (!busy.is_empty()).then(|| mean(&busy) / 1e6)
}

/// testpmd's txonly -> rxonly over net_ring0: txonly in a primary process
/// (forwarding on the bench's core), rxonly in a secondary process on the
/// same port and queue (forwarding on core 0), as Sluice's two workers;
/// the rate is what the secondary received. Multi-process needs
/// hugepages (the ring lives in shared memory).
fn testpmd_ring_run(a: &NullIo, prefix: &str) -> Result<f64> {
    let testpmd = |secs: u64, lcores: String, main: usize, kind: &str, mode: &str| {
        let mut cmd = Command::new("timeout");
        cmd.args(["-s", "INT", &secs.to_string(), "dpdk-testpmd"])
            .args(["-l", &lcores, "--main-lcore", &main.to_string(), "--no-pci"])
            .args(["--file-prefix", prefix, "--proc-type", kind]);
        if kind == "primary" {
            cmd.args(["--vdev", "net_ring0"]);
        }
        cmd.args([
            "--",
            &format!("--forward-mode={mode}"),
            &format!("--burst={}", a.burst),
            "--stats-period=1",
            "--num-procs=1",
            "--proc-id=0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        cmd
    };
    let mut primary = testpmd(
        a.seconds + 6,
        format!("0,{}", a.core),
        0,
        "primary",
        "txonly",
    )
    .spawn()
    .context("running dpdk-testpmd (primary)")?;
    // The primary sets the port up before the secondary may attach.
    std::thread::sleep(Duration::from_secs(3));
    let out = testpmd(
        a.seconds + 2,
        format!("{},0", a.core),
        a.core,
        "secondary",
        "rxonly",
    )
    .output()
    .context("running dpdk-testpmd (secondary)");
    let _ = Command::new("kill")
        .args(["-INT", &primary.id().to_string()])
        .status();
    let _ = primary.wait();
    let out = out?;
    // Both processes print the shared port's stats; the secondary's
    // periods are the ones while rxonly ran.
    testpmd_pps(&String::from_utf8_lossy(&out.stdout), "Rx-pps:", 1).with_context(|| {
        format!(
            "dpdk-testpmd (secondary, rxonly) printed no throughput (exit {}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

pub fn null_io(a: NullIo) -> Result<()> {
    let tsc = Tsc::calibrate(Duration::from_millis(100));
    let ghz = tsc.hz as f64 / 1e9;
    let testpmd = have("dpdk-testpmd");
    let huge = testpmd && a.hugepages == Huge::Auto && setup_hugepages();
    let mut modes = vec![];
    if testpmd {
        if huge {
            modes.push(true);
        }
        // Multi-process (the ring's two sides) needs hugepages.
        if a.forward_mode != "ring" {
            modes.push(false);
        } else if !huge {
            eprintln!("bench: no hugepages, so no testpmd primary/secondary pair over net_ring");
        }
    } else {
        eprintln!("bench: dpdk-testpmd not installed (apt-get install dpdk); Sluice only");
    }
    let (mut s_pps, mut s_cpp) = (Vec::new(), Vec::new());
    let mut t_pps: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for run in 0..a.runs {
        let (p, c) = sluice_run(&a)?;
        eprintln!("run {run}: sluice {p:.1} Mpps {c:.1} cyc/pkt");
        s_pps.push(p);
        s_cpp.push(c);
        for (i, &h) in modes.iter().enumerate() {
            let p = testpmd_run(&a, h, run)?;
            eprintln!(
                "run {run}: testpmd ({}) {p:.1} Mpps",
                if h { "hugepages" } else { "--no-huge" }
            );
            t_pps[i].push(p);
        }
    }
    let sp = median(&mut s_pps);
    let sc = median(&mut s_cpp);
    println!(
        "{} forwarding, config {}, 1 core (core {}), burst {}, {} s × {} runs alternating, median; TSC {ghz:.2} GHz\n",
        a.forward_mode,
        a.config.display(),
        a.core,
        a.burst,
        a.seconds,
        a.runs
    );
    println!("| forwarder | Mpps (all ports) | cycles/packet | Sluice ÷ it |");
    println!("|---|---|---|---|");
    println!(
        "| Sluice ({}) | {sp:.1} | {sc:.1} | 1.00 |",
        a.config.display()
    );
    for (i, &h) in modes.iter().enumerate() {
        let tp = median(&mut t_pps[i]);
        let what = if a.forward_mode == "ring" {
            "txonly -> rxonly (primary, secondary process), net_ring".to_string()
        } else {
            format!("{}, net_null", a.forward_mode)
        };
        println!(
            "| dpdk-testpmd {what}, {} | {tp:.1} | {:.1} | {:.2} |",
            if h { "hugepages" } else { "--no-huge -m 1024" },
            tsc.hz as f64 / (tp * 1e6),
            sp / tp
        );
    }
    Ok(())
}
