//! Gateway tests: NAT out and back, DNAT, hairpinning, ICMP translation,
//! exhaustion, timeouts, firewall actions, and property tests that every
//! translated packet has valid checksums (recomputed from scratch) and that
//! translating there and back restores the packet bit for bit.

use super::*;
use crate::acl::Rule;
use crate::checksum;
use crate::firewall::{CtMatch, FwRule, RejectWith};
use crate::nat::{Dnat, Snat, StaticNat};
use crate::router::{Interface, NextHop, RouterConfig};
use crate::wire::MacAddr;
use proptest::prelude::*;
use std::net::Ipv4Addr;

/// A counter of the gateway by its name in reports.
fn event(g: &Gateway, name: &str) -> u64 {
    let i = EVENTS.iter().position(|n| *n == name).unwrap();
    g.events()[i]
}

const R0: MacAddr = MacAddr([2, 0x51, 0, 0, 0, 0]);
const R1: MacAddr = MacAddr([2, 0x51, 0, 0, 0, 1]);
const HOST: MacAddr = MacAddr([2, 0xaa, 0, 0, 0, 1]);
const HOST2: MacAddr = MacAddr([2, 0xaa, 0, 0, 0, 2]);
const GW: MacAddr = MacAddr([2, 0xbb, 0, 0, 0, 1]);

const CLIENT: &str = "198.18.0.10";
const CLIENT2: &str = "198.18.0.20";
const INSIDE: &str = "198.18.0.1";
const OUTSIDE: &str = "198.19.0.1";
const SERVER: &str = "203.0.113.7";
const GW_ADDR: &str = "198.19.0.2";
const S: u64 = 1_000_000_000;

fn a(s: &str) -> u32 {
    u32::from(s.parse::<Ipv4Addr>().unwrap())
}

/// Port 0 inside (198.18.0.1/24), port 1 outside (198.19.0.1/24, gateway
/// 198.19.0.2 for 203.0.113.0/24).
fn router() -> Router {
    router_with(
        vec![NextHop {
            port: 1,
            via: Some(GW_ADDR.parse().unwrap()),
        }],
        vec![],
    )
}

/// [`router`] with `to_server` as the paths of 203.0.113.0/24 and more
/// neighbours.
fn router_with(to_server: Vec<NextHop>, more: Vec<(u16, Ipv4Addr, MacAddr)>) -> Router {
    Router::new(RouterConfig {
        interfaces: vec![
            Interface {
                mac: R0,
                ipv4: vec![(INSIDE.parse().unwrap(), 24)],
                ipv6: vec![],
                mtu: 1500,
                vlan: None,
                down: false,
            },
            Interface {
                mac: R1,
                ipv4: vec![(OUTSIDE.parse().unwrap(), 24)],
                ipv6: vec![],
                mtu: 1500,
                vlan: None,
                down: false,
            },
        ],
        fib: crate::fib::FibWriter::build(&[
            (
                "198.18.0.0".parse().unwrap(),
                24,
                vec![NextHop { port: 0, via: None }],
            ),
            (
                "198.19.0.0".parse().unwrap(),
                24,
                vec![NextHop { port: 1, via: None }],
            ),
            ("203.0.113.0".parse().unwrap(), 24, to_server),
        ])
        .unwrap()
        .fib()
        .clone(),
        neighbors4: [
            (1, GW_ADDR.parse().unwrap(), GW),
            (0, CLIENT.parse().unwrap(), HOST),
            (0, CLIENT2.parse().unwrap(), HOST2),
        ]
        .into_iter()
        .chain(more)
        .collect(),
        neighbors6: vec![],
        icmp_rate: 1_000_000,
        neighbor_timeout_ns: 300 * S,
        punt: Default::default(),
        adverts: Vec::new(),
    })
}

fn fw(hdr: Rule, ins: &[u16], states: u8, action: Action) -> FwRule {
    FwRule {
        hdr,
        in_ports: ins.to_vec(),
        out_ports: vec![],
        states,
        action,
        counter: true,
        origin: String::new(),
        ct: CtMatch::default(),
    }
}

fn nat_cfg(ports: PortRange) -> NatConfig {
    NatConfig {
        snat: vec![Snat {
            out_port: 1,
            src: (a("198.18.0.0"), 24),
            to: SnatTo::Masquerade,
            dnatted: None,
        }],
        dnat: vec![Dnat {
            in_port: None,
            proto: Some(IpProto::TCP),
            dst: a(OUTSIDE),
            dport: Some(8080),
            to: a(CLIENT),
            to_port: Some(80),
        }],
        statics: vec![],
        ports,
        no_hairpin: false,
        npt: vec![],
        nat64: vec![],
        masq6: vec![],
    }
}

/// One worker's config: `rules` with `default`, `nat`, `cap` flows.
fn config_with(rules: Vec<FwRule>, default: Action, nat: NatConfig, cap: usize) -> GatewayConfig {
    GatewayConfig {
        rules: Arc::new(RuleSet::build(rules, default, &nat.original_dsts())),
        nat: Arc::new(nat),
        ct_capacity: cap,
        timeouts: Timeouts::default(),
        tcp_window: true,
        workers: 1,
        mss_limits: Default::default(),
        mss_rules: Default::default(),
    }
}

fn gateway_with(rules: Vec<FwRule>, default: Action, nat: NatConfig, cap: usize) -> Gateway {
    let cfg = config_with(rules, default, nat, cap);
    let mut g = Gateway::new(router(), &cfg, 0);
    g.tick(S);
    g
}

fn gateway() -> Gateway {
    gateway_with(vec![], Action::Accept, nat_cfg(PortRange::default()), 1024)
}

/// An Ethernet + IPv4 frame to `mac` with valid checksums: `proto` 6 (TCP
/// with `flags`), 17 (UDP) or 1 (ICMP echo request with identifier
/// `sport`).
#[allow(clippy::too_many_arguments)]
fn pkt(
    mac: MacAddr,
    src: &str,
    sport: u16,
    dst: &str,
    dport: u16,
    proto: u8,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let l4h = match proto {
        6 => 20,
        _ => 8,
    };
    let l4 = l4h + payload.len();
    let mut f = vec![0u8; 14 + 20 + l4];
    f[0..6].copy_from_slice(&mac.0);
    f[6..12].copy_from_slice(&HOST.0);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let mut ip = Ipv4Packet::new_unchecked(&mut f[14..34]);
    ip.set_version_ihl(20);
    ip.set_total_len((20 + l4) as u16);
    ip.set_ident(0x1234);
    ip.set_flags_frag(0x4000);
    ip.set_ttl(64);
    ip.set_protocol(proto);
    ip.set_src(a(src).to_be_bytes());
    ip.set_dst(a(dst).to_be_bytes());
    ip.fill_checksum();
    let t = &mut f[34..];
    match proto {
        6 => {
            t[0..2].copy_from_slice(&sport.to_be_bytes());
            t[2..4].copy_from_slice(&dport.to_be_bytes());
            t[4..8].copy_from_slice(&1000u32.to_be_bytes());
            // Both ends start at sequence number 1000: this acknowledges
            // the other's SYN (window tracking checks it).
            t[8..12].copy_from_slice(&1001u32.to_be_bytes());
            t[12] = 5 << 4;
            t[13] = flags;
            t[14..16].copy_from_slice(&[0xff, 0xff]);
        }
        17 => {
            t[0..2].copy_from_slice(&sport.to_be_bytes());
            t[2..4].copy_from_slice(&dport.to_be_bytes());
            t[4..6].copy_from_slice(&(l4 as u16).to_be_bytes());
        }
        _ => {
            t[0] = 8;
            t[4..6].copy_from_slice(&sport.to_be_bytes());
            t[6..8].copy_from_slice(&1u16.to_be_bytes());
        }
    }
    t[l4h..].copy_from_slice(payload);
    fill_l4(&mut f);
    f
}

/// Computes the L4 checksum from scratch.
fn l4_sum(f: &[u8]) -> u16 {
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    let l4 = &f[14 + ip.header_len()..14 + usize::from(ip.total_len())];
    match ip.protocol() {
        1 => checksum::checksum(l4),
        p => {
            let ph = checksum::pseudo_v4(ip.src(), ip.dst(), p, l4.len() as u16);
            !checksum::fold(checksum::sum(l4, ph))
        }
    }
}

fn fill_l4(f: &mut [u8]) {
    let proto = f[14 + 9];
    let at = 34
        + match proto {
            6 => 16,
            17 => 6,
            _ => 2,
        };
    f[at..at + 2].copy_from_slice(&[0, 0]);
    let mut c = l4_sum(f);
    if proto == 17 && c == 0 {
        c = 0xffff;
    }
    f[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// Both checksums verify, computed from scratch.
fn valid(f: &[u8]) -> bool {
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    ip.verify_checksum() && l4_sum(f) == 0
}

fn addrs(f: &[u8]) -> (u32, u16, u32, u16) {
    let be = |i: usize| u16::from_be_bytes([f[i], f[i + 1]]);
    let be32 = |i: usize| u32::from_be_bytes([f[i], f[i + 1], f[i + 2], f[i + 3]]);
    let (sp, dp) = if f[23] == 1 {
        (be(38), be(38))
    } else {
        (be(34), be(36))
    };
    (be32(26), sp, be32(30), dp)
}

/// The reply a peer sends to `f`: addresses and ports swapped, addressed
/// to the router port's MAC `mac`, TCP flags `flags`.
fn reply_to(f: &[u8], mac: MacAddr, flags: u8) -> Vec<u8> {
    let (s, sp, d, dp) = addrs(f);
    let proto = f[23];
    let show = |x: u32| Ipv4Addr::from(x).to_string();
    let payload = &f[34 + if proto == 6 { 20 } else { 8 }..];
    let mut r = pkt(mac, &show(d), dp, &show(s), sp, proto, flags, payload);
    if proto == 1 {
        r[34] = 0; // echo reply
        fill_l4(&mut r);
    }
    r
}

#[test]
fn snat_tcp_out_and_back() {
    let mut g = gateway();
    let mut syn = pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x02, &[]);
    assert_eq!(g.process(&mut syn, 0), Verdict::Forward(1));
    let (s, sp, d, dp) = addrs(&syn);
    assert_eq!((s, d, dp), (a(OUTSIDE), a(SERVER), 80), "masqueraded");
    assert!((1024..=65535).contains(&sp));
    assert!(valid(&syn), "checksums after SNAT");
    assert_eq!(&syn[0..6], &GW.0);
    let mut synack = reply_to(&syn, R1, 0x12);
    assert_eq!(g.process(&mut synack, 1), Verdict::Forward(0));
    assert_eq!(
        addrs(&synack),
        (a(SERVER), 80, a(CLIENT), 40000),
        "reply translated back"
    );
    assert!(valid(&synack));
    assert_eq!(&synack[0..6], &HOST.0);
    let mut ack = pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x10, b"GET /");
    assert_eq!(g.process(&mut ack, 0), Verdict::Forward(1));
    assert_eq!(addrs(&ack).1, sp, "same mapping");
    let t = tuple4(a(CLIENT), a(SERVER), 40000, 80, 6);
    let (i, _) = g.ct.find(&t).unwrap();
    assert_eq!(g.ct.flow(i).state, crate::conntrack::State::Established);
    assert_eq!(event(&g, "nat_mapped"), 0, "not ticked yet");
    g.tick(2 * S);
    assert_eq!(event(&g, "nat_mapped"), 1);
    assert_eq!(event(&g, "ct_created"), 1);
}

/// A TCP segment `f` (made by [`pkt`] with 4 bytes of payload) with those
/// bytes as its options instead: an MSS option of `mss`.
fn with_mss(mut f: Vec<u8>, mss: u16) -> Vec<u8> {
    f[34 + 12] = 6 << 4;
    f[34 + 20..34 + 24].copy_from_slice(&[2, 4, (mss >> 8) as u8, mss as u8]);
    fill_l4(&mut f);
    f
}

fn mss_of(f: &[u8]) -> u16 {
    assert_eq!(f[34 + 12] >> 4, 6);
    u16::from_be_bytes([f[34 + 22], f[34 + 23]])
}

/// `clamp_mss` on the outside port (its MTU 1,492 less 40): a SYN
/// leaving by it and the SYN+ACK coming in by it have their MSS lowered
/// (through `process` and the burst path alike), checksums valid after
/// NAT too, counted; a SYN already under the limit and segments that
/// are not SYNs are left as they are.
#[test]
fn syns_crossing_a_clamped_port_have_their_mss_lowered() {
    let mut cfg = config_with(vec![], Action::Accept, nat_cfg(PortRange::default()), 1024);
    cfg.mss_limits = Arc::from(vec![[u16::MAX; 2], [1452, 1432]]);
    let mut g = Gateway::new(router(), &cfg, 0);
    g.tick(S);
    let four = [0u8; 4];
    let mut syn = with_mss(pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x02, &four), 1460);
    assert!(valid(&syn));
    assert_eq!(g.process(&mut syn, 0), Verdict::Forward(1));
    assert_eq!(mss_of(&syn), 1452, "leaving by the clamped port");
    assert!(valid(&syn), "checksums after NAT and the clamp");
    let mut synack = with_mss(reply_to(&syn, R1, 0x12), 8960);
    assert_eq!(g.process(&mut synack, 1), Verdict::Forward(0));
    assert_eq!(mss_of(&synack), 1452, "coming in by the clamped port");
    assert!(valid(&synack));
    // Under the limit, and not a SYN: untouched.
    let mut low = with_mss(pkt(R0, CLIENT, 40001, SERVER, 80, 6, 0x02, &four), 1400);
    assert_eq!(g.process(&mut low, 0), Verdict::Forward(1));
    assert_eq!(mss_of(&low), 1400);
    let mut ack = pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x10, &[2, 4, 0x05, 0xb4]);
    assert_eq!(g.process(&mut ack, 0), Verdict::Forward(1));
    assert_eq!(&ack[54..58], &[2, 4, 0x05, 0xb4], "data, not options");
    // The burst path: two SYNs of new flows.
    let mut burst: Vec<Vec<u8>> = (0..2)
        .map(|i| with_mss(pkt(R0, CLIENT, 41000 + i, SERVER, 80, 6, 0x02, &four), 1460))
        .collect();
    let mut v = vec![Verdict::Drop(DropReason::Filtered); 2];
    if let Some(x) = g.process_burst(&mut burst, 0, &mut v) {
        v.fill(x);
    }
    assert_eq!(v, [Verdict::Forward(1); 2]);
    for f in &burst {
        assert_eq!(mss_of(f), 1452);
        assert!(valid(f));
    }
    g.tick(2 * S);
    assert_eq!(event(&g, "tcp_mss_clamped"), 4);
}

/// Clamping rules (`[[firewall.clamp_mss]]`): the first that matches a
/// forwarded SYN (interfaces, and addresses as it came in, before NAT)
/// clamps it, in either direction; one from another host, or the other
/// way, is left alone; "pmtu" is the smaller MTU of the two interfaces
/// less the headers; through `process` and the burst path alike.
#[test]
fn clamping_rules_clamp_the_syns_they_match() {
    use crate::gateway::mss::{Clamp, MssRule};
    let mut cfg = config_with(vec![], Action::Accept, nat_cfg(PortRange::default()), 1024);
    cfg.mss_rules = Arc::from(vec![
        MssRule {
            in_ports: vec![0],
            out_ports: vec![1],
            src: Some(crate::acl::v4_prefix(CLIENT.parse().unwrap(), 32)),
            dst: None,
            clamp: Clamp::Max(1200),
        },
        MssRule {
            in_ports: vec![1],
            out_ports: vec![],
            src: None,
            dst: None,
            clamp: Clamp::Pmtu,
        },
    ]);
    let mut g = Gateway::new(router(), &cfg, 0);
    g.tick(S);
    let four = [0u8; 4];
    let mut syn = with_mss(pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x02, &four), 1460);
    assert_eq!(g.process(&mut syn, 0), Verdict::Forward(1));
    assert_eq!(mss_of(&syn), 1200, "the first rule: this client's, out");
    assert!(valid(&syn), "checksums after NAT and the clamp");
    // Another host's SYN: no rule of its.
    let mut other = with_mss(pkt(R0, CLIENT2, 40000, SERVER, 80, 6, 0x02, &four), 1460);
    assert_eq!(g.process(&mut other, 0), Verdict::Forward(1));
    assert_eq!(mss_of(&other), 1460);
    // The SYN+ACK, in on the outside: the second rule, to the path's MTU.
    let mut synack = with_mss(reply_to(&syn, R1, 0x12), 8960);
    assert_eq!(g.process(&mut synack, 1), Verdict::Forward(0));
    assert_eq!(mss_of(&synack), 1460, "1,500 less 40");
    assert!(valid(&synack));
    // The burst path.
    let mut burst: Vec<Vec<u8>> = (0..2)
        .map(|i| with_mss(pkt(R0, CLIENT, 41000 + i, SERVER, 80, 6, 0x02, &four), 1460))
        .collect();
    let mut v = vec![Verdict::Drop(DropReason::Filtered); 2];
    if let Some(x) = g.process_burst(&mut burst, 0, &mut v) {
        v.fill(x);
    }
    assert_eq!(v, [Verdict::Forward(1); 2]);
    for f in &burst {
        assert_eq!(mss_of(f), 1200);
        assert!(valid(f));
    }
    g.tick(2 * S);
    assert_eq!(event(&g, "tcp_mss_clamped"), 4);
}

/// A restart that keeps its flows: the flows of one gateway, written out
/// and read back into a new one (with rules that drop what is invalid and
/// accept only new flows from inside), carry on there. The TCP flow's next
/// data segment and the server's answer pass and are translated with the
/// same mapping; the mapping is not handed to a new flow; the UDP flow's
/// reply is translated back. The same packets into a new gateway without
/// the flows are dropped (invalid, or new from outside).
#[test]
fn flows_read_back_carry_on_in_a_new_gateway() {
    use crate::conntrack::saved::Saved;
    let rules = || {
        vec![
            fw(Rule::any(), &[], state::INVALID, Action::Drop),
            fw(Rule::any(), &[0], state::NEW, Action::Accept),
        ]
    };
    let new_gateway = || gateway_with(rules(), Action::Drop, nat_cfg(PortRange::default()), 64);
    let mut old = new_gateway();
    let mut syn = pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x02, &[]);
    assert_eq!(old.process(&mut syn, 0), Verdict::Forward(1));
    let mapped = addrs(&syn).1;
    let mut synack = reply_to(&syn, R1, 0x12);
    assert_eq!(old.process(&mut synack, 1), Verdict::Forward(0));
    let mut ack = pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x10, &[]);
    assert_eq!(old.process(&mut ack, 0), Verdict::Forward(1));
    let mut dns = pkt(R0, CLIENT, 5353, SERVER, 53, 17, 0, b"q");
    assert_eq!(old.process(&mut dns, 0), Verdict::Forward(1));
    let dns_out = dns.clone();

    let mut listed = Vec::new();
    old.dump(0, usize::MAX, usize::MAX, &Default::default(), &mut listed);
    assert_eq!(listed.len(), 2);
    let saved: Vec<Saved> = listed
        .iter()
        .map(|(f, left, _)| Saved::decode(&Saved::of(f, *left, 0).encode()).unwrap())
        .collect();

    // The packets that come after the restart.
    let data = || pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x18, b"GET /");
    let answer = |out: &[u8]| reply_to(out, R1, 0x18);
    let dns_reply = || reply_to(&dns_out, R1, 0);

    let mut new = new_gateway();
    assert_eq!(new.install_flows(&saved, 3 * S), (2, 0));
    assert_eq!(new.install_flows(&saved, 3 * S), (0, 2), "each once");
    let mut d = data();
    assert_eq!(new.process(&mut d, 0), Verdict::Forward(1));
    assert_eq!(
        addrs(&d),
        (a(OUTSIDE), mapped, a(SERVER), 80),
        "same mapping"
    );
    assert!(valid(&d));
    let mut back = answer(&d);
    assert_eq!(new.process(&mut back, 1), Verdict::Forward(0));
    assert_eq!(addrs(&back), (a(SERVER), 80, a(CLIENT), 40000));
    assert!(valid(&back));
    let mut r = dns_reply();
    assert_eq!(new.process(&mut r, 1), Verdict::Forward(0));
    assert_eq!(addrs(&r), (a(SERVER), 53, a(CLIENT), 5353));
    // A new flow from another client to the same server port gets
    // another mapping than the installed one.
    let mut other = pkt(R0, "10.0.0.9", 40000, SERVER, 80, 6, 0x02, &[]);
    assert_eq!(new.process(&mut other, 0), Verdict::Forward(1));
    assert_ne!(addrs(&other).1, mapped);

    // Without the flows: the inside's packets are dropped; the replies
    // are for the router's address, where nothing listens: a reset, a
    // port unreachable (as Linux answers them once its conntrack forgot).
    let mut bare = new_gateway();
    let mut d = data();
    assert_eq!(bare.process(&mut d, 0), Verdict::Drop(DropReason::Filtered));
    let mut back = answer(&syn);
    assert_eq!(bare.process(&mut back, 1), Verdict::Forward(1));
    assert_eq!(back[47] & 0x04, 0x04, "a reset");
    let mut r = dns_reply();
    assert_eq!(bare.process(&mut r, 1), Verdict::Forward(1));
    assert_eq!((r[23], r[34], r[35]), (1, 3, 3), "port unreachable");
}

/// Sets the TCP sequence and acknowledgment numbers of frame `f` (a
/// plain IPv4 header) and its checksum.
fn set_seq(f: &mut [u8], seq: u32, ack: u32) {
    f[38..42].copy_from_slice(&seq.to_be_bytes());
    f[42..46].copy_from_slice(&ack.to_be_bytes());
    fill_l4(f);
}

/// Window tracking through the NAT: a RST sent from outside to the
/// mapping with a guessed sequence number does not close the flow (beyond
/// the window it is invalid, and dropped by the rule for invalid packets;
/// below it, passed to the client, whose TCP drops it), and a segment
/// acknowledging data the client never sent is invalid; the flow goes on,
/// and the server's real RST closes it. With tracking off, the guessed
/// RST closes it.
#[test]
fn tcp_windows_refuse_blind_resets_through_the_nat() {
    for tracked in [true, false] {
        let rules = vec![
            fw(Rule::any(), &[], state::INVALID, Action::Drop),
            fw(Rule::any(), &[0], state::NEW, Action::Accept),
        ];
        let mut g = gateway_with(rules, Action::Drop, nat_cfg(PortRange::default()), 64);
        g.ct.set_tcp_window(tracked);
        let mut syn = pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x02, &[]);
        assert_eq!(g.process(&mut syn, 0), Verdict::Forward(1));
        let mut synack = reply_to(&syn, R1, 0x12);
        assert_eq!(g.process(&mut synack, 1), Verdict::Forward(0));
        let mut ack = pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x10, &[]);
        set_seq(&mut ack, 1001, 1001);
        assert_eq!(g.process(&mut ack, 0), Verdict::Forward(1));
        let t = tuple4(a(CLIENT), a(SERVER), 40000, 80, 6);
        let state = |g: &mut Gateway| {
            let i = g.ct.find(&t).unwrap().0;
            g.ct.flow(i).state
        };
        assert_eq!(state(&mut g), crate::conntrack::State::Established);
        // The attacker's RSTs, to the mapping's public address and port.
        let mut far = reply_to(&ack, R1, 0x04);
        set_seq(&mut far, 1001 + (1 << 30), 0);
        let mut below = reply_to(&ack, R1, 0x04);
        set_seq(&mut below, 1001u32.wrapping_sub(1 << 30), 0);
        let mut bogus_ack = reply_to(&ack, R1, 0x10);
        set_seq(&mut bogus_ack, 1001, 1001 + 5_000_000);
        if tracked {
            assert_eq!(g.process(&mut far, 1), Verdict::Drop(DropReason::Filtered));
            assert_eq!(g.process(&mut below, 1), Verdict::Forward(0));
            assert_eq!(
                g.process(&mut bogus_ack, 1),
                Verdict::Drop(DropReason::Filtered)
            );
            assert_eq!(state(&mut g), crate::conntrack::State::Established);
            // The flow goes on: the server's data.
            let mut data = reply_to(&ack, R1, 0x18);
            set_seq(&mut data, 1001, 1001);
            assert_eq!(g.process(&mut data, 1), Verdict::Forward(0));
            // And the server's own RST, where it is, closes it.
            let mut rst = reply_to(&ack, R1, 0x14);
            set_seq(&mut rst, 1001, 1001);
            assert_eq!(g.process(&mut rst, 1), Verdict::Forward(0));
            assert_eq!(state(&mut g), crate::conntrack::State::Closed);
            g.tick(2 * S);
            assert_eq!(event(&g, "ct_out_of_window"), 2);
            assert_eq!(event(&g, "ct_window_ignored"), 1);
            assert_eq!(event(&g, "ct_invalid"), 2);
        } else {
            assert_eq!(g.process(&mut far, 1), Verdict::Forward(0));
            assert_eq!(state(&mut g), crate::conntrack::State::Closed);
        }
    }
}

/// A new connection on a stale flow's tuple (its end went another way: an
/// ECMP peer, a lost FIN), as Linux's conntrack takes it: the client's
/// SYN passes with the flow's mapping, the state unchanged; the server's
/// SYN+ACK that acknowledges it makes the flow take the new connection up
/// (its windows picked up afresh), and the handshake and data go
/// through; a SYN+ACK that does not acknowledge it is still invalid. With
/// window tracking off the SYN passes and the flow goes on.
#[test]
fn a_new_connection_on_a_stale_flows_tuple_is_taken_up() {
    use crate::conntrack::State;
    for tracked in [true, false] {
        let rules = vec![
            fw(Rule::any(), &[], state::INVALID, Action::Drop),
            fw(Rule::any(), &[0], state::NEW, Action::Accept),
        ];
        let mut g = gateway_with(rules, Action::Drop, nat_cfg(PortRange::default()), 64);
        g.ct.set_tcp_window(tracked);
        let mut syn = pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x02, &[]);
        assert_eq!(g.process(&mut syn, 0), Verdict::Forward(1));
        let mapped = addrs(&syn).1;
        let mut synack = reply_to(&syn, R1, 0x12);
        assert_eq!(g.process(&mut synack, 1), Verdict::Forward(0));
        let mut ack = pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x10, &[]);
        set_seq(&mut ack, 1001, 1001);
        assert_eq!(g.process(&mut ack, 0), Verdict::Forward(1));
        let t = tuple4(a(CLIENT), a(SERVER), 40000, 80, 6);
        let state = |g: &mut Gateway| {
            let i = g.ct.find(&t).unwrap().0;
            g.ct.flow(i).state
        };
        // The client's new connection, far from the old sequence.
        let mut syn2 = pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x02, &[]);
        set_seq(&mut syn2, 5_000_000, 0);
        assert_eq!(g.process(&mut syn2, 0), Verdict::Forward(1), "{tracked}");
        assert_eq!(addrs(&syn2).1, mapped, "the flow's mapping");
        assert!(valid(&syn2));
        assert_eq!(state(&mut g), State::Established, "unchanged by the SYN");
        if tracked {
            let mut wrong = reply_to(&syn2, R1, 0x12);
            set_seq(&mut wrong, 77, 12345);
            assert_eq!(
                g.process(&mut wrong, 1),
                Verdict::Drop(DropReason::Filtered)
            );
        }
        let mut sa2 = reply_to(&syn2, R1, 0x12);
        set_seq(&mut sa2, 9_000_000, 5_000_001);
        assert_eq!(g.process(&mut sa2, 1), Verdict::Forward(0), "{tracked}");
        assert_eq!(addrs(&sa2), (a(SERVER), 80, a(CLIENT), 40000));
        if tracked {
            assert_eq!(state(&mut g), State::SynRecv, "taken up");
        }
        let mut ack2 = pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x10, &[]);
        set_seq(&mut ack2, 5_000_001, 9_000_001);
        assert_eq!(g.process(&mut ack2, 0), Verdict::Forward(1));
        assert_eq!(state(&mut g), State::Established);
        let mut data = reply_to(&ack2, R1, 0x18);
        set_seq(&mut data, 9_000_001, 5_000_001);
        assert_eq!(g.process(&mut data, 1), Verdict::Forward(0));
    }
}

/// A flow's first packet goes the established path's way, through the
/// flow's route cache, which it fills; what the cache does not take (a
/// neighbour to resolve, a packet over the MTU) goes the router's full way.
#[test]
fn first_packet_fills_the_flow_route_cache() {
    let mut g = gateway();
    let mut syn = pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x02, &[]);
    assert_eq!(g.process(&mut syn, 0), Verdict::Forward(1));
    assert_eq!(syn[22], 63, "TTL decremented");
    assert!(valid(&syn));
    assert_eq!((&syn[0..6], &syn[6..12]), (&GW.0[..], &R1.0[..]));
    let t = tuple4(a(CLIENT), a(SERVER), 40000, 80, 6);
    let (i, _) = g.ct.find(&t).unwrap();
    let hop = *g.ct.hop_mut(i, false);
    assert_ne!(hop.generation, 0, "filled");
    assert_eq!((hop.port, hop.mac), (1, GW.0));
    assert_eq!(g.ct.hop_mut(i, true).generation, 0, "the reply's own");

    // A connected destination not resolved yet: an ARP request goes out
    // in its place (the packet is held), and the cache stays empty.
    let mut udp = pkt(R0, CLIENT, 5000, "198.19.0.77", 53, 17, 0, b"q");
    assert_eq!(g.process(&mut udp, 0), Verdict::Forward(1));
    assert_eq!(&udp[12..14], &[0x08, 0x06], "an ARP request");
    let t = tuple4(a(CLIENT), a("198.19.0.77"), 5000, 53, 17);
    let (i, _) = g.ct.find(&t).unwrap();
    assert_eq!(g.ct.hop_mut(i, false).generation, 0);

    // Over the route's MTU with DF: left untranslated, and Fragmentation
    // Needed goes back to its sender.
    let mut big = pkt(R0, CLIENT, 5001, SERVER, 53, 17, 0, &[7u8; 1500]);
    assert_eq!(g.process(&mut big, 0), Verdict::Forward(0));
    let ip = Ipv4Packet::new_checked(&big[14..]).unwrap();
    assert_eq!(ip.dst(), a(CLIENT).to_be_bytes());
    assert_eq!((big[34], big[35]), (3, 4), "fragmentation needed");
    assert_eq!(u16::from_be_bytes([big[40], big[41]]), 1500, "the MTU");
}

/// Over a multipath route every packet of a flow takes one path, its
/// first packet's (the path the hash of the packets as sent picks), and
/// the flows spread over both.
#[test]
fn multipath_flows_keep_their_first_packets_path() {
    const GW2: MacAddr = MacAddr([2, 0xbb, 0, 0, 0, 2]);
    let via = |a: &str| NextHop {
        port: 1,
        via: Some(a.parse().unwrap()),
    };
    let router = router_with(
        vec![via(GW_ADDR), via("198.19.0.3")],
        vec![(1, "198.19.0.3".parse().unwrap(), GW2)],
    );
    let cfg = config_with(vec![], Action::Accept, nat_cfg(PortRange::default()), 1024);
    let mut g = Gateway::new(router, &cfg, 0);
    g.tick(S);
    let mut seen = [0; 2];
    for sport in 2000..2064 {
        let mut first = pkt(R0, CLIENT, sport, SERVER, 53, 17, 0, b"q");
        assert_eq!(g.process(&mut first, 0), Verdict::Forward(1));
        let mac = MacAddr(first[0..6].try_into().unwrap());
        assert!(mac == GW || mac == GW2, "{mac:?}");
        seen[usize::from(mac == GW2)] += 1;
        for _ in 0..3 {
            let mut next = pkt(R0, CLIENT, sport, SERVER, 53, 17, 0, b"q");
            assert_eq!(g.process(&mut next, 0), Verdict::Forward(1));
            assert_eq!(&next[0..6], &mac.0, "flow {sport} changed path");
        }
        // The cache refilled in a later generation picks the same path.
        g.tick(S + u64::from(sport - 1999) * S);
        let mut later = pkt(R0, CLIENT, sport, SERVER, 53, 17, 0, b"q");
        assert_eq!(g.process(&mut later, 0), Verdict::Forward(1));
        assert_eq!(&later[0..6], &mac.0, "flow {sport} after a refill");
    }
    assert!(seen[0] > 8 && seen[1] > 8, "both paths used: {seen:?}");
}

#[test]
fn icmp_echo_identifier_is_translated() {
    let mut g = gateway();
    let mut req = pkt(R0, CLIENT, 0x4242, SERVER, 0x4242, 1, 0, b"ping");
    assert_eq!(g.process(&mut req, 0), Verdict::Forward(1));
    let (s, id, _, _) = addrs(&req);
    assert_eq!(s, a(OUTSIDE));
    assert!(valid(&req));
    let mut rep = reply_to(&req, R1, 0);
    assert_eq!(g.process(&mut rep, 1), Verdict::Forward(0));
    assert_eq!(addrs(&rep), (a(SERVER), 0x4242, a(CLIENT), 0x4242));
    assert_eq!(rep[34], 0, "echo reply");
    assert!(valid(&rep));
    let _ = id;
}

#[test]
fn dnat_port_forward_and_hairpin() {
    let mut g = gateway();
    // From outside to the forwarded port.
    let mut syn = pkt(R1, SERVER, 5555, OUTSIDE, 8080, 6, 0x02, &[]);
    assert_eq!(g.process(&mut syn, 1), Verdict::Forward(0));
    assert_eq!(addrs(&syn), (a(SERVER), 5555, a(CLIENT), 80));
    assert!(valid(&syn));
    let mut synack = reply_to(&syn, R0, 0x12);
    assert_eq!(g.process(&mut synack, 0), Verdict::Forward(1));
    assert_eq!(addrs(&synack), (a(OUTSIDE), 8080, a(SERVER), 5555));
    assert!(valid(&synack));
    // Hairpin: an inside host uses the outside address.
    let mut syn = pkt(R0, CLIENT2, 6666, OUTSIDE, 8080, 6, 0x02, &[]);
    assert_eq!(g.process(&mut syn, 0), Verdict::Forward(0));
    let (s, sp, d, dp) = addrs(&syn);
    assert_eq!((s, d, dp), (a(INSIDE), a(CLIENT), 80), "masqueraded inside");
    assert!(valid(&syn));
    let mut synack = reply_to(&syn, R0, 0x12);
    assert_eq!(g.process(&mut synack, 0), Verdict::Forward(0));
    assert_eq!(addrs(&synack), (a(OUTSIDE), 8080, a(CLIENT2), 6666));
    assert_eq!(&synack[0..6], &HOST2.0);
    assert!(valid(&synack));
    let _ = sp;
}

/// A port forward's packet arriving with TTL 1 (traceroute through it) is
/// translated and forwarded as the kernel does it, so its TTL runs out:
/// Time Exceeded back to its sender, quoting the packet as sent (found
/// in the held-out lab: it was taken by the router as its own and
/// dropped, `to_router`). So is a tracked flow's, either way; a packet to
/// the router's address that no rule forwards is still the router's.
#[test]
fn a_port_forwards_packet_at_ttl_1_gets_time_exceeded() {
    let mut g = gateway();
    let ttl1 = |mut f: Vec<u8>| {
        let mut ip = Ipv4Packet::new_unchecked(&mut f[14..34]);
        ip.set_ttl(1);
        ip.fill_checksum();
        f
    };
    let sent = ttl1(pkt(R1, SERVER, 5555, OUTSIDE, 8080, 6, 0x02, &[]));
    let mut f = sent.clone();
    assert_eq!(g.process(&mut f, 1), Verdict::Forward(1));
    assert_eq!((f[23], f[34], f[35]), (1, 11, 0), "ICMP Time Exceeded");
    let (s, _, d, _) = addrs(&f);
    assert_eq!((s, d), (a(OUTSIDE), a(SERVER)));
    assert!(valid(&f));
    assert_eq!(
        &f[34 + 8..34 + 8 + 20 + 8][12..20],
        &sent[14 + 12..14 + 20],
        "quoted as sent"
    );
    assert_eq!(g.ct.len(), 0, "no flow opened");
    // A tracked flow's reply with TTL 1 (an inside client's, masqueraded).
    let mut syn = pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x02, &[]);
    assert_eq!(g.process(&mut syn, 0), Verdict::Forward(1));
    let mut synack = ttl1(reply_to(&syn, R1, 0x12));
    assert_eq!(g.process(&mut synack, 1), Verdict::Forward(1));
    assert_eq!((synack[23], synack[34]), (1, 11));
    // Not forwarded by any rule: the router's own, its TTL no matter (no
    // TAP here, nothing listens: a reset from the address it was sent to).
    let mut own = ttl1(pkt(R1, SERVER, 5555, OUTSIDE, 22, 6, 0x02, &[]));
    assert_eq!(g.process(&mut own, 1), Verdict::Forward(1));
    assert_eq!(own[47], 0x14, "RST+ACK");
    let (s, sp, d, dp) = addrs(&own);
    assert_eq!((s, sp, d, dp), (a(OUTSIDE), 22, a(SERVER), 5555));
    assert!(valid(&own));
}

/// Hairpinning written out, as nftables has it (`oifname "lan" ct status
/// dnat masquerade`) with the built-in switched off (`[nat] hairpin =
/// false`): without the rule an inside host's flow to the port forward
/// reaches the inside server untranslated (whose answer would go straight
/// back, past the router: the classic broken hairpin); with it, it is
/// masqueraded as the built-in does it, and a flow that was not
/// port-forwarded does not meet the `dnat` rule. A `!dnat` rule takes
/// only flows that were not.
#[test]
fn hairpinning_can_be_written_as_a_ct_status_rule() {
    let inside_masq = |dnatted| Snat {
        out_port: 0,
        src: (a("198.18.0.0"), 24),
        to: SnatTo::Masquerade,
        dnatted,
    };
    let with = |extra: Vec<Snat>| {
        let mut nat = nat_cfg(PortRange::default());
        nat.no_hairpin = true;
        nat.snat.extend(extra);
        gateway_with(vec![], Action::Accept, nat, 64)
    };
    // No hairpinning at all.
    let mut g = with(vec![]);
    let mut syn = pkt(R0, CLIENT2, 6666, OUTSIDE, 8080, 6, 0x02, &[]);
    assert_eq!(g.process(&mut syn, 0), Verdict::Forward(0));
    assert_eq!(
        addrs(&syn),
        (a(CLIENT2), 6666, a(CLIENT), 80),
        "untranslated source"
    );
    // Written out: as the built-in.
    let mut g = with(vec![inside_masq(Some(true))]);
    let mut syn = pkt(R0, CLIENT2, 6666, OUTSIDE, 8080, 6, 0x02, &[]);
    assert_eq!(g.process(&mut syn, 0), Verdict::Forward(0));
    let (s, _, d, dp) = addrs(&syn);
    assert_eq!((s, d, dp), (a(INSIDE), a(CLIENT), 80), "masqueraded inside");
    assert!(valid(&syn));
    let mut synack = reply_to(&syn, R0, 0x12);
    assert_eq!(g.process(&mut synack, 0), Verdict::Forward(0));
    assert_eq!(addrs(&synack), (a(OUTSIDE), 8080, a(CLIENT2), 6666));
    // A flow between two inside hosts that no rule forwarded: not the
    // rule's.
    let mut direct = pkt(R0, CLIENT2, 7777, CLIENT, 80, 6, 0x02, &[]);
    assert_eq!(g.process(&mut direct, 0), Verdict::Forward(0));
    assert_eq!(
        addrs(&direct).0,
        a(CLIENT2),
        "not port-forwarded: untranslated"
    );
    // `!dnat`: only that one.
    let mut g = with(vec![inside_masq(Some(false))]);
    let mut syn = pkt(R0, CLIENT2, 6666, OUTSIDE, 8080, 6, 0x02, &[]);
    assert_eq!(g.process(&mut syn, 0), Verdict::Forward(0));
    assert_eq!(
        addrs(&syn).0,
        a(CLIENT2),
        "port-forwarded: not the !dnat rule's"
    );
    let mut direct = pkt(R0, CLIENT2, 7777, CLIENT, 80, 6, 0x02, &[]);
    assert_eq!(g.process(&mut direct, 0), Verdict::Forward(0));
    assert_eq!(
        addrs(&direct).0,
        a(INSIDE),
        "not port-forwarded: masqueraded"
    );
}

/// An ICMP error from `from` about packet `about`, to `about`'s source.
fn icmp_error(mac: MacAddr, from: &str, ty: u8, code: u8, about: &[u8]) -> Vec<u8> {
    let quote = &about[14..14 + 28];
    let mut f = pkt(mac, from, 0, "0.0.0.0", 0, 1, 0, quote);
    let dst = &about[26..30];
    f[30..34].copy_from_slice(dst);
    f[34] = ty;
    f[35] = code;
    f[38..42].copy_from_slice(&[0; 4]);
    let mut ip = Ipv4Packet::new_unchecked(&mut f[14..34]);
    ip.fill_checksum();
    fill_l4(&mut f);
    f
}

#[test]
fn icmp_errors_are_related_and_their_quotes_translated() {
    let mut g = gateway();
    let orig = pkt(R0, CLIENT, 33434, SERVER, 33435, 17, 0, b"trace");
    let mut out = orig.clone();
    assert_eq!(g.process(&mut out, 0), Verdict::Forward(1));
    // The server answers port unreachable, quoting what it got.
    for (from, ty, code) in [(SERVER, 3, 3), (GW_ADDR, 11, 0)] {
        let mut err = icmp_error(R1, from, ty, code, &out);
        assert_eq!(g.process(&mut err, 1), Verdict::Forward(0), "{from}");
        let ip = Ipv4Packet::new_checked(&err[14..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.src(), a(from).to_be_bytes(), "outer source kept");
        assert_eq!(ip.dst(), a(CLIENT).to_be_bytes(), "to the real client");
        let icmp = ip.payload();
        assert_eq!(checksum::checksum(icmp), 0, "ICMP checksum");
        let quote = &icmp[8..];
        let mut want = orig[14..14 + 28].to_vec();
        want[8] -= 1; // the router decremented the TTL before the error
        let mut w = Ipv4Packet::new_unchecked(&mut want[..20]);
        w.fill_checksum();
        assert_eq!(quote[12..28], want[12..28], "quoted addresses and ports");
        assert!(Ipv4Packet::new_unchecked(&quote[..20]).verify_checksum());
        assert_eq!(
            u16::from_be_bytes([quote[26], quote[27]]),
            u16::from_be_bytes([want[26], want[27]]),
            "quoted UDP checksum restored"
        );
    }
    g.tick(2 * S);
    assert_eq!(event(&g, "ct_related"), 2);
}

/// A router on the way quotes 8 bytes of a TCP header (RFC 792's least,
/// what many still send): its error is related by the ports there and
/// reaches the client with the quote translated back.
#[test]
fn an_eight_byte_tcp_quote_is_related() {
    let mut g = gateway();
    let orig = pkt(R0, CLIENT, 40000, SERVER, 443, 6, 0x02, b"");
    let mut out = orig.clone();
    assert_eq!(g.process(&mut out, 0), Verdict::Forward(1));
    let mut err = icmp_error(R1, GW_ADDR, 3, 4, &out);
    assert_eq!(g.process(&mut err, 1), Verdict::Forward(0));
    let ip = Ipv4Packet::new_checked(&err[14..]).unwrap();
    assert_eq!(ip.dst(), a(CLIENT).to_be_bytes(), "to the real client");
    let quote = &ip.payload()[8..];
    assert_eq!(quote[12..24], orig[26..38], "quoted addresses and ports");
    g.tick(2 * S);
    assert_eq!(event(&g, "ct_related"), 1);
}

#[test]
fn exhaustion_refuses_new_flows_and_keeps_old_ones() {
    let mut g = gateway_with(
        vec![],
        Action::Accept,
        nat_cfg(PortRange { lo: 2000, hi: 2003 }),
        1024,
    );
    let mut outs = Vec::new();
    for p in 0..4 {
        let mut f = pkt(R0, CLIENT, 1000 + p, SERVER, 53, 17, 0, b"q");
        assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
        outs.push(f);
    }
    let mut f = pkt(R0, CLIENT, 1004, SERVER, 53, 17, 0, b"q");
    assert_eq!(
        g.process(&mut f, 0),
        Verdict::Drop(DropReason::NatExhausted)
    );
    // Another destination still has all four ports.
    let mut f = pkt(R0, CLIENT, 1004, SERVER, 54, 17, 0, b"q");
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
    // The existing mappings still work both ways.
    for (p, o) in outs.iter().enumerate() {
        let mut again = pkt(R0, CLIENT, 1000 + p as u16, SERVER, 53, 17, 0, b"q");
        assert_eq!(g.process(&mut again, 0), Verdict::Forward(1));
        assert_eq!(addrs(&again), addrs(o));
        let mut r = reply_to(o, R1, 0);
        assert_eq!(g.process(&mut r, 1), Verdict::Forward(0));
        assert_eq!(addrs(&r).3, 1000 + p as u16);
    }
    g.tick(2 * S);
    assert_eq!(event(&g, "nat_exhausted"), 1);
}

/// Source-NAT ports are handed out in turn and wrap at the range's end
/// back to its first port (each flow here has its own server port, so a
/// port is free again for the next round).
/// A worker's port choice starts where it is told (the worker is told a
/// random place at each start) and goes round its slice from there.
#[test]
fn nat_ports_start_where_told() {
    let mut g = gateway();
    g.start_ports_at(64_512 + 1000);
    let mut syn = pkt(R0, CLIENT, 40000, SERVER, 80, 6, 0x02, &[]);
    assert_eq!(g.process(&mut syn, 0), Verdict::Forward(1));
    assert_eq!(addrs(&syn).1, 1024 + 1000, "the slice is 1024-65535");
    let mut syn = pkt(R0, CLIENT, 40001, SERVER, 80, 6, 0x02, &[]);
    assert_eq!(g.process(&mut syn, 0), Verdict::Forward(1));
    assert_eq!(addrs(&syn).1, 1024 + 1001);
}

#[test]
fn nat_ports_go_round_the_range() {
    let mut g = gateway_with(
        vec![],
        Action::Accept,
        nat_cfg(PortRange { lo: 2000, hi: 2002 }),
        1024,
    );
    let mut got = Vec::new();
    for i in 0..7 {
        let mut f = pkt(R0, CLIENT, 1000 + i, SERVER, 53 + i, 17, 0, b"q");
        assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
        got.push(addrs(&f).1);
    }
    assert_eq!(got, [2000, 2001, 2002, 2000, 2001, 2002, 2000]);
}

#[test]
fn mappings_time_out_with_their_flows() {
    let mut g = gateway();
    let mut f = pkt(R0, CLIENT, 1000, SERVER, 53, 17, 0, b"q");
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
    // Within the unreplied timeout (30 s) the reply is translated.
    g.tick(20 * S);
    let mut r = reply_to(&f, R1, 0);
    assert_eq!(g.process(&mut r, 1), Verdict::Forward(0));
    // Replied: 180 s. After that the mapping is gone: the late reply is
    // for the router itself, which has no socket there: port unreachable.
    g.tick(20 * S + 181 * S);
    let mut late = reply_to(&f, R1, 0);
    assert_eq!(g.process(&mut late, 1), Verdict::Forward(1));
    assert_eq!((late[23], late[34], late[35]), (1, 3, 3));
    assert!(g.ct.is_empty());
    g.tick(202 * S);
    assert_eq!(event(&g, "ct_expired"), 1);
}

#[test]
fn full_table_refuses_new_flows() {
    let mut g = gateway_with(vec![], Action::Accept, nat_cfg(PortRange::default()), 2);
    for p in 0..2 {
        let mut f = pkt(R0, CLIENT, 1000 + p, SERVER, 80, 6, 0x02, &[]);
        assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
        let mut sa = reply_to(&f, R1, 0x12);
        assert_eq!(g.process(&mut sa, 1), Verdict::Forward(0));
    }
    let mut f = pkt(R0, CLIENT, 1002, SERVER, 80, 6, 0x02, &[]);
    assert_eq!(g.process(&mut f, 0), Verdict::Drop(DropReason::CtFull));
}

#[test]
fn firewall_drop_reject_and_established_bypass() {
    let ssh = Rule {
        dport: (22, 22),
        proto: (6, 0xff),
        ..Rule::any()
    };
    let dns = Rule {
        dport: (53, 53),
        proto: (17, 0xff),
        ..Rule::any()
    };
    let rules = vec![
        fw(ssh, &[], 0, Action::Reject(RejectWith::Auto)),
        fw(dns, &[], 0, Action::Reject(RejectWith::AdminProhibited)),
        fw(Rule::any(), &[], state::INVALID, Action::Drop),
        fw(Rule::any(), &[0], state::NEW, Action::Accept),
        fw(Rule::any(), &[], state::RELATED, Action::Accept),
    ];
    let mut g = gateway_with(rules, Action::Drop, nat_cfg(PortRange::default()), 64);
    // TCP to 22: a RST back to the client.
    let mut f = pkt(R0, CLIENT, 40000, SERVER, 22, 6, 0x02, &[]);
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(0));
    assert_eq!(f.len(), 54);
    assert_eq!(addrs(&f), (a(SERVER), 22, a(CLIENT), 40000));
    assert_eq!(f[47], 0x14, "RST+ACK");
    assert_eq!(&f[42..46], &1001u32.to_be_bytes(), "acks the SYN");
    assert!(valid(&f));
    assert_eq!(&f[0..6], &HOST.0);
    // UDP to 53: ICMP admin prohibited from the router.
    let mut f = pkt(R0, CLIENT, 1000, SERVER, 53, 17, 0, b"q");
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(0));
    assert_eq!((f[23], f[34], f[35]), (1, 3, 13));
    // New from outside: default drop.
    let mut f = pkt(R1, SERVER, 1000, CLIENT, 80, 6, 0x02, &[]);
    assert_eq!(g.process(&mut f, 1), Verdict::Drop(DropReason::Filtered));
    // A flow opened from inside: its replies from outside pass (no rule
    // lookup for established flows).
    let mut f = pkt(R0, CLIENT, 1000, SERVER, 443, 6, 0x02, &[]);
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
    let mut sa = reply_to(&f, R1, 0x12);
    assert_eq!(g.process(&mut sa, 1), Verdict::Forward(0));
    // A stray ACK: invalid, dropped by rule 2.
    let mut f = pkt(R0, CLIENT, 1001, SERVER, 443, 6, 0x10, &[]);
    assert_eq!(g.process(&mut f, 0), Verdict::Drop(DropReason::Filtered));
    assert_eq!(g.hits()[..4], [1, 1, 1, 1]);
    g.tick(2 * S);
    assert_eq!(event(&g, "fw_reject"), 2);
}

#[test]
fn static_nat_keeps_ports() {
    let nat = NatConfig {
        statics: vec![StaticNat {
            inside: a(CLIENT2),
            outside: a("198.19.0.20"),
        }],
        ..nat_cfg(PortRange::default())
    };
    let mut g = gateway_with(vec![], Action::Accept, nat, 64);
    let mut f = pkt(R0, CLIENT2, 5000, SERVER, 80, 6, 0x02, &[]);
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
    assert_eq!(addrs(&f), (a("198.19.0.20"), 5000, a(SERVER), 80));
    let mut f = pkt(R1, SERVER, 7, "198.19.0.20", 22, 6, 0x02, &[]);
    assert_eq!(g.process(&mut f, 1), Verdict::Forward(0));
    assert_eq!(addrs(&f), (a(SERVER), 7, a(CLIENT2), 22));
    assert!(valid(&f));
    // New flows per NAT entry (port forward, 1:1, masquerade): the 1:1
    // mapping translated one flow each way; a flow from another inside
    // host is masqueraded; one to the port forward is forwarded; a
    // packet of a flow already open counts nothing.
    assert_eq!(g.nat_hits(), [0, 2, 0]);
    let mut f = pkt(R0, CLIENT, 5001, SERVER, 80, 6, 0x02, &[]);
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
    let mut f = pkt(R1, SERVER, 9, OUTSIDE, 8080, 6, 0x02, &[]);
    assert_eq!(g.process(&mut f, 1), Verdict::Forward(0));
    let mut f = pkt(R1, SERVER, 9, OUTSIDE, 8080, 6, 0x10, &[]);
    g.process(&mut f, 1);
    assert_eq!(g.nat_hits(), [1, 2, 1]);
    assert!(g.hits().is_empty(), "no firewall rules");
}

#[test]
fn malformed_packets_are_dropped_by_reason() {
    let mut g = gateway();
    let mut f = pkt(R0, CLIENT, 1000, SERVER, 80, 6, 0x02, &[]);
    f.truncate(40);
    f[16..18].copy_from_slice(&26u16.to_be_bytes());
    let mut ip = Ipv4Packet::new_unchecked(&mut f[14..34]);
    ip.fill_checksum();
    assert_eq!(g.process(&mut f, 0), Verdict::Drop(DropReason::Truncated));
    let mut f = pkt(R0, CLIENT, 1000, SERVER, 80, 6, 0x02, &[]);
    f[24] ^= 1;
    assert_eq!(g.process(&mut f, 0), Verdict::Drop(DropReason::BadChecksum));
}

/// Where the NIC verifies IPv4 header checksums, the gateway's fast
/// paths (the packet's own and the burst's lanes) take its verdict for the
/// header's sum: a header it calls good is not summed again, one it calls
/// bad takes the full check and is dropped counted, and without a verdict
/// the header is summed here.
#[test]
fn the_nics_checksum_verdict_is_taken() {
    use crate::fwd::{ForwardMode, NicFrame};
    let mut corrupt = pkt(R0, CLIENT, 5000, SERVER, 53, 17, 0, b"q");
    corrupt[24] ^= 1;
    let mut g = gateway();
    let mut f = NicFrame(corrupt.clone(), Some(true));
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(1), "opened");
    for nic in [Some(false), None] {
        let mut f = NicFrame(corrupt.clone(), nic);
        assert_eq!(g.process(&mut f, 0), Verdict::Drop(DropReason::BadChecksum));
    }
    // The flow's next packets in a burst: the lanes' check.
    for (nic, want) in [
        (Some(true), Verdict::Forward(1)),
        (Some(false), Verdict::Drop(DropReason::BadChecksum)),
        (None, Verdict::Drop(DropReason::BadChecksum)),
    ] {
        let mut pkts = vec![NicFrame(corrupt.clone(), nic); 8];
        let mut v = vec![Verdict::Drop(DropReason::NotIp); 8];
        match g.process_burst(&mut pkts, 0, &mut v) {
            Some(x) => assert_eq!(x, want, "{nic:?}"),
            None => assert!(v.iter().all(|x| *x == want), "{nic:?}: {v:?}"),
        }
    }
    assert_eq!(g.ct.len(), 1, "one flow");
}

/// The pipeline-level NAT rewrite there and back is the identity, and its
/// checksums are right.
fn roundtrip(proto: u8, sport: u16, dport: u16, payload: &[u8], to: (u32, u16)) {
    let orig = pkt(R0, CLIENT, sport, SERVER, dport, proto, 0x18, payload);
    let mut f = orig.clone();
    let id = |p: u16| if proto == 1 { sport } else { p };
    let t = tuple4(to.0, a(SERVER), to.1, id(dport), proto);
    let t = if proto == 1 {
        Tuple { dport: to.1, ..t }
    } else {
        t
    };
    nat::rewrite4(&mut f[14..], &t);
    assert!(valid(&f), "valid after translation");
    let (s, sp, _, _) = addrs(&f);
    assert_eq!((s, sp), to);
    let back = tuple4(a(CLIENT), a(SERVER), sport, id(dport), proto);
    let back = if proto == 1 {
        Tuple {
            dport: sport,
            ..back
        }
    } else {
        back
    };
    nat::rewrite4(&mut f[14..], &back);
    assert_eq!(f, orig, "bit for bit");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// A tracked flow's packets rewritten with the checksum changes the
    /// flow computed when it opened come out byte for byte as when the
    /// changes are summed from the packet, in both directions, with any
    /// addresses, ports and checksums (a UDP checksum of 0 included).
    #[test]
    fn flow_deltas_rewrite_as_the_packet_sums_do(
        udp: bool,
        orig in (any::<u32>(), any::<u32>(), any::<u16>(), any::<u16>()),
        to in (any::<u32>(), any::<u32>(), any::<u16>(), any::<u16>()),
        sums in (any::<u16>(), any::<u16>()),
        no_udp_sum: bool,
        payload in proptest::collection::vec(any::<u8>(), 0..24),
    ) {
        let proto = if udp { 17 } else { 6 };
        let o = tuple4(orig.0, orig.1, orig.2, orig.3, proto);
        let t = tuple4(to.0, to.1, to.2, to.3, proto);
        let reply = t.reverse();
        prop_assume!(o != reply && o != t);
        let mut ct = ConnTrack::new(4, Timeouts::default());
        let i = ct.open(o, reply, 0x02, None).unwrap();
        let f = *ct.flow(i);
        prop_assert!(f.nat());
        let show = |x: u32| Ipv4Addr::from(x).to_string();
        for (dir, from) in [(false, o), (true, reply)] {
            let mut p = pkt(
                R0,
                &show(addr4(from.src)),
                from.sport,
                &show(addr4(from.dst)),
                from.dport,
                proto,
                0x10,
                &payload,
            );
            // Any checksums: the rewrite only adjusts them.
            p[24..26].copy_from_slice(&sums.0.to_be_bytes());
            let at = if udp { 40 } else { 50 };
            let c = if udp && no_udp_sum { 0 } else { sums.1 };
            p[at..at + 2].copy_from_slice(&c.to_be_bytes());
            let out = f.translated(dir);
            let (mut summed, mut flowed) = (p.clone(), p);
            nat::rewrite4(&mut summed[14..], &out);
            nat::rewrite4_flow(&mut flowed[14..], &out, f.nat_deltas(dir));
            prop_assert_eq!(summed, flowed, "reply direction: {}", dir);
        }
    }

    #[test]
    fn nat_rewrite_roundtrip(
        proto in prop_oneof![Just(6u8), Just(17u8), Just(1u8)],
        sport: u16, dport: u16, to_addr: u32, to_port: u16,
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        roundtrip(proto, sport, dport, &payload, (to_addr, to_port));
    }

    /// Through the whole gateway: random flows out (SNAT) and their replies
    /// back; every packet leaving has valid checksums and the reply reaches
    /// the client as the exact reverse of what it sent.
    #[test]
    fn gateway_nat_out_and_back(
        proto in prop_oneof![Just(6u8), Just(17u8), Just(1u8)],
        sport in 1u16.., dport in 1u16.., host in 2u8..250,
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut g = gateway();
        let client = format!("198.18.0.{host}");
        let dport = if proto == 1 { sport } else { dport };
        let flags = 0x02;
        let sent = pkt(R0, &client, sport, SERVER, dport, proto, flags, &payload);
        let mut f = sent.clone();
        f[6..12].copy_from_slice(&HOST.0);
        prop_assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
        prop_assert!(valid(&f));
        prop_assert_eq!(addrs(&f).0, a(OUTSIDE));
        let mut r = reply_to(&f, R1, 0x12);
        let v = g.process(&mut r, 1);
        if host == 10 || host == 20 {
            prop_assert_eq!(v, Verdict::Forward(0));
        } else {
            // No neighbour entry for the client: an ARP request instead.
            prop_assert_eq!(v, Verdict::Forward(0));
            prop_assert_eq!(&r[12..14], &[0x08, 0x06]);
            return Ok(());
        }
        prop_assert!(valid(&r));
        let want = reply_to(&sent, R0, 0x12);
        prop_assert_eq!(&r[26..], &want[26..], "the exact reply to the client");
    }
}

/// Two gateway workers (masquerade, accepting everything), started.
fn two_workers() -> Vec<Gateway> {
    let cfg = GatewayConfig {
        rules: Arc::new(RuleSet::build(vec![], Action::Accept, &[])),
        nat: Arc::new(nat_cfg(PortRange::default())),
        ct_capacity: 64,
        timeouts: Timeouts::default(),
        tcp_window: true,
        workers: 2,
        mss_limits: Default::default(),
        mss_rules: Default::default(),
    };
    let mut w: Vec<Gateway> = (0..2).map(|i| Gateway::new(router(), &cfg, i)).collect();
    for g in &mut w {
        g.tick(S);
    }
    w
}

/// Two workers: a mapping made by worker 0 uses a port of its slice; its
/// reply, received by worker 1, is handed to worker 0, which translates it.
/// Port forwards belong to worker 0.
#[test]
fn return_traffic_is_steered_to_the_owning_worker() {
    let mut w = two_workers();
    let (s0, s1) = (w[0].port_range().unwrap(), w[1].port_range().unwrap());
    assert_eq!((s0.lo, s1.hi), (1024, 65535));
    assert_eq!(s0.hi + 1, s1.lo, "disjoint slices");
    for owner in [0usize, 1] {
        let mut f = pkt(R0, CLIENT, 40000 + owner as u16, SERVER, 53, 17, 0, b"q");
        assert_eq!(w[owner].process(&mut f, 0), Verdict::Forward(1));
        let p = addrs(&f).1;
        let slice = w[owner].port_range().unwrap();
        assert!((slice.lo..=slice.hi).contains(&p));
        let other = 1 - owner;
        let mut r = reply_to(&f, R1, 0);
        assert_eq!(w[other].process(&mut r, 1), Verdict::Handoff(owner as u16));
        assert_eq!(w[owner].process(&mut r, 1), Verdict::Forward(0));
        assert_eq!(addrs(&r).2, a(CLIENT));
        // An ICMP error about the mapping is steered the same way.
        let mut e = icmp_error(R1, SERVER, 3, 3, &f);
        assert_eq!(w[other].process(&mut e, 1), Verdict::Handoff(owner as u16));
    }
    // A port forward opens on worker 0, whoever receives it.
    let mut syn = pkt(R1, SERVER, 5555, OUTSIDE, 8080, 6, 0x02, &[]);
    assert_eq!(w[1].process(&mut syn, 1), Verdict::Handoff(0));
    assert_eq!(w[0].process(&mut syn, 1), Verdict::Forward(0));
    let mut synack = reply_to(&syn, R0, 0x12);
    assert_eq!(w[1].process(&mut synack, 0), Verdict::Handoff(0));
    // Flows without NAT state stay where they are.
    let mut ping = pkt(R1, SERVER, 7, INSIDE, 7, 1, 0, b"x");
    assert_eq!(
        w[1].process(&mut ping, 1),
        Verdict::Forward(1),
        "echo reply"
    );
}

/// An ICMP error too short to quote anything (found by the fuzzer): no
/// flow to relate it to, so it is invalid, and nothing panics.
#[test]
fn icmp_error_without_a_quote_is_invalid() {
    let mut g = gateway_with(
        vec![fw(Rule::any(), &[], state::INVALID, Action::Drop)],
        Action::Accept,
        nat_cfg(PortRange::default()),
        16,
    );
    let mut f = pkt(R1, SERVER, 0, CLIENT, 0, 1, 0, &[]);
    f[34] = 3; // destination unreachable, 8 bytes, no quote
    fill_l4(&mut f);
    assert_eq!(g.process(&mut f, 1), Verdict::Drop(DropReason::Filtered));
    let mut f = pkt(R1, SERVER, 0, CLIENT, 0, 1, 0, &[0x45, 0, 0]);
    f[34] = 11;
    fill_l4(&mut f);
    assert_eq!(g.process(&mut f, 1), Verdict::Drop(DropReason::Filtered));
}

/// The policy "new connections from outside only through the port
/// forward" (nftables: `ct status dnat ct original ip daddr 198.19.0.1 ct
/// original proto-dst 8080 accept`): the forward works, the same inside
/// service reached directly is refused, and a DNAT to it from another
/// original destination is refused too.
#[test]
fn ct_status_and_original_destination_close_direct_access() {
    let http = Rule {
        dport: (80, 80),
        proto: (6, 0xff),
        ..Rule::any()
    };
    let through_forward = FwRule {
        ct: CtMatch {
            status: (status::DNAT, status::DNAT),
            orig_dst: Some(crate::acl::v4_prefix(OUTSIDE.parse().unwrap(), 32)),
            orig_dport: Some((8080, 8080)),
        },
        ..fw(http, &[1], state::NEW, Action::Accept)
    };
    let mut nat = nat_cfg(PortRange::default());
    // A second forward to the same inside service, from another port.
    nat.dnat.push(Dnat {
        in_port: None,
        proto: Some(IpProto::TCP),
        dst: a(OUTSIDE),
        dport: Some(9090),
        to: a(CLIENT),
        to_port: Some(80),
    });
    let rules = vec![
        fw(Rule::any(), &[0], state::NEW, Action::Accept),
        through_forward,
    ];
    let mut g = gateway_with(rules, Action::Drop, nat, 64);
    // Through the forward 198.19.0.1:8080: accepted, to 198.18.0.10:80.
    let mut f = pkt(R1, SERVER, 5000, OUTSIDE, 8080, 6, 0x02, &[]);
    assert_eq!(g.process(&mut f, 1), Verdict::Forward(0));
    assert_eq!(addrs(&f), (a(SERVER), 5000, a(CLIENT), 80));
    // Directly to 198.18.0.10:80 (the hole a plain dport = 80 rule had).
    let mut f = pkt(R1, SERVER, 5001, CLIENT, 80, 6, 0x02, &[]);
    assert_eq!(g.process(&mut f, 1), Verdict::Drop(DropReason::Filtered));
    // Through the other forward, 198.19.0.1:9090: DNAT, but not the one
    // the rule names.
    let mut f = pkt(R1, SERVER, 5002, OUTSIDE, 9090, 6, 0x02, &[]);
    assert_eq!(g.process(&mut f, 1), Verdict::Drop(DropReason::Filtered));
    assert_eq!(g.hits(), &[0, 1]);
}

/// `ct_status = "!dnat"` refuses forwarded flows and `snat` matches the
/// related packets (ICMP errors) of a source-translated flow.
#[test]
fn ct_status_negation_and_snat_on_related() {
    let rules = vec![
        FwRule {
            ct: CtMatch {
                status: (0, status::DNAT),
                ..CtMatch::default()
            },
            ..fw(Rule::any(), &[1], state::NEW, Action::Accept)
        },
        fw(Rule::any(), &[0], state::NEW, Action::Accept),
        FwRule {
            ct: CtMatch {
                status: (status::SNAT, status::SNAT),
                ..CtMatch::default()
            },
            ..fw(Rule::any(), &[], state::RELATED, Action::Accept)
        },
    ];
    let mut g = gateway_with(rules, Action::Drop, nat_cfg(PortRange::default()), 64);
    // The forward is DNAT: not accepted by rule 0, dropped by default.
    let mut f = pkt(R1, SERVER, 5000, OUTSIDE, 8080, 6, 0x02, &[]);
    assert_eq!(g.process(&mut f, 1), Verdict::Drop(DropReason::Filtered));
    // A direct new flow from outside is not DNAT: rule 0.
    let mut f = pkt(R1, SERVER, 5001, CLIENT, 22, 6, 0x02, &[]);
    assert_eq!(g.process(&mut f, 1), Verdict::Forward(0));
    // A masqueraded flow out, then an ICMP error about it: related, snat.
    let mut out = pkt(R0, CLIENT, 1000, SERVER, 53, 17, 0, b"q");
    assert_eq!(g.process(&mut out, 0), Verdict::Forward(1));
    let mut e = icmp_error(R1, SERVER, 3, 3, &out);
    assert_eq!(g.process(&mut e, 1), Verdict::Forward(0));
    assert_eq!(g.hits(), &[1, 1, 1]);
}

/// `icmp_type` rules (nftables `icmp type echo-request accept`): the
/// type and code are the flags word of an ICMP key.
#[test]
fn icmp_type_rules_match_type_and_code() {
    let echo = Rule {
        proto: (1, 0xff),
        flags: (8 << 8, 0xff00),
        ..Rule::any()
    };
    let rules = vec![fw(echo, &[1], state::NEW, Action::Accept)];
    let mut g = gateway_with(rules, Action::Drop, NatConfig::default(), 64);
    // An echo request from outside: accepted.
    let mut f = pkt(R1, SERVER, 7, CLIENT, 7, 1, 0, b"ping");
    assert_eq!(g.process(&mut f, 1), Verdict::Forward(0));
    // A timestamp request (type 13) from outside: refused.
    let mut f = pkt(R1, SERVER, 8, CLIENT, 8, 1, 0, b"time");
    f[34] = 13;
    fill_l4(&mut f);
    assert_eq!(g.process(&mut f, 1), Verdict::Drop(DropReason::Filtered));
    assert_eq!(g.hits(), &[1]);
}

#[test]
fn every_stage_counter_has_its_own_name() {
    let mut names = EVENTS.to_vec();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), EVENTS.len(), "{EVENTS:?}");
    assert_eq!(&EVENTS[..router::Event::COUNT], router::Event::NAMES);
}

/// A packet of a replay ([`replay_in_bursts`]): a frame and the port it
/// comes in on, or `None`: 31 s pass and the gateway ticks.
type Replayed = Option<(Vec<u8>, u16)>;

/// Replays `inputs` through `g`'s burst path, eight at a time (a tick,
/// `None`, only at the start of eight: the eight are gathered first),
/// each run of one port's packets a burst (the worker's prefetch hook
/// before it if `hook`), and checks that every packet gets the verdict
/// and bytes `outputs` says it got alone through `process`.
fn replay_in_bursts(
    g: &mut Gateway,
    inputs: &[Replayed],
    outputs: &[(Verdict, Vec<u8>)],
    hook: bool,
    what: &str,
) {
    let mut now = S;
    for (chunk, want) in inputs.chunks(8).zip(outputs.chunks(8)) {
        // Frame, port, and what it got alone.
        type Todo<'a> = (Vec<u8>, u16, &'a (Verdict, Vec<u8>));
        let mut todo: Vec<Todo> = vec![];
        for (inp, w) in chunk.iter().zip(want) {
            match inp {
                Some((p, port)) => todo.push((p.clone(), *port, w)),
                None => {
                    now += 31 * S;
                    g.tick(now);
                }
            }
        }
        // Runs of packets from one port: a burst each.
        while !todo.is_empty() {
            let port = todo[0].1;
            let k = todo.iter().take_while(|x| x.1 == port).count();
            let run: Vec<_> = todo.drain(..k).collect();
            let mut frames: Vec<Vec<u8>> = run.iter().map(|x| x.0.clone()).collect();
            if hook {
                g.prefetch(&frames, |_| {});
            }
            let mut v = vec![Verdict::Drop(DropReason::Filtered); k];
            if let Some(x) = g.process_burst(&mut frames, port, &mut v) {
                v.fill(x);
            }
            for ((f, got), (_, _, (wv, wf))) in frames.iter().zip(&v).zip(&run) {
                assert_eq!(got, wv, "{what}");
                assert_eq!(f, wf, "{what}");
            }
        }
    }
}

/// The burst path gives every packet the verdict and bytes it gets alone
/// through `process`, with the same counters, with the worker's prefetch
/// hook before it or without: on a mix of new flows, their replies,
/// repeats of a new flow within a burst (the first opens it, the next must
/// find it, though the burst's lookup stage saw no flow), and flows that
/// expire and open again (hints naming removed flows).
#[test]
fn burst_path_changes_nothing() {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    let mut alone = gateway();
    let (mut inputs, mut outputs) = (vec![], vec![]);
    let mut last_out: Vec<Option<Vec<u8>>> = vec![None; 40];
    let mut now = S;
    for i in 0..2000 {
        if i % 200 == 0 && i > 0 {
            // Past the unreplied timeout: the flows expire (at a burst's
            // start, where the burst run ticks).
            now += 31 * S;
            alone.tick(now);
            inputs.push(None);
            outputs.push((Verdict::Drop(DropReason::Filtered), vec![]));
            continue;
        }
        let f = rng.random_range(0..40usize);
        // Flows 0..20 UDP, 20..40 TCP (SYN, then ACKs; the replies
        // SYN+ACK): the states follow the flags the burst path reads.
        let tcp = f >= 20;
        let (mut p, port) = match &last_out[f] {
            Some(out) if rng.random_bool(0.4) => (reply_to(out, R1, if tcp { 0x12 } else { 0 }), 1),
            prev => {
                let (proto, flags) = match (tcp, prev) {
                    (false, _) => (17, 0),
                    (true, None) => (6, 0x02),
                    (true, Some(_)) => (6, 0x10),
                };
                let sport = 1000 + f as u16;
                (pkt(R0, CLIENT, sport, SERVER, 53, proto, flags, b"q"), 0)
            }
        };
        inputs.push(Some((p.clone(), port)));
        let v = alone.process(&mut p, port);
        if port == 0 && v == Verdict::Forward(1) {
            last_out[f] = Some(p.clone());
        }
        outputs.push((v, p));
    }
    for hook in [false, true] {
        let mut g = gateway();
        replay_in_bursts(&mut g, &inputs, &outputs, hook, &format!("hook {hook}"));
        assert_eq!(g.ct.events(), alone.ct.events(), "hook {hook}");
        assert_eq!(g.ct.len(), alone.ct.len());
    }
    assert!(alone.ct.event(crate::conntrack::Event::Expired) > 0);
    assert!(
        outputs
            .iter()
            .filter(|(v, _)| *v == Verdict::Forward(0))
            .count()
            > 200
    );
}

/// The burst path plans a chunk's likely new flows ahead (`Plan4`), each
/// translated one expected to take the next NAT port; flows that take no
/// port (refused by the rules, a repeat of a flow opened earlier in the
/// burst, untranslated, to the router itself, without a route) put the
/// later plans' ports off. Every packet still gets the verdict and bytes
/// (the port it is translated to) it gets alone through `process`.
#[test]
fn planned_ports_that_miss_change_nothing() {
    use rand::{RngExt, SeedableRng};
    let refused = Rule {
        dport: (9, 9),
        proto: (17, 0xff),
        ..Rule::any()
    };
    let rules = vec![fw(refused, &[], 0, Action::Drop)];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
    let frames: Vec<Vec<u8>> = (0..600)
        .map(|_| {
            let sport = 2000 + rng.random_range(0..150u16);
            let dport = *[9u16, 53, 53, 80].get(rng.random_range(0..4)).unwrap();
            match rng.random_range(0..10) {
                // To the router's own address (local), untranslated.
                0 => pkt(R0, CLIENT, sport, OUTSIDE, dport, 17, 0, b"q"),
                // From outside the NAT rule's sources: not translated.
                1 => pkt(R0, "198.20.0.5", sport, SERVER, dport, 17, 0, b"q"),
                // Without a route.
                2 => pkt(R0, CLIENT, sport, "192.0.2.9", dport, 17, 0, b"q"),
                3 => pkt(R0, CLIENT2, sport, SERVER, 80, 6, 0x02, b""),
                _ => pkt(R0, CLIENT, sport, SERVER, dport, 17, 0, b"q"),
            }
        })
        .collect();
    let nat = nat_cfg(PortRange {
        lo: 40000,
        hi: 40099,
    });
    let mut alone = gateway_with(rules.clone(), Action::Accept, nat.clone(), 1024);
    let mut a = frames.clone();
    let want: Vec<Verdict> = a.iter_mut().map(|f| alone.process(f, 0)).collect();
    for burst in [32, 7] {
        let mut g = gateway_with(rules.clone(), Action::Accept, nat.clone(), 1024);
        let mut b = frames.clone();
        let mut got = vec![Verdict::Drop(DropReason::Truncated); b.len()];
        for (bc, gc) in b.chunks_mut(burst).zip(got.chunks_mut(burst)) {
            g.prefetch(bc, |_| {});
            if let Some(v) = g.process_burst(bc, 0, gc) {
                gc.fill(v);
            }
        }
        assert_eq!(got, want, "burst {burst}");
        assert_eq!(b, a, "burst {burst}");
        assert_eq!(g.ct.events(), alone.ct.events(), "burst {burst}");
        assert_eq!(g.nat_events, alone.nat_events, "burst {burst}");
    }
    // The mix took every path: translated, refused, local, untranslated
    // and unrouted flows, and repeats.
    let count = |v: Verdict| want.iter().filter(|&&w| w == v).count();
    assert!(count(Verdict::Forward(1)) > 200, "{want:?}");
    assert!(count(Verdict::Drop(DropReason::Filtered)) > 20, "{want:?}");
    assert!(alone.nat_events[nat::Event::Mapped as usize] > 100);
    assert!(alone.ct.len() < 450, "repeats found their flows");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// The burst path against `process` on frames with any byte changed
    /// (a length, the header length, the protocol, a flag, an address),
    /// with the IPv4 header checksum made right again or not: the same
    /// verdict and bytes for every packet and the same counters, whatever
    /// the burst path's own parse accepts or sends the full way.
    #[test]
    fn burst_path_matches_process_on_changed_frames(
        frames in prop::collection::vec(
            (0u8..3, 0u16..6, any::<u16>(), any::<u8>(), any::<bool>()),
            1..48,
        ),
        burst in 1usize..12,
    ) {
        let input: Vec<Vec<u8>> = frames
            .iter()
            .map(|&(kind, flow, at, x, fix)| {
                let sport = 1000 + flow;
                let mut f = match kind {
                    0 => pkt(R0, CLIENT, sport, SERVER, 53, 17, 0, b"abcd"),
                    1 => pkt(R0, CLIENT, sport, SERVER, 80, 6, if x & 1 == 0 { 0x02 } else { 0x10 }, b""),
                    _ => pkt(R0, CLIENT, sport, SERVER, 0, 1, 0, b"ping"),
                };
                let i = usize::from(at) % f.len();
                f[i] ^= x;
                if fix && f.len() >= 34 {
                    let h = (usize::from(f[14] & 0x0f) * 4).clamp(20, f.len() - 14);
                    f[24..26].copy_from_slice(&[0, 0]);
                    let c = checksum::checksum(&f[14..14 + h]);
                    f[24..26].copy_from_slice(&c.to_be_bytes());
                }
                f
            })
            .collect();
        let (mut each, mut burst_gw) = (gateway(), gateway());
        let mut a = input.clone();
        let want: Vec<Verdict> = a.iter_mut().map(|f| each.process(f, 0)).collect();
        let mut b = input;
        let mut got = vec![Verdict::Drop(DropReason::Truncated); b.len()];
        for (bc, gc) in b.chunks_mut(burst).zip(got.chunks_mut(burst)) {
            burst_gw.prefetch(bc, |_| {});
            if let Some(v) = burst_gw.process_burst(bc, 0, gc) {
                gc.fill(v);
            }
        }
        prop_assert_eq!(got, want);
        prop_assert_eq!(b, a);
        prop_assert_eq!(burst_gw.ct.events(), each.ct.events());
        each.tick(2 * S);
        burst_gw.tick(2 * S);
        prop_assert_eq!(burst_gw.events(), each.events());
    }
}

/// New rules decide the next new flow, even one whose fields fall in the
/// intervals a flow under the old rules was classified in (the worker's
/// memo of classifications, which answered the second flow here, is
/// cleared with the rules).
#[test]
fn new_rules_decide_the_next_flow() {
    let nat = nat_cfg(PortRange::default());
    let mut g = gateway_with(
        vec![fw(Rule::any(), &[], 0, Action::Accept)],
        Action::Drop,
        nat.clone(),
        64,
    );
    for sport in [1000, 1001] {
        let mut f = pkt(R0, CLIENT, sport, SERVER, 53, 17, 0, b"q");
        assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
    }
    g.tick(2 * S);
    assert_eq!(
        (event(&g, "fw_memo_hit"), event(&g, "fw_memo_miss")),
        (1, 1)
    );
    // The same intervals in every field; the first rule now wants packets
    // from port 1.
    let rules = vec![
        fw(Rule::any(), &[1], 0, Action::Accept),
        fw(Rule::any(), &[], 0, Action::Drop),
    ];
    g.reconfigure(&GatewayUpdate {
        router: crate::router::RouterUpdate(g.router.config().clone()),
        rules: Arc::new(RuleSet::build(rules, Action::Accept, &nat.original_dsts())),
        nat: Arc::new(nat),
        hits: None,
    });
    let mut f = pkt(R0, CLIENT, 1002, SERVER, 53, 17, 0, b"q");
    assert_eq!(g.process(&mut f, 0), Verdict::Drop(DropReason::Filtered));
    assert_eq!(g.hits(), [0, 1]);
}

/// VLAN sub-interfaces on a gateway: port 0 carries the inside subnet
/// untagged, a second inside subnet on VLAN 10 (interface 2) and a third on
/// QinQ S-tag 200, C-tag 300 (interface 4); port 1 is a trunk whose VLAN
/// 100 (interface 3) is the outside, where the inside subnets are
/// masqueraded.
mod vlan {
    use super::*;
    use crate::router::Vlan;

    const TAGGED_CLIENT: &str = "198.20.0.10";
    /// On the QinQ sub-interface (S-tag 200, C-tag 300, interface 4).
    const QINQ_CLIENT: &str = "198.21.0.10";

    fn iface(mac: MacAddr, addr: &str, vlan: Option<Vlan>) -> Interface {
        Interface {
            mac,
            ipv4: if addr.is_empty() {
                vec![]
            } else {
                vec![(addr.parse().unwrap(), 24)]
            },
            ipv6: vec![],
            mtu: 1500,
            vlan,
            down: false,
        }
    }

    fn router() -> Router {
        let on = |port, id| {
            Some(Vlan {
                port,
                outer: None,
                id,
            })
        };
        let mut interfaces = vec![
            iface(R0, INSIDE, None),
            iface(R1, "", None),
            iface(R0, "198.20.0.1", on(0, 10)),
            iface(R1, OUTSIDE, on(1, 100)),
            iface(
                R0,
                "198.21.0.1",
                Some(Vlan {
                    port: 0,
                    outer: Some(200),
                    id: 300,
                }),
            ),
        ];
        interfaces[2].ipv6 = vec![("2001:db8:20::1".parse().unwrap(), 64)];
        interfaces[3].ipv6 = vec![("2001:db8:19::1".parse().unwrap(), 64)];
        Router::new(RouterConfig {
            interfaces,
            fib: crate::fib::FibWriter::build(&[
                (
                    "198.18.0.0".parse().unwrap(),
                    24,
                    vec![NextHop { port: 0, via: None }],
                ),
                (
                    "198.20.0.0".parse().unwrap(),
                    24,
                    vec![NextHop { port: 2, via: None }],
                ),
                (
                    "198.19.0.0".parse().unwrap(),
                    24,
                    vec![NextHop { port: 3, via: None }],
                ),
                (
                    "198.21.0.0".parse().unwrap(),
                    24,
                    vec![NextHop { port: 4, via: None }],
                ),
                (
                    "2001:db8:20::".parse().unwrap(),
                    64,
                    vec![NextHop { port: 2, via: None }],
                ),
                (
                    "2001:db8:19::".parse().unwrap(),
                    64,
                    vec![NextHop { port: 3, via: None }],
                ),
                (
                    "203.0.113.0".parse().unwrap(),
                    24,
                    vec![NextHop {
                        port: 3,
                        via: Some(GW_ADDR.parse().unwrap()),
                    }],
                ),
            ])
            .unwrap()
            .fib()
            .clone(),
            neighbors4: vec![
                (3, GW_ADDR.parse().unwrap(), GW),
                (0, CLIENT.parse().unwrap(), HOST),
                (2, TAGGED_CLIENT.parse().unwrap(), HOST2),
                (4, QINQ_CLIENT.parse().unwrap(), HOST),
            ],
            neighbors6: vec![
                (3, "2001:db8:19::7".parse().unwrap(), GW),
                (2, "2001:db8:20::10".parse().unwrap(), HOST2),
            ],
            icmp_rate: 1_000_000,
            neighbor_timeout_ns: 300 * S,
            punt: Default::default(),
            adverts: Vec::new(),
        })
    }

    /// An Ethernet + IPv6/UDP frame to `mac`, its checksum valid.
    fn udp6(mac: MacAddr, src: &str, sport: u16, dst: &str, dport: u16) -> Vec<u8> {
        let (s6, d6): (std::net::Ipv6Addr, std::net::Ipv6Addr) =
            (src.parse().unwrap(), dst.parse().unwrap());
        let l4 = 8 + 2;
        let mut f = vec![0u8; 14 + 40 + l4];
        f[0..6].copy_from_slice(&mac.0);
        f[6..12].copy_from_slice(&HOST2.0);
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[18..20].copy_from_slice(&(l4 as u16).to_be_bytes());
        (f[20], f[21]) = (17, 64);
        f[22..38].copy_from_slice(&s6.octets());
        f[38..54].copy_from_slice(&d6.octets());
        f[54..56].copy_from_slice(&sport.to_be_bytes());
        f[56..58].copy_from_slice(&dport.to_be_bytes());
        f[58..60].copy_from_slice(&(l4 as u16).to_be_bytes());
        f[62..64].copy_from_slice(b"q6");
        let ph = checksum::pseudo_v6(s6.octets(), d6.octets(), 17, l4 as u32);
        let c = !checksum::fold(checksum::sum(&f[54..], ph));
        f[60..62].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
        f
    }

    /// IPv6 through sub-interfaces (tracked and filtered, not translated):
    /// in on VLAN 10, out on VLAN 100 with the hop limit one less, the
    /// reply back on VLAN 10; a rule on the VLAN 10 interface drops its
    /// telnet over IPv6 as over IPv4.
    #[test]
    fn ipv6_goes_through_sub_interfaces_and_their_rules() {
        let telnet = Rule {
            dport: (23, 23),
            ..Rule::any()
        };
        let mut g = gateway(vec![fw(telnet, &[2], state::NEW, Action::Drop)]);
        let (c, sv) = ("2001:db8:20::10", "2001:db8:19::7");
        let mut f = tagged(&udp6(R0, c, 5000, sv, 53), 10);
        assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
        let (id, out) = untagged(&f);
        assert_eq!(id, 100);
        assert_eq!((&out[0..6], &out[6..12]), (&GW.0[..], &R1.0[..]));
        assert_eq!(out[21], 63, "hop limit");
        assert_eq!(
            &out[22..38],
            &c.parse::<std::net::Ipv6Addr>().unwrap().octets()
        );
        let mut r = tagged(&udp6(R1, sv, 53, c, 5000), 100);
        assert_eq!(g.process(&mut r, 1), Verdict::Forward(0));
        let (id, back) = untagged(&r);
        assert_eq!((id, &back[0..6]), (10, &HOST2.0[..]));
        assert_eq!(g.conntrack().len(), 1, "one flow, both ways");
        let mut t = tagged(&udp6(R0, c, 5001, sv, 23), 10);
        assert_eq!(g.process(&mut t, 0), Verdict::Drop(DropReason::Filtered));
    }

    fn config(rules: Vec<FwRule>, workers: u16) -> GatewayConfig {
        let masq = |net: &str| Snat {
            out_port: 3,
            src: (a(net), 24),
            to: SnatTo::Masquerade,
            dnatted: None,
        };
        GatewayConfig {
            rules: Arc::new(RuleSet::build(rules, Action::Accept, &[])),
            nat: Arc::new(NatConfig {
                snat: vec![masq("198.18.0.0"), masq("198.20.0.0"), masq("198.21.0.0")],
                dnat: vec![],
                statics: vec![],
                ports: PortRange::default(),
                no_hairpin: false,
                npt: vec![],
                nat64: vec![],
                masq6: vec![],
            }),
            ct_capacity: 64,
            timeouts: Timeouts::default(),
            tcp_window: true,
            workers,
            mss_limits: Default::default(),
            mss_rules: Default::default(),
        }
    }

    fn gateway(rules: Vec<FwRule>) -> Gateway {
        let mut g = Gateway::new(router(), &config(rules, 1), 0);
        g.tick(S);
        g
    }

    /// `f` with an 802.1Q tag `id` after its MACs.
    fn tagged(f: &[u8], id: u16) -> Vec<u8> {
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00]);
        t.extend_from_slice(&id.to_be_bytes());
        t.extend_from_slice(&f[12..]);
        t
    }

    /// The VLAN id of tagged frame `f` and the frame without its tag.
    fn untagged(f: &[u8]) -> (u16, Vec<u8>) {
        assert_eq!(&f[12..14], &[0x81, 0x00], "tagged");
        let mut u = f[..12].to_vec();
        u.extend_from_slice(&f[16..]);
        (u16::from_be_bytes([f[14], f[15]]) & 0xfff, u)
    }

    /// A flow from a client on VLAN 10 leaves tagged on VLAN 100,
    /// masqueraded to that sub-interface's address; its replies, tagged on
    /// VLAN 100, come back translated and tagged on VLAN 10. The client on
    /// the untagged subnet leaves the same way through the burst path
    /// (which tags what it forwards onto a sub-interface).
    #[test]
    fn flows_through_sub_interfaces_are_translated_and_tagged() {
        let mut g = gateway(vec![]);
        let mut f = tagged(&pkt(R0, TAGGED_CLIENT, 40000, SERVER, 53, 17, 0, b"q"), 10);
        assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
        let (id, out) = untagged(&f);
        assert_eq!(id, 100, "leaves on the outside's VLAN");
        let (s, sp, d, dp) = addrs(&out);
        assert_eq!((s, d, dp), (a(OUTSIDE), a(SERVER), 53), "masqueraded");
        assert!(valid(&out));
        assert_eq!((&out[0..6], &out[6..12]), (&GW.0[..], &R1.0[..]));
        let mut r = tagged(&reply_to(&out, R1, 0), 100);
        assert_eq!(g.process(&mut r, 1), Verdict::Forward(0));
        let (id, back) = untagged(&r);
        assert_eq!(id, 10, "back on the client's VLAN");
        assert_eq!(addrs(&back), (a(SERVER), 53, a(TAGGED_CLIENT), 40000));
        assert!(valid(&back));
        assert_eq!(&back[0..6], &HOST2.0);
        // The untagged client, through the burst path: new flow, then
        // established, both tagged on the way out.
        for _ in 0..2 {
            let mut b = vec![pkt(R0, CLIENT, 40001, SERVER, 53, 17, 0, b"q")];
            let mut v = [Verdict::Drop(DropReason::Truncated)];
            let first = g.process_burst(&mut b, 0, &mut v);
            assert_eq!(v[0], Verdict::Forward(1));
            assert_eq!(first, Some(Verdict::Forward(1)));
            let (id, out) = untagged(&b[0]);
            assert_eq!(id, 100);
            assert_eq!(addrs(&out).0, a(OUTSIDE));
            assert_ne!(addrs(&out).1, sp, "its own mapping");
            assert!(valid(&out));
        }
        assert_eq!(g.conntrack().len(), 2);
    }

    /// A QinQ sub-interface: its frames (an 802.1ad S-tag 200, then an
    /// 802.1Q C-tag 300) go through NAT as received there, and the
    /// replies leave with both tags again.
    #[test]
    fn a_qinq_sub_interface_is_translated_and_tagged_twice() {
        let mut g = gateway(vec![]);
        let qinq = |f: &[u8]| {
            let mut t = f[..12].to_vec();
            t.extend_from_slice(&[0x88, 0xa8, 0, 200, 0x81, 0x00, 0x01, 0x2c]);
            t.extend_from_slice(&f[12..]);
            t
        };
        let mut f = qinq(&pkt(R0, QINQ_CLIENT, 41000, SERVER, 53, 17, 0, b"q"));
        assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
        let (id, out) = untagged(&f);
        assert_eq!(id, 100);
        assert_eq!(addrs(&out).0, a(OUTSIDE), "masqueraded");
        let mut r = tagged(&reply_to(&out, R1, 0), 100);
        assert_eq!(g.process(&mut r, 1), Verdict::Forward(0));
        assert_eq!(&r[12..20], &[0x88, 0xa8, 0, 200, 0x81, 0x00, 0x01, 0x2c]);
        let mut back = r[..12].to_vec();
        back.extend_from_slice(&r[20..]);
        assert_eq!(addrs(&back), (a(SERVER), 53, a(QINQ_CLIENT), 41000));
        assert!(valid(&back));
        // The C-tag alone names no sub-interface of port 0.
        let mut f = tagged(&pkt(R0, QINQ_CLIENT, 41001, SERVER, 53, 17, 0, b"q"), 300);
        assert_eq!(g.process(&mut f, 0), Verdict::Drop(DropReason::UnknownVlan));
    }

    /// Rules name sub-interfaces as they name ports: a rule on the VLAN
    /// 10 interface drops its telnet, not the untagged subnet's; a frame
    /// whose tag names no sub-interface is dropped as `unknown_vlan`.
    #[test]
    fn rules_see_the_sub_interface_a_frame_came_in_on() {
        let telnet = Rule {
            dport: (23, 23),
            ..Rule::any()
        };
        let mut g = gateway(vec![fw(telnet, &[2], state::NEW, Action::Drop)]);
        let mut f = tagged(&pkt(R0, TAGGED_CLIENT, 40000, SERVER, 23, 6, 0x02, &[]), 10);
        assert_eq!(g.process(&mut f, 0), Verdict::Drop(DropReason::Filtered));
        let mut f = pkt(R0, CLIENT, 40000, SERVER, 23, 6, 0x02, &[]);
        assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
        assert_eq!(untagged(&f).0, 100);
        let mut f = tagged(&pkt(R0, TAGGED_CLIENT, 40000, SERVER, 53, 17, 0, b"q"), 99);
        assert_eq!(g.process(&mut f, 0), Verdict::Drop(DropReason::UnknownVlan));
        // Two tags where the sub-interface has one.
        let mut f = tagged(
            &tagged(&pkt(R0, TAGGED_CLIENT, 40000, SERVER, 53, 17, 0, b"q"), 5),
            10,
        );
        assert_eq!(g.process(&mut f, 0), Verdict::Drop(DropReason::UnknownVlan));
        assert_eq!(g.hits()[0], 1, "the rule counted its one drop");
    }

    /// Over the outside sub-interface's MTU without DF, a translated
    /// packet leaves as fragments, every one tagged on VLAN 100 and
    /// carrying the translated source: the first in the packet's buffer,
    /// the others from the stage's own packets (`emit`). Put together,
    /// they are the translated datagram, its UDP checksum valid.
    #[test]
    fn fragments_of_a_translated_packet_leave_tagged() {
        let mut cfg = (**router().config()).clone();
        cfg.interfaces[3].mtu = 576;
        let mut g = Gateway::new(Router::new(cfg), &config(vec![], 1), 0);
        g.tick(S);
        let payload: Vec<u8> = (0..1200u32).map(|i| (i * 7) as u8).collect();
        let mut f = pkt(R0, TAGGED_CLIENT, 40000, SERVER, 53, 17, 0, &payload);
        f[14 + 6] = 0; // DF clear
        Ipv4Packet::new_unchecked(&mut f[14..34]).fill_checksum();
        let mut f = tagged(&f, 10);
        assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
        let mut frames = vec![f];
        ForwardMode::emit(&mut g, &mut |p, b| {
            assert_eq!(p, 1);
            frames.push(b.to_vec());
            true
        });
        // 1,208 bytes of UDP in pieces of 552: three fragments.
        assert_eq!(frames.len(), 3);
        let mut datagram = vec![0u8; 8 + payload.len()];
        for (k, fr) in frames.iter().enumerate() {
            let (id, fr) = untagged(fr);
            assert_eq!(id, 100, "fragment {k}");
            let ip = Ipv4Packet::new_checked(&fr[14..]).unwrap();
            assert!(ip.verify_checksum() && usize::from(ip.total_len()) <= 576);
            assert_eq!(ip.src(), a(OUTSIDE).to_be_bytes(), "translated");
            let off = usize::from(ip.flags_frag() & 0x1fff) * 8;
            let data = &fr[34..14 + usize::from(ip.total_len())];
            datagram[off..off + data.len()].copy_from_slice(data);
        }
        assert_eq!(&datagram[8..], &payload[..]);
        // The UDP checksum, translated in the first fragment, covers the
        // whole datagram with the translated addresses.
        let ph = checksum::pseudo_v4(
            a(OUTSIDE).to_be_bytes(),
            a(SERVER).to_be_bytes(),
            17,
            datagram.len() as u16,
        );
        assert_eq!(checksum::fold(checksum::sum(&datagram, ph)), 0xffff);
        assert_ne!(u16::from_be_bytes([datagram[0], datagram[1]]), 0, "a port");
    }

    /// With two workers, a reply tagged on VLAN 100 to the other worker's
    /// mapping is handed over as it came, tag and all, and translated
    /// there.
    #[test]
    fn a_tagged_frame_is_handed_over_with_its_tag() {
        let cfg = config(vec![], 2);
        let mut w: Vec<Gateway> = (0..2).map(|i| Gateway::new(router(), &cfg, i)).collect();
        for g in &mut w {
            g.tick(S);
        }
        for owner in [0usize, 1] {
            let mut f = tagged(
                &pkt(
                    R0,
                    TAGGED_CLIENT,
                    40000 + owner as u16,
                    SERVER,
                    53,
                    17,
                    0,
                    b"q",
                ),
                10,
            );
            assert_eq!(w[owner].process(&mut f, 0), Verdict::Forward(1));
            let r = tagged(&reply_to(&untagged(&f).1, R1, 0), 100);
            let mut h = r.clone();
            assert_eq!(
                w[1 - owner].process(&mut h, 1),
                Verdict::Handoff(owner as u16)
            );
            assert_eq!(h, r, "handed over as received");
            assert_eq!(w[owner].process(&mut h, 1), Verdict::Forward(0));
            let (id, back) = untagged(&h);
            assert_eq!((id, addrs(&back).2), (10, a(TAGGED_CLIENT)));
        }
    }
}

/// The gateway's stage clock switched on and off between bursts: the
/// packets' verdicts and bytes are those of a gateway without it, its
/// flows and translations go on across each switch, and while it runs
/// it counts the packets and charges each stage (less a read's cost,
/// measured when it is switched on: the fake clock moves 1 a read then,
/// 7 after, so every mark charges 6): established packets never reach
/// the firewall, new flows do; off, the totals stay as they were; on
/// again, they start afresh.
#[test]
fn stage_clock_switches_while_flows_go_on() {
    use crate::fwd::testing::{fake_now, same_burst, set_fake_now};
    let mut plain = gateway();
    let mut p = Profiled::new(gateway());
    let flows = |n: u16, from: u16| -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| pkt(R0, CLIENT, from + i, SERVER, 53, 17, 0, b"q"))
            .collect()
    };
    // A burst through both: the same verdicts and bytes, all forwarded.
    let run = |plain: &mut Gateway, p: &mut Profiled, frames: Vec<Vec<u8>>| {
        let v = same_burst(plain, p, frames);
        assert!(v.iter().all(|v| *v == Verdict::Forward(1)));
    };
    let stage = |p: &Profiled, s: Stage| p.stage_clock().unwrap().2[s as usize];
    run(&mut plain, &mut p, flows(20, 1000));
    p.tick(2 * S);
    plain.tick(2 * S);
    assert_eq!(p.stage_clock(), Some((false, 0, &[0u64; Stage::COUNT][..])));

    set_fake_now(0, 1);
    assert!(p.reconfigure(&crate::fwd::Profile(Some(fake_now))));
    set_fake_now(1000, 7);
    // The 20 flows again: established.
    run(&mut plain, &mut p, flows(20, 1000));
    p.tick(3 * S);
    plain.tick(3 * S);
    let (on, packets, _) = p.stage_clock().unwrap();
    assert!(on);
    assert_eq!(packets, 20);
    for s in [
        Stage::Parse,
        Stage::Conntrack,
        Stage::Nat,
        Stage::Route,
        Stage::Rewrite,
    ] {
        assert!(stage(&p, s) > 0, "{s:?}");
        assert_eq!(stage(&p, s) % 6, 0, "{s:?}: 6 a mark");
    }
    assert_eq!(stage(&p, Stage::Firewall), 0, "established: no rules");
    assert_eq!(p.events(), plain.events(), "the flows went on");
    // New flows reach the rules.
    run(&mut plain, &mut p, flows(10, 2000));
    p.tick(4 * S);
    plain.tick(4 * S);
    assert_eq!(p.stage_clock().unwrap().1, 30);
    assert!(stage(&p, Stage::Firewall) > 0);
    assert_eq!(p.events(), plain.events());
    assert_eq!(
        p.gauges()[GAUGES
            .iter()
            .position(|g| *g == "conntrack_entries")
            .unwrap()],
        30
    );

    // Off: the totals stay; the flows go on.
    assert!(p.reconfigure(&crate::fwd::Profile(None)));
    let kept = (
        p.stage_clock().unwrap().1,
        p.stage_clock().unwrap().2.to_vec(),
    );
    run(&mut plain, &mut p, flows(30, 1000));
    p.tick(5 * S);
    plain.tick(5 * S);
    let (on, packets, cycles) = p.stage_clock().unwrap();
    assert!(!on);
    assert_eq!((packets, cycles.to_vec()), kept);
    assert_eq!(p.events(), plain.events());
    // On again: from zero.
    assert!(p.reconfigure(&crate::fwd::Profile(Some(fake_now))));
    assert_eq!(p.stage_clock(), Some((true, 0, &[0u64; Stage::COUNT][..])));
    // On while on: afresh (VPP's `clear runtime`), the flows going on.
    run(&mut plain, &mut p, flows(30, 1000));
    p.tick(6 * S);
    plain.tick(6 * S);
    assert_eq!(p.stage_clock().unwrap().1, 30);
    assert!(p.reconfigure(&crate::fwd::Profile(Some(fake_now))));
    assert_eq!(p.stage_clock(), Some((true, 0, &[0u64; Stage::COUNT][..])));
    run(&mut plain, &mut p, flows(30, 1000));
    p.tick(7 * S);
    plain.tick(7 * S);
    assert_eq!(p.events(), plain.events());
    // Other updates still reach the gateway.
    assert!(!p.reconfigure(&()));
}

mod fragments;
mod masq6;

/// Deterministic NAT with two workers: each inside host's flows leave
/// from the address and block its offset gives it, each worker's from its
/// share of the block; the replies go to the worker that owns the port;
/// the public address and port computed back give the host.
#[test]
fn deterministic_nat_maps_each_host_to_its_block_and_back() {
    let det = crate::nat::Det {
        inside: (a("198.18.0.0"), 24),
        outside: (a("198.19.0.16"), 28),
        block: 4000,
    };
    let mut nat = nat_cfg(PortRange::default());
    nat.snat[0].to = SnatTo::Deterministic(det);
    let cfg = GatewayConfig {
        workers: 2,
        ..config_with(vec![], Action::Accept, nat.clone(), 256)
    };
    let mut w: Vec<Gateway> = (0..2).map(|i| Gateway::new(router(), &cfg, i)).collect();
    for g in &mut w {
        g.tick(S);
    }
    // 256 hosts on 16 addresses: 16 a address, 4,000 ports each.
    assert_eq!(det.ratio(), 16);
    // (Not .0, .1 or .255: the inside prefix is the router's connected subnet, .1 its address.)
    for host in [2u32, 15, 16, 100, 254] {
        let src = std::net::Ipv4Addr::from(a("198.18.0.0") + host).to_string();
        let out = a("198.19.0.16") + host / 16;
        let start = 1024 + (host % 16) * 4000;
        for (i, g) in w.iter_mut().enumerate() {
            for n in 0..3u16 {
                let mut f = pkt(R0, &src, 30000 + n, SERVER, 53 + i as u16, 17, 0, b"q");
                assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
                let (s, p, _, _) = addrs(&f);
                assert_eq!(s, out, "{src}");
                let share = start + i as u32 * 2000;
                assert!(
                    (share..share + 2000).contains(&u32::from(p)),
                    "{src} on worker {i}: port {p} not in {share}+2000"
                );
                assert_eq!(nat.det_inside(s, p), Some(a("198.18.0.0") + host));
                assert_eq!(nat.port_owner(s, p, 2), Some(i as u16));
            }
        }
        // The reply to worker 1's flow, received by worker 0: handed over.
        let mut f = pkt(R0, &src, 31000, SERVER, 99, 17, 0, b"q");
        assert_eq!(w[1].process(&mut f, 0), Verdict::Forward(1));
        let mut r = reply_to(&f, R1, 0);
        assert_eq!(w[0].process(&mut r, 1), Verdict::Handoff(1));
        assert_eq!(w[1].process(&mut r, 1), Verdict::Forward(0));
        // To the host (or, with no neighbour entry for it, the ARP
        // request for it that the router sends first).
        let to = if r[12..14] == [0x08, 0x06] {
            u32::from_be_bytes([r[38], r[39], r[40], r[41]])
        } else {
            addrs(&r).2
        };
        assert_eq!(to, a(&src));
    }
    // Outside the inside prefix: not this rule's.
    assert_eq!(nat.det_outside(a("198.20.0.1")), None);
    assert_eq!(
        nat.det_outside(a("198.18.0.17")),
        Some((a("198.19.0.17"), 1024 + 4000, 1024 + 8000 - 1))
    );
}

/// A host whose share of its block is full gets no more flows: counted
/// as exhausted, nothing taken from another host's block.
#[test]
fn a_full_deterministic_block_is_exhausted_not_borrowed() {
    let det = crate::nat::Det {
        inside: (a("198.18.0.0"), 24),
        outside: (a("198.19.0.1"), 32),
        block: 4,
    };
    let mut nat = nat_cfg(PortRange { lo: 1024, hi: 2047 });
    nat.snat[0].to = SnatTo::Deterministic(det);
    let mut g = gateway_with(vec![], Action::Accept, nat, 256);
    let mut seen = std::collections::BTreeSet::new();
    for n in 0..4u16 {
        let mut f = pkt(R0, CLIENT, 30000 + n, SERVER, 53, 17, 0, b"q");
        assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
        seen.insert(addrs(&f).1);
    }
    // Host 10 of the /24: ports 1064..1067.
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        vec![1064, 1065, 1066, 1067]
    );
    let mut f = pkt(R0, CLIENT, 30010, SERVER, 53, 17, 0, b"q");
    assert_eq!(
        g.process(&mut f, 0),
        Verdict::Drop(DropReason::NatExhausted)
    );
    // Another host still has its own.
    let mut f = pkt(R0, CLIENT2, 30000, SERVER, 53, 17, 0, b"q");
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
    assert_eq!(addrs(&f).1 / 4, 1104 / 4);
}

/// Port-block allocation: a host's flows take their ports from its
/// block, a second block when the first is full, none past its rule's
/// most (counted `nat_block_quota`); another host gets another block; a
/// block is released, and logged, when its last flow ends.
#[test]
fn port_blocks_go_to_a_host_and_come_back_when_its_flows_end() {
    use crate::conntrack::export::{NatEvent, Settings};
    let mut nat = nat_cfg(PortRange { lo: 1024, hi: 1055 });
    nat.snat[0].to = SnatTo::Blocks(crate::nat::BlockRule {
        addrs: vec![a("198.19.0.1")],
        size: 4,
        max: 2,
    });
    let mut g = gateway_with(vec![], Action::Accept, nat, 256);
    g.tick(S);
    let (tx, mut rx) = rtrb::RingBuffer::new(64);
    g.set_export(
        tx,
        0,
        &Settings {
            flows: false,
            active_ns: 60 * S,
            denied: false,
            nat_events: true,
        },
    );
    let mut ports = Vec::new();
    for n in 0..8u16 {
        let mut f = pkt(R0, CLIENT, 30000 + n, SERVER, 53, 17, 0, b"q");
        assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
        let (s, p, _, _) = addrs(&f);
        assert_eq!(s, a("198.19.0.1"));
        ports.push(p);
    }
    // Two blocks of 4, each used in order; the first is the range's.
    let blocks: std::collections::BTreeSet<u16> = ports.iter().map(|p| (p - 1024) / 4).collect();
    assert_eq!(blocks.len(), 2, "{ports:?}");
    assert!(ports[..4]
        .iter()
        .all(|p| (p - 1024) / 4 == (ports[0] - 1024) / 4));
    assert_eq!(g.conntrack().blocks().unwrap().held(), 2);
    // A third block is past the rule's most.
    let mut f = pkt(R0, CLIENT, 30100, SERVER, 53, 17, 0, b"q");
    assert_eq!(
        g.process(&mut f, 0),
        Verdict::Drop(DropReason::NatExhausted)
    );
    g.tick(S);
    assert_eq!(event(&g, "nat_block_quota"), 1);
    // Another host has its own block.
    let mut f = pkt(R0, CLIENT2, 30000, SERVER, 53, 17, 0, b"q");
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
    let other = (addrs(&f).1 - 1024) / 4;
    assert!(!blocks.contains(&other));
    // Allocation logged: three blocks, each once, with its host.
    let mut got = Vec::new();
    while let Ok(r) = rx.pop() {
        got.push(r);
    }
    let allocs: Vec<_> = got
        .iter()
        .filter(|r| r.nat == Some(NatEvent::BlockAllocate))
        .map(|r| {
            (
                r.seen.src as u32,
                r.sent.src as u32,
                r.sent.sport,
                r.sent.dport,
            )
        })
        .collect();
    assert_eq!(allocs.len(), 3, "{got:?}");
    // The blocks are the log: no session events for their flows; the
    // refused flow's "ports exhausted".
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(
        got.iter()
            .filter(|r| r.nat == Some(NatEvent::PortsExhausted))
            .count(),
        1
    );
    for &(inside, outside, lo, hi) in &allocs {
        assert_eq!(outside, a("198.19.0.1"));
        assert_eq!(hi - lo, 3);
        let b = (lo - 1024) / 4;
        if inside == a(CLIENT) {
            assert!(blocks.contains(&b));
        } else {
            assert_eq!((inside, b), (a(CLIENT2), other));
        }
    }
    // The flows time out: every block comes back, each logged once.
    for k in 0..40 {
        g.tick(S * (300 + k));
    }
    assert_eq!(g.conntrack().len(), 0);
    assert_eq!(g.conntrack().blocks().unwrap().held(), 0);
    let mut released = 0;
    while let Ok(r) = rx.pop() {
        if r.nat == Some(NatEvent::BlockRelease) {
            released += 1;
        }
    }
    assert_eq!(released, 3);
    // The host may take blocks again.
    let mut f = pkt(R0, CLIENT, 30200, SERVER, 53, 17, 0, b"q");
    assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
}

/// Port blocks with two workers: each cuts its blocks from its own slice
/// of the range, so a reply to a block's port goes to the worker that
/// owns it.
#[test]
fn port_blocks_are_each_workers_and_replies_find_them() {
    let mut nat = nat_cfg(PortRange { lo: 1024, hi: 2047 });
    nat.snat[0].to = SnatTo::Blocks(crate::nat::BlockRule {
        addrs: vec![a("198.19.0.1")],
        size: 64,
        max: 2,
    });
    let cfg = GatewayConfig {
        workers: 2,
        ..config_with(vec![], Action::Accept, nat.clone(), 256)
    };
    let mut w: Vec<Gateway> = (0..2).map(|i| Gateway::new(router(), &cfg, i)).collect();
    for g in &mut w {
        g.tick(S);
        // 512 ports a worker: 8 blocks of 64.
        assert_eq!(g.conntrack().blocks().unwrap().len(), 8);
    }
    for (i, g) in w.iter_mut().enumerate() {
        let mut f = pkt(R0, CLIENT, 30000, SERVER, 53, 17, 0, b"q");
        assert_eq!(g.process(&mut f, 0), Verdict::Forward(1));
        let (s, p, _, _) = addrs(&f);
        assert_eq!(s, a("198.19.0.1"));
        let slice = 1024 + 512 * i as u16;
        assert!((slice..slice + 512).contains(&p), "worker {i}: port {p}");
        assert_eq!(nat.port_owner(s, p, 2), Some(i as u16));
    }
    // Worker 1's flow's reply, received by worker 0: handed over.
    let mut f = pkt(R0, CLIENT, 30001, SERVER, 99, 17, 0, b"q");
    assert_eq!(w[1].process(&mut f, 0), Verdict::Forward(1));
    let mut r = reply_to(&f, R1, 0);
    assert_eq!(w[0].process(&mut r, 1), Verdict::Handoff(1));
    assert_eq!(w[1].process(&mut r, 1), Verdict::Forward(0));
    // An empty copy of a worker (a fresh instance) has its blocks, free.
    let fresh = w[1].clone();
    let b = fresh.conntrack().blocks().unwrap();
    assert_eq!((b.len(), b.held()), (8, 0));
}
