//! NAT64 (RFC 6146, RFC 7915) with real stacks on both sides: namespaces
//! `c` (an IPv6-only client, 2001:db8:64::2/64) — `r` (Sluice on
//! AF_PACKET ports, and built with `afxdp` on AF_XDP ports too,
//! `[[nat.nat64]]` for 64:ff9b::/96 out of its IPv4
//! port, a stateful firewall) — `s` (an IPv4-only server, 198.19.0.2/24,
//! on a 1,400-byte link). The client pings, fetches a file with curl and
//! runs iperf3 to `64:ff9b::198.19.0.2`; the server sees it as Sluice's
//! address; the server's port unreachable reaches the client's socket as
//! ICMPv6 (the error translated with its quote); a packet too long for
//! the IPv4 link gets Packet Too Big with that link's MTU plus 20, which
//! the client's kernel takes as the path's; 3,000-byte UDP datagrams go
//! both ways in fragments (the client's IPv6 ones translated, and
//! fragmented again for the 1,400-byte link; the server's IPv4 ones
//! translated with fragment headers) and arrive whole, and so do
//! 3,000-byte pings. Needs root, `ip`, `ping`, `python3`,
//! `curl` and `iperf3`; skipped without them unless `CI` is set. The
//! namespaces end with the test, passed or failed.

mod common;

use common::{as_root, ctl_json, have, Nets};

/// Echoes each UDP datagram to port 9001 back to its sender.
const UDP_ECHO: &str = r#"
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.19.0.2", 9001))
while True:
    d, a = s.recvfrom(65535)
    s.sendto(d, a)
"#;

/// Sends a 3,000-byte datagram through NAT64 and prints "whole" when the
/// same bytes come back (up to three tries).
const UDP_BIG: &str = r#"
import socket
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
u.settimeout(2)
d = bytes((i * 7 + i // 251) % 256 for i in range(3000))
for _ in range(3):
    u.sendto(d, ("64:ff9b::198.19.0.2", 9001))
    try:
        print("whole" if u.recv(65535) == d else "changed")
        break
    except socket.timeout:
        pass
else:
    print("timeout")
"#;

const CONFIG: &str = r#"
[run]
duration = 0
stats_period = 1.0

[[port]]
name = "lan"
driver = "afpacket"
ipv6 = ["2001:db8:64::1/64"]
[port.afpacket]
iface = "r0"

[[port]]
name = "wan"
driver = "afpacket"
ipv4 = ["198.19.0.1/24"]
mtu = 1400
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

[[nat.nat64]]
out = "wan"

[management]
socket = "SOCK"
"#;

#[test]
fn an_ipv6_only_client_reaches_an_ipv4_server() {
    nat64_lab("afpacket", "sl-n64");
}

/// The same on AF_XDP ports: translations that grow and shrink frames in
/// UMEM buffers.
#[cfg(feature = "afxdp")]
#[test]
fn an_ipv6_only_client_reaches_an_ipv4_server_over_afxdp() {
    nat64_lab("afxdp", "sl-n64x");
}

/// The IPv4 server on a 1,500-byte link and the IPv6-only client on a
/// 1,280-byte one: the server's 3,000-byte datagrams and echo replies,
/// fragmented at 1,500 bytes without DF, become IPv6 packets too big for
/// the client's link, and leave as IPv6 fragments (RFC 7915 5.1.1, each
/// translated fragment split again) that the client puts together.
#[test]
fn an_ipv4_servers_fragments_reach_a_smaller_ipv6_link() {
    nat64_split_lab(1280, 1500, "sl-n64s");
}

/// The IPv4 server on a jumbo link (MTU 9,000) and the IPv6-only client
/// on a 1,500-byte one: the server's 3,000- and 8,000-byte answers, sent
/// whole, leave as IPv6 fragments (or, sent with DF, get Fragmentation
/// Needed and come again in IPv4 fragments, each split again).
#[test]
fn an_ipv4_server_on_a_jumbo_link_reaches_an_ipv6_only_client() {
    nat64_split_lab(1500, 9000, "sl-n64j");
}

/// The IPv6-only client on a jumbo link and the IPv4 server on a
/// 1,500-byte one: the client's first 3,000-byte datagram, whole as
/// IPv6, is too big for the IPv4 link with DF (set above 1,260 bytes) and
/// is answered with Packet Too Big (1,520), after which the client sends
/// in fragments (each echo's first fragment waiting for its last); the
/// server's answers, fragmented at 1,500 bytes, leave as IPv6 fragments.
#[test]
fn an_ipv6_only_client_on_a_jumbo_link_reaches_an_ipv4_server() {
    nat64_split_lab(9000, 1500, "sl-n64c");
}

/// An IPv6-only client with no address of its own (a laptop or phone
/// joining the LAN): it forms its address in the port's /64 from Sluice's
/// Router Advertisements (SLAAC), takes Sluice's link-local address as
/// its default router and the advertised MTU as its link's (its own link
/// says 9,000, 3,000 on AF_XDP, the router's 1,500: without the option
/// its large packets would be lost), then reaches the IPv4 server
/// through NAT64. tshark decodes what Sluice sent: the prefix, the MTU,
/// the DNS server and search list (RFC 8106) and the NAT64 prefix (RFC
/// 8781), checksum good.
#[test]
fn an_ipv6_only_client_configures_itself_from_sluices_advertisements() {
    ra_lab("afpacket", "sl-ra");
}

/// The same on AF_XDP ports: the solicitation through the XDP program,
/// the advertisements sent from UMEM buffers.
#[cfg(feature = "afxdp")]
#[test]
fn an_ipv6_only_client_configures_itself_over_afxdp() {
    ra_lab("afxdp", "sl-rax");
}

fn ra_lab(driver: &str, lab: &str) {
    if !as_root() || !have("ip") || !have("ping") || !have("tshark") {
        return;
    }
    let n = Nets::mirror_lab(lab);
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.sh(
        s,
        "ip link set lo up && ip link set s0 up && ip addr add 198.19.0.2/24 dev s0",
    );
    let dir = common::fresh_dir(lab);
    let sock = dir.join("sluice.sock");
    let cfg = dir.join("r.toml");
    let config = CONFIG
        .replace("SOCK", &sock.display().to_string())
        .replace(
            "iface = \"r0\"\n",
            "iface = \"r0\"\n[port.ra]\nrdnss = [\"2001:db8:64::53\"]\ndnssl = [\"lab.example\"]\n",
        )
        .replace("driver = \"afpacket\"", &format!("driver = \"{driver}\""))
        .replace("[port.afpacket]", &format!("[port.{driver}]"));
    assert!(config.contains("[port.ra]"));
    std::fs::write(&cfg, config).unwrap();
    let sluice = common::sluice_in(r, &cfg, &sock);
    // The client's link up with IPv6 off (no solicitation yet), its MTU
    // above the router's 1,500 (AF_XDP's XDP program on the peer caps a
    // veth's at about 3,500).
    let mtu = if driver == "afxdp" { 3000 } else { 9000 };
    n.sh(
        c,
        &format!("ip link set lo up && ip link set c0 mtu {mtu} up"),
    );
    // What reaches the client, from before it asks.
    let pcap = dir.join("ra.pcap");
    let _tshark = common::Killed(
        std::process::Command::new("ip")
            .args(["netns", "exec", c, "tshark", "-q", "-i", "c0", "-c", "1"])
            .args(["-f", "icmp6 and ip6[40] == 134", "-w"])
            .arg(&pcap)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    n.sh(
        c,
        "sysctl -qw net.ipv6.conf.c0.disable_ipv6=0 net.ipv6.conf.c0.accept_ra=1 \
         net.ipv6.conf.c0.autoconf=1 net.ipv6.conf.c0.accept_dad=0 \
         net.ipv6.conf.c0.router_solicitation_delay=0",
    );
    // Sluice's link-local address: fe80:: and r0's MAC's EUI-64.
    let mac = n.sh(r, "cat /sys/class/net/r0/address");
    let router_ll = pipeline::router::link_local(mac.trim().parse().unwrap());
    // The client's address and default route, within 10 s.
    let mut state = String::new();
    for _ in 0..100 {
        state = n.sh(
            c,
            "ip -6 addr show dev c0 scope global; ip -6 route show default; \
             cat /proc/sys/net/ipv6/conf/c0/mtu",
        );
        if state.contains("2001:db8:64:") && state.contains("default via") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        state.contains("inet6 2001:db8:64:0:") && state.contains("dynamic"),
        "an address formed from the prefix: {state}"
    );
    assert!(
        state.contains(&format!("default via {router_ll} dev c0 proto ra")),
        "Sluice's link-local address as the default router: {state}"
    );
    assert_eq!(
        state.lines().last().map(str::trim),
        Some("1500"),
        "the advertised MTU: {state}"
    );
    // Through NAT64 from that address, large pings too (the client
    // fragments them at the advertised MTU).
    for size in [56, 3000] {
        let out = n.sh(
            c,
            &format!("ping -6 -s {size} -c 3 -i 0.2 -W 2 -q 64:ff9b::198.19.0.2 || true"),
        );
        assert!(out.contains("3 received"), "{out}");
    }
    let st = ctl_json(&sock, &["stats"]);
    let ev = |name: &str| st["cores"][0]["events"][name].as_u64().unwrap_or(0);
    assert!(ev("ra_solicited") + ev("ra_sent") >= 1, "{st}");
    assert_eq!(st["balance"]["balanced"], true, "{st}");
    // `show ports` lists the link-local address the client routes by.
    let ports = ctl_json(&sock, &["show", "ports"]);
    assert_eq!(
        ports["ports"][0]["addresses"],
        serde_json::json!(["2001:db8:64::1/64", format!("{router_ll}/64")]),
        "{ports}"
    );

    // Sluice stops (SIGINT): its last advertisement, router lifetime 0,
    // takes the client's default route away at once (RFC 4861 6.2.5).
    let mut sluice = sluice;
    let pid = sluice.0.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    for _ in 0..100 {
        if matches!(sluice.0.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mut routes = String::new();
    for _ in 0..30 {
        routes = n.sh(c, "ip -6 route show default");
        if routes.trim().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(routes.trim(), "", "the default route withdrawn");

    // What tshark reads in the advertisement the client got.
    for _ in 0..200 {
        if std::fs::metadata(&pcap).is_ok_and(|m| m.len() > 100) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let fields = [
        "ipv6.src",
        "icmpv6.checksum.status",
        "icmpv6.nd.ra.router_lifetime",
        "icmpv6.opt.prefix",
        "icmpv6.opt.prefix.length",
        "icmpv6.opt.prefix.flag.a",
        "icmpv6.opt.mtu",
        "icmpv6.opt.rdnss",
        "icmpv6.opt.dnssl",
        "icmpv6.opt.pref64.prefix",
        "icmpv6.opt.pref64.plc",
    ];
    let mut cmd = std::process::Command::new("tshark");
    cmd.arg("-r").arg(&pcap).args(["-T", "fields"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let o = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let got: Vec<&str> = text.lines().next().unwrap_or("").split('\t').collect();
    let ll = router_ll.to_string();
    assert_eq!(
        got,
        [
            ll.as_str(),
            "1", // good
            "1800",
            "2001:db8:64::",
            "64",
            "1",
            "1500",
            "2001:db8:64::53",
            "lab.example",
            "64:ff9b::",
            "0x0000" // /96
        ],
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The NAT64 lab with the client's link at `client_mtu` and the server's
/// at `server_mtu`: 3,000-byte datagrams and pings, and 8,000-byte pings,
/// both ways, the server's answers split into IPv6 fragments.
fn nat64_split_lab(client_mtu: u16, server_mtu: u16, lab: &str) {
    if !as_root() || !have("ip") || !have("ping") || !have("python3") {
        return;
    }
    let n = Nets::mirror_lab(lab);
    let (c, r, s) = lab_up(&n, client_mtu, server_mtu);
    let dir = common::fresh_dir(lab);
    let sock = dir.join("sluice.sock");
    let cfg = dir.join("r.toml");
    let config = CONFIG
        .replace("SOCK", &sock.display().to_string())
        .replace("mtu = 1400", &format!("mtu = {server_mtu}"))
        .replace(
            "ipv6 = [\"2001:db8:64::1/64\"]",
            &format!("ipv6 = [\"2001:db8:64::1/64\"]\nmtu = {client_mtu}"),
        );
    std::fs::write(&cfg, config).unwrap();
    std::fs::write(dir.join("udp_echo.py"), UDP_ECHO).unwrap();
    std::fs::write(dir.join("udp_big.py"), UDP_BIG).unwrap();
    let _sluice = common::sluice_in(r, &cfg, &sock);
    let _udp_echo = common::python_in(s, &dir.join("udp_echo.py"));
    std::thread::sleep(std::time::Duration::from_millis(700));
    let got = n.sh(c, &format!("python3 {}", dir.join("udp_big.py").display()));
    let st = || ctl_json(&sock, &["stats"]);
    assert_eq!(got.trim(), "whole", "{}", st()["cores"][0]["events"]);
    for size in [3000, 8000] {
        let out = n.sh(
            c,
            &format!("ping -6 -s {size} -c 3 -i 0.2 -W 2 -q 64:ff9b::198.19.0.2 || true"),
        );
        assert!(
            out.contains("3 received"),
            "{out}\n{}",
            st()["cores"][0]["events"]
        );
    }
    // (The workers' counters as of their next report.)
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let st = st();
    assert_eq!(st["balance"]["balanced"], true, "{st}");
    let ev = |name: &str| st["cores"][0]["events"][name].as_u64().unwrap_or(0);
    // At least the six pings' answers were split.
    assert!(ev("frag_packets") >= 6, "{st}");
    assert_eq!(ev("frag_dropped"), 0, "{st}");
}

/// The lab's client (IPv6 only, its link's MTU `client_mtu`) and server
/// (IPv4 only, `server_mtu`), both links' router ends the same: the
/// namespaces' names.
fn lab_up(n: &Nets, client_mtu: u16, server_mtu: u16) -> (&str, &str, &str) {
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.sh(
        c,
        &format!(
            "sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.c0.disable_ipv6=0 \
             net.ipv6.conf.c0.accept_ra=0 && ip link set lo up \
             && ip link set c0 mtu {client_mtu} up \
             && ip -6 addr add 2001:db8:64::2/64 dev c0 nodad \
             && ip -6 route add default via 2001:db8:64::1"
        ),
    );
    n.sh(
        s,
        &format!(
            "ip link set lo up && ip link set s0 mtu {server_mtu} up \
             && ip addr add 198.19.0.2/24 dev s0"
        ),
    );
    n.sh(
        r,
        &format!("ip link set r0 mtu {client_mtu} && ip link set r1 mtu {server_mtu}"),
    );
    (c, r, s)
}

fn nat64_lab(driver: &str, lab: &str) {
    if !as_root()
        || !have("ip")
        || !have("ping")
        || !have("python3")
        || !have("curl")
        || !have("iperf3")
    {
        return;
    }
    let n = Nets::mirror_lab(lab);
    let (c, r, s) = lab_up(&n, 1500, 1400);
    let dir = common::fresh_dir(lab);
    let sock = dir.join("sluice.sock");
    let cfg = dir.join("r.toml");
    let config = CONFIG
        .replace("SOCK", &sock.display().to_string())
        .replace("driver = \"afpacket\"", &format!("driver = \"{driver}\""))
        .replace("[port.afpacket]", &format!("[port.{driver}]"));
    std::fs::write(&cfg, config).unwrap();
    std::fs::write(
        dir.join("echo.py"),
        common::seen_as_server("198.19.0.2", false),
    )
    .unwrap();
    std::fs::write(
        dir.join("client.py"),
        common::seen_as_client("64:ff9b::198.19.0.2"),
    )
    .unwrap();
    // A 3 MB file of known content for curl.
    let www = dir.join("www");
    std::fs::create_dir(&www).unwrap();
    let blob: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    std::fs::write(www.join("blob"), &blob).unwrap();
    let _sluice = common::sluice_in(r, &cfg, &sock);
    let _echo = common::python_in(s, &dir.join("echo.py"));
    std::fs::write(dir.join("udp_echo.py"), UDP_ECHO).unwrap();
    std::fs::write(dir.join("udp_big.py"), UDP_BIG).unwrap();
    let _udp_echo = common::python_in(s, &dir.join("udp_echo.py"));
    let spawn = |args: &[&str]| {
        common::Killed(
            std::process::Command::new("ip")
                .args(["netns", "exec", s])
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let www_dir = www.display().to_string();
    let _http = spawn(&[
        "python3",
        "-m",
        "http.server",
        "--bind",
        "198.19.0.2",
        "--directory",
        &www_dir,
        "8000",
    ]);
    let _iperf = spawn(&["iperf3", "-s", "-1", "-B", "198.19.0.2", "-p", "5201"]);
    std::thread::sleep(std::time::Duration::from_millis(700));

    // Echo both ways (ICMPv6 128/129 and ICMP 8/0).
    let out = n.sh(c, "ping -6 -c 3 -i 0.2 -W 2 -q 64:ff9b::198.19.0.2 || true");
    assert!(out.contains("3 received"), "ping through NAT64: {out}");

    // The server sees Sluice's address; the server's port unreachable,
    // translated, refuses the client's datagram.
    let got = n.sh(c, &format!("python3 {}", dir.join("client.py").display()));
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(lines, ["198.19.0.1", "refused"], "{got}");

    // curl: every byte of the file, through TCP segments sized by both
    // sides' MSS (the 1,400-byte IPv4 link's is the smaller).
    let sum = |text: &[u8]| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut h);
        h.finish()
    };
    let o = std::process::Command::new("ip")
        .args(["netns", "exec", c])
        .args([
            "curl",
            "-s",
            "--max-time",
            "20",
            "http://[64:ff9b::198.19.0.2]:8000/blob",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "curl: {o:?}");
    assert_eq!(o.stdout.len(), blob.len(), "the file's length");
    assert_eq!(sum(&o.stdout), sum(&blob), "the file's bytes");

    // A 3,000-byte datagram each way, in fragments both ways.
    let (r0, t0) = (
        n.sh(r, "cat /sys/class/net/r0/statistics/rx_packets"),
        n.sh(r, "cat /sys/class/net/r1/statistics/tx_packets"),
    );
    let got = n.sh(c, &format!("python3 {}", dir.join("udp_big.py").display()));
    assert_eq!(got.trim(), "whole", "a fragmented datagram each way");
    let count = |x: String| x.trim().parse::<u64>().unwrap();
    let (r1, t1) = (
        n.sh(r, "cat /sys/class/net/r0/statistics/rx_packets"),
        n.sh(r, "cat /sys/class/net/r1/statistics/tx_packets"),
    );
    assert!(
        count(r1) - count(r0) >= 3 && count(t1) - count(t0) >= 3,
        "fragments: the client's at least three, the server's link at least three"
    );

    // A 3,000-byte echo each way (ping -s 3000), in fragments both ways:
    // each ICMP message's first fragment waits for its last, which gives
    // the length its checksum needs.
    let out = n.sh(
        c,
        "ping -6 -s 3000 -c 3 -i 0.2 -W 2 -q 64:ff9b::198.19.0.2 || true",
    );
    assert!(
        out.contains("3 received"),
        "a fragmented ping: {out}\n{}",
        ctl_json(&sock, &["stats"])["cores"][0]["events"]
    );

    // iperf3 for two seconds: what the client sent, the server received.
    let out = n.sh(
        c,
        "iperf3 -6 -c 64:ff9b::198.19.0.2 -p 5201 -t 2 -J --connect-timeout 3000",
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let sent = v["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
    let received = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    assert!(received > 1_000_000, "iperf3 through NAT64: {out}");
    assert!(received <= sent, "{sent} sent, {received} received");

    // 1,452 bytes of ICMPv6 data: a 1,500-byte packet, 1,480 as IPv4,
    // over the 1,400-byte link: Packet Too Big with 1,420, which the
    // client's kernel keeps as the path's MTU.
    let o = std::process::Command::new("ip")
        .args(["netns", "exec", c])
        .args([
            "ping", "-6", "-M", "do", "-s", "1452", "-c", "2", "-i", "0.3", "-W", "2",
        ])
        .arg("64:ff9b::198.19.0.2")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(
        text.contains("mtu=1420") || text.contains("mtu = 1420"),
        "{text}"
    );
    let route = n.sh(c, "ip -6 route get 64:ff9b::198.19.0.2");
    assert!(
        route.contains("mtu 1420"),
        "the path's MTU learned: {route}"
    );
    // At that size, pings pass.
    let out = n.sh(
        c,
        "ping -6 -M do -s 1372 -c 2 -i 0.2 -W 2 -q 64:ff9b::198.19.0.2 || true",
    );
    assert!(out.contains("2 received"), "at the path's MTU: {out}");

    let st = ctl_json(&sock, &["stats"]);
    assert_eq!(st["balance"]["balanced"], true, "{st}");
    let ev = |name: &str| st["cores"][0]["events"][name].as_u64().unwrap_or(0);
    assert!(
        ev("nat64_to_ipv4") > 1000 && ev("nat64_to_ipv6") > 1000,
        "{st}"
    );
    // The translator, as `show nat` lists it: RFC 7915's default
    // lowest-ipv6-mtu.
    let nat = ctl_json(&sock, &["show", "nat"]);
    let t = &nat["nat64"][0];
    assert_eq!(
        (&t["prefix"], &t["out"], &t["lowest_ipv6_mtu"]),
        (
            &serde_json::json!("64:ff9b::/96"),
            &serde_json::json!("wan"),
            &serde_json::json!(1280)
        ),
        "{nat}"
    );
    // The flows, as `show conntrack` lists them: the client's IPv6 tuple,
    // the reply's IPv4 one to Sluice's address.
    let ct = ctl_json(&sock, &["show", "conntrack"]);
    let flows = ct["workers"][0]["flows"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        flows
            .iter()
            .filter_map(|f| f.as_str())
            .any(|f| f.contains("2001:db8:64::2")
                && f.contains("64:ff9b::")
                && f.contains("reply")
                && f.contains("198.19.0.1")),
        "{ct}"
    );
    let nat = ctl_json(&sock, &["show", "nat"]);
    assert_eq!(nat["nat64"][0]["prefix"], "64:ff9b::/96", "{nat}");
    assert_eq!(nat["nat64"][0]["out"], "wan", "{nat}");
    let _ = std::fs::remove_dir_all(&dir);
}
