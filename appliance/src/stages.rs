//! The forwarding stages built from the configuration (control path): the
//! router's tables and interfaces, the gateway's rule set, NAT and
//! conntrack settings. Nothing here runs per packet.

use crate::config::Config;
use anyhow::{Context, Result};
use pipeline::firewall::RuleSet;
use pipeline::gateway::GatewayConfig;
use pipeline::lpm::{Lpm4Builder, Lpm6Builder};
use pipeline::router::{Router, RouterConfig};
use std::sync::Arc;

/// Builds the route tables and the router stage (control path).
pub fn build_router(cfg: &Config) -> Result<Router> {
    use pipeline::router::NextHop;
    use std::collections::HashMap;
    use std::net::IpAddr;
    let rs = &cfg.router;
    let mut hops: Vec<NextHop> = Vec::new();
    let mut index: HashMap<(u16, Option<IpAddr>), u32> = HashMap::new();
    let mut hop = |nh: NextHop| -> u32 {
        *index.entry((nh.port, nh.via)).or_insert_with(|| {
            hops.push(nh);
            (hops.len() - 1) as u32
        })
    };
    let (mut b4, mut b6) = (Lpm4Builder::new(), Lpm6Builder::new());
    // The route file first, so that static routes for the same prefix win.
    if let Some((_, via4, via6)) = &rs.route_file {
        let (mut i4, mut i6) = (0usize, 0usize);
        for &(a, len) in &rs.file_routes {
            match a {
                IpAddr::V4(a) if !via4.is_empty() => {
                    b4.add(a, len, hop(via4[i4 % via4.len()]));
                    i4 += 1;
                }
                IpAddr::V6(a) if !via6.is_empty() => {
                    b6.add(a, len, hop(via6[i6 % via6.len()]));
                    i6 += 1;
                }
                _ => {}
            }
        }
    }
    for r in &rs.routes {
        let nh = hop(r.next_hop);
        match r.addr {
            IpAddr::V4(a) => {
                b4.add(a, r.len, nh);
            }
            IpAddr::V6(a) => {
                b6.add(a, r.len, nh);
            }
        }
    }
    let (mut n4, mut n6) = (Vec::new(), Vec::new());
    for &(p, a, m) in &rs.neighbors {
        match a {
            IpAddr::V4(a) => n4.push((p, a, m)),
            IpAddr::V6(a) => n6.push((p, a, m)),
        }
    }
    Ok(Router::new(RouterConfig {
        interfaces: rs.interfaces.clone(),
        next_hops: hops,
        lpm4: Arc::new(b4.build().context("IPv4 routes")?),
        lpm6: Arc::new(b6.build().context("IPv6 routes")?),
        neighbors4: n4,
        neighbors6: n6,
        icmp_rate: rs.icmp_rate,
        neighbor_timeout_ns: rs.neighbor_timeout.as_nanos() as u64,
    }))
}

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
        workers: workers.max(1),
    }
}
