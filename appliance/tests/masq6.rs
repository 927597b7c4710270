//! IPv6 masquerade (nftables' `masquerade` for IPv6) on real traffic:
//! namespaces `c` (a client in fd00:1::/64) — `r` (Sluice on AF_PACKET
//! ports, `[[nat.snat]]` with an IPv6 source prefix and "masquerade") —
//! `s` (a server on 2001:db8:ff::/64 with no route to fd00:1::/64). The
//! client's pings and TCP connection reach the server from Sluice's
//! outside address and the answers come back; a UDP datagram to a closed
//! port is refused by the server's port unreachable, translated back
//! with its quote. Needs root, `ip`, `ping` and `python3`; skipped
//! without them unless `CI` is set. The namespaces end with the test,
//! passed or failed.

mod common;

use common::{as_root, ctl_json, have, Nets};

const CONFIG: &str = r#"
[run]
duration = 0
stats_period = 1.0

[[port]]
name = "lan"
driver = "afpacket"
ipv6 = ["fd00:1::1/64"]
[port.afpacket]
iface = "r0"

[[port]]
name = "wan"
driver = "afpacket"
ipv6 = ["2001:db8:ff::1/64"]
[port.afpacket]
iface = "r1"

[[worker]]
core = 0
mode = "l3fwd"
rx = ["lan", "wan"]
[worker.poll]
mode = "interrupt"

[firewall]
default = "drop"

[[firewall.rule]]
action = "accept"
in = "lan"
state = ["new"]

[[firewall.rule]]
action = "accept"
state = ["related"]

[[nat.snat]]
out = "wan"
src = "fd00:1::/64"
to = "masquerade"

[management]
socket = "SOCK"
"#;

#[test]
fn an_inside_prefix_leaves_from_the_routers_address() {
    if !as_root() || !have("ip") || !have("ping") || !have("python3") {
        return;
    }
    let n = Nets::mirror_lab("sl-m6");
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    for (ns, dev) in [(c, "c0"), (s, "s0")] {
        n.sh(
            ns,
            &format!(
                "sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.{dev}.disable_ipv6=0 \
                 net.ipv6.conf.{dev}.accept_ra=0 && ip link set lo up && ip link set {dev} up"
            ),
        );
    }
    n.sh(
        c,
        "ip -6 addr add fd00:1::2/64 dev c0 nodad && ip -6 route add default via fd00:1::1",
    );
    // No route back to fd00:1::/64: only the router's address answers.
    n.sh(s, "ip -6 addr add 2001:db8:ff::2/64 dev s0 nodad");
    let dir = common::fresh_dir("masq6");
    let sock = dir.join("sluice.sock");
    let cfg = dir.join("r.toml");
    std::fs::write(&cfg, CONFIG.replace("SOCK", &sock.display().to_string())).unwrap();
    std::fs::write(
        dir.join("server.py"),
        common::seen_as_server("2001:db8:ff::2", true),
    )
    .unwrap();
    std::fs::write(
        dir.join("client.py"),
        common::seen_as_client("2001:db8:ff::2"),
    )
    .unwrap();
    let _sluice = common::sluice_in(r, &cfg, &sock);
    let _server = common::python_in(s, &dir.join("server.py"));
    std::thread::sleep(std::time::Duration::from_millis(500));

    let out = n.sh(c, "ping -6 -c 3 -i 0.2 -W 2 -q 2001:db8:ff::2 || true");
    assert!(
        out.contains("3 received"),
        "ping through IPv6 masquerade: {out}"
    );
    let got = n.sh(c, &format!("python3 {}", dir.join("client.py").display()));
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(lines, ["2001:db8:ff::1", "refused"], "{got}");
    // From outside, nothing reaches the client's prefix.
    let out = n.sh(s, "ping -6 -c 1 -W 1 -q fd00:1::2 2>&1 || true");
    assert!(!out.contains(" 1 received"), "{out}");

    // The counters as of the next stats period.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let st = ctl_json(&sock, &["stats"]);
    assert_eq!(st["balance"]["balanced"], true, "{st}");
    let ev = |name: &str| st["cores"][0]["events"][name].as_u64().unwrap_or(0);
    // The ping's flow, the TCP connection, the UDP datagram's.
    assert_eq!(ev("nat_mapped"), 3, "{st}");
    let _ = std::fs::remove_dir_all(&dir);
}
