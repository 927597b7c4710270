//! The whole gateway stage (conntrack, firewall, NAT, routing) on a
//! sequence of arbitrary frames, so that state carries from one to the
//! next: nothing may panic, and every IPv4 packet it sends has a valid
//! header checksum.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipeline::acl::Rule;
use pipeline::conntrack::Timeouts;
use pipeline::firewall::{state, status, Action, CtMatch, FwRule, RejectWith, RuleSet};
use pipeline::fwd::ForwardMode;
use pipeline::gateway::{Gateway, GatewayConfig};
use pipeline::nat::{Dnat, NatConfig, PortRange, Snat, SnatTo};
use pipeline::wire::{Ipv4Packet, MacAddr};
use pipeline::Verdict;
use std::sync::{Arc, OnceLock};

mod common;

use common::{router, R0};

const R1: MacAddr = MacAddr([2, 0x51, 0, 0, 0, 1]);

fn gateway() -> Gateway {
    static G: OnceLock<GatewayConfig> = OnceLock::new();
    let cfg = G.get_or_init(|| {
        let any = Rule::any();
        let rule = |hdr, states, action| FwRule {
            hdr,
            in_ports: vec![],
            out_ports: vec![],
            states,
            action,
            counter: true,
            origin: String::new(),
            ct: CtMatch::default(),
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
            // Port forwards only: new flows to the inside need DNAT.
            FwRule {
                in_ports: vec![1],
                ct: CtMatch {
                    status: (0, status::DNAT),
                    orig_dst: None,
                    orig_dport: None,
                },
                ..rule(any, state::NEW, Action::Drop)
            },
            FwRule {
                ct: CtMatch {
                    status: (status::DNAT, status::DNAT),
                    orig_dst: Some(pipeline::acl::v4_prefix(
                        std::net::Ipv4Addr::new(198, 19, 0, 1),
                        32,
                    )),
                    orig_dport: Some((8080, 8080)),
                },
                ..rule(any, state::NEW, Action::Accept)
            },
        ];
        let nat = nat();
        GatewayConfig {
            rules: Arc::new(RuleSet::build(rules, Action::Accept, &nat.original_dsts())),
            nat: Arc::new(nat),
            ct_capacity: 64,
            timeouts: Timeouts::default(),
            tcp_window: true,
            workers: 1,
            mss_limits: Default::default(),
            mss_rules: Default::default(),
        }
    });
    Gateway::new(router(), cfg, 0)
}

fn nat() -> NatConfig {
    NatConfig {
        snat: vec![Snat {
            out_port: 1,
            src: (0, 0),
            to: SnatTo::Masquerade,
            dnatted: None,
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
        // The common router's IPv6 side, its port 1 translated.
        npt: vec![pipeline::npt::Npt::new(
            1,
            (0x2001_0db8_0018_u128 << 80, 48),
            (0x2001_0db8_0099_u128 << 80, 48),
        )
        .unwrap()],
        // NAT64 out of port 1 from its address, and IPv6 masquerade of
        // another inside prefix there.
        nat64: vec![
            pipeline::nat64::Nat64::new(pipeline::nat64::WELL_KNOWN, 1, vec![]).unwrap(),
        ],
        masq6: vec![pipeline::nat::Masq6 {
            out_port: 1,
            src: (0x2001_0db8_0020_u128 << 80, 48),
        }],
        ..NatConfig::default()
    }
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
