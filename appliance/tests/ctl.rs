//! `sluice ctl` against a running instance, driven as an operator would:
//! every command, bad requests, two clients at once, a policy switched
//! and routes and neighbours changed while it forwards, the socket's permissions, a second instance on the
//! same socket, and the socket gone after the run. Bounded in time; the
//! instance is killed when the test ends, passed or failed.

mod common;

use common::{ctl, Killed};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

/// A successful command's stdout.
fn ok(sock: &Path, args: &[&str]) -> String {
    let o = ctl(sock, args);
    assert!(
        o.status.success(),
        "sluice ctl {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn json(sock: &Path, args: &[&str]) -> serde_json::Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    serde_json::from_str(&ok(sock, &a)).unwrap()
}

/// One raw request line; the answer line.
fn raw(sock: &Path, line: &[u8]) -> serde_json::Value {
    let mut s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(line);
    let mut r = String::new();
    BufReader::new(s).read_line(&mut r).unwrap();
    serde_json::from_str(&r).unwrap()
}

fn setup() -> (PathBuf, PathBuf) {
    setup_named("ctl")
}

fn setup_named(name: &str) -> (PathBuf, PathBuf) {
    let dir = common::fresh_dir(name);
    let gateway = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/gateway.toml"
    ))
    .unwrap();
    // The shipped gateway (two softnic ports, firewall with counters, NAT,
    // static routes and neighbours), running until stopped, with a socket.
    let text = gateway.replacen("duration = 10", "duration = 0", 1)
        + "\n[management]\nsocket = \"ctl.sock\"\n";
    assert!(text.contains("duration = 0"));
    let cfg = dir.join("gw.toml");
    std::fs::write(&cfg, text).unwrap();
    (dir, cfg)
}

fn start(cfg: &Path, sock: &Path) -> Killed {
    let child = Killed(
        sluice()
            .arg("run")
            .arg(cfg)
            .arg("--json")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    common::wait_for(sock);
    child
}

#[test]
fn an_operator_drives_every_command() {
    let (dir, cfg) = setup();
    let sock = dir.join("ctl.sock");
    let mut run = start(&cfg, &sock);

    // Owner only.
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");

    assert!(ok(&sock, &["help"]).contains("set poll CORE POLICY"));
    // Traffic flows; the counters say so.
    std::thread::sleep(Duration::from_millis(1500));
    let s = json(&sock, &["stats"]);
    assert_eq!(s["kind"], "stats");
    let fwd =
        s["ports"][0]["tx_pkts"].as_u64().unwrap() + s["ports"][1]["tx_pkts"].as_u64().unwrap();
    assert!(fwd > 0, "{s}");
    assert!(ok(&sock, &["stats"]).contains("balance:"));

    let ports = json(&sock, &["show", "ports"]);
    assert_eq!(ports["ports"][0]["name"], "p0");
    assert_eq!(ports["ports"][0]["addresses"][0], "198.18.0.1/24");
    let text = ok(&sock, &["show", "ports"]);
    assert!(text.contains("p0") && text.contains("p1"), "{text}");

    let cores = json(&sock, &["show", "cores"]);
    assert_eq!(cores["cores"][0]["mode"], "l3fwd");
    assert_eq!(cores["cores"][0]["rx_queues"][0], "p0:0");

    // Each RX queue by its worker, with what it received.
    let q = json(&sock, &["show", "queues"]);
    let queues = q["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 2, "{q}");
    assert_eq!(queues[0]["port"], "p0");
    assert_eq!(queues[0]["queue"], 0);
    assert_eq!(queues[1]["port"], "p1");
    assert_eq!(queues[0]["core"], cores["cores"][0]["core"]);
    assert!(queues[0]["rx_pkts"].as_u64().unwrap() > 0, "{q}");
    assert!(
        queues[0]["rx_missed"].is_u64(),
        "softnic counts per queue: {q}"
    );
    assert!(ok(&sock, &["show", "queues"]).contains("pkts/burst"));

    let routes = json(&sock, &["show", "routes"]);
    assert!(routes["ipv4"].as_u64().unwrap() >= 2, "{routes}");
    let statics = routes["static"].as_array().unwrap();
    assert!(
        statics.iter().any(|r| r["prefix"] == "203.0.113.0/24"
            && r["via"] == "198.19.0.2"
            && r["source"] == "config"
            && r["held_by"].is_null()),
        "{routes}"
    );
    assert!(
        statics
            .iter()
            .any(|r| r["source"] == "connected" && r["via"].is_null()),
        "{routes}"
    );
    let r = json(&sock, &["show", "routes", "203.0.113.7"]);
    assert_eq!(r["route"]["port"], "p1", "{r}");
    assert_eq!(r["route"]["via"], "198.19.0.2");
    assert!(ok(&sock, &["show", "routes", "198.51.100.0/24"]).contains("via 198.18.0.2"));
    let none = json(&sock, &["show", "routes", "192.0.2.1"]);
    assert!(none["route"].is_null(), "{none}");

    let n = json(&sock, &["show", "neighbors"]);
    assert!(!n["static"].as_array().unwrap().is_empty());
    let rules = json(&sock, &["show", "rules"]);
    let counted: Vec<&serde_json::Value> = rules["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["hits"].is_null())
        .collect();
    assert!(!counted.is_empty(), "{rules}");
    assert!(
        counted.iter().any(|r| r["hits"].as_u64().unwrap() > 0),
        "{rules}"
    );
    // The generator's 10,000 flows fall in few of the rules' intervals:
    // the workers' memos answer most of their lookups, after a first
    // miss.
    let (mh, mm) = (
        rules["memo_hits"].as_u64().unwrap(),
        rules["memo_misses"].as_u64().unwrap(),
    );
    assert!(mm >= 1 && mh > mm, "{rules}");
    assert!(ok(&sock, &["show", "rules"]).contains("answered by the workers' memos"));
    // Each rule's match as written in the config.
    assert_eq!(
        rules["rules"][0]["match"], "proto = \"tcp\", dport = 22, out = \"wan\"",
        "{rules}"
    );
    assert_eq!(
        rules["rules"][2]["match"],
        "in = \"lan\", state = [\"new\", \"related\"]"
    );
    assert!(ok(&sock, &["show", "config"]).contains("firewall:"));
    // Conntrack and NAT, from the worker that holds them.
    let ct = json(&sock, &["show", "conntrack", "--limit", "3"]);
    let w0 = &ct["workers"][0];
    assert!(w0["entries"].as_u64().unwrap() > 0, "{ct}");
    assert_eq!(w0["limit"], 262_144, "{ct}");
    let flows = w0["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 3, "{ct}");
    assert!(
        flows.iter().all(|f| {
            let f = f.as_str().unwrap();
            f.starts_with("udp 198.18.0.")
                && f.contains("reply udp 203.0.113.")
                && f.ends_with("[nat]")
        }),
        "{ct}"
    );
    assert!(ok(&sock, &["show", "conntrack"]).contains("flows (limit 262144)"));
    // Selected by their original direction, as conntrack -L -s shows them.
    let one = json(
        &sock,
        &["show", "conntrack", "--limit", "5", "src", "198.18.0.10"],
    );
    let flows = one["workers"][0]["flows"].as_array().unwrap();
    assert!(!flows.is_empty(), "{one}");
    // The same flows as fields, for scripts.
    let tuples = one["workers"][0]["tuples"].as_array().unwrap();
    assert_eq!(tuples.len(), flows.len(), "{one}");
    assert!(
        tuples.iter().all(|t| {
            t["proto"] == 17
                && t["orig"]["src"] == "198.18.0.10"
                && t["orig"]["dport"] == 53
                && t["reply"]["dst"] == "198.19.0.1"
                && t["nat"] == true
        }),
        "{one}"
    );
    assert!(
        flows
            .iter()
            .all(|f| f.as_str().unwrap().starts_with("udp 198.18.0.10:")),
        "{one}"
    );
    // Each with the seconds it has left, as conntrack -L's timeout
    // column: within UDP's longest timeout (180 s), the same in the line
    // and in the fields.
    assert!(
        flows.iter().zip(tuples).all(|(f, t)| {
            let e = t["expires_s"].as_u64().unwrap();
            e <= 180 && f.as_str().unwrap().contains(&format!(" {e}s reply "))
        }),
        "{one}"
    );
    // Deleted as conntrack -D deletes them: none is TCP; one host's are
    // some of them, and the table's own count of deletions says as many
    // (its next packets open them again, with new mappings).
    let none = json(
        &sock,
        &["clear", "conntrack", "src", "198.18.0.0/24", "proto", "tcp"],
    );
    assert_eq!(none["deleted"], 0, "{none}");
    let gone = json(&sock, &["clear", "conntrack", "src", "198.18.0.10/32"]);
    let n = gone["deleted"].as_u64().unwrap();
    assert!(n > 0 && n < 10_000, "{gone}");
    assert_eq!(gone["cut_short"], false, "{gone}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = json(&sock, &["stats"]);
        let d = s["cores"][0]["events"]["ct_deleted"].as_u64();
        if d == Some(n) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "ct_deleted {d:?}, {n} deleted: {s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let nat = json(&sock, &["show", "nat"]);
    assert_eq!(nat["snat"], 1);
    assert!(nat["workers"][0]["mappings"].as_u64().unwrap() > 0, "{nat}");
    assert_eq!(nat["workers"][0]["ports"], 64_512, "{nat}");
    // Its entries, tried in order, each with the flows it translated: the
    // port forward none (nothing comes from the WAN), the masquerade every
    // flow the worker mapped (the generator's, again after the clear).
    let entries = nat["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{nat}");
    assert_eq!(entries[0]["kind"], "dnat");
    assert_eq!(
        entries[0]["match"],
        "in p1 tcp 198.19.0.1:8080 -> 198.18.0.10:80"
    );
    assert_eq!(entries[0]["flows"], 0);
    assert_eq!(
        entries[1]["match"],
        "out p1 from 198.18.0.0/24 to masquerade"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let nat = json(&sock, &["show", "nat"]);
        let s = json(&sock, &["stats"]);
        let flows = nat["entries"][1]["flows"].as_u64().unwrap();
        let mapped = s["cores"][0]["events"]["nat_mapped"].as_u64().unwrap();
        if flows == mapped && flows >= 10_000 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{flows} flows, {mapped} mapped: {nat}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // `clear stats`: counting starts again.
    ok(&sock, &["clear", "stats"]);
    let after = json(&sock, &["stats"]);
    let fwd2 = after["ports"][0]["tx_pkts"].as_u64().unwrap()
        + after["ports"][1]["tx_pkts"].as_u64().unwrap();
    let total = json(&sock, &["show", "ports"]);
    assert!(
        fwd2 < fwd + 10_000_000 && after["interval"].as_f64().unwrap() < 1.0,
        "{after}"
    );
    assert!(total["ports"][0]["tx_pkts"].as_u64().is_some());

    // A policy switched while it forwards.
    ok(&sock, &["set", "poll", "1", "interrupt"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let c = json(&sock, &["show", "cores"]);
        if c["cores"][0]["policy"] == "interrupt" {
            break;
        }
        assert!(Instant::now() < deadline, "never switched: {c}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // With a knob, checked as the config file's are.
    let t = ok(
        &sock,
        &["set", "poll", "1", "interrupt", "busy_poll_us=100"],
    );
    assert!(t.contains("interrupt busy_poll_us=100"), "{t}");
    for (knobs, says) in [
        (
            "spin_polls=5",
            "applies to poll mode adaptive, not `interrupt`",
        ),
        ("busy_poll_us=2000000", "must be 0..=1000000"),
        ("busy_poll_us=soon", "a number or true/false"),
        ("busy_poll_us", "KEY=VALUE"),
        ("nosuch=1", "unknown field `nosuch`"),
    ] {
        let o = ctl(&sock, &["set", "poll", "1", "interrupt", knobs]);
        assert!(!o.status.success(), "{knobs}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(says), "{knobs}: {e}");
    }
    ok(&sock, &["set", "poll", "1", "busy"]);

    // Routes and neighbours changed while it forwards.
    assert!(ok(
        &sock,
        &["route", "add", "192.0.2.0/24", "via", "198.19.0.2"]
    )
    .contains("installed in place"));
    let r = json(&sock, &["show", "routes", "192.0.2.7"]);
    assert_eq!(r["route"]["via"], "198.19.0.2", "{r}");
    ok(&sock, &["route", "del", "192.0.2.0/24"]);
    assert!(json(&sock, &["show", "routes", "192.0.2.7"])["route"].is_null());
    ok(&sock, &common::ADD_NEIGHBOR);
    assert!(ok(&sock, &["show", "neighbors"]).contains("198.19.0.9 02:00:00:00:00:09 port p1"));
    ok(&sock, &["neighbor", "del", "198.19.0.9"]);
    assert!(!ok(&sock, &["show", "neighbors"]).contains("198.19.0.9"));

    // A batch, as `ip -batch` reads one: 300 routes, a comment, a blank
    // line; each answer printed.
    let batch = dir.join("routes.batch");
    let mut text = String::from("# routes for the lab\n\n");
    for i in 0..300 {
        text += &format!(
            "route add 10.{}.{}.0/24 via 198.19.0.2 # #{i}\n",
            77 + i / 256,
            i % 256
        );
    }
    std::fs::write(&batch, &text).unwrap();
    let o = ctl(&sock, &["--batch", batch.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        stdout.matches("installed in place").count(),
        300,
        "{stdout}"
    );
    assert_eq!(
        json(&sock, &["show", "routes", "10.78.43.1"])["route"]["via"],
        "198.19.0.2"
    );
    // The first refused line stops it, naming the line; --force goes on.
    let bad = dir.join("bad.batch");
    std::fs::write(
        &bad,
        "route del 10.77.0.0/24\nroute add 10.79.0.0/24 via 203.0.113.5\nroute del 10.77.1.0/24\n",
    )
    .unwrap();
    let o = ctl(&sock, &["--batch", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("bad.batch:2: route add 10.79.0.0/24 via 203.0.113.5: key `route.via`"),
        "{err}"
    );
    let routed = |a: &str| !json(&sock, &["show", "routes", a])["route"].is_null();
    assert!(!routed("10.77.0.1") && routed("10.77.1.1"));
    let o = ctl(&sock, &["--batch", bad.to_str().unwrap(), "--force"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!routed("10.77.1.1"), "--force went past the refusals");
    // From standard input.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["ctl", "-s"])
        .arg(&sock)
        .args(["--batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"route del 10.77.2.0/24\nshow routes 10.77.2.1\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("no route"),
        "{o:?}"
    );

    // Refusals: exit 1 with a reason, the instance unaffected.
    for (args, why) in [
        (vec!["bogus"], "unknown command"),
        (vec!["set", "poll", "7", "busy"], "no worker on core 7"),
        (vec!["set", "poll", "1", "sometimes"], "not a poll policy"),
        (
            vec!["show", "routes", "not-an-address"],
            "neither an address",
        ),
        (
            vec!["route", "add", "10.9.0.0/16", "via", "203.0.113.5"],
            "no interface's subnet",
        ),
        (
            vec!["route", "add", "203.0.113.0/24", "via", "198.19.0.2"],
            "exists",
        ),
        (vec!["route", "del", "192.0.2.0/24"], "no static route"),
        (
            vec!["route", "add", "10.0.0.0/8", "via", "1.2.3.4\"\nx"],
            "not an address",
        ),
        (
            vec!["neighbor", "add", "198.19.0.9", "zz", "port", "p1"],
            "MAC address",
        ),
        (
            vec!["show", "conntrack", "--limit", "x"],
            "a number of flows",
        ),
        (
            vec!["clear", "conntrack", "src", "198.18.0.x"],
            "an address or prefix",
        ),
        (vec!["clear", "conntrack", "--limit", "3"], "filter:"),
        (vec!["show", "conntrack", "proto"], "needs a value"),
        (vec!["show", "conntrack", "proto", "tcpx"], "tcp, udp"),
    ] {
        let o = ctl(&sock, &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(why), "{args:?}: {err}");
    }
    // Malformed requests on the wire.
    let r = raw(&sock, b"not json\n");
    assert_eq!(r["ok"], false);
    assert!(r["error"].as_str().unwrap().contains("malformed request"));
    let r = raw(&sock, b"{\"args\": []}\n");
    assert!(r["error"].as_str().unwrap().contains("empty command"));
    let r = raw(&sock, b"{\"args\": [\"stats\"], \"extra\": 1}\n");
    assert_eq!(r["ok"], false);
    let mut big = b"{\"args\": [\"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 70_000));
    big.extend(b"\"]}\n");
    let r = raw(&sock, &big);
    assert!(r["error"].as_str().unwrap().contains("longer than"), "{r}");
    // A client that connects and says nothing does not block the others.
    let idle = UnixStream::connect(&sock).unwrap();
    // Two clients at once.
    let (a, b) = (sock.clone(), sock.clone());
    let t1 = std::thread::spawn(move || json(&a, &["show", "cores"]));
    let t2 = std::thread::spawn(move || json(&b, &["stats"]));
    assert_eq!(t1.join().unwrap()["cores"][0]["core"], 1);
    assert_eq!(t2.join().unwrap()["kind"], "stats");
    drop(idle);
    // `top` refreshes and exits after --count screens.
    let top = ok(&sock, &["--count", "2", "--interval", "0.1", "top"]);
    assert_eq!(top.matches("rx queues").count(), 2, "{top}");

    // A second instance with the same socket is refused, naming the first.
    let second = sluice().arg("run").arg(&cfg).output().unwrap();
    assert_eq!(second.status.code(), Some(2));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("in use by another sluice") && err.contains(&run.0.id().to_string()),
        "{err}"
    );

    // Other users cannot connect (as root, checked as `nobody`).
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    if root && Path::new("/usr/bin/setpriv").exists() {
        let o = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_sluice"))
            .args(["ctl", "-s"])
            .arg(&sock)
            .arg("stats")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{o:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("ermission denied"),
            "{o:?}"
        );
    }

    // Stopped, it removes its socket.
    common::signal(&run, "-TERM");
    let status = run.0.wait().unwrap();
    let mut err = String::new();
    run.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status}: {err}");
    assert!(!sock.exists());
    let o = ctl(&sock, &["stats"]);
    assert_eq!(o.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A static route's gateway and a static neighbour's MAC are changed the
/// way an operator changes them: deleted, then added anew. What was
/// deleted stays deleted, whether the file or an earlier `ctl` edit made
/// it: the re-added route has the new gateway only (the deleted one came
/// back beside it as a second equal-cost path), the re-added neighbour
/// the new MAC (refused as a duplicate). Then a reload restores the file.
#[test]
fn a_deleted_route_or_neighbor_stays_deleted_when_added_anew() {
    let (dir, cfg) = setup_named("ctl-readd");
    let sock = dir.join("ctl.sock");
    let mut run = start(&cfg, &sock);
    let paths = |addr: &str| -> Vec<String> {
        let r = json(&sock, &["show", "routes", addr]);
        r["paths"]
            .as_array()
            .map(|p| {
                p.iter()
                    .map(|h| h["via"].as_str().unwrap_or("-").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let neighbors = || ok(&sock, &["show", "neighbors"]);

    // A route of the file (203.0.113.0/24 via 198.19.0.2), moved to the
    // other gateway, then back.
    assert_eq!(paths("203.0.113.1"), ["198.19.0.2"]);
    ok(&sock, &["route", "del", "203.0.113.0/24"]);
    assert!(paths("203.0.113.1").is_empty());
    ok(
        &sock,
        &["route", "add", "203.0.113.0/24", "via", "198.18.0.2"],
    );
    assert_eq!(paths("203.0.113.1"), ["198.18.0.2"]);
    ok(&sock, &["route", "del", "203.0.113.0/24"]);
    ok(
        &sock,
        &["route", "add", "203.0.113.0/24", "via", "198.19.0.2"],
    );
    assert_eq!(paths("203.0.113.1"), ["198.19.0.2"]);
    // Replaced in one step (no moment without a route): by two
    // equal-cost paths, then by one again.
    assert!(ok(
        &sock,
        &[
            "route",
            "replace",
            "203.0.113.0/24",
            "via",
            "198.19.0.2",
            "via",
            "198.19.0.3"
        ],
    )
    .contains("installed in place"));
    assert_eq!(paths("203.0.113.1"), ["198.19.0.2", "198.19.0.3"]);
    ok(
        &sock,
        &["route", "replace", "203.0.113.0/24", "via", "198.19.0.2"],
    );
    assert_eq!(paths("203.0.113.1"), ["198.19.0.2"]);
    // A route added by `ctl`, moved.
    ok(
        &sock,
        &["route", "add", "192.0.2.0/24", "via", "198.19.0.2"],
    );
    ok(&sock, &["route", "del", "192.0.2.0/24"]);
    ok(
        &sock,
        &["route", "add", "192.0.2.0/24", "via", "198.18.0.2"],
    );
    assert_eq!(paths("192.0.2.1"), ["198.18.0.2"]);

    // A neighbour of the file, given a new MAC; one added by `ctl`, too.
    assert!(neighbors().contains("198.19.0.2 02:5e:00:00:00:01 port p1"));
    let hits = || -> u64 {
        let r = json(&sock, &["show", "rules"]);
        r["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x["hits"].as_u64())
            .sum()
    };
    let hits_before = hits();
    // `neighbor VERB IP MAC port p1`.
    let neighbor = |verb: &str, ip: &str, mac: &str| {
        ok(&sock, &["neighbor", verb, ip, mac, "port", "p1"]);
    };
    ok(&sock, &["neighbor", "del", "198.19.0.2"]);
    neighbor("add", "198.19.0.2", "02:00:00:00:00:42");
    neighbor("add", "198.19.0.7", "02:00:00:00:00:07");
    ok(&sock, &["neighbor", "del", "198.19.0.7"]);
    neighbor("add", "198.19.0.7", "02:00:00:00:00:08");
    // Replaced in one step (the workers never without it), and a
    // replace of none adds it.
    neighbor("replace", "198.19.0.2", "02:00:00:00:00:43");
    assert!(neighbors().contains("198.19.0.2 02:00:00:00:00:43 port p1"));
    neighbor("replace", "198.19.0.2", "02:00:00:00:00:42");
    neighbor("replace", "198.19.0.6", "02:00:00:00:00:06");
    ok(&sock, &["neighbor", "del", "198.19.0.6"]);
    let n = neighbors();
    assert!(n.contains("198.19.0.2 02:00:00:00:00:42 port p1"), "{n}");
    assert!(n.contains("198.19.0.7 02:00:00:00:00:08 port p1"), "{n}");
    assert!(!n.contains("198.19.0.6"), "{n}");
    assert!(
        !n.contains("02:5e:00:00:00:01") && !n.contains("02:00:00:00:00:07"),
        "{n}"
    );
    // The routes survived the neighbour changes (made in place) as they
    // were.
    assert_eq!(paths("192.0.2.1"), ["198.18.0.2"]);
    assert_eq!(paths("203.0.113.1"), ["198.19.0.2"]);
    // The rules' hit counts went on (a neighbour change used to build the
    // rules again, and their counts started from zero).
    assert!(hits() >= hits_before, "{} < {hits_before}", hits());
    // And the workers forward with the new MAC: what p1 sends to
    // 203.0.113.0/24 (the generator's traffic, new flows and those opened
    // before the change) goes to 198.19.0.2 at 02:00:00:00:00:42.
    let file = dir.join("p1.pcapng");
    let w = file.to_str().unwrap();
    let out = ok(
        &sock,
        &[
            "capture",
            "--port",
            "p1",
            "--direction",
            "tx",
            "--count",
            "50",
            "-w",
            w,
        ],
    );
    assert!(out.contains("done: 50 packets"), "{out}");
    let frames = pmd::pcap::read_frames(&file).unwrap();
    assert_eq!(frames.len(), 50);
    for f in &frames {
        assert_eq!(f[..6], [2, 0, 0, 0, 0, 0x42], "{:02x?}", &f[..14]);
    }

    // A reload goes back to the file.
    ok(&sock, &["reload"]);
    assert!(paths("192.0.2.1").is_empty());
    let n = neighbors();
    assert!(n.contains("198.19.0.2 02:5e:00:00:00:01 port p1"), "{n}");
    assert!(!n.contains("198.19.0.7"), "{n}");

    common::signal(&run, "-TERM");
    assert!(run.0.wait().unwrap().success());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A policy switched with `set poll` lasts through route and neighbour
/// changes, and a reload puts the file's back (it used to keep the
/// switched one: the running config still had the file's, so the reload
/// saw nothing to change).
#[test]
fn a_switched_policy_lasts_until_a_reload_puts_the_files_back() {
    let (dir, cfg) = setup_named("ctl-policy");
    let sock = dir.join("ctl.sock");
    let mut run = start(&cfg, &sock);
    let policy_becomes = |want: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let c = json(&sock, &["show", "cores"]);
            if c["cores"][0]["policy"] == want {
                return;
            }
            assert!(Instant::now() < deadline, "policy never {want}: {c}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    policy_becomes("busy");
    ok(&sock, &["set", "poll", "1", "adaptive"]);
    policy_becomes("adaptive");
    ok(&sock, &common::ADD_NEIGHBOR);
    ok(
        &sock,
        &["route", "add", "192.0.2.0/24", "via", "198.19.0.2"],
    );
    // Give a wrong switch time to land, then look again.
    std::thread::sleep(Duration::from_millis(100));
    policy_becomes("adaptive");
    assert!(ok(&sock, &["reload"]).contains("1 poll policies switched"));
    policy_becomes("busy");
    // Refused changes are logged too.
    assert!(!ctl(&sock, &["set", "poll", "1", "bogus"]).status.success());

    common::signal(&run, "-TERM");
    let mut log = String::new();
    run.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(run.0.wait().unwrap().success());
    // Every change, with who made it and how it went; no lookups.
    let uid = std::fs::metadata("/proc/self").unwrap().uid();
    let changes: Vec<&str> = log.lines().filter(|l| l.starts_with("ctl (")).collect();
    let who = format!("uid {uid}): ");
    assert_eq!(changes.len(), 5, "{log}");
    for (line, what) in changes.iter().zip([
        "set poll 1 adaptive: core 1: switching to adaptive",
        "neighbor add 198.19.0.9 02:00:00:00:00:09 port p1: installed in place (3 static neighbours)",
        "route add 192.0.2.0/24 via 198.19.0.2: installed in place (",
        "reload: reloaded",
        "set poll 1 bogus: refused: `bogus` is not a poll policy",
    ]) {
        assert!(line.starts_with("ctl (pid "), "{line}");
        assert!(line.contains(&format!("{who}{what}")), "{line}\n{log}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `set runtime on` switches the gateway worker's stage clock on while it
/// forwards and `show runtime` gives its cycles per packet per stage, as
/// VPP's `show runtime` gives clocks per node: every stage the shipped
/// gateway's traffic goes through is charged (its outside generator's
/// unsolicited packets reach the rules), the packets counted are no more
/// than the worker received, the metrics carry the same series (and pass
/// `promtool` when it is installed); off, the totals stay as they were;
/// a core without a stage clock is refused.
#[test]
fn the_stage_clock_profiles_the_running_gateway() {
    let (dir, cfg) = setup_named("ctl-runtime");
    let metrics = format!("127.0.0.1:{}", common::free_port());
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "[management]\n",
        &format!("[management]\nmetrics = \"{metrics}\"\n"),
    );
    std::fs::write(&cfg, text).unwrap();
    let sock = dir.join("ctl.sock");
    let _run = start(&cfg, &sock);
    let runtime = || json(&sock, &["show", "runtime"])["runtime"][0].clone();
    let r = runtime();
    assert_eq!(
        (r["core"].as_u64(), r["on"].as_bool()),
        (Some(1), Some(false)),
        "{r}"
    );
    assert_eq!(r["packets"], 0);

    assert!(ok(&sock, &["set", "runtime", "on"]).contains("core 1: stage clock on"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let r = loop {
        let r = runtime();
        if r["on"] == true && r["packets"].as_u64().unwrap() > 10_000 {
            break r;
        }
        assert!(Instant::now() < deadline, "no profile: {r}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let stages: Vec<&str> = r["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(
        stages,
        ["parse", "conntrack", "firewall", "nat", "route", "rewrite"]
    );
    for s in r["stages"].as_array().unwrap() {
        assert!(s["cycles"].as_u64().unwrap() > 0, "{r}");
    }
    let q = json(&sock, &["show", "queues"]);
    let received: u64 = q["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["rx_pkts"].as_u64().unwrap())
        .sum();
    assert!(r["packets"].as_u64().unwrap() <= received, "{r} {q}");
    let text = ok(&sock, &["show", "runtime"]);
    assert!(
        text.contains("core 1: stage clock on") && text.contains("conntrack"),
        "{text}"
    );

    // The metrics carry it.
    let (status, body) = common::http_get(&metrics, "/metrics");
    assert_eq!(status, 200);
    assert_eq!(
        common::sample(&body, r#"sluice_stage_clock{core="1"}"#),
        Some(1.0)
    );
    assert!(
        common::sample(
            &body,
            r#"sluice_stage_cycles_total{core="1",stage="conntrack"}"#
        )
        .unwrap()
            > 0.0,
        "{body}"
    );
    assert!(common::sample(&body, r#"sluice_stage_packets_total{core="1"}"#).unwrap() > 0.0);
    if common::have("promtool") {
        common::promtool_accepts(&body);
    }

    // Off: the totals stay.
    assert!(ok(&sock, &["set", "runtime", "off", "1"]).contains("core 1: stage clock off"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let off = loop {
        let r = runtime();
        if r["on"] == false {
            break r;
        }
        assert!(Instant::now() < deadline, "never off: {r}");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(runtime(), off, "frozen while off");

    // Refused: a core without a stage clock, a bad word.
    let o = ctl(&sock, &["set", "runtime", "on", "7"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no stage clock on core 7 (l3fwd workers: 1)"),
        "{o:?}"
    );
    assert!(!ctl(&sock, &["set", "runtime", "maybe"]).status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The router's stage clock (an l3fwd worker without rules or NAT): its
/// burst path's stages, parse, lookup, rewrite, ipv6 and slow path, charged
/// while the shipped router forwards.
#[test]
fn the_routers_stage_clock_splits_its_burst_path() {
    let dir = common::fresh_dir("ctl-runtime-router");
    let router = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/router.toml"
    ))
    .unwrap();
    let cfg = dir.join("r.toml");
    std::fs::write(
        &cfg,
        router.replacen("duration = 10", "duration = 0", 1)
            + "\n[management]\nsocket = \"ctl.sock\"\n",
    )
    .unwrap();
    let sock = dir.join("ctl.sock");
    let _run = start(&cfg, &sock);
    assert!(ok(&sock, &["set", "runtime", "on"]).contains("core 1: stage clock on"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let r = loop {
        let r = json(&sock, &["show", "runtime"])["runtime"][0].clone();
        if r["on"] == true && r["packets"].as_u64().unwrap() > 10_000 {
            break r;
        }
        assert!(Instant::now() < deadline, "no profile: {r}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let stages = r["stages"].as_array().unwrap();
    let names: Vec<&str> = stages
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["parse", "lookup", "rewrite", "ipv6", "slow path"]);
    assert!(stages[0]["cycles"].as_u64().unwrap() > 0, "{r}");
    assert!(stages[1]["cycles"].as_u64().unwrap() > 0, "{r}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `show neighbors` lists the neighbours the workers learned from ARP,
/// with their port and age: here from an ARP request a host on p0's
/// subnet sends for the router's address.
#[test]
fn show_neighbors_lists_what_the_workers_learned() {
    let (dir, _) = setup_named("ctl-learned");
    // ARP request: who has 198.18.0.1? tell 198.18.0.2 (02:00:00:00:00:aa).
    let mac = [2, 0, 0, 0, 0, 0xaa];
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[198, 18, 0, 2]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&[198, 18, 0, 1]);
    f.resize(60, 0);
    let arp = dir.join("arp.pcap");
    common::write_pcap(&arp, &[f]);
    let cfg = dir.join("learn.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[run]
duration = 0

[management]
socket = "ctl.sock"

[[port]]
name = "p0"
driver = "pcap"
mac = "02:51:00:00:00:00"
ipv4 = ["198.18.0.1/24"]
[port.pcap]
rx_file = "{}"

[[port]]
name = "p1"
driver = "pcap"
mac = "02:51:00:00:00:01"
ipv4 = ["198.19.0.1/24"]

[[worker]]
core = 1
mode = "l3fwd"
rx = ["p0", "p1"]
"#,
            arp.display()
        ),
    )
    .unwrap();
    let sock = dir.join("ctl.sock");
    let mut run = start(&cfg, &sock);
    let deadline = Instant::now() + Duration::from_secs(10);
    let learned = loop {
        let n = json(&sock, &["show", "neighbors"]);
        if n["learned"].as_array().is_some_and(|l| !l.is_empty()) {
            break n;
        }
        assert!(Instant::now() < deadline, "nothing learned: {n}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let l = &learned["learned"][0];
    assert_eq!(l["ip"], "198.18.0.2", "{learned}");
    assert_eq!(l["mac"], "02:00:00:00:00:aa", "{learned}");
    assert_eq!(l["port"], "p0", "{learned}");
    assert!(l["age_s"].as_f64().is_some_and(|a| a < 60.0), "{learned}");
    assert!(ok(&sock, &["show", "neighbors"]).contains("198.18.0.2 02:00:00:00:00:aa port p0"));
    common::signal(&run, "-TERM");
    assert!(run.0.wait().unwrap().success());
    std::fs::remove_dir_all(&dir).unwrap();
}
