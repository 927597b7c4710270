//! Router settings: interface addresses (on `[[port]]`), static routes,
//! static neighbours, and an optional route file.

use super::schema::{RawNeighbor, RawRoute, RawRouter};
use super::typed::{in_prefix4, PathRefused, Route, RouteSource, RouterSetup};
use super::{Ctx, Prefix, Str};
use pipeline::prefix;
use pipeline::router::{Interface, NextHop, Vlan};
use pipeline::wire::MacAddr;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use toml::Spanned;

/// What the router needs of one `[[port]]` or `[[vlan]]`.
pub(super) struct PortAddrs<'a> {
    /// `port[i]` or `vlan[i]`: where errors point.
    pub key: String,
    pub name: &'a str,
    /// A sub-interface's port and tags.
    pub vlan: Option<Vlan>,
    pub mac: MacAddr,
    pub ipv4: &'a [Str<Prefix<Ipv4Addr>>],
    pub ipv6: &'a [Str<Prefix<Ipv6Addr>>],
    pub mtu: Option<&'a Spanned<u16>>,
    /// Its `ra` table (Router Advertisements).
    pub ra: Option<&'a Spanned<super::schema::RawRa>>,
    /// Where the port's `ipv4` (or, without one, its name) is written.
    pub at: Spanned<()>,
}

impl PortAddrs<'_> {
    fn span_of_ipv4(&self) -> &Spanned<()> {
        &self.at
    }
}

/// Whether `a` is the network or the broadcast address of its /`len`
/// subnet (which /31 and /32 do not have, RFC 3021).
fn subnet_edge(a: Ipv4Addr, len: u8) -> Option<&'static str> {
    if len > 30 {
        return None;
    }
    let host_mask = !prefix::mask4(len);
    match u32::from(a) & host_mask {
        0 => Some("network"),
        h if h == host_mask => Some("broadcast"),
        _ => None,
    }
}

/// `a` with the host bits of a /`len` cleared.
fn mask_ip(a: IpAddr, len: u8) -> IpAddr {
    match a {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & prefix::mask4(len))),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & prefix::mask6(len))),
    }
}

/// Checks the router settings; `ports[i]` is port i's.
pub(super) fn check(
    cx: &mut Ctx<'_>,
    raw: &RawRouter,
    routes: &[RawRoute],
    neighbors: &[RawNeighbor],
    ports: &[PortAddrs<'_>],
    base: Option<&Path>,
) -> RouterSetup {
    let names: BTreeMap<&str, u16> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name, i as u16))
        .collect();
    let mut s = RouterSetup {
        icmp_rate: raw.icmp_rate.as_ref().map_or(1000, |r| *r.get_ref()),
        neighbor_timeout: std::time::Duration::from_secs(
            raw.neighbor_timeout_s
                .as_ref()
                .map_or(300, |t| *t.get_ref())
                .min(super::typed::MAX_TIMEOUT_S),
        ),
        ..RouterSetup::default()
    };
    if let Some(t) = &raw.neighbor_timeout_s {
        if !(1..=super::typed::MAX_TIMEOUT_S).contains(t.get_ref()) {
            cx.err(
                t,
                "router.neighbor_timeout_s",
                format!(
                    "must be 1 to {} seconds (30 days); got {}",
                    super::typed::MAX_TIMEOUT_S,
                    t.get_ref()
                ),
            );
        }
    }
    for (i, a) in ports.iter().enumerate() {
        // A sub-interface's MTU is its port's unless it says.
        let mtu = a
            .mtu
            .or_else(|| a.vlan.and_then(|v| ports[usize::from(v.port)].mtu))
            .map_or(1500, |m| *m.get_ref());
        if let Some(m) = a.mtu {
            if !(68..=9000).contains(m.get_ref()) {
                cx.err(m, format!("{}.mtu", a.key), "must be 68..=9000 bytes");
            }
        }
        let ipv4: Vec<(Ipv4Addr, u8)> = a.ipv4.iter().map(|p| (p.0.addr, p.0.len)).collect();
        // A host address, not the subnet's network or broadcast address
        // (/31 and /32 have neither, RFC 3021).
        for &(x, l) in &ipv4 {
            if let Some(what) = subnet_edge(x, l) {
                let first = mask_ip(IpAddr::V4(x), l);
                let IpAddr::V4(first) = first else { continue };
                cx.err(
                    a.span_of_ipv4(),
                    format!("{}.ipv4", a.key),
                    format!("{x}/{l} is the {what} address of its subnet; give the interface a host address (such as {}/{l})", Ipv4Addr::from(u32::from(first) + 1)),
                );
            }
        }
        // No two connected subnets overlap (on one port or two): the
        // router could not tell which interface an address is on.
        for &(x, l) in &ipv4 {
            for (j, other) in s.interfaces.iter().enumerate() {
                if let Some(&(y, m)) = other
                    .ipv4
                    .iter()
                    .find(|&&(y, m)| in_prefix4(y, m.min(l), x) && in_prefix4(x, m.min(l), y))
                {
                    cx.err(
                        a.span_of_ipv4(),
                        format!("{}.ipv4", a.key),
                        format!("{x}/{l} overlaps {y}/{m} of port `{}`: connected subnets must not overlap", ports[j].name),
                    );
                }
            }
        }
        for (k, &(x, l)) in ipv4.iter().enumerate() {
            if let Some(&(y, m)) = ipv4[..k].iter().find(|&&(y, m)| in_prefix4(y, m.min(l), x)) {
                cx.err(
                    a.span_of_ipv4(),
                    format!("{}.ipv4", a.key),
                    format!("{x}/{l} overlaps {y}/{m} on the same port"),
                );
            }
        }
        let ipv6: Vec<(Ipv6Addr, u8)> = a.ipv6.iter().map(|p| (p.0.addr, p.0.len)).collect();
        // Nor the Subnet-Router anycast address (all-zero host part, RFC
        // 4291 2.6.1) for IPv6.
        for &(x, l) in &ipv6 {
            let host = u128::from(x)
                & if l == 0 {
                    u128::MAX
                } else {
                    !(u128::MAX << (128 - u32::from(l)))
                };
            if l <= 126 && host == 0 {
                cx.err(
                    &a.at,
                    format!("{}.ipv6", a.key),
                    format!("{x}/{l} is its subnet's Subnet-Router anycast address; give the interface a host address (such as {}/{l})", Ipv6Addr::from(u128::from(x) + 1)),
                );
            }
        }
        for &(x, l) in &ipv4 {
            s.routes.push(Route {
                addr: IpAddr::V4(x),
                len: l,
                paths: vec![NextHop {
                    port: i as u16,
                    via: None,
                }],
                source: RouteSource::Connected,
            });
        }
        for &(x, l) in &ipv6 {
            s.routes.push(Route {
                addr: IpAddr::V6(x),
                len: l,
                paths: vec![NextHop {
                    port: i as u16,
                    via: None,
                }],
                source: RouteSource::Connected,
            });
        }
        s.interfaces.push(Interface {
            mac: a.mac,
            ipv4,
            ipv6,
            mtu,
            vlan: a.vlan,
            down: false,
        });
        s.names.push(a.name.to_string());
    }
    // Where each prefix's route is in `s.routes` (a config or its edits
    // may have thousands: no scan per route).
    let mut at = std::collections::HashMap::<(IpAddr, u8), usize>::new();
    for (i, x) in s.routes.iter().enumerate() {
        at.entry((mask_ip(x.addr, x.len), x.len)).or_insert(i);
    }
    for (ri, r) in routes.iter().enumerate() {
        let k = |f: &str| format!("route[{ri}].{f}");
        let Some((addr, len, hop)) = check_route(cx, &s, &names, ri, r) else {
            continue;
        };
        // The same prefix twice: identical is redundant, another next hop
        // is one more equal-cost path (ECMP), as `ip route add ... nexthop
        // via A nexthop via B` makes one. (`addr` has no host bits:
        // `check_route` refuses them.)
        if let Some(prev) = at.get(&(addr, len)).map(|&i| &mut s.routes[i]) {
            match prev.add_path(hop) {
                Ok(()) => {}
                Err(PathRefused::Twice) => {
                    cx.warn(&r.prefix, k("prefix"), PathRefused::Twice.msg(addr, len))
                }
                Err(why) => cx.err(&r.prefix, k("prefix"), why.msg(addr, len)),
            }
            continue;
        }
        at.insert((addr, len), s.routes.len());
        // A table after the file's text is a `sluice ctl` edit's.
        let edit = cx
            .dropped
            .is_some_and(|d| r.prefix.span().start >= d.file_end);
        s.routes.push(Route {
            addr,
            len,
            paths: vec![hop],
            source: if edit {
                RouteSource::Ctl
            } else {
                RouteSource::Config
            },
        });
    }
    for (ni, n) in neighbors.iter().enumerate() {
        if cx
            .dropped
            .is_some_and(|d| d.neighbor(n.ip.span().start, *n.ip.get_ref()))
        {
            continue;
        }
        if let Some(x) = check_neighbor(cx, &s, &names, ni, n, &s.neighbors) {
            s.neighbors.push(x);
        }
    }
    if let Some(f) = &raw.route_file {
        let path = super::files::beside(base, f.get_ref());
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for v in &raw.route_file_via {
            match s.port_of(*v.get_ref()) {
                Some(port) => {
                    let nh = NextHop {
                        port,
                        via: Some(*v.get_ref()),
                    };
                    if v.get_ref().is_ipv4() {
                        v4.push(nh);
                    } else {
                        v6.push(nh);
                    }
                }
                None => cx.err(
                    v,
                    "router.route_file_via",
                    format!("gateway {} is on no interface's subnet", v.get_ref()),
                ),
            }
        }
        if v4.is_empty() && v6.is_empty() {
            cx.err(
                f,
                "router.route_file",
                "needs `route_file_via`: gateways to spread its prefixes over",
            );
        }
        let read = match cx.reuse.map(|c| &c.router) {
            Some(r) if r.route_file.as_ref().is_some_and(|f| f.0 == path) => {
                Ok(r.file_routes.clone())
            }
            _ => read_route_file(&path).map(Into::into),
        };
        match read {
            Ok(routes) => {
                let n6 = routes.iter().filter(|(a, _)| a.is_ipv6()).count();
                let n4 = routes.len() - n6;
                for (n, fam, via) in [(n4, "IPv4", &v4), (n6, "IPv6", &v6)] {
                    if n > 0 && via.is_empty() && !(v4.is_empty() && v6.is_empty()) {
                        cx.warn(
                            f,
                            "router.route_file",
                            format!(
                                "{n} {fam} prefixes of {} are not used: `route_file_via` has no {fam} gateway",
                                path.display()
                            ),
                        );
                    }
                }
                s.file_routes = routes;
            }
            Err(e) => cx.err(f, "router.route_file", e),
        }
        s.route_file = Some((path, v4, v6));
    }
    s
}

/// Checks `route[ri]` against the interfaces of `s` (its connected
/// routes and names; `names` maps a name to its interface): the prefix,
/// its next hop (`None` with the errors in `cx`, or for a route of the
/// file that an edit deleted). Whether the prefix is routed already is
/// the caller's to decide.
pub(super) fn check_route(
    cx: &mut Ctx<'_>,
    s: &RouterSetup,
    names: &BTreeMap<&str, u16>,
    ri: usize,
    r: &RawRoute,
) -> Option<(IpAddr, u8, NextHop)> {
    let k = |f: &str| format!("route[{ri}].{f}");
    let Some((addr, len)) = prefix::parse(r.prefix.get_ref()) else {
        cx.err(
            &r.prefix,
            k("prefix"),
            format!(
                "`{}` is not a prefix such as 203.0.113.0/24",
                r.prefix.get_ref()
            ),
        );
        return None;
    };
    if cx
        .dropped
        .is_some_and(|d| d.route(r.prefix.span().start, (addr, len)))
    {
        return None;
    }
    // As `ip route` refuses them: host bits past the prefix length
    // mean the prefix is not what was meant.
    if mask_ip(addr, len) != addr {
        cx.err(
            &r.prefix,
            k("prefix"),
            format!(
                "`{}` has host bits set: the prefix is {}/{len}",
                r.prefix.get_ref(),
                mask_ip(addr, len)
            ),
        );
        return None;
    }
    let via = r.via.as_ref().map(|v| *v.get_ref());
    // A gateway is a host: not the network or broadcast address of
    // the subnet it is on.
    if let Some(IpAddr::V4(v)) = via {
        let edge = s
            .interfaces
            .iter()
            .flat_map(|i| &i.ipv4)
            .find(|&&(n, l)| in_prefix4(n, l, v) && subnet_edge(v, l).is_some());
        if let Some(&(n, l)) = edge {
            let at = r.via.as_ref().map_or(r.prefix.span(), |s| s.span());
            cx.err(
                &Spanned::new(at, ()),
                k("via"),
                format!(
                    "{v} is the network or broadcast address of {}/{l}, not a gateway",
                    mask_ip(IpAddr::V4(n), l)
                ),
            );
            return None;
        }
    }
    if let Some(v) = &r.via {
        if v.get_ref().is_ipv4() != addr.is_ipv4() {
            cx.err(
                v,
                k("via"),
                "gateway and prefix must be the same IP version",
            );
            return None;
        }
    }
    if let Some(v) = via {
        if s.is_local(v) {
            let at = r.via.as_ref().map_or(r.prefix.span(), |s| s.span());
            cx.err(
                &Spanned::new(at, ()),
                k("via"),
                format!("{v} is the router's own address, not a gateway"),
            );
            return None;
        }
    }
    let port = match (&r.port, via) {
        (Some(p), _) => match names.get(p.get_ref().as_str()) {
            Some(&i) => {
                // A gateway the port cannot reach (IPv6 link-local
                // gateways are on every link, and need `port`).
                let link_local =
                    matches!(via, Some(IpAddr::V6(a)) if a.segments()[0] & 0xffc0 == 0xfe80);
                if let Some(v) = via.filter(|_| !link_local) {
                    if s.port_of(v) != Some(i) {
                        let on = s
                            .port_of(v)
                            .map_or("no interface's subnet".to_string(), |o| {
                                format!("port `{}`", s.names[usize::from(o)])
                            });
                        cx.err(
                            p,
                            k("port"),
                            format!("gateway {v} is on {on}, not on port `{}`: the route contradicts its own `port`", p.get_ref()),
                        );
                        return None;
                    }
                }
                i
            }
            None => {
                cx.err(
                    p,
                    k("port"),
                    format!("port `{}` does not exist", p.get_ref()),
                );
                return None;
            }
        },
        (None, Some(v)) => match s.port_of(v) {
            Some(i) => i,
            None => {
                let at = r.via.as_ref().map_or(r.prefix.span(), |s| s.span());
                cx.err(
                    &Spanned::new(at, ()),
                    k("via"),
                    format!("gateway {v} is on no interface's subnet; set `port`"),
                );
                return None;
            }
        },
        (None, None) => {
            cx.err(&r.prefix, k("prefix"), "a route needs `via` or `port`");
            return None;
        }
    };
    Some((addr, len, NextHop { port, via }))
}

/// The route of `r`, a table added to the config `s` was checked from
/// (`sluice ctl route add`), checked as the file's `route[ri]` would be:
/// the prefix must not be one of its interfaces' subnets (a connected
/// route has no other paths). Whether a static route to it may be added
/// to or replaced is the caller's to decide.
pub(super) fn check_added(
    cx: &mut Ctx<'_>,
    s: &RouterSetup,
    ri: usize,
    r: &RawRoute,
) -> Option<Route> {
    let (addr, len, hop) = check_route(cx, s, &s.name_map(), ri, r)?;
    let connected = s.interfaces.iter().any(|i| match addr {
        IpAddr::V4(_) => i
            .ipv4
            .iter()
            .any(|&(x, l)| (mask_ip(IpAddr::V4(x), l), l) == (addr, len)),
        IpAddr::V6(_) => i
            .ipv6
            .iter()
            .any(|&(x, l)| (mask_ip(IpAddr::V6(x), l), l) == (addr, len)),
    });
    if connected {
        cx.err(
            &r.prefix,
            format!("route[{ri}].prefix"),
            PathRefused::Connected.msg(addr, len),
        );
        return None;
    }
    Some(Route {
        addr,
        len,
        paths: vec![hop],
        source: RouteSource::Config,
    })
}

/// Neighbour `ni` of the config (`n`) checked against the router's
/// interfaces and addresses in `s` and the neighbours before it
/// (`before`): its entry (port, address, MAC), unless its port does not
/// exist; errors (an address off its port's subnets, the router's own, or
/// listed before on the port with another MAC) go to `cx`.
pub(super) fn check_neighbor(
    cx: &mut Ctx<'_>,
    s: &RouterSetup,
    names: &BTreeMap<&str, u16>,
    ni: usize,
    n: &RawNeighbor,
    before: &[(u16, IpAddr, MacAddr)],
) -> Option<(u16, IpAddr, MacAddr)> {
    let Some(&p) = names.get(n.port.get_ref().as_str()) else {
        cx.err(
            &n.port,
            format!("neighbor[{ni}].port"),
            format!("port `{}` does not exist", n.port.get_ref()),
        );
        return None;
    };
    let ip = *n.ip.get_ref();
    let link_local = matches!(ip, IpAddr::V6(a) if a.segments()[0] & 0xffc0 == 0xfe80);
    if !link_local && s.port_of(ip) != Some(p) {
        cx.err(
            &n.ip,
            format!("neighbor[{ni}].ip"),
            format!(
                "{ip} is not on a subnet of port `{}`: a neighbour must be reachable on its port",
                n.port.get_ref()
            ),
        );
    } else if s.is_local(ip) {
        cx.err(
            &n.ip,
            format!("neighbor[{ni}].ip"),
            format!("{ip} is the router's own address"),
        );
    } else if before
        .iter()
        .any(|&(q, a, m)| q == p && a == ip && m != n.mac.0)
    {
        cx.err(
            &n.ip,
            format!("neighbor[{ni}].ip"),
            format!(
                "{ip} is listed twice on port `{}` with different MACs",
                n.port.get_ref()
            ),
        );
    }
    Some((p, ip, n.mac.0))
}

/// An added neighbour (`ctl neighbor add|replace`) checked as the file's
/// are against the running router `s`, whose neighbours with its address
/// the edit deletes first (so none is listed before it).
pub(super) fn check_added_neighbor(
    cx: &mut Ctx<'_>,
    s: &RouterSetup,
    n: &RawNeighbor,
) -> Option<(u16, IpAddr, MacAddr)> {
    check_neighbor(cx, s, &s.name_map(), 0, n, &[])
}

/// Reads a route file: one route per line, its first field a prefix
/// (`203.0.113.0/24`, or an address for a host route); the rest of the
/// line (`via ... dev ...` as `ip route` prints it, or a BIRD dump's
/// columns) and `#` comments are ignored, as are blank lines; plain or
/// gzip-compressed (by content, whatever the name). The error names the
/// file and line.
/// The longest line a route file may have.
const MAX_LINE: usize = 4096;

pub(crate) fn read_route_file(path: &Path) -> Result<Vec<(IpAddr, u8)>, String> {
    use std::io::{BufRead, BufReader, Read};
    let shown = path.display();
    // A regular file (a device or pipe could block or never end; a
    // missing one is reported there); the full table is about 10 MB
    // gzipped.
    let open_err = |e: std::io::Error| format!("cannot read route file {shown}: {e}");
    // One open: the first two bytes say whether it is gzip, then back to
    // the start.
    let mut f = super::files::open_regular(path, "route file", 1 << 30)?;
    let mut magic = [0u8; 2];
    let gz = f.read(&mut magic).map_err(open_err)? == 2 && magic == [0x1f, 0x8b];
    std::io::Seek::rewind(&mut f).map_err(open_err)?;
    let r: Box<dyn Read> = if gz {
        Box::new(flate2::read::MultiGzDecoder::new(f))
    } else {
        Box::new(f)
    };
    let mut out = Vec::new();
    let mut line = Vec::new();
    let mut r = BufReader::with_capacity(1 << 16, r);
    for n in 1.. {
        line.clear();
        // Lines are read with a bound: a file without line breaks (or a
        // decompression bomb of them) ends in an error, not in memory.
        match (&mut r)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                return Err(format!(
                    "route file {shown}: unreadable after line {}: {e}{}",
                    n - 1,
                    if gz {
                        " (a corrupt or truncated gzip file?)"
                    } else {
                        ""
                    }
                ))
            }
        }
        if line.len() > MAX_LINE {
            return Err(format!(
                "{shown}:{n}: a line of more than {MAX_LINE} bytes (a route file has one prefix per line)"
            ));
        }
        let Ok(text) = std::str::from_utf8(&line) else {
            return Err(format!(
                "{shown}:{n}: not text (a route file has one prefix per line{})",
                if gz {
                    ""
                } else {
                    "; gzip files are recognised by their content"
                }
            ));
        };
        let text = text.split('#').next().unwrap_or("");
        let Some(first) = text.split_whitespace().next() else {
            continue;
        };
        let p = match first.parse::<IpAddr>() {
            Ok(a) => Some((a, if a.is_ipv4() { 32 } else { 128 })),
            Err(_) => prefix::parse(first),
        };
        match p {
            Some(p) => out.push(p),
            None => {
                return Err(format!(
                    "{shown}:{n}: `{first}` is not a prefix such as 203.0.113.0/24"
                ))
            }
        }
    }
    Ok(out)
}
