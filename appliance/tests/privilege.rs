//! Least privilege, end to end: Sluice routes between two namespaces on
//! AF_PACKET ports and, once every port is open and every worker polls,
//! holds no capability in any thread. Started as root with `[service]
//! user = "nobody"`, it becomes nobody (uid, gid and groups) with
//! `no_new_privs`; started as nobody with only `CAP_NET_RAW` (as a unit's
//! `User=` and `AmbientCapabilities=` start it: here `setpriv`), it opens
//! its ports and sheds that too. Each time `/proc/PID/task/*/status` is
//! read after `READY=1` (the test listens on a `NOTIFY_SOCKET`), the
//! client's pings cross the router, the watchdog pings go on, `STOPPING=1`
//! comes, and the control socket in a directory of nobody's (systemd's
//! `RuntimeDirectory=`) is gone after the stop. Without `CAP_NET_RAW` the
//! start fails, naming the port and the capability.
//! Needs root, `ip`, `ping` and `setpriv`; skipped without them unless `CI`
//! is set. The namespaces are removed when the test ends, passed or
//! failed.

mod common;

use common::{as_root, fresh_dir, have, wait_with_stderr, Killed, Nets};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

/// nobody and nogroup on Debian.
const NOBODY: u32 = 65534;

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
"#;

#[test]
fn started_as_root_it_becomes_the_configured_user_with_no_capability() {
    privileged_run(
        "root",
        Driver::AfPacket,
        "[service]\nuser = \"nobody\"\n",
        &[],
    );
}

/// AF_XDP ports: the management thread keeps `CAP_NET_ADMIN` to detach
/// the XDP programs at the stop (and does: the links have none after it);
/// every other thread holds nothing.
#[cfg(feature = "afxdp")]
#[test]
fn on_af_xdp_started_as_root_it_keeps_only_what_the_stop_needs() {
    privileged_run(
        "xroot",
        Driver::AfXdp,
        "[service]\nuser = \"nobody\"\n",
        &[],
    );
}

#[cfg(feature = "afxdp")]
#[test]
fn on_af_xdp_started_as_nobody_with_capabilities_it_keeps_only_what_the_stop_needs() {
    privileged_run(
        "xsetpriv",
        Driver::AfXdp,
        "",
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=+net_raw,+net_admin,+bpf,+ipc_lock,+sys_admin",
            "--ambient-caps=+net_raw,+net_admin,+bpf,+ipc_lock,+sys_admin",
            "--",
        ],
    );
}

#[derive(Clone, Copy, PartialEq)]
enum Driver {
    AfPacket,
    #[cfg_attr(not(feature = "afxdp"), allow(dead_code))]
    AfXdp,
}

#[test]
fn started_as_nobody_with_cap_net_raw_it_sheds_it_once_open() {
    privileged_run(
        "setpriv",
        Driver::AfPacket,
        "",
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=+net_raw",
            "--ambient-caps=+net_raw",
            "--",
        ],
    );
}

#[test]
fn started_as_nobody_without_capabilities_it_says_which_one_it_needs() {
    if !as_root() || !have("ip") || !have("setpriv") {
        return;
    }
    let n = lab("sl-pvn");
    let dir = nobodys_dir("sluice-priv-none");
    let cfg = dir.join("r.toml");
    std::fs::write(
        &cfg,
        format!("{CONFIG}\n[management]\nsocket = \"ctl.sock\"\n"),
    )
    .unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", &n.0[1]])
        .args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .args(["--inh-caps=-all", "--"])
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .arg("run")
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("port inside"), "{err}");
    assert!(err.contains("CAP_NET_RAW"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The lab: client `c` — router `r` — server `s`.
fn lab(prefix: &str) -> Nets {
    let n = Nets::mirror_lab(prefix);
    let (c, s) = (&n.0[0], &n.0[2]);
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
    n
}

/// A fresh directory of nobody's, as systemd's `RuntimeDirectory=` makes
/// for `User=nobody`.
fn nobodys_dir(name: &str) -> std::path::PathBuf {
    let dir = fresh_dir(name);
    std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
    dir
}

/// The capability sets and ids of each of `pid`'s threads, as
/// `/proc/PID/task/TID/status` gives them.
fn threads(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let status = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap();
        let keep = [
            "Name:",
            "Uid:",
            "Gid:",
            "Groups:",
            "CapInh:",
            "CapPrm:",
            "CapEff:",
            "CapAmb:",
            "NoNewPrivs:",
        ];
        out.push(
            status
                .lines()
                .filter(|l| keep.iter().any(|k| l.starts_with(k)))
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
                .join("; "),
        );
    }
    out
}

fn privileged_run(tag: &str, driver: Driver, extra: &str, prefix: &[&str]) {
    if !as_root() || !have("ip") || !have("ping") || !have("setpriv") {
        return;
    }
    let n = lab(&format!("sl-pv{}", &tag[..2]));
    let (c, r) = (&n.0[0], &n.0[1]);
    let dir = nobodys_dir(&format!("sluice-priv-{tag}"));
    let sock = dir.join("ctl.sock");
    let cfg = dir.join("r.toml");
    let ports = match driver {
        Driver::AfPacket => CONFIG.to_string(),
        Driver::AfXdp => CONFIG
            .replace("driver = \"afpacket\"", "driver = \"afxdp\"")
            .replace("[port.afpacket]", "[port.afxdp]"),
    };
    std::fs::write(
        &cfg,
        format!("{ports}\n[management]\nsocket = \"ctl.sock\"\n{extra}"),
    )
    .unwrap();
    // The notify socket as systemd's is: anyone may write to it.
    let notify_path = dir.join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    std::fs::set_permissions(&notify_path, std::fs::Permissions::from_mode(0o777)).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", r]).args(prefix);
    let child = Killed(
        cmd.arg("sh")
            .arg("-c")
            .arg("WATCHDOG_PID=$$ exec \"$0\" run \"$1\"")
            .arg(env!("CARGO_BIN_EXE_sluice"))
            .arg(&cfg)
            .env("NOTIFY_SOCKET", &notify_path)
            .env("WATCHDOG_USEC", "400000")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    let mut buf = [0u8; 4096];
    let first = match recv(&notify, &mut buf) {
        Ok(k) => String::from_utf8_lossy(&buf[..k]).to_string(),
        Err(e) => panic!("no READY=1: {e}: {}", stderr_of(child)),
    };
    assert!(first.contains("READY=1"), "{first}");

    // Every thread: nobody, no capability in any set; the management
    // thread (the main one, listed first) what the stop needs.
    let all = threads(pid);
    assert!(all.len() >= 3, "{all:#?}");
    let main_keeps = match driver {
        Driver::AfPacket => "0000000000000000",
        // CAP_NET_ADMIN (12).
        Driver::AfXdp => "0000000000001000",
    };
    for t in &all {
        let main = t.starts_with("Name: sluice;");
        for set in ["CapPrm", "CapEff"] {
            let want = if main { main_keeps } else { "0000000000000000" };
            assert!(t.contains(&format!("{set}: {want}")), "{all:#?}");
        }
        for set in ["CapInh", "CapAmb"] {
            assert!(t.contains(&format!("{set}: 0000000000000000")), "{all:#?}");
        }
        assert!(
            t.contains(&format!("Uid: {NOBODY} {NOBODY} {NOBODY} {NOBODY}")),
            "{all:#?}"
        );
        assert!(
            t.contains(&format!("Gid: {NOBODY} {NOBODY} {NOBODY} {NOBODY}")),
            "{all:#?}"
        );
    }
    // The management thread (the main one) can gain nothing by exec.
    let main = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(main.contains("NoNewPrivs:\t1"), "{main}");
    assert!(
        main.lines()
            .any(|l| l.trim_end() == "Groups:" || l.trim_end() == format!("Groups:\t{NOBODY}")),
        "{main}"
    );

    // It still routes, and answers its control socket.
    let pings = n.sh(c, "ping -c 5 -i 0.2 -W 2 198.19.0.2 || true");
    assert!(pings.contains("5 received"), "{pings}");
    let o = common::ctl(&sock, &["show", "ports"]);
    assert!(o.status.success(), "{o:?}");

    // The watchdog goes on after the drop; the stop is told.
    common::signal(&child, "-INT");
    let mut said = vec![first];
    while let Ok(k) = recv(&notify, &mut buf) {
        let m = String::from_utf8_lossy(&buf[..k]).to_string();
        let stop = m.contains("STOPPING=1");
        said.push(m);
        if stop {
            break;
        }
    }
    let (code, err) = wait_with_stderr(child);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        said.iter().filter(|m| m.contains("WATCHDOG=1")).count() >= 2,
        "{said:?}"
    );
    assert!(said.last().unwrap().contains("STOPPING=1"), "{said:?}");
    let kept = match driver {
        Driver::AfPacket => "none",
        Driver::AfXdp => "CAP_NET_ADMIN",
    };
    assert!(
        err.contains(&format!(
            "privileges: uid {NOBODY}, gid {NOBODY}, capabilities kept: {kept}"
        )),
        "{err}"
    );
    if driver == Driver::AfXdp {
        // The stop detached the XDP programs.
        let links = n.sh(r, "ip link show");
        assert!(!links.contains("xdp"), "{links}");
    }
    assert!(
        !sock.exists(),
        "the control socket stays after the stop: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Kills the child (it failed to start) and returns what it printed.
fn stderr_of(child: Killed) -> String {
    let _ = Command::new("kill")
        .args(["-KILL", &child.0.id().to_string()])
        .status();
    wait_with_stderr(child).1
}

/// A datagram from `s`, again when a signal interrupts the wait (CI saw
/// `Interrupted system call` here once); its read timeout still ends it.
fn recv(s: &UnixDatagram, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match s.recv(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}
