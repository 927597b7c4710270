//! Shared by the end-to-end tests: run a config in-process, one run at a
//! time (runs share the machine's two cores); run `sluice` as a process
//! (killed however the test ends) and talk to it with `sluice ctl`; the
//! tester modes' input. Each test crate uses a part of it.
#![allow(dead_code)]

use appliance::config;
use appliance::telemetry::Report;
use pipeline::checksum;
use pipeline::wire::Ipv4Packet;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `text` as a config; returns the period reports and the summary.
pub fn run(text: &str) -> (Vec<Report>, Report) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = config::parse(text, "test.toml", None).unwrap_or_else(|e| panic!("{e}"));
    let stop = AtomicBool::new(false);
    let mut periods = Vec::new();
    let summary = appliance::app::run(&cfg, &stop, &mut |r| periods.push(r.clone())).unwrap();
    (periods, summary)
}

/// A child process killed when dropped (the test passed or failed).
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A child asked to stop (SIGTERM) when dropped, and killed only if it
/// has not within 5 s: for a daemon whose own children outlive a SIGKILL
/// of it (keepalived's VRRP and checker processes, which a killed
/// keepalived left running after the test).
#[allow(dead_code)] // Not every test binary runs one.
pub struct Stopped(pub Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        if !matches!(self.0.try_wait(), Ok(None)) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if !matches!(self.0.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An empty directory of this test process's own under the temporary
/// directory, `sluice-NAME-PID` (one left by an earlier run removed).
#[allow(dead_code)] // Not every test binary makes one.
pub fn fresh_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `python3 script` running in namespace `ns` (its output discarded),
/// killed when dropped.
#[allow(dead_code)] // Not every test binary runs one.
pub fn python_in(ns: &str, script: &Path) -> Killed {
    Killed(
        Command::new("ip")
            .args(["netns", "exec", ns, "python3"])
            .arg(script)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// Whether `tool` is installed; when it is not, the test skips (with a
/// message), except in CI, which has it (`scripts/test.sh` installs it).
pub fn have(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{tool} is missing (scripts/test.sh installs it)"
        );
        eprintln!("skipping: {tool} is not installed");
    }
    found
}

/// Waits (up to 30 s) for a running sluice to create `path` (its control
/// socket).
pub fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `sluice ctl -s SOCK ARGS...`.
pub fn ctl(sock: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("ctl")
        .arg("-s")
        .arg(sock)
        .args(args)
        .output()
        .unwrap()
}

/// The tester modes' input, addressed to `port_mac`: per round of 8, an ARP
/// request, an ICMP echo request (to a host on even rounds, to a group on
/// odd ones) and a UDP packet whose checksum field holds the round number
/// (so 7 of the 8 are bad).
pub fn tester_requests(port_mac: [u8; 6]) -> Vec<Vec<u8>> {
    const HOST: [u8; 6] = [2, 0x5e, 0, 0, 0, 1];
    let mut out = Vec::new();
    for i in 0..8u8 {
        let mut arp = vec![0xff; 6];
        arp.extend_from_slice(&HOST);
        arp.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
        arp.extend_from_slice(&HOST);
        arp.extend_from_slice(&[198, 18, 0, 2, 0, 0, 0, 0, 0, 0, 198, 18, 0, 10 + i]);
        arp.resize(60, 0);
        out.push(arp);
        for proto in [1u8, 17] {
            let mut f = vec![0u8; 14 + 20 + 24];
            f[0..6].copy_from_slice(&port_mac);
            f[6..12].copy_from_slice(&HOST);
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            {
                let mut ip = Ipv4Packet::new_unchecked(&mut f[14..34]);
                ip.set_version_ihl(20);
                ip.set_total_len(44);
                ip.set_ident(u16::from(i));
                ip.set_ttl(64);
                ip.set_protocol(proto);
                ip.set_src([198, 18, 0, 2]);
                ip.set_dst(if i % 2 == 0 {
                    [198, 18, 0, 1]
                } else {
                    [224, 0, 0, 1]
                });
                ip.fill_checksum();
            }
            f[34] = if proto == 1 { 8 } else { 0x03 };
            f[38..42].copy_from_slice(&[0, 7, 0, i]);
            f[42..58].copy_from_slice(b"sluice-echo-0000");
            if proto == 1 {
                let c = !checksum::fold(checksum::sum(&f[34..], 0));
                f[36..38].copy_from_slice(&c.to_be_bytes());
            }
            out.push(f);
        }
    }
    out
}

/// Writes `frames` to a pcap file.
pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    use pcap_file::pcap::{PcapPacket, PcapWriter};
    let mut w = PcapWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    for f in frames {
        w.write_packet(&PcapPacket::new(Duration::ZERO, f.len() as u32, f))
            .unwrap();
    }
}

/// Every packet offered was delivered, or dropped by the RX ring
/// (`rx_missed`), never by a stage or for want of a route. Ring drops are
/// allowed only when the machine was visibly busy: the generator counted
/// packets it could not offer on time, a worker spent wall time busy that
/// its own CPU clock did not see (it was preempted mid-burst), or a
/// `timer` worker's tick overran into the next one (a tick's few hundred
/// packets take microseconds of a 2 ms tick: only a worker held off its
/// CPU is late). A worker starved of CPU by other work overflows its ring
/// like a NIC's; and the software NIC's wire, starved as its generator
/// is, leaves the TX ring full (`tx_full`), the same ring drop the other
/// way. Even then a quarter must get through (a policy that never woke
/// would deliver nothing). On a quiet machine nothing may be missed.
pub fn delivered_all_but_missed(s: &Report, what: &str) {
    let b = s.balance.as_ref().expect("a summary has a balance");
    assert!(b.balanced, "{what}: {}", s.text());
    let starved = s
        .cores
        .iter()
        .any(|c| c.busy > c.cpu + 0.05 || c.late_ticks > 0);
    let busy = b.gen_late > 0 || starved;
    let tx_ring = if busy { b.tx_full } else { 0 };
    assert_eq!(
        b.delivered + b.rx_missed + tx_ring,
        b.offered,
        "{what}: lost other than at the rings: {}",
        s.text()
    );
    if !busy {
        assert_eq!(
            b.rx_missed,
            0,
            "{what}: missed on a quiet machine: {}",
            s.text()
        );
    }
    assert!(b.delivered * 4 >= b.offered, "{what}: {}", s.text());
}

/// Whether the tests run as root (network namespaces need it).
pub fn root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .is_some_and(|l| l.split_whitespace().nth(2) == Some("0"))
}

/// Network namespaces, deleted on drop (the test passed or failed).
pub struct Nets(pub Vec<String>);

impl Nets {
    /// Namespaces `PREFIX-NAME-PID`, IPv6 off (no stray ND or RS).
    pub fn new(prefix: &str, names: &[&str]) -> Nets {
        let tag = std::process::id();
        let n = Nets(
            names
                .iter()
                .map(|n| format!("{prefix}-{n}-{tag}"))
                .collect(),
        );
        for ns in &n.0 {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
            assert!(Command::new("ip")
                .args(["netns", "add", ns])
                .status()
                .unwrap()
                .success());
            n.sh(ns, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1");
            n.sh(ns, "sysctl -qw net.ipv6.conf.default.disable_ipv6=1");
        }
        n
    }

    /// Runs `cmd` in namespace `ns`; panics with its output on failure.
    pub fn sh(&self, ns: &str, cmd: &str) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "sh", "-c", cmd])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{ns}: {cmd}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Nets {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Whether a test that needs root can run: true as root; otherwise it
/// skips with a message, except in CI, where that is a failure.
pub fn as_root() -> bool {
    if root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "needs root (scripts/test.sh runs as root)"
    );
    eprintln!("skipped: needs root");
    false
}

impl Nets {
    /// The control-plane lab: namespaces `c` (client), `r` (router), `s`
    /// (server), veths `c0`—`r0` and `s0`—`r1`, the router's up. The
    /// kernel in `r` will own the router's addresses (on Sluice's TAPs),
    /// so it must not answer ARP on the AF_PACKET ports' own interfaces
    /// (`arp_ignore=8`).
    pub fn mirror_lab(prefix: &str) -> Nets {
        let n = Nets::new(prefix, &["c", "r", "s"]);
        let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
        n.veth("c0", c, "r0", r);
        n.veth("s0", s, "r1", r);
        n.sh(
            r,
            "ip link set r0 up && ip link set r1 up \
             && sysctl -qw net.ipv4.conf.r0.arp_ignore=8 net.ipv4.conf.r1.arp_ignore=8",
        );
        n
    }

    /// The lab's end hosts: `c0` in namespace `c` as 198.18.0.2/24 and
    /// `s0` in namespace `s` as 198.19.0.2/24, up, each routing through
    /// the router's address on its link (198.18.0.1, 198.19.0.1).
    #[allow(dead_code)] // Not every test binary has the lab's hosts.
    pub fn lab_hosts(&self, c: &str, s: &str) {
        self.sh(
            c,
            "ip link set c0 up && ip addr add 198.18.0.2/24 dev c0 \
             && ip route add default via 198.18.0.1",
        );
        self.sh(
            s,
            "ip link set s0 up && ip addr add 198.19.0.2/24 dev s0 \
             && ip route add default via 198.19.0.1",
        );
    }

    /// A veth pair: `a` in namespace `na`, `b` in namespace `nb`.
    pub fn veth(&self, a: &str, na: &str, b: &str, nb: &str) {
        let out = Command::new("ip")
            .args([
                "link", "add", a, "netns", na, "type", "veth", "peer", "name", b, "netns", nb,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "veth {a}/{b}: {out:?}");
    }
}

/// Stops a `sluice run --json` child (stdout and stderr piped) with
/// SIGINT, as an operator would; returns its summary (the last line it
/// printed), parsed, and what it printed on stderr.
pub fn stop_for_summary(mut child: Killed) -> (serde_json::Value, String) {
    use std::io::Read;
    let pid = child.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let (mut stdout, mut stderr) = (String::new(), String::new());
    if let Some(mut o) = child.0.stdout.take() {
        o.read_to_string(&mut stdout).unwrap();
    }
    if let Some(mut e) = child.0.stderr.take() {
        e.read_to_string(&mut stderr).unwrap();
    }
    let summary = stdout.lines().last().unwrap_or_default().to_string();
    let v = serde_json::from_str(&summary).unwrap_or_else(|e| panic!("{e}: {summary}: {stderr}"));
    (v, stderr)
}

/// Asserts that Prometheus' linter (`promtool check metrics`) accepts an
/// exposition text.
pub fn promtool_accepts(text: &str) {
    use std::io::Write;
    let mut lint = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    lint.stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let lint = lint.wait_with_output().unwrap();
    assert!(
        lint.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
}

/// `sluice run CFG` in network namespace `ns`, killed however the test
/// ends; returns once its control socket `sock` is up.
pub fn sluice_in(ns: &str, cfg: &Path, sock: &Path) -> Killed {
    let k = Killed(
        Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .arg(cfg)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(sock);
    k
}

/// `sluice run CFG --json` in network namespace `ns`, its output piped
/// (for [`stop_for_summary`]), killed however the test ends.
pub fn sluice_json_in(ns: &str, cfg: &Path) -> Killed {
    Killed(
        Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .arg(cfg)
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// `sluice ctl --json ARGS`, which must succeed; its answer.
pub fn ctl_json(sock: &Path, args: &[&str]) -> serde_json::Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let o = ctl(sock, &a);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Waits (up to `secs`) until `f` holds for `show routes ARGS`.
pub fn until_routes(sock: &Path, args: &[&str], secs: u64, f: impl Fn(&serde_json::Value) -> bool) {
    let mut a = vec!["show", "routes"];
    a.extend_from_slice(args);
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let r = ctl_json(sock, &a);
        if f(&r) {
            return;
        }
        assert!(Instant::now() < deadline, "show routes {args:?}: {r}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// GET `path` from `addr` (HTTP/1.0): status and body.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

/// The value of the sample `name{labels}` in a Prometheus exposition.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends signal `sig` (`"-TERM"`, `"-HUP"`) to `child` with kill(1).
pub fn signal(child: &Killed, sig: &str) {
    assert!(Command::new("kill")
        .args([sig, &child.0.id().to_string()])
        .status()
        .unwrap()
        .success());
}

/// The shipped gateway (`configs/gateway.toml`), running until stopped,
/// its LAN generator at `rate` packets per second.
pub fn shipped_gateway(rate: u32) -> String {
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/gateway.toml"
    ))
    .unwrap();
    let text = shipped
        .replacen("duration = 10", "duration = 0", 1)
        .replacen("rate = 200000", &format!("rate = {rate}"), 1);
    assert!(text.contains("duration = 0") && text.contains(&format!("rate = {rate}")));
    text
}

/// `sluice ctl` words adding a neighbour on the shipped gateway's p1
/// subnet that its config does not have.
pub const ADD_NEIGHBOR: [&str; 6] = [
    "neighbor",
    "add",
    "198.19.0.9",
    "02:00:00:00:00:09",
    "port",
    "p1",
];

/// Reads a starting `sluice run`'s stderr until it prints its metrics
/// address (`metrics: http://ADDR/metrics`) and returns ADDR; then keeps
/// draining stderr on a thread, so that sluice never blocks on it.
pub fn metrics_addr(mut err: std::io::BufReader<std::process::ChildStderr>) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        line.clear();
        if err.read_line(&mut line).unwrap() == 0 {
            panic!("sluice exited before listening");
        }
        if let Some(url) = line.trim().strip_prefix("metrics: http://") {
            let addr = url.trim_end_matches("/metrics").to_string();
            std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
            return addr;
        }
    }
    panic!("no metrics address printed");
}

/// Spawns `cmd` (a `sluice run ... --json`) with its output piped, killed
/// however the test ends; returns it, its stdout (the JSON reports) and
/// the metrics address it printed (see [`metrics_addr`]).
pub fn spawn_with_metrics(
    cmd: &mut Command,
) -> (
    Killed,
    std::io::BufReader<std::process::ChildStdout>,
    String,
) {
    let mut c = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = std::io::BufReader::new(c.stderr.take().unwrap());
    let out = std::io::BufReader::new(c.stdout.take().unwrap());
    let child = Killed(c);
    let addr = metrics_addr(err);
    (child, out, addr)
}

/// A TCP server (a Python script) on `addr` port 9000 that answers each
/// line with the address and port it came from, then the line: what the
/// NAT made of the client, line by line.
#[allow(dead_code)] // Not every test binary runs one.
pub fn peer_echo_server(addr: &str) -> String {
    r#"
import socket, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("BIND_TO", 9000))
s.listen(128)
def serve(c, a):
    f = c.makefile("rwb", buffering=0)
    try:
        for line in f:
            f.write(("%s:%d %s\n" % (a[0], a[1], line.decode().strip())).encode())
    except Exception:
        pass
while True:
    c, a = s.accept()
    threading.Thread(target=serve, args=(c, a), daemon=True).start()
"#
    .replace("BIND_TO", addr)
}

/// Writes `key` to a new file at `path`, mode 0600 (an HA pair's key).
#[allow(dead_code)] // Not every test binary makes one.
pub fn write_key(path: &Path, key: &[u8]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(key))
        .unwrap();
}

/// Waits until `f` holds, checking every 50 ms; fails naming `what`
/// after `secs` seconds.
#[allow(dead_code)] // Not every test binary waits so.
pub fn until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(secs), "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits up to 20 s for the child to exit (it is killed after that) and
/// returns its exit code and what it printed on stderr.
pub fn wait_with_stderr(mut child: Killed) -> (Option<i32>, String) {
    use std::io::Read;
    let mut e = child.0.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = e.read_to_string(&mut err);
        err
    });
    let mut code = None;
    for _ in 0..200 {
        if let Some(s) = child.0.try_wait().unwrap() {
            code = Some(s.code());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let code = code.unwrap_or_else(|| {
        let _ = child.0.kill();
        child.0.wait().unwrap().code()
    });
    (code, reader.join().unwrap())
}

/// BIRD in namespace `ns` with config `conf` (written to `DIR/NAME.conf`),
/// its control socket `DIR/NAME.ctl`, killed however the test ends.
#[allow(dead_code)] // Not every test binary runs one.
pub fn bird(ns: &str, dir: &Path, name: &str, conf: &str) -> Killed {
    let c = dir.join(format!("{name}.conf"));
    std::fs::write(&c, conf).unwrap();
    Killed(
        Command::new("ip")
            .args(["netns", "exec", ns, "bird", "-f", "-c"])
            .arg(&c)
            .arg("-s")
            .arg(dir.join(format!("{name}.ctl")))
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("bird in {ns}: {e}")),
    )
}

/// `birdc CMD` to the BIRD [`bird`] started as `name`: what it printed.
#[allow(dead_code)] // Not every test binary runs one.
pub fn birdc(ns: &str, dir: &Path, name: &str, cmd: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "birdc", "-s"])
        .arg(dir.join(format!("{name}.ctl")))
        .args(cmd.split_whitespace())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The flows to port 9000 (the tests' echo servers) in the first worker's
/// table of the Sluice at `sock` (at most 1,000 listed).
#[allow(dead_code)] // Not every test binary counts them.
pub fn conns_to_9000(sock: &Path) -> usize {
    let v = ctl_json(sock, &["show", "conntrack", "--limit", "1000"]);
    v["workers"][0]["tuples"].as_array().map_or(0, |t| {
        t.iter().filter(|f| f["orig"]["dport"] == 9000).count()
    })
}

/// The namespace lab's gateway (`Nets::mirror_lab`'s `r`): ports `inside`
/// (`r0`, 198.18.0.1/24) and `outside` (`r1`, 198.19.0.1/24) on
/// AF_PACKET, one l3fwd worker on interrupts, a firewall that lets new
/// flows in from inside only, the control socket at `sock`; `rest` (the
/// NAT rules, `[export]`, …) after them.
#[allow(dead_code)] // Not every test binary runs one.
pub fn lab_gateway(rest: &str, sock: &Path) -> String {
    format!(
        r#"
[run]
duration = 0
stats_period = 0.5

[[port]]
name = "inside"
driver = "afpacket"
ipv4 = ["198.18.0.1/24"]
[port.afpacket]
iface = "r0"

[[port]]
name = "outside"
driver = "afpacket"
ipv4 = ["198.19.0.1/24"]
[port.afpacket]
iface = "r1"

[[worker]]
core = 0
mode = "l3fwd"
rx = ["inside", "outside"]
[worker.poll]
mode = "interrupt"

[firewall]
default = "drop"

[[firewall.rule]]
action = "accept"
in = "inside"
state = ["new"]

[management]
socket = "{}"
{rest}"#,
        sock.display()
    )
}

/// A syslog receiver in namespace `ns` on 127.0.0.1 (a free port): each
/// datagram a line of `dir/syslog.txt`, until dropped. The receiver, its
/// port and the file.
pub fn syslog_in(ns: &str, dir: &Path) -> (Killed, u16, std::path::PathBuf) {
    const SYSLOG: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", int(sys.argv[1])))
f = open(sys.argv[2], "w", buffering=1)
while True:
    d, a = s.recvfrom(65535)
    f.write(d.decode() + "\n")
"#;
    local_listener(ns, dir, "syslog", SYSLOG, "syslog.txt")
}

/// Python `script` (`dir/NAME.py`) in namespace `ns`, given a free port
/// and `dir/out` as its arguments: it (killed when dropped), the port and
/// the path.
fn local_listener(
    ns: &str,
    dir: &Path,
    name: &str,
    script: &str,
    out: &str,
) -> (Killed, u16, std::path::PathBuf) {
    let port = free_port();
    let (path, out) = (dir.join(format!("{name}.py")), dir.join(out));
    std::fs::write(&path, script).unwrap();
    let k = Killed(
        Command::new("ip")
            .args(["netns", "exec", ns, "python3"])
            .arg(&path)
            .arg(port.to_string())
            .arg(&out)
            .spawn()
            .unwrap(),
    );
    // It opens its file once bound: what is sent from now on is kept
    // (an IPFIX exporter's templates go first, and only at start).
    wait_for(&out);
    (k, port, out)
}

/// `nfcapd` in namespace `ns` on 127.0.0.1 (a free port), writing into
/// `dir`: it and its port.
pub fn nfcapd_in(ns: &str, dir: &Path) -> (Killed, u16) {
    let port = free_port();
    let k = Killed(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "nfcapd",
                "-b",
                "127.0.0.1",
                "-t",
                "3600",
            ])
            .arg("-p")
            .arg(port.to_string())
            .arg("-w")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Its working file appears once it listens.
    until("nfcapd listens", 20, || {
        std::fs::read_dir(dir).is_ok_and(|mut d| {
            d.any(|e| {
                e.is_ok_and(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("nfcapd.current")
                })
            })
        })
    });
    (k, port)
}

/// Stops `nfcapd` (it writes its file as it stops: waited for) and reads
/// what it collected in `dir` with `nfdump`, as JSON records.
pub fn nfdump_after(nfcapd: Killed, dir: &Path) -> Vec<serde_json::Value> {
    signal(&nfcapd, "-TERM");
    let mut nfcapd = nfcapd;
    until("nfcapd stops", 20, || {
        nfcapd.0.try_wait().unwrap().is_some()
    });
    let out = Command::new("nfdump")
        .arg("-R")
        .arg(dir)
        .args(["-o", "json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "nfdump: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("nfdump's JSON: {e}: {text}"))
}

/// A collector in namespace `ns` on 127.0.0.1 (a free port) that keeps
/// what it gets: each datagram into `dir/ipfix.pcap` (raw IPv4, with the
/// UDP header rebuilt), for `tshark`'s cflow dissector, until dropped. It,
/// its port and the pcap.
pub fn pcap_collector_in(ns: &str, dir: &Path) -> (Killed, u16, std::path::PathBuf) {
    const COLLECTOR: &str = r#"
import socket, struct, sys, time
port, path = int(sys.argv[1]), sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", port))
f = open(path, "wb", buffering=0)
f.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 101))
while True:
    d, a = s.recvfrom(65535)
    udp = struct.pack("!HHHH", a[1], port, 8 + len(d), 0) + d
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                     socket.inet_aton(a[0]), socket.inet_aton("127.0.0.1")) + udp
    t = time.time()
    f.write(struct.pack("<IIII", int(t), int((t % 1) * 1e6), len(ip), len(ip)) + ip)
"#;
    local_listener(ns, dir, "collector", COLLECTOR, "ipfix.pcap")
}

/// `tshark`'s cflow dissector over `pcap` (IPFIX to UDP `port`): per
/// packet, the `fields` asked for, `;` between fields and `,` between a
/// field's occurrences.
pub fn tshark_cflow(pcap: &Path, port: u16, fields: &[&str]) -> String {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(pcap)
        .args(["-d", &format!("udp.port=={port},cflow")])
        .args([
            "-T",
            "fields",
            "-E",
            "separator=;",
            "-E",
            "occurrence=a",
            "-E",
            "aggregator=,",
        ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tshark: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// A Python server on `addr` port 9000 (IPv6 when `v6`) that answers each
/// TCP connection with the address it came from: what a translation made
/// of its client.
#[allow(dead_code)] // Not every test binary asks where it came from.
pub fn seen_as_server(addr: &str, v6: bool) -> String {
    let family = if v6 {
        "socket.AF_INET6"
    } else {
        "socket.AF_INET"
    };
    format!(
        r#"
import socket
s = socket.socket({family})
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("{addr}", 9000))
s.listen(4)
while True:
    c, a = s.accept()
    c.sendall((a[0] + "\n").encode())
    c.close()
"#
    )
}

/// Its IPv6 client, to `addr` (an address the client reaches the server
/// by): prints the address the server saw, then sends a datagram to a
/// closed port on a connected socket and prints "refused" when the
/// server's port unreachable (translated back) reaches the socket,
/// "answered" or "timeout" otherwise.
#[allow(dead_code)]
pub fn seen_as_client(addr: &str) -> String {
    format!(
        r#"
import socket
c = socket.create_connection(("{addr}", 9000), timeout=5)
print(c.makefile().readline().strip())
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
u.settimeout(3)
u.connect(("{addr}", 9999))
u.send(b"anyone?")
try:
    u.recv(100)
    print("answered")
except ConnectionRefusedError:
    print("refused")
except socket.timeout:
    print("timeout")
"#
    )
}
