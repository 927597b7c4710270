//! `fib`: live route updates on the full Internet table while a worker
//! forwards. One thread (the management core) withdraws and re-announces
//! table prefixes through the FIB's writer as fast as it can; another (the
//! worker core) routes bursts of packets to addresses inside the table
//! through the router stage, entering and leaving the FIB every burst as
//! the worker's poll round does. Reported: updates applied per second and
//! cycles per update, and the worker's rate during the storm against its
//! rate before and after (quiet), in the same run.

use anyhow::{Context, Result};
use clap::Parser;
use pipeline::fib::{FibWriter, NextHop};
use pipeline::fwd::ForwardMode;
use pipeline::router::{Interface, Router, RouterConfig};
use pipeline::verdict::Verdict;
use pipeline::wire::MacAddr;
use pmd::sys::rdtsc;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `fib`.
#[derive(Parser)]
pub struct FibArgs {
    /// Route updates in the storm (withdrawals and announcements).
    #[arg(long, default_value_t = 2_000_000)]
    updates: usize,
    /// Seconds of each quiet phase (before and after the storm).
    #[arg(long, default_value_t = 2.0)]
    quiet: f64,
    /// Core of the worker thread.
    #[arg(long, default_value_t = 1)]
    worker_core: usize,
    /// Core of the writer thread.
    #[arg(long, default_value_t = 0)]
    writer_core: usize,
}

const BURST: usize = 32;
const R0: MacAddr = MacAddr([2, 0x51, 0, 0, 0, 0]);
const R1: MacAddr = MacAddr([2, 0x51, 0, 0, 0, 1]);

fn hops() -> (Vec<NextHop>, Vec<NextHop>) {
    let v4 = (2u8..6)
        .map(|i| NextHop {
            port: 1,
            via: Some(IpAddr::from([198, 19, 0, i])),
        })
        .collect();
    let v6 = (2u16..6)
        .map(|i| NextHop {
            port: 1,
            via: Some(IpAddr::from([0x2001, 0xdb8, 0x19, 0, 0, 0, 0, i])),
        })
        .collect();
    (v4, v6)
}

/// A UDP/IPv4 frame to `dst` from port 0's side.
fn frame(dst: u32) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&R0.0);
    f[6..12].copy_from_slice(&[2, 0xaa, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&46u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[198, 18, 0, 10]);
    ip[16..20].copy_from_slice(&dst.to_be_bytes());
    let c = !pipeline::checksum::fold(pipeline::checksum::sum(ip, 0));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f[34..36].copy_from_slice(&1234u16.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    f[38..40].copy_from_slice(&26u16.to_be_bytes());
    f
}

fn pin(core: usize) {
    if let Some(c) = core_affinity::get_core_ids().and_then(|ids| ids.into_iter().nth(core)) {
        core_affinity::set_for_current(c);
    }
}

/// Runs the storm and prints a Markdown report.
pub fn fib(a: FibArgs) -> Result<()> {
    let lines = testdata::gz_lines("routes/bart_tier1_fulltable/prefixes.txt.gz")
        .context("../shared/data/routes/bart_tier1_fulltable/prefixes.txt.gz is missing")?;
    let prefixes: Vec<(IpAddr, u8)> = lines
        .iter()
        .filter_map(|l| pipeline::prefix::parse(l))
        .collect();
    let (h4, h6) = hops();
    let routes: Vec<(IpAddr, u8, Vec<NextHop>)> = prefixes
        .iter()
        .enumerate()
        .map(|(i, &(p, l))| {
            let h = if p.is_ipv4() { &h4 } else { &h6 };
            (p, l, vec![h[i % h.len()]])
        })
        .collect();
    let t0 = Instant::now();
    let mut w = FibWriter::build(&routes)?;
    let built = t0.elapsed();
    let ((g4, c4), (g6, c6)) = w.groups();
    let neighbors4 = (2..6)
        .map(|i| (1u16, [198, 19, 0, i].into(), MacAddr([2, 0xbb, 0, 0, 0, i])))
        .collect();
    let router = Router::new(RouterConfig {
        interfaces: vec![
            Interface {
                mac: R0,
                ipv4: vec![([198, 18, 0, 1].into(), 24)],
                ipv6: vec![],
                mtu: 1500,
                vlan: None,
                down: false,
            },
            Interface {
                mac: R1,
                ipv4: vec![([198, 19, 0, 1].into(), 24)],
                ipv6: vec![],
                mtu: 1500,
                vlan: None,
                down: false,
            },
        ],
        fib: w.fib().clone(),
        neighbors4,
        neighbors6: vec![],
        icmp_rate: 1000,
        neighbor_timeout_ns: u64::MAX / 2,
        punt: Default::default(),
        adverts: Vec::new(),
    });
    // Packets to hosts inside random IPv4 table prefixes.
    let mut rng = SmallRng::seed_from_u64(1);
    let v4: Vec<(u32, u8)> = prefixes
        .iter()
        .filter_map(|&(p, l)| match p {
            IpAddr::V4(a) => Some((u32::from(a), l)),
            _ => None,
        })
        .collect();
    let templates: Vec<Vec<u8>> = (0..1 << 16)
        .map(|_| {
            let (p, l) = v4[rng.random_range(0..v4.len())];
            frame(p | if l == 32 { 0 } else { rng.random::<u32>() >> l })
        })
        .collect();

    // The worker: counts packets forwarded per phase.
    let phase = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let cycles: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let worker = {
        let (phase, stop, counts, cycles) =
            (phase.clone(), stop.clone(), counts.clone(), cycles.clone());
        let mut r = router;
        let core = a.worker_core;
        std::thread::spawn(move || {
            pin(core);
            let mut bufs: Vec<Vec<u8>> = (0..BURST).map(|_| Vec::with_capacity(64)).collect();
            let mut verdicts = vec![Verdict::Drop(pipeline::verdict::DropReason::NoRoute); BURST];
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let p = phase.load(Ordering::Relaxed) as usize;
                let c0 = rdtsc();
                let mut fwd = 0u64;
                for _ in 0..64 {
                    for b in bufs.iter_mut() {
                        b.clear();
                        b.extend_from_slice(&templates[i & 0xffff]);
                        i += 1;
                    }
                    r.enter();
                    let same = r.process_burst(&mut bufs, 0, &mut verdicts);
                    r.leave();
                    fwd += match same {
                        Some(Verdict::Forward(_)) => BURST as u64,
                        Some(_) => 0,
                        None => verdicts
                            .iter()
                            .filter(|v| matches!(v, Verdict::Forward(_)))
                            .count() as u64,
                    };
                }
                counts[p.min(2)].fetch_add(fwd, Ordering::Relaxed);
                cycles[p.min(2)].fetch_add(rdtsc() - c0, Ordering::Relaxed);
            }
        })
    };

    pin(a.writer_core);
    let quiet = Duration::from_secs_f64(a.quiet);
    std::thread::sleep(quiet);
    // The storm: withdraw a random table prefix, then announce it again
    // through another gateway; every call is one route update.
    phase.store(1, Ordering::Relaxed);
    // The updates are drawn before the clock starts (a routing daemon's
    // message is in the writer's cache when it applies it; reading a
    // random entry of the million-route list here would be a cache miss
    // the FIB does not cause).
    let order: Vec<(IpAddr, u8, NextHop)> = (0..a.updates / 2)
        .enumerate()
        .map(|(k, _)| {
            let i = rng.random_range(0..routes.len());
            let (p, l, _) = &routes[i];
            let h = if p.is_ipv4() { &h4 } else { &h6 };
            (*p, *l, h[(i + k + 1) % h.len()])
        })
        .collect();
    let t_storm = Instant::now();
    let c0 = rdtsc();
    let mut applied = 0usize;
    for (k, &(p, l, hop)) in order.iter().enumerate() {
        if w.del(p, l) {
            applied += 1;
        }
        if w.add(p, l, &[hop])? {
            applied += 1;
        }
        if k % 4096 == 0 {
            w.reclaim();
        }
    }
    let storm_cycles = rdtsc() - c0;
    let storm = t_storm.elapsed();
    phase.store(2, Ordering::Relaxed);
    std::thread::sleep(quiet);
    stop.store(true, Ordering::Relaxed);
    worker
        .join()
        .map_err(|_| anyhow::anyhow!("the worker panicked"))?;
    w.reclaim();

    let tsc_hz = pmd::sys::Tsc::calibrate(Duration::from_millis(100)).hz as f64;
    let rate = |p: usize| {
        let c = cycles[p].load(Ordering::Relaxed) as f64;
        let n = counts[p].load(Ordering::Relaxed) as f64;
        (n / (c / tsc_hz) / 1e6, c / n.max(1.0))
    };
    let (before, cb) = rate(0);
    let (during, cd) = rate(1);
    let (after, ca) = rate(2);
    let quiet_rate = (before + after) / 2.0;
    println!(
        "Full table: {} IPv4 + {} IPv6 routes, built in {:.0} ms; groups in use/pool: IPv4 {g4}/{c4}, IPv6 {g6}/{c6}.",
        w.fib().routes4(),
        w.fib().routes6(),
        built.as_secs_f64() * 1e3
    );
    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| route updates applied (withdraw + re-announce of random table prefixes) | {applied} in {:.3} s |",
        storm.as_secs_f64()
    );
    println!(
        "| **updates per second, one writer core** | **{:.2} M/s** ({:.0} cycles/update) |",
        applied as f64 / storm.as_secs_f64() / 1e6,
        storm_cycles as f64 / applied.max(1) as f64
    );
    println!("| worker before the storm | {before:.2} Mpps ({cb:.0} cycles/packet) |");
    println!("| worker during the storm | {during:.2} Mpps ({cd:.0} cycles/packet) |");
    println!("| worker after the storm | {after:.2} Mpps ({ca:.0} cycles/packet) |");
    println!(
        "| **worker during / quiet (mean of before and after)** | **{:.2}×** |",
        during / quiet_rate
    );
    println!(
        "| writer stats | {:?}, {} next-hop slots in use |",
        w.stats(),
        w.hops()
    );
    Ok(())
}
