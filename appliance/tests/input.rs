//! The router's own traffic under an input chain, against the kernel's:
//! namespaces `c` (the LAN, 198.18.0.2) — `r` — `s` (the WAN,
//! 198.19.0.2), and in `r` first Sluice on AF_PACKET ports with no TAP
//! mirror (nothing listens behind its addresses), then the kernel with
//! the same policy in nftables (held-out lab finding: under Sluice a LAN
//! client's connection to the router's port 22 timed out where the
//! kernel answers with a reset). The policy, as nftables says it and as
//! `[[control_plane.punt]]` rules translate it rule for rule:
//!
//! ```text
//! icmp type echo-request accept                 proto = "icmp"
//! iifname "r0" tcp dport 22 accept              proto = "tcp", port = 22, in = "inside"
//! tcp dport 23 reject with icmp admin-prohibited  action = "reject", reject_with = "admin-prohibited"
//! iifname "r1" drop                             in = "outside", action = "drop"
//! reject                                        action = "reject", reject_with = "port-unreachable"
//! ```
//!
//! Every probe (TCP connects, UDP datagrams, pings from both sides) must
//! end the same way under both: refused, unreachable, timed out or
//! answered. Sluice's counters must say how: a reset per refused SSH
//! connect, the WAN's probes dropped as `punt_denied`.
//!
//! Needs root, `ip`, `nft`, `ping` and `python3`; skipped without them
//! unless `CI` is set. The namespaces end with the test, passed or failed.

mod common;

use common::{as_root, have, Nets};

/// Probes `proto:addr:port` arguments; prints each with how it ended.
const PROBE: &str = r#"
import errno, socket, sys
def tcp(a, p):
    s = socket.socket()
    s.settimeout(1.5)
    try:
        s.connect((a, p))
        return "open"
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    finally:
        s.close()
def udp(a, p):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.5)
    s.connect((a, p))
    try:
        s.send(b"probe")
        s.recv(100)
        return "answered"
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    finally:
        s.close()
for arg in sys.argv[1:]:
    proto, a, p = arg.split(":")
    print(arg, (tcp if proto == "tcp" else udp)(a, int(p)))
"#;

/// The policy as punt rules.
const RULES: &str = r#"
[[control_plane.punt]]
proto = "icmp"

[[control_plane.punt]]
proto = "tcp"
port = 22
in = "inside"

[[control_plane.punt]]
proto = "tcp"
port = 23
action = "reject"
reject_with = "admin-prohibited"

[[control_plane.punt]]
in = "outside"
action = "drop"

[[control_plane.punt]]
action = "reject"
reject_with = "port-unreachable"
"#;

/// The same policy in nftables.
const NFT: &str = r#"
table ip filter {
  chain input {
    type filter hook input priority 0; policy accept;
    icmp type echo-request accept
    iifname "r0" tcp dport 22 accept
    tcp dport 23 reject with icmp type admin-prohibited
    iifname "r1" drop
    reject
  }
}
"#;

/// The LAN's probes, then the WAN's.
const FROM_LAN: &[&str] = &[
    "tcp:198.18.0.1:22",
    "tcp:198.19.0.1:22",
    "tcp:198.18.0.1:80",
    "tcp:198.18.0.1:23",
    "udp:198.18.0.1:53",
];
const FROM_WAN: &[&str] = &[
    "tcp:198.19.0.1:22",
    "udp:198.19.0.1:53",
    "tcp:198.19.0.1:23",
];

/// How each probe ended, and whether each side's ping was answered.
fn probe(n: &Nets, dir: &std::path::Path) -> Vec<String> {
    let (c, s) = (&n.0[0], &n.0[2]);
    let script = dir.join("probe.py");
    let mut out: Vec<String> = Vec::new();
    for (ns, probes) in [(c, FROM_LAN), (s, FROM_WAN)] {
        let text = n.sh(
            ns,
            &format!("python3 {} {}", script.display(), probes.join(" ")),
        );
        out.extend(text.lines().map(str::to_string));
    }
    for (ns, addr) in [(c, "198.18.0.1"), (s, "198.19.0.1")] {
        let o = std::process::Command::new("ip")
            .args([
                "netns", "exec", ns, "ping", "-c", "2", "-i", "0.2", "-W", "1", addr,
            ])
            .output()
            .unwrap();
        out.push(format!("ping {addr} from {ns}: {}", o.status.success()));
    }
    out
}

#[test]
fn an_input_chain_answers_as_the_kernel_does() {
    if !as_root() || !have("ip") || !have("python3") || !have("ping") || !have("nft") {
        return;
    }
    let n = Nets::mirror_lab("sl-input");
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.lab_hosts(c, s);
    let dir = common::fresh_dir("input");
    std::fs::write(dir.join("probe.py"), PROBE).unwrap();
    let sock = dir.join("sluice.sock");
    let cfg = dir.join("r.toml");
    std::fs::write(&cfg, common::lab_gateway(RULES, &sock)).unwrap();

    // Sluice, no mirror: what it answers is all there is.
    let sluice = common::sluice_in(r, &cfg, &sock);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let under_sluice = probe(&n, &dir);
    let stats = common::ctl_json(&sock, &["stats"]);
    drop(sluice);
    let ev = |name: &str| stats["cores"][0]["events"][name].as_u64().unwrap_or(0);
    assert_eq!(
        ev("tcp_reset"),
        2,
        "one reset per SSH connect from the LAN: {stats}"
    );
    let denied = stats["ports"][1]["drops"]["stage"]["punt_denied"]
        .as_u64()
        .unwrap_or(0);
    assert!(denied >= 2, "the WAN's probes dropped: {stats}");

    // The kernel, the same policy in nftables.
    n.sh(
        r,
        "sysctl -qw net.ipv4.conf.r0.arp_ignore=0 net.ipv4.conf.r1.arp_ignore=0 \
         && ip addr add 198.18.0.1/24 dev r0 && ip addr add 198.19.0.1/24 dev r1",
    );
    std::fs::write(dir.join("input.nft"), NFT).unwrap();
    n.sh(r, &format!("nft -f {}", dir.join("input.nft").display()));
    n.sh(c, "ip neigh flush all");
    n.sh(s, "ip neigh flush all");
    let under_kernel = probe(&n, &dir);

    let want = [
        "tcp:198.18.0.1:22 refused",
        "tcp:198.19.0.1:22 refused",
        "tcp:198.18.0.1:80 refused",
        "tcp:198.18.0.1:23 EHOSTUNREACH",
        "udp:198.18.0.1:53 refused",
        "tcp:198.19.0.1:22 timeout",
        "udp:198.19.0.1:53 timeout",
        "tcp:198.19.0.1:23 EHOSTUNREACH",
    ];
    assert_eq!(
        under_kernel[..want.len()],
        want,
        "the kernel: {under_kernel:?}"
    );
    assert_eq!(under_sluice, under_kernel, "Sluice and the kernel differ");
    assert!(
        under_sluice[want.len()..]
            .iter()
            .all(|p| p.ends_with("true")),
        "pings answered: {under_sluice:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
