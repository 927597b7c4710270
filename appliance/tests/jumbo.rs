//! Jumbo frames on real links: namespaces `c` (a client) — `r` (Sluice on
//! AF_PACKET ports, masquerade; and, built with `afxdp`, on AF_XDP ports
//! taking frames in several chunks) — `s` (a server), the links' MTU
//! 9,000.
//!
//! - Both links at 9,000: 9,000-byte pings with Don't Fragment cross
//!   Sluice both ways, and a TCP transfer arrives at the server in
//!   segments of about 9,000 bytes (its link's counters), every byte
//!   there.
//! - The server's link at 1,500 (and the outside port's `mtu`): a 9,000-
//!   byte ping with Don't Fragment is answered with "fragmentation
//!   needed, MTU 1,500" and the client's kernel learns it; without DF
//!   Sluice fragments the 4,000-byte ping and its reply comes back.
//! - A port's `mtu` larger than its interface's is refused at start,
//!   naming both.
//!
//! Needs root, `ip` and `python3`; skipped without them unless `CI` is
//! set. The namespaces end with the test, passed or failed.

mod common;

use common::{as_root, have, Nets};

/// Sends 20 MB to the server's port 9000 and prints what the server
/// counted.
const CLIENT: &str = r#"
import socket
c = socket.create_connection(("198.19.0.2", 9000), timeout=10)
c.sendall(b"j" * 20_000_000)
c.shutdown(socket.SHUT_WR)
c.settimeout(10)
print(c.recv(64).decode())
c.close()
"#;

/// Counts what each connection sends, and answers the count.
const SERVER: &str = r#"
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.19.0.2", 9000))
s.listen(4)
while True:
    c, a = s.accept()
    n = 0
    while True:
        d = c.recv(1 << 20)
        if not d:
            break
        n += len(d)
    c.sendall(str(n).encode())
    c.close()
"#;

/// The lab's gateway with each port's `mtu`, on `driver`'s ports.
fn config(driver: &str, inside: u16, outside: u16, sock: &std::path::Path) -> String {
    let afpacket = common::lab_gateway(
        r#"
[[nat.snat]]
out = "outside"
src = "198.18.0.0/24"
to = "masquerade"
"#,
        sock,
    )
    .replace(
        "ipv4 = [\"198.18.0.1/24\"]\n",
        &format!("ipv4 = [\"198.18.0.1/24\"]\nmtu = {inside}\n"),
    )
    .replace(
        "ipv4 = [\"198.19.0.1/24\"]\n",
        &format!("ipv4 = [\"198.19.0.1/24\"]\nmtu = {outside}\n"),
    );
    if driver == "dpdk" {
        // DPDK's net_af_packet with frames (and mbufs) for 9,000 bytes.
        let dev = |i: usize, iface: &str| {
            format!("[port.dpdk]\ndevice = \"net_af_packet{i},iface={iface},framesz=10240,blocksz=12288\"")
        };
        return afpacket
            .replace("driver = \"afpacket\"", "driver = \"dpdk\"")
            .replace("[port.afpacket]\niface = \"r0\"", &dev(0, "r0"))
            .replace("[port.afpacket]\niface = \"r1\"", &dev(1, "r1"));
    }
    afpacket
        .replace("driver = \"afpacket\"", &format!("driver = \"{driver}\""))
        .replace("[port.afpacket]", &format!("[port.{driver}]"))
}

/// Received bytes and packets of `dev` in namespace `ns`.
fn rx(n: &Nets, ns: &str, dev: &str) -> (u64, u64) {
    let read = |what: &str| -> u64 {
        n.sh(ns, &format!("cat /sys/class/net/{dev}/statistics/{what}"))
            .trim()
            .parse()
            .unwrap()
    };
    (read("rx_bytes"), read("rx_packets"))
}

#[test]
fn jumbo_frames_cross_and_the_mtu_boundary_fragments_or_answers() {
    jumbo("afpacket", "sl-jumbo");
}

/// The same on AF_XDP ports (multi-buffer sockets).
#[cfg(feature = "afxdp")]
#[test]
fn jumbo_frames_on_afxdp_ports() {
    jumbo("afxdp", "sl-jumbox");
}

/// DPDK's net_af_packet (Debian's DPDK 22.11) takes no frame above
/// 1,518 bytes whatever its `framesz`: a port `mtu` of 9,000 on it is
/// refused at start, naming the device's largest. (DPDK ports on devices
/// that take jumbo frames get mbufs sized for them: `pmd/tests/dpdk.rs`.)
#[cfg(feature = "dpdk")]
#[test]
fn a_jumbo_mtu_on_dpdk_af_packet_is_refused_by_name() {
    if !as_root() || !have("ip") {
        return;
    }
    let n = Nets::mirror_lab("sl-jumbod");
    let r = &n.0[1];
    n.sh(r, "ip link set r0 mtu 9000 && ip link set r1 mtu 9000");
    let dir = common::fresh_dir("sl-jumbod");
    let cfg = dir.join("r.toml");
    std::fs::write(&cfg, config("dpdk", 9000, 9000, &dir.join("s.sock"))).unwrap();
    let err = refused(r, &cfg);
    assert!(
        err.contains(
            "DPDK port net_af_packet0: mtu 9000 is more than the device takes (at most 1500"
        ),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What Sluice said when it would not start on `cfg` in namespace `ns`.
fn refused(ns: &str, cfg: &std::path::Path) -> String {
    let child = common::Killed(
        std::process::Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .arg(cfg)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let (code, err) = common::wait_with_stderr(child);
    assert_ne!(code, Some(0), "{err}");
    err
}

fn jumbo(driver: &str, lab: &str) {
    if !as_root() || !have("ip") || !have("python3") || !have("ping") {
        return;
    }
    let n = Nets::mirror_lab(lab);
    let (c, r, s) = (&n.0[0], &n.0[1], &n.0[2]);
    n.sh(
        c,
        "ip link set c0 mtu 9000 up && ip addr add 198.18.0.2/24 dev c0 \
         && ip route add default via 198.18.0.1",
    );
    n.sh(
        s,
        "ip link set s0 mtu 9000 up && ip addr add 198.19.0.2/24 dev s0 \
         && ip route add default via 198.19.0.1",
    );
    n.sh(r, "ip link set r0 mtu 9000 && ip link set r1 mtu 9000");
    let dir = common::fresh_dir(lab);
    std::fs::write(dir.join("client.py"), CLIENT).unwrap();
    std::fs::write(dir.join("server.py"), SERVER).unwrap();
    let _server = common::python_in(s, &dir.join("server.py"));
    let sock = dir.join("sluice.sock");
    let cfg = dir.join("r.toml");

    // Both links at 9,000.
    std::fs::write(&cfg, config(driver, 9000, 9000, &sock)).unwrap();
    let sluice = common::sluice_in(r, &cfg, &sock);
    std::thread::sleep(std::time::Duration::from_millis(300));
    // 8,972 bytes of ICMP data: 9,000-byte packets, DF set.
    let out = n.sh(c, "ping -M do -s 8972 -c 3 -i 0.2 -W 2 198.19.0.2");
    assert!(out.contains("3 received"), "{out}");
    let (b0, p0) = rx(&n, s, "s0");
    let got = n.sh(c, &format!("python3 {}", dir.join("client.py").display()));
    assert_eq!(got.trim(), "20000000", "every byte at the server");
    let (b1, p1) = rx(&n, s, "s0");
    let (bytes, packets) = (b1 - b0, p1 - p0);
    // 20 MB in jumbo segments: about 2,240 of them (at 1,500 it would
    // take 13,700), most about 9,000 bytes on the server's link. The
    // sender also sends some shorter than its MSS (a write's tail, the
    // window's edge): CI once saw 2,557 packets, 7,887 bytes on average.
    // At MTU 1,500 the average cannot pass 1,514.
    assert!(
        bytes / packets > 4000,
        "{packets} packets of {bytes} bytes at the server"
    );
    drop(sluice);

    // The server's link at 1,500: the boundary.
    n.sh(s, "ip link set s0 mtu 1500");
    n.sh(r, "ip link set r1 mtu 1500");
    // Its port still said 9,000: refused, naming both.
    std::fs::write(&cfg, config(driver, 9000, 9000, &sock)).unwrap();
    let _ = std::fs::remove_file(&sock);
    let err = refused(r, &cfg);
    assert!(
        err.contains("the port's mtu is 9000 but the interface's is 1500"),
        "{err}"
    );
    std::fs::write(&cfg, config(driver, 9000, 1500, &sock)).unwrap();
    let _ = std::fs::remove_file(&sock);
    let _sluice = common::sluice_in(r, &cfg, &sock);
    std::thread::sleep(std::time::Duration::from_millis(300));
    // DF set: "fragmentation needed" with the outside MTU, which the
    // client's kernel takes as the path's.
    let o = std::process::Command::new("ip")
        .args(["netns", "exec", c])
        .args([
            "ping", "-M", "do", "-s", "8972", "-c", "2", "-i", "0.3", "-W", "2",
        ])
        .arg("198.19.0.2")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{text}");
    assert!(
        text.contains("mtu = 1500") || text.contains("mtu=1500"),
        "{text}"
    );
    let route = n.sh(c, "ip route get 198.19.0.2");
    assert!(
        route.contains("mtu 1500"),
        "the path's MTU learned: {route}"
    );
    n.sh(c, "ip route flush cache");
    // DF clear: fragmented on the way out, the reply's fragments
    // reassembled by the client.
    let out = n.sh(c, "ping -M dont -s 4000 -c 3 -i 0.2 -W 2 198.19.0.2");
    assert!(out.contains("3 received"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
