//! Unit tests of the router stage: forwarding, the ICMP errors, ARP and
//! ND, and the burst path against the per-packet path.

use super::neighbors::BROADCAST;
use super::*;
use crate::checksum;
use crate::firewall::{Action, RejectWith};
use crate::wire::{IpProto, Ipv4Packet, Ipv6Packet};

pub(super) const R0: MacAddr = MacAddr([2, 0x51, 0, 0, 0, 0]);
pub(super) const R1: MacAddr = MacAddr([2, 0x51, 0, 0, 0, 1]);
pub(super) const HOST: MacAddr = MacAddr([2, 0xaa, 0, 0, 0, 1]);
const GW: MacAddr = MacAddr([2, 0xbb, 0, 0, 0, 1]);

/// The test routes (IPv4 only when `v6` is given: those replace the
/// IPv6 route): connected 198.18.0.0/24 on port 0 and 198.19.0.0/24 on
/// port 1, 203.0.113.0/24 via 198.19.0.2 and 2001:db8:19::/48 via
/// 2001:db8:19::2 on port 1.
pub(super) fn fib(v6: &[(&str, u8, u16, Option<&str>)]) -> Arc<crate::fib::Fib> {
    fib_writer(v6).fib().clone()
}

/// The writer of [`fib`]'s tables.
fn fib_writer(v6: &[(&str, u8, u16, Option<&str>)]) -> crate::fib::FibWriter {
    let mut routes = vec![
        ("198.18.0.0", 24, 0, None),
        ("198.19.0.0", 24, 1, None),
        ("203.0.113.0", 24, 1, Some("198.19.0.2")),
    ];
    if v6.is_empty() {
        routes.push(("2001:db8:19::", 48, 1, Some("2001:db8:19::2")));
    }
    routes.extend_from_slice(v6);
    let routes: Vec<_> = routes
        .iter()
        .map(|&(a, l, port, via)| {
            let via = via.map(|v| v.parse().unwrap());
            (a.parse().unwrap(), l, vec![NextHop { port, via }])
        })
        .collect();
    crate::fib::FibWriter::build(&routes).unwrap()
}

/// Port 0: 198.18.0.1/24 (clients), port 1: 198.19.0.1/24 with gateway
/// 198.19.0.2 (static neighbour) for 203.0.113.0/24 and a default route.
pub(super) fn router() -> Router {
    Router::new(RouterConfig {
        interfaces: vec![
            Interface {
                mac: R0,
                ipv4: vec![("198.18.0.1".parse().unwrap(), 24)],
                ipv6: vec![("2001:db8:18::1".parse().unwrap(), 64)],
                mtu: 1500,
                vlan: None,
                down: false,
            },
            Interface {
                mac: R1,
                ipv4: vec![("198.19.0.1".parse().unwrap(), 24)],
                ipv6: vec![],
                mtu: 1400,
                vlan: None,
                down: false,
            },
        ],
        fib: fib(&[]),
        neighbors4: vec![(1, "198.19.0.2".parse().unwrap(), GW)],
        neighbors6: vec![(1, "2001:db8:19::2".parse().unwrap(), GW)],
        icmp_rate: 1000,
        neighbor_timeout_ns: 300_000_000_000,
        punt: Default::default(),
        adverts: Vec::new(),
    })
}

/// Ethernet + IPv4 + UDP (8 bytes of payload) with valid checksums.
fn udp4(src: &str, dst: &str, ttl: u8, total_extra: usize) -> Vec<u8> {
    let l4 = 8 + 8 + total_extra;
    let mut f = vec![0u8; 14 + 20 + l4];
    f[0..6].copy_from_slice(&R0.0);
    f[6..12].copy_from_slice(&HOST.0);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let mut ip = Ipv4Packet::new_unchecked(&mut f[14..34]);
    ip.set_version_ihl(20);
    ip.set_total_len((20 + l4) as u16);
    ip.set_flags_frag(0x4000);
    ip.set_ttl(ttl);
    ip.set_protocol(IpProto::UDP);
    ip.set_src(src.parse::<Ipv4Addr>().unwrap().octets());
    ip.set_dst(dst.parse::<Ipv4Addr>().unwrap().octets());
    ip.fill_checksum();
    f[34..38].copy_from_slice(&[0x30, 0x39, 0x00, 0x35]);
    f[38..40].copy_from_slice(&(l4 as u16).to_be_bytes());
    f
}

fn ip_ok(f: &[u8]) -> bool {
    Ipv4Packet::new_checked(&f[14..]).unwrap().verify_checksum()
}

#[test]
fn forwards_with_ttl_decrement_and_valid_checksum() {
    let mut r = router();
    let mut f = udp4("198.18.0.10", "203.0.113.7", 64, 0);
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(1));
    assert_eq!(f[14 + 8], 63, "TTL - 1");
    assert!(ip_ok(&f), "checksum updated");
    assert_eq!(&f[0..6], &GW.0, "next hop's MAC");
    assert_eq!(&f[6..12], &R1.0, "output port's MAC");
}

/// TTL 1: an ICMP Time Exceeded from the receiving interface, checksums
/// valid, quoting the original header and 8 bytes.
#[test]
fn ttl_one_gets_time_exceeded() {
    let mut r = router();
    let orig = udp4("198.18.0.10", "203.0.113.7", 1, 0);
    let mut f = orig.clone();
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(0));
    assert_eq!(f.len(), 14 + 20 + 8 + 28);
    assert_eq!(&f[0..6], &HOST.0);
    assert_eq!(&f[6..12], &R0.0);
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert!(ip.verify_checksum());
    assert_eq!(ip.protocol(), IpProto::ICMP);
    assert_eq!(ip.src(), [198, 18, 0, 1], "from the router's address");
    assert_eq!(ip.dst(), [198, 18, 0, 10]);
    let icmp = ip.payload();
    assert_eq!((icmp[0], icmp[1]), (11, 0));
    assert_eq!(checksum::checksum(icmp), 0, "ICMP checksum valid");
    assert_eq!(&icmp[8..], &orig[14..14 + 28], "quotes header + 8 bytes");
    assert_eq!(r.events()[Event::TimeExceeded as usize], 1);
}

#[test]
fn no_route_gets_unreachable_and_errors_are_rate_limited() {
    let mut r = router();
    let mut sent = 0;
    for _ in 0..500 {
        let mut f = udp4("198.18.0.10", "192.0.2.1", 64, 0);
        match r.process(&mut f, 0) {
            Verdict::Forward(0) => {
                let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
                assert_eq!((ip.payload()[0], ip.payload()[1]), (3, 0));
                sent += 1;
            }
            Verdict::Drop(DropReason::NoRoute) => {}
            v => panic!("{v:?}"),
        }
    }
    assert_eq!(
        sent, 100,
        "a burst of icmp_rate / 10, then the bucket is empty"
    );
    assert_eq!(r.events()[Event::IcmpRateLimited as usize], 400);
    r.tick(1_000_000_000);
    r.tick(1_050_000_000); // 50 ms: 50 tokens
    let mut f = udp4("198.18.0.10", "192.0.2.1", 64, 0);
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(0));
}

#[test]
fn df_over_mtu_gets_frag_needed_with_mtu() {
    let mut r = router();
    let mut f = udp4("198.18.0.10", "203.0.113.7", 64, 1400);
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(0));
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    let icmp = ip.payload();
    assert_eq!((icmp[0], icmp[1]), (3, 4));
    assert_eq!(u16::from_be_bytes([icmp[6], icmp[7]]), 1400, "next-hop MTU");
}

/// A UDP datagram of `len` payload bytes (a pattern) from 198.18.0.10 to
/// 203.0.113.7, Don't Fragment clear, IPv4 options `opts` (a multiple of
/// 4 bytes), fragment field `frag` (MF and offset), identification 0x4242.
fn big4(len: usize, opts: &[u8], frag: u16) -> Vec<u8> {
    let ihl = 20 + opts.len();
    let total = ihl + 8 + len;
    let mut f = vec![0u8; 14 + total];
    f[0..6].copy_from_slice(&R0.0);
    f[6..12].copy_from_slice(&HOST.0);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let mut ip = Ipv4Packet::new_unchecked(&mut f[14..14 + ihl]);
    ip.set_version_ihl(ihl);
    ip.set_total_len(total as u16);
    ip.set_ident(0x4242);
    ip.set_flags_frag(frag);
    ip.set_ttl(64);
    ip.set_protocol(IpProto::UDP);
    ip.set_src([198, 18, 0, 10]);
    ip.set_dst([203, 0, 113, 7]);
    f[34..34 + opts.len()].copy_from_slice(opts);
    Ipv4Packet::new_unchecked(&mut f[14..14 + ihl]).fill_checksum();
    let l4 = 14 + ihl;
    f[l4..l4 + 4].copy_from_slice(&[0x30, 0x39, 0x00, 0x35]);
    f[l4 + 4..l4 + 6].copy_from_slice(&((8 + len) as u16).to_be_bytes());
    for (i, b) in f[l4 + 8..].iter_mut().enumerate() {
        *b = (i * 7 + i / 251) as u8;
    }
    f
}

/// Fragments `frags` of `orig` (its header `ihl` bytes long) checked as a
/// receiver would take them: each a valid header no longer than `mtu`,
/// TTL one less, the identification, addresses and protocol of the
/// original, the options of the original in the first and `later` in the
/// others, payloads of multiples of 8 but for the
/// last, More Fragments on all but the last (which keeps the original's);
/// put together by offset, they are the original's payload.
fn check_fragments(orig: &[u8], frags: &[Vec<u8>], mtu: usize, later: &[u8]) {
    let oh = Ipv4Packet::new_checked(&orig[14..]).unwrap();
    let ihl = oh.header_len();
    let (base, mf) = (oh.flags_frag() & 0x1fff, oh.flags_frag() & 0x2000 != 0);
    let payload = &orig[14 + ihl..14 + usize::from(oh.total_len())];
    let mut got = vec![None::<u8>; payload.len()];
    for (k, f) in frags.iter().enumerate() {
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert!(ip.verify_checksum(), "fragment {k}");
        assert!(usize::from(ip.total_len()) <= mtu, "fragment {k}");
        assert_eq!(ip.header_len(), ihl);
        assert_eq!(ip.ttl(), oh.ttl() - 1);
        assert_eq!(
            (ip.ident(), ip.src(), ip.dst()),
            (oh.ident(), oh.src(), oh.dst())
        );
        assert_eq!(ip.protocol(), oh.protocol());
        assert_eq!(ip.flags_frag() & 0x4000, 0, "DF stays clear");
        assert_eq!((&f[0..6], &f[6..12]), (&GW.0[..], &R1.0[..]));
        let opts = &f[34..14 + ihl];
        assert_eq!(opts, if k == 0 { &orig[34..14 + ihl] } else { later });
        let off = usize::from((ip.flags_frag() & 0x1fff) - base) * 8;
        let data = &f[14 + ihl..14 + usize::from(ip.total_len())];
        let last = k == frags.len() - 1;
        assert_eq!(ip.flags_frag() & 0x2000 != 0, if last { mf } else { true });
        if !last {
            assert_eq!(data.len() % 8, 0);
        }
        for (i, &b) in data.iter().enumerate() {
            assert!(got[off + i].replace(b).is_none(), "byte {} twice", off + i);
        }
    }
    let got: Vec<u8> = got.into_iter().map(|b| b.expect("every byte")).collect();
    assert_eq!(got, payload);
}

/// Over the MTU without Don't Fragment: fragments (the packet's own
/// buffer the first, the rest from `emit`) where it used to be dropped
/// as `mtu_exceeded`.
/// IPv4 options on forwarded packets: Record Route gets the outgoing
/// interface's address (once, the header checksum valid), as a burst's
/// packet too; a source route is dropped; a malformed option is answered
/// with Parameter Problem pointing at its bad byte.
#[test]
fn ipv4_options_are_stamped_checked_and_source_routes_dropped() {
    let mut r = router();
    let rr = [1u8, 7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0];
    let mut f = big4(100, &rr, 0);
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(1));
    assert_eq!(&f[14 + 21..14 + 32], &[7, 11, 8, 198, 19, 0, 1, 0, 0, 0, 0]);
    assert!(ip_ok(&f));
    assert_eq!(f[14 + 8], 63, "TTL");
    let mut burst = vec![big4(100, &rr, 0), big4(100, &[], 0)];
    let mut v = [Verdict::Forward(u16::MAX); 2];
    let all = r.process_burst(&mut burst, 0, &mut v);
    for (k, v) in v.iter().enumerate() {
        assert_eq!(all.unwrap_or(*v), Verdict::Forward(1), "packet {k}");
    }
    assert_eq!(&burst[0][14 + 21..14 + 32], &f[14 + 21..14 + 32]);
    assert!(ip_ok(&burst[0]));
    let mut f = big4(100, &[131, 7, 4, 10, 0, 0, 1, 0], 0);
    assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::SourceRoute));
    let mut f = big4(100, &[7, 7, 3, 0, 0, 0, 0, 0], 0);
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(0));
    assert_eq!((f[34], f[35]), (12, 0), "Parameter Problem");
    assert_eq!(f[38], 22, "at the pointer's byte");
    // An echo request to the router: the reply keeps the request's
    // options, its address recorded as the reply leaves (Linux records
    // it twice, as the request arrives and as the reply leaves).
    let mut e = big4(0, &rr, 0);
    e[14 + 9] = IpProto::ICMP;
    e[14 + 16..14 + 20].copy_from_slice(&[198, 18, 0, 1]);
    Ipv4Packet::new_unchecked(&mut e[14..14 + 32]).fill_checksum();
    e[46..54].copy_from_slice(&[8, 0, 0, 0, 0x12, 0x34, 0, 1]);
    let c = checksum::checksum(&e[46..]);
    e[48..50].copy_from_slice(&c.to_be_bytes());
    assert_eq!(r.process(&mut e, 0), Verdict::Forward(0));
    assert_eq!(e[46], 0, "echo reply");
    assert_eq!(&e[14 + 21..14 + 32], &[7, 11, 8, 198, 18, 0, 1, 0, 0, 0, 0]);
    assert!(ip_ok(&e));
    let ev = |e: Event| r.events()[e as usize];
    assert_eq!((ev(Event::OptionsStamped), ev(Event::ParamProblem)), (3, 1));
}

#[test]
fn non_df_over_mtu_is_sent_as_fragments() {
    let mut cfg = (*router().cfg).clone();
    cfg.interfaces[1].mtu = 576;
    let mut r = Router::new(cfg);
    let orig = big4(1400, &[], 0);
    let mut f = orig.clone();
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(1));
    assert!(ForwardMode::pending(&r), "the others wait for emit");
    let rest = released(&mut r);
    assert!(rest.iter().all(|(p, _)| *p == 1));
    let frags: Vec<Vec<u8>> = std::iter::once(f)
        .chain(rest.into_iter().map(|(_, f)| f))
        .collect();
    // 1,408 bytes of payload in 552-byte pieces (576 less the header, to
    // a multiple of 8).
    assert_eq!(frags.len(), 3);
    assert_eq!(frags[0].len(), 14 + 20 + 552);
    check_fragments(&orig, &frags, 576, &[]);
    assert!(!ForwardMode::pending(&r));
    let ev = |r: &Router, e: Event| r.events()[e as usize];
    assert_eq!(
        (ev(&r, Event::FragPackets), ev(&r, Event::FragSent)),
        (1, 3)
    );
    assert_eq!(ev(&r, Event::FragDropped), 0);
    // The store is bounded: past it, packets are dropped, counted; so is
    // a frame larger than any interface's MTU.
    for _ in 0..frag::SLOTS + 2 {
        let mut f = orig.clone();
        let _ = r.process(&mut f, 0);
    }
    assert_eq!(ev(&r, Event::FragDropped), 2);
    assert_eq!(released(&mut r).len(), 2 * frag::SLOTS);
    let mut f = big4(1500, &[], 0);
    assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::MtuExceeded));
    assert_eq!(ev(&r, Event::FragDropped), 3);
    // An MTU that leaves no 8 bytes past the header: dropped.
    let mut small = (*r.cfg).clone();
    small.interfaces[1].mtu = 24;
    r.reconfigure(Arc::new(small));
    let mut f = orig.clone();
    assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::MtuExceeded));
}

use proptest::prelude::*;

proptest! {
    /// Any size, MTU, options and fragment field: the fragments are what
    /// a receiver reassembles into the packet ([`check_fragments`]).
    #[test]
    fn fragments_reassemble_into_the_packet(
        len in 0usize..1450,
        mtu in 68u16..1500,
        uncopied in any::<bool>(),
        copied in any::<bool>(),
        frag in prop_oneof![
            Just(0u16),
            Just(0x2000u16),
            (1u16..100).prop_map(|o| 0x2000 | o),
            1u16..100,
        ],
    ) {
        // An option without the copy flag (traceroute's, 82) is not
        // copied into later fragments (NOPs there), one with it (stream
        // identifier, 136) is; End of Options pads. (Record Route, not
        // copied either, is stamped, and a source route dropped:
        // `ipv4_options_are_stamped_checked_and_source_routes_dropped`.)
        let (mut opts, mut later) = (Vec::new(), Vec::new());
        if uncopied {
            opts.extend_from_slice(&[82, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0]);
            later.extend_from_slice(&[1; 11]);
        }
        if copied {
            opts.extend_from_slice(&[0x88, 7, 4, 10, 0, 0, 1]);
            later.extend_from_slice(&[0x88, 7, 4, 10, 0, 0, 1]);
        }
        while !opts.len().is_multiple_of(4) {
            opts.push(0);
            later.push(0);
        }
        let mut cfg = (*router().cfg).clone();
        cfg.interfaces[1].mtu = mtu;
        let mut r = Router::new(cfg);
        let orig = big4(len, &opts, frag);
        let mut f = orig.clone();
        let total = orig.len() - 14;
        let v = r.process(&mut f, 0);
        if total <= usize::from(mtu) {
            prop_assert_eq!(v, Verdict::Forward(1));
            prop_assert!(!ForwardMode::pending(&r));
            check_fragments(&orig, &[f], usize::from(mtu), &later);
        } else if usize::from(mtu) < 20 + opts.len() + 8 {
            prop_assert_eq!(v, Verdict::Drop(DropReason::MtuExceeded));
        } else {
            prop_assert_eq!(v, Verdict::Forward(1));
            let frags: Vec<Vec<u8>> = std::iter::once(f)
                .chain(released(&mut r).into_iter().map(|(_, f)| f))
                .collect();
            check_fragments(&orig, &frags, usize::from(mtu), &later);
        }
    }
}

/// An ICMP echo request from `src` to the router's address `dst`,
/// received on port 0.
fn echo4(src: &str, dst: &str) -> Vec<u8> {
    let mut f = udp4(src, dst, 64, 0);
    f[14 + 9] = IpProto::ICMP;
    Ipv4Packet::new_unchecked(&mut f[14..34]).fill_checksum();
    f[34..42].copy_from_slice(&[8, 0, 0, 0, 0x12, 0x34, 0, 1]);
    let c = checksum::checksum(&f[34..]);
    f[36..38].copy_from_slice(&c.to_be_bytes());
    f
}

#[test]
fn echo_to_router_is_answered() {
    let mut r = router();
    let mut f = echo4("198.18.0.10", "198.19.0.1");
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(0));
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert!(ip.verify_checksum());
    assert_eq!(ip.src(), [198, 19, 0, 1]);
    assert_eq!(ip.dst(), [198, 18, 0, 10]);
    assert_eq!(ip.payload()[0], 0, "echo reply");
    assert_eq!(checksum::checksum(ip.payload()), 0);
    assert_eq!(&f[0..6], &HOST.0);
}

fn arp(op: u16, sha: MacAddr, spa: &str, tpa: &str, dst: MacAddr) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&dst.0);
    f[6..12].copy_from_slice(&sha.0);
    f[12..14].copy_from_slice(&[0x08, 0x06]);
    f[14..20].copy_from_slice(&[0, 1, 8, 0, 6, 4]);
    f[20..22].copy_from_slice(&op.to_be_bytes());
    f[22..28].copy_from_slice(&sha.0);
    f[28..32].copy_from_slice(&spa.parse::<Ipv4Addr>().unwrap().octets());
    f[38..42].copy_from_slice(&tpa.parse::<Ipv4Addr>().unwrap().octets());
    f
}

#[test]
fn arp_request_for_router_is_answered_and_sender_learned() {
    let mut r = router();
    let mut f = arp(1, HOST, "198.18.0.10", "198.18.0.1", BROADCAST);
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(0));
    assert_eq!(u16::from_be_bytes([f[20], f[21]]), 2);
    assert_eq!(&f[22..28], &R0.0, "sender is the router");
    assert_eq!(&f[28..32], &[198, 18, 0, 1]);
    assert_eq!(&f[32..38], &HOST.0);
    assert_eq!(&f[0..6], &HOST.0);
    assert_eq!(r.neighbor4(0, "198.18.0.10".parse().unwrap()), Some(HOST));
    // Requests for other hosts are consumed (learning still happens).
    let mut f = arp(1, GW, "198.18.0.20", "198.18.0.30", BROADCAST);
    assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::Consumed));
}

/// A neighbour miss sends an ARP request; the reply teaches the router, and
/// the next packet is forwarded.
#[test]
fn resolves_next_hop_by_arp() {
    let mut r = router();
    let mut f = udp4("198.19.0.50", "198.18.0.10", 64, 0);
    f[0..6].copy_from_slice(&R1.0);
    assert_eq!(r.process(&mut f, 1), Verdict::Forward(0));
    assert_eq!(&f[12..14], &[0x08, 0x06], "became an ARP request");
    assert_eq!(&f[0..6], &[0xff; 6]);
    assert_eq!(&f[38..42], &[198, 18, 0, 10], "for the destination");
    assert_eq!(r.events()[Event::ArpRequest as usize], 1);
    let mut reply = arp(2, HOST, "198.18.0.10", "198.18.0.1", R0);
    assert_eq!(
        r.process(&mut reply, 0),
        Verdict::Drop(DropReason::Consumed)
    );
    let mut f = udp4("198.19.0.50", "198.18.0.10", 64, 0);
    f[0..6].copy_from_slice(&R1.0);
    assert_eq!(r.process(&mut f, 1), Verdict::Forward(0));
    assert_eq!(&f[0..6], &HOST.0);
    // After the timeout the learned entry is resolved again; the static
    // gateway never ages.
    r.tick(400_000_000_000);
    let mut f = udp4("198.19.0.50", "198.18.0.10", 64, 0);
    f[0..6].copy_from_slice(&R1.0);
    assert_eq!(r.process(&mut f, 1), Verdict::Forward(0));
    assert_eq!(&f[12..14], &[0x08, 0x06], "aged out: ARP again");
    let mut f = udp4("198.18.0.10", "203.0.113.7", 64, 0);
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(1));
    assert_eq!(&f[0..6], &GW.0);
}

/// Where the NIC verifies IPv4 header checksums (DPDK's RX offload), the
/// burst path takes its word and skips its own sum; a header it found bad
/// takes the full path, whose own check decides; without a verdict the
/// burst path sums the header itself.
#[test]
fn the_nics_checksum_verdict_is_taken() {
    let good = udp4("198.18.0.2", "203.0.113.5", 64, 0);
    let mut corrupt = good.clone();
    corrupt[14 + 10] ^= 1;
    let run = |f: &[u8], nic: Option<bool>| {
        let mut r = router();
        let mut pkts = vec![crate::fwd::NicFrame(f.to_vec(), nic); 40];
        let mut v = vec![Verdict::Drop(DropReason::NotIp); 40];
        let same = r.process_burst(&mut pkts, 0, &mut v);
        (same, pkts)
    };
    // Verified by the NIC: forwarded without a sum here (what it
    // verified is what it saw; the update keeps the header's sum as it
    // was, off by the same bit).
    let (same, pkts) = run(&corrupt, Some(true));
    assert_eq!(same, Some(Verdict::Forward(1)));
    assert!(pkts.iter().all(|p| p.0[22] == 63 && p.0[..6] == GW.0));
    // Bad by the NIC: the full path checks it and drops it counted.
    let (same, _) = run(&corrupt, Some(false));
    assert_eq!(same, Some(Verdict::Drop(DropReason::BadChecksum)));
    // Bad by the NIC, sound here: the full path's check is the word.
    let (same, pkts) = run(&good, Some(false));
    assert_eq!(same, Some(Verdict::Forward(1)));
    assert!(pkts.iter().all(|p| p.0[22] == 63 && ip_ok(&p.0)));
    // No verdict: summed here, as always.
    let (same, _) = run(&corrupt, None);
    assert_eq!(same, Some(Verdict::Drop(DropReason::BadChecksum)));
    let (same, pkts) = run(&good, None);
    assert_eq!(same, Some(Verdict::Forward(1)));
    assert!(pkts.iter().all(|p| ip_ok(&p.0)));
}

/// A frame that records the addresses a stage asks it to prefetch.
#[derive(Clone)]
struct Prefetching(Vec<u8>);

thread_local! {
    static PREFETCHED: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Frame for Prefetching {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
    fn set_len(&mut self, len: usize) -> bool {
        Frame::set_len(&mut self.0, len)
    }
    fn prefetch(addr: *const u8) {
        PREFETCHED.with(|p| p.borrow_mut().push(addr as usize));
    }
}

/// The burst path's header loop prefetches each packet's first-level
/// route entry as soon as its destination is known (on a full table the
/// lookups then find them in the cache), and the packets are forwarded
/// as without it.
#[test]
fn the_header_loop_prefetches_each_routes_first_entry() {
    let mut r = router();
    let dsts = ["203.0.113.7", "198.51.100.9", "203.0.113.200", "192.0.2.1"];
    let mut pkts: Vec<Prefetching> = (0..40)
        .map(|i| Prefetching(udp4("198.18.0.10", dsts[i % dsts.len()], 64, 0)))
        .collect();
    let mut v = vec![Verdict::Drop(DropReason::NotIp); pkts.len()];
    PREFETCHED.with(|p| p.borrow_mut().clear());
    assert_eq!(r.process_burst(&mut pkts, 0, &mut v), None);
    let got = PREFETCHED.with(|p| p.borrow().clone());
    let lpm = r.lpm4();
    let want: Vec<usize> = (0..40)
        .map(|i| {
            let d: std::net::Ipv4Addr = dsts[i % dsts.len()].parse().unwrap();
            lpm.entry_of(u32::from(d)) as usize
        })
        .collect();
    assert_eq!(got, want);
    // 203.0.113.0/24 forwarded, the others (no route) answered with an
    // ICMP unreachable on the input port.
    for (i, (p, v)) in pkts.iter().zip(&v).enumerate() {
        if dsts[i % dsts.len()].starts_with("203.") {
            assert_eq!(*v, Verdict::Forward(1));
            assert_eq!((p.0[22], &p.0[..6]), (63, &GW.0[..]));
        } else {
            assert_eq!(*v, Verdict::Forward(0));
        }
    }
}

/// The burst path's stage clock (`sluice ctl set runtime`), switched on
/// and off between bursts: the verdicts and bytes are those of a router
/// without it; on, it counts the packets and charges each chunk's stages
/// (the fake clock moves 1 a read while its cost is measured, 5 after:
/// every mark charges 4; each chunk has a mark per stage); off, the
/// totals stay; on again, afresh.
#[test]
fn the_burst_clock_charges_each_stage() {
    use crate::fwd::testing::{fake_now, same_burst, set_fake_now};
    const S: u64 = 1_000_000_000;
    let mut plain = router();
    let mut r = router();
    let burst = |dsts: &[&str]| -> Vec<Vec<u8>> {
        (0..40)
            .map(|i| udp4("198.18.0.10", dsts[i % dsts.len()], 64, 0))
            .collect()
    };
    let run = |plain: &mut Router, r: &mut Router, frames: Vec<Vec<u8>>| {
        same_burst(plain, r, frames);
    };
    let stage = |r: &Router, s: &str| {
        let i = Router::STAGES.iter().position(|n| *n == s).unwrap();
        r.stage_clock().unwrap().2[i]
    };
    // The first burst resolves the next hop (the slow path); off.
    run(&mut plain, &mut r, burst(&["203.0.113.7"]));
    r.tick(S);
    plain.tick(S);
    assert_eq!(r.stage_clock(), Some((false, 0, &[0u64; 5][..])));

    set_fake_now(0, 1);
    assert!(ForwardMode::reconfigure(
        &mut r,
        &crate::fwd::Profile(Some(fake_now))
    ));
    set_fake_now(1000, 5);
    // 40 packets, two chunks, all on the cached next hop.
    run(&mut plain, &mut r, burst(&["203.0.113.7", "203.0.113.9"]));
    r.tick(2 * S);
    plain.tick(2 * S);
    let (on, packets, _) = r.stage_clock().unwrap();
    assert!(on);
    assert_eq!(packets, 40);
    for s in ["parse", "lookup", "rewrite", "ipv6", "slow path"] {
        assert_eq!(stage(&r, s), 2 * 4, "{s}: two chunks, 4 a mark");
    }
    // With packets to no route (the slow path, ICMP unreachable): the
    // same marks.
    run(&mut plain, &mut r, burst(&["203.0.113.7", "192.0.2.1"]));
    r.tick(3 * S);
    plain.tick(3 * S);
    assert_eq!(r.stage_clock().unwrap().1, 80);
    assert_eq!(stage(&r, "slow path"), 4 * 4);

    // Off: the totals stay.
    assert!(ForwardMode::reconfigure(&mut r, &crate::fwd::Profile(None)));
    let kept = r.stage_clock().unwrap().2.to_vec();
    run(&mut plain, &mut r, burst(&["203.0.113.7"]));
    r.tick(4 * S);
    plain.tick(4 * S);
    let (on, packets, cycles) = r.stage_clock().unwrap();
    assert!(!on);
    assert_eq!((packets, cycles.to_vec()), (80, kept));
    assert!(ForwardMode::reconfigure(
        &mut r,
        &crate::fwd::Profile(Some(fake_now))
    ));
    assert_eq!(r.stage_clock(), Some((true, 0, &[0u64; 5][..])));
    // On while on: afresh (VPP's `clear runtime`).
    run(&mut plain, &mut r, burst(&["203.0.113.7"]));
    r.tick(5 * S);
    plain.tick(5 * S);
    assert_eq!(r.stage_clock().unwrap().1, 40);
    assert!(ForwardMode::reconfigure(
        &mut r,
        &crate::fwd::Profile(Some(fake_now))
    ));
    assert_eq!(r.stage_clock(), Some((true, 0, &[0u64; 5][..])));
}

#[test]
fn bad_packets_are_dropped_by_reason() {
    let mut r = router();
    let mut f = udp4("198.18.0.10", "203.0.113.7", 64, 0);
    f[14 + 10] ^= 1;
    assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::BadChecksum));
    let mut f = udp4("198.18.0.10", "203.0.113.7", 64, 0);
    f[14] = 0x46; // IHL 6 but no options: checksum/length mismatch
    assert!(matches!(r.process(&mut f, 0), Verdict::Drop(_)));
    let mut f = udp4("198.18.0.10", "203.0.113.7", 64, 0);
    f.truncate(30);
    assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::Truncated));
    let mut f = udp4("198.18.0.10", "127.0.0.1", 64, 0);
    assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::NotRoutable));
    let mut f = udp4("198.18.0.10", "203.0.113.7", 64, 0);
    f[0] = 0x02;
    f[5] = 0x99;
    assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::NotForUs));
    let mut f = udp4("198.18.0.10", "203.0.113.7", 64, 0);
    f[12..14].copy_from_slice(&[0x88, 0xcc]);
    assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::NotIp));
    // An ICMP error is never answered with an ICMP error.
    let mut f = udp4("198.18.0.10", "203.0.113.7", 1, 0);
    f[14 + 9] = IpProto::ICMP;
    f[34] = 11;
    Ipv4Packet::new_unchecked(&mut f[14..34]).fill_checksum();
    assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::TtlExceeded));
}

/// Ethernet from `eth_src` to `eth_dst` + an IPv6 header (`next`, hop
/// limit `hop`, from `src` to `dst`) + `payload` zero bytes.
pub(super) fn ip6(
    eth_dst: [u8; 6],
    eth_src: [u8; 6],
    next: u8,
    hop: u8,
    payload: u16,
    src: &str,
    dst: &str,
) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 40 + usize::from(payload)];
    f[0..6].copy_from_slice(&eth_dst);
    f[6..12].copy_from_slice(&eth_src);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    let mut ip = Ipv6Packet::new_unchecked(&mut f[14..]);
    ip.set_version();
    ip.set_payload_len(payload);
    ip.set_next_header(next);
    ip.set_hop_limit(hop);
    ip.set_src(v6addr(src));
    ip.set_dst(v6addr(dst));
    f
}

/// Ethernet (to port 0) + IPv6 + 8 bytes of "UDP" (no ports, no
/// checksum) from `src` to `dst`, hop limit 64.
pub(super) fn udp6(src: &str, dst: &str) -> Vec<u8> {
    ip6(R0.0, HOST.0, IpProto::UDP, 64, 8, src, dst)
}

#[test]
fn ipv6_forwards_and_answers_echo() {
    let mut r = router();
    let f = udp6("2001:db8:18::10", "2001:db8:19::77");
    let mut g = f.clone();
    assert_eq!(r.process(&mut g, 0), Verdict::Forward(1));
    assert_eq!(g[14 + 7], 63);
    assert_eq!(&g[0..6], &GW.0);
    // Echo request to the router's address.
    let mut e = f.clone();
    e[14 + 6] = IpProto::ICMPV6;
    e[14 + 24..14 + 40].copy_from_slice(&"2001:db8:18::1".parse::<Ipv6Addr>().unwrap().octets());
    e[54] = 128;
    let ph = checksum::pseudo_v6(
        "2001:db8:18::10".parse::<Ipv6Addr>().unwrap().octets(),
        "2001:db8:18::1".parse::<Ipv6Addr>().unwrap().octets(),
        58,
        8,
    );
    let c = !checksum::fold(checksum::sum(&e[54..62], ph));
    e[56..58].copy_from_slice(&c.to_be_bytes());
    assert_eq!(r.process(&mut e, 0), Verdict::Forward(0));
    assert_eq!(e[54], 129);
    assert_eq!(
        checksum::fold(checksum::sum(&e[54..62], ph)),
        0xffff,
        "checksum still valid"
    );
    // Hop limit 1: an ICMPv6 Time Exceeded quoting the packet.
    let mut h = f.clone();
    h[14 + 7] = 1;
    let orig = h.clone();
    assert_eq!(r.process(&mut h, 0), Verdict::Forward(0));
    assert_eq!(h.len(), 14 + 48 + 48);
    let ip = Ipv6Packet::new_checked(&h[14..]).unwrap();
    assert_eq!(ip.next_header(), IpProto::ICMPV6);
    assert_eq!(
        ip.src(),
        "2001:db8:18::1".parse::<Ipv6Addr>().unwrap().octets()
    );
    assert_eq!(
        ip.dst(),
        "2001:db8:18::10".parse::<Ipv6Addr>().unwrap().octets()
    );
    let ph = checksum::pseudo_v6(ip.src(), ip.dst(), 58, u32::from(ip.payload_len()));
    assert_eq!(
        checksum::fold(checksum::sum(ip.payload(), ph)),
        0xffff,
        "ICMPv6 checksum valid"
    );
    assert_eq!((ip.payload()[0], ip.payload()[1]), (3, 0));
    assert_eq!(
        &ip.payload()[8..],
        &orig[14..],
        "quotes the invoking packet"
    );
}

pub(super) fn v6addr(s: &str) -> [u8; 16] {
    s.parse::<Ipv6Addr>().unwrap().octets()
}

/// An ICMPv6 ND message with a link-layer address option.
fn nd(
    ty: u8,
    src: &str,
    dst: &str,
    target: &str,
    opt: u8,
    mac: MacAddr,
    eth_dst: [u8; 6],
) -> Vec<u8> {
    let mut f = ip6(eth_dst, mac.0, IpProto::ICMPV6, 255, 32, src, dst);
    f[54] = ty;
    f[62..78].copy_from_slice(&v6addr(target));
    f[78..80].copy_from_slice(&[opt, 1]);
    f[80..86].copy_from_slice(&mac.0);
    let ph = checksum::pseudo_v6(v6addr(src), v6addr(dst), 58, 32);
    let c = !checksum::fold(checksum::sum(&f[54..], ph));
    f[56..58].copy_from_slice(&c.to_be_bytes());
    f
}

#[test]
fn neighbor_discovery() {
    let mut r = router();
    // NS for the router's address → NA with its MAC; the sender is learned.
    let mut f = nd(
        135,
        "2001:db8:18::10",
        "ff02::1:ff00:1",
        "2001:db8:18::1",
        1,
        HOST,
        [0x33, 0x33, 0xff, 0, 0, 1],
    );
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(0));
    let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip.payload()[0], 136);
    assert_eq!(ip.payload()[4], 0xe0, "router, solicited, override");
    assert_eq!(&ip.payload()[8..24], &v6addr("2001:db8:18::1"));
    assert_eq!(&ip.payload()[26..32], &R0.0);
    assert_eq!(ip.dst(), v6addr("2001:db8:18::10"));
    let ph = checksum::pseudo_v6(ip.src(), ip.dst(), 58, 32);
    assert_eq!(checksum::fold(checksum::sum(ip.payload(), ph)), 0xffff);
    assert_eq!(&f[0..6], &HOST.0);
    assert_eq!(r.events()[Event::NdLearned as usize], 1);
    // A miss for a connected IPv6 destination becomes an NS; the NA teaches
    // the router, and the next packet goes out.
    let mut p = nd(128, "2001:db8:19::5", "2001:db8:18::10", "::", 0, GW, R0.0);
    p[14 + 6] = IpProto::UDP;
    p[14 + 7] = 64;
    let mut cfg = (*r.cfg).clone();
    cfg.fib = fib(&[("2001:db8:18::", 64, 0, None)]);
    let mut r = Router::new(cfg);
    let mut q = p.clone();
    assert_eq!(r.process(&mut q, 0), Verdict::Forward(0));
    let ip = Ipv6Packet::new_checked(&q[14..]).unwrap();
    assert_eq!(ip.payload()[0], 135, "a Neighbor Solicitation");
    assert_eq!(&ip.payload()[8..24], &v6addr("2001:db8:18::10"));
    assert_eq!(ip.dst(), v6addr("ff02::1:ff00:10"));
    assert_eq!(&q[0..6], &[0x33, 0x33, 0xff, 0, 0, 0x10]);
    let mut na = nd(
        136,
        "2001:db8:18::10",
        "2001:db8:18::1",
        "2001:db8:18::10",
        2,
        HOST,
        R0.0,
    );
    assert_eq!(r.process(&mut na, 0), Verdict::Drop(DropReason::Consumed));
    let mut q = p.clone();
    assert_eq!(r.process(&mut q, 0), Verdict::Forward(0));
    assert_eq!(&q[0..6], &HOST.0, "forwarded to the learned MAC");
    // ND from a non-neighbour (hop limit below 255) is refused.
    let mut bad = nd(
        135,
        "2001:db8:18::10",
        "ff02::1:ff00:1",
        "2001:db8:18::1",
        1,
        HOST,
        [0x33, 0x33, 0xff, 0, 0, 1],
    );
    bad[14 + 7] = 64;
    assert_eq!(r.process(&mut bad, 0), Verdict::Drop(DropReason::Malformed));
}

/// An echo request behind a hop-by-hop options header is still answered
/// (the extension-header walk finds the ICMPv6 header).
#[test]
fn ipv6_echo_behind_extension_header() {
    let mut r = router();
    let (src, dst) = (v6addr("2001:db8:18::10"), v6addr("2001:db8:18::1"));
    let mut f = vec![0u8; 14 + 40 + 8 + 8];
    f[0..6].copy_from_slice(&R0.0);
    f[6..12].copy_from_slice(&HOST.0);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    {
        let mut ip = Ipv6Packet::new_unchecked(&mut f[14..]);
        ip.set_version();
        ip.set_payload_len(16);
        ip.set_next_header(0);
        ip.set_hop_limit(64);
        ip.set_src(src);
        ip.set_dst(dst);
    }
    f[54] = IpProto::ICMPV6; // hop-by-hop: next ICMPv6, 8 bytes, PadN
    f[56..58].copy_from_slice(&[1, 4]);
    f[62..70].copy_from_slice(&[128, 0, 0, 0, 0, 7, 0, 1]);
    let ph = checksum::pseudo_v6(src, dst, 58, 8);
    let c = !checksum::fold(checksum::sum(&f[62..70], ph));
    f[64..66].copy_from_slice(&c.to_be_bytes());
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(0));
    assert_eq!(f[62], 129);
    assert_eq!(checksum::fold(checksum::sum(&f[62..70], ph)), 0xffff);
}

/// The staged burst path gives exactly what `process` gives packet by
/// packet: verdicts, rewritten bytes and events, for a burst mixing the
/// fast path's packets with every kind it hands to the full path.
#[test]
fn burst_path_matches_per_packet_path() {
    let mut bad_sum = udp4("198.18.0.2", "203.0.113.5", 64, 0);
    bad_sum[24] ^= 0xff;
    let mut options = udp4("198.18.0.2", "203.0.113.5", 64, 0);
    options[14] = 0x46;
    let mut arp_req = arp(1, HOST, "198.18.0.2", "198.18.0.1", BROADCAST);
    arp_req.truncate(42);
    let kinds: Vec<Vec<u8>> = vec![
        udp4("198.18.0.2", "203.0.113.5", 64, 0), // via the gateway
        udp4("198.18.0.2", "198.19.0.7", 64, 0),  // connected, no neighbour: ARP
        to_router4("198.18.0.2", "198.18.0.1", 47, 0), // to the router: GRE, unanswered
        udp4("198.18.0.2", "203.0.113.5", 1, 0),  // TTL expires
        udp4("198.18.0.2", "192.0.2.1", 64, 0),   // no route
        udp4("198.18.0.2", "127.0.0.1", 64, 0),   // martian
        udp4("198.18.0.2", "203.0.113.5", 64, 1400), // over port 1's MTU, DF
        bad_sum,
        options,
        arp_req,
        vec![0u8; 10],
    ];
    for round in 0..3u64 {
        // Bursts of different lengths and orders (more than one chunk).
        let burst: Vec<Vec<u8>> = (0..70)
            .map(|i| kinds[(i * 7 + round as usize * 3) % kinds.len()].clone())
            .collect();
        let mut a = router();
        let mut b = a.clone();
        a.tick(1_000 * (round + 1));
        b.tick(1_000 * (round + 1));
        let mut one = burst.clone();
        let want: Vec<Verdict> = one.iter_mut().map(|p| a.process(p, 0)).collect();
        let mut kinds_seen: Vec<Verdict> = want.clone();
        kinds_seen.sort_by_key(|v| format!("{v:?}"));
        kinds_seen.dedup();
        assert!(kinds_seen.len() >= 6, "a mixed burst: {kinds_seen:?}");
        let mut all = burst.clone();
        let mut v = vec![Verdict::Drop(DropReason::NotIp); all.len()];
        match b.process_burst(&mut all, 0, &mut v) {
            Some(x) => assert!(want.iter().all(|w| *w == x)),
            None => assert_eq!(v, want),
        }
        assert_eq!(all, one, "same bytes");
        assert_eq!(a.events(), b.events(), "same events");
    }
    // A burst of the fast path alone: one verdict, TTL and checksum right.
    let mut r = router();
    let mut pkts = vec![udp4("198.18.0.2", "203.0.113.5", 64, 0); 40];
    let mut v = vec![Verdict::Drop(DropReason::NotIp); 40];
    assert_eq!(
        r.process_burst(&mut pkts, 0, &mut v),
        Some(Verdict::Forward(1))
    );
    assert!(pkts
        .iter()
        .all(|p| p[22] == 63 && ip_ok(p) && p[..6] == GW.0 && p[6..12] == R1.0));
}

/// An ECMP route over gateways on two ports: 10,000 flows (source
/// addresses and ports) split evenly, each flow always on one path, the
/// burst path agreeing with the per-packet path, and the gateway's MAC
/// right for the path taken.
#[test]
fn multipath_routes_spread_flows_and_keep_them() {
    let gw0: MacAddr = MacAddr([2, 0xcc, 0, 0, 0, 1]);
    let paths = vec![
        NextHop {
            port: 0,
            via: Some("198.18.0.2".parse().unwrap()),
        },
        NextHop {
            port: 1,
            via: Some("198.19.0.2".parse().unwrap()),
        },
    ];
    let mut w = fib_writer(&[]);
    let mut cfg = (*router().cfg).clone();
    cfg.fib = w.fib().clone();
    cfg.neighbors4.push((0, "198.18.0.2".parse().unwrap(), gw0));
    let mut r = Router::new(cfg);
    // Added while the router exists: it sees the change at its next round.
    w.add("192.0.2.0".parse().unwrap(), 24, &paths).unwrap();
    r.enter();
    let mut per_port = [0usize; 2];
    let mut first = Vec::new();
    for i in 0..10_000u32 {
        let src = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 0xff, i & 0xff);
        let mut f = udp4(&src, "192.0.2.9", 64, 0);
        f[34..36].copy_from_slice(&(1024 + (i % 50000) as u16).to_be_bytes());
        let Verdict::Forward(p) = r.process(&mut f, 0) else {
            panic!("flow {i} not forwarded");
        };
        let want = if p == 0 { gw0 } else { GW };
        assert_eq!(&f[0..6], &want.0, "the MAC of the path's gateway");
        per_port[usize::from(p)] += 1;
        first.push((i, src, p));
    }
    for (p, n) in per_port.iter().enumerate() {
        assert!((4700..=5300).contains(n), "port {p}: {n} of 10000 flows");
    }
    // The same flows again, as bursts: the same paths.
    for chunk in first.chunks(32).take(50) {
        let mut frames: Vec<Vec<u8>> = chunk
            .iter()
            .map(|(i, src, _)| {
                let mut f = udp4(src, "192.0.2.9", 64, 0);
                f[34..36].copy_from_slice(&(1024 + (i % 50000) as u16).to_be_bytes());
                f
            })
            .collect();
        let mut v = vec![Verdict::Drop(DropReason::NoRoute); frames.len()];
        let same = r.process_burst(&mut frames, 0, &mut v);
        for (k, (_, _, p)) in chunk.iter().enumerate() {
            let got = same.unwrap_or(v[k]);
            assert_eq!(got, Verdict::Forward(*p));
        }
    }
    r.leave();
}

/// A packet from port 1 to the unresolved host 198.18.0.10 on port 0,
/// marked by its IP identification.
fn to_unresolved(id: u16) -> Vec<u8> {
    let mut f = udp4("198.19.0.50", "198.18.0.10", 64, 0);
    f[0..6].copy_from_slice(&R1.0);
    f[18..20].copy_from_slice(&id.to_be_bytes());
    let mut ip = Ipv4Packet::new_unchecked(&mut f[14..34]);
    ip.fill_checksum();
    f
}

/// What `emit` hands over: (port, frame) in order.
fn released(r: &mut Router) -> Vec<(u16, Vec<u8>)> {
    let mut out = Vec::new();
    ForwardMode::emit(r, &mut |p, f| {
        out.push((p, f.to_vec()));
        true
    });
    out
}

/// The first packet to a new neighbour is held while ARP resolves it and
/// sent, routed, when the reply comes: nothing is lost.
#[test]
fn packets_wait_for_arp_and_go_when_it_answers() {
    let mut r = router();
    r.tick(1_000_000_000);
    let mut f = to_unresolved(7);
    let orig = f.clone();
    assert_eq!(r.process(&mut f, 1), Verdict::Forward(0));
    assert_eq!(
        &f[12..14],
        &[0x08, 0x06],
        "the buffer became the ARP request"
    );
    assert_eq!(r.events()[Event::Held as usize], 1);
    assert!(!ForwardMode::pending(&r));
    assert!(released(&mut r).is_empty());
    // An ARP reply from someone else releases nothing.
    let mut other = arp(2, GW, "198.18.0.99", "198.18.0.1", R0);
    r.process(&mut other, 0);
    assert!(!ForwardMode::pending(&r));
    let mut reply = arp(2, HOST, "198.18.0.10", "198.18.0.1", R0);
    assert_eq!(
        r.process(&mut reply, 0),
        Verdict::Drop(DropReason::Consumed)
    );
    assert!(ForwardMode::pending(&r));
    let out = released(&mut r);
    assert_eq!(out.len(), 1);
    let (port, g) = &out[0];
    assert_eq!(*port, 0);
    assert_eq!(&g[0..6], &HOST.0);
    assert_eq!(&g[6..12], &R0.0);
    assert_eq!(g[14 + 8], 63, "TTL decremented once");
    assert!(ip_ok(g));
    assert_eq!(g.len(), orig.len());
    assert_eq!(&g[14..22], &orig[14..22], "the IP header up to the TTL");
    assert_eq!(&g[23..24], &orig[23..24], "the protocol");
    assert_eq!(&g[26..], &orig[26..], "addresses and payload");
    assert_eq!(r.events()[Event::HeldSent as usize], 1);
    assert!(!ForwardMode::pending(&r));
    assert!(released(&mut r).is_empty(), "sent once");
}

/// At most PER_NEIGHBOR copies wait per neighbour (the oldest make room),
/// they go out oldest first, and a refused send is counted.
#[test]
fn held_packets_are_bounded_per_neighbor_and_keep_their_order() {
    let mut r = router();
    for id in 1..=6u16 {
        let mut f = to_unresolved(id);
        r.process(&mut f, 1);
    }
    assert_eq!(r.events()[Event::Held as usize], 6);
    assert_eq!(r.events()[Event::HeldDropped as usize], 2);
    let mut reply = arp(2, HOST, "198.18.0.10", "198.18.0.1", R0);
    r.process(&mut reply, 0);
    let mut ids = Vec::new();
    let mut n = 0;
    ForwardMode::emit(&mut r, &mut |_, f| {
        n += 1;
        ids.push(u16::from_be_bytes([f[18], f[19]]));
        n != 2 // the second finds no buffer
    });
    assert_eq!(ids, vec![3, 4, 5, 6]);
    assert_eq!(r.events()[Event::HeldSent as usize], 3);
    assert_eq!(r.events()[Event::HeldDropped as usize], 3);
}

/// A neighbour that never answers: the copies expire after HOLD_NS; the
/// store never holds more than its slots.
#[test]
fn held_packets_expire_and_the_store_is_bounded() {
    let mut r = router();
    r.tick(1_000_000_000);
    let mut f = to_unresolved(1);
    r.process(&mut f, 1);
    r.tick(1_000_000_000 + hold::HOLD_NS + 1);
    assert_eq!(r.events()[Event::HeldExpired as usize], 1);
    let mut reply = arp(2, HOST, "198.18.0.10", "198.18.0.1", R0);
    r.process(&mut reply, 0);
    assert!(!ForwardMode::pending(&r));
    // Many unresolved neighbours: SLOTS held, the rest counted.
    let n = hold::SLOTS + 10;
    for i in 0..n {
        let mut f = udp4("198.19.0.50", &format!("198.18.0.{}", 100 + i), 64, 0);
        f[0..6].copy_from_slice(&R1.0);
        r.process(&mut f, 1);
    }
    assert_eq!(r.events()[Event::Held as usize], 1 + hold::SLOTS as u64);
    assert_eq!(r.events()[Event::HeldDropped as usize], 10);
}

/// IPv6: the packet that triggered a Neighbor Solicitation goes out when
/// the advertisement comes.
#[test]
fn ipv6_packets_wait_for_neighbor_discovery() {
    let mut cfg = (*router().cfg).clone();
    cfg.fib = fib(&[("2001:db8:18::", 64, 0, None)]);
    let mut r = Router::new(cfg);
    let mut p = nd(128, "2001:db8:19::5", "2001:db8:18::10", "::", 0, GW, R0.0);
    p[14 + 6] = IpProto::UDP;
    p[14 + 7] = 64;
    let mut q = p.clone();
    assert_eq!(r.process(&mut q, 0), Verdict::Forward(0));
    assert_eq!(Ipv6Packet::new_checked(&q[14..]).unwrap().payload()[0], 135);
    assert_eq!(r.events()[Event::Held as usize], 1);
    let mut na = nd(
        136,
        "2001:db8:18::10",
        "2001:db8:18::1",
        "2001:db8:18::10",
        2,
        HOST,
        R0.0,
    );
    r.process(&mut na, 0);
    let out = released(&mut r);
    assert_eq!(out.len(), 1);
    assert_eq!(&out[0].1[0..6], &HOST.0);
    assert_eq!(out[0].1[14 + 7], 63, "hop limit decremented");
    assert_eq!(&out[0].1[14 + 8..], &p[14 + 8..], "the rest unchanged");
}

const HOST_V: MacAddr = MacAddr([2, 0xcc, 0, 0, 0, 1]);
const HOST_Q: MacAddr = MacAddr([2, 0xdd, 0, 0, 0, 1]);

/// [`router`] with two sub-interfaces of port 1: VLAN 100
/// (198.19.100.1/24, interface 2) and QinQ 200/300 (198.19.200.1/24,
/// interface 3), a neighbour on each, and host 198.18.0.10 on port 0.
pub(super) fn vlan_router() -> Router {
    let mut cfg = (*router().cfg).clone();
    let sub = |outer, id, a: &str| Interface {
        mac: R1,
        ipv4: vec![(a.parse().unwrap(), 24)],
        ipv6: vec![],
        mtu: 1500,
        vlan: Some(Vlan { port: 1, outer, id }),
        down: false,
    };
    cfg.interfaces.push(sub(None, 100, "198.19.100.1"));
    cfg.interfaces.push(sub(Some(200), 300, "198.19.200.1"));
    cfg.fib = fib(&[("198.19.100.0", 24, 2, None), ("198.19.200.0", 24, 3, None)]);
    cfg.neighbors4
        .push((2, "198.19.100.5".parse().unwrap(), HOST_V));
    cfg.neighbors4
        .push((3, "198.19.200.5".parse().unwrap(), HOST_Q));
    cfg.neighbors4
        .push((0, "198.18.0.10".parse().unwrap(), HOST));
    Router::new(cfg)
}

/// `f` with tags (TPID, VID) inserted after the MACs, outermost first.
pub(super) fn tagged(f: &[u8], tags: &[(u16, u16)]) -> Vec<u8> {
    let mut t = f[..12].to_vec();
    for &(tpid, vid) in tags {
        t.extend_from_slice(&tpid.to_be_bytes());
        t.extend_from_slice(&vid.to_be_bytes());
    }
    t.extend_from_slice(&f[12..]);
    t
}

/// Routed onto a sub-interface, a frame leaves its port tagged (one tag,
/// or QinQ's two), with the neighbour's MAC and the TTL decremented.
#[test]
fn vlan_sub_interfaces_tag_what_they_send() {
    let mut r = vlan_router();
    let mut f = udp4("198.18.0.10", "198.19.100.5", 64, 0);
    let orig = f.clone();
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(1));
    assert_eq!(f.len(), orig.len() + 4);
    assert_eq!(&f[0..6], &HOST_V.0);
    assert_eq!(&f[6..12], &R1.0);
    assert_eq!(&f[12..18], &[0x81, 0x00, 0, 100, 0x08, 0x00]);
    assert_eq!(f[18 + 8], 63);
    assert!(Ipv4Packet::new_checked(&f[18..]).unwrap().verify_checksum());
    assert_eq!(&f[18 + 12..], &orig[14 + 12..], "addresses and payload");
    let mut f = udp4("198.18.0.10", "198.19.200.5", 64, 0);
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(1));
    assert_eq!(&f[0..6], &HOST_Q.0);
    assert_eq!(
        &f[12..22],
        &[0x88, 0xa8, 0, 200, 0x81, 0x00, 0x01, 0x2c, 0x08, 0x00]
    );
    // The burst path agrees (sub-interfaces take the per-packet way).
    let mut pkts = vec![
        udp4("198.18.0.10", "198.19.100.5", 64, 0),
        udp4("198.18.0.10", "203.0.113.9", 64, 0),
        udp4("198.18.0.10", "198.19.200.5", 64, 0),
    ];
    let mut each = pkts.clone();
    let mut v = [Verdict::Drop(DropReason::Truncated); 3];
    let mut r2 = vlan_router();
    // All three leave on port 1 (two of them tagged): one verdict.
    let same = r2.process_burst(&mut pkts, 0, &mut v);
    assert_eq!(same, Some(Verdict::Forward(1)));
    for (i, p) in each.iter_mut().enumerate() {
        assert_eq!(r.process(p, 0), Verdict::Forward(1));
        assert_eq!(*p, pkts[i]);
    }
    assert_eq!(&pkts[1][12..14], &[0x08, 0x00], "the untagged one");
}

/// A tagged frame is received on its sub-interface: untagged to route
/// on, answered tagged (echo, ARP); unknown tags are dropped as
/// `unknown_vlan`; a priority tag (VID 0) belongs to the port.
#[test]
fn vlan_sub_interfaces_receive_their_tags() {
    let mut r = vlan_router();
    let mut from = udp4("198.19.100.5", "198.18.0.10", 64, 0);
    from[0..6].copy_from_slice(&R1.0);
    let orig = from.clone();
    let mut f = tagged(&from, &[(0x8100, 100)]);
    assert_eq!(r.process(&mut f, 1), Verdict::Forward(0));
    assert_eq!(f.len(), orig.len(), "untagged on port 0");
    assert_eq!(&f[0..6], &HOST.0);
    assert_eq!(&f[12..14], &[0x08, 0x00]);
    assert_eq!(f[14 + 8], 63);
    // QinQ, with either outer TPID.
    for tpid in [0x88a8, 0x8100] {
        let mut from = udp4("198.19.200.5", "198.18.0.10", 64, 0);
        from[0..6].copy_from_slice(&R1.0);
        let mut f = tagged(&from, &[(tpid, 200), (0x8100, 300)]);
        assert_eq!(r.process(&mut f, 1), Verdict::Forward(0), "{tpid:x}");
        assert_eq!(&f[12..14], &[0x08, 0x00]);
    }
    // Unknown tags, tags on the wrong port, too many tags.
    for (tags, port) in [
        (&[(0x8100, 999)][..], 1),
        (&[(0x8100, 100)][..], 0),
        (&[(0x88a8, 200), (0x8100, 301)][..], 1),
        (&[(0x8100, 100), (0x8100, 5)][..], 1),
    ] {
        let mut f = tagged(&from, tags);
        assert_eq!(
            r.process(&mut f, port),
            Verdict::Drop(DropReason::UnknownVlan),
            "{tags:?} on {port}"
        );
    }
    // A priority tag: the port itself.
    let mut f = tagged(&udp4("198.18.0.10", "203.0.113.9", 64, 0), &[(0x8100, 0)]);
    assert_eq!(r.process(&mut f, 0), Verdict::Forward(1));
    assert_eq!(&f[0..6], &GW.0);
    assert_eq!(&f[12..14], &[0x08, 0x00]);
    // Echo to the sub-interface's address: answered on it, tagged.
    let mut echo = udp4("198.19.200.5", "198.19.200.1", 64, 0);
    echo[0..6].copy_from_slice(&R1.0);
    echo[14 + 9] = IpProto::ICMP;
    echo[34..42].copy_from_slice(&[8, 0, 0, 0, 0, 1, 0, 1]);
    let c = !checksum::fold(checksum::sum(&echo[34..], 0));
    echo[36..38].copy_from_slice(&c.to_be_bytes());
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut echo[14..34]);
        ip.fill_checksum();
    }
    let mut f = tagged(&echo, &[(0x88a8, 200), (0x8100, 300)]);
    assert_eq!(r.process(&mut f, 1), Verdict::Forward(1));
    assert_eq!(&f[12..22], &[0x88, 0xa8, 0, 200, 0x81, 0, 1, 0x2c, 8, 0]);
    assert_eq!(f[22 + 20], 0, "an echo reply");
    assert_eq!(r.events()[Event::EchoReply as usize], 1);
    // ARP for the VLAN 100 address: answered on VLAN 100; the asker is
    // learned on the sub-interface.
    let q = arp(1, HOST_Q, "198.19.100.7", "198.19.100.1", BROADCAST);
    let mut f = tagged(&q, &[(0x8100, 100)]);
    assert_eq!(r.process(&mut f, 1), Verdict::Forward(1));
    assert_eq!(&f[12..16], &[0x81, 0, 0, 100]);
    assert_eq!(u16::from_be_bytes([f[24], f[25]]), 2, "a reply");
    assert_eq!(&f[0..6], &HOST_Q.0);
    assert_eq!(
        r.neighbor4(2, "198.19.100.7".parse().unwrap()),
        Some(HOST_Q)
    );
    assert_eq!(r.neighbor4(1, "198.19.100.7".parse().unwrap()), None);
}

/// With a control-plane mirror, what is for the router and not answered
/// here goes to the kernel: traffic to its addresses (not echo), ARP
/// replies to it, Neighbor Advertisements; without, it is dropped or
/// consumed as before. A sub-interface punts to its own mirror (the
/// frame untagged), or drops without one.
#[test]
fn punts_to_the_kernel_only_with_a_mirror() {
    let mut cfg = (*vlan_router().cfg).clone();
    let mut plain = Router::new(cfg.clone());
    cfg.punt.mirrored = vec![true, true, false, false];
    let mut sub = cfg.clone();
    sub.punt.mirrored = vec![true, true, true, false];
    let mut sub = Router::new(sub);
    let mut r = Router::new(cfg);
    let mut tcp = udp4("198.18.0.10", "198.18.0.1", 64, 0);
    tcp[14 + 9] = IpProto::TCP;
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut tcp[14..34]);
        ip.fill_checksum();
    }
    assert_eq!(r.process(&mut tcp.clone(), 0), Verdict::Punt(0));
    assert_eq!(
        plain.process(&mut tcp.clone(), 0),
        Verdict::Drop(DropReason::ToRouter)
    );
    let mut reply = arp(2, HOST, "198.18.0.10", "198.18.0.1", R0);
    assert_eq!(r.process(&mut reply.clone(), 0), Verdict::Punt(0));
    assert_eq!(
        plain.process(&mut reply, 0),
        Verdict::Drop(DropReason::Consumed)
    );
    assert_eq!(r.neighbor4(0, "198.18.0.10".parse().unwrap()), Some(HOST));
    // Requests are still answered here, and echo too.
    let mut q = arp(1, HOST, "198.18.0.10", "198.18.0.1", BROADCAST);
    assert_eq!(r.process(&mut q, 0), Verdict::Forward(0));
    // On a sub-interface: no mirror, dropped.
    let mut from = udp4("198.19.100.5", "198.19.100.1", 64, 0);
    from[0..6].copy_from_slice(&R1.0);
    from[14 + 9] = IpProto::TCP;
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut from[14..34]);
        ip.fill_checksum();
    }
    let mut f = tagged(&from, &[(0x8100, 100)]);
    assert_eq!(
        r.process(&mut f.clone(), 1),
        Verdict::Drop(DropReason::ToRouter)
    );
    assert_eq!(sub.process(&mut f, 1), Verdict::Punt(2));
    assert_eq!(f, from, "the kernel's copy is untagged");
    let mut q = tagged(&from, &[(0x88a8, 200), (0x8100, 300)]);
    assert_eq!(sub.process(&mut q, 1), Verdict::Drop(DropReason::ToRouter));
    // Link-local multicast (an OSPF hello to 224.0.0.5) and limited
    // broadcast are the kernel's; other multicast is not.
    let group = |dst: &str, mac: [u8; 6]| {
        let mut f = udp4("198.18.0.10", dst, 1, 0);
        f[0..6].copy_from_slice(&mac);
        f[14 + 9] = 89;
        let mut ip = Ipv4Packet::new_unchecked(&mut f[14..34]);
        ip.fill_checksum();
        f
    };
    let hello = group("224.0.0.5", [0x01, 0x00, 0x5e, 0, 0, 5]);
    assert_eq!(r.process(&mut hello.clone(), 0), Verdict::Punt(0));
    assert_eq!(
        plain.process(&mut hello.clone(), 0),
        Verdict::Drop(DropReason::NotForUs)
    );
    let mut bcast = group("255.255.255.255", [0xff; 6]);
    assert_eq!(r.process(&mut bcast, 0), Verdict::Punt(0));
    let mut other = group("224.1.2.3", [0x01, 0x00, 0x5e, 1, 2, 3]);
    assert_eq!(
        r.process(&mut other, 0),
        Verdict::Drop(DropReason::NotForUs)
    );
    let mut bad = hello.clone();
    bad[14 + 10] ^= 0xff;
    assert_eq!(
        r.process(&mut bad, 0),
        Verdict::Drop(DropReason::BadChecksum)
    );
    // IPv6: a router solicitation to ff02::2 is the kernel's; ff05::2 is
    // not routed.
    let rs = |dst: &str| {
        let mut f = vec![0u8; 14 + 40 + 8];
        f[0..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&HOST.0);
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[18..20].copy_from_slice(&8u16.to_be_bytes());
        f[20] = 58;
        f[21] = 255;
        f[22..38].copy_from_slice(&v6addr("fe80::10"));
        f[38..54].copy_from_slice(&v6addr(dst));
        f[54] = 133;
        f
    };
    assert_eq!(r.process(&mut rs("ff02::2"), 0), Verdict::Punt(0));
    assert_eq!(
        plain.process(&mut rs("ff02::2"), 0),
        Verdict::Drop(DropReason::NotRoutable)
    );
    assert_eq!(
        r.process(&mut rs("ff05::2"), 0),
        Verdict::Drop(DropReason::NotRoutable)
    );
}

/// A packet of `proto` from `src` to the router's address `dst`
/// (198.18.0.1 on port 0 or 198.19.0.1 on port 1, to that port's MAC), to
/// destination port `dport`.
fn to_router4(src: &str, dst: &str, proto: u8, dport: u16) -> Vec<u8> {
    let mut f = udp4(src, dst, 64, 0);
    if dst.starts_with("198.19.") {
        f[0..6].copy_from_slice(&R1.0);
    }
    f[14 + 9] = proto;
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    Ipv4Packet::new_unchecked(&mut f[14..34]).fill_checksum();
    f
}

/// A punt rule for one interface (nftables' `iifname "lan" tcp dport 22
/// accept` in an input chain): SSH from the LAN reaches the kernel, from
/// the WAN it is denied; a rule for any interface admits both.
#[test]
fn punt_rules_can_name_the_interface() {
    let mut cfg = (*router().cfg).clone();
    cfg.punt = PuntPolicy {
        mirrored: vec![true, true],
        kernel_flows: None,
        rules: vec![
            PuntRule {
                proto: Some(IpProto::TCP),
                ports: Some((22, 22)),
                in_ifaces: vec![0],
                ..Default::default()
            },
            PuntRule {
                proto: Some(IpProto::TCP),
                ports: Some((179, 179)),
                ..Default::default()
            },
        ],
    };
    let mut r = Router::new(cfg);
    r.tick(1_000_000_000);
    let tcp = |dst: &str, dport: u16| to_router4("198.18.0.10", dst, IpProto::TCP, dport);
    assert_eq!(r.process(&mut tcp("198.18.0.1", 22), 0), Verdict::Punt(0));
    assert_eq!(
        r.process(&mut tcp("198.19.0.1", 22), 1),
        Verdict::Drop(DropReason::PuntDenied)
    );
    assert_eq!(r.process(&mut tcp("198.18.0.1", 179), 0), Verdict::Punt(0));
    assert_eq!(r.process(&mut tcp("198.19.0.1", 179), 1), Verdict::Punt(1));
}

/// Punt rules (control-plane policing): only what a rule admits reaches
/// the kernel, each rule within its rate; the rest is counted as denied
/// or policed. Neighbour messages for the kernel pass regardless.
#[test]
fn punt_rules_admit_and_police() {
    let mut cfg = (*router().cfg).clone();
    cfg.punt = PuntPolicy {
        mirrored: vec![true, true],
        kernel_flows: None,
        rules: vec![
            PuntRule {
                proto: Some(IpProto::TCP),
                ports: Some((179, 179)),
                from: vec![("198.18.0.0".parse().unwrap(), 24)],
                ..Default::default()
            },
            PuntRule {
                proto: Some(IpProto::UDP),
                ports: Some((3784, 3785)),
                ..Default::default()
            },
            PuntRule {
                proto: Some(IpProto::TCP),
                sports: Some((179, 179)),
                from: vec![("198.18.0.0".parse().unwrap(), 24)],
                ..Default::default()
            },
            PuntRule {
                proto: Some(89),
                rate: Some(10),
                ..Default::default()
            },
        ],
    };
    let mut r = Router::new(cfg);
    r.tick(1_000_000_000);
    let l4 = |src: &str, proto: u8, dport: u16| to_router4(src, "198.18.0.1", proto, dport);
    let denied = Verdict::Drop(DropReason::PuntDenied);
    assert_eq!(
        r.process(&mut l4("198.18.0.10", IpProto::TCP, 179), 0),
        Verdict::Punt(0)
    );
    assert_eq!(
        r.process(&mut l4("198.18.0.10", IpProto::TCP, 22), 0),
        denied
    );
    assert_eq!(
        r.process(&mut l4("198.18.7.10", IpProto::TCP, 179), 0),
        denied
    );
    assert_eq!(
        r.process(&mut l4("198.18.7.10", IpProto::UDP, 3785), 0),
        Verdict::Punt(0)
    );
    assert_eq!(
        r.process(&mut l4("198.18.0.10", IpProto::UDP, 53), 0),
        denied
    );
    // A peer's answer from its port 179 to the kernel's ephemeral port.
    let mut answer = l4("198.18.0.10", IpProto::TCP, 40000);
    answer[34..36].copy_from_slice(&179u16.to_be_bytes());
    assert_eq!(r.process(&mut answer.clone(), 0), Verdict::Punt(0));
    answer[26] = 7; // from 7.18.0.10: not the peering LAN
    Ipv4Packet::new_unchecked(&mut answer[14..34]).fill_checksum();
    assert_eq!(r.process(&mut answer, 0), denied);
    // A later fragment has no ports: not admitted by a port rule.
    let mut frag = l4("198.18.0.10", IpProto::TCP, 179);
    Ipv4Packet::new_unchecked(&mut frag[14..34]).set_flags_frag(0x0010);
    Ipv4Packet::new_unchecked(&mut frag[14..34]).fill_checksum();
    assert_eq!(r.process(&mut frag, 0), denied);
    // OSPF hellos to 224.0.0.5 at 10/s: a burst of one, then policed; 100
    // ms later one more.
    let hello = || {
        let mut f = udp4("198.18.0.10", "224.0.0.5", 1, 0);
        f[0..6].copy_from_slice(&[0x01, 0x00, 0x5e, 0, 0, 5]);
        f[14 + 9] = 89;
        Ipv4Packet::new_unchecked(&mut f[14..34]).fill_checksum();
        f
    };
    let got: Vec<Verdict> = (0..5).map(|_| r.process(&mut hello(), 0)).collect();
    let policed = Verdict::Drop(DropReason::PuntPoliced);
    assert_eq!(got, [Verdict::Punt(0), policed, policed, policed, policed]);
    r.tick(1_100_000_000);
    assert_eq!(r.process(&mut hello(), 0), Verdict::Punt(0));
    assert_eq!(r.process(&mut hello(), 0), policed);
    // The kernel still gets the ARP replies it resolves neighbours by, and
    // echo requests are still answered here.
    let mut reply = arp(2, HOST, "198.18.0.10", "198.18.0.1", R0);
    assert_eq!(r.process(&mut reply, 0), Verdict::Punt(0));
    let mut echo = l4("198.18.0.10", IpProto::ICMP, 0);
    echo[34] = 8;
    echo[35] = 0;
    let c = checksum::checksum(&echo[34..]);
    echo[36..38].copy_from_slice(&c.to_be_bytes());
    assert_eq!(r.process(&mut echo, 0), Verdict::Forward(0));
}

/// Neighbours mirrored from the kernel: they release held packets, are
/// used without ARP, never age, survive a reload, give way to configured
/// ones, and only the kernel's word removes them.
#[test]
fn kernel_neighbors_are_mirrored() {
    use crate::router::NeighborUpdate;
    let mut r = router();
    r.tick(1_000_000_000);
    let host: std::net::IpAddr = "198.18.0.10".parse().unwrap();
    let mut f = to_unresolved(1);
    assert_eq!(r.process(&mut f, 1), Verdict::Forward(0));
    assert_eq!(&f[12..14], &[0x08, 0x06], "an ARP request first");
    let u = NeighborUpdate(vec![(0, host, Some(HOST))].into());
    assert!(ForwardMode::reconfigure(&mut r, &u));
    let out = released(&mut r);
    assert_eq!(
        out.len(),
        1,
        "the held packet goes when the kernel resolves"
    );
    assert_eq!(&out[0].1[0..6], &HOST.0);
    // Used directly, and still after the learned-neighbour timeout.
    r.tick(1_000_000_000 + 600_000_000_000);
    let mut f = to_unresolved(2);
    assert_eq!(r.process(&mut f, 1), Verdict::Forward(0));
    assert_eq!(&f[0..6], &HOST.0, "no ARP: the mirrored MAC");
    // The same MAC seen by ARP leaves it the kernel's (it does not age).
    let mut reply = arp(2, HOST, "198.18.0.10", "198.18.0.1", R0);
    r.process(&mut reply, 0);
    r.tick(1_000_000_000 + 1_200_000_000_000);
    assert_eq!(r.neighbor4(0, "198.18.0.10".parse().unwrap()), Some(HOST));
    // A reload keeps it.
    let cfg = r.config().clone();
    r.reconfigure(cfg);
    assert_eq!(r.neighbor4(0, "198.18.0.10".parse().unwrap()), Some(HOST));
    // The configured neighbour 198.19.0.2 is not the kernel's to change.
    let gw: std::net::IpAddr = "198.19.0.2".parse().unwrap();
    let u = NeighborUpdate(vec![(1, gw, Some(HOST)), (1, gw, None)].into());
    assert!(ForwardMode::reconfigure(&mut r, &u));
    assert_eq!(r.neighbor4(1, "198.19.0.2".parse().unwrap()), Some(GW));
    // Removed: the next packet asks by ARP again.
    let u = NeighborUpdate(vec![(0, host, None)].into());
    assert!(ForwardMode::reconfigure(&mut r, &u));
    assert_eq!(r.neighbor4(0, "198.18.0.10".parse().unwrap()), None);
    let mut f = to_unresolved(3);
    assert_eq!(r.process(&mut f, 1), Verdict::Forward(0));
    assert_eq!(&f[12..14], &[0x08, 0x06]);
    // A host that moves (an ARP reply with another MAC) overrides the
    // kernel's entry.
    let u = NeighborUpdate(vec![(0, host, Some(HOST))].into());
    assert!(ForwardMode::reconfigure(&mut r, &u));
    let mut moved = arp(2, GW, "198.18.0.10", "198.18.0.1", R0);
    r.process(&mut moved, 0);
    assert_eq!(r.neighbor4(0, "198.18.0.10".parse().unwrap()), Some(GW));
    // IPv6 too.
    let v6: std::net::IpAddr = "2001:db8:18::10".parse().unwrap();
    let u = NeighborUpdate(vec![(0, v6, Some(HOST))].into());
    assert!(ForwardMode::reconfigure(&mut r, &u));
    assert!(r
        .neigh6
        .contains_key(&(0, u128::from_be_bytes(v6addr("2001:db8:18::10")))));
}

/// Routes `frames` on a clone of `r` packet by packet and on `r` as one
/// burst; asserts the same verdicts and bytes, returns the verdicts.
fn burst_as_each(r: &mut Router, frames: &[Vec<u8>]) -> (Vec<Verdict>, Vec<Vec<u8>>) {
    let mut each = r.clone();
    let mut one = frames.to_vec();
    let want: Vec<Verdict> = one.iter_mut().map(|p| each.process(p, 0)).collect();
    let mut all = frames.to_vec();
    let mut v = vec![Verdict::Drop(DropReason::NotIp); all.len()];
    if let Some(x) = r.process_burst(&mut all, 0, &mut v) {
        v.fill(x);
    }
    assert_eq!(v, want, "burst verdicts = per-packet verdicts");
    assert_eq!(all, one, "burst bytes = per-packet bytes");
    (v, all)
}

/// The burst path's cached next hops (`burst::Adj`) follow every change
/// while the router runs: a gateway's new MAC (from the kernel or ARP), a
/// route moved to another gateway and port (a FIB change between
/// rounds), and a smaller MTU (a reload); each time the burst agrees with
/// the per-packet path, which reads the tables afresh.
#[test]
fn burst_path_cache_follows_neighbour_route_and_mtu_changes() {
    let gw0 = MacAddr([2, 0xcc, 0, 0, 0, 1]);
    let moved = MacAddr([2, 0xbb, 0, 0, 0, 9]);
    let mut w = fib_writer(&[]);
    let mut cfg = (*router().cfg).clone();
    cfg.fib = w.fib().clone();
    // The gateway on port 1 as the kernel's (a configured one stays).
    cfg.neighbors4 = vec![(0, "198.18.0.2".parse().unwrap(), gw0)];
    let mut r = Router::new(cfg.clone());
    r.mirror_neighbors(&[(1, "198.19.0.2".parse().unwrap(), Some(GW))]);
    let burst: Vec<Vec<u8>> = (0..40)
        .map(|i| udp4(&format!("198.18.0.{}", 10 + i), "203.0.113.5", 64, 0))
        .collect();
    r.enter();
    let (v, out) = burst_as_each(&mut r, &burst);
    assert!(v.iter().all(|v| *v == Verdict::Forward(1)));
    assert!(out.iter().all(|f| f[..6] == GW.0 && f[6..12] == R1.0));
    // Twice: the second burst takes the cache.
    let (_, out) = burst_as_each(&mut r, &burst);
    assert!(out
        .iter()
        .all(|f| f[..6] == GW.0 && f[22] == 63 && ip_ok(f)));
    // The gateway moved to another MAC.
    r.mirror_neighbors(&[(1, "198.19.0.2".parse().unwrap(), Some(moved))]);
    let (_, out) = burst_as_each(&mut r, &burst);
    assert!(out.iter().all(|f| f[..6] == moved.0), "the new MAC");
    r.leave();
    // The route now leaves by port 0 through 198.18.0.2.
    let via0 = NextHop {
        port: 0,
        via: Some("198.18.0.2".parse().unwrap()),
    };
    w.add("203.0.113.0".parse().unwrap(), 24, &[via0]).unwrap();
    let via1 = NextHop {
        port: 1,
        via: Some("198.19.0.2".parse().unwrap()),
    };
    w.add("198.51.100.0".parse().unwrap(), 24, &[via1]).unwrap();
    r.enter();
    let (v, out) = burst_as_each(&mut r, &burst);
    assert!(v.iter().all(|v| *v == Verdict::Forward(0)), "{v:?}");
    assert!(out.iter().all(|f| f[..6] == gw0.0 && f[6..12] == R0.0));
    // Two chunks, each one port alone, the two ports apart (and the
    // ports mixed inside one chunk): per-packet verdicts, both cached.
    let other: Vec<Vec<u8>> = (0..32)
        .map(|i| udp4(&format!("198.18.0.{}", 10 + i), "198.51.100.7", 64, 0))
        .collect();
    let two = [&burst[..32], &other[..]].concat();
    for _ in 0..2 {
        let (v, _) = burst_as_each(&mut r, &two);
        assert!(v[..32].iter().all(|v| *v == Verdict::Forward(0)), "{v:?}");
        assert!(v[32..].iter().all(|v| *v == Verdict::Forward(1)), "{v:?}");
        let mixed: Vec<Vec<u8>> = two.iter().step_by(3).cloned().collect();
        burst_as_each(&mut r, &mixed);
    }
    // Ten chunks alternating the ports, the tenth short: past the chunks
    // whose verdicts wait for the burst's end (`burst::LAZY`), those are
    // written at once.
    let long: Vec<Vec<u8>> = (0..5).flat_map(|_| two.clone()).take(300).collect();
    let (v, _) = burst_as_each(&mut r, &long);
    for (i, v) in v.iter().enumerate() {
        assert_eq!(*v, Verdict::Forward((i / 32 % 2) as u16), "packet {i}");
    }
    r.leave();
    // Port 0's MTU below the packets' 36 bytes (DF set): each turns into
    // an ICMP "fragmentation needed" back to its sender (on port 0 too).
    let mut small = cfg;
    small.interfaces[0].mtu = 30;
    r.reconfigure(Arc::new(small));
    r.enter();
    let (_, out) = burst_as_each(&mut r, &burst);
    assert!(
        out.iter().all(|f| f[23] == 1 && f[34] == 3 && f[35] == 4),
        "{:02x?}",
        out[0]
    );
    r.leave();
}

/// An interface set down (the kernel mirror's `ip link set sl-PORT down`,
/// or a lost carrier): what arrives on it and what would leave by it is
/// dropped as `link_down`, on the burst and per-packet paths alike, with
/// the cached next hops forgotten; set up again, it forwards as before.
#[test]
fn a_down_interface_neither_receives_nor_sends() {
    let burst: Vec<Vec<u8>> = (0..40)
        .map(|i| udp4(&format!("198.18.0.{}", 10 + i), "203.0.113.5", 64, 0))
        .collect();
    let mut r = router();
    let cfg = (*r.cfg).clone();
    r.enter();
    let (v, _) = burst_as_each(&mut r, &burst);
    assert!(v.iter().all(|v| *v == Verdict::Forward(1)), "{v:?}");
    r.leave();
    // Port 1 (the way out) down.
    let mut out_down = cfg.clone();
    out_down.interfaces[1].down = true;
    r.reconfigure(Arc::new(out_down.clone()));
    r.enter();
    let (v, out) = burst_as_each(&mut r, &burst);
    assert!(
        v.iter().all(|v| *v == Verdict::Drop(DropReason::LinkDown)),
        "{v:?}"
    );
    assert_eq!(out, burst, "nothing rewritten");
    // A connected destination on the down port.
    let mut f = udp4("198.18.0.10", "198.19.0.7", 64, 0);
    assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::LinkDown));
    r.leave();
    // Port 0 (the way in) down: even an echo to the router is dropped.
    let mut in_down = cfg.clone();
    in_down.interfaces[0].down = true;
    r.reconfigure(Arc::new(in_down));
    r.enter();
    let (v, _) = burst_as_each(&mut r, &burst);
    assert!(v.iter().all(|v| *v == Verdict::Drop(DropReason::LinkDown)));
    let mut arp_req = arp(1, HOST, "198.18.0.10", "198.18.0.1", BROADCAST);
    assert_eq!(
        r.process(&mut arp_req, 0),
        Verdict::Drop(DropReason::LinkDown)
    );
    r.leave();
    // Up again: forwarded, through the cache from the second burst on.
    r.reconfigure(Arc::new(cfg));
    r.enter();
    for _ in 0..2 {
        let (v, out) = burst_as_each(&mut r, &burst);
        assert!(v.iter().all(|v| *v == Verdict::Forward(1)));
        assert!(out.iter().all(|f| f[..6] == GW.0 && ip_ok(f)));
    }
    r.leave();
}

/// Two workers: one holds the first packet to a new neighbour and asks
/// for it, the reply reaches the other (RSS or a fanout chose its queue).
/// The one that learned hands the neighbour on (`take_learned`, once,
/// the confirmations of a period as one entry); the holder, taking it,
/// sends what it held, rewritten for the neighbour, and routes the next
/// packets straight.
#[test]
fn a_neighbour_learned_by_one_worker_releases_what_another_holds() {
    let mut holder = router();
    let mut learner = router();
    holder.tick(1_000_000_000);
    learner.tick(1_000_000_000);
    let mut f = to_unresolved(9);
    assert_eq!(
        holder.process(&mut f, 1),
        Verdict::Forward(0),
        "ARP request"
    );
    assert!(ForwardMode::take_learned(&mut holder).is_none());
    for _ in 0..3 {
        let mut reply = arp(2, HOST, "198.18.0.10", "198.18.0.1", R0);
        assert_eq!(
            learner.process(&mut reply, 0),
            Verdict::Drop(DropReason::Consumed)
        );
    }
    let l = ForwardMode::take_learned(&mut learner).expect("learned");
    assert_eq!(
        &l.0[..],
        &[(0, "198.18.0.10".parse().unwrap(), HOST)],
        "one entry for three replies"
    );
    assert!(ForwardMode::take_learned(&mut learner).is_none(), "taken");
    assert!(!ForwardMode::pending(&holder));
    assert!(ForwardMode::reconfigure(&mut holder, &l));
    assert!(ForwardMode::pending(&holder));
    let out = released(&mut holder);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, 0);
    assert_eq!(&out[0].1[0..6], &HOST.0);
    assert_eq!(&out[0].1[18..20], &9u16.to_be_bytes(), "the held packet");
    assert!(
        ForwardMode::take_learned(&mut holder).is_none(),
        "not handed back"
    );
    let mut next = to_unresolved(10);
    assert_eq!(holder.process(&mut next, 1), Verdict::Forward(0));
    assert_eq!(&next[0..6], &HOST.0, "routed with the shared MAC");
    // A configured neighbour is not overridden by another worker's word.
    let mut r = router();
    let gw = (
        1,
        "198.19.0.2".parse().unwrap(),
        MacAddr([2, 0xee, 0, 0, 0, 1]),
    );
    r.learn_shared(&[gw]);
    let mut g = udp4("198.18.0.10", "203.0.113.7", 64, 0);
    assert_eq!(r.process(&mut g, 0), Verdict::Forward(1));
    assert_eq!(&g[0..6], &GW.0);
}

/// The burst path's per-slot cache and a flow's cached path, when routes
/// change under them: a next-hop slot freed and given another next hop
/// (the burst path must not rewrite with the old one), and a route moved
/// between next hops that both stay in use (the slots' version does not
/// change, so the per-slot cache stays; the flow's path must still
/// follow the route).
#[test]
fn cached_paths_follow_slot_reuse_and_routes_moving_between_next_hops() {
    let m3 = MacAddr([2, 0xbb, 0, 0, 0, 3]);
    let m0 = MacAddr([2, 0xcc, 0, 0, 0, 2]);
    let mut w = fib_writer(&[]);
    let mut cfg = (*router().cfg).clone();
    cfg.fib = w.fib().clone();
    cfg.neighbors4 = vec![
        (1, "198.19.0.2".parse().unwrap(), GW),
        (1, "198.19.0.3".parse().unwrap(), m3),
        (0, "198.18.0.2".parse().unwrap(), m0),
    ];
    let mut r = Router::new(cfg);
    let burst: Vec<Vec<u8>> = (0..40)
        .map(|i| udp4(&format!("198.18.0.{}", 10 + i), "203.0.113.5", 64, 0))
        .collect();
    let dst: std::net::IpAddr = "203.0.113.0".parse().unwrap();
    let hop = |port, via: &str| NextHop {
        port,
        via: Some(via.parse().unwrap()),
    };
    let slot = |w: &crate::fib::FibWriter| {
        let mut rd = w.fib().reader();
        rd.enter();
        let s = w.fib().lpm4().lookup(0xcb00_7105);
        rd.leave();
        s
    };
    for _ in 0..2 {
        r.enter();
        let (_, out) = burst_as_each(&mut r, &burst);
        assert!(out.iter().all(|f| f[..6] == GW.0));
        r.leave();
    }
    // The route's only next hop goes (its slot freed, and reclaimed: no
    // worker is inside), and the route comes back via another gateway:
    // the same slot, another next hop.
    let before = slot(&w);
    assert!(w.del(dst, 24));
    w.reclaim();
    w.add(dst, 24, &[hop(1, "198.19.0.3")]).unwrap();
    assert_eq!(slot(&w), before, "the slot was reused");
    r.enter();
    let (_, out) = burst_as_each(&mut r, &burst);
    assert!(out.iter().all(|f| f[..6] == m3.0), "{:02x?}", &out[0][..6]);
    r.leave();

    // Both gateways in use by other routes: moving the route between
    // them gives no slot a new next hop.
    w.add("198.51.100.0".parse().unwrap(), 24, &[hop(0, "198.18.0.2")])
        .unwrap();
    w.add("192.0.2.0".parse().unwrap(), 24, &[hop(1, "198.19.0.3")])
        .unwrap();
    let mut flow = crate::route_cache::RouteCache::default();
    let mut f = udp4("198.19.0.50", "203.0.113.5", 64, 0);
    r.enter();
    assert_eq!(
        r.forward4_cached(&mut f, 1, &mut flow, || 0, || {}),
        Verdict::Forward(1)
    );
    let (_, out) = burst_as_each(&mut r, &burst);
    assert!(out.iter().all(|f| f[..6] == m3.0));
    r.leave();
    let hops = w.fib().hops_version();
    w.add(dst, 24, &[hop(0, "198.18.0.2")]).unwrap();
    assert_eq!(w.fib().hops_version(), hops, "no slot changed");
    r.enter();
    let mut f = udp4("198.19.0.50", "203.0.113.5", 64, 0);
    assert_eq!(
        r.forward4_cached(&mut f, 1, &mut flow, || 0, || {}),
        Verdict::Forward(0),
        "the flow follows its route"
    );
    assert_eq!(&f[..6], &m0.0);
    let (v, out) = burst_as_each(&mut r, &burst);
    assert!(v.iter().all(|v| *v == Verdict::Forward(0)));
    assert!(out.iter().all(|f| f[..6] == m0.0));
    r.leave();
}

/// A TCP segment (20-byte header, `flags`) from `src`:40000 to the
/// router's address `dst`:`dport`, sequence 1000, acknowledging 7.
fn tcp_to_router4(src: &str, dst: &str, dport: u16, flags: u8) -> Vec<u8> {
    let mut f = udp4(src, dst, 64, 4);
    if dst.starts_with("198.19.") {
        f[0..6].copy_from_slice(&R1.0);
    }
    f[14 + 9] = IpProto::TCP;
    Ipv4Packet::new_unchecked(&mut f[14..34]).fill_checksum();
    f[34..36].copy_from_slice(&40000u16.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f[38..42].copy_from_slice(&1000u32.to_be_bytes());
    f[42..46].copy_from_slice(&7u32.to_be_bytes());
    f[46] = 5 << 4;
    f[47] = flags;
    f
}

/// The TCP (or UDP) checksum of the IPv4 frame `f` is valid.
fn l4_ok4(f: &[u8]) -> bool {
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    let l4 = ip.payload();
    let ph = checksum::pseudo_v4(ip.src(), ip.dst(), ip.protocol(), l4.len() as u16);
    checksum::fold(checksum::sum(l4, ph)) == 0xffff
}

/// With no mirror (no kernel behind the port), a segment or datagram to
/// one of the router's addresses is answered as Linux answers a port
/// nothing listens on: a SYN with RST+ACK acknowledging it, a stray ACK
/// with a RST at its acknowledgment number, UDP with ICMP port
/// unreachable, each from the address it was sent to (198.19.0.1,
/// reached through port 0), with valid checksums; a reset, another
/// protocol or a fragment is dropped as `to_router`. The answers share
/// the ICMP rate.
#[test]
fn a_closed_port_of_the_router_is_answered_as_the_kernel_does() {
    let mut r = router();
    r.tick(1_000_000_000);
    let mut syn = tcp_to_router4("198.18.0.10", "198.19.0.1", 22, 0x02);
    syn[0..6].copy_from_slice(&R0.0);
    assert_eq!(r.process(&mut syn, 0), Verdict::Forward(0));
    assert_eq!(syn.len(), 14 + 40);
    assert_eq!(&syn[0..6], &HOST.0);
    assert_eq!(&syn[6..12], &R0.0);
    assert_eq!(
        &syn[26..30],
        &[198, 19, 0, 1],
        "from the address it was sent to"
    );
    assert_eq!(&syn[30..34], &[198, 18, 0, 10]);
    assert_eq!(
        (&syn[34..36], &syn[36..38]),
        (&[0, 22][..], &40000u16.to_be_bytes()[..])
    );
    assert_eq!(syn[47], 0x14, "RST+ACK");
    assert_eq!(&syn[42..46], &1001u32.to_be_bytes(), "acknowledges the SYN");
    assert!(ip_ok(&syn) && l4_ok4(&syn));
    let mut ack = tcp_to_router4("198.18.0.10", "198.18.0.1", 22, 0x10);
    assert_eq!(r.process(&mut ack, 0), Verdict::Forward(0));
    assert_eq!(ack[47], 0x04, "RST");
    assert_eq!(&ack[38..42], &7u32.to_be_bytes(), "at its acknowledgment");
    assert!(l4_ok4(&ack));
    assert_eq!(r.events()[Event::TcpReset as usize], 2);
    let mut udp = udp4("198.18.0.10", "198.18.0.1", 64, 0);
    let sent = udp.clone();
    assert_eq!(r.process(&mut udp, 0), Verdict::Forward(0));
    assert_eq!((udp[23], udp[34], udp[35]), (IpProto::ICMP, 3, 3));
    assert_eq!(&udp[26..30], &[198, 18, 0, 1]);
    assert_eq!(&udp[42..42 + 28], &sent[14..14 + 28], "the datagram quoted");
    assert!(ip_ok(&udp));
    let to_router = Verdict::Drop(DropReason::ToRouter);
    let mut rst = tcp_to_router4("198.18.0.10", "198.18.0.1", 22, 0x04);
    assert_eq!(r.process(&mut rst, 0), to_router);
    assert_eq!(
        r.process(&mut to_router4("198.18.0.10", "198.18.0.1", 47, 0), 0),
        to_router
    );
    let mut frag = udp4("198.18.0.10", "198.18.0.1", 64, 0);
    Ipv4Packet::new_unchecked(&mut frag[14..34]).set_flags_frag(0x2000);
    Ipv4Packet::new_unchecked(&mut frag[14..34]).fill_checksum();
    assert_eq!(r.process(&mut frag, 0), to_router);
    // IPv6: port unreachable (type 1 code 4) from the router's address.
    let mut u6 = udp6("2001:db8:18::10", "2001:db8:18::1");
    assert_eq!(r.process(&mut u6, 0), Verdict::Forward(0));
    assert_eq!((u6[20], u6[54], u6[55]), (IpProto::ICMPV6, 1, 4));
    assert_eq!(&u6[22..38], &v6addr("2001:db8:18::1"));
    // The answers share the ICMP bucket (a burst of 100 at 1000/s): a
    // flood of SYNs gets at most the bucket's worth.
    let answered = (0..300)
        .filter(|_| {
            let mut s = tcp_to_router4("198.18.0.10", "198.18.0.1", 22, 0x02);
            r.process(&mut s, 0) == Verdict::Forward(0)
        })
        .count();
    assert!(answered <= 100, "{answered}");
}

/// Punt rules as an input chain (nftables' `chain input`: `iifname "lan"
/// tcp dport 22 accept`, `tcp dport 22 reject`, `udp dport 53 drop`,
/// `reject with icmp admin-prohibited`): with a mirror, SSH from the LAN
/// is punted; from the WAN it is refused with a reset; DNS is dropped as
/// denied; the rest, echo requests included, is refused with
/// admin-prohibited. Without a mirror, an accepted packet is answered as
/// a closed port. (Rules that match no echo request leave pings
/// answered: `punt_rules_admit_and_police`.)
#[test]
fn punt_rules_are_an_input_chain() {
    let rules = vec![
        PuntRule {
            proto: Some(IpProto::TCP),
            ports: Some((22, 22)),
            in_ifaces: vec![0],
            ..Default::default()
        },
        PuntRule {
            action: Action::Reject(RejectWith::Auto),
            proto: Some(IpProto::TCP),
            ports: Some((22, 22)),
            ..Default::default()
        },
        PuntRule {
            action: Action::Drop,
            proto: Some(IpProto::UDP),
            ports: Some((53, 53)),
            ..Default::default()
        },
        PuntRule {
            action: Action::Reject(RejectWith::AdminProhibited),
            ..Default::default()
        },
    ];
    let mut cfg = (*router().cfg).clone();
    cfg.punt = PuntPolicy {
        mirrored: vec![true, true],
        kernel_flows: None,
        rules,
    };
    let mut r = Router::new(cfg.clone());
    r.tick(1_000_000_000);
    let lan = || tcp_to_router4("198.18.0.10", "198.18.0.1", 22, 0x02);
    let wan = || tcp_to_router4("203.0.113.9", "198.19.0.1", 22, 0x02);
    assert_eq!(r.process(&mut lan(), 0), Verdict::Punt(0));
    let mut w = wan();
    assert_eq!(r.process(&mut w, 1), Verdict::Forward(1));
    assert_eq!(w[47], 0x14, "rejected with a reset");
    assert_eq!(&w[26..30], &[198, 19, 0, 1]);
    let mut dns = udp4("203.0.113.9", "198.19.0.1", 64, 0);
    dns[0..6].copy_from_slice(&R1.0);
    assert_eq!(
        r.process(&mut dns, 1),
        Verdict::Drop(DropReason::PuntDenied)
    );
    // The catch-all takes echo requests too (nftables' input chain sees
    // them): admin-prohibited.
    let mut ping = echo4("198.18.0.10", "198.18.0.1");
    assert_eq!(r.process(&mut ping, 0), Verdict::Forward(0));
    assert_eq!((ping[34], ping[35]), (3, 13));
    let mut other = tcp_to_router4("203.0.113.9", "198.19.0.1", 80, 0x02);
    assert_eq!(r.process(&mut other, 1), Verdict::Forward(1));
    assert_eq!((other[23], other[34], other[35]), (IpProto::ICMP, 3, 13));
    // Without a mirror: SSH from the LAN is accepted, and nothing
    // listens: a reset; the catch-all still answers admin-prohibited.
    cfg.punt.mirrored = vec![false, false];
    let mut r = Router::new(cfg);
    r.tick(1_000_000_000);
    let mut l = lan();
    assert_eq!(r.process(&mut l, 0), Verdict::Forward(0));
    assert_eq!(l[47], 0x14);
    let mut ntp = udp4("198.18.0.10", "198.18.0.1", 64, 0);
    ntp[36..38].copy_from_slice(&123u16.to_be_bytes());
    assert_eq!(r.process(&mut ntp, 0), Verdict::Forward(0));
    assert_eq!((ntp[34], ntp[35]), (3, 13), "admin-prohibited");
}

/// The burst path's IPv6 stage (`burst::route6_chunk`) gives exactly what
/// `process` gives packet by packet, for bursts mixing plain IPv6 packets
/// (through the cached next hop) with every kind of IPv6 packet it leaves
/// to the full path (hop limit 1, the router's own address, no route, an
/// extension header, neighbour discovery, multicast, over the MTU, to
/// another MAC, truncated) and IPv4; the cache follows a gateway's new
/// MAC and a smaller MTU.
#[test]
fn ipv6_burst_path_matches_per_packet_path() {
    let via = udp6("2001:db8:18::10", "2001:db8:19::77");
    let mut hop1 = via.clone();
    hop1[14 + 7] = 1;
    let mut ext = ip6(
        R0.0,
        HOST.0,
        0,
        64,
        16,
        "2001:db8:18::10",
        "2001:db8:19::77",
    );
    ext[54] = IpProto::UDP; // hop-by-hop, 8 bytes, then 8 of "UDP"
    ext[56..58].copy_from_slice(&[1, 4]);
    let mut echo = via.clone();
    echo[14 + 6] = IpProto::ICMPV6;
    echo[54] = 128;
    let ns = nd(
        135,
        "2001:db8:18::10",
        "2001:db8:18::1",
        "2001:db8:18::1",
        1,
        HOST,
        R0.0,
    );
    let mut other_mac = via.clone();
    other_mac[5] ^= 0x40;
    let mut truncated = via.clone();
    truncated.truncate(14 + 40 + 4);
    let kinds: Vec<Vec<u8>> = vec![
        via.clone(),
        udp6("2001:db8:18::10", "2001:db8:18::1"), // the router's own
        hop1,
        udp6("2001:db8:18::10", "2001:db8:99::1"), // no route
        ext,
        echo,
        ns,
        udp6("2001:db8:18::10", "ff0e::1"), // multicast
        ip6(
            R0.0,
            HOST.0,
            IpProto::UDP,
            64,
            1400,
            "2001:db8:18::10",
            "2001:db8:19::77",
        ), // over port 1's MTU of 1,400
        other_mac,
        truncated,
        udp4("198.18.0.2", "203.0.113.5", 64, 0),
    ];
    for round in 0..4usize {
        let burst: Vec<Vec<u8>> = (0..70)
            .map(|i| kinds[(i * 5 + round * 3) % kinds.len()].clone())
            .collect();
        let mut r = router();
        r.tick(1_000);
        let (v, _) = burst_as_each(&mut r, &burst);
        let mut seen = v.clone();
        seen.sort_by_key(|v| format!("{v:?}"));
        seen.dedup();
        assert!(seen.len() >= 5, "a mixed burst: {seen:?}");
        // Again, with the next hop cached: still the same.
        burst_as_each(&mut r, &burst);
        assert!(!r.adj6.is_empty(), "the gateway's next hop is cached");
    }
    // A burst of plain IPv6 alone: one verdict, hop limit and MACs; the
    // gateway as the kernel's neighbour (a configured one stays).
    let mut w = router();
    let mut cfg = (*w.cfg).clone();
    cfg.neighbors6.clear();
    let mut r = Router::new(cfg);
    r.mirror_neighbors(&[(1, "2001:db8:19::2".parse().unwrap(), Some(GW))]);
    let mut pkts = vec![via.clone(); 40];
    let mut v = vec![Verdict::Drop(DropReason::NotIp); 40];
    assert_eq!(
        r.process_burst(&mut pkts, 0, &mut v),
        Some(Verdict::Forward(1))
    );
    assert!(pkts
        .iter()
        .all(|p| p[21] == 63 && p[..6] == GW.0 && p[6..12] == R1.0));
    // The gateway's new MAC (from the kernel), then a smaller MTU.
    let moved = MacAddr([2, 0xbb, 0, 0, 0, 9]);
    r.mirror_neighbors(&[(1, "2001:db8:19::2".parse().unwrap(), Some(moved))]);
    let burst = vec![via.clone(); 40];
    let (_, out) = burst_as_each(&mut r, &burst);
    assert!(out.iter().all(|f| f[..6] == moved.0), "the new MAC");
    let mut small = (*w.cfg).clone();
    small.interfaces[1].mtu = 40 + 7;
    w.reconfigure(Arc::new(small));
    let (v, out) = burst_as_each(&mut w, &burst);
    assert!(v.iter().all(|v| *v == Verdict::Forward(0)), "{v:?}");
    assert!(
        out.iter().all(|f| f[54] == 2),
        "ICMPv6 packet too big: {:02x?}",
        out[0]
    );
}

/// On a table of IPv6 prefixes from /16 to /128 nested under a few /20s
/// over gateways on both ports (lookups that stop at every level), the
/// burst path's level-by-level lookups route every packet as the
/// per-packet path does, the cached next hops included.
#[test]
fn ipv6_burst_lookups_over_deep_prefixes_match_per_packet_path() {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(2460);
    let roots = ["2409:8000::", "2001:8000::", "2a00:1000::"];
    let mut routes: Vec<(String, u8, u16, Option<&str>)> = vec![];
    let mut hosts = vec![];
    for i in 0..300 {
        let root = u128::from(roots[i % roots.len()].parse::<Ipv6Addr>().unwrap());
        let len = [20u8, 24, 32, 40, 48, 56, 64, 96, 112, 127, 128][i % 11];
        let a = root | rng.random::<u128>() >> 20;
        let mask = if len == 128 { !0 } else { !(!0u128 >> len) };
        let (port, gw) = if i % 2 == 0 {
            (1, Some("2001:db8:19::2"))
        } else {
            (0, Some("2001:db8:18::2"))
        };
        routes.push((Ipv6Addr::from(a & mask).to_string(), len, port, gw));
        hosts.push(a);
    }
    let v6: Vec<(&str, u8, u16, Option<&str>)> = routes
        .iter()
        .map(|(a, l, p, g)| (a.as_str(), *l, *p, *g))
        .collect();
    let mut cfg = (*router().cfg).clone();
    cfg.fib = fib(&v6);
    cfg.neighbors6.push((
        0,
        "2001:db8:18::2".parse().unwrap(),
        MacAddr([2, 0xcc, 0, 0, 0, 2]),
    ));
    let mut r = Router::new(cfg);
    r.enter();
    let mut forwarded = [0usize; 2];
    for round in 0..20 {
        let burst: Vec<Vec<u8>> = (0..64)
            .map(|_| {
                let h = hosts[rng.random_range(0..hosts.len())];
                let d = match rng.random_range(0..3) {
                    0 => h,
                    1 => h ^ rng.random::<u128>() >> 64,
                    _ => h ^ rng.random::<u128>() >> 30,
                };
                udp6("2001:db8:18::10", &Ipv6Addr::from(d).to_string())
            })
            .collect();
        let (v, _) = burst_as_each(&mut r, &burst);
        if round > 0 {
            for v in v {
                if let Verdict::Forward(p) = v {
                    forwarded[usize::from(p)] += 1;
                }
            }
        }
    }
    r.leave();
    assert!(
        forwarded[0] > 100 && forwarded[1] > 100,
        "both gateways' routes taken: {forwarded:?}"
    );
}

/// One IPv6 frame of [`ipv6_frames`]: destination (an index into the
/// list [`ipv6_bursts_as_each`] sends to), a link-local source, hop
/// limit, next header, ICMPv6 type, payload length off the frame's, and
/// a corruption (none, MAC, type, version, cut, IPv4).
pub(super) type Frame6 = (usize, bool, u8, u8, u8, i32, usize);

/// Bursts of [`Frame6`]s, every field the IPv6 stage checks drawn at
/// random.
pub(super) fn ipv6_frames() -> impl Strategy<Value = Vec<Frame6>> {
    proptest::collection::vec(
        (
            0usize..6,
            any::<bool>(),
            any::<u8>(),
            prop_oneof![
                Just(IpProto::UDP),
                Just(IpProto::TCP),
                Just(IpProto::ICMPV6),
                Just(0u8),
                Just(44u8),
                any::<u8>()
            ],
            prop_oneof![
                Just(128u8),
                Just(133u8),
                Just(135u8),
                Just(136u8),
                any::<u8>()
            ],
            -3i32..3,
            0usize..8,
        ),
        1..80,
    )
}

/// `frames` as a burst through router `r` and one by one through a copy:
/// the same verdicts and bytes, once with nothing cached and once with
/// the next hop cached. Destinations: routed, unrouted, multicast, the
/// router's own, another's link-local address, the router's link-local
/// address.
pub(super) fn ipv6_bursts_as_each(mut r: Router, frames: &[Frame6]) {
    let ll = link_local(R0).to_string();
    let dsts = [
        "2001:db8:19::77",
        "2001:db8:99::1",
        "ff02::1",
        "2001:db8:18::1",
        "fe80::99",
        &ll,
    ];
    let burst: Vec<Vec<u8>> = frames
        .iter()
        .map(|&(d, scoped, hop, next, icmp, off, bad)| {
            if bad == 5 {
                return udp4("198.18.0.2", "203.0.113.5", 64, 0);
            }
            let src = if scoped {
                "fe80::10"
            } else {
                "2001:db8:18::10"
            };
            let mut f = ip6(R0.0, HOST.0, next, hop, 16, src, dsts[d]);
            f[54] = icmp;
            let len = (16 + off).max(0) as u16;
            f[18..20].copy_from_slice(&len.to_be_bytes());
            match bad {
                1 => f[2] ^= 1,
                2 => f[13] = 0xde,
                3 => f[14] = 0x40,
                4 => f.truncate(14 + 40 + 2),
                _ => {}
            }
            f
        })
        .collect();
    r.tick(1_000);
    r.enter();
    burst_as_each(&mut r, &burst);
    // The next hop cached by then: the same again.
    burst_as_each(&mut r, &burst);
    r.leave();
}

proptest! {
    /// Bursts of IPv6 frames with every field the IPv6 stage checks
    /// drawn at random (destination MAC, EtherType, version, payload
    /// length against the frame, hop limit, next header, the ICMPv6 type,
    /// destinations routed, unrouted, multicast, link-local and the
    /// router's own, its link-local one too, link-local sources, the
    /// frame cut short), mixed with IPv4: the burst path gives the
    /// per-packet path's verdicts and bytes (with a port that advertises:
    /// `advert`'s tests).
    #[test]
    fn random_ipv6_bursts_match_the_per_packet_path(frames in ipv6_frames()) {
        ipv6_bursts_as_each(router(), &frames);
    }
}
