//! The routing information base: the routes the FIB holds and where each
//! came from ([`RouteSource`]). The config's static and connected routes,
//! `sluice ctl`'s edits and the kernel's routes (mirrored through netlink)
//! meet here, with their precedence ([`RouteSource::wins_over`]): a kernel
//! route to a prefix holds it over the config's (as the kernel forwards),
//! and a deleted kernel route gives way to the config's static route
//! again. A link going down cuts the paths
//! through it (a route with none left is withdrawn) and its coming up
//! restores them; a reload reinstalls what the new config and the kernel
//! hold. The management thread owns it (the FIB's one writer);
//! [`crate::netlink`] only listens and turns the kernel's messages into
//! [`Change`]s.

pub use crate::config::RouteSource;
use pipeline::router::{Interface, NeighborUpdate, NextHop};
use pipeline::wire::MacAddr;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// A route as the FIB takes it: prefix, length, paths.
pub type Route = (IpAddr, u8, Vec<NextHop>);

/// A change for the management thread to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A route to add or replace.
    Add(Route),
    /// A prefix the kernel table no longer routes.
    Del(IpAddr, u8),
    /// The whole table (initial dump, or after an overrun): the mirror
    /// becomes exactly this.
    Resync(Vec<Route>),
    /// A kernel neighbour on a port's interface: its MAC, or `None` when
    /// gone (deleted, failed, incomplete).
    Neighbor(u16, IpAddr, Option<[u8; 6]>),
    /// An address on a port's interface added (`true`) or removed.
    Address(u16, IpAddr, u8, bool),
    /// A port's kernel interface went up (`true`: up and with a carrier)
    /// or down.
    Link(u16, bool),
    /// Every neighbour, address and link state of the ports' interfaces
    /// (initial dump, or after an overrun): the mirror becomes exactly
    /// this.
    State(State),
}

/// The ports' kernel interfaces as a dump finds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// (port, address, MAC) of the usable neighbours.
    pub neighbors: Vec<(u16, IpAddr, [u8; 6])>,
    /// (port, address, prefix length).
    pub addresses: Vec<(u16, IpAddr, u8)>,
    /// (port, up) of each interface found.
    pub links: Vec<(u16, bool)>,
}

/// Where a static route stands in the FIB after a change
/// ([`Rib::install_static`], [`Rib::remove_static`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Static {
    /// In the FIB with `live` of its `paths` paths: fewer when some go
    /// through interfaces that are down, none (withdrawn) when all do.
    Installed { live: usize, paths: usize },
    /// Out of the FIB.
    Removed,
    /// The kernel's route to the prefix holds it; the FIB was left alone.
    Kernel,
}

/// The management thread's side: the routes it installed from the kernel,
/// applied to the FIB.
#[derive(Default)]
pub struct Rib {
    routes: HashMap<(IpAddr, u8), Vec<NextHop>>,
    /// Changes the FIB refused (group pool or next-hop slots full).
    pub failed: u64,
    /// The kernel's neighbours on the ports' interfaces.
    pub neighbors: HashMap<(u16, IpAddr), [u8; 6]>,
    /// The addresses on the ports' interfaces.
    pub addresses: std::collections::BTreeSet<(u16, IpAddr, u8)>,
    /// The state of the ports' interfaces (up and with a carrier).
    pub links: BTreeMap<u16, bool>,
    /// Link changes seen.
    pub link_changes: u64,
    /// Neighbour changes not yet sent to the workers.
    neighbor_changes: Vec<(u16, IpAddr, Option<MacAddr>)>,
    /// Addresses or link states changed since the workers last got them.
    readdress: bool,
    /// Static (and connected) routes installed with fewer paths than the
    /// config gives them (or withdrawn), because an interface is down.
    cut: std::collections::HashSet<(IpAddr, u8)>,
}

impl Rib {
    /// Whether a route of a source above `source` (the kernel's) holds
    /// prefix `key` in the FIB: a route from `source` to it stays out.
    fn held_over(&self, key: (IpAddr, u8), source: RouteSource) -> bool {
        RouteSource::Kernel.wins_over(source) && self.routes.contains_key(&key)
    }

    /// The source of the route holding `a/l` in the FIB, of the kernel's
    /// and the config's (`setup`: its static and connected routes, with
    /// `sluice ctl`'s edits); `None` when neither routes it (a route
    /// file's prefix, or none).
    pub fn holder(
        &self,
        a: IpAddr,
        l: u8,
        setup: &crate::config::RouterSetup,
    ) -> Option<RouteSource> {
        let config = setup
            .routes
            .iter()
            .find(|r| (r.addr, r.len) == (a, l))
            .map(|r| r.source);
        let kernel = self
            .routes
            .contains_key(&(a, l))
            .then_some(RouteSource::Kernel);
        [kernel, config].into_iter().flatten().min()
    }

    /// Routes mirrored now.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// True when none are.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// Applies `c` to `fib`; a deleted kernel route gives way to the
    /// config's static route for the same prefix, if there is one (`setup`:
    /// the config's routes and interfaces).
    pub fn apply(
        &mut self,
        c: Change,
        fib: &mut pipeline::fib::FibWriter,
        setup: &crate::config::RouterSetup,
    ) {
        match c {
            Change::Add((a, l, p)) => self.add(a, l, p, fib),
            Change::Del(a, l) => self.del(a, l, fib, setup),
            Change::Neighbor(p, a, m) => self.neighbor(p, a, m),
            Change::Address(p, a, l, add) => {
                self.readdress |= if add {
                    self.addresses.insert((p, a, l))
                } else {
                    self.addresses.remove(&(p, a, l))
                };
            }
            Change::Link(p, up) => {
                self.link_changes += 1;
                if self.links.insert(p, up) != Some(up) {
                    self.relink(fib, setup);
                }
            }
            Change::State(st) => {
                let now: HashMap<(u16, IpAddr), [u8; 6]> =
                    st.neighbors.iter().map(|&(p, a, m)| ((p, a), m)).collect();
                let gone: Vec<_> = self
                    .neighbors
                    .keys()
                    .filter(|k| !now.contains_key(k))
                    .copied()
                    .collect();
                for (p, a) in gone {
                    self.neighbor(p, a, None);
                }
                for ((p, a), m) in now {
                    self.neighbor(p, a, Some(m));
                }
                let addresses = st.addresses.into_iter().collect();
                if addresses != self.addresses {
                    self.addresses = addresses;
                    self.readdress = true;
                }
                let links: BTreeMap<u16, bool> = st.links.into_iter().collect();
                if links != self.links {
                    self.links = links;
                    self.relink(fib, setup);
                }
            }
            Change::Resync(all) => {
                let keep: std::collections::HashSet<(IpAddr, u8)> =
                    all.iter().map(|r| (r.0, r.1)).collect();
                let gone: Vec<_> = self
                    .routes
                    .keys()
                    .filter(|k| !keep.contains(k))
                    .copied()
                    .collect();
                for (a, l) in gone {
                    self.del(a, l, fib, setup);
                }
                // What the FIB holds already is left alone: a resync after
                // an overrun during a full-table load changes a few
                // thousand routes of a million, not the million.
                for (a, l, p) in all {
                    if self.routes.get(&(a, l)) != Some(&p) {
                        self.add(a, l, p, fib);
                    }
                }
            }
        }
        fib.reclaim();
    }

    /// Whether router interface `i` is down: its kernel interface (or its
    /// port's, for a sub-interface) down or without a carrier.
    pub fn is_down(&self, i: u16, base: &[Interface]) -> bool {
        let parent = base
            .get(usize::from(i))
            .and_then(|f| f.vlan)
            .map(|v| v.port);
        [Some(i), parent]
            .into_iter()
            .flatten()
            .any(|j| self.links.get(&j) == Some(&false))
    }

    /// The paths of static route `r` through interfaces that are up.
    fn live_paths(&self, r: &crate::config::Route, base: &[Interface]) -> Vec<NextHop> {
        r.paths
            .iter()
            .filter(|h| !self.is_down(h.port, base))
            .copied()
            .collect()
    }

    /// Installs static route `r` with the paths that are up (withdrawn if
    /// none is), as the kernel drops the routes through a downed
    /// interface: a less specific route (a default through another port)
    /// then carries its traffic. A kernel route for the prefix wins, and
    /// the FIB is left alone. `Err`: the FIB refused it (group pool or
    /// next-hop slots full).
    pub fn install_static(
        &mut self,
        r: &crate::config::Route,
        fib: &mut pipeline::fib::FibWriter,
        base: &[Interface],
    ) -> Result<Static, String> {
        let key = (r.addr, r.len);
        if self.held_over(key, r.source) {
            return Ok(Static::Kernel);
        }
        let live = self.live_paths(r, base);
        if live.len() == r.paths.len() {
            self.cut.remove(&key);
        } else {
            self.cut.insert(key);
        }
        if live.is_empty() {
            fib.del(r.addr, r.len);
        } else {
            fib.add(r.addr, r.len, &live).map_err(|e| e.to_string())?;
        }
        Ok(Static::Installed {
            live: live.len(),
            paths: r.paths.len(),
        })
    }

    /// Takes the static route to `a/l` out of the FIB, unless the kernel's
    /// route to the prefix holds it there.
    pub fn remove_static(
        &mut self,
        a: IpAddr,
        l: u8,
        fib: &mut pipeline::fib::FibWriter,
    ) -> Static {
        if self.held_over((a, l), RouteSource::Ctl) {
            return Static::Kernel;
        }
        self.cut.remove(&(a, l));
        fib.del(a, l);
        Static::Removed
    }

    /// [`Rib::install_static`] for a change the kernel made (a link,
    /// a withdrawn kernel route): a refusal is counted in `failed`.
    fn restore_static(
        &mut self,
        r: &crate::config::Route,
        fib: &mut pipeline::fib::FibWriter,
        base: &[Interface],
    ) {
        if self.install_static(r, fib, base).is_err() {
            self.failed += 1;
        }
    }

    /// After the config's routes were installed afresh (a reload): those
    /// through interfaces that are down are cut.
    fn restatic(&mut self, fib: &mut pipeline::fib::FibWriter, setup: &crate::config::RouterSetup) {
        if self.links.values().any(|up| !up) {
            self.relink(fib, setup);
        }
    }

    /// After a link change: the workers get the interfaces' states, and
    /// every static route through a changed interface is installed again
    /// with the paths that are up.
    fn relink(&mut self, fib: &mut pipeline::fib::FibWriter, setup: &crate::config::RouterSetup) {
        self.readdress = true;
        for r in &setup.routes {
            let through_down = r
                .paths
                .iter()
                .any(|h| self.is_down(h.port, &setup.interfaces));
            if through_down || self.cut.contains(&(r.addr, r.len)) {
                self.restore_static(r, fib, &setup.interfaces);
            }
        }
    }

    fn neighbor(&mut self, p: u16, a: IpAddr, m: Option<[u8; 6]>) {
        let old = match m {
            Some(m) => self.neighbors.insert((p, a), m),
            None => self.neighbors.remove(&(p, a)),
        };
        if old != m {
            self.neighbor_changes.push((p, a, m.map(MacAddr)));
        }
    }

    /// The neighbour changes for the workers since the last call.
    pub fn take_neighbors(&mut self) -> Option<NeighborUpdate> {
        if self.neighbor_changes.is_empty() {
            return None;
        }
        Some(NeighborUpdate(
            std::mem::take(&mut self.neighbor_changes).into(),
        ))
    }

    /// True once after the addresses changed: the workers need
    /// [`Rib::interfaces`].
    pub fn take_readdress(&mut self) -> bool {
        std::mem::take(&mut self.readdress)
    }

    /// The router's interfaces: the config's (`base`), with the kernel's
    /// addresses on each port added, and those that are down marked.
    pub fn interfaces(&self, base: &[Interface]) -> Vec<Interface> {
        let mut out = base.to_vec();
        for (i, f) in out.iter_mut().enumerate() {
            f.down = self.is_down(i as u16, base);
        }
        for &(p, a, l) in &self.addresses {
            let Some(i) = out.get_mut(usize::from(p)) else {
                continue;
            };
            match a {
                IpAddr::V4(v) if !i.ipv4.iter().any(|x| x.0 == v) => i.ipv4.push((v, l)),
                IpAddr::V6(v) if !i.ipv6.iter().any(|x| x.0 == v) => i.ipv6.push((v, l)),
                _ => {}
            }
        }
        out
    }

    /// Puts every mirrored route into a new FIB (after a reload rebuilt it
    /// from the config, whose static routes through interfaces that are
    /// down are cut again). The kernel's addresses and the links' states
    /// are sent to the workers again too (the reload gave them the
    /// config's).
    pub fn reinstall(
        &mut self,
        fib: &mut pipeline::fib::FibWriter,
        setup: &crate::config::RouterSetup,
    ) {
        self.readdress |= !self.addresses.is_empty();
        for ((a, l), p) in &self.routes {
            if fib.add(*a, *l, p).is_err() {
                self.failed += 1;
            }
        }
        self.cut.clear();
        self.restatic(fib, setup);
    }

    fn add(&mut self, a: IpAddr, l: u8, p: Vec<NextHop>, fib: &mut pipeline::fib::FibWriter) {
        match fib.add(a, l, &p) {
            Ok(_) => {
                self.routes.insert((a, l), p);
            }
            Err(_) => self.failed += 1,
        }
    }

    fn del(
        &mut self,
        a: IpAddr,
        l: u8,
        fib: &mut pipeline::fib::FibWriter,
        setup: &crate::config::RouterSetup,
    ) {
        if self.routes.remove(&(a, l)).is_none() {
            return;
        }
        match setup.routes.iter().find(|r| (r.addr, r.len) == (a, l)) {
            Some(r) => self.restore_static(r, fib, &setup.interfaces),
            None => {
                fib.del(a, l);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Route as Static, RouterSetup};
    use pipeline::router::Vlan;

    fn hop(port: u16, via: Option<&str>) -> NextHop {
        NextHop {
            port,
            via: via.map(|v| v.parse().unwrap()),
        }
    }

    fn route(p: &str, len: u8, paths: Vec<NextHop>) -> Static {
        Static {
            addr: p.parse().unwrap(),
            len,
            source: if paths[0].via.is_none() {
                RouteSource::Connected
            } else {
                RouteSource::Config
            },
            paths,
        }
    }

    /// Ports 0 and 1 and VLAN 100 on port 1 (interface 2); connected
    /// routes on each, a default via port 0, an ECMP route over both
    /// ports, a route via the sub-interface.
    fn setup() -> RouterSetup {
        let iface = |a: &str, vlan| Interface {
            ipv4: vec![(a.parse().unwrap(), 24)],
            mtu: 1500,
            vlan,
            ..Default::default()
        };
        RouterSetup {
            interfaces: vec![
                iface("198.18.0.1", None),
                iface("198.19.0.1", None),
                iface(
                    "198.19.100.1",
                    Some(Vlan {
                        port: 1,
                        outer: None,
                        id: 100,
                    }),
                ),
            ],
            routes: vec![
                route("198.18.0.0", 24, vec![hop(0, None)]),
                route("198.19.0.0", 24, vec![hop(1, None)]),
                route("198.19.100.0", 24, vec![hop(2, None)]),
                route("0.0.0.0", 0, vec![hop(0, Some("198.18.0.2"))]),
                route(
                    "203.0.113.0",
                    24,
                    vec![hop(0, Some("198.18.0.3")), hop(1, Some("198.19.0.3"))],
                ),
                route("192.0.2.0", 24, vec![hop(2, Some("198.19.100.3"))]),
            ],
            ..Default::default()
        }
    }

    fn paths(fib: &pipeline::fib::FibWriter, a: &str) -> Vec<NextHop> {
        fib.lookup(a.parse().unwrap()).unwrap_or_default().to_vec()
    }

    /// A port whose kernel interface goes down loses its routes as the
    /// kernel's do (connected and static, its sub-interfaces' too; an
    /// ECMP route keeps its other path; the default then carries the
    /// traffic), the workers are told it is down, and it all comes back
    /// when it is up again. A kernel route for a prefix wins over the
    /// static one and, when withdrawn, gives way to what is left of it.
    #[test]
    fn a_link_down_cuts_the_routes_through_it_and_up_restores_them() {
        let s = setup();
        let all: Vec<_> = s
            .routes
            .iter()
            .map(|r| (r.addr, r.len, r.paths.clone()))
            .collect();
        let mut fib = pipeline::fib::FibWriter::build(&all).unwrap();
        let mut m = Rib::default();
        // A full dump finding every interface up.
        let all_up = || {
            Change::State(State {
                links: vec![(0, true), (1, true), (2, true)],
                ..Default::default()
            })
        };
        let whole = |fib: &pipeline::fib::FibWriter| {
            assert_eq!(paths(fib, "198.19.0.9"), vec![hop(1, None)]);
            assert_eq!(paths(fib, "198.19.100.9"), vec![hop(2, None)]);
            assert_eq!(paths(fib, "203.0.113.9").len(), 2);
            assert_eq!(paths(fib, "192.0.2.9"), vec![hop(2, Some("198.19.100.3"))]);
        };
        m.apply(all_up(), &mut fib, &s);
        whole(&fib);
        assert!(m.interfaces(&s.interfaces).iter().all(|i| !i.down));

        m.apply(Change::Link(1, false), &mut fib, &s);
        let default = vec![hop(0, Some("198.18.0.2"))];
        assert_eq!(paths(&fib, "198.19.0.9"), default, "connected route gone");
        assert_eq!(paths(&fib, "198.19.100.9"), default, "sub-interface's too");
        assert_eq!(paths(&fib, "192.0.2.9"), default);
        assert_eq!(
            paths(&fib, "203.0.113.9"),
            vec![hop(0, Some("198.18.0.3"))],
            "the ECMP route keeps its live path"
        );
        let down: Vec<bool> = m.interfaces(&s.interfaces).iter().map(|i| i.down).collect();
        assert_eq!(down, [false, true, true]);
        assert!(m.take_readdress(), "the workers are told");

        // A kernel route for the ECMP prefix wins; withdrawn, the static
        // route comes back with its live path only.
        let k = hop(0, Some("198.18.0.4"));
        m.apply(
            Change::Add(("203.0.113.0".parse().unwrap(), 24, vec![k])),
            &mut fib,
            &s,
        );
        assert_eq!(paths(&fib, "203.0.113.9"), vec![k]);
        let net: IpAddr = "203.0.113.0".parse().unwrap();
        assert_eq!(m.holder(net, 24, &s), Some(RouteSource::Kernel));
        m.apply(
            Change::Del("203.0.113.0".parse().unwrap(), 24),
            &mut fib,
            &s,
        );
        assert_eq!(paths(&fib, "203.0.113.9"), vec![hop(0, Some("198.18.0.3"))]);
        assert_eq!(m.holder(net, 24, &s), Some(RouteSource::Config));
        let connected: IpAddr = "198.18.0.0".parse().unwrap();
        assert_eq!(m.holder(connected, 24, &s), Some(RouteSource::Connected));

        // A full dump that finds it up again restores everything.
        m.apply(all_up(), &mut fib, &s);
        whole(&fib);
        assert!(m.interfaces(&s.interfaces).iter().all(|i| !i.down));

        // The sub-interface alone down: the port keeps its routes.
        m.apply(Change::Link(2, false), &mut fib, &s);
        assert_eq!(paths(&fib, "198.19.0.9"), vec![hop(1, None)]);
        assert_eq!(paths(&fib, "192.0.2.9"), default);
        m.apply(Change::Link(2, true), &mut fib, &s);
        whole(&fib);
        assert_eq!(m.failed, 0);
    }
}
