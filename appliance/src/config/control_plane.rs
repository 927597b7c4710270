//! `[control_plane]`: the TAP mirrors (one per routed interface: ports
//! and VLAN sub-interfaces), the punt rules (what of the traffic for the
//! router reaches the kernel, and how much), and the netlink mirror of a
//! kernel routing table (with the kernel interface standing for each
//! router interface).

use super::schema::{port_range, proto_num, ProtoSpec, RawFile};
use super::typed::{ControlPlane, PortConfig, RouterSetup};
use super::Ctx;
use pipeline::firewall::Action;
use pipeline::router::PuntRule;
use toml::Spanned;

/// Whether `n` can name a Linux interface.
fn is_ifname(n: &str) -> bool {
    !n.is_empty() && n.len() <= 15 && !n.contains('/') && !n.chars().any(char::is_whitespace)
}

/// The router interface a `[control_plane]` table key names (a port or a
/// VLAN sub-interface), or an error at the key.
fn interface(
    router: &RouterSetup,
    ports: &[PortConfig],
    key: &Spanned<String>,
    at: &str,
    cx: &mut Ctx<'_>,
) -> Option<u16> {
    let name = key.get_ref();
    if let Some(i) = router.names.iter().position(|n| n == name) {
        return Some(i as u16);
    }
    // Without a router the names are the ports'.
    if let Some(i) = ports.iter().position(|p| p.name == *name) {
        return Some(i as u16);
    }
    cx.err(
        key,
        at,
        format!("no port or VLAN sub-interface is named `{name}`"),
    );
    None
}

/// The name interface `i` is reported under.
pub(super) fn name_of(router: &RouterSetup, ports: &[PortConfig], i: u16) -> String {
    router
        .names
        .get(usize::from(i))
        .or_else(|| ports.get(usize::from(i)).map(|p| &p.name))
        .cloned()
        .unwrap_or_else(|| format!("#{i}"))
}

/// `[control_plane] tap`: a TAP per routed interface (a port or a VLAN
/// sub-interface with addresses), named `sl-NAME` (cut to 15 characters)
/// unless `tap_names` says otherwise: (interface, TAP name).
pub(super) fn taps(
    raw: &RawFile,
    ports: &[PortConfig],
    router: &RouterSetup,
    cx: &mut Ctx<'_>,
) -> Vec<(u16, String)> {
    let Some(cp) = raw.control_plane.as_ref() else {
        return Vec::new();
    };
    let c = cp.get_ref();
    let on = c.tap.as_ref().is_some_and(|t| *t.get_ref());
    let mut given: Vec<(u16, &Spanned<String>)> = Vec::new();
    for (k, n) in &c.tap_names {
        let key = format!("control_plane.tap_names.{}", k.get_ref());
        if let Some(i) = interface(router, ports, k, &key, cx) {
            given.push((i, n));
        }
    }
    if !on {
        return Vec::new();
    }
    let mut out: Vec<(u16, String)> = Vec::new();
    for (i, f) in router.interfaces.iter().enumerate() {
        if f.ipv4.is_empty() && f.ipv6.is_empty() {
            continue;
        }
        let i = i as u16;
        let named = given.iter().find(|(g, _)| *g == i).map(|(_, n)| *n);
        let name = match named {
            Some(n) => n.get_ref().clone(),
            None => format!("sl-{}", name_of(router, ports, i))
                .chars()
                .take(15)
                .collect(),
        };
        let key = format!("control_plane.tap_names.{}", name_of(router, ports, i));
        let at = named.map_or(cp.span(), |n| n.span());
        if !is_ifname(&name) {
            cx.err(
                &Spanned::new(at, ()),
                key,
                format!(
                    "`{name}` is not a Linux interface name (1 to 15 characters, no `/` or spaces)"
                ),
            );
            continue;
        }
        if let Some((j, _)) = out.iter().find(|(_, n)| *n == name) {
            cx.err(
                &Spanned::new(at, ()),
                key,
                format!(
                    "`{name}` is already the TAP of `{}` (names cut to 15 characters collide: name one in `tap_names`)",
                    name_of(router, ports, *j)
                ),
            );
            continue;
        }
        out.push((i, name));
    }
    out
}

/// `[[control_plane.punt]]`: the punt rules, checked.
pub(super) fn punt_rules(
    raw: &RawFile,
    names: &std::collections::BTreeMap<&str, u16>,
    cx: &mut Ctx<'_>,
) -> Vec<PuntRule> {
    let Some(cp) = raw.control_plane.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, r) in cp.get_ref().punt.iter().enumerate() {
        let k = |f: &str| format!("control_plane.punt[{i}].{f}");
        let mut rule = PuntRule::default();
        let mut ok = true;
        if let Some(a) = &r.action {
            match super::firewall::action(
                a.get_ref(),
                r.reject_with.as_ref().map(|w| w.get_ref().as_str()),
            ) {
                Ok(act) => rule.action = act,
                Err(e) => {
                    let (at, key) = match &r.reject_with {
                        Some(w) if e.contains("tcp-reset") => (w.span(), "reject_with"),
                        _ => (a.span(), "action"),
                    };
                    cx.err(&Spanned::new(at, ()), k(key), e);
                    ok = false;
                }
            }
        }
        if let Some(w) = &r.reject_with {
            if !matches!(rule.action, Action::Reject(_)) && ok {
                cx.err(w, k("reject_with"), "only with action = \"reject\"");
                ok = false;
            }
        }
        if let Some(p) = &r.proto {
            let n = match p.get_ref() {
                ProtoSpec::Name(s) if s == "ospf" => Ok(89),
                ProtoSpec::Name(s) if s == "vrrp" => Ok(112),
                ProtoSpec::Name(s) if s == "sctp" => Ok(132),
                ProtoSpec::Name(s) if s == "gre" => Ok(47),
                other => proto_num(other).map_err(|e| {
                    e.replace(
                        ", icmpv6 or a number",
                        ", icmpv6, ospf, vrrp, sctp, gre or a number (an application such as BGP is a protocol and a port: tcp, 179)",
                    )
                }),
            };
            match n {
                Ok(n) => rule.proto = Some(n),
                Err(e) => {
                    cx.err(p, k("proto"), e);
                    ok = false;
                }
            }
        }
        for (field, spec, slot) in [
            ("port", &r.port, &mut rule.ports),
            ("sport", &r.sport, &mut rule.sports),
        ] {
            let Some(p) = spec else { continue };
            match port_range(p.get_ref()) {
                Ok(range) if matches!(rule.proto, Some(6 | 17 | 132)) => *slot = Some(range),
                Ok(_) => {
                    cx.err(p, k(field), "a port needs `proto` tcp, udp or sctp");
                    ok = false;
                }
                Err(e) => {
                    cx.err(p, k(field), e);
                    ok = false;
                }
            }
        }
        if let Some(f) = &r.from {
            for s in f.get_ref().names() {
                match pipeline::prefix::parse(s) {
                    Some(p) => rule.from.push(p),
                    None => {
                        cx.err(
                            f,
                            k("from"),
                            format!("`{s}` is not a prefix such as 198.18.0.0/24 or 2001:db8::/32"),
                        );
                        ok = false;
                    }
                }
            }
        }
        if let Some(v) = &r.in_ {
            for n in v.get_ref().names() {
                match names.get(n) {
                    Some(&i) => rule.in_ifaces.push(i),
                    None => {
                        cx.err(
                            v,
                            k("in"),
                            format!(
                                "interface `{n}` does not exist (a port or VLAN sub-interface)"
                            ),
                        );
                        ok = false;
                    }
                }
            }
        }
        if let Some(st) = &r.state {
            for n in st.get_ref().names() {
                match pipeline::firewall::state::NAMES
                    .iter()
                    .find(|(s, _)| *s == n)
                {
                    Some((_, b)) => rule.states |= b,
                    _ => {
                        cx.err(
                            st,
                            k("state"),
                            format!("`{n}`: expected new, established, related or invalid (of the kernel's connections through the mirrors)"),
                        );
                        ok = false;
                    }
                }
            }
        }
        if let Some(v) = &r.rate {
            match u32::try_from(*v.get_ref()) {
                Ok(n) if n >= 1 => rule.rate = Some(n),
                _ => {
                    cx.err(
                        v,
                        k("rate"),
                        format!(
                            "packets per second per core, 1 to 4294967295; got {}",
                            v.get_ref()
                        ),
                    );
                    ok = false;
                }
            }
        }
        if ok {
            out.push(rule);
        }
    }
    out
}

/// `[control_plane]`, checked: the table, and a kernel interface per
/// router interface (named, else its TAP mirror, else a port's own on
/// AF_PACKET/AF_XDP).
pub(super) fn control_plane(
    raw: &RawFile,
    ports: &[PortConfig],
    router: &RouterSetup,
    taps: &[(u16, String)],
    cx: &mut Ctx<'_>,
) -> Option<ControlPlane> {
    let cp = raw.control_plane.as_ref()?;
    let c = cp.get_ref();
    let on = c.netlink.as_ref().is_some_and(|n| *n.get_ref());
    let table = match &c.table {
        Some(t) => match u32::try_from(*t.get_ref()) {
            Ok(v) if v != 0 => v,
            _ => {
                cx.err(
                    t,
                    "control_plane.table",
                    format!(
                        "a kernel routing table is 1 to 4294967295 (254 is `main`); got {}",
                        t.get_ref()
                    ),
                );
                return None;
            }
        },
        None => 254,
    };
    let rcvbuf = match &c.rcvbuf {
        Some(b) => match usize::try_from(*b.get_ref()) {
            Ok(v) if (4096..=1 << 30).contains(&v) => v,
            _ => {
                cx.err(
                    b,
                    "control_plane.rcvbuf",
                    format!("bytes, 4096 to 1073741824; got {}", b.get_ref()),
                );
                return None;
            }
        },
        None => 32 << 20,
    };
    let mut interfaces: Vec<(u16, String)> = Vec::new();
    for (k, name) in &c.interfaces {
        let key = format!("control_plane.interfaces.{}", k.get_ref());
        let Some(i) = interface(router, ports, k, &key, cx) else {
            continue;
        };
        let n = name.get_ref();
        if !is_ifname(n) {
            cx.err(
                name,
                &key,
                format!(
                    "`{n}` is not a Linux interface name (1 to 15 characters, no `/` or spaces)"
                ),
            );
            continue;
        }
        interfaces.push((i, n.clone()));
    }
    let count = router.interfaces.len().max(ports.len());
    for i in 0..count as u16 {
        if interfaces.iter().any(|(q, _)| *q == i) {
            continue;
        }
        // With a mirror, the kernel reaches the interface's neighbours
        // through its TAP: routes name the TAP.
        if let Some((_, tap)) = taps.iter().find(|(q, _)| *q == i) {
            interfaces.push((i, tap.clone()));
            continue;
        }
        if let Some(iface) = ports.get(usize::from(i)).and_then(|p| p.kernel_iface()) {
            interfaces.push((i, iface.to_string()));
        }
    }
    if on && interfaces.is_empty() {
        cx.err(cp, "control_plane.netlink", "no port has a kernel interface: name one per port in `control_plane.interfaces` (such as { p0 = \"eth1\" })");
        return None;
    }
    interfaces.sort();
    on.then_some(ControlPlane {
        table,
        interfaces,
        rcvbuf,
    })
}
