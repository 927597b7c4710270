//! The Prometheus endpoint (`[management] metrics`), checked with
//! Prometheus' own tools: a scrape passes `promtool check metrics` and its
//! counters are exactly what the run counted; a real Prometheus server
//! scrapes a running Sluice and `rate()` over its samples agrees with
//! Sluice's own reports. Both need Debian's `prometheus` package
//! (`scripts/test.sh` installs it): without it they skip, unless `CI` is
//! set. Bounded in time; every process is killed when the test ends,
//! passed or failed.

mod common;

use common::{free_port, have, http_get as get, sample, Killed};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `sluice run FILE --json`; returns it and the metrics address it
/// printed.
fn start_sluice(config: &Path) -> (Killed, BufReader<std::process::ChildStdout>, String) {
    common::spawn_with_metrics(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .arg(config)
            .arg("--json"),
    )
}

#[test]
fn a_scrape_passes_promtool_and_counts_exactly_what_the_run_counted() {
    if !have("promtool") {
        return;
    }
    let Some(dir) = testdata::shared("pcaps/tcpdump_tests") else {
        return;
    };
    let capture = dir.join("ssh.pcap");
    let frames = pmd::pcap::read_frames(&capture).unwrap().len() as u64;
    let loops = 500;
    let tmp = common::fresh_dir("metrics");
    let cfg = tmp.join("m.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[run]
duration = 0
stats_period = 0.5

[management]
metrics = "127.0.0.1:0"

[[port]]
name = "in"
driver = "pcap"
[port.pcap]
rx_file = "{}"
loops = {loops}

[[port]]
name = "out"
driver = "pcap"

[[worker]]
core = 1
mode = "io"
rx = ["in", "out"]
"#,
            capture.display()
        ),
    )
    .unwrap();
    let (mut sluice, out, addr) = start_sluice(&cfg);
    let want = frames * loops;
    // Wait until the capture has been replayed and forwarded whole.
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let (status, body) = get(&addr, "/metrics");
        assert_eq!(status, 200, "{body}");
        if sample(&body, r#"sluice_port_tx_packets_total{port="out"}"#) == Some(want as f64) {
            break body;
        }
        assert!(Instant::now() < deadline, "never forwarded {want}:\n{body}");
        std::thread::sleep(Duration::from_millis(200));
    };
    // Prometheus' linter accepts it.
    common::promtool_accepts(&text);
    // Exact counters, a histogram with its +Inf bucket, the core's series.
    let n = want as f64;
    assert_eq!(
        sample(&text, r#"sluice_port_rx_packets_total{port="in"}"#),
        Some(n)
    );
    assert_eq!(
        sample(&text, r#"sluice_core_rx_packets_total{core="1"}"#),
        Some(n)
    );
    // The one RX queue, by the worker polling it; the device's misses on
    // it.
    assert_eq!(
        sample(
            &text,
            r#"sluice_port_rx_queue_packets_total{port="in",queue="0",core="1"}"#
        ),
        Some(n)
    );
    let bursts = sample(
        &text,
        r#"sluice_port_rx_queue_bursts_total{port="in",queue="0",core="1"}"#,
    )
    .unwrap();
    assert!(bursts >= 1.0 && bursts <= n, "{bursts}");
    assert_eq!(
        sample(
            &text,
            r#"sluice_port_rx_queue_missed_total{port="in",queue="0"}"#
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"sluice_port_drops_total{port="in",reason="tx_full"}"#
        ),
        Some(0.0)
    );
    assert!(text.contains(r#"sluice_port_residency_seconds_bucket{port="out",le="+Inf"}"#));
    assert!(text.contains(r#"sluice_core_info{core="1",mode="io",policy="busy"} 1"#));
    assert_eq!(
        sample(&text, r#"sluice_core_state{core="1",state="spin"}"#),
        Some(1.0)
    );
    // Other paths and methods get clear answers.
    assert_eq!(get(&addr, "/").0, 200);
    assert_eq!(get(&addr, "/nothing").0, 404);
    // The run's own summary says the same.
    Command::new("kill")
        .args(["-TERM", &sluice.0.id().to_string()])
        .status()
        .unwrap();
    let status = sluice.0.wait().unwrap();
    assert!(status.success(), "{status}");
    let last = out.lines().map(Result::unwrap).last().unwrap();
    let summary: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(summary["kind"], "summary");
    assert_eq!(summary["ports"][1]["tx_pkts"], want);
    std::fs::remove_dir_all(&tmp).unwrap();
}

fn percent_encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn a_real_prometheus_scrapes_it_and_rate_agrees_with_sluice() {
    if !have("prometheus") {
        return;
    }
    let tmp = common::fresh_dir("prometheus");
    let cfg = tmp.join("s.toml");
    let quickstart = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/quickstart.toml"
    ))
    .unwrap();
    // The quickstart (two softnic ports at 200 kpps each through one io
    // worker), running until stopped, with the endpoint on.
    let text = quickstart.replace("duration = 10 ", "duration = 0 ")
        + "\n[management]\nmetrics = \"127.0.0.1:0\"\n";
    assert!(text.contains("duration = 0 "));
    std::fs::write(&cfg, text).unwrap();
    let (_sluice, out, addr) = start_sluice(&cfg);
    // Sluice's own reports, read as they come.
    let (tx, reports) = std::sync::mpsc::channel::<(Instant, f64)>();
    std::thread::spawn(move || {
        for line in out.lines() {
            let Ok(line) = line else { return };
            let Ok(r) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let pps: f64 = r["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["tx_pps"].as_f64())
                .sum();
            if tx.send((Instant::now(), pps)).is_err() {
                return;
            }
        }
    });
    let web = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        tmp.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: sluice\n    static_configs:\n      - targets: ['{addr}']\n"
        ),
    )
    .unwrap();
    let _prom = Killed(
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                tmp.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                tmp.join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // A 10 s window: Prometheus stamps each sample with the scrape's
    // start, so on a busy machine one late answer moves a 5 s rate by
    // 10% or more.
    let query = "sum(rate(sluice_port_tx_packets_total[10s]))";
    let path = format!("/api/v1/query?query={}", percent_encode(query));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = 0;
    let rate = loop {
        assert!(Instant::now() < deadline, "Prometheus never had a rate");
        std::thread::sleep(Duration::from_secs(1));
        if TcpStream::connect(&web).is_err() {
            continue;
        }
        let (status, body) = get(&web, &path);
        if status != 200 {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let Some(val) = v["data"]["result"][0]["value"][1].as_str() else {
            continue;
        };
        // Let a few full windows of samples gather.
        seen += 1;
        if seen >= 12 {
            break val.parse::<f64>().unwrap();
        }
    };
    // Sluice's own figure over the same stretch: its last reports.
    let ours: Vec<f64> = reports.try_iter().map(|(_, p)| p).collect();
    assert!(ours.len() >= 10, "too few reports: {ours:?}");
    let recent = &ours[ours.len() - 10..];
    let mean = recent.iter().sum::<f64>() / recent.len() as f64;
    let off = (rate - mean).abs() / mean;
    eprintln!(
        "Prometheus rate() {rate:.0} pps, Sluice's reports {mean:.0} pps ({:.1}% apart)",
        off * 100.0
    );
    assert!(mean > 1000.0, "Sluice forwarded {recent:?}");
    assert!(
        off < 0.05,
        "Prometheus says {rate:.0} pps, Sluice says {mean:.0} ({recent:?})"
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}
