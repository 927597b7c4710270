//! IPv6 masquerade: flows from the inside prefix leave from the outside
//! interface's address with a port of the worker's, their replies come
//! back translated, every checksum verifying from scratch; ICMPv6 errors
//! about them reach the inside host with their quote translated back;
//! with two workers, a reply to the other's port is handed to it.

use super::*;
use std::net::Ipv6Addr;

const CLIENT6: &str = "fd00:1::10";
const SERVER6: &str = "2001:db8:ff::7";
const OUTSIDE6: &str = "2001:db8:ff::1";
const ROUTER6: &str = "2001:db8:99::1";

fn v6(s: &str) -> u128 {
    u128::from(s.parse::<Ipv6Addr>().unwrap())
}

/// Port 0 inside (fd00:1::1/64, the client), port 1 outside
/// (2001:db8:ff::1/64, the server; a router on the way, 2001:db8:99::1,
/// behind it).
fn router6() -> Router {
    router6_with(false)
}

/// [`router6`], and with `more` 2001:db8:99::/64 over two paths (two
/// gateways on port 1: SERVER6 and 2001:db8:ff::8) and a route to
/// 2001:db8:77::/64 through a gateway not yet resolved (2001:db8:ff::9).
fn router6_with(more: bool) -> Router {
    let mut beyond = vec![NextHop {
        port: 1,
        via: Some(SERVER6.parse().unwrap()),
    }];
    let mut neighbors6 = vec![
        (0, CLIENT6.parse().unwrap(), HOST),
        (1, SERVER6.parse().unwrap(), GW),
    ];
    let mut routes = vec![];
    if more {
        beyond.push(NextHop {
            port: 1,
            via: Some("2001:db8:ff::8".parse().unwrap()),
        });
        neighbors6.push((1, "2001:db8:ff::8".parse().unwrap(), HOST2));
        routes.push((
            "2001:db8:77::".parse().unwrap(),
            64,
            vec![NextHop {
                port: 1,
                via: Some("2001:db8:ff::9".parse().unwrap()),
            }],
        ));
    }
    let iface = |mac, a: &str| Interface {
        mac,
        ipv4: vec![],
        ipv6: vec![(a.parse().unwrap(), 64)],
        mtu: 1500,
        vlan: None,
        down: false,
    };
    Router::new(RouterConfig {
        interfaces: vec![iface(R0, "fd00:1::1"), iface(R1, OUTSIDE6)],
        fib: crate::fib::FibWriter::build(
            &[
                (
                    "fd00:1::".parse().unwrap(),
                    64,
                    vec![NextHop { port: 0, via: None }],
                ),
                (
                    "2001:db8:ff::".parse().unwrap(),
                    64,
                    vec![NextHop { port: 1, via: None }],
                ),
                ("2001:db8:99::".parse().unwrap(), 64, beyond),
            ]
            .into_iter()
            .chain(routes)
            .collect::<Vec<_>>(),
        )
        .unwrap()
        .fib()
        .clone(),
        neighbors4: vec![],
        neighbors6,
        icmp_rate: 1_000_000,
        neighbor_timeout_ns: 300 * S,
        punt: Default::default(),
        adverts: Vec::new(),
    })
}

fn config6(workers: u16) -> GatewayConfig {
    let mut nat = nat_cfg(PortRange::default());
    nat.snat.clear();
    nat.dnat.clear();
    nat.masq6 = vec![crate::nat::Masq6 {
        out_port: 1,
        src: (v6("fd00:1::"), 64),
    }];
    GatewayConfig {
        workers,
        ..config_with(vec![], Action::Accept, nat, 256)
    }
}

fn gateway6() -> Gateway {
    let mut g = Gateway::new(router6(), &config6(1), 0);
    g.tick(S);
    g
}

/// An Ethernet + IPv6 frame to `mac`: TCP (`flags`), UDP or an echo
/// request/reply (`proto` 58, `sport` its identifier, `dport` its type),
/// its checksum valid.
fn pkt6(
    mac: MacAddr,
    src: &str,
    sport: u16,
    dst: &str,
    dport: u16,
    proto: u8,
    flags: u8,
) -> Vec<u8> {
    let (s, d) = (v6(src), v6(dst));
    let body = b"sluice masquerade";
    let hl = match proto {
        6 => 20,
        _ => 8,
    };
    let l4len = hl + body.len();
    let mut f = vec![0u8; 14 + 40 + l4len];
    f[0..6].copy_from_slice(&mac.0);
    f[6..12].copy_from_slice(&HOST.0);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f[14] = 0x60;
    f[18..20].copy_from_slice(&(l4len as u16).to_be_bytes());
    (f[20], f[21]) = (proto, 64);
    f[22..38].copy_from_slice(&s.to_be_bytes());
    f[38..54].copy_from_slice(&d.to_be_bytes());
    let l4 = &mut f[54..];
    match proto {
        58 => {
            l4[0] = dport as u8;
            l4[4..6].copy_from_slice(&sport.to_be_bytes());
            l4[6..8].copy_from_slice(&[0, 1]);
        }
        _ => {
            l4[0..2].copy_from_slice(&sport.to_be_bytes());
            l4[2..4].copy_from_slice(&dport.to_be_bytes());
        }
    }
    if proto == 6 {
        l4[12] = 0x50;
        l4[13] = flags;
        l4[14..16].copy_from_slice(&[0xff, 0xff]);
    }
    if proto == 17 {
        l4[4..6].copy_from_slice(&(l4len as u16).to_be_bytes());
    }
    l4[hl..].copy_from_slice(body);
    let at = match proto {
        6 => 16,
        17 => 6,
        _ => 2,
    };
    let c = l4_csum6(&f);
    f[54 + at..56 + at].copy_from_slice(&c.to_be_bytes());
    f
}

/// The checksum an IPv6 frame's upper layer should carry (its field
/// taken as zero): 0 when the field holds it.
fn l4_csum6(f: &[u8]) -> u16 {
    let (mut s, mut d) = ([0u8; 16], [0u8; 16]);
    s.copy_from_slice(&f[22..38]);
    d.copy_from_slice(&f[38..54]);
    let l4 = &f[54..];
    !checksum::fold(checksum::sum(
        l4,
        checksum::pseudo_v6(s, d, f[20], l4.len() as u32),
    ))
}

fn src_of(f: &[u8]) -> u128 {
    u128::from_be_bytes(f[22..38].try_into().unwrap())
}

fn dst_of(f: &[u8]) -> u128 {
    u128::from_be_bytes(f[38..54].try_into().unwrap())
}

fn port_at(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([f[54 + at], f[55 + at]])
}

#[test]
fn flows_leave_from_the_outside_address_and_come_back() {
    let mut g = gateway6();
    for (proto, sport, dport) in [(17u8, 5000u16, 53u16), (6, 40000, 443), (58, 0x1234, 128)] {
        let mut f = pkt6(R0, CLIENT6, sport, SERVER6, dport, proto, 0x02);
        assert_eq!(g.process(&mut f, 0), Verdict::Forward(1), "proto {proto}");
        assert_eq!(src_of(&f), v6(OUTSIDE6), "from the interface's address");
        assert_eq!(dst_of(&f), v6(SERVER6));
        assert_eq!(f[21], 63, "hop limit");
        assert_eq!(l4_csum6(&f), 0, "proto {proto}: checksum verifies");
        let picked = if proto == 58 {
            port_at(&f, 4)
        } else {
            port_at(&f, 0)
        };
        assert!(picked >= 1024, "a NAT port: {picked}");
        // The reply, to the outside address and port.
        let mut r = if proto == 58 {
            pkt6(R1, SERVER6, picked, OUTSIDE6, 129, 58, 0)
        } else {
            pkt6(R1, SERVER6, dport, OUTSIDE6, picked, proto, 0x12)
        };
        assert_eq!(g.process(&mut r, 1), Verdict::Forward(0), "reply {proto}");
        assert_eq!(dst_of(&r), v6(CLIENT6), "back to the client");
        assert_eq!(src_of(&r), v6(SERVER6));
        assert_eq!(
            l4_csum6(&r),
            0,
            "proto {proto}: the reply's checksum verifies"
        );
        let back = if proto == 58 {
            port_at(&r, 4)
        } else {
            port_at(&r, 2)
        };
        assert_eq!(back, sport, "the client's own port (identifier)");
    }
    g.tick(2 * S);
    assert_eq!(event(&g, "nat_mapped"), 3);
    // Not from the inside prefix: not translated.
    let mut f = pkt6(R0, "fd00:2::10", 5000, SERVER6, 53, 17, 0);
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
    assert_eq!(src_of(&f), v6("fd00:2::10"));
    // Unsolicited, to the outside address: the router's (a closed port).
    let mut u = pkt6(R1, SERVER6, 53, OUTSIDE6, 4242, 17, 0);
    assert_ne!(g.process(&mut u, 1), Verdict::Forward(0));
}

/// A router on the way answers Time Exceeded about a masqueraded packet:
/// the error reaches the client with its quote as the client sent it.
#[test]
fn errors_about_masqueraded_packets_reach_the_client() {
    let mut g = gateway6();
    let orig = pkt6(R0, CLIENT6, 33434, SERVER6, 33435, 17, 0);
    let mut out = orig.clone();
    assert_eq!(g.process(&mut out, 0), Verdict::Forward(1));
    // Time Exceeded from a router behind the server, quoting the packet.
    let quote = &out[14..];
    let mut e = vec![0u8; 14 + 40 + 8 + quote.len()];
    e[0..6].copy_from_slice(&R1.0);
    e[6..12].copy_from_slice(&GW.0);
    e[12..14].copy_from_slice(&[0x86, 0xdd]);
    e[14] = 0x60;
    e[18..20].copy_from_slice(&((8 + quote.len()) as u16).to_be_bytes());
    (e[20], e[21]) = (58, 64);
    e[22..38].copy_from_slice(&v6(ROUTER6).to_be_bytes());
    e[38..54].copy_from_slice(&v6(OUTSIDE6).to_be_bytes());
    e[54] = 3;
    e[62..].copy_from_slice(quote);
    let c = l4_csum6(&e);
    e[56..58].copy_from_slice(&c.to_be_bytes());
    assert_eq!(g.process(&mut e, 1), Verdict::Forward(0));
    assert_eq!(dst_of(&e), v6(CLIENT6), "to the client");
    assert_eq!(l4_csum6(&e), 0, "ICMPv6 checksum");
    let q = &e[62..];
    let mut want = orig[14..].to_vec();
    want[7] = 63; // the hop the packet took through the router
    assert_eq!(q[8..44], want[8..44], "quoted addresses and ports as sent");
    assert_eq!(q[46..48], want[46..48], "quoted UDP checksum as sent");
}

/// Two workers: each picks ports of its own share; a reply reaching the
/// other one is handed to the owner.
#[test]
fn replies_to_another_workers_port_are_handed_over() {
    let cfg = config6(2);
    let mut w: Vec<Gateway> = (0..2).map(|i| Gateway::new(router6(), &cfg, i)).collect();
    for g in &mut w {
        g.tick(S);
    }
    let mut f = pkt6(R0, CLIENT6, 5000, SERVER6, 53, 17, 0);
    assert_eq!(w[1].process(&mut f, 0), Verdict::Forward(1));
    let picked = port_at(&f, 0);
    let mut r = pkt6(R1, SERVER6, 53, OUTSIDE6, picked, 17, 0);
    assert_eq!(w[0].process(&mut r, 1), Verdict::Handoff(1));
    assert_eq!(w[1].process(&mut r, 1), Verdict::Forward(0));
    assert_eq!(dst_of(&r), v6(CLIENT6));
}

/// The burst path's IPv6 lanes give every packet the verdict and bytes it
/// gets alone through `process`, with the same counters, with IPv6
/// masquerade and without: inside flows out (masqueraded, or tracked as
/// they are) and their replies (to the router's address: the full way;
/// or to the client: a lane), outside flows in and their replies, repeats
/// of a new flow within a burst, flows that expire and open again, and
/// packets no lane takes (hop limit 1, multicast, to the router).
#[test]
fn the_burst_paths_ipv6_lanes_change_nothing() {
    use rand::{RngExt, SeedableRng};
    let name = |a: u128| Ipv6Addr::from(a).to_string();
    // With `more`: rules that refuse new flows (TCP to port 53 rejected
    // with a RST, UDP from outside to port 80 dropped, invalid packets
    // dropped), a multipath route (2001:db8:99::/64: the path picked by
    // the packet as sent, after masquerade) and a route through a
    // gateway not resolved (the first packets held while it is
    // solicited).
    for (masq, more) in [(true, false), (false, false), (true, true), (false, true)] {
        let what = format!("masq {masq}, more {more}");
        let cfg = || {
            let mut c = config6(1);
            let mut nat = (*c.nat).clone();
            if !masq {
                nat.masq6.clear();
            }
            if more {
                let on = |proto: u8, port: u16| Rule {
                    dport: (port, port),
                    proto: (proto, 0xff),
                    ..Rule::any()
                };
                let rules = vec![
                    fw(
                        on(6, 53),
                        &[0],
                        state::NEW,
                        Action::Reject(RejectWith::Auto),
                    ),
                    fw(on(17, 80), &[1], state::NEW, Action::Drop),
                    fw(Rule::any(), &[], state::INVALID, Action::Drop),
                ];
                c.rules = Arc::new(RuleSet::build(rules, Action::Accept, &nat.original_dsts()));
            }
            c.nat = Arc::new(nat);
            c
        };
        let mut rng = rand::rngs::SmallRng::seed_from_u64(23);
        let mut alone = Gateway::new(router6_with(more), &cfg(), 0);
        alone.tick(S);
        let (mut inputs, mut outputs): (Vec<Replayed>, _) = (vec![], vec![]);
        let mut last_out: Vec<Option<(Vec<u8>, u16)>> = vec![None; 32];
        let mut now = S;
        for i in 0..1500 {
            // (At the start of eight: `replay_in_bursts`.)
            if i % 160 == 0 && i > 0 {
                now += 31 * S;
                alone.tick(now);
                inputs.push(None);
                outputs.push((Verdict::Drop(DropReason::Filtered), vec![]));
                continue;
            }
            let f = rng.random_range(0..32usize);
            let tcp = f % 2 == 1;
            let proto = if tcp { 6 } else { 17 };
            let (mut p, port) = match &last_out[f] {
                Some((out, o)) if rng.random_bool(0.4) => {
                    // The reply to what left, from where it went.
                    let mac = if *o == 1 { R1 } else { R0 };
                    let (s, d) = (name(dst_of(out)), name(src_of(out)));
                    let (sp, dp) = (port_at(out, 2), port_at(out, 0));
                    (
                        pkt6(mac, &s, sp, &d, dp, proto, if tcp { 0x12 } else { 0 }),
                        *o,
                    )
                }
                prev => {
                    let flags = if prev.is_some() { 0x10 } else { 0x02 };
                    let sport = 1000 + f as u16;
                    match rng.random_range(0..20) {
                        0 => {
                            let mut p = pkt6(R0, CLIENT6, sport, SERVER6, 53, proto, flags);
                            p[21] = 1;
                            (p, 0)
                        }
                        1 => (pkt6(R0, CLIENT6, sport, "ff02::1:5", 53, 17, 0), 0),
                        2 => (pkt6(R0, CLIENT6, sport, "fd00:1::1", 53, 17, 0), 0),
                        3 => (pkt6(R0, CLIENT6, f as u16, SERVER6, 128, 58, 0), 0),
                        // Outside flows in, to the client.
                        _ if f >= 24 => {
                            let from = format!("2001:db8:99::{f:x}");
                            (pkt6(R1, &from, sport, CLIENT6, 80, proto, flags), 1)
                        }
                        _ if f >= 12 => {
                            let to = format!("2001:db8:99::{f:x}");
                            (pkt6(R0, CLIENT6, sport, &to, 443, proto, flags), 0)
                        }
                        _ if more && f >= 8 => {
                            let to = format!("2001:db8:77::{f:x}");
                            (pkt6(R0, CLIENT6, sport, &to, 443, proto, flags), 0)
                        }
                        _ => (pkt6(R0, CLIENT6, sport, SERVER6, 53, proto, flags), 0),
                    }
                }
            };
            inputs.push(Some((p.clone(), port)));
            let v = alone.process(&mut p, port);
            if let Verdict::Forward(o) = v {
                if p[20] == proto {
                    last_out[f] = Some((p.clone(), o));
                }
            }
            outputs.push((v, p));
        }
        let forwarded = outputs
            .iter()
            .filter(|(v, _)| matches!(v, Verdict::Forward(_)));
        assert!(forwarded.count() > 800, "{what}");
        if more {
            // Every rule refused some, and the unresolved gateway was
            // solicited (a Neighbor Solicitation sent in a packet's stead).
            assert!(alone.hits()[..3].iter().all(|&h| h > 0), "{what}");
            let solicited = outputs
                .iter()
                .filter(|(_, p)| p.len() > 54 && p[20] == 58 && p[54] == 135);
            assert!(solicited.count() > 0, "{what}");
        }
        let mut g = Gateway::new(router6_with(more), &cfg(), 0);
        g.tick(S);
        replay_in_bursts(&mut g, &inputs, &outputs, true, &what);
        assert_eq!(g.ct.events(), alone.ct.events(), "{what}");
        assert_eq!(g.ct.len(), alone.ct.len(), "{what}");
        assert_eq!(g.events(), alone.events(), "{what}");
        assert_eq!(g.hits(), alone.hits(), "{what}");
        assert!(alone.ct.event(crate::conntrack::Event::Expired) > 0);
    }
}

/// Link-scoped packets (RFC 4291 2.5.6), per packet and in a burst,
/// neither tracked nor translated nor forwarded: from a link-local
/// address, Destination Unreachable code 2 back to it; to another's
/// link-local address, not routed; to the router's own, its echo reply.
#[test]
fn link_scoped_packets_are_neither_translated_nor_forwarded() {
    let ours = crate::router::link_local(R0).to_string();
    for burst in [false, true] {
        let mut g = gateway6();
        let mut pkts = vec![
            pkt6(R0, "fe80::10", 4000, SERVER6, 53, 17, 0),
            pkt6(R0, CLIENT6, 4000, "fe80::99", 53, 17, 0),
            pkt6(R0, CLIENT6, 7, &ours, 128, 58, 0),
            pkt6(R0, CLIENT6, 4001, SERVER6, 53, 17, 0),
        ];
        let mut v = vec![Verdict::Drop(DropReason::NotIp); pkts.len()];
        if burst {
            if let Some(one) = g.process_burst(&mut pkts, 0, &mut v) {
                v.fill(one);
            }
        } else {
            for (p, v) in pkts.iter_mut().zip(v.iter_mut()) {
                *v = g.process(p, 0);
            }
        }
        assert_eq!(
            v,
            [
                Verdict::Forward(0),
                Verdict::Drop(DropReason::NotRoutable),
                Verdict::Forward(0),
                Verdict::Forward(1),
            ],
            "burst {burst}"
        );
        assert_eq!(
            (pkts[0][20], pkts[0][54], pkts[0][55]),
            (58, 1, 2),
            "beyond scope"
        );
        assert_eq!(dst_of(&pkts[0]), v6("fe80::10"));
        assert_eq!(pkts[2][54], 129, "echo reply");
        assert_eq!(src_of(&pkts[3]), v6(OUTSIDE6), "the plain flow masqueraded");
        g.tick(2 * S);
        assert_eq!(event(&g, "ct_created"), 1, "only the plain flow tracked");
    }
}
