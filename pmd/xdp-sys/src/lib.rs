//! AF_XDP sockets through the system libxdp: the C shim (`shim.c`) wraps
//! socket and UMEM setup (libxdp loads, attaches and later detaches its
//! default XDP program) and the static-inline ring helpers. Used by `pmd`'s
//! `afxdp` feature only.
#![allow(missing_docs)]

use std::os::raw::{c_char, c_int};

/// An open socket with its UMEM and rings (opaque).
#[repr(C)]
pub struct SlXsk {
    _private: [u8; 0],
}

extern "C" {
    pub fn sl_xsk_open(
        ifname: *const c_char,
        queue: u32,
        frames: u32,
        frame_size: u32,
        zerocopy: c_int,
        skb: c_int,
        err: *mut c_int,
    ) -> *mut SlXsk;
    pub fn sl_xsk_close(x: *mut SlXsk);
    pub fn sl_xsk_fd(x: *mut SlXsk) -> c_int;
    pub fn sl_xsk_rx(x: *mut SlXsk, data: *mut *const u8, lens: *mut u32, n: u32) -> u32;
    pub fn sl_xsk_rx_done(x: *mut SlXsk, n: u32);
    pub fn sl_xsk_tx(x: *mut SlXsk, data: *const *const u8, lens: *const u32, n: u32) -> u32;
    pub fn sl_xsk_stats(x: *mut SlXsk, out: *mut u64) -> c_int;
}
