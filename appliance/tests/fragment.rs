//! IPv4 fragmentation end to end: Sluice on AF_PACKET ports in a
//! namespace, its outside port's MTU 1,000 below the inside's 1,500, as a
//! router in front of a tunnel or PPPoE link is. A client sends UDP
//! datagrams and pings of 1,428 bytes without Don't Fragment: Sluice sends
//! each as two fragments, and the server's kernel reassembles them (it
//! answers with what it received); with Don't Fragment the client gets
//! Fragmentation Needed with the MTU. Before, Sluice dropped the packets
//! without DF as `mtu_exceeded`, a black hole (no ICMP to learn from).
//! Through the router alone and through the gateway (firewall, conntrack,
//! masquerade: the fragments carry the translated addresses and ports).
//! Then the client sends datagrams and pings of 3,028 bytes, which its
//! kernel sends as three fragments, and the server answers each with as
//! many bytes, in four fragments over its 1,000-byte link (its answers
//! to the pings of 1,428 bytes were in two already): Sluice
//! forwards every fragment it receives (splitting those over the outside
//! MTU again), and the gateway tracks and translates them by their
//! datagram's first fragment (virtual reassembly), where it used to drop
//! them all as `fragment`.
//! Last, `ping -R`: the route recorded lists Sluice's address on each
//! way out (IPv4 options stamped), once.
//! Needs root, `ip`, `ping` and `python3`; skipped without them unless `CI`
//! is set. The namespaces are removed when the test ends, passed or
//! failed.

mod common;

use common::{as_root, have, stop_for_summary, Nets};
use std::time::Duration;

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
mtu = 1000
[port.afpacket]
iface = "r1"

[[worker]]
core = 0
mode = "l3fwd"
rx = ["inside", "outside"]
[worker.poll]
mode = "interrupt"
"#;

const GATEWAY: &str = r#"
[firewall]
default = "drop"

[[firewall.rule]]
action = "accept"
in = "inside"
state = ["new", "related"]

[[nat.snat]]
out = "outside"
src = "198.18.0.0/24"
to = "masquerade"
"#;

/// The server: answers each UDP datagram with its length and the address
/// it came from (the kernel reassembled it), padded with spaces to the
/// datagram's length when that is over 2,000 bytes.
const SERVER: &str = r#"
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.19.0.2", 9000))
while True:
    d, a = s.recvfrom(65536)
    ok = d == bytes(i % 251 for i in range(len(d)))
    r = ("%d %s %s" % (len(d), a[0], ok)).encode()
    if len(d) > 2000:
        r = r.ljust(len(d))
    s.sendto(r, a)
"#;

/// The client: `count` datagrams of `size` bytes, each answered in time
/// with what the server must have seen.
const CLIENT: &str = r#"
import socket, sys
seen, size, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
IP_MTU_DISCOVER, IP_PMTUDISC_DONT = 10, 0
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DONT)
s.settimeout(2)
want = "%d %s True" % (size, seen)
good = 0
for i in range(count):
    s.sendto(bytes(i % 251 for i in range(size)), ("198.19.0.2", 9000))
    try:
        r = s.recv(65536).decode()
    except socket.timeout:
        print("timeout", i)
        continue
    if r.rstrip() == want and (size <= 2000 or len(r) == size):
        good += 1
    else:
        print("got", r[:40], len(r))
print("udp %d of %d" % (good, count))
"#;

#[test]
fn non_df_packets_over_the_mtu_are_fragmented_by_the_router() {
    fragmented("", "198.18.0.2");
}

#[test]
fn non_df_packets_over_the_mtu_are_fragmented_by_the_gateway() {
    fragmented(GATEWAY, "198.19.0.1");
}

/// The lab with `extra` config sections; the server must see the
/// client's datagrams come from `seen`.
fn fragmented(extra: &str, seen: &str) {
    if !as_root() {
        return;
    }
    if !have("ip") || !have("python3") || !have("ping") {
        return;
    }
    let tag = if extra.is_empty() { "r" } else { "g" };
    let n = Nets::mirror_lab(&format!("sl-fr{tag}"));
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.sh(
        c,
        "ip link set c0 up && ip addr add 198.18.0.2/24 dev c0 \
         && ip route add 198.19.0.0/24 via 198.18.0.1",
    );
    // The server's way back to the client's subnet, where it is not
    // translated.
    n.sh(
        s,
        "ip link set s0 up mtu 1000 && ip addr add 198.19.0.2/24 dev s0 \
         && ip route add 198.18.0.0/24 via 198.19.0.1",
    );
    let dir = common::fresh_dir(&format!("frag-{tag}"));
    let cfg = dir.join("frag.toml");
    std::fs::write(&cfg, format!("{CONFIG}{extra}")).unwrap();
    std::fs::write(dir.join("server.py"), SERVER).unwrap();
    std::fs::write(dir.join("client.py"), CLIENT).unwrap();
    let _server = common::python_in(s, &dir.join("server.py"));
    let child = common::sluice_json_in(r, &cfg);
    // The ports are open well before this.
    std::thread::sleep(Duration::from_millis(1500));
    let client = |size: usize, count: usize| {
        n.sh(
            c,
            &format!(
                "python3 {} {seen} {size} {count} 2>&1 || true",
                dir.join("client.py").display()
            ),
        )
    };
    let ping = |size: usize| {
        n.sh(
            c,
            &format!("ping -M dont -s {size} -c 3 -i 0.2 -W 2 198.19.0.2 || true"),
        )
    };
    let (udp, pings) = (client(1400, 30), ping(1400));
    let (big, big_pings) = (client(3000, 20), ping(3000));
    // Last: the client learns the path MTU from the answer.
    let df = n.sh(c, "ping -M do -s 1400 -c 1 -W 2 198.19.0.2 2>&1 || true");
    // Record Route (`ping -R`): Sluice's address on each way out.
    let rr = n.sh(c, "ping -R -c 1 -W 2 198.19.0.2 2>&1 || true");
    let (v, _) = stop_for_summary(child);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(udp.contains("udp 30 of 30"), "{udp}");
    assert!(pings.contains(" 0% packet loss"), "{pings}");
    assert!(df.contains("mtu = 1000") || df.contains("mtu=1000"), "{df}");
    assert!(big.contains("udp 20 of 20"), "{big}");
    assert!(big_pings.contains(" 0% packet loss"), "{big_pings}");
    let route: Vec<&str> = rr
        .split_once("RR:")
        .map_or("", |(_, r)| r)
        .split_whitespace()
        .take_while(|w| w.parse::<std::net::Ipv4Addr>().is_ok())
        .collect();
    // The client, Sluice out to the server, the server (twice: Linux
    // records its address as the request arrives and as the reply
    // leaves), Sluice out to the client, the client: Sluice's two stamps.
    assert_eq!(
        route,
        [
            "198.18.0.2",
            "198.19.0.1",
            "198.19.0.2",
            "198.19.0.2",
            "198.18.0.1",
            "198.18.0.2"
        ],
        "{rr}"
    );
    let summary = v.to_string();
    assert_eq!(v["balance"]["balanced"], true, "{summary}");
    let events = &v["cores"][0]["events"];
    let ev = |k: &str| events[k].as_u64().unwrap_or(0);
    // 30 datagrams and 3 echo requests of 1,428 bytes, each split in two
    // (976 bytes of payload, then 432); the replies fit. Then 20
    // datagrams and 3 echo requests of 3,028 bytes, which arrive as
    // fragments of 1,480, 1,480 and 68 bytes of payload, the first two
    // each split in two again; the answers arrive in four fragments
    // (976 × 3 and 80 bytes), which fit.
    assert_eq!(ev("frag_packets"), 33 + 23 * 2, "{events}");
    assert_eq!(ev("frag_sent"), 66 + 23 * 4, "{events}");
    assert_eq!(ev("frag_dropped"), 0, "{events}");
    assert_eq!(ev("icmp_frag_needed"), 1, "{events}");
    // The second fragments left as the stage's own packets, beside the
    // first packets to the server, held while Sluice resolved it.
    assert_eq!(
        v["ports"][1]["injected"].as_u64(),
        Some(33 + 23 * 2 + ev("held_sent")),
        "{summary}"
    );
    if !extra.is_empty() {
        // Every fragment received went by its datagram's first: none
        // waited, none was refused. Besides the 3,028-byte datagrams',
        // the server's link splits its answers to the pings of 1,428
        // bytes in two.
        assert_eq!(ev("reass_fragments"), 23 * (3 + 4) + 3 * 2, "{events}");
        for k in ["reass_held", "reass_timeout", "reass_dropped", "reass_full"] {
            assert_eq!(ev(k), 0, "{k}: {events}");
        }
    }
    assert_eq!(v["balance"]["stage_drops"].as_u64(), Some(0), "{summary}");
}

/// Two gateway workers, each polling one of two RX queues of each
/// AF_PACKET port: the ports' fanout spreads flows by Sluice's flow hash,
/// and every fragment by its addresses alone, so a datagram's fragments
/// reach one worker but not always the one its flow's packets reach.
/// Each of 24 client sockets sends a small datagram and then a 3,000-byte
/// one (three fragments); the server answers each with the address and
/// port it came from. Each socket's two datagrams must come from one NAT
/// port: one flow, one mapping (the worker that got the first fragment
/// hands the datagram to the flow's worker). Before, a flow whose
/// fragments reached the other worker got a second flow and mapping
/// there, and the server saw two ports. Then IPv6 (routed, not
/// translated, through the stateful firewall): 24 flows each answered for
/// a small datagram and a 3,000-byte one, fragments both ways, so the
/// fanout program spreads IPv6 symmetrically too.
#[test]
fn two_workers_keep_one_mapping_for_a_flows_fragments() {
    if !as_root() || !have("ip") || !have("python3") {
        return;
    }
    let n = Nets::mirror_lab("sl-frw");
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    let v6 = |dev: &str, at: &str, to: &str| {
        format!(
            "sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.{dev}.disable_ipv6=0 \
             net.ipv6.conf.{dev}.accept_ra=0 && ip -6 addr add {at}/64 dev {dev} nodad \
             && ip -6 route add {to}"
        )
    };
    n.sh(
        c,
        &format!(
            "ip link set c0 up && ip addr add 198.18.0.2/24 dev c0 \
             && ip route add 198.19.0.0/24 via 198.18.0.1 && {}",
            v6(
                "c0",
                "2001:db8:18::2",
                "2001:db8:19::/64 via 2001:db8:18::1"
            )
        ),
    );
    n.sh(
        s,
        &format!(
            "ip link set s0 up && ip addr add 198.19.0.2/24 dev s0 && {}",
            v6(
                "s0",
                "2001:db8:19::2",
                "2001:db8:18::/64 via 2001:db8:19::1"
            )
        ),
    );
    let config = CONFIG
        .replace("mtu = 1000\n", "")
        .replace(
            "ipv4 = [\"198.18.0.1/24\"]",
            "ipv4 = [\"198.18.0.1/24\"]\nipv6 = [\"2001:db8:18::1/64\"]",
        )
        .replace(
            "ipv4 = [\"198.19.0.1/24\"]",
            "ipv4 = [\"198.19.0.1/24\"]\nipv6 = [\"2001:db8:19::1/64\"]",
        )
        .replace("[port.afpacket]", "rxq = 2\ntxq = 2\n[port.afpacket]")
        .replace(
            "rx = [\"inside\", \"outside\"]\n[worker.poll]\nmode = \"interrupt\"",
            "rx = [\"inside:0\", \"outside:0\"]\n[worker.poll]\nmode = \"interrupt\"\n\n\
             [[worker]]\ncore = 1\nmode = \"l3fwd\"\nrx = [\"inside:1\", \"outside:1\"]\n\
             [worker.poll]\nmode = \"interrupt\"",
        );
    let dir = common::fresh_dir("frag-workers");
    let cfg = dir.join("frag.toml");
    std::fs::write(&cfg, format!("{config}{GATEWAY}")).unwrap();
    std::fs::write(
        dir.join("server.py"),
        r#"
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.19.0.2", 9000))
while True:
    d, a = s.recvfrom(65536)
    s.sendto(("%s %d %d" % (a[0], a[1], len(d))).encode(), a)
"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("client.py"),
        r#"
import socket
IP_MTU_DISCOVER, IP_PMTUDISC_DONT = 10, 0
same = 0
for k in range(24):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DONT)
    s.settimeout(2)
    seen = []
    for size in (100, 3000):
        for _ in range(3):
            s.sendto(b"x" * size, ("198.19.0.2", 9000))
            try:
                r = s.recv(100).decode().split()
            except socket.timeout:
                continue
            if r[2] == str(size):
                seen.append(r[1])
                break
    if len(seen) == 2 and seen[0] == seen[1]:
        same += 1
    else:
        print("socket", k, "seen from", seen)
print("one port %d of 24" % same)
"#,
    )
    .unwrap();
    // IPv6, not translated: each datagram answered with as many bytes
    // (a 3,000-byte one in fragments both ways), so both directions of
    // each flow, and the first fragments of each, must reach its worker's
    // stateful firewall.
    std::fs::write(
        dir.join("server6.py"),
        r#"
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(("2001:db8:19::2", 9000))
while True:
    d, a = s.recvfrom(65536)
    s.sendto(("%s %d %d" % (a[0], a[1], len(d))).encode().ljust(len(d)), a)
"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("client6.py"),
        r#"
import socket
good = 0
for k in range(24):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.settimeout(2)
    ok = 0
    for size in (100, 3000):
        for _ in range(3):
            s.sendto(b"x" * size, ("2001:db8:19::2", 9000))
            try:
                r = s.recv(65536)
            except socket.timeout:
                continue
            if len(r) == size and r.split()[2] == str(size).encode():
                ok += 1
                break
    if ok == 2:
        good += 1
    else:
        print("socket", k, "answered", ok)
print("answered %d of 24" % good)
"#,
    )
    .unwrap();
    let _server = common::python_in(s, &dir.join("server.py"));
    let _server6 = common::python_in(s, &dir.join("server6.py"));
    let child = common::sluice_json_in(r, &cfg);
    std::thread::sleep(Duration::from_millis(1500));
    let out = n.sh(
        c,
        &format!("python3 {} 2>&1 || true", dir.join("client.py").display()),
    );
    let out6 = n.sh(
        c,
        &format!("python3 {} 2>&1 || true", dir.join("client6.py").display()),
    );
    let (v, _) = stop_for_summary(child);
    let _ = std::fs::remove_dir_all(&dir);
    let summary = v.to_string();
    assert!(out.contains("one port 24 of 24"), "{out}\n{summary}");
    assert!(out6.contains("answered 24 of 24"), "{out6}\n{summary}");
    assert_eq!(v["balance"]["balanced"], true, "{summary}");
    // Both workers received, and first fragments were handed over.
    let handed: u64 = (0..2)
        .filter_map(|p| v["ports"][p]["drops"]["handed_off"].as_u64())
        .sum();
    assert!(handed > 0, "{summary}");
    for w in 0..2 {
        assert!(
            v["cores"][w]["events"]["reass_fragments"].as_u64() > Some(0),
            "{summary}"
        );
    }
}
