//! `lpm`: the full Internet table in the LPM tables: build time, memory,
//! and lookups per second on one core for random addresses, addresses
//! inside the table's prefixes, and sequential addresses.

use anyhow::{Context, Result};
use clap::Parser;
use pipeline::lpm::{Lpm4, Lpm4Builder, Lpm6, Lpm6Builder, BURST};
use pipeline::prefix::parse as parse_prefix;
use pmd::sys::{rdtsc, Tsc};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::hint::black_box;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Arguments of `lpm`.
#[derive(Parser)]
pub struct LpmArgs {
    /// Addresses per measured pass.
    #[arg(long, default_value_t = 1 << 22)]
    addrs: usize,
    /// Passes (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

/// Loads the shared full table into builders; next hops are `i % 256`
/// (256 neighbours, as on a big router).
pub fn full_table() -> Result<(Lpm4Builder, Lpm6Builder)> {
    let lines = testdata::gz_lines("routes/bart_tier1_fulltable/prefixes.txt.gz")
        .context("../shared/data/routes/bart_tier1_fulltable/prefixes.txt.gz is missing")?;
    let (mut b4, mut b6) = (Lpm4Builder::new(), Lpm6Builder::new());
    for (i, l) in lines.iter().enumerate() {
        let (a, len) = parse_prefix(l).with_context(|| format!("line {}: {l}", i + 1))?;
        let nh = (i % 256) as u32;
        match a {
            IpAddr::V4(a) => {
                b4.add(a, len, nh);
            }
            IpAddr::V6(a) => {
                b6.add(a, len, nh);
            }
        }
    }
    Ok((b4, b6))
}

/// Prefixes of one family: address and length.
pub type Prefixes<A> = Vec<(A, u8)>;

/// The shared full table's prefixes by family (lines that do not parse
/// left out).
pub fn table_prefixes() -> Result<(Prefixes<u32>, Prefixes<u128>)> {
    let lines = testdata::gz_lines("routes/bart_tier1_fulltable/prefixes.txt.gz")
        .context("the shared full table (../shared/data/routes)")?;
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for l in &lines {
        match parse_prefix(l) {
            Some((IpAddr::V4(p), len)) => v4.push((u32::from(p), len)),
            Some((IpAddr::V6(p), len)) => v6.push((u128::from(p), len)),
            None => {}
        }
    }
    Ok((v4, v6))
}

/// A random host inside a random one of the IPv6 `prefixes`.
pub fn host_in6(rng: &mut SmallRng, prefixes: &[(u128, u8)]) -> u128 {
    let (p, l) = prefixes[rng.random_range(0..prefixes.len())];
    p | if l >= 128 {
        0
    } else {
        rng.random::<u128>() >> l
    }
}

/// Addresses for the IPv4 passes: uniformly random, and random hosts inside
/// random prefixes of the table.
pub fn v4_addrs(n: usize, prefixes: &[(u32, u8)], seed: u64) -> (Vec<u32>, Vec<u32>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let random = (0..n).map(|_| rng.random()).collect();
    let inside = (0..n)
        .map(|_| {
            let (p, l) = prefixes[rng.random_range(0..prefixes.len())];
            p | if l == 32 { 0 } else { rng.random::<u32>() >> l }
        })
        .collect();
    (random, inside)
}

fn median(mut v: Vec<f64>) -> f64 {
    crate::median(&mut v)
}

fn rate4(t: &Lpm4, addrs: &[u32], runs: usize) -> (f64, f64) {
    let mut out = [0u32; BURST];
    let mut mlps = Vec::new();
    let mut cyc = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        let c0 = rdtsc();
        for chunk in addrs.chunks(BURST) {
            t.lookup_burst(chunk, &mut out, u32::MAX);
            black_box(&out);
        }
        let c = rdtsc() - c0;
        let dt = t0.elapsed().as_secs_f64();
        mlps.push(addrs.len() as f64 / dt / 1e6);
        cyc.push(c as f64 / addrs.len() as f64);
    }
    (median(mlps), median(cyc))
}

fn rate6(t: &Lpm6, addrs: &[u128], runs: usize) -> (f64, f64) {
    let mut mlps = Vec::new();
    let mut cyc = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        let c0 = rdtsc();
        for a in addrs {
            black_box(t.lookup(*a));
        }
        let c = rdtsc() - c0;
        mlps.push(addrs.len() as f64 / t0.elapsed().as_secs_f64() / 1e6);
        cyc.push(c as f64 / addrs.len() as f64);
    }
    (median(mlps), median(cyc))
}

/// Runs the LPM measurements and prints a Markdown report.
pub fn lpm(a: LpmArgs) -> Result<()> {
    let tsc = Tsc::calibrate(Duration::from_millis(100));
    let (b4, b6) = full_table()?;
    // The prefixes again, for generating addresses inside them.
    let (prefixes4, prefixes6) = table_prefixes()?;
    let (n4, n6) = (b4.len(), b6.len());
    let t0 = Instant::now();
    let t4 = b4.build()?;
    let build4 = t0.elapsed();
    let t0 = Instant::now();
    let t6 = b6.build()?;
    let build6 = t0.elapsed();

    let (random, inside) = v4_addrs(a.addrs, &prefixes4, 1);
    let seq: Vec<u32> = (0..a.addrs as u32).map(|i| 0x0100_0000 + i * 7).collect();
    let mut rng = SmallRng::seed_from_u64(2);
    let v6_random: Vec<u128> = (0..a.addrs)
        .map(|_| (0x2000u128 << 112) | (rng.random::<u128>() >> 3))
        .collect();
    let v6_inside: Vec<u128> = (0..a.addrs)
        .map(|_| host_in6(&mut rng, &prefixes6))
        .collect();

    println!(
        "Full table: {n4} IPv4 and {n6} IPv6 prefixes; next hops i % 256; {} addresses per pass, median of {} passes; TSC {:.2} GHz; with the tables built, {}.\n",
        a.addrs,
        a.runs,
        tsc.hz as f64 / 1e9,
        appliance::stages::huge_pages_report()
    );
    println!("| table | build | memory | second-level groups |");
    println!("|---|---|---|---|");
    println!(
        "| IPv4 DIR-24-8 | {:.0} ms | {:.1} MiB | {} |",
        build4.as_secs_f64() * 1e3,
        t4.memory() as f64 / (1 << 20) as f64,
        t4.capacity()
    );
    println!(
        "| IPv6 24-8-8… | {:.0} ms | {:.1} MiB | {} |\n",
        build6.as_secs_f64() * 1e3,
        t6.memory() as f64 / (1 << 20) as f64,
        t6.capacity()
    );
    println!("| lookups (one core) | M lookups/s | cycles/lookup |");
    println!("|---|---|---|");
    for (name, addrs) in [
        ("IPv4, uniformly random addresses", &random),
        ("IPv4, random hosts in random table prefixes", &inside),
        ("IPv4, sequential addresses (stride 7)", &seq),
    ] {
        let (m, c) = rate4(&t4, addrs, a.runs);
        println!("| {name} | {m:.1} | {c:.1} |");
    }
    for (name, addrs) in [
        (
            "IPv6, random addresses in 2000::/3 (most miss at the first level)",
            &v6_random,
        ),
        ("IPv6, random hosts in random table prefixes", &v6_inside),
    ] {
        let (m, c) = rate6(&t6, addrs, a.runs);
        println!("| {name} | {m:.1} | {c:.1} |");
    }
    Ok(())
}
