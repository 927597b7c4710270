//! What the router and gateway fuzz targets share: a two-port router
//! (198.18.0.1/24 on port 0, 198.19.0.1/24 with MTU 576 on port 1, default
//! routes via static gateways on port 1).

use pipeline::fib::FibWriter;
use pipeline::router::{Interface, NextHop, Router, RouterConfig};
use pipeline::wire::MacAddr;
use std::sync::OnceLock;

/// Port 0's MAC.
pub const R0: MacAddr = MacAddr([2, 0x51, 0, 0, 0, 0]);

/// The router (built once, cloned per input).
pub fn router() -> Router {
    static R: OnceLock<Router> = OnceLock::new();
    R.get_or_init(|| {
        let connected = NextHop { port: 0, via: None };
        let gw4 = NextHop {
            port: 1,
            via: Some("198.19.0.2".parse().unwrap()),
        };
        let gw6 = NextHop {
            port: 1,
            via: Some("2001:db8:19::2".parse().unwrap()),
        };
        let fib = FibWriter::build(&[
            ("198.18.0.0".parse().unwrap(), 24, vec![connected]),
            ("0.0.0.0".parse().unwrap(), 0, vec![gw4]),
            ("2001:db8:18::".parse().unwrap(), 64, vec![connected]),
            ("::".parse().unwrap(), 0, vec![gw6]),
        ])
        .unwrap();
        Router::new(RouterConfig {
            interfaces: vec![
                Interface {
                    mac: R0,
                    ipv4: vec![("198.18.0.1".parse().unwrap(), 24)],
                    ipv6: vec![("2001:db8:18::1".parse().unwrap(), 64)],
                    mtu: 1500,
                    vlan: None,
                    down: false,
                },
                Interface {
                    mac: MacAddr([2, 0x51, 0, 0, 0, 1]),
                    ipv4: vec![("198.19.0.1".parse().unwrap(), 24)],
                    ipv6: vec![("2001:db8:19::1".parse().unwrap(), 64)],
                    mtu: 576,
                    vlan: None,
                    down: false,
                },
                // Tagged frames (VLAN 100 and QinQ 7.8 on port 1) reach
                // the sub-interface paths.
                Interface {
                    mac: MacAddr([2, 0x51, 0, 0, 0, 1]),
                    ipv4: vec![("198.20.0.1".parse().unwrap(), 24)],
                    ipv6: vec![],
                    mtu: 1500,
                    vlan: Some(pipeline::router::Vlan {
                        port: 1,
                        outer: None,
                        id: 100,
                    }),
                    down: false,
                },
                Interface {
                    mac: MacAddr([2, 0x51, 0, 0, 0, 1]),
                    ipv4: vec![("198.21.0.1".parse().unwrap(), 24)],
                    ipv6: vec![],
                    mtu: 1500,
                    vlan: Some(pipeline::router::Vlan {
                        port: 1,
                        outer: Some(7),
                        id: 8,
                    }),
                    down: false,
                },
            ],
            fib: fib.fib().clone(),
            neighbors4: vec![(
                1,
                "198.19.0.2".parse().unwrap(),
                MacAddr([2, 0x5e, 0, 0, 0, 1]),
            )],
            neighbors6: vec![],
            icmp_rate: 1_000_000,
            neighbor_timeout_ns: u64::MAX,
            punt: Default::default(),
            adverts: Vec::new(),
        })
    })
    .clone()
}

/// Rewrites the IPv4 header checksum of an Ethernet frame carrying IPv4
/// with a whole header, so that inputs get past the checksum test and
/// into the code behind it.
#[allow(dead_code)]
pub fn fix_ipv4_checksum(f: &mut [u8]) {
    if f.len() < 34 || f[12..14] != [0x08, 0x00] {
        return;
    }
    let h = usize::from(f[14] & 0x0f) * 4;
    if h < 20 || f.len() < 14 + h {
        return;
    }
    f[24] = 0;
    f[25] = 0;
    let mut sum = 0u32;
    for w in f[14..14 + h].chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let c = !(sum as u16);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

/// Frames from a fuzz input: each a length byte, a control byte (bit 7:
/// address it to port 0's MAC, bit 6: fix its IPv4 header checksum), then
/// the bytes; at most `max`.
#[allow(dead_code)]
pub fn frames(mut rest: &[u8], max: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while rest.len() >= 2 && out.len() < max {
        let (len, ctl) = (usize::from(rest[0]) * 2, rest[1]);
        let body = &rest[2..];
        let n = len.min(body.len());
        let mut f = body[..n].to_vec();
        rest = &body[n..];
        if ctl & 0x80 != 0 && f.len() >= 6 {
            f[0..6].copy_from_slice(&R0.0);
        }
        if ctl & 0x40 != 0 {
            fix_ipv4_checksum(&mut f);
        }
        out.push(f);
    }
    out
}
