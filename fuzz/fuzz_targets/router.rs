//! The whole router stage on arbitrary frames (addressed to the router's
//! MAC half the time, with a valid IPv4 header checksum half the time, so
//! inputs reach the forwarding code): nothing may panic, and what it sends
//! is a frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipeline::fwd::ForwardMode;
use pipeline::Verdict;

mod common;

use common::{fix_ipv4_checksum, router, R0};

fuzz_target!(|data: &[u8]| {
    let mut r = router();
    let mut f = data.to_vec();
    let ctl = data.first().copied().unwrap_or(0);
    if f.len() >= 6 && ctl & 0x80 != 0 {
        f[0..6].copy_from_slice(&R0.0);
    }
    if ctl & 0x40 != 0 {
        fix_ipv4_checksum(&mut f);
    }
    let port = u16::from(ctl & 1 == 1);
    if let Verdict::Forward(p) = r.process(&mut f, port) {
        assert!(p < 2);
        assert!(f.len() >= 14, "a forwarded frame has an Ethernet header");
    }
});
