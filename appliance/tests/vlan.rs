//! VLAN sub-interfaces end to end: Sluice on AF_PACKET ports in a
//! namespace, with an 802.1Q sub-interface (VLAN 100) and a QinQ one
//! (S-tag 200, C-tag 300) on its inside port and an untagged server
//! (the kernel's stack) outside, no static neighbours. A client sends
//! tagged ARP and echo requests on a raw socket (this kernel has no 8021q
//! module for VLAN interfaces) and checks the answers come back with the
//! same tags: from the router itself, and from the server through Sluice
//! (whose first request waits for Sluice's ARP). A frame with an unknown
//! VLAN gets no answer and is counted; on both RX ring layouts (the
//! kernel takes the outer tag off and the ring's frame header carries it,
//! at different places in `TPACKET_V3` and `TPACKET_V2`). A second test
//! gives the VLAN
//! sub-interface a TAP mirror of its own, with punt rules and the
//! netlink route mirror (see its comment). Needs root, `ip` and
//! `python3`; skipped without them unless `CI` is set. The namespaces are
//! removed when the test ends, passed or failed.

mod common;

use common::{as_root, ctl_json, have, stop_for_summary, until_routes, wait_for, Nets};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[run]
duration = 30
stats_period = 1.0

[[port]]
name = "inside"
driver = "afpacket"
mac = "02:51:00:00:00:00"
[port.afpacket]
iface = "r0"
ring = "RING"

[[port]]
name = "outside"
driver = "afpacket"
mac = "02:51:00:00:00:01"
ipv4 = ["198.19.0.1/24"]
[port.afpacket]
iface = "r1"
ring = "RING"

[[vlan]]
port = "inside"
id = 100
ipv4 = ["198.18.100.1/24"]

[[vlan]]
port = "inside"
outer = 200
id = 300
name = "cust"
ipv4 = ["198.18.200.1/24"]

[[worker]]
core = 0
mode = "l3fwd"
rx = ["inside", "outside"]
[worker.poll]
mode = "interrupt"
"#;

#[test]
fn vlan_and_qinq_sub_interfaces_route_real_traffic() {
    vlan_and_qinq_route("v3");
}

#[test]
fn vlan_and_qinq_on_tpacket_v2_rings() {
    vlan_and_qinq_route("v2");
}

fn vlan_and_qinq_route(ring: &str) {
    if !as_root() {
        return;
    }
    if !have("ip") || !have("python3") {
        return;
    }
    let n = Nets::new(&format!("sl-vl{ring}"), &["c", "r", "s"]);
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.veth("c0", c, "r0", r);
    n.veth("s0", s, "r1", r);
    n.sh(
        r,
        "ip link set r0 address 02:51:00:00:00:00 && ip link set r0 up",
    );
    n.sh(
        r,
        "ip link set r1 address 02:51:00:00:00:01 && ip link set r1 up",
    );
    n.sh(
        c,
        "ip link set c0 address 02:c1:00:00:00:02 && ip link set c0 up",
    );
    n.sh(
        s,
        "ip link set s0 up && ip addr add 198.19.0.2/24 dev s0 \
         && ip route add 198.18.0.0/16 via 198.19.0.1",
    );

    let dir = common::fresh_dir(&format!("vlan-{ring}"));
    let cfg = dir.join("vlan.toml");
    std::fs::write(&cfg, CONFIG.replace("RING", ring)).unwrap();
    let script = dir.join("client.py");
    std::fs::write(&script, CLIENT).unwrap();
    let child = common::sluice_json_in(r, &cfg);
    // The ports are open well before this.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let out = n.sh(c, &format!("python3 {}", script.display()));
    let _ = std::fs::remove_dir_all(&dir);
    for want in [
        "PASS arp vlan100",
        "PASS echo-router vlan100",
        "PASS echo-server vlan100",
        "PASS arp qinq",
        "PASS echo-router qinq",
        "PASS echo-server qinq",
        "PASS silent vlan999",
    ] {
        assert!(out.contains(want), "missing `{want}`:\n{out}");
    }

    // Stop it as an operator would; it prints its summary and exits.
    let (v, _) = stop_for_summary(child);
    let summary = v.to_string();
    assert_eq!(v["balance"]["balanced"], true, "{summary}");
    let events = &v["cores"][0]["events"];
    // The first request to the server waited for Sluice's ARP (held, then
    // sent); the client's addresses were learned from its ARP requests.
    assert_eq!(events["neighbor_held"].as_u64(), Some(1), "{events}");
    assert_eq!(events["held_sent"].as_u64(), Some(1), "{events}");
    assert!(events["echo_reply"].as_u64() >= Some(2), "{events}");
    assert!(events["arp_reply"].as_u64() >= Some(2), "{events}");
    assert_eq!(
        v["ports"][0]["drops"]["stage"]["unknown_vlan"].as_u64(),
        Some(1),
        "the VLAN 999 request: {summary}"
    );
}

/// The client: frames with 802.1Q and QinQ tags on a raw socket (this
/// kernel has no 8021q module, so no VLAN interfaces; its receive path
/// still moves a received frame's outer tag into the packet's metadata,
/// which PACKET_AUXDATA reports). Prints PASS/FAIL lines.
const CLIENT: &str = r#"
import socket, struct, time
ETH_P_ALL = 3
SOL_PACKET, PACKET_AUXDATA = 263, 8
ME = bytes.fromhex("02c100000002")
RTR = bytes.fromhex("025100000000")
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
s.bind(("c0", 0))
s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
s.settimeout(0.2)

def csum(b):
    if len(b) % 2:
        b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16:
        t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff

def tags(t):
    # t: list of (tpid, vid), outermost first
    return b"".join(struct.pack("!HH", p, v) for p, v in t)

def arp_req(t, me, target):
    a = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, ME,
                    socket.inet_aton(me), b"\0" * 6, socket.inet_aton(target))
    return b"\xff" * 6 + ME + tags(t) + b"\x08\x06" + a

def echo(t, src, dst, ident):
    icmp = struct.pack("!BBHHH", 8, 0, 0, ident, 1) + b"sluice-vlan-test"
    icmp = icmp[:2] + struct.pack("!H", csum(icmp)) + icmp[4:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(icmp), ident, 0, 64, 1, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return RTR + ME + tags(t) + b"\x08\x00" + ip + icmp

def frames(secs):
    end = time.time() + secs
    while time.time() < end:
        try:
            data, anc, _, addr = s.recvmsg(4096, socket.CMSG_SPACE(20))
        except socket.timeout:
            continue
        if addr[2] == socket.PACKET_OUTGOING:
            continue
        t = []
        for lvl, typ, d in anc:
            if lvl == SOL_PACKET and typ == PACKET_AUXDATA and len(d) >= 20:
                st, _, _, _, _, tci, tpid = struct.unpack("IIIHHHH", d[:20])
                if st & (1 << 4):
                    t.append((tpid if st & (1 << 6) else 0x8100, tci & 0xfff))
        # Tags still in the data (QinQ's inner one).
        o = 12
        while struct.unpack("!H", data[o:o + 2])[0] in (0x8100, 0x88a8):
            t.append(struct.unpack("!HH", data[o:o + 4]))
            t[-1] = (t[-1][0], t[-1][1] & 0xfff)
            o += 4
        yield t, struct.unpack("!H", data[o:o + 2])[0], data[o + 2:]

def expect(name, t, frame, match, secs=3.0):
    s.send(frame)
    for got, et, l3 in frames(secs):
        if got == t and match(et, l3):
            print("PASS", name)
            return True
    print("FAIL", name)
    return False

def is_arp_reply(ip):
    return lambda et, l3: et == 0x0806 and l3[6:8] == b"\0\2" and l3[14:18] == socket.inet_aton(ip)

def is_echo_reply(src, ident):
    return lambda et, l3: (et == 0x0800 and l3[9] == 1 and l3[12:16] == socket.inet_aton(src)
                           and l3[20] == 0 and struct.unpack("!H", l3[24:26])[0] == ident)

V100 = [(0x8100, 100)]
QINQ = [(0x88a8, 200), (0x8100, 300)]
expect("arp vlan100", V100, arp_req(V100, "198.18.100.2", "198.18.100.1"), is_arp_reply("198.18.100.1"))
expect("echo-router vlan100", V100, echo(V100, "198.18.100.2", "198.18.100.1", 11), is_echo_reply("198.18.100.1", 11))
expect("echo-server vlan100", V100, echo(V100, "198.18.100.2", "198.19.0.2", 12), is_echo_reply("198.19.0.2", 12))
expect("arp qinq", QINQ, arp_req(QINQ, "198.18.200.2", "198.18.200.1"), is_arp_reply("198.18.200.1"))
expect("echo-router qinq", QINQ, echo(QINQ, "198.18.200.2", "198.18.200.1", 21), is_echo_reply("198.18.200.1", 21))
expect("echo-server qinq", QINQ, echo(QINQ, "198.18.200.2", "198.19.0.2", 22), is_echo_reply("198.19.0.2", 22))
# A VLAN the router has no sub-interface for: no answer at all.
V999 = [(0x8100, 999)]
s.send(echo(V999, "198.18.100.2", "198.18.100.1", 31))
print("PASS silent vlan999" if not any(et == 0x0800 for _, et, _ in frames(1.0)) else "FAIL silent vlan999")
"#;

const TAP_CONFIG: &str = r#"
[run]
duration = 60
stats_period = 1.0

[management]
socket = "SOCK"

[[port]]
name = "inside"
driver = "afpacket"
mac = "02:51:00:00:00:00"
[port.afpacket]
iface = "r0"

[[port]]
name = "outside"
driver = "afpacket"
mac = "02:51:00:00:00:01"
ipv4 = ["198.19.0.1/24"]
[port.afpacket]
iface = "r1"

[[vlan]]
port = "inside"
id = 100
mtu = 1400
ipv4 = ["198.18.100.1/24"]

[control_plane]
tap = true
netlink = true

# TCP to 1790 from the VLAN's subnet only; UDP to 5000 at 5 per second.
[[control_plane.punt]]
proto = "tcp"
port = 1790
from = "198.18.100.0/24"

[[control_plane.punt]]
proto = "udp"
port = 5000
rate = 5

[[worker]]
core = 0
mode = "l3fwd"
rx = ["inside", "outside"]
[worker.poll]
mode = "adaptive"
"#;

/// A VLAN interface for the client, in Python: this kernel has no 8021q
/// module, so a TAP (`cv`) stands for `c0.100`, and frames are tagged
/// (VLAN 100) on their way from it to `c0` and untagged on their way back.
const RELAY: &str = r#"
import fcntl, os, select, socket, struct
SOL_PACKET, PACKET_AUXDATA = 263, 8
tap = os.open("/dev/net/tun", os.O_RDWR)
fcntl.ioctl(tap, 0x400454ca, struct.pack("16sH", b"cv", 0x0002 | 0x1000))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind(("c0", 0))
s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
TAG = struct.pack("!HH", 0x8100, 100)
while True:
    r, _, _ = select.select([tap, s], [], [])
    if tap in r:
        f = os.read(tap, 65536)
        s.send(f[:12] + TAG + f[12:])
    if s in r:
        data, anc, _, addr = s.recvmsg(65536, socket.CMSG_SPACE(20))
        if addr[2] == socket.PACKET_OUTGOING:
            continue
        vid = None
        for lvl, typ, d in anc:
            if lvl == SOL_PACKET and typ == PACKET_AUXDATA and len(d) >= 20:
                st, _, _, _, _, tci, _ = struct.unpack("IIIHHHH", d[:20])
                if st & (1 << 4):
                    vid = tci & 0xfff
        if vid is None and data[12:14] == b"\x81\x00":
            vid = struct.unpack("!H", data[14:16])[0] & 0xfff
            data = data[:12] + data[16:]
        if vid == 100:
            os.write(tap, data)
"#;

const TCP_SERVER: &str = r#"
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.18.100.1", 1790))
s.listen(1)
c, _ = s.accept()
n = 0
while True:
    b = c.recv(65536)
    if not b:
        break
    n += len(b)
c.sendall(str(n).encode())
c.close()
"#;

const UDP_SERVER: &str = r#"
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.18.100.1", 5000))
s.settimeout(30)
n = 0
try:
    while True:
        s.recv(2048)
        n += 1
        s.settimeout(2)
except socket.timeout:
    pass
print("udp", n)
"#;

const TAP_CLIENT: &str = r#"
import socket, time
s = socket.create_connection(("198.18.100.1", 1790), timeout=10)
s.sendall(bytes(range(256)) * 1024)
s.shutdown(socket.SHUT_WR)
n = s.recv(100)
print("PASS tcp" if n == b"262144" else "FAIL tcp %r" % n)
# Not admitted by any rule: no answer, no reset.
t = socket.socket()
t.settimeout(1)
try:
    t.connect(("198.18.100.1", 22))
    print("FAIL ssh connected")
except (socket.timeout, OSError) as e:
    print("PASS ssh denied" if isinstance(e, socket.timeout) else "FAIL ssh %r" % e)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(100):
    u.sendto(b"x" * 64, ("198.18.100.1", 5000))
print("sent 100")
"#;

/// A VLAN sub-interface's own TAP mirror, punt rules and the netlink
/// mirror, end to end: Sluice's `inside` port has no address, its VLAN
/// 100 sub-interface has one and a TAP (`sl-inside.100`) where the test
/// puts it (as a routing daemon's host would). A client behind a tagging
/// relay (VLAN 100) reaches a TCP server the kernel runs there (punted
/// untagged, the kernel's segments sent tagged), is refused port 22 (no
/// rule: `punt_denied`, the kernel never sees it) and floods UDP port
/// 5000 (rate 5: what the kernel's socket counts plus `punt_policed`
/// is exactly what was sent). Then a kernel route via the sub-interface's
/// TAP reaches Sluice's FIB over netlink and carries a ping from the
/// server side, tagged on VLAN 100 (Sluice's ARP for the next hop too).
#[test]
fn vlan_sub_interface_has_its_own_tap_punt_rules_and_routes() {
    if !as_root() {
        return;
    }
    if !have("ip") || !have("python3") {
        return;
    }
    let n = Nets::mirror_lab("sl-vt");
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.sh(
        c,
        "ip link set c0 up && ip addr add 203.0.113.1/32 dev lo && ip link set lo up",
    );
    n.sh(
        s,
        "ip link set s0 up && ip addr add 198.19.0.2/24 dev s0 \
         && ip route add 203.0.113.0/24 via 198.19.0.1",
    );

    let dir = common::fresh_dir("vlantap");
    let sock = dir.join("ctl.sock");
    let cfg = dir.join("vlan-tap.toml");
    std::fs::write(
        &cfg,
        TAP_CONFIG.replace("SOCK", &sock.display().to_string()),
    )
    .unwrap();
    for (f, text) in [
        ("relay.py", RELAY),
        ("tcp.py", TCP_SERVER),
        ("udp.py", UDP_SERVER),
        ("client.py", TAP_CLIENT),
    ] {
        std::fs::write(dir.join(f), text).unwrap();
    }
    let py = |ns: &str, f: &str| common::python_in(ns, &dir.join(f));
    let _relay = py(c, "relay.py");
    let child = common::sluice_json_in(r, &cfg);
    wait_for(&sock);
    // The sub-interface's TAP, with the port's MAC and the VLAN's MTU; no
    // TAP for the port without addresses.
    let t = Instant::now();
    loop {
        let links = n.sh(r, "ip -o link show");
        let relay = n.sh(c, "ip -o link show");
        if links.contains("sl-inside.100") && relay.contains("cv:") {
            let line = links.lines().find(|l| l.contains("sl-inside.100")).unwrap();
            assert!(line.contains("mtu 1400"), "{line}");
            assert!(line.contains("02:51:00:00:00:00"), "{line}");
            assert!(!links.contains("sl-inside:"), "{links}");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no TAP: {links}");
        std::thread::sleep(Duration::from_millis(100));
    }
    n.sh(
        c,
        "ip link set cv address 02:c1:00:00:00:02 mtu 1400 up \
         && ip addr add 198.18.100.2/24 dev cv && ip route add 198.19.0.0/24 via 198.18.100.1",
    );
    n.sh(r, "ip addr add 198.18.100.1/24 dev sl-inside.100");

    let tcp = py(r, "tcp.py");
    // Ends by itself, 2 s after the last datagram (30 s at most).
    let udp = Command::new("ip")
        .args(["netns", "exec", r, "python3"])
        .arg(dir.join("udp.py"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let out = n.sh(
        c,
        &format!("python3 {} 2>&1 || true", dir.join("client.py").display()),
    );
    drop(tcp);
    let udp = udp.wait_with_output().unwrap();
    let got: u64 = String::from_utf8_lossy(&udp.stdout)
        .trim()
        .strip_prefix("udp ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("udp server: {udp:?}"));
    assert!(out.contains("PASS tcp"), "{out}");
    assert!(out.contains("PASS ssh denied"), "{out}");
    assert!(out.contains("sent 100"), "{out}");

    // A route the kernel has via the sub-interface's TAP: in the FIB over
    // netlink, on the sub-interface, and it carries traffic tagged.
    n.sh(
        r,
        "ip route add 203.0.113.0/24 via 198.18.100.2 dev sl-inside.100",
    );
    until_routes(&sock, &["203.0.113.1"], 20, |v| {
        v["paths"].as_array().is_some_and(|p| {
            p.len() == 1 && p[0]["via"] == "198.18.100.2" && p[0]["port"] == "inside.100"
        })
    });
    let ping = n.sh(s, "ping -c 3 -i 0.2 -W 2 -q 203.0.113.1 || true");
    assert!(ping.contains(" 0% packet loss"), "{ping}");
    let nl = ctl_json(&sock, &["show", "routes"]);
    assert!(nl["netlink"]["mirrored"].as_u64() >= Some(1), "{nl}");
    let addrs = nl["netlink"]["addresses"].to_string();
    assert!(
        addrs.contains(r#"{"addr":"198.18.100.1/24","port":"inside.100"}"#),
        "{nl}"
    );

    let (v, _) = stop_for_summary(child);
    let _ = std::fs::remove_dir_all(&dir);
    let summary = v.to_string();
    assert_eq!(v["balance"]["balanced"], true, "{summary}");
    let drops = &v["ports"][0]["drops"]["stage"];
    // The SYN to port 22 and its retransmissions: denied, never punted.
    assert!(drops["punt_denied"].as_u64() >= Some(1), "{summary}");
    // Every datagram was either policed or reached the kernel's socket;
    // a burst of 100 at 5/s mostly policed.
    let policed = drops["punt_policed"].as_u64().unwrap_or(0);
    assert_eq!(got + policed, 100, "server got {got}: {summary}");
    assert!(policed >= 80, "{summary}");
    assert!(
        v["balance"]["punted"].as_u64() >= Some(5 + got),
        "{summary}"
    );
    assert!(v["balance"]["injected"].as_u64() >= Some(3), "{summary}");
    // The kernel's echo replies came back through Sluice: tagged on the
    // way in (the relay drops anything else).
    assert!(v["ports"][1]["tx_pkts"].as_u64() >= Some(3), "{summary}");
    // The TAP is gone with Sluice.
    assert!(!n.sh(r, "ip -o link show").contains("sl-inside.100"));
}

const GATEWAY_CONFIG: &str = r#"
[run]
duration = 60
stats_period = 1.0

[[port]]
name = "inside"
driver = "afpacket"
mac = "02:51:00:00:00:00"
[port.afpacket]
iface = "r0"

[[port]]
name = "outside"
driver = "afpacket"
mac = "02:51:00:00:00:01"
ipv4 = ["198.19.0.1/24"]
[port.afpacket]
iface = "r1"

[[vlan]]
port = "inside"
id = 100
ipv4 = ["198.18.100.1/24"]

[firewall]
default = "drop"

[[firewall.rule]]
action = "drop"
proto = "tcp"
dport = 23
in = "inside.100"
counter = true

[[firewall.rule]]
action = "accept"
in = "inside.100"
state = ["new", "related"]
counter = true

[[nat.snat]]
out = "outside"
src = "198.18.100.0/24"
to = "masquerade"

[[worker]]
core = 0
mode = "l3fwd"
rx = ["inside", "outside"]
[worker.poll]
mode = "interrupt"
"#;

/// The server: on ports 7000 and 23, answers each connection with the
/// address it came from.
const PEER_SERVER: &str = r#"
import select, socket
ls = []
for p in (7000, 23):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("198.19.0.2", p))
    s.listen(4)
    ls.append(s)
while True:
    r, _, _ = select.select(ls, [], [])
    for s in r:
        c, a = s.accept()
        c.recv(100)
        c.sendall(a[0].encode())
        c.close()
"#;

const GATEWAY_CLIENT: &str = r#"
import socket
s = socket.create_connection(("198.19.0.2", 7000), timeout=10)
s.sendall(b"hello")
seen = s.recv(100)
print("PASS tcp seen as 198.19.0.1" if seen == b"198.19.0.1" else "FAIL tcp seen as %r" % seen)
t = socket.socket()
t.settimeout(1)
try:
    t.connect(("198.19.0.2", 23))
    print("FAIL telnet connected")
except (socket.timeout, OSError) as e:
    print("PASS telnet dropped" if isinstance(e, socket.timeout) else "FAIL telnet %r" % e)
"#;

/// A gateway (firewall, conntrack, masquerade) whose inside is a VLAN
/// sub-interface, end to end: a client behind a tagging relay (VLAN 100,
/// as `c0.100` would be) reaches a TCP server outside, which has no route
/// back to the client's subnet and sees the connection come from the
/// outside port's address (masqueraded on the way out, translated back
/// and tagged on the way in); pings go through the same way. A rule on
/// the sub-interface (by its name, `inside.100`) drops telnet: no answer,
/// counted. Before sub-interfaces took the rules, the config refused a
/// `[[vlan]]` beside `[firewall]`/`[nat]`.
#[test]
fn a_gateway_filters_and_translates_a_vlan_sub_interface() {
    if !as_root() {
        return;
    }
    if !have("ip") || !have("python3") {
        return;
    }
    let n = Nets::mirror_lab("sl-vg");
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.sh(c, "ip link set c0 up");
    n.sh(s, "ip link set s0 up && ip addr add 198.19.0.2/24 dev s0");
    let dir = common::fresh_dir("vlangw");
    let cfg = dir.join("vlan-gateway.toml");
    std::fs::write(&cfg, GATEWAY_CONFIG).unwrap();
    for (f, text) in [
        ("relay.py", RELAY),
        ("server.py", PEER_SERVER),
        ("client.py", GATEWAY_CLIENT),
    ] {
        std::fs::write(dir.join(f), text).unwrap();
    }
    let py = |ns: &str, f: &str| common::python_in(ns, &dir.join(f));
    let _relay = py(c, "relay.py");
    let _server = py(s, "server.py");
    let child = common::sluice_json_in(r, &cfg);
    let t = Instant::now();
    while !n.sh(c, "ip -o link show").contains("cv:") {
        assert!(t.elapsed() < Duration::from_secs(20), "no relay TAP");
        std::thread::sleep(Duration::from_millis(100));
    }
    n.sh(
        c,
        "ip link set cv address 02:c1:00:00:00:02 up \
         && ip addr add 198.18.100.2/24 dev cv && ip route add 198.19.0.0/24 via 198.18.100.1",
    );
    // The ports are open well before this.
    std::thread::sleep(Duration::from_millis(1500));
    let ping = n.sh(c, "ping -c 3 -i 0.2 -W 2 -q 198.19.0.2 || true");
    let out = n.sh(
        c,
        &format!("python3 {} 2>&1 || true", dir.join("client.py").display()),
    );
    let (v, _) = stop_for_summary(child);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ping.contains(" 0% packet loss"), "{ping}");
    assert!(out.contains("PASS tcp seen as 198.19.0.1"), "{out}");
    assert!(out.contains("PASS telnet dropped"), "{out}");
    let summary = v.to_string();
    assert_eq!(v["balance"]["balanced"], true, "{summary}");
    // The telnet SYN (and any retransmission), dropped by the rule on the
    // sub-interface.
    let hits = v["rule_hits"].to_string();
    let filtered = v["ports"][0]["drops"]["stage"]["filtered"].as_u64();
    assert!(filtered >= Some(1), "{summary}");
    let events = &v["cores"][0]["events"];
    // The pings' flow and the connection to port 7000, each mapped; the
    // telnet SYNs opened nothing.
    assert_eq!(events["nat_mapped"].as_u64(), Some(2), "{events}");
    assert_eq!(events["ct_created"].as_u64(), Some(2), "{events}");
    // By rule: the drop on the sub-interface took the telnet SYNs, the
    // accept on it the two flows.
    let hit = |i: usize| v["rule_hits"][i][1].as_u64().unwrap_or(0);
    assert!(hit(0) >= 1 && filtered >= Some(hit(0)), "{hits}");
    assert_eq!(hit(1), 2, "{hits}");
}
