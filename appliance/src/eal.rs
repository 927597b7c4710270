//! Running on DPDK ports (feature `dpdk`): EAL arguments from the config,
//! one mempool, the ports, and then the same workers and management loop as
//! the native backends, monomorphised over `rte_mbuf`.
//!
//! EAL arguments: `[dpdk] eal_args` first, then defaults where the config
//! did not give them: `--no-pci` unless a port names a PCI address, a
//! `--vdev` per virtual device (`net_…`), a unique `--file-prefix`, `-l`
//! with the management core, hugepages when some are free and `--no-huge
//! -m 1024` otherwise, `--log-level *:warning`. Workers are ordinary pinned
//! threads registered with EAL (`rte_thread_register`), so that they get
//! lcore ids and mempool caches while Sluice keeps its own threading.

use crate::config::{Config, PortKind};
use crate::telemetry::Report;
use anyhow::{Context, Result};
use pmd::dpdk::{self, DpdkPortConfig, Eal, Mempool};
use pmd::sys::Tsc;
use std::sync::atomic::AtomicBool;

fn hugepages_free() -> bool {
    pmd::sys::free_hugepages() >= 256
}

/// The EAL argument list for `cfg`.
pub fn eal_args(cfg: &Config) -> Vec<String> {
    let mut a = vec!["sluice".to_string()];
    a.extend(cfg.eal_args.iter().cloned());
    let given = |flag: &str| {
        cfg.eal_args
            .iter()
            .any(|x| x == flag || x.starts_with(&format!("{flag}=")))
    };
    let devices: Vec<&str> = cfg
        .ports
        .iter()
        .filter_map(|p| match &p.kind {
            PortKind::Dpdk { device } => Some(device.as_str()),
            _ => None,
        })
        .collect();
    let pci = devices
        .iter()
        .any(|d| !d.starts_with("net_") && d.contains(':'));
    if !pci && !given("--no-pci") {
        a.push("--no-pci".into());
    }
    for d in &devices {
        if d.starts_with("net_") {
            a.push("--vdev".into());
            a.push((*d).to_string());
        }
    }
    if !given("--file-prefix") {
        a.push(format!("--file-prefix=sluice-{}", std::process::id()));
    }
    if !given("-l") && !given("--lcores") {
        let core = crate::engine::management_core(cfg).unwrap_or(0);
        a.push(format!("-l{core}"));
    }
    if !given("--no-huge") && !given("-m") && !hugepages_free() {
        a.push("--no-huge".into());
        a.push("-m".into());
        a.push("1024".into());
    }
    if !given("--log-level") {
        a.push("--log-level=*:warning".into());
    }
    a
}

/// The port name EAL gives a device string (`net_null0,size=64` → `net_null0`).
fn device_name(d: &str) -> &str {
    d.split(',').next().unwrap_or(d)
}

/// Runs the appliance on DPDK ports.
pub fn run(
    cfg: &Config,
    tsc: Tsc,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&Report),
) -> Result<Report> {
    let args = eal_args(cfg);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    eprintln!("EAL: {}", args[1..].join(" "));
    let eal = Eal::init(&refs).context("initialising DPDK's EAL")?;
    let descs: usize = cfg
        .ports
        .iter()
        .map(|p| usize::from(p.rxq) * p.rxd + usize::from(p.txq) * p.txd)
        .sum();
    // A power of two less one is the mempool's best size (its ring).
    let n = cfg.mbufs.map_or_else(
        || (descs + 4096 * cfg.workers.len().max(1)).next_power_of_two() - 1,
        |n| n as usize,
    );
    // Mbufs hold the longest port's frames whole (no scattered receive):
    // 2 KiB, or jumbo-sized where a port's `mtu` asks for it.
    let mtu = cfg
        .router
        .interfaces
        .iter()
        .map(|x| x.mtu)
        .max()
        .unwrap_or(1500);
    let room = (pmd::mbuf::data_room_for(usize::from(mtu)).max(2048)
        + pmd::dpdk::RTE_PKTMBUF_HEADROOM) as u16;
    let pool = Mempool::create(&eal, "sluice", n as u32, 256, room).context("mbuf pool")?;
    let mut opened = Vec::new();
    for (pi, p) in cfg.ports.iter().enumerate() {
        // Rx interrupts when a worker polling this port may block.
        let rx_intr = cfg.workers.iter().any(|w| {
            w.rx.iter().any(|&(port, _)| usize::from(port) == pi)
                && !matches!(
                    w.poll,
                    crate::poll::Policy::Busy | crate::poll::Policy::Timer(_)
                )
        });
        let PortKind::Dpdk { device } = &p.kind else {
            anyhow::bail!("port {} is not a DPDK port", p.name);
        };
        let port = dpdk::open(
            &eal,
            &DpdkPortConfig {
                device: device_name(device).to_string(),
                rxq: p.rxq,
                txq: p.txq,
                rxd: p.rxd.min(usize::from(u16::MAX)) as u16,
                txd: p.txd.min(usize::from(u16::MAX)) as u16,
                stamp_rx: false,
                rss: true,
                rx_intr,
                mtu: cfg.router.interfaces.get(pi).map_or(1500, |x| x.mtu),
            },
            &pool,
        )
        .with_context(|| format!("port {} ({}, {device})", p.name, p.origin))?;
        p.check_frames(
            cfg.router.interfaces.get(pi).map_or(1500, |x| x.mtu),
            port.control.driver(),
            port.control.caps().max_frame,
        )?;
        opened.push((port, None));
    }
    // Fresh mbufs for the router's held packets (sent once resolved) and
    // the tester's generators (in bulk).
    let (inject, bulk) = if cfg.inject_buffers() > 0 {
        // DPDK's best pool sizes are 2^n - 1.
        let mp = Mempool::create(
            &eal,
            "sluice-inject",
            (cfg.inject_buffers() - 1) as u32,
            256,
            room,
        )
        .context("mbuf pool for held packets and generated traffic")?;
        let make: pmd::Injector<pmd::dpdk::DpdkMbuf> =
            std::sync::Arc::new(move |b: &[u8]| pmd::filled(mp.alloc(), b));
        let bulk: pmd::BulkAlloc<pmd::dpdk::DpdkMbuf> =
            std::sync::Arc::new(move |out, n| mp.alloc_bulk(out, n));
        (Some(make), Some(bulk))
    } else {
        (None, None)
    };
    let family = crate::engine::Family {
        gen: None,
        inject,
        bulk,
        on_start: dpdk::register_thread,
    };
    crate::engine::run_ports(cfg, tsc, opened, family, stop, emit)
}
