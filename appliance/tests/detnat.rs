//! Deterministic NAT (RFC 7422) on real packets: namespaces `c` (four
//! inside hosts, 198.18.0.2–.5) — `r` (Sluice on AF_PACKET ports mapping
//! 198.18.0.0/24 onto 198.19.100.0/28, 16 hosts an address, 4,032 ports
//! each) — `s` (a server that routes the outside prefix to Sluice, as an
//! upstream router would, and answers each datagram with the address and
//! port it came from). Each host's flows must leave from the address and
//! block its offset gives it, and `sluice ctl nat lookup` must compute
//! the host back from what the server saw, with no log. Needs root, `ip`
//! and `python3`; skipped without them unless `CI` is set. The
//! namespaces end with the test, passed or failed.

mod common;

use common::{as_root, ctl_json, have, Nets};

/// What the lab's gateway adds (`common::lab_gateway`): the mapping.
const CONFIG: &str = r#"
[[nat.snat]]
out = "outside"
src = "198.18.0.0/24"
deterministic = "198.19.100.0/28"
"#;

/// Answers each datagram with "ADDR PORT" of its sender.
const SERVER: &str = r#"
import socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("198.19.0.2", 7000))
while True:
    d, a = u.recvfrom(2048)
    u.sendto(("%s %d" % a).encode(), a)
"#;

/// From each of the hosts, three datagrams from three ports: what the
/// server saw, a line each ("HOST ADDR PORT").
const CLIENT: &str = r#"
import socket
for h in range(2, 6):
    for p in (5001, 5002, 5003):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("198.18.0.%d" % h, p))
        u.settimeout(2)
        u.sendto(b"q", ("198.19.0.2", 7000))
        print("198.18.0.%d" % h, u.recvfrom(2048)[0].decode())
        u.close()
"#;

#[test]
fn each_host_leaves_from_its_block_and_is_computed_back() {
    if !as_root() || !have("ip") || !have("python3") {
        return;
    }
    let n = Nets::mirror_lab("sl-det");
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.sh(
        c,
        "ip link set c0 up && ip addr add 198.18.0.2/24 dev c0 \
         && for h in 3 4 5; do ip addr add 198.18.0.$h/24 dev c0; done \
         && ip route add default via 198.18.0.1",
    );
    n.sh(
        s,
        "ip link set s0 up && ip addr add 198.19.0.2/24 dev s0 \
         && ip route add 198.19.100.0/28 via 198.19.0.1",
    );
    let dir = common::fresh_dir("detnat");
    std::fs::write(dir.join("server.py"), SERVER).unwrap();
    std::fs::write(dir.join("client.py"), CLIENT).unwrap();
    let _server = common::python_in(s, &dir.join("server.py"));
    let sock = dir.join("sluice.sock");
    let cfg = dir.join("r.toml");
    std::fs::write(&cfg, common::lab_gateway(CONFIG, &sock)).unwrap();
    let _sluice = common::sluice_in(r, &cfg, &sock);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = n.sh(c, &format!("python3 {}", dir.join("client.py").display()));
    let seen: Vec<(String, String, u16)> = out
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[0].to_string(), w[1].to_string(), w[2].parse().unwrap())
        })
        .collect();
    assert_eq!(seen.len(), 12, "{out}");
    for (host, public, port) in &seen {
        // Host i of the /24 (2..5): address 198.19.100.(i / 16), ports
        // from 1024 + (i % 16) * 4032.
        let i: u32 = host.rsplit('.').next().unwrap().parse().unwrap();
        assert_eq!(public, "198.19.100.0", "{host}");
        let lo = 1024 + (i % 16) * 4032;
        assert!(
            (lo..lo + 4032).contains(&u32::from(*port)),
            "{host}: port {port} outside its block {lo}-{}",
            lo + 4031
        );
        // Computed back, with no log.
        let got = ctl_json(&sock, &["nat", "lookup", public, &port.to_string()]);
        assert_eq!(got["inside"], host.as_str(), "{got}");
    }
    let got = ctl_json(&sock, &["nat", "lookup", "198.18.0.3"]);
    assert_eq!(got["public"], "198.19.100.0", "{got}");
    assert_eq!(
        got["ports"],
        serde_json::json!([1024 + 3 * 4032, 1024 + 4 * 4032 - 1])
    );
    // A port in no block, and an address of no mapping: refused.
    let o = common::ctl(&sock, &["nat", "lookup", "198.19.100.0", "80"]);
    assert!(!o.status.success());
    let o = common::ctl(&sock, &["nat", "lookup", "198.19.0.1", "2000"]);
    assert!(!o.status.success());
    let nat = ctl_json(&sock, &["show", "nat"]);
    assert!(
        nat.to_string()
            .contains("deterministic 198.19.100.0/28 (16 hosts an address, 4032 ports each)"),
        "{nat}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
