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
use pipeline::verdict::{DropReason, Verdict};
use pipeline::wire::MacAddr;
use std::sync::Arc;

const S: u64 = 1_000_000_000;

/// The network `golden/nat64.py` describes.
fn gateway() -> Gateway {
    gateway_with_mtus(1500, 1500)
}

/// That network with its IPv6 side's MTU `lan` and its IPv4 side's `wan`.
fn gateway_with_mtus(lan: u16, wan: u16) -> Gateway {
    gateway_with(lan, wan, pipeline::nat64::LOWEST_MTU6)
}

/// ... and the translator's `lowest-ipv6-mtu` `lowest`.
fn gateway_with(lan: u16, wan: u16, lowest: u16) -> Gateway {
    let mac = |last: u8| MacAddr([2, 0x51, 0, 0, 0, last]);
    let router = Router::new(RouterConfig {
        interfaces: vec![
            Interface {
                mac: mac(0),
                ipv4: vec![],
                ipv6: vec![("2001:db8:1::1".parse().unwrap(), 64)],
                mtu: lan,
                vlan: None,
                down: false,
            },
            Interface {
                mac: mac(1),
                ipv4: vec![("198.19.0.1".parse().unwrap(), 24)],
                ipv6: vec![],
                mtu: wan,
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
        adverts: Vec::new(),
    });
    let mut nat64 = Nat64::new(WELL_KNOWN, 1, vec![]).unwrap();
    nat64.lowest_mtu6 = lowest;
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
        nat64: vec![nat64],
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

/// One step of a case: in port, frame, and the frames that leave then
/// (port, frame), in order: the one forwarded and those the worker's emit
/// sends after it (none: the frame is kept).
type Step = (u16, Vec<u8>, Vec<(u16, Vec<u8>)>);

/// The golden file's cases: name and steps.
fn cases() -> Vec<(String, Vec<Step>)> {
    let text = include_str!("golden/nat64.txt");
    let mut cases: Vec<(String, Vec<_>)> = Vec::new();
    for line in text.lines() {
        let mut w = line.split_whitespace();
        match (w.next(), w.next(), w.next()) {
            (Some("#"), Some(name), None) => cases.push((name.to_string(), vec![])),
            (Some(">"), Some(p), Some(f)) => {
                let steps = &mut cases.last_mut().expect("a case's name first").1;
                steps.push((p.parse().unwrap(), hex(f), vec![]));
            }
            (Some("<"), Some(p), Some(f)) => {
                let steps = &mut cases.last_mut().expect("a case's name first").1;
                let step = steps.last_mut().expect("an input before each output");
                step.2.push((p.parse().unwrap(), hex(f)));
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
    assert_eq!(cases.len(), 12, "every case read");
    for (name, steps) in cases {
        let mut g = gateway();
        for (n, (i, mut f, want)) in steps.into_iter().enumerate() {
            let v = if burst {
                let mut one = [f];
                let mut v = [Verdict::Forward(u16::MAX)];
                let all = g.process_burst(&mut one, i, &mut v);
                [f] = one;
                all.unwrap_or(v[0])
            } else {
                g.process(&mut f, i)
            };
            let mut sent = vec![];
            match v {
                Verdict::Forward(o) => sent.push((o, f)),
                v => assert_eq!(v, Verdict::Drop(DropReason::Consumed), "{name} step {n}"),
            }
            ForwardMode::emit(&mut g, &mut |p, b| {
                sent.push((p, b.to_vec()));
                true
            });
            assert_eq!(sent.len(), want.len(), "{name} step {n}: frames sent");
            for (k, ((p, f), (o, want))) in sent.into_iter().zip(want).enumerate() {
                check_frame(&format!("{name} step {n} frame {k}"), p, &f, o, &want);
            }
        }
    }
}

/// A frame sent on port `p` against the golden one, byte for byte.
fn check_frame(what: &str, p: u16, f: &[u8], o: u16, want: &[u8]) {
    assert_eq!(p, o, "{what}: the port");
    {
        {
            if f != want {
                let diff: Vec<usize> = (0..f.len().max(want.len()))
                    .filter(|&k| f.get(k) != want.get(k))
                    .collect();
                panic!(
                    "{what}: {} bytes, want {}; differing at {diff:?}\n got  {}\n want {}",
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
        for (i, f, outs) in steps {
            let frames = std::iter::once((i, f)).chain(outs);
            for (port, base) in frames {
                let base = &base;
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

/// A UDP frame of `len` bytes of IP packet: IPv6 from the client to the
/// server's prefix address (`v6`), or IPv4 from the server to the pool
/// address and port 40000 with DF as `df` says; checksums valid.
fn udp(v6: bool, len: usize, df: bool) -> Vec<u8> {
    use pipeline::checksum::{fold, pseudo_v4, pseudo_v6, sum};
    let mut f = vec![0u8; 14 + len];
    if v6 {
        f[0..6].copy_from_slice(&[2, 0x51, 0, 0, 0, 0]);
        f[6..12].copy_from_slice(&[2, 0xaa, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        let (s, d): (std::net::Ipv6Addr, std::net::Ipv6Addr) = (
            "2001:db8:1::10".parse().unwrap(),
            "64:ff9b::203.0.113.7".parse().unwrap(),
        );
        let l4 = len - 40;
        f[14] = 0x60;
        f[18..20].copy_from_slice(&(l4 as u16).to_be_bytes());
        (f[20], f[21]) = (17, 64);
        f[22..38].copy_from_slice(&s.octets());
        f[38..54].copy_from_slice(&d.octets());
        f[54..56].copy_from_slice(&5000u16.to_be_bytes());
        f[56..58].copy_from_slice(&53u16.to_be_bytes());
        f[58..60].copy_from_slice(&(l4 as u16).to_be_bytes());
        let c = !fold(sum(
            &f[54..],
            pseudo_v6(s.octets(), d.octets(), 17, l4 as u32),
        ));
        f[60..62].copy_from_slice(&c.to_be_bytes());
    } else {
        f[0..6].copy_from_slice(&[2, 0x51, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[2, 0xbb, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let (s, d) = ([203, 0, 113, 7], [198, 19, 0, 1]);
        let l4 = len - 20;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&(len as u16).to_be_bytes());
        f[20] = if df { 0x40 } else { 0 };
        (f[22], f[23]) = (60, 17);
        f[26..30].copy_from_slice(&s);
        f[30..34].copy_from_slice(&d);
        let c = pipeline::checksum::checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f[34..36].copy_from_slice(&53u16.to_be_bytes());
        f[36..38].copy_from_slice(&40000u16.to_be_bytes());
        f[38..40].copy_from_slice(&(l4 as u16).to_be_bytes());
        let c = !fold(sum(&f[34..], pseudo_v4(s, d, 17, l4 as u16)));
        f[40..42].copy_from_slice(&c.to_be_bytes());
    }
    f
}

/// Packets too long for the other family's link: an IPv6 one for a
/// 1,280-byte IPv4 link gets Packet Too Big with 1,300 (RFC 7915 5.1);
/// an IPv4 reply for a 1,280-byte IPv6 link gets Fragmentation Needed
/// with 1,260 when it may not be fragmented, and leaves as IPv6
/// fragments when it may (the golden `split-to-ipv6` checks their bytes).
#[test]
fn too_long_for_the_other_link() {
    let mut g = gateway_with_mtus(1500, 1280);
    let mut f = udp(true, 1400, false);
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(0));
    assert_eq!(&f[12..14], &[0x86, 0xdd]);
    assert_eq!((f[54], f[55]), (2, 0), "Packet Too Big");
    assert_eq!(u32::from_be_bytes([f[58], f[59], f[60], f[61]]), 1300);
    // The flow opened by a packet that fits; the server's long reply.
    let mut g = gateway_with_mtus(1280, 1500);
    let mut f = udp(true, 100, false);
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
    let mut r = udp(false, 1400, true);
    assert_eq!(
        g.process(&mut r, 1),
        Verdict::Forward(1),
        "back to the server"
    );
    assert_eq!(&r[12..14], &[0x08, 0x00]);
    assert_eq!((r[34], r[35]), (3, 4), "Fragmentation Needed");
    assert_eq!(u16::from_be_bytes([r[40], r[41]]), 1260);
    assert_eq!(&r[30..34], &[203, 0, 113, 7], "to the server");
    let mut r = udp(false, 1400, false);
    assert_eq!(g.process(&mut r, 1), Verdict::Forward(0));
    assert_eq!(r.len(), 14 + 48 + 1232, "the first of two fragments");
    let mut sent = vec![];
    ForwardMode::emit(&mut g, &mut |p, b| {
        sent.push((p, b.len()));
        true
    });
    assert_eq!(sent, [(0, 14 + 48 + 1400 - 20 - 1232)], "the second");
    // One that fits goes through.
    let mut r = udp(false, 1200, true);
    assert_eq!(g.process(&mut r, 1), Verdict::Forward(0));
    assert_eq!(r.len(), 14 + 1220);
}

/// A reply without DF longer than the translator's `lowest-ipv6-mtu`
/// (1,280 by default) leaves in IPv6 fragments no longer, though the
/// link takes it whole; with `lowest-ipv6-mtu` 1,500 it leaves whole,
/// and one too long for the link is split at the link's MTU.
#[test]
fn lowest_ipv6_mtu_bounds_the_fragments() {
    for (lowest, whole) in [(1280, false), (1500, true)] {
        let mut g = gateway_with(1500, 1500, lowest);
        let mut f = udp(true, 100, false);
        assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
        let mut r = udp(false, 1400, false);
        assert_eq!(g.process(&mut r, 1), Verdict::Forward(0));
        let mut sent = vec![];
        ForwardMode::emit(&mut g, &mut |_, b| {
            sent.push(b.len());
            true
        });
        if whole {
            assert_eq!((r.len(), &sent[..]), (14 + 1420, &[][..]), "whole");
        } else {
            assert_eq!(r.len(), 14 + 48 + 1232, "lowest {lowest}");
            assert_eq!(sent, [14 + 48 + 1380 - 1232], "lowest {lowest}");
        }
        let mut r = udp(false, 1500, false);
        assert_eq!(g.process(&mut r, 1), Verdict::Forward(0));
        let most = lowest.min(1500) - 48;
        assert_eq!(r.len(), 14 + 48 + usize::from(most & !7), "lowest {lowest}");
    }
}

/// The gateway's count `name` (as of its last tick).
fn event(g: &Gateway, name: &str) -> u64 {
    let i = pipeline::gateway::EVENTS
        .iter()
        .position(|n| *n == name)
        .unwrap();
    g.events()[i]
}

/// The golden datagram's fragments out of order: the client's later ones
/// wait for its first and leave translated, from the worker's next emit,
/// as scapy's; so does the server's later one that came first (grown into
/// IPv6's headers in its copy's buffer). An echo's first fragment whose
/// last never comes waits a second and is dropped, counted.
#[test]
fn fragments_before_their_first_wait_for_it() {
    let (_, steps) = cases().into_iter().find(|(n, _)| n == "fragments").unwrap();
    let mut g = gateway();
    let (out, back) = steps.split_at(3);
    let golden = |s: &Step| s.2[0].1.clone();
    for k in [2, 1] {
        let mut f = out[k].1.clone();
        assert_eq!(g.process(&mut f, 0), Verdict::Drop(DropReason::Consumed));
    }
    let mut f = out[0].1.clone();
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
    assert_eq!(f, golden(&out[0]));
    let mut sent = vec![];
    ForwardMode::emit(&mut g, &mut |p, b| {
        sent.push((p, b.to_vec()));
        true
    });
    assert_eq!(
        sent,
        [(1, golden(&out[2])), (1, golden(&out[1]))],
        "as they came, as scapy's"
    );
    let mut f = back[1].1.clone();
    assert_eq!(g.process(&mut f, 1), Verdict::Drop(DropReason::Consumed));
    let mut f = back[0].1.clone();
    assert_eq!(g.process(&mut f, 1), Verdict::Forward(0));
    assert_eq!(f, golden(&back[0]));
    let mut sent = vec![];
    ForwardMode::emit(&mut g, &mut |p, b| {
        sent.push((p, b.to_vec()));
        true
    });
    assert_eq!(sent, [(0, golden(&back[1]))], "grown into IPv6's headers");
    let mut f = back[2].1.clone();
    assert_eq!(g.process(&mut f, 1), Verdict::Forward(0));
    assert_eq!(f, golden(&back[2]));
    g.tick(2 * S);
    assert_eq!(event(&g, "reass_held"), 3);
    assert_eq!(event(&g, "reass_dropped"), 0);
    assert_eq!(event(&g, "nat64_to_ipv4"), 3);
    assert_eq!(event(&g, "nat64_to_ipv6"), 3);

    // An echo request's first fragment waits for its last, which does
    // not come: after a second it is dropped; its second fragment, later,
    // waits for a first that never comes.
    let (_, echo) = cases()
        .into_iter()
        .find(|(n, _)| n == "echo-fragments")
        .unwrap();
    let mut first = echo[0].1.clone();
    assert_eq!(
        g.process(&mut first, 0),
        Verdict::Drop(DropReason::Consumed)
    );
    g.tick(3 * S + 1);
    assert_eq!(event(&g, "reass_held"), 4);
    assert_eq!(event(&g, "reass_timeout"), 1);
    ForwardMode::emit(&mut g, &mut |_, _| panic!("nothing to send"));
    let mut second = echo[1].1.clone();
    assert_eq!(
        g.process(&mut second, 0),
        Verdict::Drop(DropReason::Consumed)
    );
    g.tick(5 * S);
    assert_eq!(event(&g, "reass_timeout"), 2);
}
