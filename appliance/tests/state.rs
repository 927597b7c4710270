//! A restart that keeps its flows (`[ha] state_file`): Sluice as a
//! masquerading gateway on AF_PACKET ports in a namespace, a firewall that
//! lets in only what the inside opened. A client opens a TCP connection to
//! a server through it and exchanges a line; Sluice is stopped (SIGINT, as
//! a service manager's stop), started again on the same config, and the
//! client sends the next line on the same connection: it gets its answer,
//! and the server sees it come from the same public address and port.
//! Without the state file, the new process has no flow for the connection
//! and drops its segments (not a SYN: invalid), and the client times out.
//! Needs root, `ip` and `python3`; skipped without them unless `CI` is set.
//! The namespaces are removed when the test ends, passed or failed.

mod common;

use common::{as_root, have, stop_for_summary, Nets};
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[run]
duration = 60
stats_period = 1.0

[[port]]
name = "inside"
driver = "afpacket"
mac = "02:52:00:00:00:00"
ipv4 = ["198.18.0.1/24"]
[port.afpacket]
iface = "r0"

[[port]]
name = "outside"
driver = "afpacket"
mac = "02:52:00:00:00:01"
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

[[nat.snat]]
out = "outside"
src = "198.18.0.0/24"
to = "masquerade"

[ha]
state_file = "STATE"

[management]
socket = "SOCK"
"#;

/// Sends "one", waits for the file `go`, sends "two" on the same
/// connection; prints each answer (or why there was none).
const CLIENT: &str = r#"
import os, socket, sys, time
go = sys.argv[1]
c = socket.create_connection(("198.19.0.2", 9000), timeout=5)
f = c.makefile("rwb", buffering=0)
f.write(b"one\n")
print("answer", f.readline().decode().strip(), flush=True)
while not os.path.exists(go):
    time.sleep(0.05)
c.settimeout(20)
try:
    f.write(b"two\n")
    print("answer", f.readline().decode().strip(), flush=True)
except Exception as e:
    print("failed", repr(e), flush=True)
"#;

#[test]
fn a_restart_keeps_the_tcp_connections_through_the_nat() {
    if !as_root() {
        return;
    }
    if !have("ip") || !have("python3") {
        return;
    }
    let n = Nets::mirror_lab("sl-st");
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.sh(
        c,
        "ip link set c0 up && ip addr add 198.18.0.2/24 dev c0 \
         && ip route add 198.19.0.0/24 via 198.18.0.1",
    );
    n.sh(s, "ip link set s0 up && ip addr add 198.19.0.2/24 dev s0");
    let dir = common::fresh_dir("state");
    let state = dir.join("flows");
    let cfg = dir.join("gw.toml");
    let sock = dir.join("gw.sock");
    let text = CONFIG
        .replace("STATE", &state.display().to_string())
        .replace("SOCK", &sock.display().to_string());
    std::fs::write(&cfg, text).unwrap();
    std::fs::write(
        dir.join("server.py"),
        common::peer_echo_server("198.19.0.2"),
    )
    .unwrap();
    std::fs::write(dir.join("client.py"), CLIENT).unwrap();
    let _server = common::python_in(s, &dir.join("server.py"));
    let first = common::sluice_json_in(r, &cfg);
    // The ports are open well before this.
    std::thread::sleep(Duration::from_millis(1500));
    let out = dir.join("client.out");
    let go = dir.join("go");
    let client = common::Killed(
        std::process::Command::new("ip")
            .args(["netns", "exec", c, "python3"])
            .arg(dir.join("client.py"))
            .arg(&go)
            .stdout(std::fs::File::create(&out).unwrap())
            .spawn()
            .unwrap(),
    );
    let answers = || std::fs::read_to_string(&out).unwrap_or_default();
    let t = Instant::now();
    while !answers().contains("answer") {
        assert!(t.elapsed() < Duration::from_secs(10), "no first answer");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Saved on request, while it runs: the one flow.
    let copy = dir.join("copy");
    let saved = common::ctl_json(&sock, &["state", "save", copy.to_str().unwrap()]);
    assert_eq!(saved["flows"], 1, "{saved}");
    assert_eq!(std::fs::metadata(&copy).unwrap().len(), 40 + 96);
    let refused = common::ctl(&sock, &["state", "save", "relative"]);
    assert!(!refused.status.success());
    let (_, said) = stop_for_summary(first);
    assert!(said.contains("state: 1 flows written to"), "{said}");
    assert!(state.exists());

    let second = common::sluice_json_in(r, &cfg);
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(&go, "").unwrap();
    let t = Instant::now();
    while answers().lines().count() < 2 {
        assert!(t.elapsed() < Duration::from_secs(30), "{}", answers());
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(client);
    let (v, said) = stop_for_summary(second);
    let text = answers();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(said.contains("state: 1 flows restored from"), "{said}");
    assert!(
        !state.exists() || said.contains("flows written"),
        "read once"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let (one, two) = (lines[0], lines[1]);
    assert!(
        one.starts_with("answer 198.19.0.1:") && one.ends_with(" one"),
        "{text}"
    );
    assert!(
        two.starts_with("answer 198.19.0.1:") && two.ends_with(" two"),
        "{text}"
    );
    assert_eq!(
        one.trim_end_matches(" one"),
        two.trim_end_matches(" two"),
        "the same public port: {text}"
    );
    assert_eq!(v["balance"]["balanced"], true, "{v}");
}
