//! The flow table kept across a restart (`[ha] state_file`) and sent to a
//! peer: how long a table of N flows takes to list, write, read back and
//! install, as a stop and a start do them, and how many bytes a flow
//! takes in the file.

use anyhow::{ensure, Result};
use pipeline::conntrack::saved::Saved;
use pipeline::conntrack::{ConnTrack, State, Timeouts, Tuple};
use std::time::Instant;

#[derive(clap::Args)]
pub struct StateArgs {
    /// Flows in the table.
    #[arg(long, default_value_t = 1_000_000)]
    flows: usize,
    /// Passes (median reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// The directory the file is written in.
    #[arg(long, default_value = "/tmp")]
    dir: std::path::PathBuf,
    /// Only write the table as a state file at this path, for a Sluice
    /// to start from (`bench/run-bulk-sync.sh`), and measure nothing.
    #[arg(long)]
    keep: Option<std::path::PathBuf>,
}

/// Flow `i`: UDP from 10.x to 198.51.100.x, masqueraded to 203.0.113.1
/// on a port of its own.
fn flow(i: usize) -> Saved {
    let v4 = |a: u32| 0xffff_0000_0000u128 | u128::from(a);
    let orig = Tuple {
        src: v4(0x0a00_0000 + (i as u32 >> 8)),
        dst: v4(0xc633_6400 | (i as u32 & 0xff)),
        sport: 1024 + (i % 60000) as u16,
        dport: 443,
        proto: 17,
        zone: 0,
    };
    let reply = Tuple {
        src: orig.dst,
        dst: v4(0xcb00_7101 + (i / 60000) as u32),
        sport: 443,
        dport: 1024 + (i % 60000) as u16,
        ..orig
    };
    Saved {
        orig,
        reply,
        state: State::Replied,
        remaining_ns: 120_000_000_000,
        worker: 0,
    }
}

pub fn state(a: StateArgs) -> Result<()> {
    let mut table = ConnTrack::new(a.flows, Timeouts::default());
    table.set_now(1_000_000_000_000);
    for i in 0..a.flows {
        ensure!(table.install(&flow(i)).is_ok(), "flow {i} refused");
    }
    if let Some(path) = &a.keep {
        let mut all = Vec::new();
        table.copy_flows(0, usize::MAX, usize::MAX, &Default::default(), &mut all);
        appliance::state::write(path, &[(0, all)])?;
        return Ok(());
    }
    let path = a
        .dir
        .join(format!("sluice-bench-state-{}", std::process::id()));
    let (mut list, mut write, mut read, mut install) = (vec![], vec![], vec![], vec![]);
    let mut bytes = 0;
    for _ in 0..a.runs {
        // A stop: the worker lists its flows, the management thread writes them.
        let t = Instant::now();
        let mut all = Vec::new();
        table.copy_flows(0, usize::MAX, usize::MAX, &Default::default(), &mut all);
        list.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        appliance::state::write(&path, &[(0, all)])?;
        write.push(t.elapsed().as_secs_f64());
        bytes = std::fs::metadata(&path)?.len();
        // A start: read back (checked, aged), then installed.
        let t = Instant::now();
        let loaded =
            appliance::state::read(&path, a.flows)?.ok_or_else(|| anyhow::anyhow!("no file"))?;
        read.push(t.elapsed().as_secs_f64());
        ensure!(
            loaded.flows.len() == a.flows,
            "{} read back",
            loaded.flows.len()
        );
        let mut fresh = ConnTrack::new(a.flows, Timeouts::default());
        fresh.set_now(2_000_000_000_000);
        let t = Instant::now();
        let ok = loaded
            .flows
            .iter()
            .filter(|s| fresh.install(s).is_ok())
            .count();
        install.push(t.elapsed().as_secs_f64());
        ensure!(ok == a.flows, "{ok} of {} installed", a.flows);
    }
    let _ = std::fs::remove_file(&path);
    let ms = |v: &mut Vec<f64>| crate::median(v) * 1e3;
    let (l, w, r, i) = (
        ms(&mut list),
        ms(&mut write),
        ms(&mut read),
        ms(&mut install),
    );
    println!("| step | {} flows, ms (median of {}) |", a.flows, a.runs);
    println!("|---|---|");
    println!("| list the table (the worker, as it stops) | {l:.0} |");
    println!("| write the file (encode, CRC-32, fsync, rename) | {w:.0} |");
    println!("| **save: list + write** | **{:.0}** |", l + w);
    println!("| read the file back (checks, CRC-32, aging) | {r:.0} |");
    println!("| install into an empty table | {i:.0} |");
    println!("| **load: read + install** | **{:.0}** |", r + i);
    println!();
    println!(
        "The file: {bytes} bytes, {:.1} bytes a flow.",
        bytes as f64 / a.flows as f64
    );
    Ok(())
}
