//! Fragments through the gateway (virtual reassembly): a datagram's
//! first fragment is tracked, filtered and translated as any packet, and
//! its other fragments follow it; put back together, the datagrams that
//! leave are the translated ones, checksums valid.

use super::*;

/// Frame `f` (Ethernet, a 20-byte IPv4 header) as fragments of `chunk`
/// payload bytes (a multiple of 8), in order, Don't Fragment clear.
fn split4(f: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
    let payload = &f[34..14 + total];
    payload
        .chunks(chunk)
        .enumerate()
        .map(|(k, c)| {
            let mut fr = f[..34].to_vec();
            fr.extend_from_slice(c);
            let mut ip = Ipv4Packet::new_unchecked(&mut fr[14..34]);
            ip.set_total_len((20 + c.len()) as u16);
            let mf = (k + 1) * chunk < payload.len();
            ip.set_flags_frag(u16::from(mf) << 13 | (k * chunk / 8) as u16);
            ip.fill_checksum();
            fr
        })
        .collect()
}

/// The datagram IPv4 fragments `frags` make, in any order: the first's
/// frame with every payload at its offset (each header checked valid,
/// and of the same datagram, as a receiver reassembles: addresses,
/// identification, protocol).
fn join4(frags: &[Vec<u8>]) -> Vec<u8> {
    let mut payload = vec![];
    let mut head = None;
    for fr in frags {
        let ip = Ipv4Packet::new_checked(&fr[14..]).unwrap();
        assert!(ip.verify_checksum(), "a fragment's header checksum");
        let datagram = |f: &[u8]| [&f[18..20], &f[23..24], &f[26..34]].concat();
        assert_eq!(datagram(fr), datagram(&frags[0]), "one datagram");
        let off = usize::from(ip.flags_frag() & 0x1fff) * 8;
        let data = &fr[34..14 + usize::from(ip.total_len())];
        if off == 0 {
            head = Some(fr[..34].to_vec());
        }
        payload.resize(payload.len().max(off + data.len()), 0);
        payload[off..off + data.len()].copy_from_slice(data);
    }
    let mut whole = head.expect("a first fragment");
    let mut ip = Ipv4Packet::new_unchecked(&mut whole[14..34]);
    ip.set_total_len((20 + payload.len()) as u16);
    ip.set_flags_frag(0);
    ip.fill_checksum();
    whole.extend_from_slice(&payload);
    whole
}

fn big(n: u32) -> Vec<u8> {
    (0..n).map(|i| (i * 13 + 5) as u8).collect()
}

/// A 3,000-byte UDP datagram out in three fragments and its 3,000-byte
/// answer back in four: each fragment forwarded, translated; put back
/// together each is the translated datagram, checksums valid; one flow.
#[test]
fn a_translated_datagrams_fragments_follow_its_first_out_and_back() {
    let mut g = gateway();
    let whole = pkt(R0, CLIENT, 40000, SERVER, 53, 17, 0, &big(3000));
    let mut frags = split4(&whole, 1480);
    assert_eq!(frags.len(), 3);
    for (k, f) in frags.iter_mut().enumerate() {
        assert_eq!(g.process(f, 0), Verdict::Forward(1), "fragment {k}");
        assert_eq!(&f[26..30], &a(OUTSIDE).to_be_bytes(), "translated");
        assert_eq!((&f[0..6], f[22]), (&GW.0[..], 63), "routed");
    }
    let out = join4(&frags);
    assert!(valid(&out), "the datagram's UDP checksum");
    let (s, sp, d, dp) = addrs(&out);
    assert_eq!((s, d, dp), (a(OUTSIDE), a(SERVER), 53));
    let mut back = split4(&reply_to(&out, R1, 0), 1000);
    assert_eq!(back.len(), 4);
    for f in back.iter_mut() {
        assert_eq!(g.process(f, 1), Verdict::Forward(0));
    }
    let back = join4(&back);
    assert!(valid(&back));
    assert_eq!(addrs(&back), (a(SERVER), 53, a(CLIENT), 40000));
    assert_eq!(&back[42..], &big(3000)[..]);
    assert_ne!(sp, 0);
    assert_eq!(g.conntrack().len(), 1);
    g.tick(S);
    assert_eq!(event(&g, "reass_fragments"), 7);
    assert_eq!(event(&g, "nat_mapped"), 1);
}

/// Fragments that come before their first wait (their buffers
/// `consumed`) and leave, translated, from the worker's next emit, in the
/// order they came; the datagram is whole and valid.
#[test]
fn fragments_before_their_first_wait_for_it() {
    let mut g = gateway();
    let whole = pkt(R0, CLIENT, 40000, SERVER, 53, 17, 0, &big(2500));
    let mut frags = split4(&whole, 1000);
    for f in frags[1..].iter_mut().rev() {
        assert_eq!(g.process(f, 0), Verdict::Drop(DropReason::Consumed));
    }
    assert!(!ForwardMode::pending(&g));
    assert_eq!(g.process(&mut frags[0], 0), Verdict::Forward(1));
    assert!(ForwardMode::pending(&g));
    let mut sent = vec![frags[0].clone()];
    ForwardMode::emit(&mut g, &mut |p, b| {
        assert_eq!(p, 1);
        sent.push(b.to_vec());
        true
    });
    assert!(!ForwardMode::pending(&g));
    let offsets: Vec<u16> = sent
        .iter()
        .map(|f| u16::from_be_bytes([f[20], f[21]]))
        .collect();
    assert_eq!(offsets, [0x2000, 250, 0x2000 | 125], "as they came");
    let out = join4(&sent);
    assert!(valid(&out));
    assert_eq!(addrs(&out).0, a(OUTSIDE));
    assert_eq!(event(&g, "reass_held"), 2);
    assert_eq!(event(&g, "reass_dropped"), 0);
}

/// The first fragment's fate is the others': refused by a rule, they are
/// dropped as `filtered`; without their first they time out; a TCP
/// fragment at byte 8 (RFC 1858) and a first too short for its TCP
/// header are dropped, the latter's datagram with it.
#[test]
fn fragments_share_their_firsts_drop_and_wait_no_longer_than_a_second() {
    let dns = Rule {
        dport: (53, 53),
        ..Rule::any()
    };
    let mut g = gateway_with(
        vec![fw(dns, &[], state::NEW, Action::Drop)],
        Action::Accept,
        nat_cfg(PortRange::default()),
        64,
    );
    let whole = pkt(R0, CLIENT, 40000, SERVER, 53, 17, 0, &big(2000));
    for mut f in split4(&whole, 1000) {
        assert_eq!(g.process(&mut f, 0), Verdict::Drop(DropReason::Filtered));
    }
    // A datagram whose first never comes.
    let other = pkt(R0, CLIENT, 40001, SERVER, 80, 17, 0, &big(2000));
    let mut late = split4(&other, 1000)[1].clone();
    late[18] = 0x99; // another identification
    Ipv4Packet::new_unchecked(&mut late[14..34]).fill_checksum();
    assert_eq!(g.process(&mut late, 0), Verdict::Drop(DropReason::Consumed));
    ForwardMode::tick(&mut g, S + reass::TIMEOUT_NS);
    assert_eq!(event(&g, "reass_timeout"), 0);
    ForwardMode::tick(&mut g, S + reass::TIMEOUT_NS + 2);
    assert_eq!(event(&g, "reass_timeout"), 1);
    // TCP: a fragment at byte 8, and a first of 8 bytes of its header.
    let syn = pkt(R0, CLIENT, 40002, SERVER, 80, 6, 0x02, &big(40));
    let tcp = split4(&syn, 8);
    let mut at8 = tcp[1].clone();
    assert_eq!(g.process(&mut at8, 0), Verdict::Drop(DropReason::Fragment));
    let mut first = tcp[0].clone();
    assert_eq!(
        g.process(&mut first, 0),
        Verdict::Drop(DropReason::Truncated)
    );
    let mut rest = tcp[2].clone();
    assert_eq!(
        g.process(&mut rest, 0),
        Verdict::Drop(DropReason::Truncated)
    );
    assert_eq!(g.conntrack().len(), 0);
}

/// Two workers: the fragments of a reply to worker 0's mapping that reach
/// worker 1 are handed over, the later ones as their first was, and
/// worker 0 translates them all.
#[test]
fn fragments_of_a_reply_go_to_the_worker_of_its_mapping() {
    let mut w = two_workers();
    let mut f = pkt(R0, CLIENT, 40000, SERVER, 53, 17, 0, &big(100));
    assert_eq!(w[0].process(&mut f, 0), Verdict::Forward(1));
    let mut back = split4(&reply_to(&f, R1, 0), 16);
    assert!(back.len() > 1);
    for (k, r) in back.iter_mut().enumerate() {
        assert_eq!(w[1].process(r, 1), Verdict::Handoff(0), "fragment {k}");
        assert_eq!(w[0].process(r, 1), Verdict::Forward(0), "fragment {k}");
    }
    assert!(valid(&join4(&back)));
    assert_eq!(addrs(&join4(&back)).2, a(CLIENT));
}

/// IPv6: a datagram's fragments (fragment header, then UDP in the first)
/// are forwarded as their first was, or dropped with it.
#[test]
fn ipv6_fragments_follow_their_first() {
    let mut cfg = (**router().config()).clone();
    cfg.interfaces[0].ipv6 = vec![("2001:db8:18::1".parse().unwrap(), 64)];
    cfg.interfaces[1].ipv6 = vec![("2001:db8:19::1".parse().unwrap(), 64)];
    let hop = |port| vec![NextHop { port, via: None }];
    cfg.fib = crate::fib::FibWriter::build(&[
        ("2001:db8:18::".parse().unwrap(), 64, hop(0)),
        ("2001:db8:19::".parse().unwrap(), 64, hop(1)),
    ])
    .unwrap()
    .fib()
    .clone();
    cfg.neighbors6 = vec![(1, "2001:db8:19::7".parse().unwrap(), GW)];
    let dns = Rule {
        dport: (53, 53),
        ..Rule::any()
    };
    let rules = RuleSet::build(
        vec![fw(dns, &[], state::NEW, Action::Drop)],
        Action::Accept,
        &[],
    );
    let gcfg = GatewayConfig {
        rules: Arc::new(rules),
        nat: Arc::new(NatConfig::default()),
        ct_capacity: 64,
        timeouts: Timeouts::default(),
        tcp_window: true,
        workers: 1,
        mss_limits: Default::default(),
        mss_rules: Default::default(),
    };
    let mut g = Gateway::new(Router::new(cfg), &gcfg, 0);
    g.tick(S);
    let (c, s) = ("2001:db8:18::10", "2001:db8:19::7");
    for (dport, want) in [
        (7, Verdict::Forward(1)),
        (53, Verdict::Drop(DropReason::Filtered)),
    ] {
        let frags = udp6_fragments(c, s, dport, &big(2000), 1000, 7 + u32::from(dport));
        assert_eq!(frags.len(), 3);
        // The last before the middle: each follows the first.
        let mut order = [frags[0].clone(), frags[2].clone(), frags[1].clone()];
        for (k, f) in order.iter_mut().enumerate() {
            assert_eq!(g.process(f, 0), want, "port {dport}, fragment {k}");
            if want == Verdict::Forward(1) {
                assert_eq!(f[21], 63, "hop limit");
            }
        }
    }
    assert_eq!(g.conntrack().len(), 1);
    g.tick(S);
    assert_eq!(event(&g, "reass_fragments"), 6);
}

/// A UDP datagram from `src` port 5000 to `dst` port `dport` carrying
/// `payload`, as IPv6 fragments (Ethernet to R0) of `chunk` bytes of the
/// fragmentable part, identification `id`.
fn udp6_fragments(
    src: &str,
    dst: &str,
    dport: u16,
    payload: &[u8],
    chunk: usize,
    id: u32,
) -> Vec<Vec<u8>> {
    let (s6, d6): (std::net::Ipv6Addr, std::net::Ipv6Addr) =
        (src.parse().unwrap(), dst.parse().unwrap());
    let mut udp = vec![0u8; 8];
    udp[0..2].copy_from_slice(&5000u16.to_be_bytes());
    udp[2..4].copy_from_slice(&dport.to_be_bytes());
    udp[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    udp.extend_from_slice(payload);
    let ph = checksum::pseudo_v6(s6.octets(), d6.octets(), 17, udp.len() as u32);
    let c = !checksum::fold(checksum::sum(&udp, ph));
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    udp.chunks(chunk)
        .enumerate()
        .map(|(k, part)| {
            let mut f = vec![0u8; 14 + 40 + 8];
            f[0..6].copy_from_slice(&R0.0);
            f[6..12].copy_from_slice(&HOST.0);
            f[12..14].copy_from_slice(&[0x86, 0xdd]);
            f[14] = 0x60;
            f[18..20].copy_from_slice(&((8 + part.len()) as u16).to_be_bytes());
            (f[20], f[21]) = (44, 64);
            f[22..38].copy_from_slice(&s6.octets());
            f[38..54].copy_from_slice(&d6.octets());
            let mf = (k + 1) * chunk < udp.len();
            f[54] = 17;
            f[56..58].copy_from_slice(&(((k * chunk) as u16) | u16::from(mf)).to_be_bytes());
            f[58..62].copy_from_slice(&id.to_be_bytes());
            f.extend_from_slice(part);
            f
        })
        .collect()
}

/// Datagrams of `sizes` bytes of UDP payload from the client (source
/// ports 41000.., identifications 0x100..), each as fragments of `chunk`
/// bytes: (datagram, fragment) in order.
fn datagrams(sizes: &[usize], chunk: usize) -> Vec<(usize, Vec<u8>)> {
    let mut all = vec![];
    for (d, &n) in sizes.iter().enumerate() {
        let mut f = pkt(
            R0,
            CLIENT,
            41000 + d as u16,
            SERVER,
            53,
            17,
            0,
            &big(n as u32),
        );
        f[18..20].copy_from_slice(&(0x100 + d as u16).to_be_bytes());
        Ipv4Packet::new_unchecked(&mut f[14..34]).fill_checksum();
        all.extend(split4(&f, chunk).into_iter().map(|fr| (d, fr)));
    }
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Fragments of several datagrams in any order, some lost, through
    /// the masquerading gateway with the worker's emit after each packet:
    /// every datagram that lost nothing leaves whole, translated, its
    /// checksums valid; one whose first was lost sends nothing; every
    /// fragment is counted, and every one that waited is sent, dropped or
    /// timed out.
    #[test]
    fn fragments_in_any_order_leave_as_the_translated_datagrams(
        sizes in prop::collection::vec(100usize..2500, 1..4),
        chunk in (1usize..=24).prop_map(|c| c * 56),
        order in any::<prop::sample::Index>(),
        lost in prop::collection::vec(any::<prop::sample::Index>(), 0..3),
    ) {
        let mut g = gateway();
        let mut frags = datagrams(&sizes, chunk);
        // A rotation and a reversal of the order: firsts early, late and
        // last.
        let r = order.index(frags.len());
        frags.rotate_left(r);
        if r % 2 == 1 {
            frags.reverse();
        }
        let lost: Vec<usize> = lost.iter().map(|i| i.index(frags.len())).collect();
        let mut out: Vec<Vec<Vec<u8>>> = vec![vec![]; sizes.len()];
        let mut refused = vec![false; sizes.len()];
        let (mut fed, mut emitted) = (0u64, 0u64);
        for (k, (d, f)) in frags.iter_mut().enumerate() {
            if lost.contains(&k) {
                continue;
            }
            // (A datagram within one chunk is not fragmented at all.)
            fed += u64::from(f[20..22] != [0, 0]);
            match g.process(f, 0) {
                Verdict::Forward(1) => out[*d].push(f.clone()),
                Verdict::Drop(DropReason::Consumed) => {}
                Verdict::Drop(DropReason::Fragment) => refused[*d] = true,
                v => prop_assert!(false, "fragment {}: {:?}", k, v),
            }
            ForwardMode::emit(&mut g, &mut |p, b| {
                assert_eq!(p, 1);
                let id = usize::from(u16::from_be_bytes([b[18], b[19]])) - 0x100;
                out[id].push(b.to_vec());
                emitted += 1;
                true
            });
        }
        ForwardMode::tick(&mut g, 3 * S);
        let lost_of = |d: usize| lost.iter().any(|&k| frags[k].0 == d);
        let first_lost = |d: usize| {
            lost.iter().any(|&k| frags[k].0 == d && frags[k].1[20..22] == [0x20, 0])
        };
        for d in 0..sizes.len() {
            if first_lost(d) {
                prop_assert!(out[d].is_empty(), "datagram {}: its first was lost", d);
            } else if !lost_of(d) && !refused[d] {
                let whole = join4(&out[d]);
                prop_assert!(valid(&whole), "datagram {}", d);
                prop_assert_eq!(addrs(&whole).0, a(OUTSIDE));
                prop_assert_eq!(&whole[42..], &big(sizes[d] as u32)[..]);
            }
        }
        prop_assert_eq!(event(&g, "reass_fragments"), fed);
        prop_assert_eq!(
            event(&g, "reass_held"),
            emitted + event(&g, "reass_dropped") + event(&g, "reass_timeout")
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Fragments with any bytes changed in their headers, any length cut
    /// off, IPv4 and IPv6, first and later, through the gateway (and its
    /// emit and tick): nothing panics, and what is forwarded leaves by a
    /// port with a valid IPv4 header.
    #[test]
    fn mangled_fragments_are_dropped_or_forwarded_whole(
        pick in 0usize..4,
        edits in prop::collection::vec((0usize..80, any::<u8>()), 1..6),
        cut in 0usize..100,
    ) {
        let mut g = gateway();
        let v4 = split4(&pkt(R0, CLIENT, 40000, SERVER, 53, 17, 0, &big(300)), 160);
        let v6 = udp6_fragments("2001:db8:18::10", "2001:db8:19::7", 53, &big(300), 160, 9);
        let frames = [v4[0].clone(), v4[1].clone(), v6[0].clone(), v6[1].clone()];
        // The datagram's own first fragment first, so that later ones
        // have a fate to follow.
        let mut first = frames[pick & 2].clone();
        let _ = g.process(&mut first, 0);
        let mut f = frames[pick].clone();
        for (at, b) in edits {
            if at < f.len() {
                f[at] = b;
            }
        }
        f.truncate(f.len().saturating_sub(cut));
        let v = g.process(&mut f, 0);
        if let Verdict::Forward(p) = v {
            prop_assert!(p < 2, "{:?}", v);
            if f.len() >= 34 && f[12..14] == [0x08, 0x00] {
                prop_assert!(Ipv4Packet::new_checked(&f[14..]).is_ok_and(|ip| ip.verify_checksum()));
            }
        }
        ForwardMode::emit(&mut g, &mut |_, _| true);
        ForwardMode::tick(&mut g, 5 * S);
    }
}
