//! What each `sluice ctl` command answers. Run by the management thread,
//! which owns the telemetry: nothing here touches a worker except
//! `set poll` and `set runtime`, which hand a policy or a stage-clock
//! switch to the worker's channels (read every 10 ms, never per packet).

use super::Response;
use crate::config::Config;
use crate::poll::Policy;
use crate::telemetry::{Report, Snapshot, Telemetry};
use crossbeam_channel::Sender;
use pipeline::firewall::Action;
use pipeline::router::Router;
use serde_json::json;
use std::fmt::Write as _;
use std::net::IpAddr;

/// The commands, for `help` and errors.
pub const HELP: &str = "\
commands:
  stats                      totals and rates since start (or since `clear stats`)
  show ports                 ports: driver, addresses, queues, packets, drops
  show cores                 workers: mode, poll policy and state, load
  show queues                RX queues: the worker polling each, packets,
                             packets per burst, the device's misses
  show routes [ADDR|PREFIX]  route counts and static routes, or the route ADDR takes
  show neighbors             static neighbours, and the kernel's (netlink)
  show rules                 firewall rules and their hit counters
  show conntrack [--limit N] [FILTER]
                             tracked flows per worker (N each, default 20)
  show nat                   NAT rules, mappings and ports per worker
  show ha                    state sync with the HA peer: addresses, the
                             peer's last message, messages, records and
                             bytes each way, gaps, bulk syncs, refusals
  show export                IPFIX flow export: collectors, records and
                             messages sent, records lost, send errors
  nat lookup PUBLIC PORT     the inside address behind a public address and
                             port, computed by deterministic NAT (no log)
  nat lookup INSIDE          an inside host's public address and ports
  state save [FILE]          write the tracked flows to FILE (an absolute
                             path; default [ha] state_file), as a stop does,
                             for a start to read back
  show config                the running configuration
  clear stats                start `stats` and `show` counting from now
  clear conntrack [FILTER]   delete tracked flows (as conntrack -D; all
                             without a filter); FILTER: [src PREFIX]
                             [dst PREFIX] [proto tcp|udp|icmp|N] [sport N]
                             [dport N], the flows' original direction
  set poll CORE POLICY [KEY=VALUE ...]
                             switch a worker's poll policy (busy, interrupt,
                             adaptive, timer, auto), default settings but
                             the knobs given ([worker.poll]'s: busy_poll_us=100)
  set runtime on|off [CORE]  switch the l3fwd workers' stage clock (CORE's
                             only, with one): cycles per packet per stage;
                             `on` again starts its totals afresh
  show runtime               the stage clock, as VPP's `show runtime`: per
                             l3fwd worker, packets since it was switched on
                             and cycles per packet in each stage (router:
                             parse, lookup, rewrite, ipv6, slow path; gateway:
                             parse, conntrack, firewall, nat, route, rewrite)
  capture [start] --port P [--queue N] [--direction rx|tx|drop|all] [--count N]
          [--duration S] [--filter EXPR] -w FILE.pcapng
                             capture packets (tcpdump filter syntax)
  capture status | stop      the running capture
  route add|replace PREFIX via ADDR [port P] [via ADDR [port P] ...]
  route add|replace PREFIX port P | route del PREFIX
  neighbor add|replace ADDR MAC port P | neighbor del ADDR
                             change routes (several `via`: equal-cost paths;
                             replace: in one step) and neighbours until the
                             next reload or restart
  gen start RATE [size N] [duration S]
                             tester (txonly, flowgen): send RATE packets per
                             second per port (or `max`), N-byte frames, for
                             S seconds (default: until `gen stop`); starts
                             the receivers' latency anew
  gen stop                   tester: stop sending
  reload                     read the config file again and apply rules, NAT,
                             routes, neighbours and poll policies (SIGHUP too)
  debug wedge CORE SECONDS   fault injection (only with SLUICE_FAULT_INJECTION=1
                             in sluice's environment): the worker stops
                             polling for SECONDS, to test the watchdog
  help                       this list
";

/// What the commands read and change: the management thread's state.
pub struct Context<'a> {
    /// The running config.
    pub cfg: &'a Config,
    /// The telemetry (snapshots, histograms).
    pub tel: &'a mut Telemetry,
    /// Where `stats` counts from (start, or the last `clear stats`).
    pub cleared: &'a mut Snapshot,
    /// The routing tables, when a worker routes.
    pub router: Option<&'a Router>,
    /// The netlink route mirror's counters and routes, when it runs.
    pub netlink: Option<(&'a crate::netlink::Stats, &'a crate::rib::Rib)>,
    /// Hit counts of the rules with `counter = true`.
    pub rule_hits: Vec<(String, u64)>,
    /// New flows each NAT entry translated (port forwards, 1:1 mappings,
    /// source NAT rules).
    pub nat_hits: Vec<u64>,
    /// Per worker (config order): the ways to it (policies, updates for
    /// `set runtime`, flow dumps, generators).
    pub workers: &'a [crate::worker::Link],
    /// Set by `set poll`: the worker (config order) and the policy it
    /// was sent, for the running config to keep.
    pub switched: Option<(usize, Policy)>,
    /// Neighbours the workers learned.
    pub learned: &'a Learned,
    /// The HA sync thread's counters and the settings it runs with, when
    /// it runs.
    pub ha: Option<(&'a crate::ha::Stats, &'a crate::config::SyncConfig)>,
    /// The flow exporter's counters and settings, when it runs.
    pub export: Option<(&'a crate::export::Stats, &'a crate::config::ExportConfig)>,
}

/// The neighbours the workers learned from ARP and ND, as they reported
/// them to the management thread (which passes each on to the other
/// workers): port, address, MAC and when last reported. A worker reports
/// a neighbour when it learns it and each time it confirms it.
#[derive(Debug, Default)]
pub struct Learned(
    std::collections::HashMap<
        (u16, std::net::IpAddr),
        (pipeline::wire::MacAddr, std::time::Instant),
    >,
);

/// The most learned neighbours kept for `show neighbors`.
const LEARNED_SHOWN: usize = 1 << 16;

impl Learned {
    /// Takes a worker's report; entries older than `timeout` (aged out in
    /// the workers) make room when the table is full.
    pub fn note(
        &mut self,
        l: &[(u16, std::net::IpAddr, pipeline::wire::MacAddr)],
        timeout: std::time::Duration,
    ) {
        let now = std::time::Instant::now();
        // Once per report, not per entry (an ND flood fills it fast).
        if self.0.len() + l.len() > LEARNED_SHOWN {
            self.0
                .retain(|_, (_, at)| now.duration_since(*at) <= timeout);
        }
        for &(p, a, m) in l {
            if self.0.len() < LEARNED_SHOWN || self.0.contains_key(&(p, a)) {
                self.0.insert((p, a), (m, now));
            }
        }
    }

    /// The entries reported within `timeout`, by port and address, with
    /// their age.
    fn fresh(
        &self,
        timeout: std::time::Duration,
    ) -> Vec<(
        u16,
        std::net::IpAddr,
        pipeline::wire::MacAddr,
        std::time::Duration,
    )> {
        let now = std::time::Instant::now();
        let mut v: Vec<_> = self
            .0
            .iter()
            .map(|(&(p, a), &(m, at))| (p, a, m, now.duration_since(at)))
            .filter(|e| e.3 <= timeout)
            .collect();
        v.sort_by_key(|e| (e.0, e.1));
        v
    }
}

/// Answers `args`.
pub fn run(args: &[String], cx: &mut Context<'_>) -> Response {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["help"] | ["--help"] | ["-h"] => Response::ok(HELP.into(), json!({ "help": HELP })),
        ["stats"] => {
            let r = report(cx);
            let data = serde_json::to_value(&r).unwrap_or_default();
            Response::ok(r.text(), data)
        }
        ["show", "ports"] => show_ports(cx),
        ["show", "cores"] => show_cores(cx),
        ["show", "queues"] => show_queues(cx),
        ["show", "routes"] => show_routes(cx, None),
        ["show", "routes", what] => show_routes(cx, Some(what)),
        ["show", "neighbors" | "neighbours"] => show_neighbors(cx),
        ["show", "rules"] => show_rules(cx),
        ["show", "config"] => {
            let text = crate::config::describe(cx.cfg);
            Response::ok(
                text.clone(),
                json!({ "source": cx.cfg.source, "text": text }),
            )
        }
        ["clear", "stats"] => {
            *cx.cleared = cx.tel.snapshot();
            Response::ok("counters cleared\n".into(), json!({ "cleared": true }))
        }
        ["set", "poll", core, policy, knobs @ ..] => set_poll(cx, core, policy, knobs),
        ["debug", "wedge", core, secs] => wedge(cx, core, secs),
        ["set", "runtime", on @ ("on" | "off")] => set_runtime(cx, *on == "on", None),
        ["set", "runtime", on @ ("on" | "off"), core] => set_runtime(cx, *on == "on", Some(core)),
        ["show", "runtime"] => show_runtime(cx),
        ["show", "conntrack", rest @ ..] => match flow_filter(rest, true) {
            Ok((filter, limit)) => show_conntrack(cx, limit.unwrap_or(20), &filter),
            Err(e) => Response::error(e),
        },
        ["clear", "conntrack", rest @ ..] => match flow_filter(rest, false) {
            Ok((filter, _)) => clear_conntrack(cx, &filter),
            Err(e) => Response::error(e),
        },
        ["show", "nat"] => show_nat(cx),
        ["nat", "lookup", rest @ ..] => nat_lookup(cx, rest),
        ["show", "ha"] => show_ha(cx),
        ["show", "export"] => show_export(cx),
        ["state", "save"] => state_save(cx, None),
        ["state", "save", file] => state_save(cx, Some(file)),
        ["gen", "stop"] => gen(
            cx,
            crate::txgen::GenCommand {
                rate: pmd::softnic::Rate::Pps(0.0),
                size: None,
                duration: None,
                seq: 0,
            },
        ),
        ["gen", "start", rate, rest @ ..] => match gen_command(rate, rest) {
            Ok(c) => gen(cx, c),
            Err(e) => Response::error(e),
        },
        _ => Response::error(format!("unknown command `{}`\n{HELP}", words.join(" "))),
    }
}

/// `gen start RATE [size N|imix] [duration S]`, parsed.
fn gen_command(rate: &str, rest: &[&str]) -> Result<crate::txgen::GenCommand, String> {
    use pmd::softnic::Rate;
    let rate = match rate {
        "max" => Rate::Max,
        r => match r.parse::<f64>() {
            Ok(p)
                if p == 0.0
                    || (crate::config::MIN_RATE_PPS..=crate::config::MAX_RATE_PPS).contains(&p) =>
            {
                Rate::Pps(p)
            }
            _ => {
                return Err(format!(
                    "rate `{r}`: packets per second (0, or 0.001 to 1e9) or `max`"
                ))
            }
        },
    };
    let mut c = crate::txgen::GenCommand {
        rate,
        size: None,
        duration: None,
        seq: 0,
    };
    let mut it = rest.iter();
    while let Some(k) = it.next() {
        let v = it.next().ok_or_else(|| format!("`{k}` needs a value"))?;
        match *k {
            "size" => match v.parse::<usize>() {
                Ok(n) if (58..=crate::txgen::MAX_FRAME).contains(&n) => {
                    c.size = Some(crate::txgen::GenSize::One(n))
                }
                _ if *v == "imix" => c.size = Some(crate::txgen::GenSize::Imix),
                _ => {
                    return Err(format!(
                        "size `{v}`: frame bytes without FCS, 58 to {}, or imix",
                        crate::txgen::MAX_FRAME
                    ))
                }
            },
            "duration" => match v.parse::<f64>() {
                Ok(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => {
                    c.duration = Some(std::time::Duration::from_secs_f64(s))
                }
                _ => return Err(format!("duration `{v}`: seconds, above 0")),
            },
            other => return Err(format!("`{other}`: expected size or duration")),
        }
    }
    Ok(c)
}

/// Hands a command to every generating worker; a start begins the
/// receivers' latency anew. IMIX needs each generator's flows in whole
/// rounds of its 12 lengths (one length per flow).
fn gen(cx: &mut Context<'_>, c: crate::txgen::GenCommand) -> Response {
    let n = pmd::probe::IMIX.len() as u32;
    if c.size == Some(crate::txgen::GenSize::Imix) {
        if let Some(f) = cx
            .cfg
            .workers
            .iter()
            .filter_map(|w| w.gen.as_ref())
            .map(|g| g.flows)
            .find(|f| f % n != 0)
        {
            return Response::error(format!(
                "size imix: a generator has {f} flows; IMIX gives each flow one of {n} lengths in turn, so `flows` must be a multiple of {n} (set it in [worker.gen])"
            ));
        }
    }
    // Numbered, so that the answer can wait until every generator has
    // taken it (at its next tick): once `gen start` is answered, `stats`
    // shows the generators running.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let c = crate::txgen::GenCommand {
        seq: SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1,
        ..c
    };
    let mut sent = Vec::new();
    for (i, tx) in cx.workers.iter().map(|w| &w.gen).enumerate() {
        if tx.as_ref().is_some_and(|tx| tx.try_send(c).is_ok()) {
            sent.push(i);
        }
    }
    let n = sent.len();
    if n == 0 {
        return Response::error("no worker generates (mode txonly or flowgen)".to_string());
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
    let taken = |i: &usize| {
        cx.tel
            .workers
            .get(*i)
            .is_none_or(|w| w.counters.gen_applied.get() >= c.seq)
    };
    while !sent.iter().all(taken) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    let late: Vec<String> = sent
        .iter()
        .filter(|i| !taken(i))
        .filter_map(|&i| cx.tel.workers.get(i).map(|w| w.core.to_string()))
        .collect();
    let starting = c.rate != pmd::softnic::Rate::Pps(0.0);
    if starting {
        cx.tel.restart_probes();
    }
    let what = match c.rate {
        pmd::softnic::Rate::Max => "at the top rate".to_string(),
        pmd::softnic::Rate::Pps(p) if p > 0.0 => format!("at {p} pps per port"),
        _ => "stopped".to_string(),
    };
    let ports: usize = cx
        .cfg
        .workers
        .iter()
        .filter(|w| w.gen.is_some())
        .map(|w| w.tx.len())
        .sum();
    let note = if late.is_empty() {
        String::new()
    } else {
        format!(" (not yet taken by core {})", late.join(", "))
    };
    Response::ok(
        format!("{n} generating worker(s), {ports} port(s): {what}{note}\n"),
        json!({ "workers": n, "ports": ports, "running": starting, "late": late }),
    )
}

/// The report from the last clear (or start) to now.
fn report(cx: &mut Context<'_>) -> Report {
    let cur = cx.tel.snapshot();
    let mut r = cx.tel.report(cx.cleared, &cur, true);
    r.kind = "stats";
    r.rule_hits = cx.rule_hits.clone();
    r
}

fn show_ports(cx: &mut Context<'_>) -> Response {
    let r = report(cx);
    let mut text = format!(
        "{:<8} {:<8} {:<17} {:<24} {:>3} {:>3} {:>14} {:>14} {:>10}\n",
        "port", "driver", "mac", "addresses", "rxq", "txq", "rx pkts", "tx pkts", "drops"
    );
    let mut data = Vec::new();
    for (i, (p, pr)) in cx.cfg.ports.iter().zip(&r.ports).enumerate() {
        let iface = cx.cfg.router.interfaces.get(i);
        // With IPv6, the link-local address last (fe80:: and the MAC's
        // EUI-64: what hosts reach the router by, Router Advertisements
        // come from).
        let addrs: Vec<String> = iface
            .map(|i| {
                i.ipv4
                    .iter()
                    .map(|(a, l)| format!("{a}/{l}"))
                    .chain(i.ipv6.iter().map(|(a, l)| format!("{a}/{l}")))
                    .chain(
                        (!i.ipv6.is_empty())
                            .then(|| format!("{}/64", pipeline::router::link_local(i.mac))),
                    )
                    .collect()
            })
            .unwrap_or_default();
        let drops = pr.drops.rx_missed
            + pr.drops.rx_nombuf
            + pr.drops.tx_full
            + pr.drops.unroutable
            + pr.drops.stage.values().sum::<u64>();
        let _ = writeln!(
            text,
            "{:<8} {:<8} {:<17} {:<24} {:>3} {:>3} {:>14} {:>14} {:>10}",
            p.name,
            pr.driver,
            p.mac.to_string(),
            if addrs.is_empty() {
                "-".to_string()
            } else {
                addrs.join(",")
            },
            p.rxq,
            p.txq,
            pr.rx_pkts,
            pr.tx_pkts,
            drops
        );
        data.push(json!({
            "name": p.name,
            "driver": pr.driver,
            "mac": p.mac.to_string(),
            "addresses": addrs,
            "rxq": p.rxq,
            "txq": p.txq,
            "peer": cx.cfg.ports[usize::from(p.peer)].name,
            "rx_pkts": pr.rx_pkts,
            "tx_pkts": pr.tx_pkts,
            "rx_pps": pr.rx_pps,
            "tx_pps": pr.tx_pps,
            "punted": pr.punted,
            "injected": pr.injected,
            "drops": pr.drops,
        }));
    }
    Response::ok(text, json!({ "ports": data }))
}

/// Each RX queue a worker polls, as VPP's `show interface rx-placement`
/// with the counts of `ethtool -S`'s per-queue lines: where RSS loads
/// one queue more than the others, its packets, its bursts' fill and
/// its misses show it.
fn show_queues(cx: &mut Context<'_>) -> Response {
    let r = report(cx);
    let mut text = format!(
        "{:<8} {:>5} {:>5} {:>14} {:>10} {:>10} {:>10}\n",
        "port", "queue", "core", "rx pkts", "rx pps", "pkts/burst", "missed"
    );
    let mut data = Vec::new();
    for p in &r.ports {
        for q in &p.queues {
            let _ = writeln!(
                text,
                "{:<8} {:>5} {:>5} {:>14} {:>10.0} {:>10.1} {:>10}",
                p.name,
                q.queue,
                q.core,
                q.rx_pkts,
                q.rx_pps,
                q.pkts_per_burst,
                q.rx_missed
                    .map_or_else(|| "-".to_string(), |m| m.to_string())
            );
            let mut v = serde_json::to_value(q).unwrap_or_default();
            v["port"] = json!(p.name);
            data.push(v);
        }
    }
    Response::ok(text, json!({ "queues": data }))
}

fn show_cores(cx: &mut Context<'_>) -> Response {
    let r = report(cx);
    let mut text = format!(
        "{:<5} {:<8} {:<10} {:<10} {:<16} {:>6} {:>8} {:>6} {:>12}\n",
        "core", "mode", "policy", "state", "rx queues", "busy%", "cyc/pkt", "cpu%", "rx pps"
    );
    let mut data = Vec::new();
    for (w, c) in cx.cfg.workers.iter().zip(&r.cores) {
        let queues: Vec<String> =
            w.rx.iter()
                .map(|&(p, q)| format!("{}:{q}", cx.cfg.ports[usize::from(p)].name))
                .collect();
        let _ = writeln!(
            text,
            "{:<5} {:<8} {:<10} {:<10} {:<16} {:>6.1} {:>8} {:>6.1} {:>12.0}",
            c.core,
            c.mode,
            c.policy,
            c.state,
            queues.join(","),
            c.busy * 100.0,
            c.cycles_per_pkt
                .map_or_else(|| "-".to_string(), |v| format!("{v:.1}")),
            c.cpu * 100.0,
            c.rx_pps
        );
        let mut v = serde_json::to_value(c).unwrap_or_default();
        v["rx_queues"] = json!(queues);
        data.push(v);
    }
    Response::ok(text, json!({ "cores": data }))
}

fn show_routes(cx: &mut Context<'_>, what: Option<&str>) -> Response {
    let Some(router) = cx.router else {
        return Response::error("no worker routes (no l3fwd worker): there are no routes");
    };
    let rs = &cx.cfg.router;
    let port_name = |p: u16| rs.iface_name(p).unwrap_or("?").to_string();
    if let Some(w) = what {
        let addr: IpAddr = match w.parse::<IpAddr>() {
            Ok(a) => a,
            Err(_) => match pipeline::prefix::parse(w) {
                Some((a, _)) => a,
                None => {
                    return Response::error(format!(
                        "`{w}` is neither an address nor a prefix such as 198.18.0.0/24"
                    ))
                }
            },
        };
        let paths = router.lookup(addr);
        if paths.is_empty() {
            return Response::ok(
                format!("{addr}: no route\n"),
                json!({ "address": addr.to_string(), "route": null }),
            );
        }
        let text: Vec<String> = paths.iter().map(|h| describe_hop(h, &port_name)).collect();
        let data: Vec<_> = paths
            .iter()
            .map(|h| json!({ "port": port_name(h.port), "via": h.via.map(|v| v.to_string()) }))
            .collect();
        return Response::ok(
            format!("{addr}: {}\n", text.join(", ")),
            json!({
                "address": addr.to_string(),
                "route": data[0],
                "paths": data,
            }),
        );
    }
    let mut text = format!(
        "{} IPv4 routes, {} IPv6 routes ({} from the route file)\n",
        router.routes4(),
        router.routes6(),
        rs.file_routes.len()
    );
    let mut statics = Vec::new();
    for r in &rs.routes {
        let hops: Vec<String> = r
            .paths
            .iter()
            .map(|h| describe_hop(h, &port_name))
            .collect();
        // The kernel's route to the prefix (netlink) holds it over this one.
        let held = cx
            .netlink
            .and_then(|(_, rib)| rib.holder(r.addr, r.len, rs))
            .filter(|h| *h != r.source);
        let _ = writeln!(
            text,
            "  {}/{} {} ({}{})",
            r.addr,
            r.len,
            hops.join(", "),
            r.source.name(),
            held.map_or(String::new(), |h| format!(
                "; the {} route holds the prefix",
                h.name()
            ))
        );
        statics.push(json!({
            "prefix": format!("{}/{}", r.addr, r.len),
            "source": r.source.name(),
            "held_by": held.map(|h| h.name()),
            "via": r.paths[0].via.map(|v| v.to_string()),
            "port": port_name(r.paths[0].port),
            "paths": r.paths.iter().map(|h| json!({ "port": port_name(h.port), "via": h.via.map(|v| v.to_string()) })).collect::<Vec<_>>(),
        }));
    }
    let netlink = cx.netlink.map(|(st, m)| {
        let cp = cx.cfg.control_plane.as_ref();
        let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let _ = writeln!(
            text,
            "netlink: table {}, {} routes mirrored; {} route messages, {} ignored (next hop on no port's interface), {} ignored (other table or type), {} refused by the FIB, {} resyncs ({} overruns)",
            cp.map_or(0, |c| c.table),
            m.len(),
            get(&st.messages),
            get(&st.unmapped),
            get(&st.other),
            m.failed,
            get(&st.resyncs),
            get(&st.overruns),
        );
        let links: Vec<String> = m
            .links
            .iter()
            .map(|(p, up)| format!("{} {}", port_name(*p), if *up { "up" } else { "down" }))
            .collect();
        let _ = writeln!(
            text,
            "netlink: {} kernel neighbours, {} kernel addresses mirrored; links: {} ({} changes); {} interface messages",
            m.neighbors.len(),
            m.addresses.len(),
            if links.is_empty() { "none found".to_string() } else { links.join(", ") },
            m.link_changes,
            get(&st.iface_messages),
        );
        json!({
            "neighbors": m.neighbors.len(),
            "addresses": m.addresses.iter().map(|(p, a, l)| json!({ "port": port_name(*p), "addr": format!("{a}/{l}") })).collect::<Vec<_>>(),
            "links": m.links.iter().map(|(p, up)| json!({ "port": port_name(*p), "up": up })).collect::<Vec<_>>(),
            "link_changes": m.link_changes,
            "iface_messages": get(&st.iface_messages),
            "undecoded": get(&st.undecoded),
            "table": cp.map_or(0, |c| c.table),
            "mirrored": m.len(),
            "messages": get(&st.messages),
            "unmapped": get(&st.unmapped),
            "other": get(&st.other),
            "refused": m.failed,
            "resyncs": get(&st.resyncs),
            "overruns": get(&st.overruns),
            "last_resync_unix": get(&st.last_resync),
        })
    });
    Response::ok(
        text,
        json!({
            "ipv4": router.routes4(),
            "ipv6": router.routes6(),
            "from_file": rs.file_routes.len(),
            "static": statics,
            "netlink": netlink,
        }),
    )
}

/// `via 198.19.0.2 port wan` or `connected port lan`.
fn describe_hop(h: &pipeline::router::NextHop, port_name: &dyn Fn(u16) -> String) -> String {
    let via = h
        .via
        .map_or("connected".to_string(), |v| format!("via {v}"));
    format!("{via} port {}", port_name(h.port))
}

fn show_neighbors(cx: &mut Context<'_>) -> Response {
    let mut text = String::from("static neighbours:\n");
    let mut data = Vec::new();
    let rs = &cx.cfg.router;
    // The router's interface names (ports, then VLAN sub-interfaces).
    let iface = |p: u16| {
        rs.iface_name(p)
            .map_or_else(|| p.to_string(), str::to_string)
    };
    for (p, ip, mac) in &rs.neighbors {
        let port = iface(*p);
        let _ = writeln!(text, "  {ip} {mac} port {port}");
        data.push(json!({ "ip": ip.to_string(), "mac": mac.to_string(), "port": port }));
    }
    let timeout = rs.neighbor_timeout;
    let _ = writeln!(
        text,
        "learned from ARP/ND (as the workers last reported them; they age out after {} s):",
        timeout.as_secs()
    );
    let mut learned = Vec::new();
    for (p, ip, mac, age) in cx.learned.fresh(timeout) {
        let port = iface(p);
        let _ = writeln!(
            text,
            "  {ip} {mac} port {port} ({:.0} s ago)",
            age.as_secs_f64()
        );
        learned.push(json!({ "ip": ip.to_string(), "mac": mac.to_string(), "port": port, "age_s": age.as_secs_f64() }));
    }
    let mut kernel = Vec::new();
    if let Some((_, m)) = cx.netlink {
        let _ = writeln!(text, "from the kernel (netlink):");
        let mut all: Vec<_> = m.neighbors.iter().collect();
        all.sort();
        for ((p, ip), mac) in all {
            let port = iface(*p);
            let mac = pipeline::wire::MacAddr(*mac);
            let _ = writeln!(text, "  {ip} {mac} port {port}");
            kernel.push(json!({ "ip": ip.to_string(), "mac": mac.to_string(), "port": port }));
        }
    }
    Response::ok(
        text,
        json!({ "static": data, "learned": learned, "kernel": kernel }),
    )
}

fn show_rules(cx: &mut Context<'_>) -> Response {
    let g = &cx.cfg.gateway;
    if !g.enabled {
        return Response::ok(
            "no firewall configured\n".into(),
            json!({ "rules": [], "default": null }),
        );
    }
    let action = |a: &Action| match a {
        Action::Accept => "accept",
        Action::Drop => "drop",
        Action::Reject(_) => "reject",
    };
    let mut text = format!("{} rules, default {}\n", g.rules.len(), action(&g.default));
    // How the workers' memos of classifications fare (since the last
    // `clear stats`, as `stats` counts).
    let r = report(cx);
    let sum = |k: &str| -> u64 {
        r.cores
            .iter()
            .map(|c| c.events.get(k).copied().unwrap_or(0))
            .sum()
    };
    let (hits, misses) = (sum("fw_memo_hit"), sum("fw_memo_miss"));
    if hits + misses > 0 {
        let _ = writeln!(
            text,
            "rule lookups: {} ({hits} answered by the workers' memos, {:.1}%)",
            hits + misses,
            100.0 * hits as f64 / (hits + misses) as f64
        );
    }
    let mut data = Vec::new();
    for (i, r) in g.rules.iter().enumerate() {
        let hits = cx
            .rule_hits
            .iter()
            .find(|(o, _)| *o == r.origin)
            .map(|(_, n)| *n);
        let m = written(&cx.cfg.text, &cx.cfg.source, &r.origin);
        let _ = writeln!(
            text,
            "  {:>5} {:<7} {:<32} {}\n        {}",
            i,
            action(&r.action),
            r.origin,
            hits.map_or_else(|| "-".to_string(), |n| format!("{n} packets")),
            m.as_deref().unwrap_or("(as in the rule file)")
        );
        data.push(json!({
            "index": i,
            "action": action(&r.action),
            "origin": r.origin,
            "match": m,
            "hits": hits,
        }));
    }
    Response::ok(
        text,
        json!({
            "rules": data,
            "default": action(&g.default),
            "memo_hits": hits,
            "memo_misses": misses,
        }),
    )
}

/// A rule as written in the config (`text`, from `source`): the keys of
/// the `[[firewall.rule]]` table at `origin` (`FILE:LINE`, the table's
/// header), comments left out, `action` and `counter` too (said apart),
/// on one line: `proto = "tcp", dport = 22, out = "wan"`. `None` for a
/// rule from another file (ClassBench rule files).
fn written(text: &str, source: &str, origin: &str) -> Option<String> {
    let (file, line) = origin.rsplit_once(':')?;
    if file != source {
        return None;
    }
    let line: usize = line.parse().ok()?;
    let mut keys: Vec<String> = Vec::new();
    // Brackets open at the end of the last line: a value over several.
    let mut open = 0i32;
    for l in text.lines().skip(line) {
        let l = uncommented(l).trim();
        if open > 0 {
            open += depth(l);
            if let Some(last) = keys.last_mut() {
                if !l.is_empty() {
                    last.push(' ');
                    last.push_str(l);
                }
            }
            continue;
        }
        if l.starts_with('[') {
            break;
        }
        open = depth(l);
        let key = l.split('=').next().unwrap_or("").trim();
        if l.is_empty() || key == "action" || key == "counter" {
            // A multi-line value of these is skipped whole.
            if open > 0 {
                keys.push(String::new());
            }
            continue;
        }
        keys.push(l.to_string());
    }
    keys.retain(|k| !k.is_empty() && !k.starts_with("action") && !k.starts_with("counter"));
    Some(if keys.is_empty() {
        "(everything)".into()
    } else {
        keys.join(", ")
    })
}

/// Brackets `l` opens less those it closes (outside strings).
fn depth(l: &str) -> i32 {
    let mut quote = None;
    let mut d = 0;
    for c in l.chars() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '[' | '{') => d += 1,
            (None, ']' | '}') => d -= 1,
            _ => {}
        }
    }
    d
}

/// `l` without its `#` comment (a `#` inside a string is kept).
fn uncommented(l: &str) -> &str {
    let mut quote = None;
    for (i, c) in l.char_indices() {
        match (quote, c) {
            (None, '#') => return &l[..i],
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    l
}

fn set_poll(cx: &mut Context<'_>, core: &str, policy: &str, knobs: &[&str]) -> Response {
    let Ok(core) = core.parse::<usize>() else {
        return Response::error(format!("`{core}` is not a core number"));
    };
    let Some(i) = cx.cfg.workers.iter().position(|w| w.core == core) else {
        let cores: Vec<String> = cx.cfg.workers.iter().map(|w| w.core.to_string()).collect();
        return Response::error(format!(
            "no worker on core {core} (workers: {})",
            cores.join(", ")
        ));
    };
    if !Policy::NAMES.contains(&policy) {
        return Response::error(format!(
            "`{policy}` is not a poll policy ({})",
            Policy::NAMES.join(", ")
        ));
    }
    let p = match crate::config::parse_poll(i, policy, knobs) {
        Ok(p) => p,
        Err(e) => return Response::error(e),
    };
    match cx.workers.get(i).map(|w| w.policy.try_send(p.clone())) {
        Some(Ok(())) => {
            cx.switched = Some((i, p));
            Response::ok(
                format!(
                    "core {core}: switching to {policy}{}{} (within 10 ms)\n",
                    if knobs.is_empty() { "" } else { " " },
                    knobs.join(" ")
                ),
                json!({ "core": core, "policy": policy, "knobs": knobs }),
            )
        }
        _ => Response::error(format!(
            "core {core} has a switch pending or has stopped; try again"
        )),
    }
}

/// Why `set runtime` and `show runtime` are refused without an l3fwd
/// worker.
const NO_STAGE_CLOCK: &str = "no worker has a stage clock (the l3fwd workers': router or gateway)";

/// `set runtime on|off [CORE]`: switches the stage clock of every worker
/// that has one (l3fwd: the router's or the gateway's), or CORE's.
fn set_runtime(cx: &mut Context<'_>, on: bool, core: Option<&str>) -> Response {
    let core = match core.map(str::parse::<usize>) {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(_)) => {
            return Response::error(format!("`{}` is not a core number", core.unwrap_or("")))
        }
    };
    let clocked: Vec<(usize, usize)> = cx
        .tel
        .workers
        .iter()
        .enumerate()
        .filter(|(_, w)| !w.counters.stage_names.is_empty())
        .map(|(i, w)| (i, w.core))
        .collect();
    let chosen: Vec<(usize, usize)> = clocked
        .iter()
        .copied()
        .filter(|&(_, c)| core.is_none_or(|k| k == c))
        .collect();
    if clocked.is_empty() {
        return Response::error(NO_STAGE_CLOCK);
    }
    if chosen.is_empty() {
        let have: Vec<String> = clocked.iter().map(|(_, c)| c.to_string()).collect();
        return Response::error(format!(
            "no stage clock on core {} (l3fwd workers: {})",
            core.unwrap_or_default(),
            have.join(", ")
        ));
    }
    let mut cores = Vec::new();
    for &(i, c) in &chosen {
        if let Some(tx) = cx.workers.get(i).map(|w| &w.update) {
            if tx
                .send(Box::new(pipeline::fwd::Profile(
                    on.then_some(pmd::sys::rdtsc as fn() -> u64),
                )))
                .is_ok()
            {
                cores.push(c);
            }
        }
    }
    if cores.is_empty() {
        return Response::error("the workers have stopped");
    }
    let list: Vec<String> = cores.iter().map(ToString::to_string).collect();
    Response::ok(
        format!(
            "core{} {}: stage clock {} (within 10 ms){}\n",
            if cores.len() == 1 { "" } else { "s" },
            list.join(", "),
            if on { "on" } else { "off" },
            if on {
                "; `show runtime` counts from then"
            } else {
                "; `show runtime` keeps its last totals"
            }
        ),
        json!({ "on": on, "cores": cores }),
    )
}

/// `show runtime`: each stage-clocked worker's totals since its clock was
/// switched on, cycles per packet per stage.
fn show_runtime(cx: &mut Context<'_>) -> Response {
    let mut text = String::new();
    let mut data = Vec::new();
    for w in cx.tel.workers.iter() {
        let c = &w.counters;
        if c.stage_names.is_empty() {
            continue;
        }
        let on = c.stage_on.get() == 1;
        let packets = c.stage_packets.get();
        let cycles: Vec<u64> = c.stage_cycles.iter().map(|x| x.get()).collect();
        let total: u64 = cycles.iter().sum();
        let per = |cy: u64| (packets > 0).then(|| cy as f64 / packets as f64);
        let show = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
        let _ = writeln!(
            text,
            "core {}: stage clock {}, {packets} packets since it was switched on",
            w.core,
            if on { "on" } else { "off" }
        );
        let _ = writeln!(
            text,
            "  {:<10} {:>14} {:>8}",
            "stage", "cycles/packet", "share"
        );
        let mut stages = Vec::new();
        for (name, &cy) in c.stage_names.iter().zip(&cycles) {
            let share = (total > 0).then(|| format!("{:.1}%", 100.0 * cy as f64 / total as f64));
            let _ = writeln!(
                text,
                "  {:<10} {:>14} {:>8}",
                name,
                show(per(cy)),
                share.as_deref().unwrap_or("-")
            );
            stages.push(json!({
                "stage": name,
                "cycles": cy,
                "cycles_per_packet": per(cy),
            }));
        }
        let _ = writeln!(text, "  {:<10} {:>14}", "total", show(per(total)));
        data.push(json!({
            "core": w.core,
            "on": on,
            "packets": packets,
            "stages": stages,
            "cycles_per_packet": per(total),
        }));
    }
    if data.is_empty() {
        return Response::error(NO_STAGE_CLOCK);
    }
    text.push_str(
        "(the stages' cycles less the clock's reads; the worker's receive, transmit and loop are outside them: `show cores` gives its whole cycles per packet)\n",
    );
    Response::ok(text, json!({ "runtime": data }))
}

/// Each worker's gauge `name` in `cur`, with the core.
fn gauge(cx: &Context<'_>, cur: &Snapshot, name: &str) -> Vec<(usize, Option<u64>)> {
    cx.tel
        .workers
        .iter()
        .zip(cur.cores())
        .map(|(w, c)| {
            let v = w
                .counters
                .gauge_names
                .iter()
                .position(|n| *n == name)
                .and_then(|i| c.gauges.get(i).copied());
            (w.core, v)
        })
        .collect()
}

/// `[--limit N] [src PREFIX] [dst PREFIX] [proto P] [sport N] [dport N]`
/// (`--limit` only where `limit` is taken): the flows' filter and limit.
fn flow_filter(
    words: &[&str],
    limit: bool,
) -> Result<(pipeline::conntrack::Filter, Option<usize>), String> {
    const USAGE: &str =
        "filter: [src PREFIX] [dst PREFIX] [proto tcp|udp|icmp|icmpv6|N] [sport N] [dport N]";
    let prefix = |k: &str, v: &str| -> Result<(u128, u8), String> {
        // An address alone is a host.
        let p = pipeline::prefix::parse(v).or_else(|| {
            v.parse::<IpAddr>()
                .ok()
                .map(|a| (a, if a.is_ipv4() { 32 } else { 128 }))
        });
        match p {
            Some((IpAddr::V4(a), l)) => Ok(pipeline::acl::v4_prefix(a, l)),
            Some((IpAddr::V6(a), l)) => Ok((u128::from(a), l)),
            None => Err(format!("{k} `{v}`: an address or prefix")),
        }
    };
    let port = |k: &str, v: &str| v.parse::<u16>().map_err(|_| format!("{k} `{v}`: a port"));
    let (mut f, mut n) = (pipeline::conntrack::Filter::default(), None);
    let mut rest = words;
    while let [k, v, more @ ..] = rest {
        match *k {
            "--limit" if limit => {
                n = Some(
                    v.parse()
                        .map_err(|_| format!("--limit `{v}`: a number of flows"))?,
                );
            }
            "src" => f.src = Some(prefix(k, v)?),
            "dst" => f.dst = Some(prefix(k, v)?),
            "proto" => {
                f.proto = Some(match *v {
                    "tcp" => 6,
                    "udp" => 17,
                    "icmp" => 1,
                    "icmpv6" => 58,
                    n => n
                        .parse()
                        .map_err(|_| format!("proto `{n}`: tcp, udp, icmp, icmpv6 or a number"))?,
                })
            }
            "sport" => f.sport = Some(port(k, v)?),
            "dport" => f.dport = Some(port(k, v)?),
            _ => return Err(format!("`{k}`: {USAGE}")),
        }
        rest = more;
    }
    if let [k] = rest {
        return Err(format!("`{k}` needs a value; {USAGE}"));
    }
    Ok((f, n))
}

fn show_conntrack(
    cx: &mut Context<'_>,
    limit: usize,
    filter: &pipeline::conntrack::Filter,
) -> Response {
    if !cx.cfg.gateway.enabled {
        return Response::error("no conntrack: the config has no firewall or NAT");
    }
    let cur = cx.tel.snapshot();
    let entries = gauge(cx, &cur, "conntrack_entries");
    let cap = gauge(cx, &cur, "conntrack_limit");
    // Each gateway worker in turn, a page a tick (its work per tick
    // bounded: a whole table copied, let alone formatted, in one tick
    // stalled it for a tenth of a second and its rings overflowed), until
    // `limit` flows or the end of its table; formatted here. The whole
    // command is bounded in time too.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut text = String::new();
    let mut data = Vec::new();
    for (i, tx) in cx.workers.iter().map(|w| &w.dump).enumerate() {
        let Some(&(core, Some(n))) = entries.get(i) else {
            continue; // not a gateway worker
        };
        let (listed, stopped) = list_flows(tx, deadline, filter, limit);
        let cut = stopped == Some(Unanswered::Deadline);
        let flows: Vec<String> = listed.iter().map(|(f, e, c)| f.describe(*e, *c)).collect();
        let entries: Vec<_> = listed
            .iter()
            .map(|(f, e, c)| flow_json(f, *e, *c))
            .collect();
        let limit_of = cap.get(i).and_then(|c| c.1).unwrap_or(0);
        let _ = writeln!(
            text,
            "core {core}: {n} flows (limit {limit_of}), showing {}{}",
            flows.len(),
            if cut {
                " (the listing took too long; cut short)"
            } else {
                ""
            }
        );
        for f in &flows {
            let _ = writeln!(text, "  {f}");
        }
        data.push(json!({ "core": core, "entries": n, "limit": limit_of, "flows": flows, "tuples": entries, "cut_short": cut }));
    }
    Response::ok(text, json!({ "workers": data }))
}

/// `show ha`: the sync thread's counters, and per gateway worker what
/// its table sent and applied.
fn show_ha(cx: &mut Context<'_>) -> Response {
    let Some((st, sc)) = cx.ha else {
        return Response::error("no state sync: [ha] listen, peer and key_file are not set");
    };
    use std::sync::atomic::Ordering::Relaxed;
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
    let last = g(&st.last_received_ns);
    let ago = (last > 0).then(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        now.saturating_sub(last) as f64 / 1e9
    });
    let cur = cx.tel.snapshot();
    let dropped: u64 = event_sum(cx, &cur, "ha_sync_dropped");
    let applied: u64 = event_sum(cx, &cur, "ha_sync_applied");
    let refused: u64 = event_sum(cx, &cur, "ha_sync_refused");
    let (listen, peer) = (sc.listen.to_string(), sc.peer.to_string());
    let lag = st.lag();
    let lag_line = lag.map_or("no changes received yet".to_string(), |(q, n)| {
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {n} messages",
            q[0] * 1e3,
            q[1] * 1e3,
            q[2] * 1e3
        )
    });
    let text = format!(
        "sync {listen} -> peer {peer}: last message from the peer {}\n  sync lag (the peer's send to here): {lag_line}\n  sent {} messages, {} records, {} bytes ({} send errors)\n  received {} messages, {} records, {} bytes\n  refused: {} not from the peer, {} bad tag, {} malformed, {} stale, {} replayed\n  gaps {} messages; bulk syncs asked {}, served {}\n  records applied {}, refused {}, dropped (a ring full) {} sending, {} applying\n",
        ago.map_or("never".to_string(), |a| format!("{a:.1} s ago")),
        g(&st.sent_messages), g(&st.sent_records), g(&st.sent_bytes), g(&st.send_errors),
        g(&st.received_messages), g(&st.received_records), g(&st.received_bytes),
        g(&st.strangers), g(&st.bad_tag), g(&st.malformed), g(&st.stale), g(&st.replayed),
        g(&st.gaps), g(&st.bulk_requested), g(&st.bulk_served),
        applied, refused, dropped, g(&st.apply_dropped),
    );
    Response::ok(
        text,
        json!({
            "listen": listen,
            "peer": peer,
            "last_received_s_ago": ago,
            "lag_s": lag.map(|(q, n)| json!({ "p50": q[0], "p99": q[1], "max": q[2], "messages": n })),
            "sent": { "messages": g(&st.sent_messages), "records": g(&st.sent_records), "bytes": g(&st.sent_bytes), "errors": g(&st.send_errors) },
            "received": { "messages": g(&st.received_messages), "records": g(&st.received_records), "bytes": g(&st.received_bytes) },
            "refused": { "strangers": g(&st.strangers), "bad_tag": g(&st.bad_tag), "malformed": g(&st.malformed), "stale": g(&st.stale), "replayed": g(&st.replayed) },
            "gaps": g(&st.gaps),
            "bulk_requested": g(&st.bulk_requested),
            "bulk_served": g(&st.bulk_served),
            "applied": applied,
            "apply_refused": refused,
            "dropped_sending": dropped,
            "dropped_applying": g(&st.apply_dropped),
        }),
    )
}

/// `show export`: where the flow records go and what went.
fn show_export(cx: &mut Context<'_>) -> Response {
    let Some((st, ec)) = cx.export else {
        return Response::error("no flow export: the config has no [export] (or no flow table)");
    };
    use std::sync::atomic::Ordering::Relaxed;
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
    let cur = cx.tel.snapshot();
    // Lost in the rings and not yet announced by a record after them.
    let lost = event_sum(cx, &cur, "export_lost");
    let to: Vec<String> = ec.collectors.iter().map(|c| c.to_string()).collect();
    let text = format!(
        "IPFIX to {} (domain {}, active timeout {} s, templates every {} s, messages up to {} bytes{}{})\n  sent {} records in {} messages, {} bytes; {} template messages; {} send errors\n  NAT events as syslog lines: {}\n  records lost to full rings: {lost}\n",
        if to.is_empty() {
            "no collector".to_string()
        } else {
            to.join(", ")
        },
        ec.domain,
        ec.active_timeout_s,
        ec.template_interval_s,
        ec.max_message,
        if ec.denied { ", refused first packets too" } else { "" },
        if ec.nat_events { ", NAT events" } else { "" },
        g(&st.records),
        g(&st.messages),
        g(&st.bytes),
        g(&st.templates),
        g(&st.send_errors),
        ec.syslog.map_or("off".to_string(), |s| format!("{} sent to {s}", g(&st.syslog_lines))),
    );
    Response::ok(
        text,
        json!({
            "collectors": to,
            "domain": ec.domain,
            "records": g(&st.records),
            "messages": g(&st.messages),
            "bytes": g(&st.bytes),
            "templates": g(&st.templates),
            "send_errors": g(&st.send_errors),
            "syslog": ec.syslog.map(|s| s.to_string()),
            "syslog_lines": g(&st.syslog_lines),
            "lost": lost,
        }),
    )
}

/// `nat lookup PUBLIC PORT`: the inside address a deterministic mapping
/// gives that public address and port, computed (no log, no state); `nat
/// lookup INSIDE`: that host's public address and block of ports.
fn nat_lookup(cx: &mut Context<'_>, args: &[&str]) -> Response {
    const USAGE: &str = "usage: nat lookup PUBLIC-ADDRESS PORT | nat lookup INSIDE-ADDRESS";
    let nat = &cx.cfg.gateway.nat;
    if nat.dets().next().is_none() {
        return Response::error("no deterministic NAT: no [[nat.snat]] has `deterministic`");
    }
    let addr = |s: &str| s.parse::<std::net::Ipv4Addr>().map(u32::from);
    match args {
        [a, p] => {
            let (Ok(a), Ok(p)) = (addr(a), p.parse::<u16>()) else {
                return Response::error(USAGE);
            };
            let public = std::net::Ipv4Addr::from(a);
            match nat.det_inside(a, p) {
                Some(i) => {
                    let inside = std::net::Ipv4Addr::from(i);
                    Response::ok(
                        format!("{public} port {p}: {inside}\n"),
                        json!({ "public": public.to_string(), "port": p, "inside": inside.to_string() }),
                    )
                }
                None => Response::error(format!(
                    "{public} port {p} is not a deterministic mapping's (not an outside address, or a port in no block)"
                )),
            }
        }
        [a] => {
            let Ok(a) = addr(a) else {
                return Response::error(USAGE);
            };
            let inside = std::net::Ipv4Addr::from(a);
            match nat.det_outside(a) {
                Some((o, lo, hi)) => {
                    let public = std::net::Ipv4Addr::from(o);
                    Response::ok(
                        format!("{inside}: {public} ports {lo}-{hi}\n"),
                        json!({ "inside": inside.to_string(), "public": public.to_string(), "ports": [lo, hi] }),
                    )
                }
                None => Response::error(format!(
                    "{inside} is in no deterministic mapping's inside prefix"
                )),
            }
        }
        _ => Response::error(USAGE),
    }
}

/// The sum over the workers of event `name`.
fn event_sum(cx: &Context<'_>, cur: &Snapshot, name: &str) -> u64 {
    cx.tel
        .workers
        .iter()
        .zip(cur.cores())
        .filter_map(|(w, c)| {
            let i = w.counters.event_names.iter().position(|n| *n == name)?;
            c.events.get(i).copied()
        })
        .sum()
}

/// `state save [FILE]`: every gateway worker's flows, a page a tick (as
/// `show conntrack` reads them; the workers forward between the pages),
/// written to FILE as a stop writes `[ha] state_file`.
fn state_save(cx: &mut Context<'_>, file: Option<&str>) -> Response {
    if !cx.cfg.gateway.enabled {
        return Response::error("no conntrack: the config has no firewall or NAT");
    }
    let path = match (file, &cx.cfg.state_file) {
        (Some(f), _) if std::path::Path::new(f).is_absolute() => std::path::PathBuf::from(f),
        (Some(f), _) => {
            return Response::error(format!(
                "`{f}`: give an absolute path (the daemon's directory is not yours)"
            ))
        }
        (None, Some(p)) => p.clone(),
        (None, None) => return Response::error("no FILE given and no [ha] state_file set"),
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let t = std::time::Instant::now();
    let mut all = Vec::new();
    let gateways = cx.workers.iter().filter(|w| w.routes);
    for (i, link) in gateways.enumerate() {
        let filter = pipeline::conntrack::Filter::default();
        let (flows, stopped) = list_flows(&link.dump, deadline, &filter, usize::MAX);
        if let Some(why) = stopped {
            return Response::error(format!(
                "not written: gateway worker {i} {}",
                if why == Unanswered::Deadline {
                    "took too long to list its flows (10 s)"
                } else {
                    "did not answer"
                }
            ));
        }
        all.push((i as u16, flows));
    }
    match crate::state::write(&path, &all) {
        Ok(n) => Response::ok(
            format!(
                "{n} flows written to {} in {:.0} ms\n",
                path.display(),
                t.elapsed().as_secs_f64() * 1e3
            ),
            json!({ "flows": n, "file": path.display().to_string() }),
        ),
        Err(e) => Response::error(format!("not written: {e:#}")),
    }
}

/// `debug wedge CORE SECONDS`: fault injection, refused unless the
/// process was started with `SLUICE_FAULT_INJECTION=1`. The worker on
/// CORE stops polling for SECONDS (at most 60), as a worker stuck in a
/// driver would: its packets wait or are missed, and the watchdog's pings
/// stop (see [`crate::service`]).
fn wedge(cx: &mut Context<'_>, core: &str, secs: &str) -> Response {
    if std::env::var_os("SLUICE_FAULT_INJECTION").is_none_or(|v| v != "1") {
        return Response::error(
            "fault injection is off (start sluice with SLUICE_FAULT_INJECTION=1 to test the watchdog)",
        );
    }
    let Ok(core) = core.parse::<usize>() else {
        return Response::error(format!("`{core}` is not a core number"));
    };
    let Some(i) = cx.cfg.workers.iter().position(|w| w.core == core) else {
        return Response::error(format!("no worker on core {core}"));
    };
    let d = match secs.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 60.0 => std::time::Duration::from_secs_f64(s),
        _ => return Response::error(format!("`{secs}`: seconds, above 0 and at most 60")),
    };
    match cx.workers[i]
        .dump
        .try_send(crate::worker::DumpRequest::Wedge(d))
    {
        Ok(()) => Response::ok(
            format!(
                "worker on core {core} wedged for {:.1} s\n",
                d.as_secs_f64()
            ),
            json!({ "core": core, "seconds": d.as_secs_f64() }),
        ),
        Err(_) => Response::error(format!("worker on core {core} has a request pending")),
    }
}

/// A worker's flows that `filter` selects, a page a tick (asked through
/// `tx` before `deadline`), until `limit` of them or the end of its
/// table; and why the listing stopped short, if it did.
fn list_flows(
    tx: &Sender<crate::worker::DumpRequest>,
    deadline: std::time::Instant,
    filter: &pipeline::conntrack::Filter,
    limit: usize,
) -> (Vec<pipeline::conntrack::Listed>, Option<Unanswered>) {
    let mut flows = Vec::new();
    let mut from = Some(0);
    while let Some(f) = from.filter(|_| flows.len() < limit) {
        let max = limit - flows.len();
        let asked = ask(tx, deadline, |reply| crate::worker::DumpRequest::List {
            from: f,
            max,
            filter: *filter,
            reply,
        });
        match asked {
            Ok((page, next)) => {
                flows.extend(page);
                from = next;
            }
            Err(why) => return (flows, Some(why)),
        }
    }
    (flows, None)
}

/// Why a worker's page of flows did not come.
#[derive(Debug, PartialEq)]
enum Unanswered {
    /// The command's time was up before asking.
    Deadline,
    /// The worker did not take the request, or did not answer in 500 ms.
    Silent,
}

/// One page of a worker's flows (`request` made with the channel its
/// answer comes back on), asked through `tx` before `deadline`: the
/// answer and the slot to ask from next.
fn ask<T>(
    tx: &Sender<crate::worker::DumpRequest>,
    deadline: std::time::Instant,
    request: impl FnOnce(Sender<(T, Option<usize>)>) -> crate::worker::DumpRequest,
) -> Result<(T, Option<usize>), Unanswered> {
    if std::time::Instant::now() >= deadline {
        return Err(Unanswered::Deadline);
    }
    let (rtx, rrx) = crossbeam_channel::bounded(1);
    tx.try_send(request(rtx)).map_err(|_| Unanswered::Silent)?;
    rrx.recv_timeout(std::time::Duration::from_millis(500))
        .map_err(|_| Unanswered::Silent)
}

/// Flow `f` as fields (for `--json`): its original direction, state,
/// reply direction, whether it is translated, and the seconds until it
/// expires unless a packet comes (`expires_ns`).
fn flow_json(
    f: &pipeline::conntrack::Flow,
    expires_ns: u64,
    counts: Option<pipeline::conntrack::Counts>,
) -> serde_json::Value {
    let t = |t: &pipeline::conntrack::Tuple| {
        use pipeline::conntrack::address;
        json!({
            "src": address(t.src).to_string(),
            "sport": t.sport,
            "dst": address(t.dst).to_string(),
            "dport": t.dport,
        })
    };
    json!({
        "proto": f.orig.proto,
        "orig": t(&f.orig),
        "state": f.state.name(),
        "reply": t(&f.reply),
        "nat": f.nat(),
        "expires_s": expires_ns / 1_000_000_000,
        "counts": counts.map(|[(op, ob), (rp, rb)]| json!({
            "orig": { "packets": op, "bytes": ob },
            "reply": { "packets": rp, "bytes": rb },
        })),
    })
}

/// Deletes the flows `filter` selects from every gateway worker's table, a
/// page a tick (as `show conntrack` reads them), within 5 s: how many per
/// worker. The management thread waits for the pages; the workers go on
/// forwarding between them.
fn clear_conntrack(cx: &mut Context<'_>, filter: &pipeline::conntrack::Filter) -> Response {
    if !cx.cfg.gateway.enabled {
        return Response::error("no conntrack: the config has no firewall or NAT");
    }
    let cur = cx.tel.snapshot();
    let entries = gauge(cx, &cur, "conntrack_entries");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let (mut text, mut data, mut total, mut cut) = (String::new(), Vec::new(), 0, false);
    for (i, tx) in cx.workers.iter().map(|w| &w.dump).enumerate() {
        let Some(&(core, Some(_))) = entries.get(i) else {
            continue; // not a gateway worker
        };
        let (mut n, mut from) = (0, Some(0));
        while let Some(f) = from {
            let asked = ask(tx, deadline, |reply| crate::worker::DumpRequest::Delete {
                from: f,
                filter: *filter,
                reply,
            });
            let Ok((d, next)) = asked else {
                cut = true;
                break;
            };
            n += d;
            from = next;
        }
        total += n;
        let _ = writeln!(text, "  core {core}: {n} flows deleted");
        data.push(json!({ "core": core, "deleted": n }));
    }
    let head = format!(
        "{total} flows deleted{}\n",
        if cut {
            " (not all the tables were gone through in 5 s: run it again)"
        } else {
            ""
        }
    );
    Response::ok(
        head + &text,
        json!({ "deleted": total, "workers": data, "cut_short": cut }),
    )
}

fn show_nat(cx: &mut Context<'_>) -> Response {
    let g = &cx.cfg.gateway;
    if !g.enabled {
        return Response::error("no NAT: the config has no firewall or NAT");
    }
    let nat = &g.nat;
    let mut text = format!(
        "{} source NAT rules, {} port forwards, {} 1:1 mappings; ports {}-{}\n",
        nat.snat.len(),
        nat.dnat.len(),
        nat.statics.len(),
        nat.ports.lo,
        nat.ports.hi
    );
    let (entries, data_entries) = nat_entries(cx);
    text.push_str(&entries);
    // IPv6 prefix translations: stateless, no flows to count.
    let mut npt = Vec::new();
    for r in &nat.npt {
        let p = |(a, l): (u128, u8)| format!("{}/{l}", std::net::Ipv6Addr::from(a));
        let iface = cx
            .cfg
            .router
            .names
            .get(usize::from(r.iface))
            .cloned()
            .unwrap_or_default();
        let m = format!("on {iface}: {} <-> {}", p(r.inside), p(r.outside));
        let _ = writeln!(text, "        nptv6        {m}");
        npt.push(json!({ "iface": iface, "inside": p(r.inside), "outside": p(r.outside) }));
    }
    // NAT64 translators: their flows are among each core's mappings.
    let mut nat64 = Vec::new();
    for t in &nat.nat64 {
        let prefix = format!("{}/{}", std::net::Ipv6Addr::from(t.prefix.0), t.prefix.1);
        let iface = cx
            .cfg
            .router
            .names
            .get(usize::from(t.out_port))
            .cloned()
            .unwrap_or_default();
        let pool: Vec<String> = t
            .pool
            .iter()
            .map(|a| std::net::Ipv4Addr::from(*a).to_string())
            .collect();
        let from = if pool.is_empty() {
            format!("masquerade on {iface}")
        } else {
            format!("{} on {iface}", pool.join(", "))
        };
        let lowest = t.lowest_mtu6;
        let _ = writeln!(
            text,
            "        nat64        {prefix} -> {from} (IPv6 fragments up to {lowest} bytes)"
        );
        nat64.push(json!({
            "prefix": prefix,
            "out": iface,
            "pool": pool,
            "lowest_ipv6_mtu": lowest,
        }));
    }
    let cur = cx.tel.snapshot();
    let mappings = gauge(cx, &cur, "nat_mappings");
    let ports = gauge(cx, &cur, "nat_ports");
    let blocks = gauge(cx, &cur, "nat_blocks_held");
    let with_blocks = !nat.block_rules().is_empty();
    let mut data = Vec::new();
    for (((core, m), (_, p)), (_, b)) in mappings.into_iter().zip(ports).zip(blocks) {
        if let (Some(m), Some(p)) = (m, p) {
            let held = match b {
                Some(b) if with_blocks => format!(", {b} port blocks held"),
                _ => String::new(),
            };
            let _ = writeln!(
                text,
                "  core {core}: {m} flows translated, {p} ports in its share{held}"
            );
            data.push(json!({ "core": core, "mappings": m, "ports": p, "blocks_held": b }));
        }
    }
    Response::ok(
        text,
        json!({
            "snat": nat.snat.len(),
            "dnat": nat.dnat.len(),
            "static": nat.statics.len(),
            "ports": [nat.ports.lo, nat.ports.hi],
            "entries": data_entries,
            "nptv6": npt,
            "nat64": nat64,
            "workers": data,
        }),
    )
}

/// The NAT's entries as `show nat` lists them, each with the new flows it
/// translated (since it was loaded: a reload counts afresh): port
/// forwards, 1:1 mappings (flows either way), source NAT rules, in the
/// order they are tried.
fn nat_entries(cx: &Context<'_>) -> (String, Vec<serde_json::Value>) {
    use pipeline::nat::SnatTo;
    let nat = &cx.cfg.gateway.nat;
    let name = |p: u16| {
        cx.cfg
            .router
            .names
            .get(usize::from(p))
            .cloned()
            .unwrap_or_else(|| format!("port {p}"))
    };
    let ip = |a: u32| std::net::Ipv4Addr::from(a).to_string();
    let proto = |p: u8| match p {
        1 => "icmp".to_string(),
        6 => "tcp".to_string(),
        17 => "udp".to_string(),
        n => format!("proto {n}"),
    };
    let mut lines: Vec<(&str, String, serde_json::Value)> = Vec::new();
    for d in &nat.dnat {
        let mut m = String::new();
        if let Some(p) = d.in_port {
            let _ = write!(m, "in {} ", name(p));
        }
        if let Some(p) = d.proto {
            let _ = write!(m, "{} ", proto(p));
        }
        let port = |p: Option<u16>| p.map_or(String::new(), |p| format!(":{p}"));
        let _ = write!(
            m,
            "{}{} -> {}{}",
            ip(d.dst),
            port(d.dport),
            ip(d.to),
            port(d.to_port)
        );
        lines.push((
            "port forward",
            m.clone(),
            json!({ "kind": "dnat", "match": m }),
        ));
    }
    for st in &nat.statics {
        let m = format!("{} <-> {}", ip(st.inside), ip(st.outside));
        lines.push(("1:1", m.clone(), json!({ "kind": "static", "match": m })));
    }
    for r in &nat.snat {
        let to = match &r.to {
            SnatTo::Masquerade => "masquerade".to_string(),
            SnatTo::Pool(p) => {
                let all: Vec<String> = p.iter().map(|&a| ip(a)).collect();
                format!("pool {}", all.join(", "))
            }
            SnatTo::Blocks(b) => {
                let all: Vec<String> = b.addrs.iter().map(|&a| ip(a)).collect();
                format!(
                    "pool {} in blocks of {} ports ({} at most a host)",
                    all.join(", "),
                    b.size,
                    b.max
                )
            }
            SnatTo::Deterministic(d) => format!(
                "deterministic {}/{} ({} hosts an address, {} ports each)",
                ip(d.outside.0),
                d.outside.1,
                d.ratio(),
                d.block
            ),
        };
        let ct = match r.dnatted {
            Some(true) => " ct_status dnat",
            Some(false) => " ct_status !dnat",
            None => "",
        };
        let m = format!(
            "out {} from {}/{}{ct} to {to}",
            name(r.out_port),
            ip(r.src.0),
            r.src.1
        );
        lines.push(("source", m.clone(), json!({ "kind": "snat", "match": m })));
    }
    let mut text = String::new();
    let mut data = Vec::new();
    for (i, (kind, m, mut j)) in lines.into_iter().enumerate() {
        let hits = cx.nat_hits.get(i).copied().unwrap_or(0);
        let _ = writeln!(text, "  {:>5} {kind:<12} {m:<48} {hits} flows", i + 1);
        j["index"] = json!(i + 1);
        j["flows"] = json!(hits);
        data.push(j);
    }
    (text, data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txgen::GenSize;

    /// `show rules` prints a rule's keys as written, comments, `action`
    /// and `counter` left out; a rule from another file has none here.
    #[test]
    fn a_rule_is_shown_as_written() {
        let text = "[run]\nduration = 1\n\n[[firewall.rule]]\naction = \"accept\" # ok\nproto = \"tcp\"\ndport = 22   # ssh\ncomment = \"a # in a string\"\ncounter = true\n\n[[firewall.rule]]\naction = \"drop\"\n";
        assert_eq!(
            written(text, "t.toml", "t.toml:4").as_deref(),
            Some("proto = \"tcp\", dport = 22, comment = \"a # in a string\"")
        );
        assert_eq!(
            written(text, "t.toml", "t.toml:11").as_deref(),
            Some("(everything)")
        );
        assert_eq!(written(text, "t.toml", "rules.txt:3"), None);
        let text = "[[firewall.rule]]\naction = \"accept\"\nsrc = [\n  \"10.0.0.0/8\", # inside\n  \"192.168.0.0/16\",\n]\ndport = 80\n";
        assert_eq!(
            written(text, "t.toml", "t.toml:1").as_deref(),
            Some("src = [ \"10.0.0.0/8\", \"192.168.0.0/16\", ], dport = 80")
        );
    }

    /// `gen start` takes a size in bytes or `imix`, and refuses others.
    #[test]
    fn gen_start_sizes() {
        let c = gen_command("1000", &["size", "imix", "duration", "2"]).unwrap();
        assert_eq!(c.size, Some(GenSize::Imix));
        assert_eq!(c.duration, Some(std::time::Duration::from_secs(2)));
        let c = gen_command("max", &["size", "508"]).unwrap();
        assert_eq!(c.size, Some(GenSize::One(508)));
        for bad in ["57", "trimodal", "-1"] {
            let e = gen_command("1000", &["size", bad]).unwrap_err();
            assert!(e.contains("or imix"), "{bad}: {e}");
        }
    }
}
