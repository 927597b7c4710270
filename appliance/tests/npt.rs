//! NPTv6 (RFC 6296) on real IPv6 traffic: namespaces `c` (a client in the
//! site's inside prefix fd01:203:405::/48) — `r` (Sluice on AF_PACKET
//! ports, the stateful firewall, `[[nat.nptv6]]` on its outside port) —
//! `s` (a server, which routes the site's outside prefix 2001:db8:1::/48
//! to Sluice). The client's TCP connection and pings reach the server
//! from the address RFC 6296's example maps it to (fd01:203:405:1::2 is
//! 2001:db8:1:d550::2: the prefix swapped, one word adjusted so that no
//! checksum changes), and the answers come back translated; a packet from
//! outside that opens no flow is still refused by the firewall; a probe
//! from outside with a hop limit of 1 gets Sluice's Time Exceeded quoting
//! it as it was sent. Needs
//! root, `ip`, `ping` and `python3`; skipped without them unless `CI` is
//! set. The namespaces end with the test, passed or failed.

mod common;

use common::{as_root, ctl_json, have, Nets};

const CONFIG: &str = r#"
[run]
duration = 0
stats_period = 1.0

[[port]]
name = "inside"
driver = "afpacket"
ipv6 = ["fd01:203:405:1::1/64"]
[port.afpacket]
iface = "r0"

[[port]]
name = "outside"
driver = "afpacket"
ipv6 = ["2001:db8:ff::1/64"]
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

[[nat.nptv6]]
out = "outside"
inside = "fd01:203:405::/48"
outside = "2001:db8:1::/48"

[management]
socket = "SOCK"
"#;

/// From the server: a datagram to the client's outside address with a hop
/// limit of 1, on a socket that takes ICMPv6 errors (`IPV6_RECVERR`);
/// prints the type of the error its stack matched to it, or "none" (an
/// error quoting an address the socket did not send to is not matched).
const HOP_LIMIT: &str = r#"
import select, socket
# Linux's values where this Python does not name them.
RECVERR = getattr(socket, "IPV6_RECVERR", 25)
ERRQUEUE = getattr(socket, "MSG_ERRQUEUE", 0x2000)
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IPV6, RECVERR, 1)
s.setsockopt(socket.IPPROTO_IPV6, getattr(socket, "IPV6_UNICAST_HOPS", 16), 1)
s.connect(("2001:db8:1:d550::2", 33434))
s.send(b"probe")
got = "none"
if select.select([], [], [s], 3)[2] or select.select([s], [], [], 0)[0]:
    try:
        _, anc, _, _ = s.recvmsg(512, 512, ERRQUEUE)
        for level, kind, data in anc:
            if level == socket.IPPROTO_IPV6 and kind == RECVERR:
                got = str(data[5])
    except OSError as e:
        got = "error " + repr(e)
print(got)
"#;

const CLIENT: &str = r#"
import socket
c = socket.create_connection(("2001:db8:ff::2", 9000), timeout=5)
print(c.makefile().readline().strip())
"#;

#[test]
fn a_sites_prefix_is_translated_both_ways() {
    if !as_root() || !have("ip") || !have("ping") || !have("python3") {
        return;
    }
    let n = Nets::mirror_lab("sl-npt");
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
        "ip -6 addr add fd01:203:405:1::2/64 dev c0 nodad \
         && ip -6 route add default via fd01:203:405:1::1",
    );
    n.sh(
        s,
        "ip -6 addr add 2001:db8:ff::2/64 dev s0 nodad \
         && ip -6 route add 2001:db8:1::/48 via 2001:db8:ff::1",
    );
    let dir = common::fresh_dir("npt");
    let sock = dir.join("sluice.sock");
    let cfg = dir.join("r.toml");
    std::fs::write(&cfg, CONFIG.replace("SOCK", &sock.display().to_string())).unwrap();
    std::fs::write(
        dir.join("server.py"),
        common::seen_as_server("2001:db8:ff::2", true),
    )
    .unwrap();
    std::fs::write(dir.join("client.py"), CLIENT).unwrap();
    let _sluice = common::sluice_in(r, &cfg, &sock);
    let _server = common::python_in(s, &dir.join("server.py"));
    std::thread::sleep(std::time::Duration::from_millis(500));

    // Pings out and their answers back (conntrack tracks the inside
    // address; the translation is stateless around it).
    let out = n.sh(c, "ping -6 -c 3 -i 0.2 -W 2 -q 2001:db8:ff::2 || true");
    assert!(out.contains(" 0% packet loss"), "ping through NPTv6: {out}");
    // The server sees the client from the translated address.
    let seen = n.sh(c, &format!("python3 {}", dir.join("client.py").display()));
    assert_eq!(
        seen.trim(),
        "2001:db8:1:d550::2",
        "the client as the server saw it"
    );
    // From outside, to the client's outside address, no flow: refused.
    let out = n.sh(s, "ping -6 -c 1 -W 1 -q 2001:db8:1:d550::2 || true");
    assert!(
        out.contains("100% packet loss"),
        "unsolicited from outside: {out}"
    );
    // A probe from outside with a hop limit of 1 (traceroute through the
    // translation): Sluice's Time Exceeded (ICMPv6 type 3) quotes it as
    // sent, to the outside address, so the sender's stack takes it.
    std::fs::write(dir.join("hop.py"), HOP_LIMIT).unwrap();
    let got = n.sh(s, &format!("python3 {}", dir.join("hop.py").display()));
    assert_eq!(
        got.trim(),
        "3",
        "Time Exceeded matched to the probe's socket"
    );
    let st = ctl_json(&sock, &["stats"]);
    assert_eq!(st["balance"]["balanced"], true, "{st}");
    let nat = ctl_json(&sock, &["show", "nat"]);
    assert_eq!(nat["nptv6"][0]["inside"], "fd01:203:405::/48", "{nat}");
    assert_eq!(nat["nptv6"][0]["outside"], "2001:db8:1::/48", "{nat}");
    let _ = std::fs::remove_dir_all(&dir);
}
