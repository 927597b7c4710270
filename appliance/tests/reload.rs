//! Hot reload under traffic: the shipped gateway forwards a steady stream
//! below capacity while `sluice ctl reload` swaps two rule sets 100 times
//! (and SIGHUP once more); then every packet is accounted for and none was
//! lost to a reload: everything from the LAN was forwarded, everything
//! unsolicited from the WAN filtered (as both rule sets say), nothing
//! dropped for any other reason. A bad file and a change that needs a
//! restart are refused with their reasons and change nothing. Bounded in
//! time; the instance is killed when the test ends, passed or failed.

mod common;

use common::Killed;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn ctl(sock: &Path, args: &[&str]) -> (bool, String, String) {
    let o = common::ctl(sock, args);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `sluice run CFG`, its reports discarded, its stderr to `stderr`.
fn run_quiet(cfg: &Path, stderr: Stdio) -> Killed {
    Killed(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .arg(cfg)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap(),
    )
}

fn rules(sock: &Path) -> usize {
    let (ok, out, err) = ctl(sock, &["--json", "show", "rules"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["rules"].as_array().unwrap().len()
}

#[test]
fn a_hundred_reloads_under_traffic_lose_nothing() {
    let dir = common::fresh_dir("reload");
    // The shipped gateway at a quarter of its LAN rate, until stopped,
    // with a control socket.
    let a = common::shipped_gateway(50_000) + "\n[management]\nsocket = \"ctl.sock\"\n";
    // The other rule set: one more rule (for traffic that never comes).
    let b = a.clone()
        + "\n[[firewall.rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = 7\nin = \"wan\"\ncounter = true\n";
    let cfg = dir.join("gw.toml");
    std::fs::write(&cfg, &a).unwrap();
    let sock = dir.join("ctl.sock");
    let mut run = Killed(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .arg(&cfg)
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = run.0.stdout.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    });
    let mut err = run.0.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    common::wait_for(&sock);
    let n_a = rules(&sock);
    std::thread::sleep(Duration::from_millis(500));

    for i in 0..100 {
        let text = if i % 2 == 0 { &b } else { &a };
        std::fs::write(&cfg, text).unwrap();
        let (ok, out, err) = ctl(&sock, &["reload"]);
        assert!(ok, "reload {i}: {err}");
        assert!(
            out.contains("reloaded") && out.contains("tracked flows kept"),
            "{out}"
        );
        if i < 2 {
            assert_eq!(rules(&sock), if i % 2 == 0 { n_a + 1 } else { n_a });
        }
    }
    // After 100 reloads the file is `a` again.
    assert_eq!(rules(&sock), n_a);

    // Refused, and nothing changes: a typo (with its line and key), and a
    // change only a restart can make.
    std::fs::write(
        &cfg,
        a.replacen("[conntrack]", "[conntrack]\ncapacty = 5", 1),
    )
    .unwrap();
    let (ok, _, err) = ctl(&sock, &["reload"]);
    assert!(!ok);
    assert!(
        err.contains("gw.toml:") && err.contains("`conntrack.capacty`"),
        "{err}"
    );
    assert!(err.contains("running config is unchanged"), "{err}");
    std::fs::write(&cfg, a.replacen("rxd = 4096", "rxd = 2048", 1)).unwrap();
    let (ok, _, err) = ctl(&sock, &["reload"]);
    assert!(!ok);
    assert!(
        err.contains("restart is needed") && err.contains("port p0"),
        "{err}"
    );
    // `[ha]` too: the state file and the sync are the start's.
    std::fs::write(&cfg, format!("{a}\n[ha]\nstate_file = \"flows\"\n")).unwrap();
    let (ok, _, err) = ctl(&sock, &["reload"]);
    assert!(!ok);
    assert!(
        err.contains("restart is needed") && err.contains("[ha]"),
        "{err}"
    );
    // A port's MSS clamping too: the gateway is built with it.
    std::fs::write(
        &cfg,
        a.replacen("rxd = 4096", "rxd = 4096\nclamp_mss = \"pmtu\"", 1),
    )
    .unwrap();
    let (ok, _, err) = ctl(&sock, &["reload"]);
    assert!(!ok);
    assert!(
        err.contains("restart is needed") && err.contains("clamp_mss"),
        "{err}"
    );
    assert_eq!(rules(&sock), n_a);

    // SIGHUP reloads too (the result goes to stderr).
    std::fs::write(&cfg, &b).unwrap();
    common::signal(&run, "-HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while rules(&sock) != n_a + 1 {
        assert!(Instant::now() < deadline, "SIGHUP did not reload");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));

    common::signal(&run, "-TERM");
    let status = run.0.wait().unwrap();
    let err = err_reader.join().unwrap();
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("SIGHUP: reloaded"), "{err}");
    let out = out_reader.join().unwrap();
    let s: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(s["kind"], "summary");
    let b = &s["balance"];
    assert_eq!(b["balanced"], true, "{s}");
    eprintln!(
        "after 101 reloads: offered {}, delivered {}, filtered {}, missed {} (generator late {})",
        b["offered"], b["delivered"], b["stage_drops"], b["rx_missed"], b["gen_late"]
    );
    let (lan, wan) = (&s["ports"][0], &s["ports"][1]);
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    // Nothing lost to a full ring or a missing route, ever.
    for p in [lan, wan] {
        assert_eq!(n(&p["drops"]["tx_full"]), 0, "{s}");
        assert_eq!(n(&p["drops"]["unroutable"]), 0, "{s}");
    }
    // LAN: every packet received was forwarded to the WAN.
    let lan_stage: u64 = lan["drops"]["stage"]
        .as_object()
        .unwrap()
        .values()
        .map(n)
        .sum();
    assert_eq!(lan_stage, 0, "{s}");
    assert_eq!(n(&lan["rx_pkts"]), n(&wan["tx_pkts"]), "{s}");
    // WAN: unsolicited UDP, filtered by both rule sets, and nothing else.
    let wan_stage = wan["drops"]["stage"].as_object().unwrap();
    for (reason, v) in wan_stage {
        if reason != "filtered" {
            assert_eq!(n(v), 0, "{reason}: {s}");
        }
    }
    assert_eq!(n(&wan_stage["filtered"]), n(&wan["rx_pkts"]), "{s}");
    assert!(n(&lan["rx_pkts"]) > 10_000, "{s}");
    // The RX rings overflow only on a visibly busy machine (the generator
    // fell behind its schedule, or the worker lost its CPU mid-burst), and
    // then only a sliver: a reload that stalled the worker would show here.
    let missed = n(&b["rx_missed"]);
    let busy_machine = n(&b["gen_late"]) * 100 > n(&b["offered"])
        || s["cores"][0]["busy"].as_f64().unwrap() > s["cores"][0]["cpu"].as_f64().unwrap() + 0.05;
    assert!(
        missed == 0 || (busy_machine && missed * 200 < n(&b["offered"])),
        "missed {missed}: {s}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The shipped gateway with a 200,000-route file (a table whose build
/// takes a while) and a control socket, its stderr collected as it comes.
struct BigTable {
    dir: std::path::PathBuf,
    sock: std::path::PathBuf,
    run: Killed,
    log: std::sync::Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
    /// From the start until the socket appeared: the first build.
    build: Duration,
}

impl BigTable {
    fn start(name: &str) -> BigTable {
        let dir = common::fresh_dir(name);
        // 200,000 /24s from 11.0.0.0.
        let routes: String = (0..200_000u32)
            .map(|i| {
                let a = std::net::Ipv4Addr::from(0x0b00_0000 + (i << 8));
                format!("{a}/24\n")
            })
            .collect();
        std::fs::write(dir.join("routes.txt"), routes).unwrap();
        let cfg_text = common::shipped_gateway(10_000)
            + "\n[router]\nroute_file = \"routes.txt\"\nroute_file_via = [\"198.19.0.2\"]\n"
            + "\n[management]\nsocket = \"ctl.sock\"\n";
        let cfg = dir.join("gw.toml");
        std::fs::write(&cfg, &cfg_text).unwrap();
        let sock = dir.join("ctl.sock");
        let mut run = run_quiet(&cfg, Stdio::piped());
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut err = run.0.stderr.take().unwrap();
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let started = Instant::now();
        common::wait_for(&sock);
        BigTable {
            dir,
            sock,
            run,
            log,
            reader,
            build: started.elapsed(),
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Whether a thread of the instance is named `name` now.
    fn has_thread(&self, name: &str) -> bool {
        let tasks = format!("/proc/{}/task", self.run.0.id());
        std::fs::read_dir(tasks).is_ok_and(|d| {
            d.flatten().any(|t| {
                std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name)
            })
        })
    }

    /// SIGTERM; the run must end cleanly.
    fn stop(mut self) {
        common::signal(&self.run, "-TERM");
        let status = self.run.0.wait().unwrap();
        self.reader.join().unwrap();
        assert!(status.success(), "{status}: {}", self.log.lock().unwrap());
        std::fs::remove_dir_all(&self.dir).unwrap();
    }
}

/// The IPv4 route count in a summary such as `…: 200004 IPv4 and 0 IPv6
/// routes…` after `after`.
fn routes_after(text: &str, after: &str) -> usize {
    text.split(after)
        .nth(1)
        .and_then(|l| l.split(": ").nth(1))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A reload of a large table is built on a thread of its own: while it
/// builds, the management thread answers (`ctl stats`), refuses a second
/// `ctl reload`, takes SIGHUPs for one more reload after it, and installs
/// the first when it is done.
#[test]
fn the_management_thread_answers_while_a_reload_builds() {
    let b = BigTable::start("reload-big");
    let installed = || b.log().contains("SIGHUP: reloaded");
    common::signal(&b.run, "-HUP");
    std::thread::sleep(Duration::from_millis(50));
    let (ok, out, e) = ctl(&b.sock, &["stats"]);
    assert!(ok && out.contains("p0"), "{e}");
    assert!(
        !installed(),
        "stats were answered only after the reload was installed (the first build took {:?})",
        b.build
    );
    let (ok, _, e) = ctl(&b.sock, &["reload"]);
    assert!(!ok && e.contains("is being built"), "{e}");
    // SIGHUPs meanwhile (a signal gets no answer): one more reload once
    // this one is done, however many came.
    common::signal(&b.run, "-HUP");
    common::signal(&b.run, "-HUP");
    let deadline = Instant::now() + Duration::from_secs(120);
    while b.log().matches("SIGHUP: reloaded").count() < 2 {
        let log = b.log();
        assert!(!log.contains("SIGHUP: reload refused"), "{log}");
        assert!(
            Instant::now() < deadline,
            "the reloads were never installed: {log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The file's 200,000 routes and the config's own.
    let text = b.log();
    assert!(routes_after(&text, "SIGHUP: reloaded") > 200_000, "{text}");
    assert_eq!(
        text.matches("SIGHUP: a build is running; reloading when it is done")
            .count(),
        1,
        "{text}"
    );
    // And no third.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        b.log().matches("SIGHUP: reloaded").count(),
        2,
        "{}",
        b.log()
    );
    b.stop();
}

/// An edit that cannot go into the FIB in place (deleting a static route
/// that hid a route of the route file, which must come back) is built as
/// a reload is: off the management thread, which answers meanwhile and
/// refuses a route change until it is installed; the change's own answer
/// comes when it is. A neighbour change is made in place, with no build.
#[test]
fn the_management_thread_answers_while_an_edit_builds() {
    let b = BigTable::start("edit-big");
    // A static route over one of the file's: in place.
    let (ok, out, e) = ctl(
        &b.sock,
        &["route", "add", "11.0.5.0/24", "via", "198.18.0.2"],
    );
    assert!(ok && out.contains("installed in place"), "{e}{out}");
    let sock = b.sock.clone();
    let change = std::thread::spawn(move || ctl(&sock, &["route", "del", "11.0.5.0/24"]));
    // The build has begun once its thread runs.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !b.has_thread("reload") {
        assert!(
            !change.is_finished(),
            "the change was answered without a build thread: {:?}",
            change.join().unwrap()
        );
        assert!(Instant::now() < deadline, "no build began: {}", b.log());
        std::thread::sleep(Duration::from_millis(2));
    }
    let (ok, out, e) = ctl(&b.sock, &["stats"]);
    assert!(ok && out.contains("p0"), "{e}");
    let (ok, _, e) = ctl(
        &b.sock,
        &["route", "add", "192.0.2.0/24", "via", "198.19.0.2"],
    );
    assert!(
        !ok && e.contains("is being built"),
        "a route change was not refused during the build (the first build took {:?}): {e}",
        b.build
    );
    let (ok, out, e) = change.join().unwrap();
    assert!(ok && out.contains("installed"), "{e}");
    assert!(routes_after(&out, "installed") > 200_000, "{out}");
    // The file's route is back.
    let (ok, out, e) = ctl(&b.sock, &["show", "routes", "11.0.5.1"]);
    assert!(ok && out.contains("198.19.0.2"), "{e}{out}");
    // The edit holds: the next changes are made on top of it, a
    // neighbour's in place, without a build thread.
    let (ok, out, e) = ctl(&b.sock, &common::ADD_NEIGHBOR);
    assert!(ok && out.contains("installed in place"), "{e}{out}");
    assert!(!b.has_thread("reload"));
    let (ok, _, e) = ctl(
        &b.sock,
        &["route", "add", "192.0.2.0/24", "via", "198.19.0.2"],
    );
    assert!(ok, "{e}");
    let (ok, out, _) = ctl(&b.sock, &["show", "neighbors"]);
    assert!(
        ok && out.contains("198.19.0.9 02:00:00:00:00:09 port p1"),
        "{out}"
    );
    let (ok, out, _) = ctl(&b.sock, &["show", "routes", "11.0.5.1"]);
    assert!(ok && out.contains("198.19.0.2"), "{out}");
    b.stop();
}

/// `sluice ctl` route and neighbour edits are made on the running config:
/// the route file and rule file it read are not read again (a full
/// table's took about half a second for each edit), and what was written
/// to them since is left for a reload, which reads them. The metrics say
/// how each reload went.
#[test]
fn edits_keep_the_route_and_rule_files_as_they_were_read() {
    let dir = common::fresh_dir("edit-files");
    std::fs::write(dir.join("routes.txt"), "11.0.0.0/24\n11.0.1.0/24\n").unwrap();
    let cb = "@91.89.244.16/29\t245.66.202.32/28\t88 : 88\t69 : 69\t0x11/0xFF\t0x0000/0x0000\t\n\
                 @223.251.126.96/28\t96.205.89.192/29\t123 : 123\t53 : 53\t0x11/0xFF\t0x0000/0x0000\t\n";
    std::fs::write(dir.join("rules.cb"), cb).unwrap();
    let text = common::shipped_gateway(10_000).replacen(
        "[firewall]\n",
        "[firewall]\nclassbench_file = \"rules.cb\"\nclassbench_action = \"accept\"\n",
        1,
    ) + "\n[router]\nroute_file = \"routes.txt\"\nroute_file_via = [\"198.19.0.2\"]\n"
        + &format!(
            "\n[management]\nsocket = \"ctl.sock\"\nmetrics = \"127.0.0.1:{}\"\n",
            common::free_port()
        );
    assert!(text.contains("classbench_file"));
    let web = text
        .split("metrics = \"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .unwrap()
        .to_string();
    let cfg = dir.join("gw.toml");
    std::fs::write(&cfg, &text).unwrap();
    let sock = dir.join("ctl.sock");
    let mut run = run_quiet(&cfg, Stdio::null());
    common::wait_for(&sock);
    let via = |addr: &str| {
        let (ok, out, e) = ctl(&sock, &["--json", "show", "routes", addr]);
        assert!(ok, "{e}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["route"]["via"].as_str().map(str::to_string)
    };
    let started_with = rules(&sock);
    assert_eq!(via("11.0.1.5").as_deref(), Some("198.19.0.2"));
    // (last reload successful, its time, successes, failures)
    let reloads = || {
        let (status, m) = common::http_get(&web, "/metrics");
        assert_eq!(status, 200, "{m}");
        if common::have("promtool") {
            common::promtool_accepts(&m);
        }
        let v = |s: &str| common::sample(&m, s).unwrap_or_else(|| panic!("no {s}: {m}"));
        (
            v("sluice_config_last_reload_successful"),
            v("sluice_config_last_reload_success_timestamp_seconds"),
            v(r#"sluice_config_reloads_total{result="success"}"#),
            v(r#"sluice_config_reloads_total{result="failure"}"#),
        )
    };
    let (ok0, t0, s0, f0) = reloads();
    assert_eq!((ok0, s0, f0), (1.0, 0.0, 0.0));
    assert!(t0 > 1.7e9, "{t0}");

    // The files change (the rule file is gone); the running config does not.
    std::fs::write(dir.join("routes.txt"), "12.0.0.0/24\n").unwrap();
    std::fs::remove_file(dir.join("rules.cb")).unwrap();
    let (ok, out, e) = ctl(
        &sock,
        &["route", "add", "192.0.2.0/24", "via", "198.19.0.2"],
    );
    assert!(ok && out.contains("installed in place"), "{e}{out}");
    // A neighbour change rebuilds the tables: from the running ones.
    let (ok, out, e) = ctl(&sock, &common::ADD_NEIGHBOR);
    assert!(ok && out.contains("installed"), "{e}{out}");
    assert_eq!(via("11.0.1.5").as_deref(), Some("198.19.0.2"));
    assert_eq!(via("12.0.0.5"), None);
    assert_eq!(via("192.0.2.5").as_deref(), Some("198.19.0.2"));
    assert_eq!(rules(&sock), started_with);

    // A reload reads the files: refused while the rule file is missing
    // (nothing changes), installed once it is back.
    let (ok, _, e) = ctl(&sock, &["reload"]);
    assert!(!ok && e.contains("rules.cb"), "{e}");
    assert_eq!(via("11.0.1.5").as_deref(), Some("198.19.0.2"));
    assert_eq!(reloads(), (0.0, t0, 0.0, 1.0));
    std::fs::write(dir.join("rules.cb"), &cb[..cb.find('\n').unwrap() + 1]).unwrap();
    let (ok, out, e) = ctl(&sock, &["reload"]);
    assert!(ok, "{e}{out}");
    assert_eq!(via("12.0.0.5").as_deref(), Some("198.19.0.2"));
    assert_eq!(via("11.0.1.5"), None);
    assert_eq!(rules(&sock), started_with - 1);
    let (ok2, t2, s2, f2) = reloads();
    assert_eq!((ok2, s2, f2), (1.0, 1.0, 1.0));
    assert!(t2 >= t0, "{t2} < {t0}");

    common::signal(&run, "-TERM");
    assert!(run.0.wait().unwrap().success());
    std::fs::remove_dir_all(&dir).unwrap();
}
