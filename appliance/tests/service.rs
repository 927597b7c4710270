//! The service manager's protocol without systemd as PID 1: the test
//! listens on a `NOTIFY_SOCKET` as systemd would and runs the shipped
//! quickstart for 2 s with a 0.2 s watchdog (`WATCHDOG_USEC`, and
//! `WATCHDOG_PID` its pid, as systemd sets them). Sluice
//! says `READY=1` with a `STATUS=` line, pings `WATCHDOG=1` about every
//! 0.1 s while its worker makes progress, and says `STOPPING=1` when it
//! stops; without `NOTIFY_SOCKET` it runs as before.

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn ready_watchdog_and_stopping_reach_the_notify_socket() {
    let dir = std::env::temp_dir().join(format!("sluice-notify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/quickstart.toml"
    ))
    .unwrap();
    let text = shipped.replacen("duration = 10 ", "duration = 2 ", 1);
    assert_ne!(text, shipped);
    let cfg = dir.join("q.toml");
    std::fs::write(&cfg, text).unwrap();
    // systemd sets WATCHDOG_PID to the main process's pid (a shell's
    // `$$`, kept by `exec`).
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("WATCHDOG_PID=$$ exec \"$0\" run \"$1\"")
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .arg(&cfg)
        .env("NOTIFY_SOCKET", &path)
        .env("WATCHDOG_USEC", "200000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut said = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = sock.recv(&mut buf) {
        let m = String::from_utf8_lossy(&buf[..n]).to_string();
        let stop = m.contains("STOPPING=1");
        said.push(m);
        if stop {
            break;
        }
    }
    let status = child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "{status:?}");
    let all = said.join("|");
    assert!(said[0].contains("READY=1"), "{all}");
    assert!(
        said[0].contains("STATUS=forwarding: 2 ports, 1 workers"),
        "{all}"
    );
    assert!(said.last().unwrap().contains("STOPPING=1"), "{all}");
    // About 2 s of pings every 0.1 s: a busy machine may delay some, and
    // none may be missing for long.
    let pings = said.iter().filter(|m| m.contains("WATCHDOG=1")).count();
    assert!((8..=25).contains(&pings), "{pings} pings: {all}");
    assert!(!all.contains("no progress"), "{all}");
}

/// A worker wedged on purpose (`sluice ctl debug wedge`, with
/// `SLUICE_FAULT_INJECTION=1`) stops the watchdog's pings while it does
/// not poll, the status naming its core, and they come back when it polls
/// again: a service manager would have restarted the service (its
/// `WatchdogSec=` passed with no ping). Without the variable the command
/// is refused.
#[test]
fn a_wedged_worker_stops_the_watchdog_pings_until_it_polls_again() {
    let dir = std::env::temp_dir().join(format!("sluice-wedge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/quickstart.toml"
    ))
    .unwrap();
    let text = shipped.replacen("duration = 10 ", "duration = 6 ", 1)
        + "\n[management]\nsocket = \"ctl.sock\"\n";
    let cfg = dir.join("q.toml");
    std::fs::write(&cfg, text).unwrap();
    let ctl_sock = dir.join("ctl.sock");
    let ctl = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("ctl")
            .arg("-s")
            .arg(&ctl_sock)
            .args(args)
            .output()
            .unwrap()
    };
    for (fault, asked) in [(false, "refused"), (true, "taken")] {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("WATCHDOG_PID=$$ exec \"$0\" run \"$1\"")
            .arg(env!("CARGO_BIN_EXE_sluice"))
            .arg(&cfg)
            .env("NOTIFY_SOCKET", &path)
            .env("WATCHDOG_USEC", "200000")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if fault {
            cmd.env("SLUICE_FAULT_INJECTION", "1");
        }
        let mut child = cmd.spawn().unwrap();
        let mut buf = [0u8; 4096];
        let mut said = Vec::new();
        let mut next = || {
            let n = sock.recv(&mut buf).expect("a notification");
            String::from_utf8_lossy(&buf[..n]).to_string()
        };
        let first = next();
        assert!(first.contains("READY=1"), "{first}");
        // Pings while the worker polls.
        while said
            .iter()
            .filter(|m: &&String| m.contains("WATCHDOG=1"))
            .count()
            < 3
        {
            said.push(next());
        }
        let o = ctl(&["debug", "wedge", "1", "1.5"]);
        assert_eq!(o.status.success(), fault, "{asked}: {o:?}");
        if !fault {
            assert!(
                String::from_utf8_lossy(&o.stderr).contains("SLUICE_FAULT_INJECTION=1"),
                "{o:?}"
            );
        } else {
            // The stall is said (no ping with it), then the pings resume.
            let mut stalled = 0;
            loop {
                let m = next();
                if m.contains("no progress") {
                    assert!(!m.contains("WATCHDOG=1"), "{m}");
                    assert!(m.contains("core 1 made no progress"), "{m}");
                    stalled += 1;
                } else if stalled > 0 && m.contains("WATCHDOG=1") {
                    break;
                }
                assert!(
                    !m.contains("STOPPING=1"),
                    "stopped before the pings came back"
                );
            }
            // 1.5 s wedged, a check every 0.1 s: most of them say it.
            assert!(stalled >= 5, "{stalled} stalls said");
        }
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        while let Ok(n) = sock.recv(&mut buf) {
            if String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1") {
                break;
            }
        }
        assert!(child.wait().unwrap().success());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
