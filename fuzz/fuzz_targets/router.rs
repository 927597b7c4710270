//! The whole router stage on arbitrary frames (addressed to the router's
//! MAC half the time): nothing may panic, and what it sends is a frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipeline::fwd::ForwardMode;
use pipeline::Verdict;

mod common;

use common::{router, R0};

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
