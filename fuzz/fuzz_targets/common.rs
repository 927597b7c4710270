//! What the router and gateway fuzz targets share: a two-port router
//! (198.18.0.1/24 on port 0, 198.19.0.1/24 with MTU 576 on port 1, default
//! routes via static gateways on port 1).

use pipeline::lpm::{Lpm4Builder, Lpm6Builder};
use pipeline::router::{Interface, NextHop, Router, RouterConfig};
use pipeline::wire::MacAddr;
use std::sync::{Arc, OnceLock};

/// Port 0's MAC.
pub const R0: MacAddr = MacAddr([2, 0x51, 0, 0, 0, 0]);

/// The router (built once, cloned per input).
pub fn router() -> Router {
    static R: OnceLock<Router> = OnceLock::new();
    R.get_or_init(|| {
        let mut b = Lpm4Builder::new();
        b.add("198.18.0.0".parse().unwrap(), 24, 0)
            .add("0.0.0.0".parse().unwrap(), 0, 1);
        let mut b6 = Lpm6Builder::new();
        b6.add("2001:db8:18::".parse().unwrap(), 64, 0)
            .add("::".parse().unwrap(), 0, 2);
        Router::new(RouterConfig {
            interfaces: vec![
                Interface {
                    mac: R0,
                    ipv4: vec![("198.18.0.1".parse().unwrap(), 24)],
                    ipv6: vec![("2001:db8:18::1".parse().unwrap(), 64)],
                    mtu: 1500,
                },
                Interface {
                    mac: MacAddr([2, 0x51, 0, 0, 0, 1]),
                    ipv4: vec![("198.19.0.1".parse().unwrap(), 24)],
                    ipv6: vec![("2001:db8:19::1".parse().unwrap(), 64)],
                    mtu: 576,
                },
            ],
            next_hops: vec![
                NextHop { port: 0, via: None },
                NextHop {
                    port: 1,
                    via: Some("198.19.0.2".parse().unwrap()),
                },
                NextHop {
                    port: 1,
                    via: Some("2001:db8:19::2".parse().unwrap()),
                },
            ],
            lpm4: Arc::new(b.build().unwrap()),
            lpm6: Arc::new(b6.build().unwrap()),
            neighbors4: vec![(
                1,
                "198.19.0.2".parse().unwrap(),
                MacAddr([2, 0x5e, 0, 0, 0, 1]),
            )],
            neighbors6: vec![],
            icmp_rate: 1_000_000,
            neighbor_timeout_ns: u64::MAX,
        })
    })
    .clone()
}
