//! The netlink route mirror against the real kernel: a namespace with
//! veth interfaces standing for Sluice's two softnic ports, routes put
//! into kernel table 100 with `ip route` (as a routing daemon would), and
//! Sluice following them: the initial dump, adds, ECMP, metrics, IPv6,
//! withdrawals, routes it must ignore (another table, a next hop on no
//! port's interface), traffic forwarded by Sluice once the kernel has the
//! route, and a 20,000-route burst through a socket buffer far too small
//! for it (the kernel drops notifications; the mirror resyncs and ends
//! equal to the kernel table). Needs root and `ip`; skipped without them
//! unless `CI` is set. The namespace is removed when the test ends,
//! passed or failed.

mod common;

use common::{ctl_json as json, have, until_routes, wait_for, Killed};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .is_some_and(|l| l.split_whitespace().nth(2) == Some("0"))
}

/// A network namespace, deleted on drop.
struct Ns(String);

impl Ns {
    fn ip(&self, args: &str) {
        let out = Command::new("ip")
            .arg("-n")
            .arg(&self.0)
            .args(args.split_whitespace())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ip -n {} {args}: {}",
            self.0,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Routes the kernel has in `table` for a family (`-4`/`-6`).
    fn count(&self, fam: &str, table: &str) -> usize {
        let out = Command::new("ip")
            .args([fam, "-n", &self.0, "route", "show", "table", table])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).lines().count()
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn config(sock: &Path) -> String {
    let router = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/router.toml"
    ))
    .unwrap();
    // The shipped router, without its static routes (they come from the
    // kernel here), running until stopped, at a gentle rate.
    let mut text = String::new();
    let mut skip = false;
    for l in router.lines() {
        if l.starts_with("[[") {
            skip = l == "[[route]]";
        }
        if !skip {
            text += l;
            text += "\n";
        }
    }
    text.replacen("duration = 10", "duration = 0", 1)
        .replace("rate = 200000", "rate = 20000")
        + &format!(
            "\n[management]\nsocket = \"{}\"\n\n[control_plane]\nnetlink = true\ntable = 100\nrcvbuf = 4096\ninterfaces = {{ p0 = \"d0\", p1 = \"d1\" }}\n",
            sock.display()
        )
}

#[test]
fn kernel_routes_drive_the_fib() {
    if !root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "needs root (scripts/test.sh runs as root)"
        );
        eprintln!("skipped: needs root");
        return;
    }
    if !have("ip") {
        return;
    }
    let name = format!("sl-nl-{}", std::process::id());
    let _ = Command::new("ip").args(["netns", "del", &name]).status();
    assert!(Command::new("ip")
        .args(["netns", "add", &name])
        .status()
        .unwrap()
        .success());
    let ns = Ns(name);
    for (d, a) in [
        ("d0", "198.18.0.1/24"),
        ("d1", "198.19.0.1/24"),
        ("d2", "198.20.0.1/24"),
    ] {
        // veth pairs (the lab's kernel may lack the dummy driver), both
        // ends up so that the link has a carrier.
        ns.ip(&format!("link add {d} type veth peer name {d}p"));
        ns.ip(&format!("addr add {a} dev {d}"));
        ns.ip(&format!("link set {d} up"));
        ns.ip(&format!("link set {d}p up"));
    }
    ns.ip("-6 addr add 2001:db8:18::1/64 dev d0 nodad");
    // In the table before Sluice starts: from the initial dump.
    ns.ip("route add 198.51.100.0/24 via 198.18.0.2 dev d0 table 100");

    let dir = common::fresh_dir("netlink");
    let sock = dir.join("sluice.sock");
    let cfg = dir.join("router.toml");
    std::fs::write(&cfg, config(&sock)).unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("check")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let _run = Killed(
        Command::new("ip")
            .args(["netns", "exec", &ns.0])
            .arg(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .arg(&cfg)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(&sock);
    let via = |addr: &'static str, gw: &'static str, port: &'static str| {
        move |r: &serde_json::Value| {
            r["paths"]
                .as_array()
                .is_some_and(|p| p.len() == 1 && p[0]["via"] == gw && p[0]["port"] == port)
                && r["address"] == addr
        }
    };
    until_routes(
        &sock,
        &["198.51.100.7"],
        10,
        via("198.51.100.7", "198.18.0.2", "p0"),
    );
    // A static route set with `sluice ctl` for a prefix the kernel routes
    // is recorded; the kernel's route stays in the FIB (as it does over
    // the config's static routes), through the add and the delete.
    for args in [
        &["route", "add", "198.51.100.0/24", "via", "198.19.0.2"][..],
        &["route", "del", "198.51.100.0/24"][..],
    ] {
        let r = json(&sock, args);
        assert!(
            r["installed"]
                .as_str()
                .is_some_and(|t| t.contains("the kernel's route")),
            "{r}"
        );
        let r = json(&sock, &["show", "routes", "198.51.100.7"]);
        assert!(via("198.51.100.7", "198.18.0.2", "p0")(&r), "{args:?}: {r}");
        // The RIB names each route's source and what holds its prefix.
        let all = json(&sock, &["show", "routes"]);
        let edited = all["static"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["prefix"] == "198.51.100.0/24")
            .cloned();
        if args[1] == "add" {
            let e = edited.unwrap_or_else(|| panic!("not listed: {all}"));
            assert_eq!(e["source"], "ctl", "{all}");
            assert_eq!(e["held_by"], "kernel", "{all}");
        } else {
            assert!(edited.is_none(), "{all}");
        }
    }

    // No route yet for the traffic p0's generator sends: dropped. Then
    // the kernel gets one, and Sluice forwards it to p1.
    let tx1 = || {
        json(&sock, &["show", "ports"])["ports"][1]["tx_pkts"]
            .as_u64()
            .unwrap()
    };
    until_routes(&sock, &["203.0.113.9"], 5, |r| r["route"].is_null());
    let before = tx1();
    ns.ip("route add 203.0.113.0/24 via 198.19.0.2 dev d1 table 100");
    until_routes(
        &sock,
        &["203.0.113.9"],
        5,
        via("203.0.113.9", "198.19.0.2", "p1"),
    );
    let t = Instant::now();
    while tx1() < before + 1000 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "traffic to 203.0.113.0/24 is not forwarded by Sluice"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // A second route to the prefix with a higher metric takes over when
    // the first is deleted.
    ns.ip("route add 203.0.113.0/24 via 198.19.0.3 dev d1 table 100 metric 10");
    std::thread::sleep(Duration::from_millis(200));
    until_routes(
        &sock,
        &["203.0.113.9"],
        5,
        via("203.0.113.9", "198.19.0.2", "p1"),
    );
    ns.ip("route del 203.0.113.0/24 via 198.19.0.2 dev d1 table 100 metric 0");
    until_routes(
        &sock,
        &["203.0.113.9"],
        5,
        via("203.0.113.9", "198.19.0.3", "p1"),
    );

    // ECMP, IPv6, withdrawal.
    ns.ip("route add 192.0.2.0/24 table 100 nexthop via 198.18.0.2 dev d0 nexthop via 198.19.0.2 dev d1");
    until_routes(&sock, &["192.0.2.1"], 5, |r| {
        r["paths"].as_array().is_some_and(|p| p.len() == 2)
    });
    ns.ip("-6 route add 2001:db8:99::/48 via 2001:db8:18::2 dev d0 table 100");
    until_routes(
        &sock,
        &["2001:db8:99::1"],
        5,
        via("2001:db8:99::1", "2001:db8:18::2", "p0"),
    );
    ns.ip("route del 192.0.2.0/24 table 100");
    until_routes(&sock, &["192.0.2.1"], 5, |r| r["route"].is_null());

    // Ignored and counted: a next hop on no port's interface, another
    // table.
    ns.ip("route add 10.9.0.0/16 via 198.20.0.2 dev d2 table 100");
    ns.ip("route add 10.8.0.0/16 via 198.18.0.2 dev d0");
    until_routes(&sock, &[], 5, |r| {
        r["netlink"]["unmapped"].as_u64() >= Some(1) && r["netlink"]["other"].as_u64() >= Some(1)
    });
    for a in ["10.9.0.1", "10.8.0.1"] {
        assert!(
            json(&sock, &["show", "routes", a])["route"].is_null(),
            "{a}"
        );
    }

    // The kernel's neighbours: traffic to 203.0.113.0/24 now goes via
    // 198.19.0.3, which nothing answers ARP for (the generator's packets
    // wait, then are dropped: few reach p1). Once the kernel has the
    // neighbour, Sluice forwards with its MAC (nearly all reach p1).
    let ports = || {
        let p = json(&sock, &["show", "ports"]);
        let g = |i: usize, k: &str| p["ports"][i][k].as_u64().unwrap();
        (g(0, "rx_pkts"), g(1, "tx_pkts"))
    };
    // p1's share of p0's traffic over half a second.
    let share = || {
        let (rx0, tx0) = ports();
        std::thread::sleep(Duration::from_millis(500));
        let (rx1, tx1) = ports();
        (tx1 - tx0) as f64 / (rx1 - rx0).max(1) as f64
    };
    let unresolved = share();
    assert!(unresolved < 0.5, "without the neighbour: {unresolved}");
    ns.ip("neigh add 198.19.0.3 lladdr 02:5e:00:00:00:33 dev d1 nud permanent");
    let t = Instant::now();
    loop {
        let s = share();
        if s > 0.9 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "with the kernel's neighbour: {s}; {}",
            json(&sock, &["show", "neighbors"])
        );
    }
    let n = json(&sock, &["show", "neighbors"]);
    assert!(
        n["kernel"]
            .as_array()
            .is_some_and(|k| k.iter().any(|e| e["ip"] == "198.19.0.3"
                && e["mac"] == "02:5e:00:00:00:33"
                && e["port"] == "p1")),
        "{n}"
    );
    ns.ip("neigh del 198.19.0.3 dev d1");
    let t = Instant::now();
    loop {
        let s = share();
        if s < 0.5 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "neighbour deleted: {s}"
        );
    }

    // The kernel's addresses: 198.51.100.1 on d1 makes it the router's
    // own (p1's generator sends to it among other 198.51.100.0/24
    // addresses: those packets stop being routed and are dropped as
    // `to_router`); removed, it is routed again.
    let to_router = || {
        json(&sock, &["stats"])["ports"][1]["drops"]["stage"]["to_router"]
            .as_u64()
            .unwrap()
    };
    let before = to_router();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(to_router(), before, "198.51.100.1 is not ours yet");
    ns.ip("addr add 198.51.100.1/32 dev d1");
    until_routes(&sock, &[], 5, |r| {
        r["netlink"]["addresses"].as_array().is_some_and(|a| {
            a.iter()
                .any(|x| x["addr"] == "198.51.100.1/32" && x["port"] == "p1")
        })
    });
    let t = Instant::now();
    while to_router() == before {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the kernel's address is not the router's"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    ns.ip("addr del 198.51.100.1/32 dev d1");
    until_routes(&sock, &[], 5, |r| {
        r["netlink"]["addresses"]
            .as_array()
            .is_some_and(|a| !a.iter().any(|x| x["addr"] == "198.51.100.1/32"))
    });
    std::thread::sleep(Duration::from_millis(300));
    let gone = to_router();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(to_router(), gone, "198.51.100.1 is routed again");

    // A link going down: seen, and the routes the kernel flushed through
    // it (without a message each) leave the FIB, the port neither
    // receives (its generator's packets are dropped as `link_down`) nor
    // sends; back up, the link is seen up, the port forwards again and a
    // route through it is mirrored again.
    let link_down = || {
        json(&sock, &["stats"])["ports"][1]["drops"]["stage"]["link_down"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(link_down(), 0);
    let resyncs = json(&sock, &["show", "routes"])["netlink"]["resyncs"]
        .as_u64()
        .unwrap();
    ns.ip("link set d1 down");
    until_routes(&sock, &[], 5, |r| {
        r["netlink"]["links"]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x["port"] == "p1" && x["up"] == false))
            && r["netlink"]["resyncs"].as_u64() > Some(resyncs)
    });
    until_routes(&sock, &["203.0.113.9"], 5, |r| r["route"].is_null());
    // A route set with `sluice ctl` through the downed link waits for it,
    // as the config's static routes do, and the answer says so.
    let r = json(
        &sock,
        &["route", "add", "192.0.2.0/24", "via", "198.19.0.2"],
    );
    assert!(
        r["installed"].as_str().is_some_and(
            |t| t.contains("not in the FIB while the interfaces of its paths are down")
        ),
        "{r}"
    );
    assert!(
        json(&sock, &["show", "routes", "192.0.2.9"])["route"].is_null(),
        "a route through a downed link is in the FIB"
    );
    std::thread::sleep(Duration::from_millis(100));
    let (down0, sent0) = (link_down(), tx1());
    std::thread::sleep(Duration::from_millis(500));
    let (down1, sent1) = (link_down(), tx1());
    assert!(
        down1 > down0 + 100,
        "p1's traffic is not dropped as link_down: {down0} -> {down1}"
    );
    assert_eq!(sent1, sent0, "p1 sends while down");
    ns.ip("link set d1 up");
    until_routes(&sock, &[], 5, |r| {
        r["netlink"]["links"]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x["port"] == "p1" && x["up"] == true))
    });
    std::thread::sleep(Duration::from_millis(100));
    let down2 = link_down();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(link_down(), down2, "p1 still dropped as down once up");
    ns.ip("route add 203.0.113.0/24 via 198.19.0.2 dev d1 table 100");
    until_routes(
        &sock,
        &["203.0.113.9"],
        5,
        via("203.0.113.9", "198.19.0.2", "p1"),
    );
    // The link up, the `ctl` route is in the FIB; deleted, it is gone.
    until_routes(
        &sock,
        &["192.0.2.9"],
        5,
        via("192.0.2.9", "198.19.0.2", "p1"),
    );
    let r = json(&sock, &["route", "del", "192.0.2.0/24"]);
    assert!(
        r["installed"]
            .as_str()
            .is_some_and(|t| t.contains("installed in place")),
        "{r}"
    );
    until_routes(&sock, &["192.0.2.9"], 5, |r| r["route"].is_null());

    // 20,000 routes at once through a 4 KiB socket buffer: notifications
    // are lost, the mirror resyncs and ends equal to the kernel's table
    // (less the one route it ignores).
    let batch = dir.join("routes.batch");
    let mut b = String::new();
    for i in 0..20_000u32 {
        b += &format!(
            "route add 100.{}.{}.0/24 via 198.18.0.2 dev d0 table 100\n",
            64 + (i >> 8),
            i & 0xff
        );
    }
    std::fs::write(&batch, b).unwrap();
    ns.ip(&format!("-batch {}", batch.display()));
    let kernel = ns.count("-4", "100") + ns.count("-6", "100") - 1;
    assert!(kernel > 20_000);
    until_routes(&sock, &[], 60, |r| {
        r["netlink"]["mirrored"].as_u64() == Some(kernel as u64)
    });
    let r = json(&sock, &["show", "routes"]);
    assert!(r["netlink"]["overruns"].as_u64() >= Some(1), "{r}");
    assert!(r["netlink"]["resyncs"].as_u64() >= Some(2), "{r}");
    assert_eq!(r["netlink"]["refused"], 0, "{r}");
    until_routes(
        &sock,
        &["100.100.7.9"],
        5,
        via("100.100.7.9", "198.18.0.2", "p0"),
    );
    ns.ip("route flush table 100");
    ns.ip("-6 route flush table 100");
    until_routes(&sock, &[], 60, |r| {
        r["netlink"]["mirrored"].as_u64() == Some(0)
    });
    until_routes(&sock, &["198.51.100.7"], 5, |r| r["route"].is_null());
    let _ = std::fs::remove_dir_all(&dir);
}
