//! A BGP-speaking router made of Sluice and BIRD, as linux-cp makes one
//! of VPP: namespaces `peer` and `peer2` — `rtr` (Sluice on AF_PACKET
//! ports with TAP mirrors, BIRD on the TAPs, the netlink mirror) — `srv`.
//! The BGP sessions between the peers' BIRDs and the router's run through
//! Sluice's punt path; the routes the peers announce reach the kernel
//! table through BIRD and Sluice's FIB through netlink; traffic from `srv`
//! to an announced prefix is forwarded by Sluice (its counters, not the
//! kernel, which does not forward in `rtr`); a prefix both peers announce
//! is an ECMP route whose flows both share; a link down on a peer's side
//! reaches the kernel (the TAP's carrier follows the port's link), BIRD
//! drops the session and the route shrinks to the other peer, and comes
//! back with the link; a withdrawal removes the route from the FIB. Needs root, `ip`, `python3` and BIRD 2 (`bird2`, which
//! `scripts/test.sh` installs); skipped without them unless `CI` is set.
//! The namespaces and both BIRDs end with the test, passed or failed.

mod common;

use common::{
    as_root, bird, birdc, ctl_json as json, have, promtool_accepts, sluice_in, until_routes, Nets,
};
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

[[port]]
name = "third"
driver = "afpacket"
mac = "02:51:00:00:00:02"
ipv4 = ["198.20.0.1/24"]
[port.afpacket]
iface = "r2"

[control_plane]
tap = true
netlink = true

# Control-plane policing: BGP from the peering LANs only (to port 179, and
# the answers to sessions BIRD opens), OSPF within a rate.
[[control_plane.punt]]
proto = "tcp"
port = 179
from = ["198.18.0.0/24", "198.20.0.0/24"]

[[control_plane.punt]]
proto = "tcp"
sport = 179
from = ["198.18.0.0/24", "198.20.0.0/24"]

[[control_plane.punt]]
proto = "ospf"
rate = 100

[[worker]]
core = 0
mode = "l3fwd"
rx = ["inside", "outside", "third"]
[worker.poll]
mode = "adaptive"
"#;

/// The router's BIRD: BGP with both peers over the TAPs, routes into the
/// kernel's main table (which Sluice mirrors); equal routes from both
/// peers merged into one multipath route.
const BIRD_RTR: &str = r#"
router id 198.18.0.1;
protocol device { scan time 1; }
protocol direct { ipv4; interface "sl-*"; }
protocol kernel {
  ipv4 { export where source = RTS_BGP; };
  merge paths yes;
  scan time 1;
}
protocol bgp peer {
  local 198.18.0.1 as 65001;
  neighbor 198.18.0.2 as 65002;
  hold time 9;
  connect retry time 1;
  error wait time 1, 5;
  ipv4 { import all; export none; };
}
protocol bgp peer2 {
  local 198.20.0.1 as 65001;
  neighbor 198.20.0.2 as 65003;
  hold time 9;
  connect retry time 1;
  error wait time 1, 5;
  ipv4 { import all; export none; };
}
"#;

/// A peer's BIRD (router id and address `me`, AS `asn`): announces
/// 203.0.113.0/24 (both peers: anycast) and, with `only`, 198.51.100.0/24,
/// with itself as next hop.
fn bird_peer(me: &str, asn: u32, rtr: &str, only: bool) -> String {
    let extra = if only {
        format!("protocol static extra {{ ipv4; route 198.51.100.0/24 via {me}; }}")
    } else {
        String::new()
    };
    format!(
        r#"
router id {me};
protocol device {{ scan time 1; }}
protocol static announced {{
  ipv4;
  route 203.0.113.0/24 via {me};
}}
{extra}
protocol bgp rtr {{
  local {me} as {asn};
  neighbor {rtr} as 65001;
  hold time 9;
  connect retry time 1;
  error wait time 1, 5;
  ipv4 {{ import none; export all; next hop self; }};
}}
"#
    )
}

#[test]
fn bgp_routes_from_bird_drive_the_fib_through_the_punt_path() {
    if !as_root() {
        return;
    }
    if !have("ip") || !have("bird") || !have("birdc") || !have("ping") {
        return;
    }
    let n = Nets::new("sl-bgp", &["p", "r", "s", "q"]);
    let (p, r, s, q) = (&n.0[0], &n.0[1], &n.0[2], &n.0[3]);
    n.veth("p0", p, "r0", r);
    n.veth("s0", s, "r1", r);
    n.veth("q0", q, "r2", r);
    n.sh(
        r,
        "ip link set r0 up && ip link set r1 up && ip link set r2 up && ip link set lo up \
         && sysctl -qw net.ipv4.conf.r0.arp_ignore=8 net.ipv4.conf.r1.arp_ignore=8 \
            net.ipv4.conf.r2.arp_ignore=8",
    );
    // The kernel of `rtr` owns the router's addresses (on the TAPs) but
    // must not answer on the AF_PACKET ports' own interfaces: it would
    // answer ARP there with the veth's MAC (arp_ignore=8 stops that; IP
    // frames there are for Sluice's MAC, not the veth's, so the kernel
    // leaves them).
    // The veths keep their offloads: the peers' BGP segments reach
    // Sluice with checksums left to offload, which its AF_PACKET port
    // completes before punting them.
    // The peers own the announced space (an address of it on lo; both
    // have 203.0.113.1, anycast) and reach srv back through the router.
    n.sh(
        p,
        "ip link set lo up && ip link set p0 up && ip addr add 198.18.0.2/24 dev p0 \
         && ip addr add 203.0.113.1/32 dev lo && ip addr add 198.51.100.1/32 dev lo \
         && ip route add 198.19.0.0/24 via 198.18.0.1",
    );
    n.sh(
        q,
        "ip link set lo up && ip link set q0 up && ip addr add 198.20.0.2/24 dev q0 \
         && ip addr add 203.0.113.1/32 dev lo \
         && ip route add 198.19.0.0/24 via 198.20.0.1",
    );
    n.sh(
        s,
        "ip link set s0 up && ip addr add 198.19.0.2/24 dev s0 \
         && ip route add default via 198.19.0.1",
    );

    let dir = common::fresh_dir("bgp");
    let sock = dir.join("sluice.sock");
    let cfg = dir.join("rtr.toml");
    std::fs::write(
        &cfg,
        format!(
            "{CONFIG}\n[management]\nsocket = \"{}\"\nmetrics = \"127.0.0.1:9917\"\n",
            sock.display()
        ),
    )
    .unwrap();
    let _sluice = sluice_in(r, &cfg, &sock);
    // The kernel side of the router: the ports' addresses on the TAPs, as
    // the host of a routing daemon configures them.
    n.sh(
        r,
        "ip addr add 198.18.0.1/24 dev sl-inside && ip addr add 198.19.0.1/24 dev sl-outside \
         && ip addr add 198.20.0.1/24 dev sl-third",
    );
    let _bird_r = bird(r, &dir, "rtr", BIRD_RTR);
    let _bird_p = bird(
        p,
        &dir,
        "peer",
        &bird_peer("198.18.0.2", 65002, "198.18.0.1", true),
    );
    let _bird_q = bird(
        q,
        &dir,
        "peer2",
        &bird_peer("198.20.0.2", 65003, "198.20.0.1", false),
    );

    // The sessions come up through Sluice's punt path, the routes reach
    // the kernel and Sluice's FIB.
    let established = |proto: &str, secs: u64| {
        let t = Instant::now();
        loop {
            let st = birdc(r, &dir, "rtr", &format!("show protocols {proto}"));
            if st.contains("Established") {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(secs),
                "BGP session {proto} not established: {st}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    established("peer", 40);
    established("peer2", 40);
    let via = |gw: &'static str, port: &'static str| {
        move |r: &serde_json::Value| {
            r["paths"]
                .as_array()
                .is_some_and(|p| p.len() == 1 && p[0]["via"] == gw && p[0]["port"] == port)
        }
    };
    let both = |r: &serde_json::Value| {
        r["paths"].as_array().is_some_and(|p| {
            p.len() == 2
                && p.iter()
                    .any(|h| h["via"] == "198.18.0.2" && h["port"] == "inside")
                && p.iter()
                    .any(|h| h["via"] == "198.20.0.2" && h["port"] == "third")
        })
    };
    until_routes(&sock, &["198.51.100.9"], 20, via("198.18.0.2", "inside"));
    until_routes(&sock, &["203.0.113.1"], 20, both);

    // Traffic to an announced prefix is forwarded by Sluice.
    let tx = |port: usize| {
        json(&sock, &["show", "ports"])["ports"][port]["tx_pkts"]
            .as_u64()
            .unwrap()
    };
    let before = tx(0);
    let out = n.sh(s, "ping -c 5 -i 0.2 -W 2 -q 198.51.100.1 || true");
    assert!(
        out.contains(" 0% packet loss"),
        "ping through Sluice: {out}\n{}\n{}",
        json(&sock, &["show", "ports"]),
        json(&sock, &["show", "routes", "198.19.0.2"])
    );
    assert!(tx(0) >= before + 5, "not forwarded by Sluice");
    let fwd = n.sh(r, "cat /proc/sys/net/ipv4/ip_forward");
    assert_eq!(fwd.trim(), "0", "the router's kernel does not forward");

    // ECMP: 200 UDP flows to the anycast address, spread over both peers
    // by Sluice (each flow's datagram goes one way; both ways get a fair
    // share: fewer than 60 of 200 on a side has odds below 1e-8).
    let flows = 200;
    let (i0, t0) = (tx(0), tx(2));
    n.sh(
        s,
        &format!(
            "python3 -c \"import socket, time\n\
             s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             for p in range(5001, {}): s.sendto(b'x', ('203.0.113.1', p)); time.sleep(0.001)\"",
            5001 + flows
        ),
    );
    std::thread::sleep(Duration::from_millis(300));
    let (di, dt) = (tx(0) - i0, tx(2) - t0);
    assert!(
        di + dt >= flows && di >= 60 && dt >= 60,
        "ECMP spread of {flows} flows: {di} to peer, {dt} to peer2"
    );

    // A link down on peer2's side: Sluice's port loses its carrier, so
    // does its TAP; BIRD drops the session and the route shrinks to the
    // first peer. Back up: the session and the second path return.
    n.sh(q, "ip link set q0 down");
    until_routes(&sock, &["203.0.113.1"], 30, via("198.18.0.2", "inside"));
    until_routes(&sock, &[], 10, |r| {
        r["netlink"]["links"]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x["port"] == "third" && x["up"] == false))
    });
    let st = birdc(r, &dir, "rtr", "show protocols peer2");
    assert!(!st.contains("Established"), "{st}");
    let out = n.sh(s, "ping -c 3 -i 0.2 -W 2 -q 203.0.113.1 || true");
    assert!(
        out.contains(" 0% packet loss"),
        "after the link down: {out}"
    );
    n.sh(q, "ip link set q0 up");
    established("peer2", 40);
    until_routes(&sock, &["203.0.113.1"], 20, both);

    // The control plane in the metrics (the endpoint is in `rtr`'s
    // namespace), which Prometheus' linter accepts.
    let text = n.sh(
        r,
        "python3 -c \"import urllib.request; \
         print(urllib.request.urlopen('http://127.0.0.1:9917/metrics').read().decode())\"",
    );
    let sample = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} not in the metrics:\n{text}"))
    };
    assert!(sample("sluice_tap_carrier_changes_total") >= 2.0);
    assert!(sample("sluice_netlink_link_changes_total") >= 2.0);
    assert!(sample("sluice_netlink_routes") >= 4.0);
    assert!(sample("sluice_netlink_neighbors") >= 2.0);
    assert_eq!(sample(r#"sluice_port_link_up{port="third"}"#), 1.0);
    assert_eq!(sample(r#"sluice_netlink_link_up{port="third"}"#), 1.0);
    if have("promtool") {
        promtool_accepts(&text);
    }

    // The peer withdraws: the route leaves the FIB.
    let _ = birdc(p, &dir, "peer", "disable extra");
    until_routes(&sock, &["198.51.100.1"], 20, |r| r["route"].is_null());
    let out = n.sh(s, "ping -c 2 -i 0.2 -W 1 -q 198.51.100.1 || true");
    assert!(
        out.contains("100% packet loss") || out.contains("Unreachable"),
        "after the withdrawal: {out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// OSPF through Sluice: its hellos go to 224.0.0.5, link-local multicast
/// that Sluice punts to the TAP (and the kernel's leave through the
/// port); the peer's external route reaches the FIB.
#[test]
fn ospf_through_the_punt_path() {
    if !as_root() {
        return;
    }
    if !have("ip") || !have("bird") || !have("birdc") || !have("ping") {
        return;
    }
    let n = Nets::new("sl-ospf", &["p", "r", "s"]);
    let (p, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.veth("p0", p, "r0", r);
    n.veth("s0", s, "r1", r);
    n.sh(
        r,
        "ip link set r0 up && ip link set r1 up && ip link set lo up \
         && sysctl -qw net.ipv4.conf.r0.arp_ignore=8 net.ipv4.conf.r1.arp_ignore=8",
    );
    n.sh(
        p,
        "ip link set lo up && ip link set p0 up && ip addr add 198.18.0.2/24 dev p0 \
         && ip addr add 203.0.113.1/32 dev lo && ip route add 198.19.0.0/24 via 198.18.0.1",
    );
    n.sh(
        s,
        "ip link set s0 up && ip addr add 198.19.0.2/24 dev s0 \
         && ip route add default via 198.19.0.1",
    );
    let dir = common::fresh_dir("ospf");
    let sock = dir.join("sluice.sock");
    let cfg = dir.join("rtr.toml");
    // The BGP test's router, without its third port.
    let third = CONFIG.find("[[port]]\nname = \"third\"").unwrap();
    let end = CONFIG[third..].find("iface = \"r2\"\n").unwrap() + third + 13;
    let config = format!("{}{}", &CONFIG[..third], &CONFIG[end..]).replace(", \"third\"]", "]");
    std::fs::write(
        &cfg,
        format!("{config}\n[management]\nsocket = \"{}\"\n", sock.display()),
    )
    .unwrap();
    let _sluice = sluice_in(r, &cfg, &sock);
    n.sh(
        r,
        "ip addr add 198.18.0.1/24 dev sl-inside && ip addr add 198.19.0.1/24 dev sl-outside",
    );
    let rtr = r#"
router id 198.18.0.1;
protocol device { scan time 1; }
protocol kernel { ipv4 { export where source = RTS_OSPF_EXT2; }; scan time 1; }
protocol ospf v2 o {
  ipv4 { import all; export none; };
  area 0 { interface "sl-inside" { type ptp; hello 1; dead 4; }; };
}
"#;
    let peer = r#"
router id 198.18.0.2;
protocol device { scan time 1; }
protocol static { ipv4; route 203.0.113.0/24 blackhole; }
protocol ospf v2 o {
  ipv4 { import none; export where source = RTS_STATIC; };
  area 0 { interface "p0" { type ptp; hello 1; dead 4; }; };
}
"#;
    let _bird_r = bird(r, &dir, "rtr", rtr);
    let _bird_p = bird(p, &dir, "peer", peer);
    let t = Instant::now();
    loop {
        let st = birdc(r, &dir, "rtr", "show ospf neighbors");
        if st.contains("Full") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(40),
            "OSPF adjacency not full: {st}\n{}",
            json(&sock, &["show", "ports"])
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    until_routes(&sock, &["203.0.113.1"], 30, |r| {
        r["paths"].as_array().is_some_and(|p| {
            p.len() == 1 && p[0]["via"] == "198.18.0.2" && p[0]["port"] == "inside"
        })
    });
    let ports = json(&sock, &["show", "ports"]);
    assert!(
        ports["ports"][0]["punted"].as_u64() > Some(0),
        "the hellos were punted: {ports}"
    );
    let out = n.sh(s, "ping -c 3 -i 0.2 -W 2 -q 203.0.113.1 || true");
    assert!(
        out.contains(" 0% packet loss"),
        "ping over the OSPF route: {out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
