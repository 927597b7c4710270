//! Sluice: a poll-mode packet forwarding appliance.
//!
//! The binary `sluice` is a thin CLI over this library. The rooms:
//!
//! - [`config`]: the TOML configuration, loaded, validated (errors name the
//!   file, line and key) and typed; one file per section.
//! - [`app`] opens the configured ports (the native drivers; `eal` opens
//!   DPDK's) and hands them to the [`engine`], which gives each queue to
//!   one worker, spawns the workers, runs [`manage`] (the management
//!   thread: reports, scrapes, `sluice ctl`, reloads, the kernel's
//!   changes) and stops in order; [`stages`] builds the forwarding stages
//!   from the config.
//! - [`worker`]: the run-to-completion loop (a poll round's data path, the
//!   policies carried out, cycle accounting); [`poll`]: the poll-mode
//!   policies' settings and decisions.
//! - [`counters`] (what workers count), [`telemetry`] (reports from them),
//!   [`metrics`] (the Prometheus endpoint), [`ctl`] (the control socket
//!   and `sluice ctl`), [`serve`] (the bounded server under both),
//!   [`reload`] (hot reload), [`lock`] (one instance per device and
//!   socket), [`rib`] (the routes and where each came from: config, ctl,
//!   kernel), [`netlink`] (the kernel's routes, neighbours, addresses and
//!   links turned into RIB changes), [`taps`]
//!   (the TAP mirrors' data path, between the workers and the kernel).
//! - [`txgen`]: the generator of `txonly`/`flowgen` workers and the
//!   commands that drive it; `sluice bench ndr` ([`ndr`]) searches a
//!   device's no-drop rate with it.
//!
//! Never here: `unsafe` (that lives in `pmd`), or anything per packet that
//! allocates, locks, makes a syscall or touches a channel (the worker's
//! loop is checked for it by review and by the benchmarks).
#![forbid(unsafe_code)]

pub mod app;
pub mod capture;
pub mod config;
pub mod counters;
pub mod ctl;
#[cfg(feature = "dpdk")]
pub mod eal;
pub mod engine;
pub mod export;
pub mod ha;
pub mod lock;
pub mod manage;
pub mod metrics;
pub mod ndr;
pub mod netlink;
pub mod poll;
pub mod privilege;
pub mod reload;
pub mod rib;
pub mod serve;
pub mod service;
pub mod stages;
pub mod state;
pub mod taps;
pub mod telemetry;
pub mod txgen;
pub mod worker;
