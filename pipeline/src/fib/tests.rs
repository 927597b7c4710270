//! The live FIB against a naive model, a fresh build, real tables, and a
//! concurrent reader.

use super::*;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

fn hop(port: u16, via: &str) -> NextHop {
    NextHop {
        port,
        via: Some(via.parse().unwrap()),
    }
}

/// The longest matching route of a plain list (the model).
fn naive(routes: &HashMap<(IpAddr, u8), Vec<NextHop>>, dst: IpAddr) -> Option<Vec<NextHop>> {
    routes
        .iter()
        .filter(|((a, l), _)| match (a, dst) {
            (IpAddr::V4(p), IpAddr::V4(d)) => u32::from(*p) & mask4(*l) == u32::from(d) & mask4(*l),
            (IpAddr::V6(p), IpAddr::V6(d)) => {
                network6(u128::from(*p), *l) == network6(u128::from(d), *l)
            }
            _ => false,
        })
        .max_by_key(|((_, l), _)| *l)
        .map(|(_, p)| {
            let mut p = p.clone();
            p.sort();
            p.dedup();
            p
        })
}

fn sorted(p: &[NextHop]) -> Vec<NextHop> {
    let mut p = p.to_vec();
    p.sort();
    p
}

/// Random nested prefixes: a few parents and children of every length.
fn pool(rng: &mut SmallRng, n: usize) -> Vec<(IpAddr, u8)> {
    let mut v = Vec::new();
    for _ in 0..n {
        if rng.random_bool(0.6) {
            let base: u32 = 0x0a00_0000 | (rng.random::<u32>() & 0x00ff_ffff) & 0xfff0_ffff;
            let len = rng.random_range(0..=32u8);
            v.push((IpAddr::V4(Ipv4Addr::from(base & mask4(len))), len));
        } else {
            let base: u128 = (0x2001_0db8u128 << 96) | u128::from(rng.random::<u64>()) << 32;
            let len =
                [0, 16, 29, 32, 33, 40, 47, 48, 56, 63, 64, 100, 127, 128][rng.random_range(0..14)];
            v.push((IpAddr::V6(Ipv6Addr::from(network6(base, len))), len));
        }
    }
    v
}

fn probe(rng: &mut SmallRng, p: &[(IpAddr, u8)]) -> IpAddr {
    let (a, l) = p[rng.random_range(0..p.len())];
    match a {
        IpAddr::V4(x) => {
            let host = if l == 32 { 0 } else { rng.random::<u32>() >> l };
            IpAddr::V4(Ipv4Addr::from(u32::from(x) | host))
        }
        IpAddr::V6(x) => {
            let host = if l == 128 {
                0
            } else {
                rng.random::<u128>() >> l
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(x) | host))
        }
    }
}

fn paths_for(rng: &mut SmallRng, a: IpAddr) -> Vec<NextHop> {
    let n = if rng.random_bool(0.2) {
        rng.random_range(2..5)
    } else {
        1
    };
    (0..n)
        .map(|_| {
            let g = rng.random_range(1..6u8);
            match a {
                IpAddr::V4(_) => hop(u16::from(g % 3), &format!("198.18.0.{g}")),
                IpAddr::V6(_) => hop(u16::from(g % 3), &format!("2001:db8::{g}")),
            }
        })
        .collect()
}

#[test]
fn changes_in_place_match_a_model_and_a_fresh_build() {
    let mut rng = SmallRng::seed_from_u64(7);
    let p = pool(&mut rng, 400);
    let mut model: HashMap<(IpAddr, u8), Vec<NextHop>> = HashMap::default();
    let mut w = FibWriter::build(&[]).unwrap();
    for round in 0..30 {
        for _ in 0..200 {
            let (a, l) = p[rng.random_range(0..p.len())];
            if rng.random_bool(0.35) {
                assert_eq!(w.del(a, l), model.remove(&(a, l)).is_some());
            } else {
                let paths = paths_for(&mut rng, a);
                w.add(a, l, &paths).unwrap();
                model.insert((a, l), paths);
            }
        }
        for _ in 0..500 {
            let d = probe(&mut rng, &p);
            assert_eq!(
                w.lookup(d).map(sorted),
                naive(&model, d),
                "round {round}: {d}"
            );
        }
        // Nobody reads: everything retired is reusable.
        w.reclaim();
    }
    let routes: Vec<_> = model
        .iter()
        .map(|((a, l), p)| (*a, *l, p.clone()))
        .collect();
    let fresh = FibWriter::build(&routes).unwrap();
    for _ in 0..5000 {
        let d = probe(&mut rng, &p);
        assert_eq!(w.lookup(d).map(sorted), fresh.lookup(d).map(sorted), "{d}");
    }
    assert_eq!(w.fib().routes4() + w.fib().routes6(), model.len());
    // Deleting everything folds every group and frees every slot.
    for (a, l) in model.keys() {
        assert!(w.del(*a, *l));
    }
    w.reclaim();
    assert_eq!(w.hops(), 0);
    let ((g4, _), (g6, _)) = w.groups();
    assert_eq!((g4, g6), (0, 0), "every group folded back");
    assert_eq!(w.fib().routes4() + w.fib().routes6(), 0);
}

#[test]
fn the_full_table_changes_in_place_like_a_rebuild() {
    let Some(lines) = testdata::gz_lines("routes/bart_tier1_fulltable/prefixes.txt.gz") else {
        eprintln!("skipped: ../shared/data is missing");
        return;
    };
    let mut rng = SmallRng::seed_from_u64(3);
    let gws = [hop(1, "198.18.1.2"), hop(2, "198.18.2.2")];
    let gws6 = [hop(1, "2001:db8:1::2"), hop(2, "2001:db8:2::2")];
    let prefixes: Vec<(IpAddr, u8)> = lines
        .iter()
        .step_by(4)
        .filter_map(|l| crate::prefix::parse(l))
        .collect();
    let via = |a: IpAddr, i: usize| match a {
        IpAddr::V4(_) => vec![gws[i % 2]],
        IpAddr::V6(_) => vec![gws6[i % 2]],
    };
    let all: Vec<_> = prefixes
        .iter()
        .enumerate()
        .map(|(i, &(a, l))| (a, l, via(a, i)))
        .collect();
    let mut w = FibWriter::build(&all).unwrap();
    // Withdraw a third, re-announce half of those on the other gateway.
    let mut kept: HashMap<(IpAddr, u8), Vec<NextHop>> =
        all.iter().map(|(a, l, p)| ((*a, *l), p.clone())).collect();
    for (i, &(a, l)) in prefixes.iter().enumerate() {
        if rng.random_range(0..3) == 0 {
            assert!(w.del(a, l) || !kept.contains_key(&(a, l)));
            kept.remove(&(a, l));
            if i % 2 == 0 {
                let p = via(a, i + 1);
                w.add(a, l, &p).unwrap();
                kept.insert((a, l), p);
            }
        }
    }
    let routes: Vec<_> = kept.iter().map(|((a, l), p)| (*a, *l, p.clone())).collect();
    let fresh = FibWriter::build(&routes).unwrap();
    for _ in 0..200_000 {
        let d = if rng.random_bool(0.5) {
            probe(&mut rng, &prefixes)
        } else {
            IpAddr::V4(Ipv4Addr::from(rng.random::<u32>()))
        };
        assert_eq!(w.lookup(d), fresh.lookup(d), "{d}");
    }
    assert_eq!(w.fib().routes4(), fresh.fib().routes4());
    assert_eq!(w.fib().routes6(), fresh.fib().routes6());
}

#[test]
fn next_hops_are_shared_and_freed() {
    let mut w = FibWriter::build(&[]).unwrap();
    let g = [hop(1, "198.18.1.2")];
    for i in 0..1000u32 {
        w.add(IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + (i << 8))), 24, &g)
            .unwrap();
    }
    assert_eq!(w.hops(), 1, "one slot for 1000 routes through one gateway");
    assert!(
        !w.add("11.0.0.0".parse().unwrap(), 24, &g).unwrap(),
        "unchanged"
    );
    for i in 0..1000u32 {
        assert!(w.del(IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + (i << 8))), 24));
    }
    assert!(!w.del("11.0.0.0".parse().unwrap(), 24));
    assert_eq!(w.hops(), 0);
    assert_eq!(w.stats().added, 1000);
    assert_eq!(w.stats().deleted, 1000);
    // Wrong family and too many paths are refused, leaving nothing behind.
    assert_eq!(
        w.add("11.0.0.0".parse().unwrap(), 8, &[hop(1, "2001:db8::1")]),
        Err(FibError::Paths(1))
    );
    let many: Vec<_> = (0..17).map(|i| hop(1, &format!("198.18.1.{i}"))).collect();
    assert_eq!(
        w.add("11.0.0.0".parse().unwrap(), 8, &many),
        Err(FibError::Paths(17))
    );
    assert_eq!(w.hops(), 0);
}

#[test]
fn retired_groups_wait_for_readers() {
    let mut w = FibWriter::build(&[]).unwrap();
    let g = [hop(1, "198.18.1.2")];
    let p25: IpAddr = "10.1.2.128".parse().unwrap();
    w.add(p25, 25, &g).unwrap();
    assert_eq!(w.groups().0 .0, 1);
    let mut r = w.fib().reader();
    r.enter();
    assert!(w.del(p25, 25));
    assert_eq!(w.groups().0 .0, 0, "folded");
    w.reclaim();
    assert_eq!(w.w4.retired(), 1, "a reader inside since before: kept");
    // A new /25 elsewhere takes a fresh group, not the retired one.
    w.add("10.9.9.0".parse().unwrap(), 25, &g).unwrap();
    assert_eq!(w.w4.retired(), 1);
    r.leave();
    w.reclaim();
    assert_eq!(w.w4.retired(), 0);
}

#[test]
fn multipath_spreads_flows_evenly_and_keeps_them() {
    let mut w = FibWriter::build(&[]).unwrap();
    let paths: Vec<_> = (1..=4).map(|i| hop(i, &format!("198.18.{i}.2"))).collect();
    w.add("0.0.0.0".parse().unwrap(), 0, &paths).unwrap();
    let fib = w.fib().clone();
    let nh = fib.lpm4().lookup(0x0808_0808).unwrap();
    let mut rng = SmallRng::seed_from_u64(11);
    let flows: Vec<[u8; 24]> = (0..10_000)
        .map(|_| {
            let mut h = [0u8; 24];
            h[0] = 0x45;
            h[9] = if rng.random_bool(0.5) { 6 } else { 17 };
            rng.fill(&mut h[12..24]);
            h
        })
        .collect();
    let pick = |f: &[u8]| fib.path(nh, || flow_hash(f)).unwrap().1.port;
    let mut count = [0usize; 5];
    let first: Vec<u16> = flows.iter().map(|f| pick(f)).collect();
    for p in &first {
        count[usize::from(*p)] += 1;
    }
    for (i, &c) in count.iter().enumerate().skip(1) {
        assert!(
            (2300..=2700).contains(&c),
            "path {i}: {c} of 10000 flows (expected 2500 ± 8%)"
        );
    }
    // The reverse direction takes the same path; unrelated changes move
    // no flow.
    for _ in 0..100 {
        let a = IpAddr::V4(Ipv4Addr::from(rng.random::<u32>()));
        w.add(a, 24, &paths[..2]).unwrap();
    }
    for (f, p) in flows.iter().zip(&first) {
        let mut r = *f;
        r[12..16].copy_from_slice(&f[16..20]);
        r[16..20].copy_from_slice(&f[12..16]);
        r[20..22].copy_from_slice(&f[22..24]);
        r[22..24].copy_from_slice(&f[20..22]);
        assert_eq!(pick(&r), *p);
        assert_eq!(pick(f), *p);
    }
    assert_eq!(sorted(&fib.paths(nh)), paths);
}

#[test]
fn workers_see_old_or_new_never_torn() {
    // One thread changes routes under a reader that checks every answer
    // is one a route in the table could give.
    let mut w =
        FibWriter::build(&[("0.0.0.0".parse().unwrap(), 0, vec![hop(0, "198.18.0.1")])]).unwrap();
    let fib = w.fib().clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (fib, stop) = (fib.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut r = fib.reader();
            let mut rng = SmallRng::seed_from_u64(5);
            let mut seen = 0u64;
            while !stop.load(Ordering::Relaxed) {
                r.enter();
                for _ in 0..64 {
                    let a = 0x0a00_0000 | (rng.random::<u32>() & 0x0000_ffff);
                    let nh = fib.lpm4().lookup(a).expect("the default route covers all");
                    let (_, h) = fib.path(nh, || a).expect("a live slot");
                    let ok = match h.via {
                        Some(IpAddr::V4(g)) => {
                            let o = g.octets();
                            o[0] == 198 && o[1] == 18 && u16::from(o[3]) == h.port + 1
                        }
                        _ => false,
                    };
                    assert!(ok, "{h:?} for {a:x}");
                    seen += 1;
                }
                r.leave();
            }
            seen
        })
    };
    let mut rng = SmallRng::seed_from_u64(9);
    for i in 0..40_000u32 {
        let a = 0x0a00_0000 | (rng.random::<u32>() & 0x0000_ffff);
        let len = [16u8, 20, 24, 25, 28, 32][(i % 6) as usize];
        let p = IpAddr::V4(Ipv4Addr::from(a & mask4(len)));
        if rng.random_bool(0.5) {
            w.del(p, len);
        } else {
            let k = rng.random_range(1..4u16);
            let g = [hop(k - 1, &format!("198.18.9.{k}"))];
            w.add(p, len, &g).unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let seen = reader.join().unwrap();
    assert!(seen > 0);
}

#[test]
fn siblings_with_one_next_hop_stay_apart() {
    // Two /25s through one gateway fill their group with one leaf; it
    // must not fold into the /24's entry (deleting one later would find
    // nothing to delete), only a group holding leaves from above does.
    let g = [hop(1, "198.18.1.2")];
    let cover = [hop(2, "198.18.2.2")];
    let mut w = FibWriter::build(&[("10.0.0.0".parse().unwrap(), 8, cover.to_vec())]).unwrap();
    let g6 = [hop(1, "2001:db8:1::2")];
    for p in [
        "10.1.2.0",
        "10.1.2.128",
        "2001:db8::",
        "2001:db8:0:0:8000::",
    ] {
        let (len, g) = if p.contains(':') { (65, &g6) } else { (25, &g) };
        w.add(p.parse().unwrap(), len, g).unwrap();
    }
    // A more specific route inside, deleted: the group is one leaf again.
    w.add("10.1.2.64".parse().unwrap(), 26, &cover).unwrap();
    w.add(
        "2001:db8::".parse().unwrap(),
        80,
        &[hop(2, "2001:db8:2::2")],
    )
    .unwrap();
    assert!(w.del("10.1.2.64".parse().unwrap(), 26));
    assert!(w.del("2001:db8::".parse().unwrap(), 80));
    assert_eq!(w.groups().0 .0, 1);
    assert!(w.del("10.1.2.0".parse().unwrap(), 25));
    assert!(w.del("2001:db8::".parse().unwrap(), 65));
    assert_eq!(w.lookup("10.1.2.1".parse().unwrap()), Some(&cover[..]));
    assert_eq!(w.lookup("10.1.2.129".parse().unwrap()), Some(&g[..]));
    assert_eq!(w.lookup("2001:db8::1".parse().unwrap()), None);
    assert_eq!(
        w.lookup("2001:db8:0:0:8000::1".parse().unwrap()),
        Some(&g6[..])
    );
}
