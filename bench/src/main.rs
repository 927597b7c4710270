//! `sluice-bench`: Sluice's benchmarks.
//!
//! - `null-io`: io forwarding between two null ports on one worker core
//!   (Mpps, cycles per packet) and, when `dpdk-testpmd` is installed, the
//!   same with `dpdk-testpmd --forward-mode=io` between two `net_null`
//!   vdevs, same burst and forwarding core, alternating runs, medians and
//!   their ratio (`bench/run-null-io.sh`).
//! - `poll-sweep`: the polling-versus-interrupts study: an offered-load
//!   sweep × every poll-mode policy on the softnic, with a Markdown table
//!   and SVG plots (`bench/run-poll-sweep.sh`).
//! - `lpm`: the full Internet table in the LPM tables: build time, memory,
//!   lookups per second (`bench/run-lpm.sh`; criterion micro-benchmarks in
//!   `benches/lpm.rs`).
//! - `router`: the router with the full table against io forwarding of the
//!   same traffic, side by side (`bench/run-router.sh`).
//! - `acl`: the rule classifier against a linear scan on the ClassBench
//!   sets (`bench/run-acl.sh`); `classbench-grow` writes a grown set for
//!   a gateway to load (`bench/run-gateway-rules.sh`).
//! - `udp-pcap` writes captures for replaying drivers and tcpreplay;
//!   `plot-table` plots a results table's columns (`bench/run-lab-scale.sh`).

mod acl;
mod fib;
mod gateway;
mod lpm;
mod null_io;
mod pcap_gen;
mod plot_table;
mod router;
mod state;
mod sweep;

/// Tables of tens of MiB (routes, rules, conntrack) get huge pages, as in
/// the appliance.
#[global_allocator]
static ALLOC: pmd::alloc::HugeAlloc = pmd::alloc::HugeAlloc;

use anyhow::Result;
use clap::Parser;
use std::process::{Command, Stdio};

#[derive(Parser)]
#[command(about = "Sluice's benchmarks")]
enum Cli {
    /// io forwarding on two null ports: Sluice vs dpdk-testpmd.
    NullIo(null_io::NullIo),
    /// Offered-load sweep × poll-mode policy on the softnic.
    PollSweep(sweep::Sweep),
    /// LPM on the full Internet table: build time, memory, lookups/s.
    Lpm(lpm::LpmArgs),
    /// The router with the full table vs io forwarding, side by side.
    Router(router::RouterArgs),
    /// The rule classifier vs a linear scan on the ClassBench sets.
    Acl(acl::AclArgs),
    /// Writes a rule set grown from a ClassBench set (as `acl --grow`).
    ClassbenchGrow(acl::GrowArgs),
    /// The full gateway pipeline (conntrack, firewall, NAT, routing) in one
    /// core vs the router alone: new and established flows.
    Gateway(gateway::GatewayArgs),
    /// Live route updates on the full table while a worker forwards.
    Fib(fib::FibArgs),
    /// The flow table kept across a restart: save and load times.
    State(state::StateArgs),
    /// Writes a pcap of distinct IPv4/UDP packets for replaying drivers.
    UdpPcap(pcap_gen::UdpPcapArgs),
    /// Plots one column of a results table against another (log x).
    PlotTable(plot_table::PlotTableArgs),
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub(crate) fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

pub(crate) fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn main() -> Result<()> {
    match Cli::parse() {
        Cli::NullIo(a) => null_io::null_io(a),
        Cli::PollSweep(a) => sweep::sweep(a),
        Cli::Lpm(a) => lpm::lpm(a),
        Cli::Router(a) => router::router(a),
        Cli::Acl(a) => acl::acl(a),
        Cli::ClassbenchGrow(a) => acl::classbench_grow(a),
        Cli::Gateway(a) => gateway::gateway(a),
        Cli::Fib(a) => fib::fib(a),
        Cli::State(a) => state::state(a),
        Cli::UdpPcap(a) => pcap_gen::udp_pcap(a),
        Cli::PlotTable(a) => plot_table::plot_table(a),
    }
}
