//! Several routing workers end to end: Sluice on two AF_PACKET ports in
//! a namespace, each port's RX queue on its own worker, so a neighbour's
//! ARP reply reaches another worker than the packet that waited for it
//! (on a multi-queue NIC, RSS or a fanout decides the same way). The
//! first ping to the unresolved server is held by the worker that
//! received it and must go out when the other worker learns the server's
//! MAC. Then UDP GSO: the client sends with `UDP_SEGMENT` through a veth
//! that passes the aggregate on whole, and the server must receive the
//! sender's datagrams (Sluice's AF_PACKET port cuts the aggregate at the
//! size the kernel's virtio-net header gives). Both RX ring layouts:
//! `TPACKET_V3` (the aggregate in its block) and `TPACKET_V2` (the
//! aggregate larger than a frame slot, read whole from the socket). Needs
//! root, `ip` and
//! `python3`; skipped without them unless `CI` is set. The namespaces are
//! removed when the test ends, passed or failed.

mod common;

use common::{as_root, have, stop_for_summary, Nets};
use std::process::{Command, Stdio};
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
txq = 2
[port.afpacket]
iface = "r0"
ring = "RING"

[[port]]
name = "outside"
driver = "afpacket"
mac = "02:51:00:00:00:01"
ipv4 = ["198.19.0.1/24"]
txq = 2
[port.afpacket]
iface = "r1"
ring = "RING"

[[worker]]
core = 0
mode = "l3fwd"
rx = ["inside"]
[worker.poll]
mode = "adaptive"

[[worker]]
core = 1
mode = "l3fwd"
rx = ["outside"]
[worker.poll]
mode = "adaptive"
"#;

#[test]
fn per_port_workers_share_neighbours_and_cut_udp_aggregates() {
    workers_share_neighbours_and_cut_udp_aggregates("v3");
}

#[test]
fn the_same_on_tpacket_v2_rings() {
    workers_share_neighbours_and_cut_udp_aggregates("v2");
}

fn workers_share_neighbours_and_cut_udp_aggregates(ring: &str) {
    if !as_root() {
        return;
    }
    if !have("ip") || !have("ping") || !have("python3") {
        return;
    }
    let n = Nets::new(&format!("sl-wk{ring}"), &["c", "r", "s"]);
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.veth("c0", c, "r0", r);
    n.veth("s0", s, "r1", r);
    n.sh(r, "ip link set r0 up && ip link set r1 up");
    n.lab_hosts(c, s);

    let dir = common::fresh_dir(&format!("workers-{ring}"));
    let cfg = dir.join("workers.toml");
    std::fs::write(&cfg, CONFIG.replace("RING", ring)).unwrap();
    let child = common::sluice_json_in(r, &cfg);
    // Up once it answers the client's ARP (the client learns the router).
    let t = Instant::now();
    while Command::new("ip")
        .args([
            "netns",
            "exec",
            c,
            "ping",
            "-c",
            "1",
            "-W",
            "1",
            "198.18.0.1",
        ])
        .stdout(Stdio::null())
        .status()
        .map_or(true, |s| !s.success())
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "Sluice never answered"
        );
    }
    // The first echo request to the server: held on the inside worker
    // while the outside worker receives the ARP reply.
    let first = n.sh(c, "ping -c 1 -W 3 198.19.0.2 || true");
    assert!(
        first.contains("1 received"),
        "the first ping was lost: {first}"
    );
    let more = n.sh(c, "ping -c 20 -i 0.05 -W 2 198.19.0.2 || true");
    assert!(more.contains("20 received"), "{more}");

    // UDP GSO: 10 datagrams of 1,000 bytes and one of 500, sent as one
    // aggregate, 5 times; the server counts what arrives, by length.
    std::fs::write(dir.join("udp-server.py"), UDP_SERVER).unwrap();
    std::fs::write(dir.join("udp-client.py"), UDP_CLIENT).unwrap();
    let server = common::Killed(
        Command::new("ip")
            .args(["netns", "exec", s.as_str(), "python3"])
            .arg(dir.join("udp-server.py"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(500));
    let gso = n
        .sh(c, "ethtool -k c0 2>/dev/null || true")
        .contains("tx-udp-segmentation: on");
    let sent = n.sh(
        c,
        &format!("python3 {}", dir.join("udp-client.py").display()),
    );
    assert!(sent.contains("sent"), "{sent}");
    let mut server = server;
    let got = {
        use std::io::Read;
        let _ = server.0.wait();
        let mut o = String::new();
        server
            .0
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut o)
            .unwrap();
        o
    };
    assert_eq!(got.trim(), "1000x50 500x5", "datagrams received by length");

    let (v, _) = stop_for_summary(child);
    let _ = std::fs::remove_dir_all(&dir);
    let summary = v.to_string();
    assert_eq!(v["balance"]["balanced"], true, "{summary}");
    let held: u64 = (0..2)
        .map(|i| v["cores"][i]["events"]["held_sent"].as_u64().unwrap_or(0))
        .sum();
    assert!(held >= 1, "nothing was held and sent: {summary}");
    let dropped: u64 = (0..2)
        .map(|i| {
            v["cores"][i]["events"]["held_dropped"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(dropped, 0, "{summary}");
    // The inside port cut the aggregates (when the client's veth passed
    // them on whole) and dropped none as too big.
    let x = &v["ports"][0]["xstats"];
    assert_eq!(x["rx_too_big"], 0, "{summary}");
    if gso {
        assert!(x["rx_gso_frames"].as_u64() >= Some(5), "{summary}");
        assert!(x["rx_gso_segments"].as_u64() >= Some(55), "{summary}");
    }
}

/// Counts the datagrams on UDP port 9999 for 3 s (or until 55 arrived):
/// `LENxCOUNT` per length, sorted by length, descending.
const UDP_SERVER: &str = r#"
import collections, socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.19.0.2", 9999))
s.settimeout(0.2)
n = collections.Counter()
end = time.time() + 3
while time.time() < end and sum(n.values()) < 55:
    try:
        d = s.recv(65536)
        n[len(d)] += 1
    except socket.timeout:
        pass
print(" ".join("%dx%d" % (k, v) for k, v in sorted(n.items(), reverse=True)))
"#;

/// Sends 5 aggregates of 10,500 bytes with `UDP_SEGMENT` 1000 (Linux's
/// UDP GSO: 10 datagrams of 1,000 bytes and one of 500 each).
const UDP_CLIENT: &str = r#"
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_UDP, 103, 1000)  # UDP_SEGMENT
for i in range(5):
    s.sendto(bytes([i]) * 10500, ("198.19.0.2", 9999))
    time.sleep(0.05)
print("sent")
"#;
