//! The TOML configuration, in two stages: the raw schema (`schema.rs`:
//! serde structs with `deny_unknown_fields` and typed fields), then
//! `validate` producing the checked [`Config`] (`typed.rs`) that rejects
//! what cannot work, section by section: `ports.rs`, `policy.rs` (poll
//! modes), `router.rs` (addresses, routes, neighbours, the route file),
//! `firewall.rs` and `nat.rs`; the files a config names are checked in
//! `files.rs`. Every error ([`ConfigError`], `error.rs`) names the file,
//! line, column and key (`source.rs` locates them); `check` and `run` go
//! through the same code.

mod advert;
mod control_plane;
mod describe;
mod error;
mod export;
mod files;
mod firewall;
mod nat;
mod policy;
mod ports;
pub mod router;
mod schema;
mod source;
mod typed;
mod workers;

pub use describe::describe;
pub use error::{shown, ConfigError, ConfigErrors};
pub use export::ExportConfig;
pub use files::MAX_CONFIG_BYTES;
pub use schema::{PortRange, Prefix, QueueRef, Str};
pub use typed::{
    burst, duration, stats_period, Config, ControlPlane, FwdMode, PortConfig, PortKind, RunAs,
    RunConfig, WorkerConfig, MAX_DURATION_S, MAX_RATE_PPS, MIN_RATE_PPS,
};

use files::regular_file;
use policy::check_poll;
pub use policy::parse_poll;
use schema::*;
use source::*;

pub use typed::{GatewaySetup, PathRefused, Route, RouteSource, RouterSetup, SyncConfig};

use crate::poll::{self, Policy};
use pipeline::wire::MacAddr;
use pmd::softnic::{Coalesce, GenConfig, Pattern, Rate, Span, Walk};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// The embedded default configuration (`sluice run` with no file).
pub const QUICKSTART: &str = include_str!("../../../configs/quickstart.toml");
/// Name the embedded default is reported under.
pub const QUICKSTART_NAME: &str = "<embedded>/configs/quickstart.toml";

/// Loads and validates a file.
pub fn load_file(path: &Path) -> Result<Config, ConfigErrors> {
    let file = path.display().to_string();
    let whole = |msg: String| {
        ConfigErrors(vec![ConfigError {
            file: file.clone(),
            line: 0,
            col: 0,
            key: String::new(),
            msg,
        }])
    };
    let text = files::read_regular(path, "config", MAX_CONFIG_BYTES).map_err(|e| {
        // The file is named already: keep what follows its name.
        whole(
            if let Some(r) = e.strip_prefix(&format!("cannot read config {file}: ")) {
                format!("cannot read it: {r}")
            } else if e.ends_with("is not a text file (UTF-8)") {
                "not a text file (a config is TOML, UTF-8)".to_string()
            } else {
                e.strip_prefix(&format!("config {file} "))
                    .map_or(e.clone(), str::to_string)
            },
        )
    })?;
    parse(&text, &file, path.parent())
}

/// Parses and validates `text`; `file` names it in errors, `base` resolves
/// relative paths in it (pcap files). Also checks the host: that
/// AF_PACKET/AF_XDP interfaces exist (their MACs are the ports' default)
/// and that each port's driver is compiled in.
pub fn parse(text: &str, file: &str, base: Option<&Path>) -> Result<Config, ConfigErrors> {
    parse_with(text, file, base, true)
}

/// [`parse`], with the host checks only when `host` (tests of configs
/// written for another machine).
pub fn parse_with(
    text: &str,
    file: &str,
    base: Option<&Path>,
    host: bool,
) -> Result<Config, ConfigErrors> {
    parse_inner(text, file, base, host, None)
}

/// What `sluice ctl` edits deleted from the config file they are made on:
/// the file's `[[route]]` tables for `routes` and `[[neighbor]]` tables
/// for `neighbors` are read as if not written. Only the file's (the text
/// before byte `file_end`): a table an edit added after a deletion stands.
#[derive(Debug, Clone, Default)]
pub struct Dropped {
    /// Where the file's text ends and the edits' tables begin.
    pub file_end: usize,
    /// Prefixes whose file routes were deleted.
    pub routes: Vec<(std::net::IpAddr, u8)>,
    /// Addresses whose file neighbours were deleted.
    pub neighbors: Vec<std::net::IpAddr>,
}

impl Dropped {
    /// Whether the table at byte `at` that routes `p` is a deleted one.
    pub(super) fn route(&self, at: usize, p: (std::net::IpAddr, u8)) -> bool {
        at < self.file_end && self.routes.contains(&p)
    }

    /// Whether the table at byte `at` for neighbour `a` is a deleted one.
    pub(super) fn neighbor(&self, at: usize, a: std::net::IpAddr) -> bool {
        at < self.file_end && self.neighbors.contains(&a)
    }
}

/// [`parse`] of `text`, an edit of the running config `cur` (the file's
/// text with tables added, less what `dropped` deleted): the route file
/// and ClassBench rule file that `cur` read are taken from `cur`, not read
/// again, so an edit neither pays for reading them (seconds for a full
/// table) nor picks up what was written to them since (that takes a
/// reload).
pub fn parse_edit(text: &str, cur: &Config, dropped: &Dropped) -> Result<Config, ConfigErrors> {
    parse_inner(
        text,
        &cur.source,
        cur.base.as_deref(),
        true,
        Some((cur, dropped)),
    )
}

fn parse_inner(
    text: &str,
    file: &str,
    base: Option<&Path>,
    host: bool,
    edit: Option<(&Config, &Dropped)>,
) -> Result<Config, ConfigErrors> {
    // A UTF-8 byte order mark (editors on Windows write one) is not TOML.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let raw: RawFile = toml::from_str(text).map_err(|e| toml_error(&e, text, file))?;
    let mut cx = Ctx::new(file, text);
    cx.host = host;
    cx.reuse = edit.map(|e| e.0);
    cx.dropped = edit.map(|e| e.1);
    let mut cfg = validate(&mut cx, raw, base);
    cfg.warnings = std::mem::take(&mut cx.warnings);
    cfg.text = text.into();
    cfg.base = base.map(Path::to_path_buf);
    if cx.errs.is_empty() {
        Ok(cfg)
    } else {
        Err(ConfigErrors(cx.errs))
    }
}

/// A TOML syntax or type error in `text` (named `file`), located.
fn toml_error(e: &toml::de::Error, text: &str, file: &str) -> ConfigErrors {
    let (line, col) = e.span().map_or((0, 0), |s| line_col(text, s.start));
    let key = e
        .span()
        .map(|_| key_on_line(text, line))
        .unwrap_or_default();
    let mut msg = e.message().trim().to_string();
    // `[port]` where `[[port]]` was meant: say so.
    let lists = [
        "port", "worker", "route", "neighbor", "rule", "snat", "dnat", "static",
    ];
    let last = key.rsplit('.').next().unwrap_or("");
    if lists.contains(&last)
        && (msg.contains("expected a sequence") || msg.contains("duplicate key"))
    {
        msg = format!(
            "{msg}: `{key}` is a list of tables; write each entry as `[[{key}]]` (double brackets), not `[{key}]`"
        );
    }
    ConfigErrors(vec![ConfigError {
        file: file.to_string(),
        line,
        col,
        key,
        msg,
    }])
}

/// `table`, one `[[route]]` table that `sluice ctl route add|replace`
/// adds to the running config `cur`, checked on its own against `cur`'s
/// interfaces, with the errors [`parse_edit`] would give for `cur`'s text
/// with the table added (the keys index the table as the only one): its
/// route (one path). A connected subnet is refused; whether a static
/// route to the prefix may be added to or replaced is the caller's to
/// decide. Constant work per route however many were added before, where
/// `parse_edit` parses and checks the whole text again.
pub fn check_added_route(table: &str, cur: &Config) -> Result<Route, ConfigErrors> {
    let raw: RawAdded = toml::from_str(table).map_err(|e| toml_error(&e, table, &cur.source))?;
    let mut cx = Ctx::new(&cur.source, table);
    let [r] = raw.route.as_slice() else {
        return Err(ConfigErrors(vec![ConfigError {
            file: cur.source.clone(),
            line: 0,
            col: 0,
            key: "route".into(),
            msg: "one [[route]] table at a time".into(),
        }]));
    };
    match router::check_added(&mut cx, &cur.router, 0, r) {
        Some(route) if cx.errs.is_empty() => Ok(route),
        _ => Err(ConfigErrors(cx.errs)),
    }
}

/// `table`, one `[[neighbor]]` table that `sluice ctl neighbor
/// add|replace` adds to the running config `cur`, checked on its own
/// against `cur`'s interfaces and addresses, with the errors
/// [`parse_edit`] would give for `cur`'s text with the table added (the
/// keys index the table as the only one): its entry (port, address, MAC).
/// The caller deletes any neighbour with the same address first (`add`
/// refuses one). Constant work per edit, as [`check_added_route`].
pub fn check_added_neighbor(
    table: &str,
    cur: &Config,
) -> Result<(u16, std::net::IpAddr, MacAddr), ConfigErrors> {
    let raw: RawAddedNeighbor =
        toml::from_str(table).map_err(|e| toml_error(&e, table, &cur.source))?;
    let mut cx = Ctx::new(&cur.source, table);
    let [n] = raw.neighbor.as_slice() else {
        return Err(ConfigErrors(vec![ConfigError {
            file: cur.source.clone(),
            line: 0,
            col: 0,
            key: "neighbor".into(),
            msg: "one [[neighbor]] table at a time".into(),
        }]));
    };
    match router::check_added_neighbor(&mut cx, &cur.router, n) {
        Some(entry) if cx.errs.is_empty() => Ok(entry),
        _ => Err(ConfigErrors(cx.errs)),
    }
}

/// Interfaces (ports and VLAN sub-interfaces) a gateway's rules can name:
/// its rule metadata holds an interface index in 8 bits, 255 meaning none.
const MAX_GATEWAY_IFACES: usize = 255;

/// The cores this process may run on, as first seen: threads pinned later
/// (the management thread, which validates a reload) see only their own.
fn machine_cores() -> BTreeSet<usize> {
    static CORES: std::sync::OnceLock<BTreeSet<usize>> = std::sync::OnceLock::new();
    CORES
        .get_or_init(|| {
            core_affinity::get_core_ids()
                .unwrap_or_default()
                .into_iter()
                .map(|c| c.id)
                .collect()
        })
        .clone()
}

fn validate(cx: &mut Ctx<'_>, raw: RawFile, base: Option<&Path>) -> Config {
    let machine = machine_cores();
    let run = check_run(cx, &raw.run);
    if let Some(c) = &raw.generator.core {
        if !machine.contains(c.get_ref()) {
            cx.err(
                c,
                "generator.core",
                format!(
                    "core {} does not exist on this machine (cores: {machine:?})",
                    c.get_ref()
                ),
            );
        }
    }

    let (ports, names) = ports::check_ports(cx, &raw, base);

    let workers = workers::check(cx, &raw, &ports, &names, &machine);
    let vlan_names = vlans(cx, &raw.vlan, &raw.port);
    let addrs = interfaces(&raw, &ports, &vlan_names);
    let mut router = router::check(cx, &raw.router, &raw.route, &raw.neighbor, &addrs, base);
    // The rules and NAT name interfaces as the router indexes them: ports,
    // then VLAN sub-interfaces.
    let names: std::collections::BTreeMap<&str, u16> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| (a.name, i as u16))
        .collect();
    let mut gateway = firewall::check(
        cx,
        raw.firewall.as_ref(),
        raw.conntrack.as_ref(),
        raw.nat.as_ref(),
        &names,
        &addrs
            .iter()
            .map(|a| a.ipv4.iter().map(|p| p.0.addr).collect())
            .collect::<Vec<_>>(),
        &addrs
            .iter()
            .map(|a| a.ipv6.iter().map(|p| p.0.addr).collect())
            .collect::<Vec<_>>(),
        base,
    );
    let nat64: Vec<(u128, u8)> = gateway.nat.nat64.iter().map(|t| t.prefix).collect();
    router.adverts = advert::check(cx, &addrs, &router, &nat64);
    check_l3fwd_workers(cx, &raw, gateway.enabled, &router, &addrs);
    gateway.mss_limits = check_clamp_mss(cx, &raw, &router, gateway.enabled);
    let gateway_workers = workers.iter().filter(|w| w.mode == FwdMode::L3fwd).count();
    check_det_shares(cx, &raw, &gateway, gateway_workers);
    check_block_shares(cx, &raw, &gateway, gateway_workers);
    let accounted = raw.export.as_ref().is_some_and(|e| e.collectors.is_some());
    check_memory(cx, &raw, &gateway, gateway_workers, accounted);
    ports::check_buffer_family(cx, &raw);
    let mbufs = ports::check_mbufs(cx, &raw, &ports);
    let (metrics, control_socket) = check_management(cx, &raw, base);
    let state_file = check_ha(cx, &raw, base, gateway.enabled);
    let sync = check_sync(cx, &raw, base, gateway.enabled);
    let export = export::check(cx, raw.export.as_ref(), gateway.enabled);
    let run_as = check_service(cx, &raw, &ports);
    let taps = control_plane::taps(&raw, &ports, &router, cx);
    let punt_rules = control_plane::punt_rules(&raw, &names, cx);
    let control_plane = control_plane::control_plane(&raw, &ports, &router, &taps, cx);
    Config {
        source: cx.file.to_string(),
        run,
        generator_core: raw.generator.core.map(|c| *c.get_ref()),
        ports,
        workers,
        router,
        gateway,
        eal_args: raw.dpdk.eal_args,
        mbufs,
        metrics,
        control_socket,
        control_plane,
        state_file,
        sync,
        export,
        run_as,
        kernel_flows: (!taps.is_empty()).then(|| {
            std::sync::Arc::new(pipeline::router::kernel_flows::KernelFlows::new(1 << 16))
        }),
        taps,
        punt_rules,
        text: "".into(),
        base: None,
        warnings: Vec::new(),
    }
}

/// The router's interfaces as the config names them: the ports, then the
/// VLAN sub-interfaces, with their addresses and where errors point.
fn interfaces<'a>(
    raw: &'a RawFile,
    ports: &[PortConfig],
    vlan_names: &'a [(String, Option<pipeline::router::Vlan>)],
) -> Vec<router::PortAddrs<'a>> {
    let mut addrs: Vec<router::PortAddrs<'a>> = raw
        .port
        .iter()
        .zip(ports)
        .enumerate()
        .map(|(i, (rp, pc))| router::PortAddrs {
            key: format!("port[{i}]"),
            name: rp.name.get_ref(),
            vlan: None,
            mac: pc.mac,
            ipv4: rp.ipv4.get_ref(),
            ipv6: &rp.ipv6,
            mtu: rp.mtu.as_ref(),
            ra: rp.ra.as_ref(),
            at: Spanned::new(
                if rp.ipv4.span().is_empty() {
                    rp.name.span()
                } else {
                    rp.ipv4.span()
                },
                (),
            ),
        })
        .collect();
    for (vi, (v, (name, vlan))) in raw.vlan.iter().zip(vlan_names).enumerate() {
        let Some(vlan) = vlan else { continue };
        addrs.push(router::PortAddrs {
            key: format!("vlan[{vi}]"),
            name,
            vlan: Some(*vlan),
            mac: ports[usize::from(vlan.port)].mac,
            ipv4: v.ipv4.get_ref(),
            ipv6: &v.ipv6,
            mtu: v.mtu.as_ref(),
            ra: v.ra.as_ref(),
            at: Spanned::new(
                if v.ipv4.span().is_empty() {
                    v.port.span()
                } else {
                    v.ipv4.span()
                },
                (),
            ),
        });
    }
    addrs
}

/// What l3fwd workers need: interface addresses, and the gateway
/// (`[firewall]`, `[nat]`, `[conntrack]`) workers of that mode, on at most
/// [`MAX_GATEWAY_IFACES`] interfaces.
fn check_l3fwd_workers(
    cx: &mut Ctx<'_>,
    raw: &RawFile,
    gateway: bool,
    router: &RouterSetup,
    addrs: &[router::PortAddrs<'_>],
) {
    // A rule's metadata holds an interface in 8 bits (255: none).
    if gateway && addrs.len() > MAX_GATEWAY_IFACES {
        let a = &addrs[MAX_GATEWAY_IFACES];
        cx.err(
            &a.at,
            a.key.clone(),
            format!(
                "[firewall]/[nat] take at most {MAX_GATEWAY_IFACES} interfaces (ports and VLAN sub-interfaces); this is number {}",
                MAX_GATEWAY_IFACES + 1
            ),
        );
    }
    // The gateway runs inside l3fwd workers only.
    if gateway {
        let l3 = raw
            .worker
            .iter()
            .filter(|w| *w.mode.get_ref() == FwdMode::L3fwd)
            .count();
        let other = raw
            .worker
            .iter()
            .enumerate()
            .find(|(_, w)| *w.mode.get_ref() != FwdMode::L3fwd);
        if let Some((wi, w)) = other {
            let msg = format!(
                "[firewall]/[nat]/[conntrack] act only in l3fwd workers; this `{}` worker forwards its queues unfiltered",
                w.mode.get_ref().name()
            );
            if l3 == 0 {
                cx.err(
                    &w.mode,
                    format!("worker[{wi}].mode"),
                    format!("{msg} (set mode = \"l3fwd\", or remove those sections)"),
                );
            } else {
                cx.warn(&w.mode, format!("worker[{wi}].mode"), msg);
            }
        }
    }
    for (wi, w) in raw.worker.iter().enumerate() {
        if *w.mode.get_ref() == FwdMode::L3fwd && !router.has_addresses() {
            cx.err(
                &w.mode,
                format!("worker[{wi}].mode"),
                "l3fwd needs interface addresses: set `ipv4`/`ipv6` on the ports",
            );
        }
    }
}

/// Deterministic NAT: each gateway worker takes an equal share of every
/// host's block, so a block needs at least a port a worker.
fn check_det_shares(cx: &mut Ctx<'_>, raw: &RawFile, gateway: &GatewaySetup, workers: usize) {
    let Some(n) = &raw.nat else { return };
    for (i, r) in n.snat.iter().enumerate() {
        let (Some(d), Some(s)) = (&r.deterministic, gateway.nat.snat.get(i)) else {
            continue;
        };
        if let pipeline::nat::SnatTo::Deterministic(det) = &s.to {
            if (det.block as usize) < workers {
                cx.err(
                    d,
                    format!("nat.snat[{i}].deterministic"),
                    format!(
                        "each host's {} ports cannot be shared by the {workers} gateway workers (each takes a share of every block): give a shorter inside or longer outside prefix, or fewer workers",
                        det.block
                    ),
                );
            }
        }
    }
}

/// Port blocks are cut from each gateway worker's slice of the port
/// range: a block must fit in one.
fn check_block_shares(cx: &mut Ctx<'_>, raw: &RawFile, gateway: &GatewaySetup, workers: usize) {
    let Some(n) = &raw.nat else { return };
    let per = gateway.nat.ports.len() / workers.max(1) as u32;
    for (i, r) in n.snat.iter().enumerate() {
        let (Some(b), Some(s)) = (&r.block, gateway.nat.snat.get(i)) else {
            continue;
        };
        if let pipeline::nat::SnatTo::Blocks(rule) = &s.to {
            if u32::from(rule.size) > per {
                cx.err(
                    b,
                    format!("nat.snat[{i}].block"),
                    format!(
                        "a block of {} ports does not fit in a gateway worker's {per} ports of nat.ports ({workers} workers, each with its own slice): give a smaller block, a wider range or fewer workers",
                        rule.size
                    ),
                );
            }
        }
    }
}

/// The conntrack tables the gateway workers allocate and write at start
/// (`conntrack.capacity` flows each, when the config sets it), against
/// the memory the machine has available (`/proc/meminfo`'s
/// `MemAvailable`): refused when they cannot fit, rather than found out
/// by the OOM killer.
fn check_memory(
    cx: &mut Ctx<'_>,
    raw: &RawFile,
    gateway: &GatewaySetup,
    workers: usize,
    exported: bool,
) {
    let Some(c) = raw.conntrack.as_ref().and_then(|c| c.capacity.as_ref()) else {
        return;
    };
    if !gateway.enabled {
        return;
    }
    let Some(avail) = mem_available() else {
        return;
    };
    let each = pipeline::conntrack::ConnTrack::bytes_for(
        gateway.ct_capacity,
        gateway.ct_tcp_window,
        exported,
    );
    if let Some(e) = too_big(gateway.ct_capacity, each, workers, avail) {
        cx.err(c, "conntrack.capacity", e);
    }
}

/// Why `workers` tables of `capacity` flows, `each` bytes, do not fit in
/// `avail` bytes, if they do not.
fn too_big(capacity: usize, each: usize, workers: usize, avail: usize) -> Option<String> {
    let need = each.saturating_mul(workers.max(1));
    let mib = |b: usize| b >> 20;
    (need > avail).then(|| {
        format!(
            "{capacity} flows a worker take {} MiB each, {} MiB for {} gateway worker(s): more than the {} MiB this machine has available",
            mib(each),
            mib(need),
            workers.max(1),
            mib(avail)
        )
    })
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
fn mem_available() -> Option<usize> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: usize = m
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The ports' `clamp_mss` as the gateway takes it: per interface (ports,
/// then VLAN sub-interfaces, which take their port's), the most a TCP
/// SYN's MSS may say over IPv4 and IPv6; empty when no port clamps.
fn check_clamp_mss(
    cx: &mut Ctx<'_>,
    raw: &RawFile,
    router: &RouterSetup,
    gateway: bool,
) -> Vec<[u16; 2]> {
    use pipeline::gateway::mss::headers;
    let mut per_port = vec![None; raw.port.len()];
    for (i, p) in raw.port.iter().enumerate() {
        let Some(c) = &p.clamp_mss else { continue };
        let key = format!("port[{i}].clamp_mss");
        let v = match c.get_ref() {
            RawClamp::Word(w) if w == "pmtu" => Some(None),
            RawClamp::Bytes(n) if (536..=65495).contains(n) => Some(Some(*n as u16)),
            RawClamp::Bytes(n) => {
                cx.err(c, &key, format!("{n}: an MSS is 536..=65495 bytes (RFC 9293's least, and the most an IPv4 packet holds)"));
                None
            }
            RawClamp::Word(w) => {
                cx.err(
                    c,
                    &key,
                    format!("`{w}`: expected \"pmtu\" or a number of bytes"),
                );
                None
            }
        };
        if v.is_some() && !gateway {
            cx.err(
                c,
                &key,
                "clamping needs the gateway stage: add [firewall] (with default = \"accept\" it refuses nothing), [conntrack] or [nat]",
            );
        }
        per_port[i] = v;
    }
    if per_port.iter().all(Option::is_none) {
        return Vec::new();
    }
    router
        .interfaces
        .iter()
        .enumerate()
        .map(|(i, iface)| {
            let port = iface.vlan.map_or(i, |v| usize::from(v.port));
            match per_port.get(port).copied().flatten() {
                None => [u16::MAX; 2],
                Some(Some(n)) => [n; 2],
                Some(None) => [
                    iface.mtu.saturating_sub(headers(false)),
                    iface.mtu.saturating_sub(headers(true)),
                ],
            }
        })
        .collect()
}

/// `[ha] state_file`: a file to create in a directory that exists (the
/// flow table is written there on a clean stop and read back at start),
/// with a gateway to keep the flows of.
fn check_ha(
    cx: &mut Ctx<'_>,
    raw: &RawFile,
    base: Option<&Path>,
    gateway: bool,
) -> Option<PathBuf> {
    let s = raw.ha.state_file.as_ref()?;
    let key = "ha.state_file";
    let p = files::beside(base, s.get_ref());
    if s.get_ref().is_empty() || p.is_dir() {
        cx.err(s, key, "name a file (such as \"/var/lib/sluice/flows\")");
        return None;
    }
    if let Some(d) = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.is_dir())
    {
        cx.err(s, key, format!("directory {} does not exist", d.display()));
        return None;
    }
    if !gateway {
        cx.warn(
            s,
            key,
            "there is no flow table to keep: the config has no [firewall], [conntrack] or [nat]",
        );
    }
    Some(p)
}

/// `[service] user` and `group`: names the host knows (looked up with the
/// host checks), not root's.
fn check_service(cx: &mut Ctx<'_>, raw: &RawFile, ports: &[PortConfig]) -> Option<RunAs> {
    let s = &raw.service;
    let Some(user) = &s.user else {
        if let Some(g) = &s.group {
            cx.err(g, "service.group", "a group needs `user` in [service]");
        }
        return None;
    };
    if ports
        .iter()
        .any(|p| matches!(p.kind, PortKind::Dpdk { .. }))
    {
        cx.err(
            user,
            "service.user",
            "not with DPDK ports: the EAL's devices and hugepage files stay root's",
        );
        return None;
    }
    let mut run_as = RunAs {
        user: user.get_ref().clone(),
        group: s.group.as_ref().map(|g| g.get_ref().clone()),
        uid: 0,
        gid: 0,
    };
    if !cx.host {
        return Some(run_as);
    }
    match nix::unistd::User::from_name(&run_as.user) {
        Ok(Some(u)) if u.uid.is_root() => {
            cx.err(user, "service.user", "is root: name the user to drop to");
            return None;
        }
        Ok(Some(u)) => {
            run_as.uid = u.uid.as_raw();
            run_as.gid = u.gid.as_raw();
        }
        Ok(None) => {
            let name = shown(&run_as.user, 64);
            cx.err(user, "service.user", format!("no user {name} on this host"));
            return None;
        }
        Err(e) => {
            cx.err(user, "service.user", format!("looking it up: {e}"));
            return None;
        }
    }
    if let Some(g) = &s.group {
        match nix::unistd::Group::from_name(g.get_ref()) {
            Ok(Some(gr)) => run_as.gid = gr.gid.as_raw(),
            Ok(None) => {
                let name = shown(g.get_ref(), 64);
                cx.err(g, "service.group", format!("no group {name} on this host"));
                return None;
            }
            Err(e) => {
                cx.err(g, "service.group", format!("looking it up: {e}"));
                return None;
            }
        }
    }
    Some(run_as)
}

/// The shortest key `[ha] key_file` may hold (bytes).
const MIN_KEY: usize = 32;

/// `[ha] listen`, `peer`, `key_file`: all three or none; two socket
/// addresses of one family, and a key file of this user's alone (0600)
/// holding at least [`MIN_KEY`] bytes.
fn check_sync(
    cx: &mut Ctx<'_>,
    raw: &RawFile,
    base: Option<&Path>,
    gateway: bool,
) -> Option<SyncConfig> {
    let h = &raw.ha;
    let given = [&h.listen, &h.peer, &h.key_file];
    if given.iter().all(|x| x.is_none()) {
        return None;
    }
    let mut addr = |v: &Option<Spanned<String>>, key: &str| -> Option<std::net::SocketAddr> {
        let Some(v) = v else {
            cx.err_whole(
                key,
                "state sync needs `listen`, `peer` and `key_file` in [ha]",
            );
            return None;
        };
        match v.get_ref().parse::<std::net::SocketAddr>() {
            Ok(a) if a.port() != 0 && !a.ip().is_unspecified() => Some(a),
            _ => {
                cx.err(
                    v,
                    key,
                    format!(
                        "`{}` is not ADDR:PORT with a port (such as \"198.18.9.1:8101\")",
                        v.get_ref()
                    ),
                );
                None
            }
        }
    };
    let listen = addr(&h.listen, "ha.listen");
    let peer = addr(&h.peer, "ha.peer");
    let key = match &h.key_file {
        None => {
            cx.err_whole(
                "ha.key_file",
                "state sync needs `listen`, `peer` and `key_file` in [ha]",
            );
            None
        }
        // Without the host checks (the shipped configs' test) the key is
        // not read: the file is the host's.
        Some(_) if !cx.host => Some(Vec::new()),
        Some(k) => {
            let p = files::beside(base, k.get_ref());
            match files::read_secret(&p) {
                Ok(bytes) if bytes.len() >= MIN_KEY => Some(bytes),
                Ok(bytes) => {
                    cx.err(
                        k,
                        "ha.key_file",
                        format!(
                            "{} holds {} bytes; a key needs at least {MIN_KEY} (such as `head -c 32 /dev/urandom > FILE`)",
                            p.display(),
                            bytes.len()
                        ),
                    );
                    None
                }
                Err(e) => {
                    cx.err(k, "ha.key_file", format!("{}: {e}", p.display()));
                    None
                }
            }
        }
    };
    let (listen, peer, key) = (listen?, peer?, key?);
    if listen.is_ipv4() != peer.is_ipv4() {
        if let Some(p) = &h.peer {
            cx.err(
                p,
                "ha.peer",
                "`listen` and `peer` must be of one address family",
            );
        }
        return None;
    }
    if !gateway {
        if let Some(l) = &h.listen {
            cx.warn(
                l,
                "ha.listen",
                "there is no flow table to sync: the config has no [firewall], [conntrack] or [nat]",
            );
        }
    }
    Some(SyncConfig {
        listen,
        peer,
        key: key.into(),
    })
}

/// `[management]`: the metrics endpoint's address and the control
/// socket's path.
fn check_management(
    cx: &mut Ctx<'_>,
    raw: &RawFile,
    base: Option<&Path>,
) -> (Option<std::net::SocketAddr>, Option<PathBuf>) {
    let metrics = raw.management.metrics.as_ref().and_then(|m| {
        let key = "management.metrics";
        let addr = match m.get_ref() {
            Endpoint::Port(p) => u16::try_from(*p)
                .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p)))
                .map_err(|_| format!("port must be 0..=65535; got {p}")),
            Endpoint::Addr(s) => s.parse::<std::net::SocketAddr>().map_err(|_| {
                format!("`{s}` is not ADDR:PORT (such as \"127.0.0.1:9469\" or \"[::1]:9469\")")
            }),
        };
        match addr {
            Ok(a) => {
                if !a.ip().is_loopback() {
                    cx.warn(
                        m,
                        key,
                        format!("metrics on {a} are readable by anyone who can reach it (no authentication); loopback is safer"),
                    );
                }
                Some(a)
            }
            Err(e) => {
                cx.err(m, key, e);
                None
            }
        }
    });
    let control_socket = raw.management.socket.as_ref().and_then(|s| {
        let p = files::beside(base, s.get_ref());
        if s.get_ref().is_empty() || p.is_dir() {
            cx.err(
                s,
                "management.socket",
                "name a socket file to create (such as \"/run/sluice/sluice.sock\")",
            );
            return None;
        }
        match p.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(d) if !d.is_dir() && d != std::path::Path::new("/run/sluice") => {
                cx.err(
                    s,
                    "management.socket",
                    format!("directory {} does not exist", d.display()),
                );
                None
            }
            _ => Some(p),
        }
    });
    (metrics, control_socket)
}

#[cfg(test)]
mod tests;

/// Checks the `[[vlan]]` tables: each one's name (given, or `PORT.ID`,
/// `PORT.OUTER.ID` for QinQ) and place, `None` where it is wrong.
fn vlans(
    cx: &mut Ctx<'_>,
    raw: &[RawVlan],
    ports: &[RawPort],
) -> Vec<(String, Option<pipeline::router::Vlan>)> {
    let mut out: Vec<(String, Option<pipeline::router::Vlan>)> = Vec::new();
    for (vi, v) in raw.iter().enumerate() {
        let k = |f: &str| format!("vlan[{vi}].{f}");
        let id = *v.id.get_ref();
        let outer = v.outer.as_ref().map(|o| *o.get_ref());
        let port = ports
            .iter()
            .position(|p| p.name.get_ref() == v.port.get_ref());
        let name = match &v.name {
            Some(n) => n.get_ref().clone(),
            None => match outer {
                Some(o) => format!("{}.{o}.{id}", v.port.get_ref()),
                None => format!("{}.{id}", v.port.get_ref()),
            },
        };
        let mut ok = true;
        if port.is_none() {
            cx.err(
                &v.port,
                k("port"),
                format!("port `{}` does not exist", v.port.get_ref()),
            );
            ok = false;
        }
        if !(1..=4094).contains(&id) {
            cx.err(&v.id, k("id"), "a VLAN id is 1..=4094");
            ok = false;
        }
        if let Some(o) = &v.outer {
            if !(1..=4094).contains(o.get_ref()) {
                cx.err(o, k("outer"), "a VLAN id is 1..=4094");
                ok = false;
            }
        }
        let vlan = port.map(|p| pipeline::router::Vlan {
            port: p as u16,
            outer,
            id,
        });
        let at = v.name.as_ref().map_or(v.port.span(), |n| n.span());
        if let Some(dup) = out.iter().position(|(_, x)| x.is_some() && *x == vlan) {
            // (Its default name is the other's too: one error.)
            cx.err(
                &v.id,
                k("id"),
                format!(
                    "the same tags on the same port as vlan[{dup}] (`{}`)",
                    out[dup].0
                ),
            );
            ok = false;
        } else if ports.iter().any(|p| *p.name.get_ref() == name)
            || out.iter().any(|(n, _)| *n == name)
        {
            cx.err(
                &Spanned::new(at, ()),
                k("name"),
                format!("`{name}` is already the name of a port or VLAN"),
            );
            ok = false;
        }
        out.push((name, vlan.filter(|_| ok)));
    }
    out
}

/// `[run]`: the duration, the stats period, the burst and the drain timer.
fn check_run(cx: &mut Ctx<'_>, r: &RawRun) -> RunConfig {
    if let Err(e) = duration(*r.duration.get_ref()) {
        cx.err(&r.duration, "run.duration", e);
    }
    if let Err(e) = stats_period(*r.stats_period.get_ref()) {
        cx.err(&r.stats_period, "run.stats_period", e);
    }
    if let Err(e) = burst(*r.burst.get_ref()) {
        cx.err(&r.burst, "run.burst", e);
    }
    if *r.drain_us.get_ref() > 1_000_000 {
        cx.err(&r.drain_us, "run.drain_us", "must be at most 1000000 µs");
    }
    RunConfig {
        duration: duration(*r.duration.get_ref()).unwrap_or(None),
        stats_period: stats_period(*r.stats_period.get_ref()).unwrap_or(Duration::from_secs(1)),
        burst: *r.burst.get_ref(),
        drain: Duration::from_micros(*r.drain_us.get_ref()),
    }
}
