//! The router (l3fwd) end to end: softnic traffic routed through static
//! routes, every tcpdump test capture replayed through it, config errors.

mod common;

use appliance::config;
use pipeline::fwd::ForwardMode;
use pipeline::Verdict;
use std::collections::BTreeMap;

fn router_config(duration: &str) -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/router.toml"
    ))
    .unwrap()
    .replace("duration = 10", &format!("duration = {duration}"))
}

/// Both directions routed via static gateways: nothing lost, and the sink
/// finds every header checksum valid after the TTL decrement.
#[test]
fn routes_softnic_traffic() {
    let (_, s) = common::run(&router_config("1.5"));
    let b = s.balance.as_ref().unwrap();
    assert!(b.balanced, "{}", s.text());
    // Offered plus what the generator counted as late (a busy machine)
    // is the configured 2 × 200 kpps × 1.5 s, less start-up.
    assert!(b.offered + b.gen_late > 400_000, "{}", s.text());
    common::delivered_all_but_missed(&s, "router");
    for p in &s.ports {
        assert_eq!(p.xstats["sink_bad"], 0, "{}", s.text());
    }
}

/// Every capture of the tcpdump test set, addressed to the router's MAC,
/// through the router stage: nothing panics, and every packet is forwarded
/// or dropped under a reason. Then the same captures through the appliance
/// on pcap ports: the totals balance.
#[test]
fn replays_tcpdump_captures() {
    let Some(dir) = testdata::shared("pcaps/tcpdump_tests") else {
        return;
    };
    let cfg = config::parse(&router_config("1"), "router.toml", None).unwrap();
    let (mut r, _fib) = appliance::stages::build_router(&cfg).unwrap();
    let mac = cfg.ports[0].mac;
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    files.sort();
    let mut total = 0;
    let mut by_file: BTreeMap<String, BTreeMap<&str, usize>> = BTreeMap::new();
    for f in &files {
        let per_file = by_file
            .entry(f.file_name().unwrap().to_string_lossy().into_owned())
            .or_default();
        for mut frame in pmd::pcap::read_frames(f).unwrap() {
            if frame.len() >= 6 {
                frame[0..6].copy_from_slice(&mac.0);
            }
            total += 1;
            let what = match r.process(&mut frame, 0) {
                Verdict::Forward(0) => "back",
                Verdict::Forward(_) => "forwarded",
                Verdict::Drop(d) => d.name(),
                Verdict::Handoff(_) => "handoff",
                Verdict::Punt(_) => "punt",
            };
            *reasons.entry(what).or_default() += 1;
            *per_file.entry(what).or_default() += 1;
        }
    }
    // The malformed captures are dropped for what is wrong with them.
    for (file, want) in [
        ("ipv4_invalid_hdr_length.pcap", "malformed"),
        ("ipv4_invalid_length.pcap", "truncated"),
        ("ipv4_invalid_total_length.pcap", "truncated"),
        ("ipv6-bad-version.pcap", "malformed"),
        ("ipv6_invalid_length.pcap", "truncated"),
    ] {
        eprintln!("{file}: {:?}", by_file[file]);
        assert!(
            by_file[file].contains_key(want),
            "{file}: {:?}",
            by_file[file]
        );
    }
    // The whole corpus's verdicts, as reviewed when they were recorded:
    // a change in any of them is a change in what the router does.
    let recorded: BTreeMap<&str, usize> = [
        ("back", 100),
        ("consumed", 3),
        ("malformed", 4),
        ("no_route", 24),
        ("not_ip", 71),
        ("not_routable", 192),
        ("truncated", 7),
        // 802.1Q/QinQ frames: the router has no sub-interfaces here (they
        // were `not_ip` before sub-interfaces existed).
        ("unknown_vlan", 62),
    ]
    .into_iter()
    .collect();
    assert_eq!(total, 463, "frames in the capture corpus");
    assert_eq!(reasons, recorded, "verdicts over the corpus");
    // The malformed captures are caught by the header checks.
    assert!(
        reasons.get("malformed").copied().unwrap_or(0)
            + reasons.get("truncated").copied().unwrap_or(0)
            > 0,
        "{reasons:?}"
    );
    assert!(reasons.contains_key("not_ip"), "{reasons:?}");
    eprintln!("verdicts over {total} frames: {reasons:?}");

    for f in files
        .iter()
        .filter(|f| f.file_name().unwrap() != "empty.pcap")
        .take(12)
    {
        let text = format!(
            r#"
[run]
duration = 0.2
[[port]]
name = "in"
driver = "pcap"
ipv4 = ["198.18.0.1/24"]
[port.pcap]
rx_file = "{}"
[[port]]
name = "out"
driver = "pcap"
ipv4 = ["198.19.0.1/24"]
[[route]]
prefix = "0.0.0.0/0"
via = "198.19.0.2"
[[neighbor]]
ip = "198.19.0.2"
mac = "02:5e:00:00:00:01"
port = "out"
[[worker]]
core = 1
mode = "l3fwd"
rx = ["in", "out"]
"#,
            f.display()
        );
        let (_, s) = common::run(&text);
        assert!(
            s.balance.as_ref().unwrap().balanced,
            "{}: {}",
            f.display(),
            s.text()
        );
    }
}

#[test]
fn router_config_errors() {
    let e = config::parse(
        &router_config("1").replace("via = \"198.19.0.2\"", "via = \"192.0.2.9\""),
        "router.toml",
        None,
    )
    .unwrap_err();
    assert_eq!(e.0[0].key, "route[0].via", "{e}");
    assert!(e.0[0].msg.contains("on no interface's subnet"), "{e}");
    let e = config::parse(
        &router_config("1")
            .replace("ipv4 = [\"198.18.0.1/24\"]", "")
            .replace("ipv4 = [\"198.19.0.1/24\"]", ""),
        "router.toml",
        None,
    )
    .unwrap_err();
    assert!(
        e.0.iter()
            .any(|x| x.key == "worker[0].mode" && x.msg.contains("needs interface addresses")),
        "{e}"
    );
    let e = config::parse(
        &router_config("1").replace("prefix = \"203.0.113.0/24\"", "prefix = \"203.0.113.0/33\""),
        "router.toml",
        None,
    )
    .unwrap_err();
    assert_eq!(e.0[0].key, "route[0].prefix", "{e}");
}
