//! The control-plane mirror end to end (`[control_plane] tap = true`):
//! Sluice on AF_PACKET ports in a namespace makes a TAP per routed port;
//! the test gives the TAP the port's address (as a routing daemon's
//! host would) and runs a TCP server on it in the kernel; a client in
//! another namespace connects through Sluice's port. The handshake and
//! the data only work if Sluice punts the client's segments (and its ARP
//! reply) to the TAP and sends what the kernel writes there out of the
//! port. Needs root, `ip` and `python3`; skipped without them unless `CI`
//! is set. The namespaces are removed when the test ends, passed or
//! failed.

mod common;

use common::{as_root, have, stop_for_summary, Nets};
use std::process::Command;
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[run]
duration = 60
stats_period = 1.0

[[port]]
name = "inside"
driver = "afpacket"
mac = "02:51:00:00:00:00"
ipv4 = ["198.18.0.1/24"]
[port.afpacket]
iface = "r0"

[[port]]
name = "outside"
driver = "afpacket"
mac = "02:51:00:00:00:01"
ipv4 = ["198.19.0.1/24"]
[port.afpacket]
iface = "r1"

[control_plane]
tap = true
tap_names = { outside = "cp-out" }

[[worker]]
core = 0
mode = "l3fwd"
rx = ["inside", "outside"]
[worker.poll]
mode = "adaptive"
"#;

const SERVER: &str = r#"
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.18.0.1", 1790))
s.listen(1)
c, _ = s.accept()
c.sendall(c.recv(100))
n = 0
while True:
    b = c.recv(65536)
    if not b:
        break
    n += len(b)
c.sendall(str(n).encode())
c.close()
"#;

const CLIENT: &str = r#"
import socket, sys
s = socket.create_connection(("198.18.0.1", 1790), timeout=10)
s.sendall(b"open-message")
print("PASS echo" if s.recv(100) == b"open-message" else "FAIL echo")
s.sendall(bytes(range(256)) * 4096)
s.shutdown(socket.SHUT_WR)
n = s.recv(100)
print("PASS bulk" if n == b"1048576" else "FAIL bulk %r" % n)
"#;

#[test]
fn tcp_to_the_router_reaches_the_kernel_through_the_tap() {
    if !as_root() {
        return;
    }
    if !have("ip") || !have("python3") {
        return;
    }
    // The client's veth keeps its offloads: its TCP checksums reach
    // Sluice unfinished, and Sluice's AF_PACKET port completes them (else
    // the kernel behind the TAP drops them).
    let n = Nets::mirror_lab("sl-tap");
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.sh(c, "ip link set c0 up && ip addr add 198.18.0.2/24 dev c0");
    n.sh(s, "ip link set s0 up");
    // GRO on the port's interface: off while Sluice has it, back after.
    let ethtool = have("ethtool");
    let gro = || n.sh(r, "ethtool -k r0 | grep generic-receive-offload:");
    let tso = ethtool
        && n.sh(c, "ethtool -k c0")
            .contains("tcp-segmentation-offload: on");
    if ethtool {
        n.sh(r, "ethtool -K r0 gro on");
        assert!(gro().contains(": on"), "{}", gro());
    }

    let dir = common::fresh_dir("tap");
    let cfg = dir.join("tap.toml");
    std::fs::write(&cfg, CONFIG).unwrap();
    std::fs::write(dir.join("server.py"), SERVER).unwrap();
    std::fs::write(dir.join("client.py"), CLIENT).unwrap();
    let child = common::sluice_json_in(r, &cfg);
    // The TAPs appear with the ports' MACs, up.
    let t = Instant::now();
    loop {
        let out = Command::new("ip")
            .args(["-n", r, "-o", "link", "show"])
            .output()
            .unwrap();
        let links = String::from_utf8_lossy(&out.stdout).into_owned();
        if links.contains("sl-inside") && links.contains("cp-out") {
            assert!(links.contains("02:51:00:00:00:00"), "{links}");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no TAPs: {links}");
        std::thread::sleep(Duration::from_millis(100));
    }
    if ethtool {
        assert!(gro().contains(": off"), "GRO while open: {}", gro());
    }
    n.sh(r, "ip addr add 198.18.0.1/24 dev sl-inside");
    let server = common::python_in(r, &dir.join("server.py"));
    std::thread::sleep(Duration::from_millis(500));
    let out = n.sh(
        c,
        &format!("python3 {} 2>&1 || true", dir.join("client.py").display()),
    );
    drop(server);
    assert!(out.contains("PASS echo"), "{out}");
    assert!(out.contains("PASS bulk"), "{out}");

    let (v, _) = stop_for_summary(child);
    let _ = std::fs::remove_dir_all(&dir);
    let summary = v.to_string();
    let b = &v["balance"];
    assert_eq!(b["balanced"], true, "{summary}");
    // SYN, ACK, data, FIN, ACK and the ARP reply at least went to the
    // kernel; its SYN-ACK, data, FIN and ARP request came out.
    assert!(b["punted"].as_u64() >= Some(5), "{summary}");
    assert!(b["injected"].as_u64() >= Some(4), "{summary}");
    // The client's veth sends TSO aggregates of the megabyte: split into
    // segments by the AF_PACKET port, none dropped as too big.
    let x = &v["ports"][0]["xstats"];
    assert_eq!(x["rx_too_big"], 0, "{summary}");
    if tso {
        assert!(x["rx_gso_frames"].as_u64() > Some(0), "{summary}");
        assert!(
            x["rx_gso_segments"].as_u64() > x["rx_gso_frames"].as_u64(),
            "{summary}"
        );
    }
    // The TAPs are gone with Sluice.
    let out = Command::new("ip")
        .args(["-n", r, "-o", "link", "show"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("sl-inside"));
    if ethtool {
        assert!(gro().contains(": on"), "GRO after stop: {}", gro());
    }
}

/// Connects to ADDR PORT and says how it went: "connected", "refused" (a
/// reset) or "timeout".
const CONNECT: &str = r#"
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
    print("connected")
except ConnectionRefusedError:
    print("refused")
except OSError:
    print("timeout")
"#;

/// The input chain's `state` (nftables' `ct state established,related
/// accept` at the head of `chain input`): the kernel behind the mirrors
/// connects out through Sluice and its replies are admitted as
/// `established` by the first punt rule, while what comes in new from
/// outside is dropped by the last; SSH from the inside is admitted (the
/// kernel answers it with a reset: nothing listens). Without the state
/// (a rule admitting everything, or none), either the kernel's
/// connection or the outside's drop would fail. A first rule drops
/// `invalid` (`ct state invalid drop`): segments to port 22 with SYN+FIN
/// or no flags get no answer, where a SYN gets the kernel's reset.
#[test]
fn the_kernels_own_connections_are_established() {
    if !as_root() || !have("ip") || !have("python3") {
        return;
    }
    let n = Nets::mirror_lab("sl-tapst");
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.lab_hosts(c, s);
    let dir = common::fresh_dir("tapstate");
    let cfg = dir.join("tap.toml");
    let text = CONFIG.replace("duration = 60", "duration = 0")
        + r#"
[[control_plane.punt]]
state = ["invalid"]
action = "drop"

[[control_plane.punt]]
state = ["established", "related"]

[[control_plane.punt]]
in = "inside"
proto = "tcp"
port = 22

[[control_plane.punt]]
in = "outside"
action = "drop"
"#;
    std::fs::write(&cfg, text).unwrap();
    std::fs::write(dir.join("connect.py"), CONNECT).unwrap();
    std::fs::write(
        dir.join("server.py"),
        common::seen_as_server("198.19.0.2", false),
    )
    .unwrap();
    let _server = common::python_in(s, &dir.join("server.py"));
    let _child = common::sluice_json_in(r, &cfg);
    let t = Instant::now();
    loop {
        let out = Command::new("ip")
            .args(["-n", r, "-o", "link", "show"])
            .output()
            .unwrap();
        let links = String::from_utf8_lossy(&out.stdout).into_owned();
        if links.contains("sl-inside") && links.contains("cp-out") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no TAPs: {links}");
        std::thread::sleep(Duration::from_millis(100));
    }
    n.sh(
        r,
        "ip addr add 198.18.0.1/24 dev sl-inside && ip addr add 198.19.0.1/24 dev cp-out",
    );
    std::thread::sleep(Duration::from_millis(500));
    let connect = |ns: &str, addr: &str, port: u16| {
        n.sh(
            ns,
            &format!("python3 {} {addr} {port}", dir.join("connect.py").display()),
        )
        .trim()
        .to_string()
    };
    // The kernel's own connection out: its replies are established.
    let seen = n.sh(
        r,
        "python3 -c 'import socket; c = socket.create_connection((\"198.19.0.2\", 9000), timeout=5); print(c.makefile().readline().strip())'",
    );
    assert_eq!(seen.trim(), "198.19.0.1", "the kernel's connection out");
    // New from outside: dropped (the kernel would have refused it).
    assert_eq!(connect(s, "198.19.0.1", 22), "timeout", "new from outside");
    // SSH from inside: to the kernel, which refuses (nothing listens).
    assert_eq!(connect(c, "198.18.0.1", 22), "refused", "SSH from inside");
    // Segments from inside to port 22 with flags of their own: a SYN is
    // new, passes, and the kernel answers it with a reset; SYN+FIN and a
    // null scan are invalid, dropped by the first rule: no answer.
    std::fs::write(dir.join("flags.py"), FLAGS).unwrap();
    let probe = |flags: &str, sport: u16| {
        n.sh(
            c,
            &format!(
                "python3 {} 198.18.0.1 {flags} {sport}",
                dir.join("flags.py").display()
            ),
        )
        .trim()
        .to_string()
    };
    assert_eq!(probe("0x02", 41001), "rst", "a SYN: new, to the kernel");
    assert_eq!(probe("0x03", 41002), "none", "SYN+FIN: invalid, dropped");
    assert_eq!(probe("0x00", 41003), "none", "no flags: invalid, dropped");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends a TCP segment with the flags given (argv: address, flags, source
/// port) from 198.18.0.2 to port 22 through a raw socket and prints
/// "rst" if a reset comes back within 1.5 s, "answer" for anything else
/// back, "none" for nothing.
const FLAGS: &str = r#"
import socket, struct, sys
dst, flags, sport = sys.argv[1], int(sys.argv[2], 0), int(sys.argv[3])
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff)
    s += s >> 16
    return ~s & 0xffff
tcp = struct.pack("!HHIIBBHHH", sport, 22, 1000, 0, 5 << 4, flags, 64240, 0, 0)
ph = socket.inet_aton("198.18.0.2") + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(tcp))
tcp = tcp[:16] + struct.pack("!H", csum(ph + tcp)) + tcp[18:]
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
s.settimeout(1.5)
s.sendto(tcp, (dst, 0))
try:
    while True:
        d, a = s.recvfrom(200)
        ihl = (d[0] & 0xf) * 4
        sp, dp = struct.unpack("!HH", d[ihl:ihl + 4])
        if a[0] == dst and sp == 22 and dp == sport:
            print("rst" if d[ihl + 13] & 4 else "answer")
            break
except socket.timeout:
    print("none")
"#;
