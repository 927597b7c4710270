//! Sluice as a tester on real ports, against a device under test: the
//! Linux kernel routing between two namespaces. The tester (AF_PACKET
//! ports `t0`, `t1`) generates on `t0` towards the router and receives
//! what it forwards on `t1`.
//!
//! - Pacing and accounting: a 0.5 s trial at 10 kpps of 128-byte frames;
//!   the generator's count matches the schedule, every generated packet
//!   left by the port or is counted, every received one went through the
//!   probe; a capture on the router's side (tcpdump, nanosecond stamps)
//!   shows evenly spaced packets (median gap near 100 µs, fewer than half
//!   back to back: a busy machine's catch-ups make some), not bursts.
//! - `sluice bench ndr` over two frame sizes and IMIX: each has a no-drop rate
//!   whose trial lost nothing, no passing trial above it, and latency
//!   trials that received packets.
//!
//! Needs root, `ip` and `tcpdump`; skipped without them unless `CI` is
//! set. The namespaces are removed when the test ends, passed or failed.

mod common;

use common::{as_root, ctl_json, have, promtool_accepts, sluice_in, Nets};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[run]
duration = 0
stats_period = 5.0

[management]
socket = "SOCK"
metrics = "127.0.0.1:9310"   # in the tester's namespace

# Generates on t0 (the peer of t1, which its worker polls), to the router's
# MAC; receives what the router forwards on t1.
[[port]]
name = "t0"
driver = "afpacket"
mac = "02:00:00:00:00:10"
peer_mac = "02:00:00:00:00:d0"
[port.afpacket]
iface = "t0"

[[port]]
name = "t1"
driver = "afpacket"
mac = "02:00:00:00:00:11"
peer = "t0"
[port.afpacket]
iface = "t1"

[[worker]]
core = 0
mode = "txonly"
rx = ["t1"]
[worker.gen]
rate = 0
flows = 12          # whole rounds of IMIX's 12 lengths
src_ip = "198.18.0.2/32"
dst_ip = "198.19.0.2/32"

[[worker]]
core = 1
mode = "rxonly"
rx = ["t0"]
[worker.poll]
mode = "interrupt"
"#;

/// Waits until no generator runs (the trial ended), then lets the
/// packets in flight arrive; the stats since the last `clear stats`.
fn after_trial(sock: &std::path::Path) -> serde_json::Value {
    let t = Instant::now();
    loop {
        let s = ctl_json(sock, &["stats"]);
        if s["cores"][0]["tester"]["running"] == false {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "still running: {s}");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    ctl_json(sock, &["stats"])
}

#[test]
fn tester_paces_counts_and_finds_a_kernel_routers_ndr() {
    if !as_root() {
        return;
    }
    if !have("ip") || !have("tcpdump") {
        return;
    }
    let n = Nets::new("sl-ndr", &["t", "d"]);
    let (t, d) = (&n.0[0], &n.0[1]);
    n.veth("t0", t, "d0", d);
    n.veth("t1", t, "d1", d);
    n.sh(
        d,
        "ip link set d0 address 02:00:00:00:00:d0 up && ip link set d1 up \
         && ip addr add 198.18.0.1/24 dev d0 && ip addr add 198.19.0.1/24 dev d1 \
         && sysctl -qw net.ipv4.ip_forward=1 \
         && ip neigh add 198.19.0.2 lladdr 02:00:00:00:00:11 dev d1 nud permanent",
    );
    n.sh(
        t,
        "ip link set lo up && ip link set t0 up && ip link set t1 up",
    );
    let dir = common::fresh_dir("ndr");
    let sock = dir.join("t.sock");
    let cfg = dir.join("tester.toml");
    std::fs::write(&cfg, CONFIG.replace("SOCK", &sock.display().to_string())).unwrap();
    let _tester = sluice_in(t, &cfg, &sock);

    // Pacing: 10 kpps for 0.5 s, captured where the router receives it.
    let pcap = dir.join("paced.pcap");
    let mut dump = common::Killed(
        Command::new("ip")
            .args([
                "netns", "exec", d, "tcpdump", "-i", "d0", "-n", "-U", "-B", "16384",
            ])
            .args(["--time-stamp-precision=nano", "-w"])
            .arg(&pcap)
            .arg("udp")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Capturing once it says so.
    {
        use std::io::BufRead;
        let err = dump.0.stderr.take().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(err).read_line(&mut line).unwrap();
        assert!(line.contains("listening on"), "tcpdump: {line}");
    }
    ctl_json(&sock, &["clear", "stats"]);
    ctl_json(
        &sock,
        &["gen", "start", "10000", "size", "128", "duration", "0.5"],
    );
    // Answered once the generator has taken it (at the worker's next
    // tick): running from then on.
    let s = ctl_json(&sock, &["stats"]);
    assert_eq!(s["cores"][0]["tester"]["running"], true, "{s}");
    let s = after_trial(&sock);
    let text = s.to_string();
    let tester = &s["cores"][0]["tester"];
    let generated = tester["generated"].as_u64().unwrap();
    let late = tester["gen_late"].as_u64().unwrap();
    // The schedule: 5,000 packets, made or (behind by over 1 ms, on a
    // busy machine) skipped.
    assert!(
        (4999..=5001).contains(&(generated + late)),
        "generated {generated} late {late}: {text}"
    );
    assert!(generated >= 1250, "{text}");
    // Every generated packet left by t0 or was counted as refused.
    let t0 = &s["ports"][0];
    assert_eq!(
        t0["tx_pkts"].as_u64().unwrap() + t0["drops"]["tx_full"].as_u64().unwrap(),
        generated,
        "{text}"
    );
    // Everything t1 received went through the probe; what the router
    // forwarded carries the signature.
    let signed = tester["signed"].as_u64().unwrap();
    assert_eq!(
        signed + tester["unsigned"].as_u64().unwrap(),
        s["ports"][1]["rx_pkts"].as_u64().unwrap(),
        "{text}"
    );
    assert!(signed * 10 >= generated * 9, "{text}");
    assert_eq!(tester["duplicate"], 0, "{text}");
    assert!(
        tester["latency_ns"]["count"].as_u64() == Some(signed),
        "{text}"
    );
    // Even spacing on the wire (the capture writes each packet as it
    // comes, and the trial ended before `after_trial` returned).
    std::thread::sleep(Duration::from_millis(200));
    let _ = dump.0.kill();
    let out = Command::new("tcpdump")
        .args(["-r"])
        .arg(&pcap)
        .args(["-n", "-tt", "--time-stamp-precision=nano"])
        .output()
        .unwrap();
    let stamps: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    // (A capture on a busy machine may miss some; the spacing is what
    // counts.)
    assert!(
        stamps.len() as u64 * 2 >= generated,
        "captured {} of {generated}",
        stamps.len()
    );
    let mut gaps: Vec<f64> = stamps.windows(2).map(|w| (w[1] - w[0]) * 1e6).collect();
    gaps.sort_by(f64::total_cmp);
    let median = gaps[gaps.len() / 2];
    let tight = gaps.iter().filter(|g| **g < 20.0).count();
    assert!(
        (80.0..=120.0).contains(&median),
        "median gap {median:.1} µs (10 kpps: 100)"
    );
    // Bursts (a second's packets at once, or even a millisecond's) would
    // make nearly every gap tiny; a busy machine's catch-ups (a generator
    // descheduled for less than 1 ms sends what fell due meanwhile) make
    // some.
    assert!(
        tight * 2 < gaps.len(),
        "{tight} of {} gaps under 20 µs: bursts",
        gaps.len()
    );

    // The no-drop rate of the kernel router, two frame sizes and IMIX.
    let json = dir.join("ndr.json");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "ndr", "-s"])
        .arg(&sock)
        .args([
            "--sizes",
            "64,512,imix",
            "--trial",
            "0.3",
            "--resolution",
            "10",
        ])
        .args(["--latency-at", "50,100", "--max-rate", "300000", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{table}{log}");
    assert!(table.contains("NDR pps"), "{table}");
    let rs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    // The tester in the metrics, which Prometheus' linter accepts.
    let text = n.sh(
        t,
        "python3 -c \"import urllib.request; \
         print(urllib.request.urlopen('http://127.0.0.1:9310/metrics').read().decode())\"",
    );
    for want in [
        "sluice_tester_generated_packets_total{core=\"0\",outcome=\"made\"}",
        "sluice_tester_received_packets_total{core=\"0\",kind=\"signed\"}",
        "sluice_tester_latency_seconds_bucket",
        "sluice_tester_sending{core=\"0\"} 0",
    ] {
        assert!(text.contains(want), "no {want}: {text}");
    }
    if have("promtool") {
        promtool_accepts(&text);
    }
    let rs = rs.as_array().unwrap();
    assert_eq!(rs.len(), 3, "{table}");
    assert!(table.contains("\n  imix "), "{table}");
    let sizes = [
        serde_json::json!(64),
        serde_json::json!(512),
        serde_json::json!("imix"),
    ];
    for (r, size) in rs.iter().zip(sizes) {
        assert_eq!(r["size"], size);
        assert!(r["ndr_pps"].as_f64() > Some(0.0), "{r}\n{log}");
        let at = &r["at_ndr"];
        assert_eq!(at["pass"], true, "{r}");
        assert_eq!(at["loss"].as_f64(), Some(0.0), "{r}");
        assert_eq!(at["sent"], at["received"], "{r}");
        // The search keeps the highest passing rate: none passed above.
        let ndr_rate = at["rate"].as_f64().unwrap_or(300_000.0);
        for tr in r["search"].as_array().unwrap() {
            let rate = tr["rate"].as_f64().unwrap_or(300_000.0);
            if tr["pass"] == true {
                assert!(rate <= ndr_rate, "{tr} passed above the NDR: {r}");
            } else {
                assert!(tr["loss"].as_f64() > Some(0.0), "{tr}");
            }
        }
        let lat = r["latency"].as_array().unwrap();
        assert_eq!(lat.len(), 2, "{r}");
        for l in lat {
            assert!(l[1]["received"].as_u64() > Some(0), "{l}");
            assert!(l[1]["latency_ns"]["p50"].as_f64() > Some(0.0), "{l}");
        }
    }
}
