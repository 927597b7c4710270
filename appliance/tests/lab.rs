//! The namespace lab (`scripts/lab.sh`) as a test: Sluice on two veths in
//! a namespace over AF_PACKET, with the kernel's own stacks, ping,
//! traceroute, curl, iperf3 and a UDP client on either side. Needs root
//! and the tools `scripts/test.sh` installs; skipped without them unless
//! `CI` is set, where that is a failure.

use std::process::Command;

fn can_run() -> Result<(), String> {
    // Root: effective uid 0.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .is_some_and(|l| l.split_whitespace().nth(2) == Some("0"));
    if !root {
        return Err("not root".into());
    }
    for tool in [
        "ip",
        "ping",
        "traceroute",
        "curl",
        "iperf3",
        "python3",
        "ethtool",
    ] {
        let ok = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return Err(format!("{tool} is missing"));
        }
    }
    Ok(())
}

fn lab(args: &[&str]) -> Option<String> {
    lab_as(args, None)
}

/// The lab, Sluice started as root becoming `user` once its ports are
/// open (`SLUICE_AS`), if given.
fn lab_as(args: &[&str], user: Option<&str>) -> Option<String> {
    if let Err(why) = can_run() {
        assert!(
            std::env::var_os("CI").is_none(),
            "the lab must run in CI: {why}"
        );
        eprintln!("skipped: {why}");
        return None;
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut cmd = Command::new("bash");
    cmd.arg(format!("{root}/scripts/lab.sh"))
        .args(args)
        .arg(env!("CARGO_BIN_EXE_sluice"));
    if let Some(u) = user {
        cmd.env("SLUICE_AS", u);
    }
    let out = cmd.output().expect("running scripts/lab.sh");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "lab failed:\n{text}");
    assert!(!text.contains("FAIL"), "{text}");
    Some(text)
}

/// Sluice's own AF_PACKET ports; with the `dpdk` feature, then the same
/// lab over DPDK's net_af_packet, and with `afxdp` over AF_XDP sockets
/// (one test, so that the labs do not compete for the two CPUs).
#[test]
fn namespace_lab_passes_every_check() {
    let Some(text) = lab(&[]) else { return };
    for check in [
        "PASS second instance on r0/r1 refused",
        "PASS ping client -> 198.19.0.2",
        "PASS first ping to 198.19.0.3 (unresolved neighbour) answered",
        "PASS held packets",
        "PASS traceroute",
        "PASS curl through SNAT",
        "PASS curl through the port forward",
        "PASS direct access 198.18.0.2:80 from outside dropped",
        "PASS TCP port 25 dropped",
        "PASS TCP port 23 rejected",
        "PASS iperf3",
        "PASS UDP request/response",
        "PASS peers' checksum offload on",
        "PASS TCP window tracking",
        "PASS accounting",
    ] {
        assert!(text.contains(check), "missing `{check}`:\n{text}");
    }
    #[cfg(feature = "dpdk")]
    dpdk_af_packet();
    #[cfg(feature = "afxdp")]
    af_xdp();
}

/// The same checks with the ports as AF_XDP sockets, Sluice started as
/// root and running as nobody once its ports are open (`[service] user`:
/// what the package's unit does, least privilege), with only
/// `CAP_NET_ADMIN` kept in its management thread for the stop.
#[cfg(feature = "afxdp")]
fn af_xdp() {
    let Some(text) = lab_as(&["--afxdp"], Some("nobody")) else {
        return;
    };
    for check in [
        "PASS ran as nobody: privileges: uid 65534, gid 65534, capabilities kept: CAP_NET_ADMIN",
        "PASS ping client -> 198.19.0.2",
        "PASS first ping to 198.19.0.3 (unresolved neighbour) answered",
        "PASS held packets",
        "PASS traceroute",
        "PASS curl through SNAT",
        "PASS curl through the port forward",
        "PASS direct access 198.18.0.2:80 from outside dropped",
        "PASS TCP port 23 rejected",
        "PASS iperf3",
        "PASS UDP request/response",
        "PASS peers' checksum offload on",
        "PASS TCP window tracking",
        "PASS accounting",
    ] {
        assert!(text.contains(check), "missing `{check}`:\n{text}");
    }
}

/// The same checks with the ports as DPDK net_af_packet vdevs.
#[cfg(feature = "dpdk")]
fn dpdk_af_packet() {
    let Some(text) = lab(&["--dpdk"]) else { return };
    for check in [
        "PASS ping client -> 198.19.0.2",
        "PASS curl through SNAT",
        "PASS iperf3",
        "PASS peers' checksum offload on",
        "PASS TCP window tracking",
        "PASS accounting (DPDK)",
    ] {
        assert!(text.contains(check), "missing `{check}`:\n{text}");
    }
}
