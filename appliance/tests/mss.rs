//! TCP MSS clamping on real connections: namespaces `c` (a client on a
//! 1,500-byte link) — `r` (Sluice on AF_PACKET ports, NAT, its outside
//! port's MTU 1,400, as a PPPoE or tunnel link would have it) — `s` (a
//! server on a 1,500-byte link). Neither end knows of the narrower link:
//! without clamping both negotiate 1,460-byte segments; with
//! `clamp_mss = "pmtu"` on the outside port the client's SYN and the
//! server's SYN+ACK cross it with 1,360, and each end's kernel sends
//! segments that fit; clamping rules (`[[firewall.clamp_mss]]`) clamp
//! only the SYNs they match (by interface each way, and address). Needs root, `ip` and `python3`; skipped without
//! them unless `CI` is set. The namespaces end with the test, passed or
//! failed.

mod common;

use common::{as_root, ctl_json, have, Nets};

const CONFIG: &str = r#"
[run]
duration = 0
stats_period = 1.0

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
mtu = 1400
CLAMP
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

[management]
socket = "SOCK"
"#;

/// Answers each connection with the segment size its kernel settled on
/// (`TCP_MAXSEG`: the MSS less the options every segment carries), one
/// at a time.
const SERVER: &str = r#"
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.19.0.2", 9000))
s.listen(4)
while True:
    c, a = s.accept()
    c.sendall(("%d\n" % c.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)).encode())
    # The client closes first: no TIME_WAIT here on the public tuple,
    # which the next Sluice (its NAT ports from the start again) reuses.
    c.settimeout(5)
    try:
        c.recv(1)
    except OSError:
        pass
    c.close()
"#;

/// Prints the client's segment size and the server's.
const CLIENT: &str = r#"
import socket
c = socket.create_connection(("198.19.0.2", 9000), timeout=5)
theirs = c.makefile().readline().strip()
print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG), theirs)
c.close()
"#;

/// The client's and the server's segment sizes through Sluice, with the
/// outside port's `clamp` line and `rules` at the config's end; the SYNs
/// Sluice clamped.
fn through(n: &Nets, dir: &std::path::Path, clamp: &str, rules: &str) -> (u32, u32, u64) {
    let (c, r) = (&n.0[0], &n.0[1]);
    let sock = dir.join("sluice.sock");
    let cfg = dir.join("r.toml");
    std::fs::write(
        &cfg,
        CONFIG
            .replace("CLAMP", clamp)
            .replace("SOCK", &sock.display().to_string())
            + rules,
    )
    .unwrap();
    let sluice = common::sluice_in(r, &cfg, &sock);
    let out = n.sh(c, &format!("python3 {}", dir.join("client.py").display()));
    let w: Vec<u32> = out
        .split_whitespace()
        .map(|x| x.parse().unwrap_or_else(|_| panic!("client: {out}")))
        .collect();
    // The counters of the tick after the SYNs.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let st = ctl_json(&sock, &["stats"]);
    let clamped = st["cores"][0]["events"]["tcp_mss_clamped"]
        .as_u64()
        .unwrap_or(0);
    drop(sluice);
    let _ = std::fs::remove_file(&sock);
    (w[0], w[1], clamped)
}

#[test]
fn syns_through_a_narrow_port_are_clamped_to_fit_it() {
    if !as_root() || !have("ip") || !have("python3") {
        return;
    }
    let n = Nets::mirror_lab("sl-mss");
    let (c, s) = (&n.0[0], &n.0[2]);
    n.lab_hosts(c, s);
    let dir = common::fresh_dir("mss");
    std::fs::write(dir.join("server.py"), SERVER).unwrap();
    std::fs::write(dir.join("client.py"), CLIENT).unwrap();
    let _server = common::python_in(s, &dir.join("server.py"));
    std::thread::sleep(std::time::Duration::from_millis(300));

    // Without clamping: 1,460 each way (less a timestamp option's 12).
    let (client, server, clamped) = through(&n, &dir, "", "");
    assert_eq!((client, server, clamped), (1448, 1448, 0), "not clamped");
    // Clamped to the outside port's MTU less 40: 1,360 (less 12).
    let (client, server, clamped) = through(&n, &dir, "clamp_mss = \"pmtu\"", "");
    assert_eq!(
        (client, server, clamped),
        (1348, 1348, 2),
        "the SYN and the SYN+ACK clamped"
    );
    let (client, server, _) = through(&n, &dir, "clamp_mss = 1200", "");
    assert_eq!((client, server), (1188, 1188), "clamped to 1,200");
    // A clamping rule for SYNs leaving by the outside port only: the
    // client's SYN is clamped (the server sends smaller segments), the
    // server's SYN+ACK is not.
    let out_only = "\n[[firewall.clamp_mss]]\nout = \"outside\"\nmss = \"pmtu\"\n";
    let (client, server, clamped) = through(&n, &dir, "", out_only);
    assert_eq!((client, server, clamped), (1448, 1348, 1), "out only");
    // And one for those coming in by it, from the server.
    let both = format!(
        "{out_only}\n[[firewall.clamp_mss]]\nin = \"outside\"\nsrc = \"198.19.0.2/32\"\nmss = 1300\n"
    );
    let (client, server, clamped) = through(&n, &dir, "", &both);
    assert_eq!((client, server, clamped), (1288, 1348, 2), "both ways");
    let _ = std::fs::remove_dir_all(&dir);
}
