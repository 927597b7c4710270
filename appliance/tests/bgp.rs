//! A BGP-speaking router made of Sluice and BIRD, as linux-cp makes one
//! of VPP: namespaces `peer` — `rtr` (Sluice on AF_PACKET ports with TAP
//! mirrors, BIRD on the TAPs, the netlink route mirror) — `srv`. The BGP
//! session between the peer's BIRD and the router's runs through Sluice's
//! punt path; the routes the peer announces reach the kernel table through
//! BIRD and Sluice's FIB through netlink; traffic from `srv` to an
//! announced prefix is forwarded by Sluice (its counters, not the kernel,
//! which does not forward in `rtr`); a withdrawal removes the route from
//! the FIB. Needs root, `ip`, `python3` and BIRD 2 (`bird2`, which
//! `scripts/test.sh` installs); skipped without them unless `CI` is set.
//! The namespaces and both BIRDs end with the test, passed or failed.

mod common;

use common::{as_root, ctl, have, wait_for, Killed, Nets};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[run]
duration = 0
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
netlink = true

[[worker]]
core = 0
mode = "l3fwd"
rx = ["inside", "outside"]
[worker.poll]
mode = "adaptive"
"#;

/// The router's BIRD: BGP with the peer over the TAP, routes into the
/// kernel's main table (which Sluice mirrors).
const BIRD_RTR: &str = r#"
router id 198.18.0.1;
protocol device { scan time 1; }
protocol direct { ipv4; interface "sl-*"; }
protocol kernel {
  ipv4 { export where source = RTS_BGP; };
  scan time 1;
}
protocol bgp peer {
  local 198.18.0.1 as 65001;
  neighbor 198.18.0.2 as 65002;
  hold time 9;
  connect retry time 1;
  ipv4 { import all; export none; };
}
"#;

/// The peer's BIRD: announces two prefixes with itself as next hop.
const BIRD_PEER: &str = r#"
router id 198.18.0.2;
protocol device { scan time 1; }
protocol static announced {
  ipv4;
  route 203.0.113.0/24 via 198.18.0.2;
  route 198.51.100.0/24 via 198.18.0.2;
}
protocol bgp rtr {
  local 198.18.0.2 as 65002;
  neighbor 198.18.0.1 as 65001;
  hold time 9;
  connect retry time 1;
  ipv4 { import none; export all; next hop self; };
}
"#;

fn json(sock: &Path, args: &[&str]) -> serde_json::Value {
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

/// Waits up to `secs` for `f` over `show routes ADDR`.
fn until_route(sock: &Path, addr: &str, secs: u64, f: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let r = json(sock, &["show", "routes", addr]);
        if f(&r) {
            return;
        }
        assert!(Instant::now() < deadline, "show routes {addr}: {r}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn bird(n: &Nets, ns: &str, dir: &Path, name: &str, conf: &str) -> Killed {
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
            .unwrap_or_else(|e| panic!("bird in {ns}: {e} ({})", n.0.join(" "))),
    )
}

fn birdc(ns: &str, dir: &Path, name: &str, cmd: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "birdc", "-s"])
        .arg(dir.join(format!("{name}.ctl")))
        .args(cmd.split_whitespace())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn bgp_routes_from_bird_drive_the_fib_through_the_punt_path() {
    if !as_root() {
        return;
    }
    if !have("ip") || !have("bird") || !have("birdc") || !have("ping") {
        return;
    }
    let n = Nets::new("sl-bgp", &["p", "r", "s"]);
    let (p, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.veth("p0", p, "r0", r);
    n.veth("s0", s, "r1", r);
    n.sh(
        r,
        "ip link set r0 up && ip link set r1 up && ip link set lo up \
         && sysctl -qw net.ipv4.conf.r0.arp_ignore=8 net.ipv4.conf.r1.arp_ignore=8",
    );
    // The kernel of `rtr` owns the router's addresses (on the TAPs) but
    // must not answer on the AF_PACKET ports' own interfaces: it would
    // answer ARP there with the veth's MAC (arp_ignore=8 stops that; IP
    // frames there are for Sluice's MAC, not the veth's, so the kernel
    // leaves them).
    // The veths keep their offloads: the peer's BGP segments reach
    // Sluice with checksums left to offload, which its AF_PACKET port
    // completes before punting them.
    // The peer owns the announced space (one address of it on lo) and
    // reaches srv back through the router.
    n.sh(
        p,
        "ip link set lo up && ip link set p0 up && ip addr add 198.18.0.2/24 dev p0 \
         && ip addr add 203.0.113.1/32 dev lo \
         && ip route add 198.19.0.0/24 via 198.18.0.1",
    );
    n.sh(
        s,
        "ip link set s0 up && ip addr add 198.19.0.2/24 dev s0 \
         && ip route add default via 198.19.0.1",
    );

    let dir = std::env::temp_dir().join(format!("sluice-bgp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("sluice.sock");
    let cfg = dir.join("rtr.toml");
    std::fs::write(
        &cfg,
        format!("{CONFIG}\n[management]\nsocket = \"{}\"\n", sock.display()),
    )
    .unwrap();
    let _sluice = Killed(
        Command::new("ip")
            .args(["netns", "exec", r])
            .arg(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .arg(&cfg)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(&sock);
    // The kernel side of the router: the ports' addresses on the TAPs, as
    // the host of a routing daemon configures them.
    n.sh(
        r,
        "ip addr add 198.18.0.1/24 dev sl-inside && ip addr add 198.19.0.1/24 dev sl-outside",
    );
    let _bird_r = bird(&n, r, &dir, "rtr", BIRD_RTR);
    let _bird_p = bird(&n, p, &dir, "peer", BIRD_PEER);

    // The session comes up through Sluice's punt path, the routes reach
    // the kernel and Sluice's FIB.
    let t = Instant::now();
    loop {
        let st = birdc(r, &dir, "rtr", "show protocols peer");
        if st.contains("Established") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(40),
            "BGP session not established: {st}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let via_peer = |r: &serde_json::Value| {
        r["paths"].as_array().is_some_and(|p| {
            p.len() == 1 && p[0]["via"] == "198.18.0.2" && p[0]["port"] == "inside"
        })
    };
    until_route(&sock, "203.0.113.1", 20, via_peer);
    until_route(&sock, "198.51.100.9", 20, via_peer);

    // Traffic to an announced prefix is forwarded by Sluice.
    let tx_inside = || {
        json(&sock, &["show", "ports"])["ports"][0]["tx_pkts"]
            .as_u64()
            .unwrap()
    };
    let before = tx_inside();
    let out = n.sh(s, "ping -c 5 -i 0.2 -W 2 -q 203.0.113.1 || true");
    assert!(
        out.contains(" 0% packet loss"),
        "ping through Sluice: {out}\n{}\n{}",
        json(&sock, &["show", "ports"]),
        json(&sock, &["show", "routes", "198.19.0.2"])
    );
    assert!(tx_inside() >= before + 5, "not forwarded by Sluice");
    let fwd = n.sh(r, "cat /proc/sys/net/ipv4/ip_forward");
    assert_eq!(fwd.trim(), "0", "the router's kernel does not forward");

    // The peer withdraws: the route leaves the FIB.
    let _ = birdc(p, &dir, "peer", "disable announced");
    until_route(&sock, "203.0.113.1", 20, |r| r["route"].is_null());
    let out = n.sh(s, "ping -c 2 -i 0.2 -W 1 -q 203.0.113.1 || true");
    assert!(
        out.contains("100% packet loss") || out.contains("Unreachable"),
        "after the withdrawal: {out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
