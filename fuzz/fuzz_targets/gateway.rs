//! The whole gateway stage (conntrack, firewall, NAT, routing) on a
//! sequence of arbitrary frames, so that state carries from one to the
//! next: nothing may panic, and every IPv4 packet it sends has a valid
//! header checksum.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipeline::acl::Rule;
use pipeline::conntrack::Timeouts;
use pipeline::firewall::{state, Action, FwRule, RejectWith, RuleSet};
use pipeline::fwd::ForwardMode;
use pipeline::gateway::{Gateway, GatewayConfig};
use pipeline::lpm::{Lpm4Builder, Lpm6Builder};
use pipeline::nat::{Dnat, NatConfig, PortRange, Snat, SnatTo};
use pipeline::router::{Interface, NextHop, Router, RouterConfig};
use pipeline::wire::{Ipv4Packet, MacAddr};
use pipeline::Verdict;
use std::sync::{Arc, OnceLock};

const R0: MacAddr = MacAddr([2, 0x51, 0, 0, 0, 0]);
const R1: MacAddr = MacAddr([2, 0x51, 0, 0, 0, 1]);

fn router() -> Router {
    static R: OnceLock<Router> = OnceLock::new();
    R.get_or_init(|| {
        let mut b = Lpm4Builder::new();
        b.add("198.18.0.0".parse().unwrap(), 24, 0)
            .add("0.0.0.0".parse().unwrap(), 0, 1);
        let mut b6 = Lpm6Builder::new();
        b6.add("2001:db8:18::".parse().unwrap(), 64, 0)
            .add("::".parse().unwrap(), 0, 2);
        Router::new(RouterConfig {
            interfaces: vec![
                Interface {
                    mac: R0,
                    ipv4: vec![("198.18.0.1".parse().unwrap(), 24)],
                    ipv6: vec![("2001:db8:18::1".parse().unwrap(), 64)],
                    mtu: 1500,
                },
                Interface {
                    mac: MacAddr([2, 0x51, 0, 0, 0, 1]),
                    ipv4: vec![("198.19.0.1".parse().unwrap(), 24)],
                    ipv6: vec![("2001:db8:19::1".parse().unwrap(), 64)],
                    mtu: 576,
                },
            ],
            next_hops: vec![
                NextHop { port: 0, via: None },
                NextHop {
                    port: 1,
                    via: Some("198.19.0.2".parse().unwrap()),
                },
                NextHop {
                    port: 1,
                    via: Some("2001:db8:19::2".parse().unwrap()),
                },
            ],
            lpm4: Arc::new(b.build().unwrap()),
            lpm6: Arc::new(b6.build().unwrap()),
            neighbors4: vec![(
                1,
                "198.19.0.2".parse().unwrap(),
                MacAddr([2, 0x5e, 0, 0, 0, 1]),
            )],
            neighbors6: vec![],
            icmp_rate: 1_000_000,
            neighbor_timeout_ns: u64::MAX,
        })
    })
    .clone()
}

fn gateway() -> Gateway {
    static G: OnceLock<GatewayConfig> = OnceLock::new();
    let cfg = G.get_or_init(|| {
        let any = Rule {
            src: (0, 0),
            dst: (0, 0),
            sport: (0, 65535),
            dport: (0, 65535),
            proto: (0, 0),
            flags: (0, 0),
            meta: (0, 0),
        };
        let rule = |hdr, states, action| FwRule {
            hdr,
            in_ports: vec![],
            out_ports: vec![],
            states,
            action,
            counter: true,
            origin: String::new(),
        };
        let rules = vec![
            rule(
                Rule {
                    dport: (22, 22),
                    proto: (6, 0xff),
                    ..any
                },
                0,
                Action::Reject(RejectWith::Auto),
            ),
            rule(
                Rule {
                    dport: (53, 53),
                    proto: (17, 0xff),
                    ..any
                },
                0,
                Action::Reject(RejectWith::AdminProhibited),
            ),
            rule(any, state::INVALID, Action::Drop),
        ];
        GatewayConfig {
            rules: Arc::new(RuleSet::build(rules, Action::Accept)),
            nat: Arc::new(NatConfig {
                snat: vec![Snat {
                    out_port: 1,
                    src: (0, 0),
                    to: SnatTo::Masquerade,
                }],
                dnat: vec![Dnat {
                    in_port: Some(1),
                    proto: Some(6),
                    dst: 0xc613_0001,
                    dport: Some(8080),
                    to: 0xc612_000a,
                    to_port: Some(80),
                }],
                statics: vec![],
                ports: PortRange {
                    lo: 40000,
                    hi: 40015,
                },
            }),
            ct_capacity: 64,
            timeouts: Timeouts::default(),
            workers: 1,
        }
    });
    Gateway::new(router(), cfg, 0)
}

fuzz_target!(|data: &[u8]| {
    let mut g = gateway();
    g.tick(1);
    // Frames: a length byte, a control byte (bit 0: port, bit 7: address
    // it to the port's MAC, bit 6: fix the IPv4 header checksum, bits 4-5:
    // seconds to advance the clock by, × 16), then the bytes.
    let mut rest = data;
    let mut now = 1u64;
    while rest.len() >= 2 {
        let (len, ctl) = (usize::from(rest[0]), rest[1]);
        let body = &rest[2..];
        let n = len.min(body.len());
        let mut f = body[..n].to_vec();
        rest = &body[n..];
        let port = u16::from(ctl & 1);
        if f.len() >= 6 && ctl & 0x80 != 0 {
            f[0..6].copy_from_slice(if port == 0 { &R0.0 } else { &R1.0 });
        }
        // Bit 6: give an IPv4 header a valid checksum (so that frames get
        // past validation into conntrack, the rules and NAT).
        if ctl & 0x40 != 0 && f.len() >= 34 && f[12..14] == [0x08, 0x00] {
            let h = usize::from(f[14] & 0x0f) * 4;
            if h >= 20 && f.len() >= 14 + h {
                f[24..26].copy_from_slice(&[0, 0]);
                let c = pipeline::checksum::checksum(&f[14..14 + h]);
                f[24..26].copy_from_slice(&c.to_be_bytes());
            }
        }
        now += u64::from(ctl & 0x30) * 1_000_000_000;
        g.tick(now);
        if let Verdict::Forward(p) = g.process(&mut f, port) {
            assert!(p < 2);
            assert!(f.len() >= 14, "a forwarded frame has an Ethernet header");
            if f[12..14] == [0x08, 0x00] {
                let ip = Ipv4Packet::new_checked(&f[14..]).expect("a forwarded IPv4 packet parses");
                assert!(ip.verify_checksum(), "header checksum after the gateway");
            }
        }
    }
});
