//! `sluice ctl capture` read back by Wireshark's `tshark`: a capture
//! replayed through Sluice comes out with the right number of packets,
//! each byte for byte one of the replayed frames, with wall-clock
//! nanosecond timestamps and the right direction; a tcpdump filter keeps
//! only what it matches; `-w -` pipes into tshark; dropped packets carry
//! their reason. Needs tshark
//! and tcpdump (`scripts/test.sh` installs them): without them it skips,
//! unless `CI` is set. Bounded in time; the instance is killed when the
//! test ends, passed or failed.

mod common;

use common::{have, Killed};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn ctl(sock: &Path, args: &[&str]) -> (bool, String) {
    let o = common::ctl(sock, args);
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// tshark's fields of every packet of `file`, tab-separated per line.
fn tshark(file: &Path, fields: &[&str]) -> Vec<String> {
    let mut c = Command::new("tshark");
    c.arg("-r").arg(file).args(["-T", "fields"]);
    for f in fields {
        c.args(["-e", f]);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Every packet's bytes as tshark dumps them (`-x`), in hex.
fn tshark_bytes(file: &Path) -> Vec<String> {
    let o = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .arg("-x")
        .output()
        .unwrap();
    assert!(o.status.success());
    let mut packets = Vec::new();
    let mut cur = String::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        // `0010  00 34 e1 f3 ...   ascii`: an offset, then up to 16 bytes.
        let Some((off, rest)) = line.split_once("  ") else {
            if !cur.is_empty() {
                packets.push(std::mem::take(&mut cur));
            }
            continue;
        };
        if off.len() != 4 || !off.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        if off == "0000" && !cur.is_empty() {
            packets.push(std::mem::take(&mut cur));
        }
        for b in rest.split_whitespace().take(16) {
            if b.len() == 2 && b.bytes().all(|c| c.is_ascii_hexdigit()) {
                cur.push_str(b);
            } else {
                break;
            }
        }
    }
    if !cur.is_empty() {
        packets.push(cur);
    }
    packets
}

/// Starts `mode` forwarding from a replayed capture (`in`) to a sink
/// (`out`), with a control socket; returns it, the socket and the frames.
fn start(name: &str, mode: &str) -> Option<(Killed, PathBuf, PathBuf, Vec<Vec<u8>>)> {
    let capture = testdata::shared("pcaps/tcpdump_tests")?.join("ssh.pcap");
    let frames = pmd::pcap::read_frames(&capture).unwrap();
    let dir = common::fresh_dir(&format!("cap-{name}"));
    let cfg = dir.join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[run]
duration = 0

[management]
socket = "ctl.sock"

[[port]]
name = "in"
driver = "pcap"
ipv4 = ["198.18.0.1/24"]
[port.pcap]
rx_file = "{}"
loops = 0

[[port]]
name = "out"
driver = "pcap"
ipv4 = ["198.19.0.1/24"]

[[worker]]
core = 1
mode = "{mode}"
rx = ["in", "out"]
"#,
            capture.display()
        ),
    )
    .unwrap();
    let (run, sock) = run(&dir, &cfg);
    Some((run, dir, sock, frames))
}

/// Runs `cfg` (its control socket `ctl.sock` in `dir`) until killed;
/// returns it once the socket is there.
fn run(dir: &Path, cfg: &Path) -> (Killed, PathBuf) {
    let sock = dir.join("ctl.sock");
    let run = Killed(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .arg(cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    common::wait_for(&sock);
    (run, sock)
}

#[test]
fn tshark_reads_what_was_forwarded() {
    if !have("tshark") || !have("tcpdump") {
        return;
    }
    let Some((_run, dir, sock, frames)) = start("io", "io") else {
        return;
    };
    let known: HashSet<String> = frames.iter().map(|f| hex(f)).collect();
    let file = dir.join("rx.pcapng");
    let (ok, out) = ctl(
        &sock,
        &[
            "capture",
            "--port",
            "in",
            "--count",
            "200",
            "-w",
            file.to_str().unwrap(),
        ],
    );
    assert!(ok, "{out}");
    assert!(out.contains("done: 200 packets"), "{out}");
    let rows = tshark(
        &file,
        &[
            "frame.time_epoch",
            "frame.packet_flags_direction",
            "frame.interface_name",
        ],
    );
    assert_eq!(rows.len(), 200);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for r in &rows {
        let f: Vec<&str> = r.split('\t').collect();
        let t: f64 = f[0].parse().unwrap();
        assert!((now - t).abs() < 120.0, "timestamp {t} vs now {now}");
        assert!(
            f[0].split('.').nth(1).is_some_and(|d| d.len() == 9),
            "ns: {}",
            f[0]
        );
        assert_eq!(f[1], "0x00000001", "inbound");
        assert_eq!(f[2], "in");
    }
    // Every packet is byte for byte a replayed frame.
    let data = tshark_bytes(&file);
    assert_eq!(data.len(), 200);
    assert!(data.iter().all(|d| known.contains(d)), "{:?}", &data[..2]);

    // Sent on `out`: unchanged in io mode, outbound.
    let file = dir.join("tx.pcapng");
    let (ok, out) = ctl(
        &sock,
        &[
            "capture",
            "--port",
            "out",
            "--direction",
            "tx",
            "--count",
            "50",
            "-w",
            file.to_str().unwrap(),
        ],
    );
    assert!(ok, "{out}");
    let rows = tshark(&file, &["frame.packet_flags_direction"]);
    assert_eq!(rows.len(), 50);
    assert!(rows.iter().all(|r| r == "0x00000002"), "{rows:?}");
    assert!(tshark_bytes(&file).iter().all(|d| known.contains(d)));

    // A tcpdump filter: only SYNs, as tcpdump would pick them.
    let file = dir.join("syn.pcapng");
    let (ok, out) = ctl(
        &sock,
        &[
            "capture",
            "--port",
            "in",
            "--count",
            "5",
            "--filter",
            "tcp[tcpflags] & tcp-syn != 0",
            "-w",
            file.to_str().unwrap(),
        ],
    );
    assert!(ok, "{out}");
    let rows = tshark(&file, &["tcp.flags.syn"]);
    assert_eq!(rows.len(), 5);
    assert!(
        rows.iter().all(|r| r.trim() == "1" || r.trim() == "True"),
        "{rows:?}"
    );

    // `-w -`: the pcapng on stdout, for a pipe into tshark.
    let piped = dir.join("piped.pcapng");
    let o = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("ctl")
        .arg("-s")
        .arg(&sock)
        .args(["capture", "--port", "in", "--count", "30", "-w", "-"])
        .stdout(std::fs::File::create(&piped).unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = Command::new("sh")
        .arg("-c")
        .arg(format!("tshark -r - < {} | wc -l", piped.display()))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&t.stdout).trim(), "30");
    // The relay file (beside the socket) is gone, and not named.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("done: 30 packets to standard output"), "{err}");
    let relays = std::fs::read_dir(sock.parent().unwrap())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("sluice-capture-")
        })
        .count();
    assert_eq!(relays, 0);
    // Nothing running: said so, with how the last one ended.
    let (ok, out) = ctl(&sock, &["capture", "status"]);
    assert!(
        ok && out.starts_with("no capture running; the last one: done: 30 packets"),
        "{out}"
    );
    let (ok, out) = ctl(&sock, &["capture", "--port", "in", "-w", "-"]);
    assert!(!ok && out.contains("needs --count or --duration"), "{out}");

    // Refusals.
    let (ok, out) = ctl(&sock, &["capture", "--port", "nope", "-w", "/tmp/x.pcapng"]);
    assert!(!ok && out.contains("no port `nope`"), "{out}");
    let (ok, out) = ctl(
        &sock,
        &[
            "capture",
            "--port",
            "in",
            "--filter",
            "tcp[[",
            "-w",
            "/tmp/x.pcapng",
        ],
    );
    assert!(!ok && out.contains("filter"), "{out}");
    let (ok, out) = ctl(&sock, &["capture", "--port", "in"]);
    assert!(!ok && out.contains("-w FILE is required"), "{out}");
    // An open-ended capture, stopped by hand.
    let file = dir.join("open.pcapng");
    let (ok, out) = ctl(
        &sock,
        &["capture", "--port", "in", "-w", file.to_str().unwrap()],
    );
    assert!(ok && out.contains("capture stop"), "{out}");
    std::thread::sleep(Duration::from_millis(200));
    let (ok, out) = ctl(&sock, &["capture", "stop"]);
    assert!(ok && out.contains("done:"), "{out}");
    assert!(!tshark(&file, &["frame.number"]).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dropped_packets_carry_their_reason() {
    if !have("tshark") || !have("tcpdump") {
        return;
    }
    // The router drops the replayed frames (they are not addressed to its
    // ports' MACs).
    let Some((_run, dir, sock, _)) = start("drop", "l3fwd") else {
        return;
    };
    let file = dir.join("drop.pcapng");
    let (ok, out) = ctl(
        &sock,
        &[
            "capture",
            "--port",
            "in",
            "--direction",
            "drop",
            "--count",
            "20",
            "-w",
            file.to_str().unwrap(),
        ],
    );
    assert!(ok, "{out}");
    let rows = tshark(&file, &["frame.comment"]);
    assert_eq!(rows.len(), 20);
    assert!(rows.iter().all(|r| r.starts_with("dropped: ")), "{rows:?}");
    assert!(rows.iter().any(|r| r.contains("not_for_us")), "{rows:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--queue N`: a port of two RX queues, each polled by its own io
/// worker, offered one flow, which RSS puts on one queue: a capture of
/// that queue takes its packets, one of the other queue takes none (over
/// a second); sent packets are taken by the TX queue they left by; a
/// queue the port does not have is refused.
#[test]
fn a_capture_of_one_queue_takes_only_that_queues_packets() {
    if !have("tshark") || !have("tcpdump") {
        return;
    }
    let dir = common::fresh_dir("cap-queue");
    let cfg = dir.join("q.toml");
    let port = |name: &str, n: u8, rate: u32| {
        format!(
            r#"
[[port]]
name = "{name}"
driver = "softnic"
rxq = 2
txq = 2
mac = "02:51:00:00:00:0{n}"
peer_mac = "02:5e:00:00:00:0{n}"
[port.softnic]
rate = {rate}
flows = 1
src_ip = "198.18.0.1/32"
dst_ip = "198.19.0.1/32"
"#
        )
    };
    let text = format!(
        r#"
[run]
duration = 0

[management]
socket = "ctl.sock"

[generator]
core = 0
{}{}
[[worker]]
core = 0
mode = "io"
rx = ["p0:0", "p1:0"]

[[worker]]
core = 1
mode = "io"
rx = ["p0:1", "p1:1"]
"#,
        port("p0", 0, 20_000),
        port("p1", 1, 1)
    );
    std::fs::write(&cfg, text).unwrap();
    let (_run, sock) = run(&dir, &cfg);
    std::thread::sleep(Duration::from_millis(500));
    let q = common::ctl_json(&sock, &["show", "queues"]);
    let p0: Vec<(u64, u64)> = q["queues"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["port"] == "p0")
        .map(|q| (q["queue"].as_u64().unwrap(), q["rx_pkts"].as_u64().unwrap()))
        .collect();
    assert_eq!(p0.len(), 2, "{q}");
    let busy = p0
        .iter()
        .find(|(_, n)| *n > 0)
        .expect("one queue has the flow")
        .0;
    assert!(
        p0.iter().any(|&(q, n)| q != busy && n == 0),
        "one flow, one queue: {p0:?}"
    );
    let (busy, idle) = (busy.to_string(), (1 - busy).to_string());
    // Packets a capture of `args` wrote.
    let take = |name: &str, args: &[&str]| {
        let file = dir.join(name);
        let mut a = vec!["capture"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-w", file.to_str().unwrap()]);
        let (ok, out) = ctl(&sock, &a);
        assert!(ok, "{out}");
        tshark(&file, &["frame.interface_name"]).len()
    };
    let (count, second) = (["--count", "20"], ["--duration", "1"]);
    let rx = |q: &str, until: [&str; 2]| {
        let a = ["--port", "p0", "--queue", q, until[0], until[1]];
        take(&format!("rx-{q}.pcapng"), &a)
    };
    assert_eq!(rx(&busy, count), 20);
    assert_eq!(rx(&idle, second), 0);
    // Sent on p1: by the TX queue of the worker polling the busy queue
    // (worker N sends on TX queue N).
    let tx = |q: &str, until: [&str; 2]| {
        let a = [
            "--port",
            "p1",
            "--direction",
            "tx",
            "--queue",
            q,
            until[0],
            until[1],
        ];
        take(&format!("tx-{q}.pcapng"), &a)
    };
    assert_eq!(tx(&busy, count), 20);
    assert_eq!(tx(&idle, second), 0);
    let (ok, out) = ctl(
        &sock,
        &[
            "capture",
            "--port",
            "p0",
            "--queue",
            "2",
            "-w",
            "/tmp/x.pcapng",
        ],
    );
    assert!(!ok && out.contains("queue 2 does not exist"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}
