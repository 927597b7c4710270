//! `sluice ctl route add|del` and `neighbor add|del`: changes to the
//! running routes and neighbours, validated exactly as the config is (an
//! added route or neighbour is a `[[route]]` or `[[neighbor]]` table added
//! to the text the running config came from, so it gets the same checks
//! and errors), and installed as a reload installs (the tables built
//! aside, each worker switching between two bursts). Like `ip route add`
//! beside a configuration file, they last until the next reload or
//! restart, which go back to the file.

use crate::config::{self, Config};
use crate::netlink::{Mirrored, Static};
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
    /// Tables added (`[[route]]`, `[[neighbor]]`), in order.
    adds: Vec<(Target, String)>,
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

/// The config `args` (`route ...` / `neighbor ...`) would make of `cur`,
/// and the edits with it; `cur` and `edits` are left as they were.
pub fn apply(args: &[String], cur: &Config, edits: &Edits) -> Result<(Config, Edits), String> {
    let mut e = edits.clone();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["route", "add", prefix, rest @ ..] => {
            let mut t = format!("\n[[route]]\nprefix = \"{}\"\n", word(prefix)?);
            match rest {
                ["via", via] => t += &format!("via = \"{}\"\n", word(via)?),
                ["via", via, "port", port] => {
                    t += &format!("via = \"{}\"\nport = \"{}\"\n", word(via)?, word(port)?)
                }
                ["port", port] => t += &format!("port = \"{}\"\n", word(port)?),
                _ => return Err("route add PREFIX via ADDR [port P] | route add PREFIX port P".into()),
            }
            let p = pipeline::prefix::parse(prefix)
                .ok_or_else(|| format!("`{prefix}` is not a prefix such as 10.0.0.0/8"))?;
            if cur.router.routes.iter().any(|r| (r.addr, r.len) == p) {
                return Err(format!(
                    "a route to {prefix} exists; `route del {prefix}` first"
                ));
            }
            e.adds.push((Target::Route(p.0, p.1), t));
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
        }
        ["neighbor" | "neighbour", "add", ip, mac, "port", port] => {
            let a: IpAddr = ip
                .parse()
                .map_err(|_| format!("`{ip}` is not an address"))?;
            if cur.router.neighbors.iter().any(|(_, n, _)| *n == a) {
                return Err(format!("neighbour {ip} exists; `neighbor del {ip}` first"));
            }
            let t = format!(
                "\n[[neighbor]]\nip = \"{}\"\nmac = \"{}\"\nport = \"{}\"\n",
                word(ip)?,
                word(mac)?,
                word(port)?
            );
            e.adds.push((Target::Neighbor(a), t));
        }
        ["neighbor" | "neighbour", "del", ip] => {
            let a: IpAddr = ip
                .parse()
                .map_err(|_| format!("`{ip}` is not an address"))?;
            if !cur.router.neighbors.iter().any(|(_, n, _)| *n == a) {
                return Err(format!("no static neighbour {ip}"));
            }
            e.delete(Target::Neighbor(a));
        }
        _ => {
            return Err(
                "route add PREFIX via ADDR [port P] | route add PREFIX port P | route del PREFIX | neighbor add ADDR MAC port P | neighbor del ADDR"
                    .into(),
            )
        }
    }
    let mut text = format!("{}\n", e.file_text);
    for (_, t) in &e.adds {
        text += t;
    }
    let file_lines = e.file_text.lines().count() + 1;
    let mut new = config::parse_edit(&text, cur, &e.dropped).map_err(|errs| {
        // Errors in the change name its key; errors in the file (which
        // loaded before) would be a bug, and keep their place.
        errs.0
            .iter()
            .map(|x| {
                if x.line > file_lines {
                    format!("key `{}`: {}", x.key, x.msg)
                } else {
                    x.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    // The running config's text stays the file's; the poll policies stay
    // those running (`set poll`), which only a reload puts back.
    new.text = e.file_text.clone();
    for (n, c) in new.workers.iter_mut().zip(&cur.workers) {
        n.poll = c.poll.clone();
    }
    Ok((new, e))
}

/// Installs a `route add|del` that [`apply`] accepted (`new` is the config
/// it made) into the running FIB in place: no rebuild, workers keep
/// forwarding and see the change from their next poll round. `None` when
/// the change is not one it can make in place (neighbours; deleting a
/// static route that hid a route-file route, which must come back): then
/// it is installed as a reload installs. It goes in as the config's
/// static routes do (`mirrored`, [`Mirrored::install_static`]): a prefix
/// the kernel's table routes keeps the kernel's route (the change is
/// recorded, and takes effect if the kernel withdraws its route), and
/// paths through interfaces that are down wait for them to come up. The
/// answer says which.
pub fn route_in_place(
    args: &[String],
    new: &Config,
    fib: Option<&mut pipeline::fib::FibWriter>,
    mirrored: &mut Mirrored,
) -> Option<Result<String, String>> {
    let fib = fib?;
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let (verb, prefix) = match words.as_slice() {
        ["route", verb @ ("add" | "del"), prefix, ..] => (*verb, *prefix),
        _ => return None,
    };
    let (addr, len) = pipeline::prefix::parse(prefix)?;
    let done = if verb == "add" {
        let r = new
            .router
            .routes
            .iter()
            .find(|r| (r.addr, r.len) == (addr, len))?;
        mirrored
            .install_static(r, fib, &new.router.interfaces)
            .map_err(|e| format!("{prefix}: {e}"))
    } else {
        if new.router.file_routes.contains(&(addr, len)) {
            return None;
        }
        Ok(mirrored.remove_static(addr, len, fib))
    };
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
