//! The management plane under attack, as a local user or a careless
//! operator would try it (the held-out campaign's findings, kept): each
//! test runs `sluice run --json` forwarding softnic traffic with its
//! metrics endpoint and control socket open, attacks one of them, and
//! asserts that (1) other clients are still answered, promptly, (2) the
//! period reports kept coming, (3) the process did not grow threads or
//! memory without bound, and (4) the run ends with a balanced summary
//! (every packet accounted for). Bounded in time; sluice is killed however
//! the test ends.

mod common;

use common::{fresh_dir, have, Killed};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Seconds between reports.
const PERIOD: f64 = 0.5;

/// The longest two reports may be apart under attack (the period is 0.5 s;
/// this allows for a busy CI machine, while a hung management thread, as
/// before, sends none at all).
const MAX_GAP: Duration = Duration::from_secs(3);

/// How long a client that asks properly may wait for its answer.
const PROMPT: Duration = Duration::from_secs(3);

/// One attack at a time: each runs a sluice, and CI has two cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

struct Sluice {
    child: Option<Killed>,
    addr: String,
    sock: PathBuf,
    dir: PathBuf,
    /// When each line of stdout (a report, then the summary) came.
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

fn config(dir: &Path) -> String {
    format!(
        r#"
[run]
duration = 0
stats_period = {PERIOD}

[management]
metrics = "127.0.0.1:0"
socket = "{}"

[[port]]
name = "p0"
driver = "softnic"
mac = "02:51:00:00:00:00"
peer_mac = "02:5e:00:00:00:00"
[port.softnic]
rate = 20000
flows = 64

[[port]]
name = "p1"
driver = "softnic"
mac = "02:51:00:00:00:01"
peer_mac = "02:5e:00:00:00:01"
[port.softnic]
rate = 1000

[[worker]]
core = 0
mode = "io"
rx = ["p0", "p1"]
"#,
        dir.join("ctl.sock").display()
    )
}

impl Sluice {
    /// Starts sluice in a fresh directory `name`; with `files`, under that
    /// limit of open files (soft and hard: it cannot raise it).
    fn start(name: &str, files: Option<u32>) -> Sluice {
        let dir = fresh_dir(name);
        let cfg = dir.join("s.toml");
        std::fs::write(&cfg, config(&dir)).unwrap();
        Self::start_with(dir, &cfg, files)
    }

    fn start_with(dir: PathBuf, cfg: &Path, files: Option<u32>) -> Sluice {
        let bin = env!("CARGO_BIN_EXE_sluice");
        let mut cmd = match files {
            Some(n) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" run \"$1\" --json"))
                    .arg(bin)
                    .arg(cfg);
                c
            }
            None => {
                let mut c = Command::new(bin);
                c.arg("run").arg(cfg).arg("--json");
                c
            }
        };
        let (child, out, addr) = common::spawn_with_metrics(&mut cmd);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                l.lock().unwrap().push((Instant::now(), line));
            }
        });
        let sock = dir.join("ctl.sock");
        common::wait_for(&sock);
        let s = Sluice {
            child: Some(child),
            addr,
            sock,
            dir,
            lines,
            reader: Some(reader),
        };
        // Up and answering, every thread started, before the attack.
        s.scraped();
        s.ctl_answers();
        std::thread::sleep(Duration::from_millis(200));
        s
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().0.id()
    }

    /// A field of /proc/PID/status (`Threads`, `VmRSS` in kB).
    fn status(&self, field: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in {s}"))
    }

    fn alive(&self) -> bool {
        std::fs::metadata(format!("/proc/{}", self.pid())).is_ok()
            && !std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
                .unwrap_or_default()
                .contains(") Z ")
    }

    /// A scrape, answered 200 with the counters, within [`PROMPT`].
    fn scraped(&self) {
        let t = Instant::now();
        let (status, body) = common::http_get(&self.addr, "/metrics");
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("sluice_"), "{body}");
        assert!(t.elapsed() < PROMPT, "a scrape took {:?}", t.elapsed());
    }

    /// `sluice ctl show ports`, answered within [`PROMPT`].
    fn ctl_answers(&self) {
        let t = Instant::now();
        let o = common::ctl(&self.sock, &["show", "ports"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(t.elapsed() < PROMPT, "ctl took {:?}", t.elapsed());
    }

    /// Other clients are answered, and reports kept coming since `from`.
    fn unharmed(&self, from: Instant) {
        assert!(self.alive(), "sluice died");
        self.scraped();
        self.ctl_answers();
        let now = Instant::now();
        let lines = self.lines.lock().unwrap();
        let mut times: Vec<Instant> = lines
            .iter()
            .map(|(t, _)| *t)
            .filter(|t| *t >= from)
            .collect();
        times.insert(0, from);
        times.push(now);
        let gap = times.windows(2).map(|w| w[1] - w[0]).max().unwrap();
        assert!(gap < MAX_GAP, "no report for {gap:?}");
    }

    /// Stops it with SIGINT; its summary must balance.
    fn stop(mut self) -> serde_json::Value {
        common::signal(self.child.as_ref().unwrap(), "-INT");
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let code = loop {
            if let Some(s) = child.0.try_wait().unwrap() {
                break s.code();
            }
            assert!(Instant::now() < deadline, "sluice did not stop on SIGINT");
            std::thread::sleep(Duration::from_millis(20));
        };
        self.reader.take().unwrap().join().unwrap();
        let lines = self.lines.lock().unwrap();
        let summary = &lines.last().expect("a summary").1;
        let s: serde_json::Value = serde_json::from_str(summary).unwrap();
        assert_eq!(code, Some(0), "{s}");
        assert_eq!(s["balance"]["balanced"], true, "{s}");
        let _ = std::fs::remove_dir_all(&self.dir);
        s
    }
}

/// Connections to the metrics endpoint that send nothing, as many as the
/// descriptor limit allows and more: sluice under a 1,024-file limit (it
/// used to panic in tiny_http at about 640, "Too many open files", and die
/// with every flow) keeps serving, with no thread per connection.
#[test]
fn descriptor_exhaustion_through_the_metrics_endpoint() {
    let _one = one_at_a_time();
    // This process needs more than sluice may have.
    pmd::sys::raise_nofile();
    let s = Sluice::start("attack-fds", Some(1024));
    let threads = s.status("Threads");
    let t0 = Instant::now();
    let mut idle = Vec::new();
    for _ in 0..1500 {
        match TcpStream::connect(&s.addr) {
            Ok(c) => idle.push(c),
            Err(_) => break, // this process's own limit
        }
    }
    assert!(idle.len() >= 1000, "only {} connections made", idle.len());
    std::thread::sleep(Duration::from_millis(500));
    s.unharmed(t0);
    assert_eq!(
        s.status("Threads"),
        threads,
        "threads grew with connections"
    );
    drop(idle);
    s.stop();
}

/// Slowloris: 500 connections each sending a header a byte at a time.
/// Other scrapes and ctl clients are answered meanwhile, no thread is
/// spawned for them, and none is left behind.
#[test]
fn slowloris_on_the_metrics_endpoint() {
    let _one = one_at_a_time();
    let s = Sluice::start("attack-slowloris", None);
    let threads = s.status("Threads");
    let t0 = Instant::now();
    let mut slow: Vec<TcpStream> = (0..500)
        .filter_map(|_| TcpStream::connect(&s.addr).ok())
        .collect();
    for c in &mut slow {
        let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ");
    }
    for round in 0..4 {
        for c in &mut slow {
            let _ = c.write_all(b"a");
        }
        std::thread::sleep(Duration::from_millis(500));
        if round % 2 == 1 {
            s.scraped();
        }
    }
    s.unharmed(t0);
    assert_eq!(s.status("Threads"), threads);
    drop(slow);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.status("Threads"), threads);
    s.stop();
}

/// Scrapers that ask and never read their answers do not hold up the
/// others (one used to block every scrape).
#[test]
fn stuck_scrapers_block_no_one() {
    let _one = one_at_a_time();
    let s = Sluice::start("attack-stuck", None);
    let t0 = Instant::now();
    let mut stuck: Vec<TcpStream> = (0..40)
        .filter_map(|_| TcpStream::connect(&s.addr).ok())
        .collect();
    for c in &mut stuck {
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..3 {
        s.scraped();
    }
    s.unharmed(t0);
    drop(stuck);
    s.stop();
}

/// One connection sending an endless header: cut at the request limit
/// (8 KiB), answered 431 or closed; sluice does not grow (it grew by
/// 500 MB).
#[test]
fn an_endless_header_is_cut() {
    let _one = one_at_a_time();
    let s = Sluice::start("attack-header", None);
    let rss = s.status("VmRSS");
    let t0 = Instant::now();
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nX-Long: ").unwrap();
    let chunk = vec![b'a'; 1 << 16];
    let mut sent = 0usize;
    while sent < 64 << 20 {
        match c.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = Vec::new();
    let _ = c.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );
    let grown = s.status("VmRSS").saturating_sub(rss);
    assert!(grown < 32 * 1024, "grew by {grown} kB");
    s.unharmed(t0);
    s.stop();
}

/// Sixteen ctl clients trickling a byte every 500 ms (each read on time,
/// the request never done) used to keep every other client out
/// indefinitely: the deadline is per request now, and a client with a
/// whole request takes the place of the oldest trickler.
#[test]
fn trickling_ctl_clients_keep_no_one_out() {
    let _one = one_at_a_time();
    let s = Sluice::start("attack-trickle", None);
    let t0 = Instant::now();
    let mut slow: Vec<UnixStream> = (0..16)
        .map(|_| UnixStream::connect(&s.sock).unwrap())
        .collect();
    for round in 0..6 {
        for c in &mut slow {
            let _ = c.write_all(b" ");
        }
        std::thread::sleep(Duration::from_millis(500));
        if round % 2 == 0 {
            s.ctl_answers();
        }
    }
    s.unharmed(t0);
    drop(slow);
    s.stop();
}

/// Capture targets that are not a new regular file: a FIFO (it used to
/// hang the management thread until someone read it), a device
/// (`/dev/full`), a symlink planted at the path (followed and truncated,
/// as root any file on the machine), an existing file. Each is refused at
/// once, naming why, and nothing is written through it.
#[test]
fn capture_targets_that_are_not_new_files_are_refused() {
    let _one = one_at_a_time();
    let s = Sluice::start("attack-capture", None);
    let t0 = Instant::now();
    let fifo = s.dir.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let victim = s.dir.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let link = s.dir.join("link.pcapng");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    for target in [
        fifo.as_path(),
        Path::new("/dev/full"),
        link.as_path(),
        victim.as_path(),
    ] {
        let t = Instant::now();
        let o = common::ctl(
            &s.sock,
            &[
                "capture",
                "--port",
                "p0",
                "--count",
                "5",
                "-w",
                target.to_str().unwrap(),
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{target:?}: {err}");
        assert!(err.contains("exists"), "{target:?}: {err}");
        assert!(t.elapsed() < PROMPT, "{target:?}: {:?}", t.elapsed());
        s.ctl_answers();
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    // A new file still works.
    let good = s.dir.join("good.pcapng");
    let o = common::ctl(
        &s.sock,
        &[
            "capture",
            "--port",
            "p0",
            "--count",
            "5",
            "-w",
            good.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("done: 5 packets"));
    s.unharmed(t0);
    s.stop();
}

/// A capture filter libpcap would take minutes over (1,000 ports): the
/// client is told so within the limit, the management thread answers
/// others meanwhile, and no capture starts later.
#[test]
fn a_slow_capture_filter_is_refused_in_time() {
    let _one = one_at_a_time();
    if !have("tcpdump") {
        return;
    }
    let s = Sluice::start("attack-filter", None);
    let t0 = Instant::now();
    let filter = (1..=1000)
        .map(|p| format!("port {p}"))
        .collect::<Vec<_>>()
        .join(" or ");
    let file = s.dir.join("slow.pcapng");
    let (sock, f) = (s.sock.clone(), file.clone());
    let asker = std::thread::spawn(move || {
        let t = Instant::now();
        let o = common::ctl(
            &sock,
            &[
                "capture",
                "--port",
                "p0",
                "--filter",
                &filter,
                "-w",
                f.to_str().unwrap(),
            ],
        );
        (o, t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    s.scraped();
    s.ctl_answers();
    let (o, took) = asker.join().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("did not compile it within"),
        "{err}"
    );
    assert!(took < Duration::from_secs(6), "{took:?}");
    std::thread::sleep(Duration::from_secs(1));
    let st = common::ctl(&s.sock, &["--json", "capture", "status"]);
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap_or_default();
    assert_ne!(st["running"], true, "{st}");
    assert!(!file.exists(), "the capture started later anyway");
    s.unharmed(t0);
    s.stop();
}

/// A lock file path with a symlink planted by someone else: sluice
/// refuses to start (exit 2, naming it) and the symlink's target keeps its
/// contents (it used to be truncated).
#[test]
fn a_symlink_planted_at_the_lock_is_refused() {
    let _one = one_at_a_time();
    let dir = fresh_dir("attack-lock");
    let cfg = dir.join("s.toml");
    std::fs::write(&cfg, config(&dir)).unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("ctl.sock.lock")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("run")
        .arg(&cfg)
        .arg("--duration")
        .arg("1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("is a symlink"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A reload racing a config swapped for a FIFO (it used to block the build
/// thread for good, refusing every later reload): refused at once, and
/// the next reload of the real file goes through.
#[test]
fn a_reload_of_a_fifo_is_refused_and_the_next_one_works() {
    let _one = one_at_a_time();
    let dir = fresh_dir("attack-reload");
    let cfg = dir.join("s.toml");
    std::fs::write(&cfg, config(&dir)).unwrap();
    let s = Sluice::start_with(dir.clone(), &cfg, None);
    let t0 = Instant::now();
    let real = dir.join("real.toml");
    std::fs::rename(&cfg, &real).unwrap();
    assert!(Command::new("mkfifo").arg(&cfg).status().unwrap().success());
    let t = Instant::now();
    let o = common::ctl(&s.sock, &["reload"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && (err.contains("not a file") || err.contains("not a regular file")),
        "{err}"
    );
    assert!(t.elapsed() < PROMPT, "{:?}", t.elapsed());
    std::fs::remove_file(&cfg).unwrap();
    std::fs::rename(&real, &cfg).unwrap();
    let o = common::ctl(&s.sock, &["reload"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    s.unharmed(t0);
    s.stop();
}

/// Garbage at both endpoints, many times over (random bytes, truncated
/// and oversized requests, binary JSON): nothing panics (the release
/// build aborts on a panic, so sluice would die), everyone asking
/// properly is answered.
#[test]
fn garbage_at_every_endpoint_panics_nothing() {
    let _one = one_at_a_time();
    let s = Sluice::start("attack-garbage", None);
    let t0 = Instant::now();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let fixed: [&[u8]; 10] = [
        b"\r\n\r\n",
        b"GET\r\n\r\n",
        b"GET /metrics HTTP/9.9\r\n\r\n",
        b"POST /metrics HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",
        b"GET /metrics?x=\xff\xfe HTTP/1.1\r\n\r\n",
        b"{\"args\": []}\n",
        b"{\"args\": [\"\\u0000\", \"\xff\"]}\n",
        b"{\"args\": [\"show\", \"flows\", \"--limit\", \"99999999999999999999\"]}\n",
        b"{\"args\": [\"capture\", \"--port\"]}\n",
        b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n",
    ];
    for i in 0..400 {
        let mut bytes: Vec<u8> = if i < 40 {
            fixed[i % fixed.len()].to_vec()
        } else {
            let n = (rand() % 300) as usize;
            (0..n).map(|_| rand() as u8).collect()
        };
        if i % 3 == 0 {
            bytes.push(b'\n');
        }
        if i % 2 == 0 {
            if let Ok(mut c) = TcpStream::connect(&s.addr) {
                let _ = c.write_all(&bytes);
                let _ = c.shutdown(std::net::Shutdown::Write);
            }
        } else if let Ok(mut c) = UnixStream::connect(&s.sock) {
            let _ = c.write_all(&bytes);
            let _ = c.shutdown(std::net::Shutdown::Write);
        }
    }
    s.unharmed(t0);
    s.stop();
}

/// Every ctl command with garbage arguments (out-of-range numbers, NULs,
/// huge words, wrong addresses, flags without values), on the shipped
/// gateway (so that the router, conntrack and NAT handlers answer):
/// nothing panics, each is answered (refused, mostly) in time, and the
/// run balances.
#[test]
fn every_ctl_command_with_garbage_arguments() {
    let _one = one_at_a_time();
    let dir = fresh_dir("attack-ctl-garbage");
    let cfg = dir.join("s.toml");
    let text = common::shipped_gateway(2000).replacen(
        "[run]\n",
        &format!(
            "[management]\nmetrics = \"127.0.0.1:0\"\nsocket = \"{}\"\n\n[run]\n",
            dir.join("ctl.sock").display()
        ),
        1,
    );
    std::fs::write(&cfg, text).unwrap();
    let s = Sluice::start_with(dir, &cfg, None);
    let t0 = Instant::now();
    let commands: [&[&str]; 17] = [
        &["stats"],
        &["show", "ports"],
        &["show", "cores"],
        &["show", "queues"],
        &["show", "routes"],
        &["show", "neighbors"],
        &["show", "rules"],
        &["show", "conntrack"],
        &["show", "nat"],
        &["show", "runtime"],
        &["clear", "conntrack"],
        &["set", "poll"],
        &["set", "runtime"],
        &["capture"],
        &["route", "add"],
        &["neighbor", "add"],
        &["gen", "start"],
    ];
    let garbage = [
        "",
        "-1",
        "0",
        "99999999999999999999999",
        "1e-300",
        "nan",
        "inf",
        "\u{0}\u{0}",
        "\u{1b}[2J",
        "--limit",
        "--count",
        "--port",
        "src",
        "198.18.0.0/99",
        "::/129",
        "300.1.1.1",
        "via",
        "port",
        "p0",
        "on",
        "busy_poll_us=99999999999999",
        "-w",
        "relative.pcapng",
    ];
    let long = "x".repeat(60_000);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed as usize
    };
    for i in 0..600 {
        let mut args: Vec<String> = commands[i % commands.len()]
            .iter()
            .map(|w| w.to_string())
            .collect();
        for _ in 0..rand() % 5 {
            args.push(garbage[rand() % garbage.len()].to_string());
        }
        if i % 97 == 0 {
            args.push(long.clone());
        }
        let mut c = UnixStream::connect(&s.sock).unwrap();
        c.set_read_timeout(Some(PROMPT)).unwrap();
        let line = serde_json::json!({ "args": args }).to_string() + "\n";
        c.write_all(line.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = BufReader::new(c).read_line(&mut answer);
        let v: serde_json::Value = serde_json::from_str(&answer)
            .unwrap_or_else(|e| panic!("{args:?}: no answer ({e}): {answer:?}"));
        assert!(v["ok"].is_boolean(), "{args:?}: {v}");
    }
    s.unharmed(t0);
    s.stop();
}
