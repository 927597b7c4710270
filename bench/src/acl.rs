//! `acl`: the classifier against a linear scan on every ClassBench rule set
//! here, and on 100k-rule sets grown from the 10k ones
//! ([`testdata::classbench`]): build time, tuples, memory, and lookups per
//! second on the set's trace, measured side by side in one run.

use anyhow::{Context, Result};
use clap::Parser;
use pipeline::acl::{
    linear, parse_classbench, parse_trace, Classifier, Key, Layout, Memo, TupleSpace,
};
use std::hint::black_box;
use std::time::Instant;

/// Arguments of `acl`.
#[derive(Parser)]
pub struct AclArgs {
    /// Passes over each trace (median reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Only this rule set (e.g. `fw1_10k`).
    #[arg(long)]
    set: Option<String>,
    /// Skip the tuple space and the linear scan (their columns read -).
    #[arg(long)]
    classifier_only: bool,
    /// Skip the other layout too (its column reads -): the chosen
    /// layout alone, as `bench/run-acl-instructions.sh` counts it.
    #[arg(long)]
    chosen_only: bool,
    /// Rules in each grown set (grown from each 10k set; 0: none).
    #[arg(long, default_value_t = 100_000)]
    grow: usize,
    /// Also the grown sets moved into IPv6 (`testdata::classbench::into_ipv6`:
    /// each address's 32 bits after 2001:db8::/32), their traces too: the
    /// classifier's IPv6 rules (rows `…k6`), and the same with each IPv4
    /// host a /128 (`into_ipv6_hosts`, rows `…k6h`).
    #[arg(long)]
    ipv6: bool,
}

/// Arguments of `classbench-grow`.
#[derive(Parser)]
pub struct GrowArgs {
    /// The set grown from (one of ../shared/data/classbench, e.g.
    /// `fw1_10k`).
    #[arg(long)]
    from: String,
    /// Rules in the grown set.
    #[arg(long, default_value_t = 100_000)]
    rules: usize,
    /// The file to write (ClassBench's rule lines, as
    /// `firewall.classbench_file` reads them).
    #[arg(long)]
    out: std::path::PathBuf,
}

/// Writes the set `acl --grow` measures (the same seed) to a file, for a
/// gateway config to load.
pub fn classbench_grow(a: GrowArgs) -> Result<()> {
    let grown = testdata::classbench::grow(&lines(&format!("classbench/{}", a.from))?, a.rules, 1);
    anyhow::ensure!(
        grown.len() == a.rules,
        "{}: grew {} distinct rules, not {}",
        a.from,
        grown.len(),
        a.rules
    );
    std::fs::write(&a.out, grown.join("\n") + "\n")
        .with_context(|| format!("writing {}", a.out.display()))
}

/// Headers a linear scan of a grown set is timed on (of its trace).
const LINEAR_KEYS: usize = 5_000;

/// One pass of the classifier over a trace (not inlined: what
/// `bench/run-acl-instructions.sh` counts).
#[inline(never)]
fn classify_pass(c: &Classifier, trace: &[Key]) {
    each(c, trace)
}

/// [`classify_pass`] through a worker's memo, as the gateway classifies.
#[inline(never)]
fn memo_pass(c: &Classifier, trace: &[Key], memo: &mut Memo) {
    each_memo(c, trace, memo)
}

/// The same passes for the layout `Classifier::build` did not choose:
/// functions of their own, so that what is counted in the two above is
/// the chosen layout's alone (each with a mark of its own after the loop,
/// or the compiler merges identical functions into one symbol).
#[inline(never)]
fn other_pass(c: &Classifier, trace: &[Key]) {
    each(c, trace);
    black_box("other_pass");
}

#[inline(never)]
fn other_memo_pass(c: &Classifier, trace: &[Key], memo: &mut Memo) {
    each_memo(c, trace, memo);
    black_box("other_memo_pass");
}

#[inline(always)]
fn each(c: &Classifier, trace: &[Key]) {
    for k in trace {
        black_box(c.classify(k));
    }
}

#[inline(always)]
fn each_memo(c: &Classifier, trace: &[Key], memo: &mut Memo) {
    for k in trace {
        black_box(c.classify_memo(k, memo));
    }
}

/// `c` through a worker's memo over `trace` by `pass`: the share of one
/// pass's lookups the memo answered (filled by that pass), then the
/// median of `runs` passes in M lookups/s.
fn memo_rate(
    c: &Classifier,
    trace: &[Key],
    runs: usize,
    pass: fn(&Classifier, &[Key], &mut Memo),
) -> (f64, f64) {
    let mut memo = Memo::default();
    pass(c, trace, &mut memo);
    let hits = memo.hits as f64 / trace.len() as f64;
    (hits, rate(runs, trace.len(), || pass(c, trace, &mut memo)))
}

fn lines(rel: &str) -> Result<Vec<String>> {
    if rel.ends_with(".gz") {
        testdata::gz_lines(rel).with_context(|| format!("../shared/data/{rel} is missing"))
    } else {
        let p =
            testdata::shared(rel).with_context(|| format!("../shared/data/{rel} is missing"))?;
        Ok(std::fs::read_to_string(p)?
            .lines()
            .map(String::from)
            .collect())
    }
}

fn rate(runs: usize, n: usize, mut f: impl FnMut()) -> f64 {
    let mut v: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            n as f64 / t.elapsed().as_secs_f64() / 1e6
        })
        .collect();
    crate::median(&mut v)
}

/// Runs the comparison and prints a Markdown table.
pub fn acl(a: AclArgs) -> Result<()> {
    let mut sets: Vec<(String, &str)> = [
        ("acl1_1k", "acl1_1k_trace"),
        ("fw1_1k", "fw1_1k_trace"),
        ("ipc1_1k", "ipc1_1k_trace"),
        ("acl1_10k", "acl1_1k_trace"),
        ("fw1_10k", "fw1_10k_trace.gz"),
        ("ipc1_10k", "ipc1_10k_trace.gz"),
    ]
    .map(|(r, t)| (r.to_string(), t))
    .to_vec();
    let grown = |n: usize| format!("{}k", n / 1000);
    if a.grow > 0 {
        for seed in ["acl1", "fw1", "ipc1"] {
            sets.push((format!("{seed}_{}", grown(a.grow)), "grown"));
        }
        if a.ipv6 {
            for seed in ["acl1", "fw1", "ipc1"] {
                sets.push((format!("{seed}_{}6", grown(a.grow)), "grown6"));
            }
            for seed in ["acl1", "fw1", "ipc1"] {
                sets.push((format!("{seed}_{}6h", grown(a.grow)), "grown6h"));
            }
        }
    }
    if let Some(s) = &a.set {
        anyhow::ensure!(
            sets.iter().any(|(rf, _)| rf == s),
            "--set {s}: no such rule set (one of {})",
            sets.iter()
                .map(|(rf, _)| rf.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!("ClassBench rule sets and traces from ../shared/data/classbench (acl1_10k has no trace here: the 1k trace's headers are used); the {} sets grown from the 10k ones by `testdata::classbench::grow` (ClassBench's method with the 10k set as its seed: prefix lengths, port ranges and protocols of a seed rule, prefixes drawn down the seed's address trees), each with {} headers drawn inside its rules (`testdata::classbench::trace`), the linear scan timed on the first {LINEAR_KEYS}; one core; median of {} passes over each trace. The IPv4 rules' layout is the one `Classifier::build` chooses (bit vectors in cells up to 50,000 rules where they take at most 4 MiB, decision trees otherwise); the other layout is built and timed beside it. Sets ending in 6 (with `--ipv6`): the grown sets moved into IPv6 (`testdata::classbench::into_ipv6`: each address's 32 bits after 2001:db8::/32, a prefix 32 bits longer), their traces too; in 6h, each IPv4 host a /128 (`into_ipv6_hosts`); their rules are the classifier's IPv6 rules (bit vectors up to 20,000 rules where they take at most 4 MiB, decision trees over the addresses' intervals otherwise). With a memo: through a worker's memo of classifications by elementary interval (`pipeline::acl::Memo`, as the gateway classifies a flow's first packet), filled by a pass before; hits: the share of one pass's lookups it answered.\n", grown(a.grow), a.grow, a.runs);
    println!("| rules | count | build | IPv4 rules as | bit vectors | memory | classifier M lookups/s | cycles/lookup | with a memo: hits in one pass, M lookups/s | the other layout: memory, M lookups/s; with a memo | tuple space M lookups/s | linear scan M lookups/s | speed-up vs linear |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let hz = pmd::sys::Tsc::calibrate(std::time::Duration::from_millis(50)).hz as f64;
    // The cost against size, one row per set and way of looking up (for
    // the plots of `bench/run-acl.sh`): cycles a lookup, and memory.
    let mut by_size: Vec<String> = Vec::new();
    for (rf, tf) in &sets {
        if a.set.as_deref().is_some_and(|s| s != rf) {
            continue;
        }
        let seed = rf.split('_').next().unwrap_or_default();
        let (rule_lines, trace_lines) = if tf.starts_with("grown") {
            let r =
                testdata::classbench::grow(&lines(&format!("classbench/{seed}_10k"))?, a.grow, 1);
            let t = testdata::classbench::trace(&r, a.grow, 2);
            (r, t)
        } else {
            (
                lines(&format!("classbench/{rf}"))?,
                lines(&format!("classbench/{tf}"))?,
            )
        };
        let mut rules: Vec<_> = rule_lines
            .iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| parse_classbench(l).with_context(|| format!("{rf}: {l}")))
            .collect::<Result<_>>()?;
        let mut trace: Vec<Key> = trace_lines
            .iter()
            .filter_map(|l| parse_trace(l).map(|(k, _)| k))
            .collect();
        let ipv6 = tf.starts_with("grown6");
        if ipv6 {
            use testdata::classbench::{into_ipv6, into_ipv6_hosts};
            let to6 = if *tf == "grown6h" {
                into_ipv6_hosts
            } else {
                into_ipv6
            };
            for r in &mut rules {
                (r.src, r.dst) = (to6(r.src), to6(r.dst));
            }
            for k in &mut trace {
                (k.src, k.dst) = (to6((k.src, 128)).0, to6((k.dst, 128)).0);
            }
        }
        let t0 = Instant::now();
        let c = Classifier::build(rules.clone());
        let build = t0.elapsed();
        let fast = rate(a.runs, trace.len(), || classify_pass(&c, &trace));
        let (hit_rate, memoed) = memo_rate(&c, &trace, a.runs, memo_pass);
        // The other layout side by side: trees where bit vectors were
        // chosen, bit vectors (cut as the build cut them before the
        // trees, whatever their memory) where trees were.
        let other = if a.chosen_only || ipv6 {
            "-".to_string()
        } else {
            let other = match c.layout() {
                Layout::Cut { .. } => Classifier::build_trees(rules.clone()),
                Layout::Trees { .. } => Classifier::build_vectors(rules.clone()),
            };
            let as_other = rate(a.runs, trace.len(), || other_pass(&other, &trace));
            let (hits, memoed) = memo_rate(&other, &trace, a.runs, other_memo_pass);
            format!(
                "{}: {:.1} MiB, {as_other:.2}; {:.0}%, {memoed:.2}",
                match other.layout() {
                    Layout::Cut { .. } => "bit vectors",
                    Layout::Trees { .. } => "trees",
                },
                other.memory() as f64 / (1 << 20) as f64,
                hits * 100.0,
            )
        };
        let cycles = |rate: f64| hz / (rate * 1e6);
        let seed = if ipv6 {
            format!(
                "{seed} IPv6{}",
                if *tf == "grown6h" { ", hosts" } else { "" }
            )
        } else {
            seed.to_string()
        };
        by_size.push(format!(
            "| {seed}, classifier | {} | {:.0} | {:.2} |",
            rules.len(),
            cycles(fast),
            c.memory() as f64 / (1 << 20) as f64
        ));
        let (mid, slow, speedup) = if a.classifier_only || a.chosen_only {
            ("-".to_string(), "-".to_string(), "-".to_string())
        } else {
            let ts = TupleSpace::build(rules.clone());
            let mid = rate(a.runs, trace.len(), || {
                for k in &trace {
                    black_box(ts.classify(k));
                }
            });
            let some = &trace[..trace.len().min(if tf.starts_with("grown") {
                LINEAR_KEYS
            } else {
                trace.len()
            })];
            let slow = rate(a.runs.min(3), some.len(), || {
                for k in some {
                    black_box(linear(&rules, k));
                }
            });
            by_size.push(format!(
                "| {seed}, tuple space | {} | {:.0} | - |",
                rules.len(),
                cycles(mid)
            ));
            by_size.push(format!(
                "| {seed}, linear scan | {} | {:.0} | - |",
                rules.len(),
                cycles(slow)
            ));
            (
                format!("{mid:.2}"),
                format!("{slow:.3}"),
                format!("{:.0}×", fast / slow),
            )
        };
        println!(
            "| {rf} | {} | {:.1} ms | {} | {} | {:.1} MiB | {fast:.2} | {:.0} | {:.0}%, {memoed:.2} | {other} | {mid} | {slow} | {speedup} |",
            rules.len(),
            build.as_secs_f64() * 1e3,
            if ipv6 {
                format!("IPv6 rules as {}", c.ipv6_layout())
            } else {
                c.layout().to_string()
            },
            c.vectors(),
            c.memory() as f64 / (1 << 20) as f64,
            cycles(fast),
            hit_rate * 100.0,
        );
    }
    if a.set.is_none() {
        println!("\nThe cost against the rules' count (the rows above, one line per seed and way of looking up):\n");
        println!("| lookup | rules | cycles/lookup | memory (MiB) |");
        println!("|---|---|---|---|");
        by_size.sort_by_key(|r| r.split('|').nth(1).map(str::to_owned));
        for r in by_size {
            println!("{r}");
        }
    }
    Ok(())
}
