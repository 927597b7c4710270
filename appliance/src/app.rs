//! Start-up: opens the configured ports with their drivers (the native
//! ones here, DPDK's in `crate::eal`) and hands them to the
//! [`crate::engine`], which runs them until the duration passes or a stop
//! is asked for.

use crate::config::{Config, PortKind};
use crate::telemetry::Report;
use anyhow::{Context, Result};
use pmd::softnic::{Generator, SoftnicConfig};
use pmd::sys::Tsc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Buffers in each null / pcap port's pool.
const POOL_SIZE: usize = 8192;

/// Runs the appliance until the configured duration passes or `stop` is
/// set; calls `emit` with each period's report and returns the summary.
pub fn run(cfg: &Config, stop: &AtomicBool, emit: &mut dyn FnMut(&Report)) -> Result<Report> {
    let tsc = Tsc::calibrate(Duration::from_millis(50));
    if cfg
        .ports
        .iter()
        .any(|p| matches!(p.kind, PortKind::Dpdk { .. }))
    {
        #[cfg(feature = "dpdk")]
        return crate::eal::run(cfg, tsc, stop, emit);
        #[cfg(not(feature = "dpdk"))]
        anyhow::bail!("DPDK ports need a build with `--features dpdk`");
    }

    // Ports. All AF_XDP ports share one UMEM (the sum of their frames;
    // rings of half the smallest port's), so frames move between them
    // without copies.
    #[cfg(feature = "afxdp")]
    let umem = {
        let frames: Vec<u32> = cfg
            .ports
            .iter()
            .filter_map(|p| match p.kind {
                PortKind::AfXdp { frames, .. } => Some(frames),
                _ => None,
            })
            .collect();
        match frames.iter().min() {
            Some(&min) => Some(pmd::afxdp::Umem::new(frames.iter().sum(), min / 2)?),
            None => None,
        }
    };
    let mut gen = Generator::new(tsc);
    let mut opened = Vec::new();
    for (i, p) in cfg.ports.iter().enumerate() {
        let port = i as u16;
        let (open, e2e) = match &p.kind {
            PortKind::Softnic { gen: g, coalesce } => {
                let (o, h) = gen
                    .add_port(&SoftnicConfig {
                        port,
                        rxq: p.rxq,
                        txq: p.txq,
                        rxd: p.rxd,
                        txd: p.txd,
                        coalesce: *coalesce,
                        gen: g.clone(),
                    })
                    .with_context(|| format!("port {} ({})", p.name, p.origin))?;
                (o, Some(h))
            }
            PortKind::Null { size } => (
                pmd::null::open(&pmd::null::NullConfig {
                    port,
                    size: *size,
                    rxq: p.rxq,
                    txq: p.txq,
                    pool_size: POOL_SIZE,
                })
                .with_context(|| format!("port {} ({})", p.name, p.origin))?,
                None,
            ),
            PortKind::Pcap {
                rx_file,
                tx_file,
                loops,
            } => (
                pmd::pcap::open(&pmd::pcap::PcapConfig {
                    port,
                    rx_file: rx_file.clone(),
                    tx_file: tx_file.clone(),
                    loops: *loops,
                    pool_size: POOL_SIZE,
                })
                .with_context(|| format!("port {} ({})", p.name, p.origin))?,
                None,
            ),
            PortKind::AfPacket {
                iface,
                blocks,
                ring,
                qdisc_bypass,
            } => (
                pmd::afpacket::open(&pmd::afpacket::AfPacketConfig {
                    port,
                    iface: iface.clone(),
                    rxq: p.rxq,
                    txq: p.txq,
                    blocks: *blocks,
                    ring: *ring,
                    qdisc_bypass: *qdisc_bypass,
                    pool_size: POOL_SIZE.max(4 * usize::from(p.rxq) * 2048),
                    mtu: cfg.router.interfaces.get(i).map_or(1500, |x| x.mtu),
                })
                .with_context(|| format!("port {} ({})", p.name, p.origin))?,
                None,
            ),
            #[cfg(feature = "afxdp")]
            PortKind::AfXdp {
                iface,
                zerocopy,
                skb_mode,
                ..
            } => (
                pmd::afxdp::open(
                    &pmd::afxdp::AfXdpConfig {
                        port,
                        iface: iface.clone(),
                        zerocopy: *zerocopy,
                        skb_mode: *skb_mode,
                        mtu: cfg.router.interfaces.get(i).map_or(1500, |x| x.mtu),
                    },
                    umem.as_ref().expect("a UMEM for AF_XDP ports"),
                )
                .with_context(|| format!("port {} ({})", p.name, p.origin))?,
                None,
            ),
            #[cfg(not(feature = "afxdp"))]
            PortKind::AfXdp { .. } => {
                anyhow::bail!(
                    "port {}: AF_XDP ports need a build with `--features afxdp`",
                    p.name
                )
            }
            PortKind::Dpdk { .. } => unreachable!("handled above"),
        };
        p.check_frames(
            cfg.router.interfaces.get(i).map_or(1500, |x| x.mtu),
            open.control.driver(),
            open.control.caps().max_frame,
        )?;
        opened.push((open, e2e));
    }
    let gen = (!gen.is_empty()).then_some(gen);
    // Fresh buffers for the router's held packets (sent once resolved):
    // jumbo-sized, committed only as used.
    let (inject, bulk) = if cfg.inject_buffers() > 0 {
        let pool = pmd::Pool::new("inject", cfg.inject_buffers(), 9216 + 64)
            .context("buffer pool for held packets and generated traffic")?;
        let bulk: pmd::BulkAlloc = std::sync::Arc::new(move |b, n| pool.alloc_bulk(b, n));
        (Some(pmd::pool_injector(pool)), Some(bulk))
    } else {
        (None, None)
    };
    let family = crate::engine::Family {
        gen,
        inject,
        bulk,
        on_start: || {},
    };
    crate::engine::run_ports(cfg, tsc, opened, family, stop, emit)
}
