//! The bad-input corpus (`tests/bad/`): broken configs, each ending with
//! the errors `sluice check` must print (`# error: LINE:COL: key ...`), and
//! the captures and route files they point at. For every file, `check`
//! and `run` print exactly those errors, one per root cause, and exit 1;
//! nothing panics. The edge cases (`tests/edge/`) are valid configs a
//! strict validator might wrongly refuse (/31 links, link-local next hops,
//! CRLF line ends and a byte order mark, a capture with a 65,535-byte
//! frame, a policy translated rule for rule from an nftables ruleset).

use std::path::{Path, PathBuf};
use std::process::Command;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

fn dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(name)
}

/// The errors (not warnings) a command printed.
fn errors(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| !l.starts_with("warning:"))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_bad_config_gets_its_errors_from_check_and_run() {
    // The expectations are for the default build: with the `dpdk` or
    // `afxdp` feature, the missing-driver errors do not apply.
    if cfg!(any(feature = "dpdk", feature = "afxdp")) {
        eprintln!("skipped: expectations are for a build without dpdk/afxdp");
        return;
    }
    let bad = dir("bad");
    let mut files: Vec<_> = std::fs::read_dir(&bad)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 40, "the corpus is {} files", files.len());
    for path in files {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        let want: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# error: "))
            .map(|rest| format!("{name}:{rest}"))
            .collect();
        assert!(!want.is_empty(), "{name} names no expected error");
        for args in [
            vec!["check", &name],
            vec!["run", &name, "--duration", "0.2"],
        ] {
            let out = sluice().args(&args).current_dir(&bad).output().unwrap();
            let got = errors(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{args:?}: exit {:?}\n{}",
                out.status.code(),
                got.join("\n")
            );
            assert_eq!(got, want, "{args:?}");
        }
    }
}

/// A config path that is a device or a directory is refused at once
/// (reading /dev/zero never ends).
#[test]
fn config_that_is_not_a_file_is_refused() {
    for (path, want) in [
        (
            "/dev/zero",
            "/dev/zero: is not a regular file (a device or a pipe)",
        ),
        ("/", "/: is a directory, not a file"),
        (
            "/no/such/sluice.toml",
            "/no/such/sluice.toml: does not exist",
        ),
    ] {
        let out = sluice().args(["check", path]).output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(errors(&out.stderr), vec![want.to_string()]);
    }
}

#[test]
fn edge_cases_are_accepted() {
    let edge = dir("edge");
    for name in [
        "slash31-link.toml",
        "link-local-next-hop.toml",
        "bom-crlf.toml",
        "jumbo-pcap.toml",
        "nftables-policy.toml",
        "router-advertisements.toml",
    ] {
        succeeds(&["check", name], &edge);
    }
    // The BOM/CRLF config runs, too.
    succeeds(&["run", "bom-crlf.toml", "--json"], &edge);
}

/// Every Router Advertisement key set, on a port and a VLAN
/// sub-interface: the run sends the first advertisement of each as it
/// starts and the last (lifetime 0) of each as it stops, all out of the
/// port, accounted for.
#[test]
fn router_advertisements_with_every_key_run() {
    let text = succeeds(
        &["run", "router-advertisements.toml", "--json"],
        &dir("edge"),
    );
    let s: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(s["balance"]["balanced"], true, "{s}");
    assert_eq!(s["cores"][0]["events"]["ra_sent"], 4, "{s}");
    assert_eq!(s["ports"][0]["tx_pkts"], 4, "{s}");
}

/// Runs sluice in `dir`, asserts it exited 0, returns its stdout.
fn succeeds(args: &[&str], dir: &Path) -> String {
    let out = sluice().args(args).current_dir(dir).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A legal 65,535-byte frame no longer keeps the port from opening: it is
/// received cut to the buffer and dropped as truncated, and the run
/// balances over both frames of the capture.
#[test]
fn capture_with_a_65535_byte_frame_replays() {
    let text = succeeds(&["run", "jumbo-pcap.toml", "--json"], &dir("edge"));
    let s: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(s["balance"]["balanced"], true, "{s}");
    let cap = &s["ports"][0];
    assert_eq!(cap["rx_pkts"], 2, "{s}");
    assert_eq!(
        cap["drops"]["stage"]["truncated"], 1,
        "the 65,535-byte frame: {s}"
    );
    let stage: u64 = cap["drops"]["stage"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(stage, 2, "both frames dropped by reason: {s}");
}

/// Two instances writing one capture file: the second is refused before
/// it opens anything, naming the first one's PID; the first is unharmed.
#[test]
fn second_instance_on_a_device_is_refused() {
    let tmp = std::env::temp_dir().join(format!("sluice-two-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let cfg = tmp.join("tx.toml");
    std::fs::write(
        &cfg,
        "[run]\nduration = 10\n\n[[port]]\nname = \"a\"\ndriver = \"null\"\n\n[[port]]\nname = \"out\"\ndriver = \"pcap\"\n\n[port.pcap]\ntx_file = \"out.pcap\"\n\n[[worker]]\ncore = 0\nmode = \"io\"\nrx = [\"a\", \"out\"]\n",
    )
    .unwrap();
    let mut first = sluice()
        .args(["run", cfg.to_str().unwrap(), "--json"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the first holds its lock (it writes its capture header
    // after taking it).
    let out = tmp.join("out.pcap");
    for _ in 0..200 {
        if out.metadata().is_ok_and(|m| m.len() > 0) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let second = sluice()
        .args(["run", cfg.to_str().unwrap(), "--duration", "0.2"])
        .output()
        .unwrap();
    let _ = first.kill();
    let _ = first.wait();
    std::fs::remove_dir_all(&tmp).unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is already in use by another sluice")
            && err.contains(&format!("pid {}", first.id())),
        "{err}"
    );
}
