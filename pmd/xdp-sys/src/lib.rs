//! AF_XDP sockets through the system libxdp: the C shim (`shim.c`) wraps
//! UMEM and socket setup (one UMEM shared by many sockets; libxdp loads,
//! attaches and later detaches its default XDP program) and the
//! static-inline ring helpers. Used by `pmd`'s `afxdp` feature only.
#![allow(missing_docs)]

use std::os::raw::{c_char, c_int, c_void};

/// A registered UMEM (opaque).
#[repr(C)]
pub struct SlUmem {
    _private: [u8; 0],
}

/// An open socket with its rings (opaque).
#[repr(C)]
pub struct SlXsk {
    _private: [u8; 0],
}

/// In a descriptor's length as the shim passes it: the frame goes on in
/// the next descriptor (multi-buffer sockets; `XDP_PKT_CONTD`).
pub const SL_MORE: u32 = 1 << 31;

extern "C" {
    pub fn sl_umem_create(
        area: *mut c_void,
        len: u64,
        chunk: u32,
        ring: u32,
        err: *mut c_int,
    ) -> *mut SlUmem;
    pub fn sl_umem_delete(u: *mut SlUmem);
    pub fn sl_xsk_open(
        u: *mut SlUmem,
        ifname: *const c_char,
        queue: u32,
        ring: u32,
        zerocopy: c_int,
        skb: c_int,
        sg: c_int,
        err: *mut c_int,
    ) -> *mut SlXsk;
    pub fn sl_xsk_close(x: *mut SlXsk);
    pub fn sl_xsk_fd(x: *mut SlXsk) -> c_int;
    pub fn sl_xsk_rx(x: *mut SlXsk, addrs: *mut u64, lens: *mut u32, n: u32, frames: u32) -> u32;
    pub fn sl_xsk_fill(x: *mut SlXsk, addrs: *const u64, n: u32) -> u32;
    pub fn sl_xsk_tx(x: *mut SlXsk, addrs: *const u64, lens: *const u32, n: u32) -> u32;
    pub fn sl_xsk_complete(x: *mut SlXsk, addrs: *mut u64, n: u32) -> u32;
    pub fn sl_xsk_stats(x: *mut SlXsk, out: *mut u64) -> c_int;
}
