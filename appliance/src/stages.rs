//! The forwarding stages built from the configuration (control path): the
//! router's tables and interfaces, the gateway's rule set, NAT and
//! conntrack settings. Nothing here runs per packet.

use crate::config::{Config, RouterSetup};
use anyhow::{Context, Result};
use pipeline::fib::FibWriter;
use pipeline::firewall::RuleSet;
use pipeline::gateway::GatewayConfig;
use pipeline::router::{NextHop, PuntPolicy, Router, RouterConfig};
use std::sync::Arc;

/// What `sluice check` and the benchmarks say of the large tables' pages
/// (the LPM, classifier and conntrack tables are allocated by
/// `pmd::alloc::HugeAlloc`, advised for transparent huge pages): the THP
/// mode and how much of the process is on huge pages, so that a run whose
/// tables fell back to 4 KiB pages (no free 2 MiB blocks) says so.
pub fn huge_pages_report() -> String {
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    match (pmd::sys::thp_mode(), pmd::sys::anon_huge_bytes()) {
        (Some(m), Some(b)) => format!("{:.0} MiB on huge pages (THP {m})", mib(b)),
        (Some(m), None) => format!("huge pages unknown (THP {m})"),
        (None, _) => "no huge pages (no THP in this kernel)".into(),
    }
}

/// Builds the route tables (the FIB and its writer, which the management
/// thread keeps to change routes in place) and the router stage (control
/// path).
pub fn build_router(cfg: &Config) -> Result<(Router, FibWriter)> {
    use std::net::IpAddr;
    let rs = &cfg.router;
    let mut routes: Vec<(IpAddr, u8, Vec<NextHop>)> =
        Vec::with_capacity(rs.file_routes.len() + rs.routes.len());
    // The route file first, so that static routes for the same prefix win.
    if let Some((_, via4, via6)) = &rs.route_file {
        let (mut i4, mut i6) = (0usize, 0usize);
        for &(a, len) in rs.file_routes.iter() {
            match a {
                IpAddr::V4(_) if !via4.is_empty() => {
                    routes.push((a, len, vec![via4[i4 % via4.len()]]));
                    i4 += 1;
                }
                IpAddr::V6(_) if !via6.is_empty() => {
                    routes.push((a, len, vec![via6[i6 % via6.len()]]));
                    i6 += 1;
                }
                _ => {}
            }
        }
    }
    for r in &rs.routes {
        routes.push((r.addr, r.len, r.paths.clone()));
    }
    let fib = FibWriter::build(&routes).context("routes")?;
    let (n4, n6) = static_neighbors(rs);
    let router = Router::new(RouterConfig {
        interfaces: rs.interfaces.clone(),
        fib: fib.fib().clone(),
        neighbors4: n4,
        neighbors6: n6,
        icmp_rate: rs.icmp_rate,
        neighbor_timeout_ns: u64::try_from(rs.neighbor_timeout.as_nanos()).unwrap_or(u64::MAX),
        punt: PuntPolicy {
            mirrored: (0..rs.interfaces.len())
                .map(|i| cfg.taps.iter().any(|(t, _)| usize::from(*t) == i))
                .collect(),
            rules: cfg.punt_rules.clone(),
            kernel_flows: cfg.kernel_flows.clone(),
        },
        adverts: rs.adverts.clone(),
    });
    Ok((router, fib))
}

/// The static neighbours of `rs`, IPv4 and IPv6, as the router takes them.
pub fn static_neighbors(rs: &RouterSetup) -> (Vec<Neighbor4>, Vec<Neighbor6>) {
    let (mut n4, mut n6) = (Vec::new(), Vec::new());
    for &(p, a, m) in &rs.neighbors {
        match a {
            std::net::IpAddr::V4(a) => n4.push((p, a, m)),
            std::net::IpAddr::V6(a) => n6.push((p, a, m)),
        }
    }
    (n4, n6)
}

/// A static IPv4 neighbour: (interface, address, MAC).
type Neighbor4 = (u16, std::net::Ipv4Addr, pipeline::wire::MacAddr);
/// A static IPv6 neighbour.
type Neighbor6 = (u16, std::net::Ipv6Addr, pipeline::wire::MacAddr);

/// Builds the firewall rule set and the gateway settings (control path).
pub fn build_gateway(cfg: &Config, workers: u16) -> GatewayConfig {
    let g = &cfg.gateway;
    GatewayConfig {
        rules: Arc::new(RuleSet::build(
            g.rules.clone(),
            g.default,
            &g.nat.original_dsts(),
        )),
        nat: Arc::new(g.nat.clone()),
        ct_capacity: g.ct_capacity,
        timeouts: g.timeouts,
        tcp_window: g.ct_tcp_window,
        workers: workers.max(1),
        mss_limits: g.mss_limits.clone().into(),
        mss_rules: g.mss_rules.clone().into(),
    }
}
