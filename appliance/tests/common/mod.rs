//! Shared by the end-to-end tests: run a config in-process, one run at a
//! time (runs share the machine's two cores).

use appliance::config;
use appliance::telemetry::Report;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `text` as a config; returns the period reports and the summary.
pub fn run(text: &str) -> (Vec<Report>, Report) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = config::parse(text, "test.toml", None).unwrap_or_else(|e| panic!("{e}"));
    let stop = AtomicBool::new(false);
    let mut periods = Vec::new();
    let summary = appliance::app::run(&cfg, &stop, &mut |r| periods.push(r.clone())).unwrap();
    (periods, summary)
}

/// Every packet offered was delivered, or dropped by the RX ring
/// (`rx_missed`), never by a stage, a full TX ring or for want of a
/// route. Ring drops are allowed only when the machine was visibly busy:
/// the generator counted packets it could not offer on time, or a worker
/// spent wall time busy that its own CPU clock did not see (it was
/// preempted mid-burst). A worker starved of CPU by other work overflows
/// its ring like a NIC's. Even then a quarter must get through (a policy
/// that never woke would deliver nothing). On a quiet machine nothing may
/// be missed.
#[allow(dead_code)]
pub fn delivered_all_but_missed(s: &Report, what: &str) {
    let b = s.balance.as_ref().expect("a summary has a balance");
    assert!(b.balanced, "{what}: {}", s.text());
    assert_eq!(
        b.delivered + b.rx_missed,
        b.offered,
        "{what}: lost other than at the RX ring: {}",
        s.text()
    );
    let starved = s.cores.iter().any(|c| c.busy > c.cpu + 0.05);
    if b.gen_late == 0 && !starved {
        assert_eq!(
            b.rx_missed,
            0,
            "{what}: missed on a quiet machine: {}",
            s.text()
        );
    }
    assert!(b.delivered * 4 >= b.offered, "{what}: {}", s.text());
}
