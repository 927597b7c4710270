//! NAT64 against translations built independently by scapy
//! (`golden/nat64.py`, RFC 7915 and RFC 6052 as scapy's layers write
//! them, every length and checksum computed from scratch): each case's
//! frames go through a fresh gateway and must leave byte for byte as the
//! golden file says, on the port it names.

use pipeline::conntrack::Timeouts;
use pipeline::firewall::{Action, RuleSet};
use pipeline::fwd::ForwardMode;
use pipeline::gateway::{Gateway, GatewayConfig};
use pipeline::nat::{NatConfig, PortRange};
use pipeline::nat64::{Nat64, WELL_KNOWN};
use pipeline::router::{Interface, NextHop, Router, RouterConfig};
use pipeline::verdict::Verdict;
use pipeline::wire::MacAddr;
use std::sync::Arc;

const S: u64 = 1_000_000_000;

/// The network `golden/nat64.py` describes.
fn gateway() -> Gateway {
    let mac = |last: u8| MacAddr([2, 0x51, 0, 0, 0, last]);
    let router = Router::new(RouterConfig {
        interfaces: vec![
            Interface {
                mac: mac(0),
                ipv4: vec![],
                ipv6: vec![("2001:db8:1::1".parse().unwrap(), 64)],
                mtu: 1500,
                vlan: None,
                down: false,
            },
            Interface {
                mac: mac(1),
                ipv4: vec![("198.19.0.1".parse().unwrap(), 24)],
                ipv6: vec![],
                mtu: 1500,
                vlan: None,
                down: false,
            },
        ],
        fib: pipeline::fib::FibWriter::build(&[
            (
                "2001:db8:1::".parse().unwrap(),
                64,
                vec![NextHop { port: 0, via: None }],
            ),
            (
                "198.19.0.0".parse().unwrap(),
                24,
                vec![NextHop { port: 1, via: None }],
            ),
            (
                "203.0.113.0".parse().unwrap(),
                24,
                vec![NextHop {
                    port: 1,
                    via: Some("198.19.0.2".parse().unwrap()),
                }],
            ),
            (
                "198.51.100.0".parse().unwrap(),
                24,
                vec![NextHop {
                    port: 1,
                    via: Some("198.19.0.2".parse().unwrap()),
                }],
            ),
        ])
        .unwrap()
        .fib()
        .clone(),
        neighbors4: vec![(
            1,
            "198.19.0.2".parse().unwrap(),
            MacAddr([2, 0xbb, 0, 0, 0, 1]),
        )],
        neighbors6: vec![(
            0,
            "2001:db8:1::10".parse().unwrap(),
            MacAddr([2, 0xaa, 0, 0, 0, 1]),
        )],
        icmp_rate: 1_000_000,
        neighbor_timeout_ns: 300 * S,
        punt: Default::default(),
    });
    let nat = NatConfig {
        snat: vec![],
        dnat: vec![],
        statics: vec![],
        ports: PortRange {
            lo: 40000,
            hi: 40000,
        },
        no_hairpin: false,
        npt: vec![],
        nat64: vec![Nat64::new(WELL_KNOWN, 1, vec![]).unwrap()],
        masq6: vec![],
    };
    let cfg = GatewayConfig {
        rules: Arc::new(RuleSet::build(vec![], Action::Accept, &[])),
        nat: Arc::new(nat),
        ct_capacity: 64,
        timeouts: Timeouts::default(),
        tcp_window: true,
        workers: 1,
        mss_limits: Default::default(),
        mss_rules: Default::default(),
    };
    let mut g = Gateway::new(router, &cfg, 0);
    g.tick(S);
    g
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// One step of a case: in port, frame, out port, frame.
type Step = (u16, Vec<u8>, u16, Vec<u8>);

/// The golden file's cases: name and steps.
fn cases() -> Vec<(String, Vec<Step>)> {
    let text = include_str!("golden/nat64.txt");
    let mut cases: Vec<(String, Vec<_>)> = Vec::new();
    let mut input = None;
    for line in text.lines() {
        let mut w = line.split_whitespace();
        match (w.next(), w.next(), w.next()) {
            (Some("#"), Some(name), None) => cases.push((name.to_string(), vec![])),
            (Some(">"), Some(p), Some(f)) => input = Some((p.parse().unwrap(), hex(f))),
            (Some("<"), Some(p), Some(f)) => {
                let (i, fi) = input.take().expect("an input before each output");
                cases
                    .last_mut()
                    .unwrap()
                    .1
                    .push((i, fi, p.parse().unwrap(), hex(f)));
            }
            _ => panic!("golden/nat64.txt: bad line {line:?}"),
        }
    }
    cases
}

#[test]
fn translations_match_scapys() {
    check_golden(false);
}

/// The same through the burst path (NAT64's lanes), a burst a packet.
#[test]
fn burst_path_translations_match_scapys() {
    check_golden(true);
}

fn check_golden(burst: bool) {
    let cases = cases();
    assert_eq!(cases.len(), 8, "every case read");
    for (name, steps) in cases {
        let mut g = gateway();
        for (n, (i, mut f, o, want)) in steps.into_iter().enumerate() {
            let v = if burst {
                let mut one = [f];
                let mut v = [Verdict::Forward(u16::MAX)];
                let all = g.process_burst(&mut one, i, &mut v);
                [f] = one;
                all.unwrap_or(v[0])
            } else {
                g.process(&mut f, i)
            };
            assert_eq!(v, Verdict::Forward(o), "{name} step {n}");
            if f != want {
                let diff: Vec<usize> = (0..f.len().max(want.len()))
                    .filter(|&k| f.get(k) != want.get(k))
                    .collect();
                panic!(
                    "{name} step {n}: {} bytes, want {}; differing at {diff:?}\n got  {}\n want {}",
                    f.len(),
                    want.len(),
                    f.iter().map(|b| format!("{b:02x}")).collect::<String>(),
                    want.iter().map(|b| format!("{b:02x}")).collect::<String>(),
                );
            }
        }
    }
}

/// The golden cases' frames with bytes changed at random (lengths, header
/// fields, quotes cut short) and cut at every length: whatever they
/// become, the gateway answers each with a verdict, never a panic, and
/// what it forwards fits its buffer.
#[test]
fn mangled_frames_never_panic() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut g = gateway();
    let mut n = 0;
    for (_, steps) in cases() {
        for (i, f, o, want) in steps {
            for base in [&f, &want] {
                let port = if base == &f { i } else { o };
                for len in 0..base.len() {
                    let mut m = base[..len].to_vec();
                    let _ = g.process(&mut m, port);
                }
                for _ in 0..400 {
                    let mut m = base.clone();
                    for _ in 0..(rand() % 4 + 1) {
                        let at = (rand() as usize) % m.len();
                        m[at] = rand() as u8;
                    }
                    if rand() % 8 == 0 {
                        m.truncate((rand() as usize) % m.len());
                    }
                    let _ = g.process(&mut m, port);
                    n += 1;
                }
            }
        }
    }
    assert!(n > 10_000, "{n} frames");
}
