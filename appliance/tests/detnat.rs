//! NAT that needs no per-flow log, on real packets: namespaces `c` (four
//! inside hosts, 198.18.0.2–.5) — `r` (Sluice on AF_PACKET ports) — `s`
//! (a server that routes the outside prefix to Sluice, as an upstream
//! router would, and answers each datagram with the address and port it
//! came from).
//!
//! - Deterministic NAT (RFC 7422): 198.18.0.0/24 onto 198.19.100.0/28,
//!   16 hosts an address, 4,032 ports each. Each host's flows must leave
//!   from the address and block its offset gives it, and `sluice ctl nat
//!   lookup` must compute the host back from what the server saw, with
//!   no log.
//! - Port blocks: a pool of two addresses in blocks of 8 ports, 3 at
//!   most a host. Each host's flows must leave from blocks of its own,
//!   the blocks' allocation logged (syslog and IPFIX to `nfcapd`) so that
//!   every address and port the server saw is found back to its host in
//!   the log; a host past its blocks is refused (`nat_block_quota`); the
//!   blocks' release is logged when the flows end.
//!
//! Needs root, `ip` and `python3` (and `nfcapd`/`nfdump` for the second);
//! skipped without them unless `CI` is set. The namespaces end with the
//! test, passed or failed.

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

/// The lab (namespaces named from `name`): the four hosts on `c`, the
/// server on `s` routing the outside prefix to Sluice.
fn lab(name: &str) -> Nets {
    let n = Nets::mirror_lab(name);
    let (c, s) = (&n.0[0], &n.0[2]);
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
    n
}

#[test]
fn each_host_leaves_from_its_block_and_is_computed_back() {
    if !as_root() || !have("ip") || !have("python3") {
        return;
    }
    let n = lab("sl-det");
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
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

/// Port blocks, with their log to syslog and IPFIX.
const BLOCKS: &str = r#"
[[nat.snat]]
out = "outside"
src = "198.18.0.0/24"
to = ["198.19.100.1", "198.19.100.2"]
block = 8
max_blocks = 3

[export]
collectors = ["127.0.0.1:NFCAPD", "127.0.0.1:PCAP"]
nat_events = true
syslog = "127.0.0.1:SYSLOG"
"#;

/// From each host, datagrams from 20 ports (host .2: 26, the last two
/// past its three blocks): what the server saw, a line each ("HOST ADDR
/// PORT"), or "HOST none" for no answer.
const MANY: &str = r#"
import socket
for h in range(2, 6):
    for p in range(6000, 6026 if h == 2 else 6020):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("198.18.0.%d" % h, p))
        u.settimeout(2 if p < 6024 else 0.5)
        u.sendto(b"q", ("198.19.0.2", 7000))
        try:
            print("198.18.0.%d" % h, u.recvfrom(2048)[0].decode())
        except socket.timeout:
            print("198.18.0.%d none" % h)
        u.close()
"#;

#[test]
fn each_host_gets_port_blocks_of_its_own_and_the_log_finds_it_back() {
    if !as_root() || !have("ip") || !have("python3") || !have("nfcapd") || !have("nfdump") {
        return;
    }
    let n = lab("sl-pba");
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.sh(r, "ip link set lo up");
    let dir = common::fresh_dir("pba");
    let flows = dir.join("flows");
    std::fs::create_dir_all(&flows).unwrap();
    std::fs::write(dir.join("server.py"), SERVER).unwrap();
    std::fs::write(dir.join("client.py"), MANY).unwrap();
    let _server = common::python_in(s, &dir.join("server.py"));
    let (_syslog, syslog_port, syslog) = common::syslog_in(r, &dir);
    let (nfcapd, nf_port) = common::nfcapd_in(r, &flows);
    let (collector, pcap_port, pcap) = common::pcap_collector_in(r, &dir);
    let sock = dir.join("sluice.sock");
    let cfg = dir.join("r.toml");
    let text = BLOCKS
        .replace("NFCAPD", &nf_port.to_string())
        .replace("PCAP", &pcap_port.to_string())
        .replace("SYSLOG", &syslog_port.to_string());
    std::fs::write(&cfg, common::lab_gateway(&text, &sock)).unwrap();
    let _sluice = common::sluice_in(r, &cfg, &sock);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = n.sh(c, &format!("python3 {}", dir.join("client.py").display()));
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines.len(), 86, "{out}");
    let refused: Vec<_> = lines.iter().filter(|w| w[1] == "none").collect();
    assert_eq!(refused.len(), 2, "host .2's last two: {out}");
    assert!(refused.iter().all(|w| w[0] == "198.18.0.2"), "{out}");
    let seen: Vec<(&str, &str, u16)> = lines
        .iter()
        .filter(|w| w[1] != "none")
        .map(|w| (w[0], w[1], w[2].parse().unwrap()))
        .collect();
    // Each host's ports: from one address, in at most three blocks of 8
    // (from 1024 up), and no block shared between hosts.
    let mut owner = std::collections::BTreeMap::new();
    for &(host, public, port) in &seen {
        assert!(
            public == "198.19.100.1" || public == "198.19.100.2",
            "{host} {public}"
        );
        let block = (public, (port - 1024) / 8);
        assert_eq!(*owner.entry(block).or_insert(host), host, "{block:?}");
    }
    for h in 2..6 {
        let host = format!("198.18.0.{h}");
        let held: Vec<_> = owner.iter().filter(|(_, o)| **o == host).collect();
        // Host .2's 26 flows: three full blocks, its last two refused.
        assert_eq!(held.len(), 3, "{host}: {held:?}");
        let addrs: std::collections::BTreeSet<_> = held.iter().map(|((a, _), _)| *a).collect();
        assert_eq!(addrs.len(), 1, "{host}: one address");
    }
    let stats = ctl_json(&sock, &["stats"]);
    let ev = &stats["cores"][0]["events"];
    assert_eq!(ev["nat_block_quota"].as_u64(), Some(2), "{ev}");
    let nat = ctl_json(&sock, &["show", "nat"]);
    assert_eq!(nat["workers"][0]["blocks_held"].as_u64(), Some(12), "{nat}");
    // The log: one allocation a block, and every (address, port) the
    // server saw inside a block logged for its host.
    common::until("the allocations are logged", 10, || {
        std::fs::read_to_string(&syslog)
            .is_ok_and(|t| t.matches("port block allocate").count() >= 12)
    });
    let log = std::fs::read_to_string(&syslog).unwrap();
    let logged: Vec<(String, String, u16, u16)> = log
        .lines()
        .filter(|l| l.contains("port block allocate"))
        .map(|l| {
            // "... NAT44 port block allocate HOST as ADDR ports LO-HI"
            let w: Vec<&str> = l.split_whitespace().collect();
            let (lo, hi) = w[w.len() - 1].split_once('-').unwrap();
            let at = w.len() - 5;
            (
                w[at].to_string(),
                w[at + 2].to_string(),
                lo.parse().unwrap(),
                hi.parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(logged.len(), 12, "{log}");
    for &(host, public, port) in &seen {
        let by = logged
            .iter()
            .filter(|(_, a, lo, hi)| a == public && (*lo..=*hi).contains(&port))
            .map(|(h, ..)| h.as_str())
            .collect::<Vec<_>>();
        assert_eq!(by, [host], "{public}:{port}");
    }
    // The flows end: every block released, and logged.
    ctl_json(&sock, &["clear", "conntrack"]);
    common::until("the releases are logged", 10, || {
        std::fs::read_to_string(&syslog)
            .is_ok_and(|t| t.matches("port block release").count() >= 12)
    });
    common::until("no block held", 10, || {
        ctl_json(&sock, &["show", "nat"])["workers"][0]["blocks_held"].as_u64() == Some(0)
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    // The same events at the IPFIX collectors: nfdump's names for them,
    // each block's host and address; tshark's decoding, its ports too.
    drop(collector);
    let all = common::nfdump_after(nfcapd, &flows);
    // No session events for the blocks' flows: the blocks' are the log.
    assert!(
        all.iter().all(|r| !r["nat_event"]
            .as_str()
            .is_some_and(|e| e.contains("session"))),
        "session events: {all:?}"
    );
    for (what, id) in [
        ("Port block allocation", "16"),
        ("Port block de-allocation", "17"),
    ] {
        let got: Vec<(String, String)> = all
            .iter()
            .filter(|r| r["nat_event_id"] == id)
            .map(|r| {
                assert_eq!(r["nat_event"], what, "{r}");
                let s = |k: &str| r[k].as_str().unwrap().to_string();
                (s("src4_addr"), s("src4_xlt_ip"))
            })
            .collect();
        let mut want: Vec<_> = logged
            .iter()
            .map(|(h, a, ..)| (h.clone(), a.clone()))
            .collect();
        let mut got = got;
        want.sort();
        got.sort();
        assert_eq!(got, want, "{what}");
    }
    let text = common::tshark_cflow(
        &pcap,
        pcap_port,
        &[
            "cflow.nat_event",
            "cflow.srcaddr",
            "cflow.post_natsource_ipv4_address",
            "cflow.port_range_start",
            "cflow.port_range_end",
            "cflow.port_range_num_ports",
            "_ws.expert.severity",
        ],
    );
    let col = |i: usize| -> Vec<String> {
        text.lines()
            .flat_map(|l| {
                let f: Vec<&str> = l.split(';').collect();
                f[i].split(',')
                    .filter(|x| !x.is_empty())
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    // Expert items of note level and above (Wireshark's PI_NOTE,
    // 0x400000: notes, warnings, errors); chat-level items (0x200000,
    // "usual workflow") are not warnings: one CI run saw one on every
    // packet of the capture, with every record decoded as expected.
    let warnings: Vec<String> = col(6)
        .into_iter()
        .filter(|s| s.parse::<u32>().map_or(true, |v| v >= 0x40_0000))
        .collect();
    assert!(warnings.is_empty(), "expert warnings: {text}");
    let events: Vec<String> = col(0)
        .into_iter()
        .filter(|e| e == "16" || e == "17")
        .collect();
    assert_eq!(events.len(), 24, "{text}");
    // The block records' fields, in the order they came (the templates'
    // other records have no port range).
    let (starts, ends, sizes) = (col(3), col(4), col(5));
    assert_eq!(
        (starts.len(), ends.len(), sizes.len()),
        (24, 24, 24),
        "{text}"
    );
    let mut ranges: Vec<(u16, u16)> = starts
        .iter()
        .zip(&ends)
        .map(|(a, b)| (a.parse().unwrap(), b.parse().unwrap()))
        .collect();
    assert!(sizes.iter().all(|n| n == "8"), "{sizes:?}");
    let mut want: Vec<(u16, u16)> = logged
        .iter()
        .flat_map(|l| [(l.2, l.3), (l.2, l.3)])
        .collect();
    ranges.sort();
    want.sort();
    assert_eq!(ranges, want);
    let _ = std::fs::remove_dir_all(&dir);
}
