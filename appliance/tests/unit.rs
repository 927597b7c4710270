//! The systemd unit (`packaging/sluice.service`), without systemd as PID 1:
//! `systemd-analyze verify` accepts it, and Sluice run as the unit runs it
//! (its `ExecStartPre` and `ExecStart` command lines, its `User=` — nobody
//! here, the package's `sluice` user being made only by the package — its
//! `AmbientCapabilities=` only, `NoNewPrivileges=`, a `NOTIFY_SOCKET` and
//! `WATCHDOG_USEC` as `WatchdogSec=` sets them) routes between two
//! namespaces on AF_PACKET ports with TAP mirrors (the unit's capabilities
//! are enough to make them), says `READY=1`, holds no capability in any
//! thread once ready, pings the watchdog, reloads on `ExecReload`'s
//! SIGHUP and stops on SIGTERM with `STOPPING=1` and exit status 0.
//! Needs root, `ip`, `ping`, `setpriv` and `systemd-analyze`; skipped
//! without them unless `CI` is set. The namespaces are removed when the
//! test ends, passed or failed.

mod common;

use common::{as_root, fresh_dir, have, wait_with_stderr, Killed, Nets};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

const UNIT: &str = include_str!("../../packaging/sluice.service");

/// The values of `key=` in the unit, in order.
fn values(key: &str) -> Vec<String> {
    UNIT.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_string)
        .collect()
}

/// The unit's command line for `key` (`ExecStart`), its config file
/// replaced by `cfg`.
fn command_line(key: &str, cfg: &std::path::Path) -> Vec<String> {
    let line = &values(key)[0];
    line.split_whitespace()
        .skip(1)
        .map(|w| {
            if w == "/etc/sluice/sluice.toml" {
                cfg.display().to_string()
            } else {
                w.to_string()
            }
        })
        .collect()
}

#[test]
fn systemd_analyze_verifies_the_unit() {
    if !have("systemd-analyze") {
        assert!(std::env::var_os("CI").is_none(), "systemd-analyze missing");
        return;
    }
    // The unit names /usr/bin/sluice, which the package installs: here the
    // binary under test stands in for it.
    let dir = fresh_dir("sluice-unit-verify");
    let unit = dir.join("sluice.service");
    std::fs::write(
        &unit,
        UNIT.replace("/usr/bin/sluice", env!("CARGO_BIN_EXE_sluice")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Warnings go to stderr with a zero status: none may name the unit.
    assert!(!err.contains("sluice.service"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

const CONFIG: &str = r#"
[run]
duration = 60
stats_period = 1.0

[[port]]
name = "inside"
driver = "afpacket"
mac = "02:51:00:00:00:00"
ipv4 = ["198.18.0.1/24"]
[port.afpacket]
iface = "r0"

[[port]]
name = "outside"
driver = "afpacket"
mac = "02:51:00:00:00:01"
ipv4 = ["198.19.0.1/24"]
[port.afpacket]
iface = "r1"

[[worker]]
core = 0
mode = "l3fwd"
rx = ["inside", "outside"]
[worker.poll]
mode = "interrupt"

[control_plane]
tap = true
netlink = true

[management]
socket = "ctl.sock"
"#;

#[test]
fn run_as_the_unit_runs_it_it_routes_and_holds_no_capability() {
    if !as_root() || !have("ip") || !have("ping") || !have("setpriv") {
        return;
    }
    let n = Nets::mirror_lab("sl-unit");
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.sh(
        c,
        "ip link set c0 up && ip addr add 198.18.0.2/24 dev c0 \
         && ip route add 198.19.0.0/24 via 198.18.0.1",
    );
    n.sh(
        s,
        "ip link set s0 up && ip addr add 198.19.0.2/24 dev s0 \
         && ip route add 198.18.0.0/24 via 198.19.0.1",
    );
    // RuntimeDirectory= and friends: a directory of the user's.
    let dir = fresh_dir("sluice-unit-run");
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, CONFIG).unwrap();
    let sock = dir.join("ctl.sock");
    let notify_path = dir.join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    std::fs::set_permissions(&notify_path, std::fs::Permissions::from_mode(0o777)).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();

    // setpriv as systemd would set the process up from the unit.
    assert_eq!(values("User"), ["sluice"]);
    assert_eq!(values("NoNewPrivileges"), ["yes"]);
    let caps: Vec<String> = values("AmbientCapabilities")[0]
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    assert_eq!(
        values("CapabilityBoundingSet"),
        values("AmbientCapabilities")
    );
    let caps = caps.join(",");
    let setpriv = [
        "setpriv".to_string(),
        "--reuid=65534".into(),
        "--regid=65534".into(),
        "--clear-groups".into(),
        "--no-new-privs".into(),
        format!("--inh-caps={caps}"),
        format!("--ambient-caps={caps}"),
        format!("--bounding-set=-all,{caps}"),
        "--".into(),
    ];
    let watchdog_usec = (values("WatchdogSec")[0].parse::<u64>().unwrap() * 1_000_000).to_string();

    // ExecStartPre: the check.
    let pre = command_line("ExecStartPre", &cfg);
    let out = Command::new("ip")
        .args(["netns", "exec", r])
        .args(&setpriv)
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .args(&pre)
        .output()
        .unwrap();
    assert!(out.status.success(), "{pre:?}: {out:?}");

    // ExecStart.
    let start = command_line("ExecStart", &cfg);
    let child = Killed(
        Command::new("ip")
            .args(["netns", "exec", r])
            .args(&setpriv)
            .arg("sh")
            .arg("-c")
            .arg("WATCHDOG_PID=$$ exec \"$@\"")
            .arg("sh")
            .arg(env!("CARGO_BIN_EXE_sluice"))
            .args(&start)
            .env("NOTIFY_SOCKET", &notify_path)
            .env("WATCHDOG_USEC", &watchdog_usec)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    let mut buf = [0u8; 4096];
    let first = match notify.recv(&mut buf) {
        Ok(k) => String::from_utf8_lossy(&buf[..k]).to_string(),
        Err(e) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("no READY=1: {e}: {}", wait_with_stderr(child).1)
        }
    };
    assert!(first.contains("READY=1"), "{first}");
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let st = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap();
        for set in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
            assert!(st.contains(&format!("{set}:\t0000000000000000")), "{st}");
        }
        assert!(st.contains("Uid:\t65534\t65534\t65534\t65534"), "{st}");
    }
    // It routes, and its TAP mirrors carry the kernel's answers (the
    // router's own address answers pings itself; a TCP port on it is the
    // kernel's, once the kernel has the address: refused by an RST through
    // the TAP).
    n.sh(r, "ip addr add 198.18.0.1/24 dev sl-inside");
    let pings = n.sh(c, "ping -c 3 -i 0.2 -W 2 198.19.0.2 || true");
    assert!(pings.contains("3 received"), "{pings}");
    let tcp = n.sh(
        c,
        "python3 -c 'import socket; s=socket.socket(); s.settimeout(3)\ntry:\n s.connect((\"198.18.0.1\", 7))\nexcept Exception as e: print(type(e).__name__)'",
    );
    assert!(tcp.contains("ConnectionRefusedError"), "{tcp}");

    // ExecReload: SIGHUP to the main process; then the stop.
    assert_eq!(values("ExecReload"), ["/bin/kill -HUP $MAINPID"]);
    // Its stderr read as it comes: the reload is built off the
    // management thread, and a SIGTERM sent before it is installed (a busy
    // CI machine) stopped the run before it said so.
    let mut child = child;
    let err_pipe = child.0.stderr.take().unwrap();
    let err_text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let err_text = err_text.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(err_pipe)
                .lines()
                .map_while(Result::ok)
            {
                let mut t = err_text.lock().unwrap();
                t.push_str(&line);
                t.push('\n');
            }
        })
    };
    common::signal(&child, "-HUP");
    common::until("the SIGHUP's reload installed", 20, || {
        err_text.lock().unwrap().contains("SIGHUP:")
    });
    let o = common::ctl(&sock, &["show", "ports"]);
    assert!(o.status.success(), "{o:?}");
    common::signal(&child, "-TERM");
    let mut said = vec![first];
    while let Ok(k) = notify.recv(&mut buf) {
        let m = String::from_utf8_lossy(&buf[..k]).to_string();
        let stop = m.contains("STOPPING=1");
        said.push(m);
        if stop {
            break;
        }
    }
    common::until("Sluice stops", 20, || child.0.try_wait().unwrap().is_some());
    let code = child.0.wait().unwrap().code();
    reader.join().unwrap();
    let err = err_text.lock().unwrap().clone();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("privileges: uid 65534, gid 65534, capabilities kept: none"),
        "{err}"
    );
    assert!(err.contains("reload"), "{err}");
    assert!(said.last().unwrap().contains("STOPPING=1"), "{said:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
