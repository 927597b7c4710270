//! The LPM tables against a reference on the full Internet table
//! (`../shared/data/routes/bart_tier1_fulltable`, 901,899 IPv4 and 160,147
//! IPv6 prefixes): a million random addresses and a million addresses
//! inside random prefixes per family. The reference checks, for every
//! prefix length from longest to shortest, whether the masked address is a
//! route: slow, and obviously right.

use pipeline::lpm::{Lpm4Builder, Lpm6Builder};
use pipeline::prefix::parse as parse_prefix;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::collections::HashMap;
use std::net::IpAddr;

fn mask(a: u128, len: u8, bits: u32) -> u128 {
    if len == 0 {
        0
    } else {
        a & (!0u128 << (bits - u32::from(len)))
    }
}

struct Reference {
    bits: u32,
    by_len: Vec<(u8, HashMap<u128, u32>)>,
}

impl Reference {
    fn new(routes: &[(u128, u8, u32)], bits: u32) -> Self {
        let mut m: HashMap<u8, HashMap<u128, u32>> = HashMap::new();
        for &(a, l, nh) in routes {
            m.entry(l).or_default().insert(mask(a, l, bits), nh);
        }
        let mut by_len: Vec<_> = m.into_iter().collect();
        by_len.sort_by_key(|b| std::cmp::Reverse(b.0));
        Reference { bits, by_len }
    }

    fn lookup(&self, a: u128) -> Option<u32> {
        self.by_len
            .iter()
            .find_map(|(l, m)| m.get(&mask(a, *l, self.bits)).copied())
    }
}

type Routes = Vec<(u128, u8, u32)>;

fn load() -> Option<(Routes, Routes)> {
    let lines = testdata::gz_lines("routes/bart_tier1_fulltable/prefixes.txt.gz")?;
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for (i, l) in lines.iter().enumerate() {
        let (a, len) = parse_prefix(l).unwrap_or_else(|| panic!("line {}: {l}", i + 1));
        // As many distinct next hops as the tables hold (65,536).
        let nh = (i % (pipeline::lpm::MAX_NEXT_HOP as usize + 1)) as u32;
        match a {
            IpAddr::V4(a) => v4.push((u128::from(u32::from(a)), len, nh)),
            IpAddr::V6(a) => v6.push((u128::from(a), len, nh)),
        }
    }
    Some((v4, v6))
}

#[test]
fn full_table_matches_reference() {
    let Some((v4, v6)) = load() else { return };
    assert_eq!(v4.len(), 901_899);
    assert_eq!(v6.len(), 160_147);
    let mut rng = SmallRng::seed_from_u64(7);

    let mut b = Lpm4Builder::new();
    for &(a, l, nh) in &v4 {
        b.add((a as u32).into(), l, nh);
    }
    let t4 = b.build().unwrap();
    let r4 = Reference::new(&v4, 32);
    let mut hits = 0;
    for i in 0..2_000_000 {
        let a: u32 = if i % 2 == 0 {
            rng.random()
        } else {
            let (p, l, _) = v4[rng.random_range(0..v4.len())];
            let host = if l == 32 { 0 } else { rng.random::<u32>() >> l };
            p as u32 | host
        };
        let want = r4.lookup(u128::from(a));
        assert_eq!(t4.lookup(a), want, "IPv4 {}", std::net::Ipv4Addr::from(a));
        hits += usize::from(want.is_some());
    }
    assert!(hits > 1_000_000, "most addresses are routed: {hits}");

    let mut b = Lpm6Builder::new();
    for &(a, l, nh) in &v6 {
        b.add(a.into(), l, nh);
    }
    let t6 = b.build().unwrap();
    let r6 = Reference::new(&v6, 128);
    let mut hits = 0;
    for i in 0..2_000_000 {
        let a: u128 = if i % 2 == 0 {
            // Global unicast space, where the routes are.
            (0x2000u128 << 112) | (rng.random::<u128>() >> 3)
        } else {
            let (p, l, _) = v6[rng.random_range(0..v6.len())];
            let host = if l == 128 {
                0
            } else {
                rng.random::<u128>() >> l
            };
            p | host
        };
        let want = r6.lookup(a);
        assert_eq!(t6.lookup(a), want, "IPv6 {}", std::net::Ipv6Addr::from(a));
        hits += usize::from(want.is_some());
    }
    assert!(hits > 1_000_000, "{hits}");
}
