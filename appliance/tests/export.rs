//! IPFIX flow export to real collectors: namespaces `c` (a client) — `r`
//! (Sluice on AF_PACKET ports, the firewall and masquerade, `[export]` to
//! two collectors on `r`'s loopback) — `s` (a server). `nfcapd` (nfdump)
//! is one collector; the other is a UDP socket that writes what it gets
//! into a pcap for `tshark`'s cflow dissector. The client's flows (a UDP
//! exchange of known sizes, a TCP transfer, pings) and a flow the rules
//! refuse (the server to the client) are recorded; `clear conntrack` ends
//! the flows; both collectors must decode every record, with no template
//! missing, and nfdump's packets, bytes and NAT fields must be exactly
//! what was sent and what `show conntrack` counted. Needs root, `ip`,
//! `python3`, `nfcapd`/`nfdump` and `tshark`; skipped without them unless
//! `CI` is set. The namespaces end with the test, passed or failed.

mod common;

use common::{as_root, ctl_json, have, Nets};

/// What the lab's gateway adds (`common::lab_gateway`): masquerade, and
/// the export to both collectors and syslog.
const CONFIG: &str = r#"
[[nat.snat]]
out = "outside"
src = "198.18.0.0/24"
to = "masquerade"

[export]
collectors = ["127.0.0.1:NFCAPD", "127.0.0.1:PCAP"]
domain = 7
nat_events = true
syslog = "127.0.0.1:SYSLOG"
"#;

/// UDP echo on 7000; on TCP 9000, reads to the end and closes.
const SERVER: &str = r#"
import socket, threading
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("198.19.0.2", 7000))
def echo():
    while True:
        d, a = u.recvfrom(2048)
        u.sendto(d, a)
threading.Thread(target=echo, daemon=True).start()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.19.0.2", 9000))
s.listen(4)
while True:
    c, a = s.accept()
    while c.recv(65536):
        pass
    c.close()
"#;

/// Ten 100-byte datagrams from port 5001 and their echoes; a TCP
/// transfer of 200,000 bytes.
const CLIENT: &str = r#"
import socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("198.18.0.2", 5001))
u.settimeout(2)
for i in range(10):
    u.sendto(b"x" * 100, ("198.19.0.2", 7000))
    u.recvfrom(2048)
c = socket.create_connection(("198.19.0.2", 9000), timeout=5)
c.sendall(b"y" * 200000)
c.shutdown(socket.SHUT_WR)
c.settimeout(5)
while c.recv(65536):
    pass
c.close()
print("done")
"#;

/// The one record of nfdump's listing that `f` picks.
fn record<'a>(
    recs: &'a [serde_json::Value],
    what: &str,
    f: impl Fn(&serde_json::Value) -> bool,
) -> &'a serde_json::Value {
    let found: Vec<_> = recs.iter().filter(|r| f(r)).collect();
    assert_eq!(found.len(), 1, "{what}: {found:?} in {recs:?}");
    found[0]
}

/// A time nfdump prints (`2026-12-05T12:04:30.002`; its `t_event` leaves
/// the milliseconds unpadded, `…30.2`): the seconds and the milliseconds,
/// in order.
fn when(v: &serde_json::Value, key: &str) -> (String, u64) {
    let t = v[key].as_str().unwrap_or_else(|| panic!("`{key}` in {v}"));
    let (s, ms) = t.split_once('.').unwrap_or((t, "0"));
    (
        s.to_string(),
        ms.parse().unwrap_or_else(|_| panic!("`{key}` in {v}")),
    )
}

fn num(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("`{key}` in {v}"))
}

#[test]
fn collectors_decode_every_record_with_the_counts_and_nat_sluice_saw() {
    if !as_root()
        || !have("ip")
        || !have("python3")
        || !have("nfcapd")
        || !have("nfdump")
        || !have("tshark")
    {
        return;
    }
    let n = Nets::mirror_lab("sl-ipfix");
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.lab_hosts(c, s);
    n.sh(r, "ip link set lo up");
    let dir = common::fresh_dir("ipfix");
    let flows = dir.join("flows");
    std::fs::create_dir_all(&flows).unwrap();
    for (f, text) in [("server.py", SERVER), ("client.py", CLIENT)] {
        std::fs::write(dir.join(f), text).unwrap();
    }
    let (_syslog, syslog_port, syslog) = common::syslog_in(r, &dir);
    let (nfcapd, nf_port) = common::nfcapd_in(r, &flows);
    let (collector, pcap_port, pcap) = common::pcap_collector_in(r, &dir);
    let _server = common::python_in(s, &dir.join("server.py"));
    std::thread::sleep(std::time::Duration::from_millis(500));

    let sock = dir.join("sluice.sock");
    let cfg = dir.join("r.toml");
    std::fs::write(
        &cfg,
        common::lab_gateway(
            &CONFIG
                .replace("NFCAPD", &nf_port.to_string())
                .replace("PCAP", &pcap_port.to_string())
                .replace("SYSLOG", &syslog_port.to_string()),
            &sock,
        ),
    )
    .unwrap();
    let sluice = common::sluice_in(r, &cfg, &sock);
    assert_eq!(
        n.sh(c, &format!("python3 {}", dir.join("client.py").display()))
            .trim(),
        "done"
    );
    n.sh(c, "ping -c 3 -i 0.2 -W 2 -q 198.19.0.2 > /dev/null");
    // Refused: a new flow from outside (one 50-byte datagram).
    n.sh(
        s,
        "python3 -c 'import socket; u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
         u.bind((\"198.19.0.2\", 6001)); u.sendto(b\"z\" * 22, (\"198.18.0.2\", 6000))'",
    );
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let listed = ctl_json(&sock, &["show", "conntrack"]);
    let tuples = listed["workers"][0]["tuples"]
        .as_array()
        .expect("flows")
        .clone();
    assert_eq!(tuples.len(), 3, "udp, tcp, icmp: {tuples:?}");
    // The flows end: each direction's record leaves.
    ctl_json(&sock, &["clear", "conntrack"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let shown = ctl_json(&sock, &["show", "export"]);
    let sent = num(&shown, "records");
    // 3 flows both ways, the refused datagram, and each flow's NAT
    // session created and deleted.
    assert_eq!(sent, 13, "{shown}");
    assert_eq!(num(&shown, "lost"), 0);
    // A flow still open when Sluice stops: its records leave as it stops.
    n.sh(c, "ping -c 1 -s 200 -W 2 -q 198.19.0.2 > /dev/null");
    common::signal(&sluice, "-TERM");
    let mut sluice = sluice;
    common::until("Sluice stops", 20, || {
        sluice.0.try_wait().unwrap().is_some()
    });
    // Its two records, and its NAT session's create and delete.
    let sent = sent + 4;
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(collector);

    // nfdump: every record, with Sluice's counts and translations.
    let all = common::nfdump_after(nfcapd, &flows);
    assert_eq!(all.len() as u64, sent, "{all:?}");
    // Flows' records, and NAT events (RFC 8158: nfdump names them).
    let (events, recs): (Vec<_>, Vec<_>) =
        all.into_iter().partition(|r| r["nat_event"].is_string());
    assert_eq!(
        events.len(),
        8,
        "a create and a delete for each of 4 flows: {events:?}"
    );
    let is =
        |r: &serde_json::Value, proto: u64, src: &str| r["proto"] == proto && r["src4_addr"] == src;
    // What `show conntrack` counted, per protocol: (orig, reply) as
    // (packets, bytes), and the translated source port.
    let counted = |proto: u64| {
        let t = tuples.iter().find(|t| t["proto"] == proto).expect("listed");
        let c = &t["counts"];
        let pb = |d: &str| (num(&c[d], "packets"), num(&c[d], "bytes"));
        (pb("orig"), pb("reply"), num(&t["reply"], "dport"))
    };
    let pb = |r: &serde_json::Value| (num(r, "in_packets"), num(r, "in_bytes"));
    let xlt_port = |r: &serde_json::Value, k: &str| r[k].as_str().unwrap().parse::<u64>().unwrap();
    for proto in [17, 6, 1] {
        let (orig, reply, port) = counted(proto);
        // The flow's records by its mapping (the ping at the stop has
        // another).
        let o = record(&recs, "the client's", |r| {
            is(r, proto, "198.18.0.2") && xlt_port(r, "src_xlt_port") == port
        });
        // (An ICMP reply's identifier is not shown: the ping at the stop
        // is told apart by its size.)
        let b = record(&recs, "the server's", |r| {
            is(r, proto, "198.19.0.2")
                && r["dst4_addr"] == "198.19.0.1"
                && if proto == 1 {
                    num(r, "in_bytes") != 228
                } else {
                    num(r, "dst_port") == port
                }
        });
        assert_eq!(pb(o), orig, "{proto}: {o}");
        assert_eq!(pb(b), reply, "{proto}: {b}");
        // Masqueraded out, and back in.
        assert_eq!(o["src4_xlt_ip"], "198.19.0.1", "{o}");
        assert_eq!(xlt_port(o, "src_xlt_port"), port, "{o}");
        assert_eq!(b["dst4_xlt_ip"], "198.18.0.2", "{b}");
        assert_eq!((num(o, "input_snmp"), num(o, "output_snmp")), (1, 2), "{o}");
        assert_eq!((num(b, "input_snmp"), num(b, "output_snmp")), (2, 1), "{b}");
        assert!(when(o, "first") <= when(o, "last"), "{o}");
        // The NAT session's create and delete events: its mapping, in
        // order, the create when its first packet came.
        let ev = |what: &str| {
            record(&events, what, |e| {
                is(e, proto, "198.18.0.2")
                    && e["nat_event"] == what
                    && xlt_port(e, "src_xlt_port") == port
            })
        };
        let (made, gone) = (ev("NAT44 session create"), ev("NAT44 session delete"));
        assert_eq!(made["src4_xlt_ip"], "198.19.0.1", "{made}");
        assert_eq!(made["dst4_addr"], "198.19.0.2", "{made}");
        assert_eq!(when(made, "t_event"), when(o, "first"), "{made} {o}");
        assert!(
            when(made, "t_event") <= when(gone, "t_event"),
            "{made} {gone}"
        );
    }
    // What the test sent: ten 100-byte datagrams each way (128 bytes of
    // IP), three pings each way (84), the transfer's 200,000 bytes.
    assert_eq!(counted(17).0, (10, 1280));
    assert_eq!(counted(17).1, (10, 1280));
    assert_eq!(counted(1).0, (3, 252));
    assert_eq!(counted(1).1, (3, 252));
    assert!(counted(6).0 .1 > 200_000, "{:?}", counted(6));
    let udp = record(&recs, "udp", |r| is(r, 17, "198.18.0.2"));
    assert_eq!(
        (num(udp, "src_port"), xlt_port(udp, "dst_xlt_port")),
        (5001, 7000)
    );
    let ping = record(&recs, "ping", |r| {
        is(r, 1, "198.18.0.2") && num(r, "in_packets") == 3
    });
    assert_eq!(
        (num(ping, "icmp_type"), num(ping, "icmp_code")),
        (8, 0),
        "{ping}"
    );
    let tcp = record(&recs, "tcp", |r| is(r, 6, "198.18.0.2"));
    assert_eq!(tcp["tcp_flags"], "...AP.SF", "{tcp}");
    // The refused datagram: as it came, sent nowhere.
    let refused = record(&recs, "refused", |r| r["dst4_addr"] == "198.18.0.2");
    assert_eq!(pb(refused), (1, 50));
    assert_eq!(
        (num(refused, "src_port"), num(refused, "dst_port")),
        (6001, 6000)
    );
    assert_eq!(
        (num(refused, "input_snmp"), num(refused, "output_snmp")),
        (2, 0)
    );

    // tshark's cflow dissector: the templates, then every record, with no
    // malformed packet or expert warning (an unknown template is one).
    let text = common::tshark_cflow(
        &pcap,
        pcap_port,
        &[
            "cflow.template_id",
            "cflow.od_id",
            "cflow.sequence",
            "cflow.firewall_event",
            "cflow.biflow_direction",
            "cflow.flow_end_reason",
            "cflow.flow_id",
            "_ws.expert.severity",
            "cflow.nat_event",
        ],
    );
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(';').collect()).collect();
    assert!(
        ["256", "257", "258", "259"]
            .iter()
            .all(|t| lines[0][0].contains(t)),
        "templates first: {text}"
    );
    let all = |i: usize| -> Vec<&str> {
        lines[1..]
            .iter()
            .flat_map(|l| l[i].split(',').filter(|x| !x.is_empty()))
            .collect()
    };
    assert!(lines.iter().all(|l| l[1] == "7"), "domain 7: {text}");
    assert!(all(7).is_empty(), "expert warnings: {text}");
    let nat = all(8);
    assert_eq!(
        nat.iter().filter(|e| **e == "4").count(),
        4,
        "creates: {text}"
    );
    assert_eq!(
        nat.iter().filter(|e| **e == "5").count(),
        4,
        "deletes: {text}"
    );
    let events = all(3);
    assert_eq!(events.len() as u64, sent - 8, "{text}");
    assert_eq!(
        events.iter().filter(|e| **e == "3").count(),
        1,
        "one denied: {text}"
    );
    assert_eq!(
        events.iter().filter(|e| **e == "2").count(),
        8,
        "eight ended: {text}"
    );
    let dirs = all(4);
    assert_eq!(
        dirs.iter().filter(|d| **d == "2").count(),
        4,
        "four replies: {text}"
    );
    let reasons = all(5);
    // Deleted on request, or open at the stop: forced end (4); the
    // refused packet: end (3).
    assert_eq!(reasons.iter().filter(|r| **r == "4").count(), 8, "{text}");
    // Each flow's two records share their flowId.
    // (NAT events carry no flowId: the flow records' only.)
    let mut ids = all(6);
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 5, "four flows and the refused packet: {text}");
    // The same NAT events as syslog lines (RFC 5424).
    let lines = std::fs::read_to_string(&syslog).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 8, "{lines:?}");
    let (_, _, udp_port) = counted(17);
    let want = format!(
        "NAT44 session create udp 198.18.0.2:5001 -> 198.19.0.2:7000 as 198.19.0.1:{udp_port} -> 198.19.0.2:7000"
    );
    let line = lines
        .iter()
        .find(|l| l.contains("udp"))
        .expect("the UDP flow's");
    assert!(
        line.starts_with("<134>1 20") && line.ends_with(&want),
        "{line}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("session create"))
            .count(),
        4,
        "{lines:?}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("session delete"))
            .count(),
        4,
        "{lines:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
