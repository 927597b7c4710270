//! The whole router stage on arbitrary frames (addressed to the router's
//! MAC half the time): nothing may panic, and what it sends is a frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipeline::fwd::ForwardMode;
use pipeline::lpm::{Lpm4Builder, Lpm6Builder};
use pipeline::router::{Interface, NextHop, Router, RouterConfig};
use pipeline::wire::MacAddr;
use pipeline::Verdict;
use std::sync::{Arc, OnceLock};

const R0: MacAddr = MacAddr([2, 0x51, 0, 0, 0, 0]);

fn router() -> Router {
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

fuzz_target!(|data: &[u8]| {
    let mut r = router();
    let mut f = data.to_vec();
    if f.len() >= 6 && data[0] & 0x80 != 0 {
        f[0..6].copy_from_slice(&R0.0);
    }
    let port = u16::from(data.first().is_some_and(|b| b & 1 == 1));
    if let Verdict::Forward(p) = r.process(&mut f, port) {
        assert!(p < 2);
        assert!(f.len() >= 14, "a forwarded frame has an Ethernet header");
    }
});
