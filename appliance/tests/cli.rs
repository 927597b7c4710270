//! The `sluice` binary: `check` errors and a JSON run.

use std::process::Command;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

#[test]
fn check_reports_three_distinct_errors() {
    let dir = std::env::temp_dir().join(format!("sluice-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("badkey.toml", "[run]\nduration = 1\nburts = 32\n", "badkey.toml:3:1: key `run.burts`: unknown field `burts`"),
        (
            "unknown-port.toml",
            "[[port]]\nname = \"a\"\ndriver = \"null\"\n\n[[worker]]\ncore = 0\nmode = \"io\"\nrx = [\"a\", \"zz:0\"]\n",
            "unknown-port.toml:8:12: key `worker[0].rx`: port `zz` does not exist",
        ),
        (
            "two-on-one.toml",
            "[[port]]\nname = \"a\"\ndriver = \"null\"\nrxq = 2\ntxq = 2\n\n[[worker]]\ncore = 0\nmode = \"io\"\nrx = [\"a:0\"]\n\n[[worker]]\ncore = 0\nmode = \"io\"\nrx = [\"a:1\"]\n",
            "two-on-one.toml:13:8: key `worker[1].core`: core 0 is already used by worker[0]",
        ),
    ];
    for (name, text, want) in cases {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        let out = sluice().arg("check").arg(&p).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{name}: got {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_accepts_quickstart() {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/quickstart.toml");
    let out = sluice().arg("check").arg(p).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("worker core 1 mode io"));
}

/// The embedded default runs from any directory and prints JSON lines
/// whose summary balances.
#[test]
fn embedded_default_runs_with_json() {
    let out = sluice()
        .args([
            "run",
            "--duration",
            "1.2",
            "--stats-period",
            "0.5",
            "--json",
        ])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 3);
    let s = lines.last().unwrap();
    assert_eq!(s["kind"], "summary");
    assert_eq!(s["balance"]["balanced"], true);
    // 2 × 200 kpps × 1.2 s configured: offered, or counted late by the
    // generator when the machine is busy.
    let b = &s["balance"];
    let offered = b["offered"].as_u64().unwrap() + b["gen_late"].as_u64().unwrap();
    assert!(offered > 300_000, "{s}");
    assert!(s["ports"][0]["e2e_ns"]["p99"].as_f64().unwrap() > 0.0);
    assert!(lines[0]["cores"][0]["idle"].as_f64().is_some());
}

/// SIGTERM (systemd, container runtimes) and SIGINT stop a run cleanly:
/// exit 0 with the summary, balanced. (SIGHUP reloads the config file:
/// `tests/reload.rs`; here, with the embedded config, it has nothing to
/// reload, says so and runs on.)
#[test]
fn sigterm_and_sigint_stop_with_the_summary_and_sighup_does_not() {
    use std::io::{BufRead, BufReader};
    for sig in ["-TERM", "-INT"] {
        let mut child = sluice()
            .args(["run", "--duration", "0", "--stats-period", "0.2", "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Running once the first period report is out.
        let first = lines.next().unwrap().unwrap();
        assert!(first.contains("\"period\""), "{first}");
        if sig == "-TERM" {
            // A SIGHUP first: not a stop; reports keep coming.
            let hup = std::process::Command::new("kill")
                .args(["-HUP", &child.id().to_string()])
                .status()
                .unwrap();
            assert!(hup.success());
            for _ in 0..3 {
                let l = lines.next().unwrap().unwrap();
                assert!(l.contains("\"period\""), "after SIGHUP: {l}");
            }
        }
        let killed = std::process::Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let last = lines.map(Result::unwrap).last().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{sig}: {status:?}");
        let s: serde_json::Value = serde_json::from_str(&last).unwrap();
        assert_eq!(s["kind"], "summary", "{sig}");
        assert_eq!(s["balance"]["balanced"], true, "{sig}: {s}");
    }
}

/// A reader that goes away (`sluice run | head -1`) is no crash: the run
/// stops cleanly, long before its duration, and `check` exits 0.
#[test]
fn closed_stdout_stops_the_run_cleanly() {
    use std::io::{BufRead, BufReader};
    let t0 = std::time::Instant::now();
    let mut child = sluice()
        .args(["run", "--duration", "30", "--stats-period", "0.2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("ok"), "{first}");
    // The reader is gone now (dropped above).
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(t0.elapsed().as_secs() < 20, "stopped early");
}
