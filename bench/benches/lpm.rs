//! Criterion micro-benchmarks of LPM lookups on the full Internet table.
//! Run with `cargo bench -p bench --bench lpm` (needs ../shared/data).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pipeline::lpm::{Lpm4Builder, BURST};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::hint::black_box;
use std::net::IpAddr;

fn lookups(c: &mut Criterion) {
    let Some(lines) = testdata::gz_lines("routes/bart_tier1_fulltable/prefixes.txt.gz") else {
        return;
    };
    let mut b = Lpm4Builder::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some((IpAddr::V4(a), len)) = pipeline::prefix::parse(l) {
            b.add(a, len, (i % 256) as u32);
        }
    }
    let t = b.build().expect("table builds");
    let mut rng = SmallRng::seed_from_u64(1);
    let random: Vec<u32> = (0..1 << 16).map(|_| rng.random()).collect();
    let seq: Vec<u32> = (0..1 << 16).map(|i| 0x0100_0000 + i * 7).collect();
    let mut g = c.benchmark_group("lpm4");
    g.throughput(Throughput::Elements(random.len() as u64));
    let mut out = [0u32; BURST];
    for (name, addrs) in [("random", &random), ("sequential", &seq)] {
        g.bench_function(name, |bch| {
            bch.iter(|| {
                for chunk in addrs.chunks(BURST) {
                    t.lookup_burst(chunk, &mut out, u32::MAX);
                    black_box(&out);
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, lookups);
criterion_main!(benches);
