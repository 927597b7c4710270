//! Scale-out behind BGP ECMP: two Sluice NAT gateways active at once
//! (`configs/ecmp-gateway.toml` and its BIRD, `configs/bird-ecmp-gateway.conf`;
//! the second with its own addresses and pool) between a LAN bridge and
//! an upstream bridge. Namespaces: `c` (the LAN's router, its BIRD
//! learning a default route from each gateway and merging them into one
//! multipath route, L4 hashing; the clients run there too), `g1` and `g2`
//! (Sluice on AF_PACKET ports with TAP mirrors and the netlink mirror,
//! BIRD on the TAPs), `s` (the upstream router and the server: its BIRD
//! announces the default route and learns each gateway's pool and the
//! LAN). The flows spread over both gateways, each translates to its own
//! pool, and the replies reach the gateway that owns the pool. A drained
//! gateway (its BGP sessions disabled) and a killed one (SIGKILL: its
//! peers' hold timers) leave the ECMP route: the other gateway's
//! connections go on untouched, new ones all take it, and the withdrawn
//! gateway's connections are lost (no state sync between ECMP members:
//! the design's limit, docs/operations.md). Needs root, `ip`, `python3`
//! and BIRD 2 (which `scripts/test.sh` installs); skipped without them
//! unless `CI` is set. The namespaces, the Sluices and the BIRDs end with
//! the test, passed or failed.

mod common;

use common::{as_root, bird, birdc, ctl_json, have, until, until_routes, Killed, Nets};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

/// The clients: commands on standard input, one JSON line each on
/// standard output. `open G N`: N connections to the server (group G),
/// a line and its answer each; `round G SECS`: a line on each connection
/// of G, answers awaited SECS seconds; `close G`. Each prints, per
/// connection, the public address and port the server answered with, or
/// null (refused, reset, closed or unanswered). A connection that fails
/// to open (an ICMP error aborts a SYN: a route or neighbour changing as
/// the LAN's router converges) is tried once more after a second, its
/// error written to standard error (the test's output).
const CLIENTS: &str = r#"
import json, selectors, socket, sys, time
sel = selectors.DefaultSelector()
groups = {}
def exchange(conns, line, timeout):
    want = {}
    for c in conns:
        if c is None:
            continue
        try:
            c["s"].send(line); c["buf"] = b""
            want[c["s"]] = c
            sel.register(c["s"], selectors.EVENT_READ, c)
        except OSError:
            pass
    end = time.time() + timeout
    got = {}
    while want and time.time() < end:
        for k, _ in sel.select(0.1):
            c = k.data; s = k.fileobj
            try:
                d = s.recv(4096)
            except OSError:
                d = b""
            if not d:
                sel.unregister(s); want.pop(s, None)
                continue
            c["buf"] += d
            if b"\n" in c["buf"]:
                got[id(c)] = c["buf"].split()[0].decode()
                sel.unregister(s); want.pop(s, None)
    for s in list(want):
        sel.unregister(s)
    return [None if c is None else got.get(id(c)) for c in conns]
for cmd in sys.stdin:
    w = cmd.split()
    if w[0] == "open":
        conns = []
        for i in range(int(w[2])):
            c = None
            for attempt in (1, 2):
                s = socket.socket()
                s.settimeout(10)
                try:
                    s.connect(("198.19.0.10", 9000))
                    s.setblocking(False)
                    c = {"s": s, "buf": b""}
                    break
                except OSError as e:
                    s.close()
                    sys.stderr.write("clients: %s %d, try %d: %s\n" % (w[1], i, attempt, e))
                    time.sleep(1)
            conns.append(c)
        groups[w[1]] = conns
        print(json.dumps(exchange(conns, b"hello\n", 10)), flush=True)
    elif w[0] == "round":
        print(json.dumps(exchange(groups[w[1]], b"again\n", float(w[2]))), flush=True)
    elif w[0] == "close":
        for c in groups.pop(w[1]):
            if c is not None:
                c["s"].close()
        print("[]", flush=True)
"#;

/// The LAN's router: a session with each gateway, their default routes
/// merged into one multipath route in the kernel.
const BIRD_LAN: &str = r#"
router id 198.18.0.10;
protocol device { scan time 1; }
protocol kernel {
  ipv4 { export where source = RTS_BGP; };
  merge paths yes;
  scan time 1;
}
protocol bgp g1 {
  local 198.18.0.10 as 65100;
  neighbor 198.18.0.2 as 65001;
  hold time 6;
  keepalive time 2;
  connect retry time 1;
  error wait time 1, 5;
  ipv4 { import all; export none; };
}
protocol bgp g2 {
  local 198.18.0.10 as 65100;
  neighbor 198.18.0.3 as 65002;
  hold time 6;
  keepalive time 2;
  connect retry time 1;
  error wait time 1, 5;
  ipv4 { import all; export none; };
}
"#;

/// The upstream router: announces the default route, learns each
/// gateway's pool and the LAN (both gateways': a multipath route).
const BIRD_UP: &str = r#"
router id 198.19.0.10;
protocol device { scan time 1; }
protocol static default_route { ipv4; route 0.0.0.0/0 via 198.19.0.10; }
protocol kernel {
  ipv4 { export where source = RTS_BGP; };
  merge paths yes;
  scan time 1;
}
protocol bgp g1 {
  local 198.19.0.10 as 65000;
  neighbor 198.19.0.2 as 65001;
  hold time 6;
  keepalive time 2;
  connect retry time 1;
  error wait time 1, 5;
  ipv4 { import all; export where proto = "default_route"; next hop self; };
}
protocol bgp g2 {
  local 198.19.0.10 as 65000;
  neighbor 198.19.0.3 as 65002;
  hold time 6;
  keepalive time 2;
  connect retry time 1;
  error wait time 1, 5;
  ipv4 { import all; export where proto = "default_route"; next hop self; };
}
"#;

/// Gateway `i` (1 or 2) in namespace `ns`: the shipped config and BIRD's,
/// with gateway 2's addresses, MACs, AS and pool; its TAPs' addresses.
fn start_gateway(n: &Nets, ns: &str, i: u8, dir: &Path) -> (Killed, Killed) {
    let shipped = |f: &str| {
        let t = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../configs")
                .join(f),
        )
        .unwrap();
        if i == 1 {
            return t;
        }
        t.replace("198.18.0.2", "198.18.0.3")
            .replace("198.19.0.2", "198.19.0.3")
            .replace("198.19.101.", "198.19.102.")
            .replace("02:5e:00:00:01:", "02:5e:00:00:02:")
            .replace("as 65001", "as 65002")
    };
    let sock = dir.join(format!("g{i}.sock"));
    let cfg = dir.join(format!("g{i}.toml"));
    std::fs::write(
        &cfg,
        shipped("ecmp-gateway.toml")
            .replace("/run/sluice/sluice.sock", &sock.display().to_string()),
    )
    .unwrap();
    let sluice = common::sluice_in(ns, &cfg, &sock);
    n.sh(
        ns,
        &format!("ip addr add 198.18.0.{0}/24 dev sl-inside && ip addr add 198.19.0.{0}/24 dev sl-outside", i + 1),
    );
    let bird = bird(
        ns,
        dir,
        &format!("g{i}"),
        &shipped("bird-ecmp-gateway.conf"),
    );
    (sluice, bird)
}

/// The clients' process in namespace `c`.
struct Clients {
    _child: Killed,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

impl Clients {
    fn ask(&mut self, cmd: &str) -> Vec<Option<String>> {
        writeln!(self.to, "{cmd}").unwrap();
        self.to.flush().unwrap();
        let mut line = String::new();
        self.from.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{cmd}: {e}: {line:?}"))
    }
}

/// Which gateway's pool a public address is in (1 or 2; 0: neither).
fn pool_of(public: &str) -> u8 {
    if public.starts_with("198.19.101.") {
        1
    } else if public.starts_with("198.19.102.") {
        2
    } else {
        0
    }
}

/// The next hops of the default route in namespace `ns`.
fn default_via(n: &Nets, ns: &str) -> Vec<String> {
    let r = n.sh(ns, "ip -4 route show default");
    let w: Vec<&str> = r.split_whitespace().collect();
    w.windows(2)
        .filter(|p| p[0] == "via")
        .map(|p| p[1].to_string())
        .collect()
}

#[test]
fn ecmp_gateways_share_the_flows_and_a_withdrawn_one_takes_only_its_own() {
    if !as_root() {
        return;
    }
    if !have("ip") || !have("bird") || !have("birdc") || !have("python3") {
        return;
    }
    let n = Nets::new("sl-ecmp", &["c", "g1", "g2", "s"]);
    let (c, g1, g2, s) = (&n.0[0], &n.0[1], &n.0[2], &n.0[3]);
    n.sh(
        c,
        "ip link set lo up && ip link add br0 type bridge && ip link set br0 up \
         && ip addr add 198.18.0.10/24 dev br0 \
         && sysctl -qw net.ipv4.fib_multipath_hash_policy=1",
    );
    n.sh(
        s,
        "ip link set lo up && ip link add br1 type bridge && ip link set br1 up \
         && ip addr add 198.19.0.10/24 dev br1",
    );
    for (i, ns) in [(1, g1), (2, g2)] {
        n.veth("g0", ns, &format!("c{i}"), c);
        n.veth("g1", ns, &format!("s{i}"), s);
        n.sh(c, &format!("ip link set c{i} master br0 up"));
        n.sh(s, &format!("ip link set s{i} master br1 up"));
        n.sh(
            ns,
            "ip link set lo up && ip link set g0 up && ip link set g1 up \
             && sysctl -qw net.ipv4.conf.g0.arp_ignore=8 net.ipv4.conf.g1.arp_ignore=8",
        );
    }
    let dir = common::fresh_dir("ecmp");
    let (sock1, sock2) = (dir.join("g1.sock"), dir.join("g2.sock"));
    let _bird_s = bird(s, &dir, "up", BIRD_UP);
    let _bird_c = bird(c, &dir, "lan", BIRD_LAN);
    let (_sluice1, _bird1) = start_gateway(&n, g1, 1, &dir);
    let (sluice2, _bird2) = start_gateway(&n, g2, 2, &dir);
    std::fs::write(
        dir.join("server.py"),
        common::peer_echo_server("198.19.0.10"),
    )
    .unwrap();
    let _server = common::python_in(s, &dir.join("server.py"));

    // The sessions come up through the punt path: the LAN's router has a
    // default route over both gateways, upstream a route to each pool,
    // each gateway's FIB the default route from upstream.
    let both = || {
        let mut v = default_via(&n, c);
        v.sort();
        v == ["198.18.0.2", "198.18.0.3"]
    };
    until(
        &format!(
            "the LAN's multipath default route: {}",
            birdc(c, &dir, "lan", "show protocols")
        ),
        60,
        both,
    );
    let up_routes = n.sh(s, "ip -4 route show proto bird");
    assert!(
        up_routes.contains("198.19.101.0/29 via 198.19.0.2")
            && up_routes.contains("198.19.102.0/29 via 198.19.0.3"),
        "upstream: {up_routes}"
    );
    for sock in [&sock1, &sock2] {
        until_routes(sock, &["192.0.2.1"], 20, |r| {
            r["paths"][0]["via"] == "198.19.0.10"
        });
    }
    let lan = n.sh(s, "ip -4 route show 198.18.0.0/24");
    assert!(
        lan.contains("nexthop via 198.19.0.2") && lan.contains("nexthop via 198.19.0.3"),
        "upstream's route to the LAN over both gateways: {lan}"
    );

    std::fs::write(dir.join("clients.py"), CLIENTS).unwrap();
    let mut child = Killed(
        Command::new("ip")
            .args(["netns", "exec", c, "python3"])
            .arg(dir.join("clients.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let (to, from) = (
        child.0.stdin.take().unwrap(),
        child.0.stdout.take().unwrap(),
    );
    let mut cl = Clients {
        _child: child,
        to,
        from: BufReader::new(from),
    };

    // 200 connections: every one answered, spread over both gateways
    // (fewer than 60 of 200 on one has odds below 1e-8), each gateway
    // tracking exactly those the server saw from its pool.
    let a = cl.ask("open a 200");
    let pools: Vec<u8> = a.iter().map(|p| p.as_deref().map_or(0, pool_of)).collect();
    let on = |g: u8| pools.iter().filter(|&&p| p == g).count();
    assert_eq!(
        on(1) + on(2),
        200,
        "every connection answered from a pool: {a:?}"
    );
    assert!(
        on(1) >= 60 && on(2) >= 60,
        "spread: {} and {}",
        on(1),
        on(2)
    );
    assert_eq!(common::conns_to_9000(&sock1), on(1), "gateway 1's flows");
    assert_eq!(common::conns_to_9000(&sock2), on(2), "gateway 2's flows");
    let spread = (on(1), on(2));

    // Gateway 2 drained (its sessions disabled, as before maintenance):
    // its routes leave both routers at once. Gateway 1's connections go on
    // from the same public address and port; gateway 2's are lost (their
    // packets now reach gateway 1, which does not know them, and
    // upstream has no route back to gateway 2's pool); new connections
    // all take gateway 1.
    let t = Instant::now();
    let _ = birdc(g2, &dir, "g2", "disable lan");
    let _ = birdc(g2, &dir, "g2", "disable up");
    until("gateway 2 leaves the LAN's route", 20, || {
        default_via(&n, c) == ["198.18.0.2"]
    });
    until("gateway 2's pool leaves upstream", 20, || {
        !n.sh(s, "ip -4 route show proto bird")
            .contains("198.19.102.0/29")
    });
    let drained = t.elapsed();
    // Gateway 1's invalid segments (not a flow it knows, not a SYN).
    let invalid = || {
        let st = ctl_json(&sock1, &["stats"]);
        assert_eq!(
            st["balance"]["balanced"], true,
            "every packet accounted for: {st}"
        );
        st["cores"][0]["events"]["ct_invalid"].as_u64().unwrap_or(0)
    };
    let invalid_before = invalid();
    let r = cl.ask("round a 3");
    for (i, (first, now)) in a.iter().zip(&r).enumerate() {
        match pools[i] {
            1 => assert_eq!(now, first, "connection {i} through gateway 1"),
            _ => assert_eq!(now, &None, "connection {i} through the drained gateway 2"),
        }
    }
    let b = cl.ask("open b 50");
    assert!(
        b.iter().all(|p| p.as_deref().map(pool_of) == Some(1)),
        "new connections during the drain: {b:?}"
    );
    // Each of gateway 2's connections sent its line (and retransmitted
    // it) to gateway 1, which dropped it as invalid, counted.
    let invalid_in_round = invalid() - invalid_before;
    assert!(
        invalid_in_round >= spread.1 as u64,
        "gateway 1 counted {invalid_in_round} invalid segments for {} connections it did not know",
        spread.1
    );
    let _ = cl.ask("close a");

    // Gateway 2 back: the LAN's route over both again, new connections
    // spread. Connections opened during the drain that the LAN's router
    // now hashes to gateway 2 are lost (ECMP's rehash: the kernel's
    // hash-threshold multipath); none changes its public address.
    let _ = birdc(g2, &dir, "g2", "enable up");
    let _ = birdc(g2, &dir, "g2", "enable lan");
    until("gateway 2 back in the LAN's route", 60, both);
    until("gateway 2's pool back upstream", 20, || {
        n.sh(s, "ip -4 route show proto bird")
            .contains("198.19.102.0/29")
    });
    // Its own default route back in its FIB (BIRD announces it to the
    // LAN's router as it learns it, before the netlink mirror has it).
    until_routes(&sock2, &["192.0.2.1"], 20, |r| {
        r["paths"][0]["via"] == "198.19.0.10"
    });
    let rb = cl.ask("round b 3");
    let moved = rb.iter().filter(|p| p.is_none()).count();
    for (first, now) in b.iter().zip(&rb) {
        assert!(
            now.is_none() || now == first,
            "{first:?} answered as {now:?}"
        );
    }
    let _ = cl.ask("close b");
    let d = cl.ask("open d 100");
    let dp: Vec<u8> = d.iter().map(|p| p.as_deref().map_or(0, pool_of)).collect();
    let don = |g: u8| dp.iter().filter(|&&p| p == g).count();
    assert_eq!(
        don(1) + don(2),
        100,
        "after the return: {d:?}\ngateway 1: {}\ngateway 2: {}",
        ctl_json(&sock1, &["stats"]),
        ctl_json(&sock2, &["stats"])
    );
    assert!(
        don(1) >= 20 && don(2) >= 20,
        "spread after the return: {} and {}",
        don(1),
        don(2)
    );

    // Gateway 2 killed: its peers' hold timers withdraw it. Gateway 1's
    // connections go on; gateway 2's are lost.
    let t = Instant::now();
    drop(sluice2);
    until("gateway 2's death noticed by the LAN's router", 20, || {
        default_via(&n, c) == ["198.18.0.2"]
    });
    let died = t.elapsed();
    until("gateway 2's pool gone upstream", 20, || {
        !n.sh(s, "ip -4 route show proto bird")
            .contains("198.19.102.0/29")
    });
    let rd = cl.ask("round d 3");
    for (i, (first, now)) in d.iter().zip(&rd).enumerate() {
        match dp[i] {
            1 => assert_eq!(
                now, first,
                "connection {i} through gateway 1 after the kill"
            ),
            _ => assert_eq!(now, &None, "connection {i} through the dead gateway 2"),
        }
    }
    eprintln!(
        "ecmp: 200 connections spread {} / {}; drained: out of both routes in {:.2} s, {} of 200 kept \
         (gateway 1's), {} lost (gateway 2's: {} segments dropped by gateway 1 as invalid); returned: {} of 50 opened during the drain lost to the \
         rehash; killed: out of the LAN's route in {:.2} s, {} of 100 kept, {} lost",
        spread.0,
        spread.1,
        drained.as_secs_f64(),
        spread.0,
        spread.1,
        invalid_in_round,
        moved,
        died.as_secs_f64(),
        don(1),
        don(2)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
