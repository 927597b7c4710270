//! Sluice: a poll-mode packet forwarding appliance.
//!
//! The binary `sluice` is a thin CLI over this library: [`config`] loads and
//! validates the TOML configuration, [`app::run`] starts the ports, workers
//! and generator and runs the management loop, [`worker`] is the
//! run-to-completion data-plane loop, [`telemetry`] turns counters into
//! reports. This crate has no `unsafe`: that lives in `pmd`.
#![forbid(unsafe_code)]

pub mod app;
pub mod config;
pub mod counters;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod engine;
pub mod lock;
pub mod poll;
pub mod stages;
pub mod telemetry;
pub mod worker;
