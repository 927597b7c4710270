//! Unit tests of the config loader and validator (the corpus of bad
//! configs is `appliance/tests/bad/`, run by `tests/bad_inputs.rs`).

use super::*;

fn errs(text: &str) -> Vec<ConfigError> {
    parse(text, "t.toml", None).unwrap_err().0
}

const GOOD: &str = r#"
[run]
duration = 1

[[port]]
name = "a"
driver = "null"

[[port]]
name = "b"
driver = "null"

[[worker]]
core = 0
mode = "macswap"
rx = ["a:0", "b"]
"#;

#[test]
fn good_config_resolves_ports_and_queues() {
    let c = parse(GOOD, "t.toml", None).unwrap();
    assert_eq!(c.ports.len(), 2);
    assert_eq!(
        (c.ports[0].peer, c.ports[1].peer),
        (1, 0),
        "paired topology"
    );
    assert_eq!(c.workers[0].rx, vec![(0, 0), (1, 0)]);
    assert_eq!(c.workers[0].tx, vec![(0, 0), (1, 0)]);
    assert_eq!(c.workers[0].mode, FwdMode::MacSwap);
    assert_eq!(c.run.duration, Some(Duration::from_secs(1)));
    assert_eq!(c.run.burst, 32);
}

#[test]
fn quickstart_is_valid() {
    let c = parse(QUICKSTART, QUICKSTART_NAME, None).unwrap();
    assert!(matches!(c.ports[0].kind, PortKind::Softnic { .. }));
    assert_eq!(c.workers.len(), 1);
}

#[test]
fn every_shipped_config_is_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            // Without the host checks: the lab's interfaces live in its
            // namespaces, and DPDK ports need the feature.
            let text = std::fs::read_to_string(&p).unwrap();
            parse_with(&text, &p.display().to_string(), p.parent(), false)
                .unwrap_or_else(|e| panic!("{}", e));
            n += 1;
        }
    }
    assert!(n >= 2);
}

/// The three errors the issue names: a bad key, an unknown port, two
/// workers on one core; each with its line and key.
#[test]
fn three_distinct_errors_name_line_and_key() {
    let bad_key = GOOD.replace(
        "driver = \"null\"\n\n[[port]]",
        "driver = \"null\"\nrxqq = 2\n\n[[port]]",
    );
    let e = errs(&bad_key);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].line, 8);
    assert_eq!(e[0].key, "port[0].rxqq", "the table's path and the key");
    assert!(e[0].msg.contains("unknown field `rxqq`"), "{}", e[0]);
    assert!(
        e[0].to_string()
            .starts_with("t.toml:8:1: key `port[0].rxqq`"),
        "{}",
        e[0]
    );

    let unknown_port = GOOD.replace("\"b\"]", "\"c:0\"]");
    let e = errs(&unknown_port);
    // One error per root cause: the unknown port, not also b:0 unpolled.
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].key, "worker[0].rx");
    assert_eq!(e[0].line, 16);
    assert!(e[0].msg.contains("port `c` does not exist"), "{}", e[0]);
    // Unpolled queues alone: one error for the port, naming the range.
    let e = errs(&GOOD.replace(
        "driver = \"null\"\n\n[[worker]]",
        "driver = \"null\"\nrxq = 64\ntxq = 2\n\n[[worker]]",
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].key, "port[1].rxq");
    assert!(e[0].msg.contains("b:1-63 are not polled"), "{}", e[0]);

    let two_on_one = GOOD.replace(
        "rx = [\"a:0\", \"b\"]",
        "rx = [\"a:0\"]\n\n[[worker]]\ncore = 0\nmode = \"io\"\nrx = [\"b:0\"]",
    );
    let e = errs(&two_on_one);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].key, "worker[1].core");
    assert_eq!(e[0].line, 19);
    assert!(e[0].msg.contains("core 0 is already used by worker[0]"));
}

#[test]
fn type_and_value_errors_are_located() {
    let e = errs(&GOOD.replace("duration = 1", "duration = \"long\""));
    assert_eq!((e[0].line, e[0].key.as_str()), (3, "run.duration"));
    let e = errs(&GOOD.replace("mode = \"macswap\"", "mode = \"warp\""));
    assert_eq!((e[0].line, e[0].key.as_str()), (15, "worker[0].mode"));
    assert!(e[0].msg.contains("unknown variant `warp`"));
    let e = errs(&GOOD.replace("core = 0", "core = 4096"));
    assert!(e[0].msg.contains("core 4096 does not exist"));
    let e = errs(&GOOD.replace("duration = 1", "duration = 1\nburst = 0"));
    assert_eq!((e[0].line, e[0].key.as_str()), (4, "run.burst"));
}

/// `[dpdk] mbufs`: taken, or refused (out of range, or fewer than the RX
/// rings hold) at its line.
#[test]
fn mbuf_pool_size() {
    let with = |n: &str| {
        GOOD.replace(
            "duration = 1",
            &format!("duration = 1\n\n[dpdk]\nmbufs = {n}"),
        )
    };
    let c = parse(&with("65535"), "t.toml", None).unwrap();
    assert_eq!(c.mbufs, Some(65535));
    assert_eq!(parse(GOOD, "t.toml", None).unwrap().mbufs, None);
    let e = errs(&with("100"));
    assert_eq!((e[0].line, e[0].key.as_str()), (6, "dpdk.mbufs"));
    assert!(e[0].msg.contains("1024..="), "{e:?}");
    // Two ports of 1024 RX descriptors (the default) need 2048.
    let e = errs(&with("2000"));
    assert!(e[0].msg.contains("RX descriptors (2048 here)"), "{e:?}");
}

/// `sizes`: `"imix"` or a list, one length per flow in turn; the flows
/// rounded up to whole rounds when unset, refused when given otherwise;
/// errors at the key.
#[test]
fn generator_size_mixes() {
    let with = |gen: &str| {
        GOOD.replace(
            "mode = \"macswap\"\nrx = [\"a:0\", \"b\"]",
            &format!("mode = \"txonly\"\nrx = [\"a\", \"b\"]\n[worker.gen]\nrate = 1000\n{gen}"),
        )
    };
    let gen = |text: &str| {
        parse(text, "t.toml", None).unwrap().workers[0]
            .gen
            .clone()
            .unwrap()
    };
    let g = gen(&with("sizes = \"imix\""));
    assert_eq!(g.sizes, pmd::probe::IMIX);
    assert_eq!(g.flows, 12, "txonly's one flow, rounded to a round");
    let g = gen(&with("sizes = [64, 64, 1500]\nflows = 30"));
    assert_eq!((g.sizes, g.flows), (vec![64, 64, 1500], 30));
    let e = errs(&with("sizes = [64, 64, 1500]\nflows = 31"));
    assert_eq!(e[0].key, "worker[0].gen.flows", "{e:?}");
    assert!(e[0].msg.contains("multiple of the 3 lengths"), "{e:?}");
    let e = errs(&with("sizes = [64, 40]"));
    assert_eq!(e[0].key, "worker[0].gen.sizes", "{e:?}");
    assert!(e[0].msg.contains("58..=9014"), "{e:?}");
    // Jumbo frames up to a 9,000-byte packet.
    let g = gen(&with("sizes = [64, 9014]\nflows = 2"));
    assert_eq!(g.sizes, [64, 9014]);
    let e = errs(&with("sizes = [64, 9015]"));
    assert!(e[0].msg.contains("9015: each must be 58..=9014"), "{e:?}");
    let e = errs(&with("sizes = \"trimodal\""));
    assert!(e[0].msg.contains("\"imix\""), "{e:?}");
    let e = errs(&with("size = 64\nsizes = \"imix\""));
    assert!(e[0].msg.contains("not both"), "{e:?}");
}

/// Flow fields: `walk` (random or sequential) and address ranges beside
/// prefixes; a range backwards or a bad walk is an error at its key.
#[test]
fn generator_walks_and_address_ranges() {
    let with = |gen: &str| {
        GOOD.replace(
            "mode = \"macswap\"\nrx = [\"a:0\", \"b\"]",
            &format!("mode = \"flowgen\"\nrx = [\"a\", \"b\"]\n[worker.gen]\nrate = 1000\n{gen}"),
        )
    };
    let gen = |text: &str| {
        parse(text, "t.toml", None).unwrap().workers[0]
            .gen
            .clone()
            .unwrap()
    };
    let g = gen(&with("walk = \"sequential\"\ndst_ip = \"10.253.0.0-10.253.3.255\"\nsrc_ip = \"10.254.0.0/24\"\ndst_ip6 = \"2001:db8::-2001:db8::ff\""));
    assert_eq!(g.walk, pmd::probe::Walk::Sequential);
    let v4 = |s: &str| s.parse::<std::net::Ipv4Addr>().unwrap();
    assert_eq!(
        (g.dst_ip.first, g.dst_ip.last),
        (v4("10.253.0.0"), v4("10.253.3.255"))
    );
    // A prefix: its hosts.
    assert_eq!(
        (g.src_ip.first, g.src_ip.last),
        (v4("10.254.0.1"), v4("10.254.0.254"))
    );
    assert_eq!(
        g.dst_ip6.last,
        "2001:db8::ff".parse::<std::net::Ipv6Addr>().unwrap()
    );
    assert_eq!(gen(&with("")).walk, pmd::probe::Walk::Random);
    let e = errs(&with("dst_ip = \"10.253.0.9-10.253.0.1\""));
    assert_eq!(e[0].key, "worker[0].gen.dst_ip", "{e:?}");
    assert!(
        e[0].msg.contains("first address is after its last"),
        "{e:?}"
    );
    let e = errs(&with("src_ip = \"10.0.0.1-fe80::1\""));
    assert!(e[0].msg.contains("range first-last"), "{e:?}");
    let e = errs(&with("walk = \"inc\""));
    assert_eq!(e[0].key, "worker[0].gen.walk", "{e:?}");
}

#[test]
fn queue_conflicts() {
    let e = errs(&GOOD.replace("\"a:0\", \"b\"", "\"a:0\", \"a:0\", \"b\""));
    assert!(
        e[0].msg.contains("a:0 is already polled by worker[0]"),
        "{e:?}"
    );
    let e = errs(&GOOD.replace("\"a:0\", \"b\"", "\"a:3\", \"b\""));
    assert!(e[0].msg.contains("queue 3 does not exist"), "{e:?}");
    let e = errs(&GOOD.replace(
        "driver = \"null\"\n\n[[port]]",
        "driver = \"null\"\n[port.pcap]\n\n[[port]]",
    ));
    assert!(
        e[0].msg.contains("does not apply to driver `null`"),
        "{e:?}"
    );
}

#[test]
fn typed_values() {
    assert_eq!(
        "198.18.0.0/24".parse::<Prefix<Ipv4Addr>>().unwrap().span(),
        Span {
            first: Ipv4Addr::new(198, 18, 0, 1),
            last: Ipv4Addr::new(198, 18, 0, 254)
        }
    );
    assert_eq!(
        "198.18.0.7"
            .parse::<Prefix<Ipv4Addr>>()
            .unwrap()
            .span()
            .first,
        Ipv4Addr::new(198, 18, 0, 7)
    );
    assert!("198.18.0.0/33".parse::<Prefix<Ipv4Addr>>().is_err());
    let p6 = "2001:db8::/126".parse::<Prefix<Ipv6Addr>>().unwrap().span();
    assert_eq!(p6.last, "2001:db8::3".parse::<Ipv6Addr>().unwrap());
    assert_eq!("80".parse::<PortRange>().unwrap(), PortRange(80, 80));
    assert!("90-80".parse::<PortRange>().is_err());
    let e = errs(&GOOD.replace(
        "driver = \"null\"\n\n[[port]]",
        "driver = \"null\"\nmac = \"02:00:00:00:00\"\n\n[[port]]",
    ));
    assert_eq!(e[0].key, "port[0].mac");
    assert!(e[0].msg.contains("MAC address"), "{}", e[0]);
}

const GW: &str = r#"
[[port]]
name = "lan"
driver = "null"
ipv4 = ["198.18.0.1/24"]

[[port]]
name = "wan"
driver = "null"
ipv4 = ["198.19.0.1/24"]

[[worker]]
core = 0
mode = "l3fwd"
rx = ["lan", "wan"]
"#;

#[test]
fn firewall_and_nat_sections_resolve() {
    let text = format!(
        "{GW}{}",
        r#"
[firewall]
default = "drop"
zones = { inside = ["lan"] }

[[firewall.rule]]
action = "reject"
reject_with = "admin-prohibited"
proto = "tcp"
dport = "20-23"
tcp_flags = "syn/syn,ack"
in = "inside"
out = ["wan"]
state = ["new", "invalid"]
counter = true

[[firewall.rule]]
action = "accept"
src = "2001:db8::/32"

[conntrack]
capacity = 1000
replied_s = 60
tcp_window = false

[nat]
ports = "20000-29999"

[[nat.snat]]
out = "wan"
to = ["198.19.0.10", "198.19.0.11"]

[[nat.dnat]]
proto = "udp"
dst = "198.19.0.1"
dport = 53
to = "198.18.0.53"
"#
    );
    let c = parse(&text, "t.toml", None).unwrap();
    let g = &c.gateway;
    assert!(g.enabled);
    assert_eq!(g.default, pipeline::firewall::Action::Drop);
    let r = &g.rules[0];
    assert_eq!(
        r.action,
        pipeline::firewall::Action::Reject(pipeline::firewall::RejectWith::AdminProhibited)
    );
    assert_eq!(
        (r.hdr.dport, r.hdr.proto, r.hdr.flags),
        ((20, 23), (6, 0xff), (2, 0x12))
    );
    assert_eq!(
        (r.in_ports.clone(), r.out_ports.clone()),
        (vec![0], vec![1])
    );
    assert_eq!(r.states, 1 | 8);
    assert!(r.counter);
    assert_eq!(r.origin, "t.toml:21");
    assert_eq!(g.rules[1].hdr.src.1, 32);
    assert_eq!(g.ct_capacity, 1000);
    assert_eq!(g.timeouts.replied, 60_000_000_000);
    assert!(!g.ct_tcp_window);
    assert!(
        parse(&text.replace("tcp_window = false\n", ""), "t.toml", None)
            .unwrap()
            .gateway
            .ct_tcp_window,
        "on by default"
    );
    let e = parse(
        &text.replace("tcp_window = false", "tcp_window = \"no\""),
        "t.toml",
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("t.toml") && e.contains("tcp_window"), "{e}");
    assert_eq!(
        g.nat.ports,
        pipeline::nat::PortRange {
            lo: 20000,
            hi: 29999
        }
    );
    assert_eq!(g.nat.snat[0].out_port, 1);
    assert_eq!(g.nat.dnat[0].to_port, None, "port kept");
}

/// Rules, zones and NAT name VLAN sub-interfaces as they name ports, by
/// the router's interface index (ports first, then sub-interfaces); a
/// gateway takes at most 255 interfaces (a rule's metadata holds one in 8
/// bits), a router without rules more.
#[test]
fn firewall_and_nat_name_vlan_sub_interfaces() {
    let vlans = r#"
[[vlan]]
port = "lan"
id = 10
ipv4 = ["198.20.0.1/24"]

[[vlan]]
port = "wan"
id = 100
name = "uplink"
ipv4 = ["198.21.0.1/24"]
"#;
    let text = format!(
        "{GW}{vlans}{}",
        r#"
[firewall]
zones = { up = ["uplink", "wan"] }

[[firewall.rule]]
action = "drop"
in = "lan.10"
out = "up"

[[nat.snat]]
out = "uplink"
src = "198.20.0.0/24"
to = "masquerade"

[[nat.dnat]]
in = "uplink"
proto = "tcp"
dst = "198.21.0.1"
dport = 80
to = "198.20.0.5"
"#
    );
    let c = parse(&text, "t.toml", None).unwrap();
    let names: Vec<&str> = c.router.names.iter().map(String::as_str).collect();
    assert_eq!(names, ["lan", "wan", "lan.10", "uplink"]);
    let r = &c.gateway.rules[0];
    assert_eq!(
        (r.in_ports.clone(), r.out_ports.clone()),
        (vec![2], vec![1, 3])
    );
    assert_eq!(c.gateway.nat.snat[0].out_port, 3);
    assert_eq!(c.gateway.nat.dnat[0].in_port, Some(3));
    // 2 ports and 253 sub-interfaces: 255 interfaces, the most a gateway
    // takes; one more is refused, at the one over, and only with rules.
    let many = |n: u16| -> String {
        (1..=n)
            .map(|id| format!("\n[[vlan]]\nport = \"lan\"\nid = {id}\n"))
            .collect()
    };
    let fw = "\n[firewall]\ndefault = \"accept\"\n";
    assert!(parse(&format!("{GW}{}{fw}", many(253)), "t.toml", None).is_ok());
    let e = errs(&format!("{GW}{}{fw}", many(254)));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].key, "vlan[253]");
    assert!(e[0].msg.contains("at most 255 interfaces"), "{}", e[0]);
    assert!(parse(&format!("{GW}{}", many(254)), "t.toml", None).is_ok());
}

#[test]
fn firewall_errors_name_line_and_key() {
    for (extra, key, line, msg) in [
        (
            "[[firewall.rule]]\naction = \"allow\"\n",
            "firewall.rule[0].action",
            18,
            "accept, drop or reject",
        ),
        (
            "[[firewall.rule]]\naction = \"drop\"\ndport = 22\n",
            "firewall.rule[0].dport",
            19,
            "proto",
        ),
        (
            "[[firewall.rule]]\naction = \"drop\"\nin = \"dmz\"\n",
            "firewall.rule[0].in",
            19,
            "neither an interface (a port or VLAN sub-interface) nor a zone",
        ),
        (
            "[[firewall.rule]]\naction = \"drop\"\nsrc = \"10.0.0.0/8\"\ndst = \"::/0\"\n",
            "firewall.rule[0].dst",
            20,
            "same IP version",
        ),
        (
            "[[nat.snat]]\nout = \"dmz\"\nto = \"masquerade\"\n",
            "nat.snat[0].out",
            18,
            "does not exist",
        ),
        (
            "[[nat.dnat]]\ndst = \"198.19.0.1\"\nto = \"198.18.0.5:80\"\n",
            "nat.dnat[0].to",
            19,
            "needs `dport`",
        ),
        (
            "[firewall]\nclassbench_file = \"/nonexistent/fw1\"\n",
            "firewall.classbench_file",
            18,
            "does not exist",
        ),
    ] {
        let e = errs(&format!("{GW}\n{extra}"));
        assert_eq!(e.len(), 1, "{extra}: {e:?}");
        assert_eq!(e[0].key, key, "{extra}");
        assert_eq!(e[0].line, line, "{extra}: {}", e[0]);
        assert!(e[0].msg.contains(msg), "{extra}: {}", e[0].msg);
    }
}

#[test]
fn classbench_file_rules_load() {
    let Some(f) = testdata::shared("classbench/fw1_1k") else {
        eprintln!("skipped: no shared data");
        return;
    };

    let text = format!(
        "{GW}\n[firewall]\nclassbench_file = \"{}\"\nclassbench_action = \"drop\"\n",
        f.display()
    );
    let c = parse(&text, "t.toml", None).unwrap();
    assert_eq!(c.gateway.rules.len(), 761, "every line of fw1_1k");
    assert!(c
        .gateway
        .rules
        .iter()
        .all(|r| r.action == pipeline::firewall::Action::Drop));
}

/// `sluice ctl set poll`'s knobs: the config file's keys and checks.
#[test]
fn set_poll_knobs_are_checked_as_the_file_is() {
    let p = parse_poll(0, "interrupt", &["busy_poll_us=100", "budget=32"]).unwrap();
    let Policy::Interrupt(n) = p else {
        panic!("{p:?}")
    };
    assert_eq!(n.busy_poll, std::time::Duration::from_micros(100));
    assert_eq!(n.budget, 32);
    let p = parse_poll(2, "adaptive", &["predict=0.5", "busy_poll_us=20"]).unwrap();
    let Policy::Adaptive(a) = p else {
        panic!("{p:?}")
    };
    assert_eq!(a.predict, 0.5);
    assert_eq!(a.napi.busy_poll, std::time::Duration::from_micros(20));
    assert_eq!(a.spin_polls, poll::Adaptive::default().spin_polls);
    let p = parse_poll(0, "timer", &["idle_poll=true", "hz=250"]).unwrap();
    assert!(matches!(p, Policy::Timer(t) if t.idle_poll && t.hz == 250));
    assert_eq!(parse_poll(0, "busy", &[]).unwrap(), Policy::Busy);
    let e = parse_poll(3, "busy", &["hz=100"]).unwrap_err();
    assert!(e.starts_with("worker[3].poll.hz: "), "{e}");
    assert!(parse_poll(0, "interrupt", &["budget=0"])
        .unwrap_err()
        .contains("1..=65536"));
    assert!(parse_poll(0, "interrupt", &["BUDGET=1"]).is_err());
    assert!(parse_poll(0, "interrupt", &["budget=1\nhz=5"]).is_err());
    assert!(parse_poll(0, "spin", &[])
        .unwrap_err()
        .contains("unknown variant"));
}

/// A port's `mac` other than its interface's is warned about, except with
/// TAP mirrors, where docs/router.md prescribes exactly that (following
/// the warning there broke BGP: the kernel took Sluice's frames).
#[test]
fn a_mac_of_the_ports_own_is_right_with_mirrors() {
    let text = |tap: bool| {
        format!(
            "[[port]]\nname = \"a\"\ndriver = \"afpacket\"\nmac = \"02:51:00:00:00:07\"\nipv4 = [\"198.18.0.1/24\"]\n[port.afpacket]\niface = \"lo\"\n\n[[port]]\nname = \"b\"\ndriver = \"null\"\nipv4 = [\"198.19.0.1/24\"]\n\n[control_plane]\ntap = {tap}\n\n[[worker]]\ncore = 0\nmode = \"l3fwd\"\nrx = [\"a\", \"b\"]\n"
        )
    };
    let warned = |tap: bool| {
        parse(&text(tap), "t.toml", None)
            .unwrap_or_else(|e| panic!("{e}"))
            .warnings
            .iter()
            .any(|w| w.msg.contains("differs from interface lo's own"))
    };
    assert!(warned(false));
    assert!(!warned(true));
}

#[test]
fn service_user_is_looked_up_and_named_when_missing() {
    let c = parse(
        &format!("{GOOD}\n[service]\nuser = \"nobody\"\n"),
        "t.toml",
        None,
    )
    .unwrap();
    let r = c.run_as.unwrap();
    assert_eq!((r.user.as_str(), r.uid), ("nobody", 65534));
    let e = errs(&format!("{GOOD}\n[service]\nuser = \"no-such-user-51\"\n"));
    assert_eq!(
        (e[0].key.as_str(), e[0].line),
        ("service.user", 19),
        "{}",
        e[0]
    );
    assert!(e[0].msg.contains("no user no-such-user-51"), "{}", e[0]);
    let e = errs(&format!("{GOOD}\n[service]\nuser = \"root\"\n"));
    assert!(e[0].msg.contains("is root"), "{}", e[0]);
    let e = errs(&format!(
        "{GOOD}\n[service]\nuser = \"nobody\"\ngroup = \"no-such-group-51\"\n"
    ));
    assert_eq!(e[0].key, "service.group", "{}", e[0]);
    let e = errs(&format!("{GOOD}\n[service]\ngroup = \"nogroup\"\n"));
    assert!(e[0].msg.contains("needs `user`"), "{}", e[0]);
}

/// Conntrack tables that cannot fit in the memory available are refused
/// with what they need; ones that fit are not.
#[test]
fn conntrack_tables_must_fit_in_memory() {
    let gib = 1usize << 30;
    let bytes = pipeline::conntrack::ConnTrack::bytes_for;
    let e = super::too_big(1 << 26, bytes(1 << 26, true, false), 4, 16 * gib).expect("refused");
    assert!(e.starts_with("67108864 flows a worker take "), "{e}");
    assert!(
        e.contains("for 4 gateway worker(s): more than the 16384 MiB"),
        "{e}"
    );
    assert!(super::too_big(1 << 18, bytes(1 << 18, true, false), 16, 16 * gib).is_none());
    // Window tracking off takes less, flow accounting (`[export]`) more.
    let each_on = bytes(1 << 20, true, false);
    let each_off = bytes(1 << 20, false, false);
    let exported = bytes(1 << 20, false, true);
    assert!(each_off < each_on);
    assert_eq!(exported - each_off, 64 << 20, "a cache line a flow");
    assert!(super::too_big(1 << 20, each_on, 1, each_off).is_some());
    assert!(super::too_big(1 << 20, each_off, 1, each_off).is_none());
}

/// `[export]`: its defaults, and each mistake refused with its key.
#[test]
fn export_settings_are_checked() {
    let with = |e: &str| format!("{GOOD}\n[export]\n{e}");
    let c = parse(
        &with("collectors = [\"127.0.0.1:4739\", \"[::1]:9995\"]\n"),
        "t.toml",
        None,
    )
    .unwrap();
    let e = c.export.expect("[export]");
    assert_eq!(e.collectors.len(), 2);
    assert_eq!(
        (e.active_timeout_s, e.template_interval_s, e.domain),
        (60, 60, 1)
    );
    assert_eq!((e.max_message, e.denied, e.ring), (1400, true, 4096));
    assert!(
        c.warnings.iter().any(|w| w.key == "export.collectors"),
        "no flow table: warned"
    );
    let e = errs(&with("active_timeout = 5\n"));
    assert_eq!(e[0].key, "export.collectors", "{}", e[0]);
    let e = errs(&with("collectors = [\"127.0.0.1\"]\n"));
    assert_eq!(e[0].key, "export.collectors[0]", "{}", e[0]);
    assert_eq!(e[0].line, 19, "{}", e[0]);
    let e = errs(&with("collectors = []\n"));
    assert!(e[0].msg.contains("no collector"), "{}", e[0]);
    let e = errs(&with(
        "collectors = [\"127.0.0.1:4739\"]\nmax_message = 100\n",
    ));
    assert_eq!(e[0].key, "export.max_message", "{}", e[0]);
    assert!(e[0].msg.contains("256..=65000"), "{}", e[0]);
    let e = errs(&with(
        "collectors = [\"127.0.0.1:4739\"]\nactive_timeout = 0\n",
    ));
    assert_eq!(e[0].key, "export.active_timeout", "{}", e[0]);
    let e = errs(&with("collectors = [\"127.0.0.1:4739\"]\ncolector = 1\n"));
    assert!(e[0].msg.contains("colector"), "{}", e[0]);
    // NAT events to syslog alone: no collector needed.
    let c = parse(
        &with("nat_events = true\nsyslog = \"127.0.0.1:514\"\n"),
        "t.toml",
        None,
    )
    .unwrap();
    let e = c.export.expect("[export]");
    assert!(e.collectors.is_empty() && e.nat_events);
    assert_eq!(e.syslog, Some("127.0.0.1:514".parse().unwrap()));
    let e = errs(&with("syslog = \"127.0.0.1:514\"\n"));
    assert_eq!(e[0].key, "export.syslog", "{}", e[0]);
    assert!(e[0].msg.contains("nat_events = true"), "{}", e[0]);
    let e = errs(&with("nat_events = true\nsyslog = \"localhost\"\n"));
    assert_eq!(e[0].key, "export.syslog", "{}", e[0]);
}

/// `[[nat.snat]] deterministic`: the block each host gets, and each
/// mistake refused with its key.
#[test]
fn deterministic_nat_is_checked() {
    let with = |rule: &str| format!("{GW}\n[[nat.snat]]\nout = \"wan\"\n{rule}");
    let c = parse(
        &with("src = \"100.64.0.0/22\"\ndeterministic = \"198.51.100.0/28\"\n"),
        "t.toml",
        None,
    )
    .unwrap();
    let det = c.gateway.nat.dets().next().copied().expect("a mapping");
    assert_eq!((det.ratio(), det.block), (64, 1008));
    let c = parse(
        &with("src = \"100.64.0.0/22\"\ndeterministic = \"198.51.100.0/28\"\nblock = 512\n"),
        "t.toml",
        None,
    )
    .unwrap();
    assert_eq!(c.gateway.nat.dets().next().unwrap().block, 512);
    let e = errs(&with(
        "src = \"100.64.0.0/22\"\ndeterministic = \"198.51.100.0/28\"\nblock = 2000\n",
    ));
    assert_eq!(e[0].key, "nat.snat[0].block", "{}", e[0]);
    assert!(
        e[0].msg
            .contains("each of the 1024 inside hosts 2000 ports"),
        "{}",
        e[0]
    );
    assert!(e[0].msg.contains("at most 1008"), "{}", e[0]);
    let e = errs(&with(
        "src = \"100.64.0.0/24\"\ndeterministic = \"198.51.100.0/22\"\n",
    ));
    assert_eq!(e[0].key, "nat.snat[0].deterministic", "{}", e[0]);
    assert!(e[0].msg.contains("more addresses"), "{}", e[0]);
    let e = errs(&with("deterministic = \"198.51.100.0/28\"\n"));
    assert_eq!(e[0].key, "nat.snat[0].src", "{}", e[0]);
    let e = errs(&with(
        "src = \"100.64.0.0/22\"\ndeterministic = \"198.19.0.0/28\"\n",
    ));
    assert!(
        e[0].msg
            .contains("198.19.0.1, an address of the router's own"),
        "{}",
        e[0]
    );
    let e = errs(&with(
        "src = \"100.64.0.0/22\"\ndeterministic = \"198.51.100.0/28\"\nto = \"masquerade\"\n",
    ));
    assert_eq!(e[0].key, "nat.snat[0].to", "{}", e[0]);
    let e = errs(&with("src = \"100.64.0.0/22\"\n"));
    assert!(e[0].msg.contains("`deterministic`"), "{}", e[0]);
    // 2^16 hosts on one address: not a port each.
    let e = errs(&with(
        "src = \"100.64.0.0/15\"\ndeterministic = \"198.51.100.7/32\"\n",
    ));
    assert!(
        e[0].msg.contains("cannot give each of the 131072"),
        "{}",
        e[0]
    );
}

/// `[[nat.snat]] block` with a pool: port blocks, `max_blocks` a host;
/// refused where a block cannot be cut or its ports would be shared.
#[test]
fn port_blocks_are_checked() {
    use pipeline::nat::SnatTo;
    let with = |rule: &str| format!("{GW}\n[[nat.snat]]\nout = \"wan\"\n{rule}");
    let pool = "to = [\"198.51.100.1\", \"198.51.100.2\"]\n";
    let c = parse(&with(&format!("{pool}block = 512\n")), "t.toml", None).unwrap();
    match &c.gateway.nat.snat[0].to {
        SnatTo::Blocks(b) => {
            assert_eq!((b.size, b.max), (512, super::nat::MAX_BLOCKS));
            assert_eq!(b.addrs, [0xc633_6401, 0xc633_6402]);
        }
        o => panic!("{o:?}"),
    }
    let c = parse(
        &with(&format!("{pool}block = 64\nmax_blocks = 16\n")),
        "t.toml",
        None,
    )
    .unwrap();
    assert_eq!(c.gateway.nat.block_rules()[0].max, 16);
    // Masquerade: one address, the router's.
    let e = errs(&with("to = \"masquerade\"\nblock = 64\n"));
    assert_eq!(e[0].key, "nat.snat[0].block", "{}", e[0]);
    assert!(e[0].msg.contains("pool"), "{}", e[0]);
    // Larger than the range, or none.
    for b in ["0", "70000", "64513"] {
        let e = errs(&with(&format!("{pool}block = {b}\n")));
        assert_eq!(e[0].key, "nat.snat[0].block", "{b}: {}", e[0]);
        assert!(e[0].msg.contains("1 to 64512"), "{}", e[0]);
    }
    // `max_blocks` without blocks, or out of range.
    let e = errs(&with(&format!("{pool}max_blocks = 2\n")));
    assert_eq!(e[0].key, "nat.snat[0].max_blocks", "{}", e[0]);
    let e = errs(&with(&format!("{pool}block = 64\nmax_blocks = 0\n")));
    assert_eq!(e[0].key, "nat.snat[0].max_blocks", "{}", e[0]);
    // The router's own address, or another rule's.
    let e = errs(&with("to = [\"198.19.0.1\"]\nblock = 64\n"));
    assert!(
        e[0].msg
            .contains("198.19.0.1, an address of the router's own"),
        "{}",
        e[0]
    );
    let e = errs(&with(&format!(
        "src = \"198.18.0.0/25\"\n{pool}block = 64\n\n[[nat.snat]]\nout = \"wan\"\nto = [\"198.51.100.2\"]\n"
    )));
    assert_eq!(e[0].key, "nat.snat[1].to", "{}", e[0]);
    assert!(
        e[0].msg.contains("198.51.100.2 is also nat.snat[0]'s"),
        "{}",
        e[0]
    );
    // A block larger than a worker's slice of the range.
    let two = GW
        .replace("driver = \"null\"", "driver = \"null\"\ntxq = 2")
        .replace(
            "rx = [\"lan\", \"wan\"]",
            "rx = [\"lan\"]\n\n[[worker]]\ncore = 1\nmode = \"l3fwd\"\nrx = [\"wan\"]",
        );
    let text = format!(
        "{two}\n[nat]\nports = \"1024-2047\"\n\n[[nat.snat]]\nout = \"wan\"\n{pool}block = 600\n"
    );
    let e = errs(&text);
    assert_eq!(e[0].key, "nat.snat[0].block", "{}", e[0]);
    assert!(
        e[0].msg.contains("a gateway worker's 512 ports"),
        "{}",
        e[0]
    );
}

/// A port's `mtu` against its driver's frames: refused at open with both
/// named when they cannot hold it.
#[test]
fn a_port_mtu_longer_than_its_drivers_frames_is_refused() {
    let c = parse(GOOD, "t.toml", None).unwrap();
    let p = &c.ports[0];
    assert!(p.check_frames(1500, "dpdk", 2048).is_ok());
    assert!(p.check_frames(2034, "dpdk", 2048).is_ok());
    let e = p.check_frames(9000, "dpdk", 2048).unwrap_err().to_string();
    assert!(
        e.contains("mtu of 9000 needs 9014-byte frames, and the dpdk driver carries at most 2048 bytes a frame: lower `mtu` to 2034"),
        "{e}"
    );
    assert!(e.starts_with(&format!("port {} (t.toml:", p.name)), "{e}");
}
