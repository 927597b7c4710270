//! `sluice ctl route add|del` and `neighbor add|del`: changes to the
//! running routes and neighbours, validated exactly as the config is (an
//! added route or neighbour is a `[[route]]` or `[[neighbor]]` table added
//! to the text the running config came from, so it gets the same checks
//! and errors). Each added table is checked on its own against the
//! running config (constant work per edit, however many were made
//! before); a route goes into the running FIB in place, a neighbour into
//! the routers' neighbour tables. Only the deletion of a static route
//! that hid a route-file route is installed as a reload installs (the
//! whole text parsed again, the tables built aside, each worker switching
//! between two bursts). Like `ip route add` beside a configuration file,
//! they last until the next reload or restart, which go back to the
//! file.

use crate::config::PathRefused;
use crate::config::{self, Config, Route};
use crate::rib::{Rib, Static};
use std::net::IpAddr;
use std::sync::Arc;

/// What an edit's added table is for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Route(IpAddr, u8),
    Neighbor(IpAddr),
}

/// The changes made since the config was loaded.
#[derive(Debug, Clone)]
pub struct Edits {
    /// The text the running config was loaded from.
    file_text: Arc<str>,
    /// The file's static routes and neighbours (a deletion of one of
    /// these drops the file's table; of an added one, the added table).
    file_routes: Arc<[(IpAddr, u8)]>,
    file_neighbors: Arc<[IpAddr]>,
    /// Tables added (`[[route]]`, `[[neighbor]]`), in order (shared: an
    /// edit clones the list, and must not copy thousands of texts).
    adds: Vec<(Target, Arc<str>)>,
    /// The file's routes and neighbours deleted.
    dropped: config::Dropped,
}

impl Edits {
    /// No changes to `cfg` (at start, and after a reload).
    pub fn new(cfg: &Config) -> Self {
        Edits {
            file_text: cfg.text.clone(),
            file_routes: cfg.router.routes.iter().map(|r| (r.addr, r.len)).collect(),
            file_neighbors: cfg.router.neighbors.iter().map(|n| n.1).collect(),
            adds: Vec::new(),
            dropped: config::Dropped {
                file_end: cfg.text.len(),
                ..config::Dropped::default()
            },
        }
    }

    /// Deletes what routes `t`: the tables edits added for it, and the
    /// file's, if it has one.
    fn delete(&mut self, t: Target) {
        self.adds.retain(|(a, _)| *a != t);
        let d = &mut self.dropped;
        match t {
            Target::Route(a, l)
                if self.file_routes.contains(&(a, l)) && !d.routes.contains(&(a, l)) =>
            {
                d.routes.push((a, l));
            }
            Target::Neighbor(a)
                if self.file_neighbors.contains(&a) && !d.neighbors.contains(&a) =>
            {
                d.neighbors.push(a);
            }
            _ => {}
        }
    }
}

/// Whether `args` is a route or neighbour change (what [`apply`] takes).
pub fn is_edit(args: &[String]) -> bool {
    matches!(
        args.first().map(String::as_str),
        Some("route" | "neighbor" | "neighbour")
    )
}

/// A value to put between TOML quotes: refused if it could break out.
fn word(v: &str) -> Result<&str, String> {
    if v.is_empty() || v.chars().any(|c| c == '"' || c == '\\' || c.is_control()) {
        return Err(format!("`{v}` is not an address, prefix, MAC or port name"));
    }
    Ok(v)
}

/// What an edit [`apply`] accepted changes.
#[derive(Debug)]
pub enum Change {
    /// A static route added or replaced (`Some`: all its paths), or the
    /// static route to the prefix deleted: made on the running config in
    /// place ([`route_in_place`]).
    Route((IpAddr, u8), Option<Route>),
    /// The static neighbour with an address added or replaced (`Some`:
    /// its port, address and MAC), or deleted: made on the running config
    /// and installed in the routers in place ([`neighbors_in_place`]).
    Neighbor(IpAddr, Option<(u16, IpAddr, pipeline::wire::MacAddr)>),
    /// The config to build and install as a reload does (the deletion of
    /// a static route that hid a route-file route, which must come back).
    Build(Box<Config>),
}

impl Change {
    /// The config this change makes of `cur`.
    pub fn applied_to(self, cur: &Config) -> Config {
        match self {
            Change::Route(p, add) => {
                let mut new = cur.clone();
                route_into(&mut new, p, add);
                new
            }
            Change::Neighbor(a, add) => {
                let mut new = cur.clone();
                neighbor_into(&mut new, a, add);
                new
            }
            Change::Build(new) => *new,
        }
    }
}

/// `cfg` with its static neighbour `a` deleted, and `add` added in its
/// place (at the end, where the whole text puts an edit's tables).
fn neighbor_into(cfg: &mut Config, a: IpAddr, add: Option<(u16, IpAddr, pipeline::wire::MacAddr)>) {
    cfg.router.neighbors.retain(|(_, n, _)| *n != a);
    cfg.router.neighbors.extend(add);
}

/// `cfg` with its static route to `p` deleted, and `add` added in its
/// place (at the end, where the whole text puts an edit's tables).
fn route_into(cfg: &mut Config, p: (IpAddr, u8), add: Option<Route>) {
    cfg.router.routes.retain(|r| (r.addr, r.len) != p);
    if let Some(r) = add {
        cfg.router.routes.push(r);
    }
}

/// An error of a change, as its answer says it: errors in the added table
/// name its key (without an index: the table is the change, not one of a
/// list), errors in the file (which loaded before) would be a bug and keep
/// their place.
fn errors(errs: config::ConfigErrors, in_change: impl Fn(&config::ConfigError) -> bool) -> String {
    errs.0
        .iter()
        .map(|x| {
            if in_change(x) {
                format!("key `{}`: {}", unindexed(&x.key), x.msg)
            } else {
                x.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `key` without its list indexes (`route[3].via` -> `route.via`).
fn unindexed(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut skip = false;
    for c in key.chars() {
        match c {
            '[' => skip = true,
            ']' if skip => skip = false,
            _ if !skip => out.push(c),
            _ => {}
        }
    }
    out
}

/// How a route's paths are written.
const ROUTE_USAGE: &str =
    "route add|replace PREFIX via ADDR [port P] [via ADDR [port P] ...] | route add|replace PREFIX port P";

/// The `[[route]]` tables of `route add PREFIX HOPS..`: one per path
/// (`via ADDR [port P]` or `port P`), as the file writes an equal-cost
/// route.
fn route_tables(prefix: &str, hops: &[&str]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = hops;
    while !rest.is_empty() {
        let mut t = format!("\n[[route]]\nprefix = \"{}\"\n", word(prefix)?);
        rest = match rest {
            ["via", via, "port", port, more @ ..] => {
                t += &format!("via = \"{}\"\nport = \"{}\"\n", word(via)?, word(port)?);
                more
            }
            ["via", via, more @ ..] => {
                t += &format!("via = \"{}\"\n", word(via)?);
                more
            }
            ["port", port, more @ ..] => {
                t += &format!("port = \"{}\"\n", word(port)?);
                more
            }
            _ => return Err(ROUTE_USAGE.into()),
        };
        out.push(t);
    }
    if out.is_empty() {
        return Err(ROUTE_USAGE.into());
    }
    Ok(out)
}

/// The route of `tables` (one per path) to `p`, each checked on its own
/// against `cur`, their paths merged as the file's tables for one prefix
/// are (with the errors the whole text would give), but for a path given
/// twice, which the file warns of and an edit refuses.
fn route_of(tables: &[String], p: (IpAddr, u8), cur: &Config) -> Result<Route, String> {
    let mut route: Option<Route> = None;
    for t in tables {
        let r = config::check_added_route(t, cur).map_err(|errs| errors(errs, |_| true))?;
        let Some(acc) = route.as_mut() else {
            route = Some(r);
            continue;
        };
        acc.add_path(r.paths[0]).map_err(|why| match why {
            PathRefused::Twice => format!("{}/{}: the same path given twice", p.0, p.1),
            why => format!("key `route.prefix`: {}", why.msg(p.0, p.1)),
        })?;
    }
    let mut route = route.ok_or_else(|| String::from(ROUTE_USAGE))?;
    route.source = config::RouteSource::Ctl;
    Ok(route)
}

/// What `args` (`route ...` / `neighbor ...`) would change in `cur`, and
/// the edits with it; `cur` and `edits` are left as they were.
pub fn apply(args: &[String], cur: &Config, edits: &Edits) -> Result<(Change, Edits), String> {
    let mut e = edits.clone();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["route", verb @ ("add" | "replace"), prefix, rest @ ..] => {
            let tables = route_tables(prefix, rest)?;
            let p = pipeline::prefix::parse(prefix)
                .ok_or_else(|| format!("`{prefix}` is not a prefix such as 10.0.0.0/8"))?;
            let exists = cur.router.routes.iter().any(|r| (r.addr, r.len) == p);
            if exists && *verb == "add" {
                return Err(format!(
                    "a route to {prefix} exists; `route replace {prefix} ...` changes it (or `route del {prefix}` first)"
                ));
            }
            // Checked on its own against the running config: what the
            // whole text with the tables added would say of it.
            let route = route_of(&tables, p, cur)?;
            if exists {
                e.delete(Target::Route(p.0, p.1));
            }
            for t in tables {
                e.adds.push((Target::Route(p.0, p.1), t.into()));
            }
            return Ok((Change::Route(p, Some(route)), e));
        }
        ["route", "del", prefix] => {
            let p = pipeline::prefix::parse(prefix)
                .ok_or_else(|| format!("`{prefix}` is not a prefix such as 10.0.0.0/8"))?;
            if !cur.router.routes.iter().any(|r| (r.addr, r.len) == p) {
                return Err(format!(
                    "no static route {prefix} (routes from the route file change with the file and `reload`)"
                ));
            }
            e.delete(Target::Route(p.0, p.1));
            if !cur.router.file_routes.contains(&p) {
                return Ok((Change::Route(p, None), e));
            }
        }
        ["neighbor" | "neighbour", verb @ ("add" | "replace"), ip, mac, "port", port] => {
            let a: IpAddr = ip
                .parse()
                .map_err(|_| format!("`{ip}` is not an address"))?;
            if *verb == "add" && cur.router.neighbors.iter().any(|(_, n, _)| *n == a) {
                return Err(format!(
                    "neighbour {ip} exists; `neighbor replace {ip} MAC port P` changes it (or `neighbor del {ip}` first)"
                ));
            }
            let t = format!(
                "\n[[neighbor]]\nip = \"{}\"\nmac = \"{}\"\nport = \"{}\"\n",
                word(ip)?,
                word(mac)?,
                word(port)?
            );
            // Checked on its own against the running config: what the
            // whole text with the table added would say of it.
            let entry = config::check_added_neighbor(&t, cur)
                .map_err(|errs| errors(errs, |_| true))?;
            e.delete(Target::Neighbor(a));
            e.adds.push((Target::Neighbor(a), t.into()));
            return Ok((Change::Neighbor(a, Some(entry)), e));
        }
        ["neighbor" | "neighbour", "del", ip] => {
            let a: IpAddr = ip
                .parse()
                .map_err(|_| format!("`{ip}` is not an address"))?;
            if !cur.router.neighbors.iter().any(|(_, n, _)| *n == a) {
                return Err(format!("no static neighbour {ip}"));
            }
            e.delete(Target::Neighbor(a));
            return Ok((Change::Neighbor(a, None), e));
        }
        _ => {
            return Err(format!(
            "{ROUTE_USAGE} | route del PREFIX | neighbor add|replace ADDR MAC port P | neighbor del ADDR"
        ))
        }
    }
    let new = reparse(cur, &e)?;
    Ok((Change::Build(Box::new(new)), e))
}

/// The config of the file's text with `e`'s changes, parsed and checked
/// whole as `sluice check` would (what [`Change::Route`] and
/// [`Change::Neighbor`] make in place must equal it).
fn reparse(cur: &Config, e: &Edits) -> Result<Config, String> {
    let mut text = format!("{}\n", e.file_text);
    for (_, t) in &e.adds {
        text += t;
    }
    let file_lines = e.file_text.lines().count() + 1;
    let mut new = config::parse_edit(&text, cur, &e.dropped)
        .map_err(|errs| errors(errs, |x| x.line > file_lines))?;
    // The running config's text stays the file's; the poll policies stay
    // those running (`set poll`), which only a reload puts back.
    new.text = e.file_text.clone();
    for (n, c) in new.workers.iter_mut().zip(&cur.workers) {
        n.poll = c.poll.clone();
    }
    Ok(new)
}

/// Makes a neighbour change that [`apply`] accepted (neighbour `a`
/// deleted, and `add` added in its place) in `cfg`, the running config,
/// and installs its static neighbours into the running `router` and,
/// through `updates`, the workers' ([`crate::reload::reconfigure_routers`]):
/// their neighbour tables only, not the routes or the rules, so neither
/// the FIB nor the classifier is built again (with the full table that
/// took seconds) and the rules' hit counts go on. The routers keep the
/// neighbours they learned and those the kernel's table gave them; a
/// static neighbour takes precedence, as at start. The answer; `None`
/// when no router runs (then it is installed as a reload installs).
pub fn neighbors_in_place(
    args: &[String],
    (a, add): (IpAddr, Option<(u16, IpAddr, pipeline::wire::MacAddr)>),
    cfg: &mut Config,
    router: Option<&mut pipeline::router::Router>,
    workers: &[crate::worker::Link],
) -> Option<String> {
    let router = router?;
    neighbor_into(cfg, a, add);
    crate::reload::reconfigure_routers(router, workers, |rc| {
        (rc.neighbors4, rc.neighbors6) = crate::stages::static_neighbors(&cfg.router);
    });
    Some(format!(
        "{}: installed in place ({} static neighbours)\n",
        args.join(" "),
        cfg.router.neighbors.len()
    ))
}

/// Installs a route change that [`apply`] accepted into the running FIB
/// in place, and into `cfg`, the running config, when it is installed: no
/// rebuild, workers keep forwarding and see the change from their next
/// poll round. `None` when there is no FIB to change (no router runs):
/// then it is installed as a reload installs. It goes in as the config's
/// static routes do (`mirrored`, [`Rib::install_static`]): a prefix
/// the kernel's table routes keeps the kernel's route (the change is
/// recorded, and takes effect if the kernel withdraws its route), and
/// paths through interfaces that are down wait for them to come up. The
/// answer says which.
pub fn route_in_place(
    args: &[String],
    (addr, len): (IpAddr, u8),
    add: &Option<Route>,
    cfg: &mut Config,
    fib: Option<&mut pipeline::fib::FibWriter>,
    mirrored: &mut Rib,
) -> Option<Result<String, String>> {
    let fib = fib?;
    let prefix = format!("{addr}/{len}");
    let done = match add {
        Some(r) => mirrored
            .install_static(r, fib, &cfg.router.interfaces)
            .map_err(|e| format!("{prefix}: {e}")),
        None => Ok(mirrored.remove_static(addr, len, fib)),
    };
    if done.is_ok() {
        route_into(cfg, (addr, len), add.clone());
    }
    fib.reclaim();
    let what = args.join(" ");
    Some(done.map(|s| match s {
        Static::Kernel => format!(
            "{what}: recorded; the kernel's route to {prefix} (netlink) stays in the FIB and takes precedence while it lasts\n"
        ),
        Static::Installed { live: 0, .. } => format!(
            "{what}: recorded; not in the FIB while the interfaces of its paths are down\n"
        ),
        Static::Installed { live, paths } if live < paths => format!(
            "{what}: installed in place with {live} of its {paths} paths (the others' interfaces are down)\n"
        ),
        Static::Installed { .. } | Static::Removed => format!(
            "{what}: installed in place ({} IPv4 and {} IPv6 routes)\n",
            fib.fib().routes4(),
            fib.fib().routes6()
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: &str = r#"
[[port]]
name = "p0"
driver = "softnic"
ipv4 = ["198.18.0.1/24"]
ipv6 = ["2001:db8:1::1/64"]
softnic.rate = 1000

[[port]]
name = "p1"
driver = "softnic"
ipv4 = ["198.19.0.1/24", "198.20.0.1/30"]
ipv6 = ["2001:db8:2::1/64"]
softnic.rate = 1000

[[worker]]
core = 0
mode = "l3fwd"
rx = ["p0", "p1"]

[[route]]
prefix = "203.0.113.0/24"
via = "198.19.0.2"

[[route]]
prefix = "203.0.113.0/24"
via = "198.19.0.3"

[[route]]
prefix = "10.0.0.0/8"
via = "198.18.0.2"

[[neighbor]]
ip = "198.19.0.2"
mac = "02:00:00:00:00:02"
port = "p1"
"#;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    /// Route edits made in place (the added table checked on its own)
    /// give the config, and refuse with the errors, that parsing the
    /// file's text with every edit's table added gives, edit after edit:
    /// adds and deletions of the file's routes (ECMP among them) and of
    /// added ones, re-adds, IPv6, `port` routes, and every refusal the
    /// table's check makes.
    #[test]
    fn route_edits_in_place_are_the_whole_text_parsed() {
        let mut cur = config::parse(CFG, "edit-test.toml", None).expect("the test config loads");
        let mut edits = Edits::new(&cur);
        let script = [
            "route add 192.0.2.0/24 via 198.19.0.2",
            "route add 192.0.3.0/24 via 198.19.0.2 port p1",
            "route add 192.0.4.0/24 port p0",
            "route add 2001:db8:99::/48 via 2001:db8:2::2",
            "route add 2001:db8:98::/48 via fe80::1 port p1",
            "route del 203.0.113.0/24",
            "route add 203.0.113.0/24 via 198.18.0.9",
            "route del 192.0.2.0/24",
            "route add 192.0.2.0/24 via 198.18.0.7",
            "route del 10.0.0.0/8",
            "route add 10.0.0.0/8 via 198.19.0.2",
            "route del 2001:db8:99::/48",
            // Equal-cost paths, and replacements (of the file's ECMP
            // route, of an added one, of none: an add).
            "route add 192.0.6.0/24 via 198.19.0.2 via 198.19.0.3 via 198.18.0.2",
            "route replace 192.0.6.0/24 via 198.19.0.4",
            "route replace 203.0.113.0/24 via 198.19.0.5 via 198.18.0.5",
            "route replace 192.0.7.0/24 port p1",
            "route replace 192.0.7.0/24 via 198.18.0.3 port p0 via 198.18.0.4",
            "route replace 2001:db8:99::/48 via 2001:db8:2::2 via fe80::2 port p1",
            // Refused by the table's check, as the whole text refuses it.
            "route add 192.0.5.0/24 via 203.0.113.5",
            "route add 192.0.5.0/24 via 198.19.0.1",
            "route add 192.0.5.0/24 via 198.19.0.255",
            "route add 192.0.5.0/24 via 198.20.0.3",
            "route add 192.0.5.0/24 via 2001:db8:2::2",
            "route add 192.0.5.0/24 via 198.19.0.2 port p0",
            "route add 192.0.5.0/24 via 198.19.0.2 port p9",
            "route add 192.0.5.0/24 port p9",
            "route add 192.0.5.1/24 via 198.19.0.2",
            "route add 192.0.5.0/33 via 198.19.0.2",
            "route add 198.19.0.0/24 via 198.19.0.2",
            "route add 2001:db8:1::/64 via 2001:db8:2::2",
            "route add 2001:db8:97::/48 via fe80::1",
            "route add 192.0.5.0/24 via 1.2.3.x",
            "route add 192.0.5.0/24 via 198.19.0.2 via 198.19.0.2",
            "route add 192.0.5.0/24 via 198.19.0.2 via 198.19.0.3 via 198.19.0.4 via 198.19.0.5 via 198.19.0.6 via 198.19.0.7 via 198.19.0.8 via 198.19.0.9 via 198.19.0.10 via 198.19.0.11 via 198.19.0.12 via 198.19.0.13 via 198.19.0.14 via 198.19.0.15 via 198.19.0.16 via 198.19.0.17 via 198.19.0.18",
            "route add 192.0.5.0/24 port p0 via 198.19.0.2",
            "route replace 192.0.6.0/24 via 198.19.0.2 via 10.0.0.1",
            "route replace 198.19.0.0/24 via 198.19.0.2",
            "route replace 192.0.6.0/24",
            "route replace 192.0.6.0/24 via",
            // Refused before any table is written.
            "route add 203.0.113.0/24 via 198.19.0.2",
            "route del 192.0.9.0/24",
            "route add 192.0.5.0/24",
        ];
        let mut refused = 0;
        for line in script {
            let a = args(line);
            match apply(&a, &cur, &edits) {
                Ok((change, e)) => {
                    assert!(matches!(change, Change::Route(..)), "{line}: {change:?}");
                    let whole = reparse(&cur, &e).unwrap_or_else(|err| panic!("{line}: {err}"));
                    let made = change.applied_to(&cur);
                    assert_eq!(made.router.routes, whole.router.routes, "{line}");
                    assert_eq!(made.router.neighbors, whole.router.neighbors, "{line}");
                    (cur, edits) = (made, e);
                }
                Err(err) => {
                    refused += 1;
                    // What the whole text says with the tables added (where
                    // the refusal came before a table, nothing to compare;
                    // a path given twice the file only warns of).
                    let w: Vec<&str> = a.iter().map(String::as_str).collect();
                    let ["route", "add" | "replace", prefix, rest @ ..] = w.as_slice() else {
                        continue;
                    };
                    let Ok(tables) = route_tables(prefix, rest) else {
                        continue;
                    };
                    if err.contains("exists;")
                        || err.contains("is not a prefix such as 10")
                        || err.contains("given twice")
                    {
                        continue;
                    }
                    let mut e = edits.clone();
                    if let Some(p) = pipeline::prefix::parse(prefix) {
                        e.delete(Target::Route(p.0, p.1));
                    }
                    for t in tables {
                        e.adds.push((
                            Target::Route(std::net::Ipv4Addr::UNSPECIFIED.into(), 0),
                            t.into(),
                        ));
                    }
                    let whole = reparse(&cur, &e).expect_err(line);
                    assert_eq!(err, whole, "{line}");
                }
            }
        }
        assert_eq!(refused, 24, "every refusal in the script refused");
        // What the edits made: the file's ECMP route replaced by another
        // pair of paths, a three-path route replaced by one, the others
        // moved, the deleted IPv6 route back with two paths.
        let shown: Vec<String> = cur
            .router
            .routes
            .iter()
            .filter(|r| r.paths.iter().all(|h| h.via.is_some()) || r.len < 30)
            .map(|r| {
                format!(
                    "{}/{} {:?}",
                    r.addr,
                    r.len,
                    r.paths.iter().map(|h| h.via).collect::<Vec<_>>()
                )
            })
            .collect();
        for want in [
            "203.0.113.0/24 [Some(198.19.0.5), Some(198.18.0.5)]",
            "192.0.6.0/24 [Some(198.19.0.4)]",
            "192.0.7.0/24 [Some(198.18.0.3), Some(198.18.0.4)]",
            "2001:db8:99::/48 [Some(2001:db8:2::2), Some(fe80::2)]",
        ] {
            assert!(shown.contains(&want.to_string()), "{want}: {shown:?}");
        }
        assert_eq!(
            shown
                .iter()
                .filter(|r| r.starts_with("2001:db8:99::"))
                .count(),
            1
        );
        assert_eq!(
            shown.iter().filter(|r| r.starts_with("10.0.0.0/8")).count(),
            1
        );
        // A neighbour edit, after all of them, changes the neighbours
        // only, as the whole text parsed does.
        let line = "neighbor add 198.18.0.5 02:00:00:00:00:05 port p0";
        let (change, e) = apply(&args(line), &cur, &edits).unwrap();
        assert!(matches!(change, Change::Neighbor(..)), "{line}: {change:?}");
        let whole = reparse(&cur, &e).unwrap();
        let made = change.applied_to(&cur);
        assert_eq!(made.router.routes, cur.router.routes);
        assert_eq!(made.router.routes, whole.router.routes);
        assert_eq!(made.router.neighbors, whole.router.neighbors);
        assert_eq!(made.router.neighbors.len(), 2);
    }

    /// Neighbour edits made in place (the added table checked on its own)
    /// give the neighbours, and refuse with the errors, that parsing the
    /// file's text with every edit's table added gives, edit after edit:
    /// adds, replacements (of the file's neighbour, of an added one, of
    /// none: an add), deletions and re-adds, IPv6 and link-local, and
    /// every refusal the table's check makes.
    #[test]
    fn neighbor_edits_in_place_are_the_whole_text_parsed() {
        let mut cur = config::parse(CFG, "edit-test.toml", None).expect("the test config loads");
        let mut edits = Edits::new(&cur);
        let script = [
            "neighbor add 198.18.0.5 02:00:00:00:00:05 port p0",
            "neighbor add 2001:db8:2::7 02:00:00:00:00:07 port p1",
            "neighbor add fe80::9 02:00:00:00:00:09 port p0",
            "neighbor add 198.20.0.2 02:00:00:00:00:0a port p1",
            "neighbor replace 198.19.0.2 02:00:00:00:00:99 port p1",
            "neighbor replace 198.18.0.5 02:00:00:00:00:55 port p0",
            "neighbor replace 198.19.0.9 02:00:00:00:00:19 port p1",
            "neighbor replace fe80::9 02:00:00:00:00:0b port p1",
            "neighbor del 198.19.0.2",
            "neighbor add 198.19.0.2 02:00:00:00:00:02 port p1",
            "neighbor del 2001:db8:2::7",
            "neighbour add 2001:db8:1::7 02:00:00:00:00:17 port p0",
            // Refused by the table's check, as the whole text refuses it.
            "neighbor add 198.19.0.3 02:00:00:00:00:03 port p0",
            "neighbor add 198.19.0.3 02:00:00:00:00:03 port p9",
            "neighbor add 203.0.113.3 02:00:00:00:00:03 port p1",
            "neighbor add 198.19.0.1 02:00:00:00:00:03 port p1",
            "neighbor add 2001:db8:2::1 02:00:00:00:00:03 port p1",
            "neighbor add 2001:db8:1::3 02:00:00:00:00:03 port p1",
            "neighbor add 198.19.0.3 02:00:00:00:00:zz port p1",
            "neighbor add 198.19.0.3 02:00:00:00:00 port p1",
            "neighbor replace 198.18.0.5 02:00:00:00:00:05 port p1",
            "neighbor replace fe80::9 02:00:00:00:00:0b port p7",
            // Refused before any table is written.
            "neighbor add 198.18.0.5 02:00:00:00:00:05 port p0",
            "neighbor add 198.19.0.x 02:00:00:00:00:03 port p1",
            "neighbor add 198.19.0.3 02:00:00:00:00:\"03 port p1",
            "neighbor del 198.19.0.77",
            "neighbor add 198.19.0.3 02:00:00:00:00:03",
        ];
        let mut refused = 0;
        for line in script {
            let a = args(line);
            match apply(&a, &cur, &edits) {
                Ok((change, e)) => {
                    assert!(matches!(change, Change::Neighbor(..)), "{line}: {change:?}");
                    let whole = reparse(&cur, &e).unwrap_or_else(|err| panic!("{line}: {err}"));
                    let made = change.applied_to(&cur);
                    assert_eq!(made.router.neighbors, whole.router.neighbors, "{line}");
                    assert_eq!(made.router.routes, whole.router.routes, "{line}");
                    (cur, edits) = (made, e);
                }
                Err(err) => {
                    refused += 1;
                    // What the whole text says with the table added (where
                    // the refusal came before a table, nothing to compare).
                    let w: Vec<&str> = a.iter().map(String::as_str).collect();
                    let ["neighbor", "add" | "replace", ip, mac, "port", port] = w.as_slice()
                    else {
                        continue;
                    };
                    let Ok(addr) = ip.parse::<IpAddr>() else {
                        continue;
                    };
                    if err.contains("exists;") || err.contains("is not an address, prefix") {
                        continue;
                    }
                    let mut e = edits.clone();
                    e.delete(Target::Neighbor(addr));
                    let t = format!(
                        "\n[[neighbor]]\nip = \"{ip}\"\nmac = \"{mac}\"\nport = \"{port}\"\n"
                    );
                    e.adds.push((Target::Neighbor(addr), t.into()));
                    let whole = reparse(&cur, &e).expect_err(line);
                    assert_eq!(err, whole, "{line}");
                }
            }
        }
        assert_eq!(refused, 15, "every refusal in the script refused");
        let mac = |m: &str| m.parse::<pipeline::wire::MacAddr>().unwrap();
        let ip = |a: &str| a.parse::<IpAddr>().unwrap();
        assert_eq!(
            cur.router.neighbors,
            [
                (1, ip("198.20.0.2"), mac("02:00:00:00:00:0a")),
                (0, ip("198.18.0.5"), mac("02:00:00:00:00:55")),
                (1, ip("198.19.0.9"), mac("02:00:00:00:00:19")),
                (1, ip("fe80::9"), mac("02:00:00:00:00:0b")),
                (1, ip("198.19.0.2"), mac("02:00:00:00:00:02")),
                (0, ip("2001:db8:1::7"), mac("02:00:00:00:00:17")),
            ]
        );
    }
}
