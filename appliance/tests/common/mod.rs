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
