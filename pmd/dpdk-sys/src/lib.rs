//! Raw bindings to the system DPDK (22.11) and the `sluice_*` shim for its
//! static-inline functions and macros (`rte_eth_rx_burst`,
//! `rte_pktmbuf_alloc`, `rte_errno`, ...). Everything here is `unsafe`; the
//! safe wrapper is `pmd::dpdk` (feature `dpdk`).
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code
)]
#![allow(clippy::all)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
