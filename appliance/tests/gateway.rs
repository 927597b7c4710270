//! The gateway (conntrack, firewall, NAT) end to end: the shipped gateway
//! config on softnic ports, and the TCP state machine driven by the tcpdump
//! test captures.

mod common;

use pipeline::acl::{ip, Key};
use pipeline::conntrack::{Conn, ConnTrack, State, Timeouts};
use pipeline::wire::{EtherType, Ipv4Packet, Ipv6Packet, ETHERNET_HEADER_LEN};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The TCP key of an Ethernet frame (IPv4 or IPv6), if it is TCP.
fn tcp_key(f: &[u8]) -> Option<Key> {
    let et = u16::from_be_bytes([*f.get(12)?, *f.get(13)?]);
    let l3 = &f[ETHERNET_HEADER_LEN..];
    let (src, dst, l4) = match et {
        EtherType::IPV4 => {
            let p = Ipv4Packet::new_checked(l3).ok()?;
            if p.protocol() != 6 {
                return None;
            }
            (
                IpAddr::V4(Ipv4Addr::from(p.src())),
                IpAddr::V4(Ipv4Addr::from(p.dst())),
                &l3[p.header_len()..usize::from(p.total_len())],
            )
        }
        EtherType::IPV6 => {
            let p = Ipv6Packet::new_checked(l3).ok()?;
            let (proto, off) = p.upper_layer().ok()?;
            if proto != 6 {
                return None;
            }
            (
                IpAddr::V6(Ipv6Addr::from(p.src())),
                IpAddr::V6(Ipv6Addr::from(p.dst())),
                &l3[off..40 + usize::from(p.payload_len())],
            )
        }
        _ => return None,
    };
    if l4.len() < 14 {
        return None;
    }
    Some(Key {
        src: ip(src),
        dst: ip(dst),
        sport: u16::from_be_bytes([l4[0], l4[1]]),
        dport: u16::from_be_bytes([l4[2], l4[3]]),
        proto: 6,
        flags: u16::from(l4[13]),
        meta: 0,
    })
}

/// Tracks every TCP packet of a capture; returns the verdicts and the
/// final state of the first flow.
fn track(name: &str) -> Option<(Vec<Conn>, Option<State>)> {
    let path = testdata::shared(&format!("pcaps/tcpdump_tests/{name}"))?;
    let mut ct = ConnTrack::new(64, Timeouts::default());
    let mut first = None;
    let mut seen = Vec::new();
    for f in pmd::pcap::read_frames(&path).unwrap() {
        let Some(k) = tcp_key(&f) else { continue };
        first.get_or_insert(k);
        seen.push(ct.track(0, &k));
    }
    let state = first.and_then(|k| ct.state(0, &k));
    Some((seen, state))
}

/// Conntrack driven by real TCP conversations: handshakes open flows,
/// both directions are found, FINs on both sides end in TIME_WAIT, a lone
/// RST with no flow is invalid.
#[test]
fn tcp_state_machine_follows_captures() {
    let est = |reply| Conn::Established { reply };
    let Some((seen, state)) = track("tcp-handshake-nano.pcap") else {
        eprintln!("skipped: no shared data");
        return;
    };
    assert_eq!(seen, vec![Conn::New, est(true), est(false)]);
    assert_eq!(state, Some(State::Established));
    for name in ["dns_tcp.pcap", "ssh.pcap"] {
        let (seen, state) = track(name).unwrap();
        assert_eq!(seen[0], Conn::New, "{name}");
        assert!(seen.len() > 10, "{name}");
        assert!(
            seen[1..]
                .iter()
                .all(|c| matches!(c, Conn::Established { .. })),
            "{name}: {seen:?}"
        );
        assert!(seen.contains(&est(true)) && seen.contains(&est(false)));
        assert_eq!(state, Some(State::TimeWait), "{name}: both sides sent FIN");
    }
    let (seen, state) = track("tcp_rst_data.pcap").unwrap();
    assert_eq!((seen, state), (vec![Conn::Invalid], None));
}

fn gateway_config(duration: &str) -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/gateway.toml"
    ))
    .unwrap()
    .replace("duration = 10", &format!("duration = {duration}"))
}

/// The shipped gateway config: every LAN packet leaves NATed (the sink
/// validates each one), one mapping per flow, the unsolicited WAN traffic
/// is dropped by the default policy, and the totals balance.
#[test]
fn gateway_config_nats_and_filters_softnic_traffic() {
    let (_, s) = common::run(&gateway_config("1.5"));
    let b = s.balance.as_ref().unwrap();
    assert!(b.balanced, "{}", s.text());
    let (lan, wan) = (&s.ports[0], &s.ports[1]);
    let filtered = wan.drops.stage.get("filtered").copied().unwrap_or(0);
    assert!(filtered > 5_000, "{}", s.text());
    assert_eq!(
        b.stage_drops,
        filtered,
        "nothing else dropped: {}",
        s.text()
    );
    assert_eq!(wan.xstats["sink_bad"], 0, "{}", s.text());
    assert_eq!(lan.drops.stage.values().sum::<u64>(), 0);
    let ev = &s.cores[0].events;
    assert_eq!(
        ev["nat_mapped"],
        10_000,
        "one mapping per flow: {}",
        s.text()
    );
    assert_eq!(ev["ct_created"], 10_000);
    let hits: Vec<u64> = s.rule_hits.iter().map(|(_, n)| *n).collect();
    assert_eq!(hits, vec![0, 0, 10_000, 0], "{}", s.text());
}

/// Two gateway workers, two RX queues per port: traffic from outside to
/// the NAT address lands on both workers by RSS and is handed to the worker
/// whose port slice holds its destination port (the owner finds no mapping
/// and drops it as for the router). A handoff ring can overflow while its
/// reader is descheduled (two workers and the generator share two CPUs
/// here): such packets are counted (`handoff_full`), and must stay rare.
#[test]
fn two_workers_hand_nat_traffic_to_the_owner() {
    let text = gateway_config("1.5")
        .replace("rxd = 4096", "rxd = 4096\nrxq = 2\ntxq = 2")
        .replace("dst_ip = \"198.51.100.0/24\"", "dst_ip = \"198.19.0.1/32\"\ndst_port = \"1024-65535\"")
        .replace(
            "[[worker]]\ncore = 1\nmode = \"l3fwd\"\nrx = [\"p0\", \"p1\"]",
            "[[worker]]\ncore = 1\nmode = \"l3fwd\"\nrx = [\"p0:0\", \"p1:0\"]\n\n[[worker]]\ncore = 0\nmode = \"l3fwd\"\nrx = [\"p0:1\", \"p1:1\"]",
        );
    let (_, s) = common::run(&text);
    let b = s.balance.as_ref().unwrap();
    assert!(b.balanced, "{}", s.text());
    let wan = &s.ports[1];
    assert!(wan.drops.handed_off > 1000, "{}", s.text());
    let to_router = wan.drops.stage.get("to_router").copied().unwrap_or(0);
    let full = wan.drops.stage.get("handoff_full").copied().unwrap_or(0);
    // Each packet to the NAT address was the router's in the end: answered
    // port unreachable within the ICMP rate, or dropped as `to_router`
    // (what the offered load was, on a busy machine, does not matter).
    let answered: u64 = s
        .cores
        .iter()
        .map(|c| c.events.get("icmp_unreachable").copied().unwrap_or(0))
        .sum();
    assert!(to_router > 1000, "{}", s.text());
    assert!(
        (to_router + answered + full) * 100 >= wan.rx_pkts * 95,
        "{}",
        s.text()
    );
    assert!(full * 100 <= wan.drops.handed_off, "{}", s.text());
    assert_eq!(
        s.ports[0].drops.stage.values().sum::<u64>(),
        0,
        "{}",
        s.text()
    );
    // Per RX queue: the worker that polls it, what it received (the
    // queues' sum is the port's, each loaded by RSS), the device's misses
    // on it (their sum is the port's).
    for p in &s.ports {
        let q: Vec<(u16, usize)> = p.queues.iter().map(|q| (q.queue, q.core)).collect();
        assert_eq!(q, [(0, 1), (1, 0)], "{}", s.text());
        let rx: Vec<u64> = p.queues.iter().map(|q| q.rx_pkts).collect();
        assert_eq!(rx.iter().sum::<u64>(), p.rx_pkts, "{}", s.text());
        assert!(rx.iter().all(|&n| n * 5 > p.rx_pkts), "RSS spreads: {rx:?}");
        for q in &p.queues {
            assert!(q.pkts_per_burst >= 1.0 && q.pkts_per_burst <= 32.0, "{q:?}");
        }
        let missed: u64 = p.queues.iter().map(|q| q.rx_missed.unwrap()).sum();
        assert_eq!(missed, p.drops.rx_missed, "{}", s.text());
    }
    let text = s.text();
    assert!(text.contains("rx queues: 0 (core 1) "), "{text}");
}
