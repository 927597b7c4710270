//! `[nat]` settings: the source-NAT port range, `[[nat.snat]]`,
//! `[[nat.dnat]]` and `[[nat.static]]`, refused where they cannot
//! translate (an empty pool, masquerade from a port without an address, a
//! forward to the router itself or shadowed by an earlier one, two 1:1
//! NATs on one address).

use super::schema::{proto_num, OneOrMany, RawNat};
use super::Ctx;
use pipeline::nat::{Det, Dnat, NatConfig, PortRange, Snat, SnatTo, StaticNat};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use toml::Spanned;

pub(super) fn check(
    cx: &mut Ctx<'_>,
    nat: &RawNat,
    names: &BTreeMap<&str, u16>,
    v4: &[Vec<Ipv4Addr>],
    v6: &[Vec<std::net::Ipv6Addr>],
    out: &mut NatConfig,
) {
    if let Some(p) = &nat.ports {
        match p.get_ref().parse::<super::PortRange>() {
            Ok(r) if r.0 >= 1 => out.ports = PortRange { lo: r.0, hi: r.1 },
            Ok(_) => cx.err(p, "nat.ports", "port 0 cannot be handed out"),
            Err(e) => cx.err(p, "nat.ports", e),
        }
    }
    out.no_hairpin = nat.hairpin.as_ref().is_some_and(|h| !*h.get_ref());
    let port = |cx: &mut Ctx<'_>, v: &Spanned<String>, key: String| -> Option<u16> {
        let p = names.get(v.get_ref().as_str()).copied();
        if p.is_none() {
            cx.err(
                v,
                key,
                format!(
                    "interface `{}` does not exist (a port or VLAN sub-interface)",
                    v.get_ref()
                ),
            );
        }
        p
    };
    for (i, s) in nat.snat.iter().enumerate() {
        let k = |f: &str| format!("nat.snat[{i}].{f}");
        let Some(out_port) = port(cx, &s.out, k("out")) else {
            continue;
        };
        let mut src = (0u32, 0u8);
        if let Some(v) = &s.src {
            match pipeline::prefix::parse(v.get_ref()) {
                Some((IpAddr::V4(a), l)) => src = (u32::from(a), l),
                Some((IpAddr::V6(a), l)) => {
                    masquerade6(cx, s, (u128::from(a), l), out_port, &k, v6, out);
                    continue;
                }
                _ => cx.err(v, k("src"), "must be an IPv4 or IPv6 prefix"),
            }
        }
        let to = match (&s.to, &s.deterministic) {
            (Some(to), Some(_)) => {
                cx.err(
                    to,
                    k("to"),
                    "a deterministic rule takes its addresses from `deterministic`: remove `to`",
                );
                continue;
            }
            (None, None) => {
                cx.err(
                    &s.out,
                    k("to"),
                    "a source NAT rule needs `to` (\"masquerade\" or addresses) or `deterministic` (an outside prefix)",
                );
                continue;
            }
            (None, Some(d)) => match deterministic(cx, s, d, &k, &out.ports, v4) {
                Some(det) => SnatTo::Deterministic(det),
                None => continue,
            },
            (Some(to), None) => {
                let to = to_of(cx, to, s, out_port, &k, v4);
                match blocks(cx, s, to, &k, &out.ports, v4) {
                    Some(to) => to,
                    None => continue,
                }
            }
        };
        if let (Some(m), false) = (&s.max_blocks, matches!(to, SnatTo::Blocks(_))) {
            cx.err(
                m,
                k("max_blocks"),
                "applies to port blocks only: give `block` (ports a block) with a pool in `to`",
            );
        }
        // A rule that an earlier one takes every packet from never
        // applies: a mistake (a duplicate, or rules in the wrong order).
        let covers = |a: (u32, u8), b: (u32, u8)| {
            let mask = |l: u8| {
                if l == 0 {
                    0
                } else {
                    u32::MAX << (32 - u32::from(l.min(32)))
                }
            };
            a.1 <= b.1 && (a.0 & mask(a.1)) == (b.0 & mask(a.1))
        };
        let shown = |p: (u32, u8)| format!("{}/{}", Ipv4Addr::from(p.0), p.1);
        let dnatted = match &s.ct_status {
            None => None,
            Some(v) => match v.get_ref().as_str() {
                "dnat" => Some(true),
                "!dnat" => Some(false),
                x => {
                    cx.err(
                        v,
                        k("ct_status"),
                        format!("`{x}`: a source NAT rule takes \"dnat\" (only flows whose destination was translated, nftables' `ct status dnat`) or \"!dnat\""),
                    );
                    None
                }
            },
        };
        if let Some((j, e)) = out.snat.iter().enumerate().find(|(_, e)| {
            e.out_port == out_port
                && covers(e.src, src)
                && e.dnatted.is_none_or(|d| Some(d) == dnatted)
        }) {
            let msg = format!(
                    "never applies: nat.snat[{j}] (out `{}`, src {}) translates every packet this rule would (src {}); remove it, or put the narrower rule first",
                    s.out.get_ref(),
                    shown(e.src),
                    shown(src)
                );
            match &s.src {
                Some(v) => cx.err(v, k("src"), msg),
                None => cx.err(&s.out, k("out"), msg),
            }
        }
        // A block's ports are its pool's alone: no other rule hands out
        // ports of a block pool's addresses.
        let holds = |t: &SnatTo, a: u32| match t {
            SnatTo::Pool(p) => p.contains(&a),
            SnatTo::Blocks(b) => b.addrs.contains(&a),
            SnatTo::Deterministic(d) => d.is_outside(a),
            SnatTo::Masquerade => false,
        };
        let shared = out.snat.iter().enumerate().find_map(|(j, e)| {
            let mine: &[u32] = match (&to, &e.to) {
                (SnatTo::Blocks(b), _) => &b.addrs,
                (_, SnatTo::Blocks(b)) => &b.addrs,
                _ => return None,
            };
            let other = if matches!(to, SnatTo::Blocks(_)) {
                &e.to
            } else {
                &to
            };
            mine.iter().find(|&&a| holds(other, a)).map(|&a| (j, a))
        });
        if let Some((j, a)) = shared {
            let msg = format!("{} is also nat.snat[{j}]'s: the addresses of a pool cut into blocks must be its alone", Ipv4Addr::from(a));
            match (&s.to, &s.deterministic) {
                (Some(t), _) => cx.err(t, k("to"), msg),
                (None, Some(d)) => cx.err(d, k("deterministic"), msg),
                (None, None) => cx.err(&s.out, k("out"), msg),
            }
        }
        out.snat.push(Snat {
            out_port,
            src,
            to,
            dnatted,
        });
    }
    for (i, d) in nat.dnat.iter().enumerate() {
        let k = |f: &str| format!("nat.dnat[{i}].{f}");
        let in_port = match &d.in_ {
            Some(v) => match port(cx, v, k("in")) {
                Some(p) => Some(p),
                None => continue,
            },
            None => None,
        };
        let proto = match &d.proto {
            Some(p) => match proto_num(p.get_ref()) {
                Ok(n) => Some(n),
                Err(e) => {
                    cx.err(p, k("proto"), e);
                    continue;
                }
            },
            None => None,
        };
        let Ok(dst) = d.dst.get_ref().parse::<Ipv4Addr>() else {
            cx.err(&d.dst, k("dst"), "must be an IPv4 address");
            continue;
        };
        let dport = match &d.dport {
            Some(p) => match u16::try_from(*p.get_ref()) {
                Ok(n) if matches!(proto, Some(6 | 17)) => Some(n),
                Ok(_) => {
                    cx.err(p, k("dport"), "needs proto = \"tcp\" or \"udp\"");
                    continue;
                }
                Err(_) => {
                    cx.err(p, k("dport"), "must be 0..=65535");
                    continue;
                }
            },
            None => None,
        };
        let (to, to_port) = match d.to.get_ref().split_once(':') {
            Some((a, p)) => (a.parse::<Ipv4Addr>().ok(), p.parse::<u16>().ok().map(Some)),
            None => (d.to.get_ref().parse::<Ipv4Addr>().ok(), Some(None)),
        };
        let (Some(to), Some(to_port)) = (to, to_port) else {
            cx.err(&d.to, k("to"), "expected address or address:port");
            continue;
        };
        if to_port.is_some() && dport.is_none() {
            cx.err(&d.to, k("to"), "a port needs `dport` and `proto`");
            continue;
        }
        if v4.iter().flatten().any(|a| *a == to) {
            cx.err(
                &d.to,
                k("to"),
                format!(
                    "{to} is the router's own address: Sluice has no local services to forward to"
                ),
            );
            continue;
        }
        let new = Dnat {
            in_port,
            proto,
            dst: u32::from(dst),
            dport,
            to: u32::from(to),
            to_port,
        };
        // An earlier entry that takes every packet this one would: this
        // one could never match (first match wins).
        if let Some(j) = out.dnat.iter().position(|e| {
            e.dst == new.dst
                && e.in_port.is_none_or(|p| Some(p) == new.in_port)
                && e.proto.is_none_or(|p| Some(p) == new.proto)
                && e.dport.is_none_or(|p| Some(p) == new.dport)
        }) {
            cx.err(
                &d.dst,
                k("dst"),
                format!("nat.dnat[{j}] already translates everything this entry matches: it could never apply"),
            );
            continue;
        }
        out.dnat.push(new);
    }
    for (i, s) in nat.statics.iter().enumerate() {
        let (inside, outside) = (*s.inside.get_ref(), *s.outside.get_ref());
        let k = |f: &str| format!("nat.static[{i}].{f}");
        if let Some(j) = out
            .statics
            .iter()
            .position(|e| e.outside == u32::from(outside))
        {
            cx.err(
                &s.outside,
                k("outside"),
                format!("{outside} is already nat.static[{j}]'s outside address"),
            );
            continue;
        }
        if let Some(j) = out
            .statics
            .iter()
            .position(|e| e.inside == u32::from(inside))
        {
            cx.err(
                &s.inside,
                k("inside"),
                format!("{inside} is already nat.static[{j}]'s inside address"),
            );
            continue;
        }
        if v4.iter().flatten().any(|a| *a == inside) {
            cx.err(
                &s.inside,
                k("inside"),
                format!("{inside} is the router's own address"),
            );
            continue;
        }
        out.statics.push(StaticNat {
            inside: u32::from(inside),
            outside: u32::from(outside),
        });
    }
    nat64(cx, nat, &port, v4, out);
    // The config index of each translation taken.
    let mut taken = Vec::new();
    for (i, n) in nat.nptv6.iter().enumerate() {
        let k = |f: &str| format!("nat.nptv6[{i}].{f}");
        let iface = port(cx, &n.out, k("out"));
        let prefix = |cx: &mut Ctx<'_>, v: &Spanned<String>, f: &str| match pipeline::prefix::parse(
            v.get_ref(),
        ) {
            Some((IpAddr::V6(a), l)) if l <= 64 => Some((u128::from(a), l)),
            Some((IpAddr::V6(_), l)) => {
                cx.err(
                    v,
                    k(f),
                    format!("/{l}: NPTv6 translates prefixes of at most /64 (RFC 6296)"),
                );
                None
            }
            _ => {
                cx.err(v, k(f), "must be an IPv6 prefix (such as \"fd00:1::/48\")");
                None
            }
        };
        let (inside, outside) = (
            prefix(cx, &n.inside, "inside"),
            prefix(cx, &n.outside, "outside"),
        );
        let (Some(iface), Some(inside), Some(outside)) = (iface, inside, outside) else {
            continue;
        };
        // The shorter holds the longer: they share addresses.
        let overlap =
            |a: (u128, u8), b: (u128, u8)| pipeline::prefix::in6(a.0, (b.0, a.1.min(b.1)));
        if inside.1 != outside.1 {
            cx.err(
                &n.outside,
                k("outside"),
                format!("/{} differs from the inside prefix's /{}: NPTv6 maps one prefix onto another of its length", outside.1, inside.1),
            );
            continue;
        }
        if overlap(inside, outside) {
            cx.err(&n.outside, k("outside"), "overlaps the inside prefix");
            continue;
        }
        if let Some(j) = out.npt.iter().position(|r| {
            r.iface == iface && (overlap(r.inside, inside) || overlap(r.outside, outside))
        }) {
            let j = taken[j];
            cx.err(
                &n.inside,
                k("inside"),
                format!("overlaps nat.nptv6[{j}] on the same interface: a packet would have two translations"),
            );
            continue;
        }
        match pipeline::npt::Npt::new(iface, inside, outside) {
            Some(r) => {
                out.npt.push(r);
                taken.push(i);
            }
            None => cx.err(
                &n.inside,
                k("inside"),
                "not a translatable pair of prefixes",
            ),
        }
    }
}

/// Source NAT rule `s` for IPv6 sources (`src`, out on `out_port`):
/// nftables' `masquerade` for IPv6, the flows' source the interface's
/// (first) IPv6 address and a port from `nat.ports`; "masquerade" only,
/// with none of NAT44's pool, block or deterministic settings.
fn masquerade6(
    cx: &mut Ctx<'_>,
    s: &super::schema::RawSnat,
    src: (u128, u8),
    out_port: u16,
    k: &dyn Fn(&str) -> String,
    v6: &[Vec<std::net::Ipv6Addr>],
    out: &mut NatConfig,
) {
    let masq =
        matches!(s.to.as_ref().map(|t| t.get_ref()), Some(OneOrMany::One(m)) if m == "masquerade");
    if !masq {
        let msg = "an IPv6 source prefix is masqueraded (`to = \"masquerade\"`): IPv6 has no pools, blocks or deterministic mappings here";
        match (&s.to, &s.deterministic) {
            (Some(t), _) => cx.err(t, k("to"), msg),
            (None, Some(d)) => cx.err(d, k("deterministic"), msg),
            (None, None) => cx.err(&s.out, k("to"), msg),
        }
        return;
    }
    let msg = |f: &str| format!("`{f}` is for IPv4 source NAT rules");
    if let Some(b) = &s.block {
        return cx.err(b, k("block"), msg("block"));
    }
    if let Some(m) = &s.max_blocks {
        return cx.err(m, k("max_blocks"), msg("max_blocks"));
    }
    if let Some(c) = &s.ct_status {
        return cx.err(c, k("ct_status"), msg("ct_status"));
    }
    if v6.get(usize::from(out_port)).is_none_or(Vec::is_empty) {
        cx.err(
            &s.out,
            k("out"),
            format!(
                "masquerade takes the IPv6 address of interface `{}`, which has none: set its `ipv6`",
                s.out.get_ref()
            ),
        );
        return;
    }
    out.masq6.push(pipeline::nat::Masq6 { out_port, src });
}

/// An interface's index by the name a key gives (an error when none).
type PortOf<'a> = dyn Fn(&mut Ctx<'_>, &Spanned<String>, String) -> Option<u16> + 'a;

/// `[[nat.nat64]]`: each translator's prefix (RFC 6052's lengths, not
/// overlapping another's), its
/// interface, and its addresses ("masquerade": the interface's, which it
/// must have). A prefix holding one of the router's own addresses leaves
/// that address the router's.
fn nat64(
    cx: &mut Ctx<'_>,
    nat: &RawNat,
    port: &PortOf<'_>,
    v4: &[Vec<Ipv4Addr>],
    out: &mut NatConfig,
) {
    // The config index of each translator taken.
    let mut taken = Vec::new();
    for (i, n) in nat.nat64.iter().enumerate() {
        let k = |f: &str| format!("nat.nat64[{i}].{f}");
        let Some(out_port) = port(cx, &n.out, k("out")) else {
            continue;
        };
        let prefix = match &n.prefix {
            None => Some(pipeline::nat64::WELL_KNOWN),
            Some(v) => match pipeline::prefix::parse(v.get_ref()) {
                Some((IpAddr::V6(a), l)) => Some((u128::from(a), l)),
                _ => {
                    cx.err(
                        v,
                        k("prefix"),
                        "must be an IPv6 prefix (such as \"64:ff9b::/96\")",
                    );
                    None
                }
            },
        };
        let Some(prefix) = prefix else { continue };
        let at = |cx: &mut Ctx<'_>, msg: String| match &n.prefix {
            Some(v) => cx.err(v, k("prefix"), msg),
            None => cx.err(&n.out, k("out"), msg),
        };
        let mut pool = Vec::new();
        match n.to.as_ref().map(|t| (t, t.get_ref())) {
            None => {}
            Some((_, OneOrMany::One(m))) if m == "masquerade" => {}
            Some((t, other)) => {
                for a in other.names() {
                    match a.parse::<Ipv4Addr>() {
                        Ok(a) => pool.push(u32::from(a)),
                        Err(_) => cx.err(
                            t,
                            k("to"),
                            format!("`{a}`: expected \"masquerade\" or IPv4 addresses"),
                        ),
                    }
                }
                if other.names().is_empty() {
                    cx.err(
                        t,
                        k("to"),
                        "is empty: give \"masquerade\" or at least one IPv4 address",
                    );
                    continue;
                }
            }
        }
        if pool.is_empty() && v4.get(usize::from(out_port)).is_none_or(Vec::is_empty) {
            cx.err(
                &n.out,
                k("out"),
                format!(
                    "NAT64 leaves from the address of interface `{}`, which has none: set its `ipv4`, or give `to` addresses",
                    n.out.get_ref()
                ),
            );
            continue;
        }
        let mut t = match pipeline::nat64::Nat64::new(prefix, out_port, pool) {
            Ok(t) => t,
            Err(e) => {
                at(
                    cx,
                    format!("{}/{}: {e}", std::net::Ipv6Addr::from(prefix.0), prefix.1),
                );
                continue;
            }
        };
        let overlap =
            |a: (u128, u8), b: (u128, u8)| pipeline::prefix::in6(a.0, (b.0, a.1.min(b.1)));
        if let Some(j) = out.nat64.iter().position(|o| overlap(o.prefix, t.prefix)) {
            let j = taken[j];
            at(
                cx,
                format!("overlaps nat.nat64[{j}]'s prefix: an address would name two IPv4 hosts"),
            );
            continue;
        }
        if let Some(m) = &n.lowest_ipv6_mtu {
            if *m.get_ref() < 1280 {
                cx.err(
                    m,
                    k("lowest_ipv6_mtu"),
                    "must be at least 1280 (IPv6's minimum MTU)",
                );
                continue;
            }
            t.lowest_mtu6 = *m.get_ref();
        }
        out.nat64.push(t);
        taken.push(i);
    }
}

/// `to` of source NAT rule `s` (out on `out_port`): "masquerade" or a
/// pool.
fn to_of(
    cx: &mut Ctx<'_>,
    to: &Spanned<OneOrMany>,
    s: &super::schema::RawSnat,
    out_port: u16,
    k: &dyn Fn(&str) -> String,
    v4: &[Vec<Ipv4Addr>],
) -> SnatTo {
    match to.get_ref() {
        OneOrMany::One(m) if m == "masquerade" => {
            if v4.get(usize::from(out_port)).is_none_or(Vec::is_empty) {
                cx.err(
                        to,
                        k("to"),
                        format!(
                            "masquerade takes the address of interface `{}`, which has none: set its `ipv4`, or give `to` addresses",
                            s.out.get_ref()
                        ),
                    );
            }
            SnatTo::Masquerade
        }
        other => {
            let mut pool = Vec::new();
            for a in other.names() {
                match a.parse::<Ipv4Addr>() {
                    Ok(a) => pool.push(u32::from(a)),
                    Err(_) => cx.err(
                        to,
                        k("to"),
                        format!("`{a}`: expected \"masquerade\" or IPv4 addresses"),
                    ),
                }
            }
            if other.names().is_empty() {
                cx.err(
                    to,
                    k("to"),
                    "is empty: give \"masquerade\" or at least one IPv4 address",
                );
            }
            SnatTo::Pool(pool)
        }
    }
}

/// Blocks an inside host may hold at once when `max_blocks` is not set.
pub const MAX_BLOCKS: u8 = 4;

/// Source NAT rule `s` translating to `to`: with `block`, a pool whose
/// ports go out in blocks of that many ([`SnatTo::Blocks`]), refused with
/// masquerade, with a block larger than the port range, or with a pool
/// address that another rule or the router itself uses (a block's ports
/// must all be its own); `None` when refused.
fn blocks(
    cx: &mut Ctx<'_>,
    s: &super::schema::RawSnat,
    to: SnatTo,
    k: &dyn Fn(&str) -> String,
    range: &PortRange,
    v4: &[Vec<Ipv4Addr>],
) -> Option<SnatTo> {
    let Some(b) = &s.block else {
        return Some(to);
    };
    let SnatTo::Pool(addrs) = to else {
        cx.err(
            b,
            k("block"),
            "port blocks are cut from a pool's addresses: give `to` addresses (masquerade's one address is the router's own)",
        );
        return None;
    };
    let size = match u16::try_from(*b.get_ref()) {
        Ok(n) if n >= 1 && u32::from(n) <= range.len() => n,
        _ => {
            cx.err(
                b,
                k("block"),
                format!(
                    "must be 1 to {} (the ports of nat.ports {}-{})",
                    range.len(),
                    range.lo,
                    range.hi
                ),
            );
            return None;
        }
    };
    let max = match &s.max_blocks {
        None => MAX_BLOCKS,
        Some(m) => match u8::try_from(*m.get_ref()) {
            Ok(n) if n >= 1 => n,
            _ => {
                cx.err(m, k("max_blocks"), "must be 1 to 255");
                return None;
            }
        },
    };
    if let Some(a) = v4
        .iter()
        .flatten()
        .find(|a| addrs.contains(&u32::from(**a)))
    {
        cx.err(
            b,
            k("block"),
            format!("the pool holds {a}, an address of the router's own: a pool cut into blocks must be the NAT's alone"),
        );
        return None;
    }
    Some(SnatTo::Blocks(pipeline::nat::BlockRule {
        addrs,
        size,
        max,
    }))
}

/// `deterministic` (and `block`) of source NAT rule `s`: its inside prefix
/// (`src`) mapped onto the outside prefix `d` with `block` ports each
/// (default: as many as `range` allows), refused when the outside
/// prefix is larger than the inside one, when the range cannot give each
/// host `block` ports, or when the outside prefix holds one of the
/// router's own addresses.
fn deterministic(
    cx: &mut Ctx<'_>,
    s: &super::schema::RawSnat,
    d: &Spanned<String>,
    k: &dyn Fn(&str) -> String,
    range: &PortRange,
    v4: &[Vec<Ipv4Addr>],
) -> Option<Det> {
    let Some(src) = &s.src else {
        cx.err(
            d,
            k("src"),
            "a deterministic rule needs `src`: the inside prefix it maps",
        );
        return None;
    };
    let inside = match pipeline::prefix::parse(src.get_ref()) {
        Some((IpAddr::V4(a), l)) => (u32::from(a), l),
        _ => return None, // refused above with its key
    };
    let outside = match pipeline::prefix::parse(d.get_ref()) {
        Some((IpAddr::V4(a), l)) => (u32::from(a), l),
        _ => {
            cx.err(
                d,
                k("deterministic"),
                "must be an IPv4 prefix (the outside addresses)",
            );
            return None;
        }
    };
    if outside.1 < inside.1 {
        cx.err(
            d,
            k("deterministic"),
            format!(
                "/{} has more addresses than the inside /{} has hosts: give a prefix of /{} or longer (or map hosts 1:1 with [[nat.static]])",
                outside.1, inside.1, inside.1
            ),
        );
        return None;
    }
    let hosts = 1u64 << (32 - u32::from(inside.1));
    let addrs = 1u64 << (32 - u32::from(outside.1));
    let max = Det::max_block(inside.1, outside.1, range);
    let block = match &s.block {
        None if max == 0 => {
            cx.err(
                d,
                k("deterministic"),
                format!(
                    "the port range {}-{} cannot give each of the {hosts} inside hosts a port on {addrs} addresses",
                    range.lo, range.hi
                ),
            );
            return None;
        }
        None => max,
        Some(b) if (1..=i64::from(max)).contains(b.get_ref()) => *b.get_ref() as u32,
        Some(b) => {
            cx.err(
                b,
                k("block"),
                format!(
                    "the pool cannot give each of the {hosts} inside hosts {} ports: {addrs} addresses of ports {}-{} give each at most {max}",
                    b.get_ref(),
                    range.lo,
                    range.hi
                ),
            );
            return None;
        }
    };
    if let Some(a) = v4
        .iter()
        .flatten()
        .find(|a| pipeline::prefix::in4(u32::from(**a), outside))
    {
        cx.err(
            d,
            k("deterministic"),
            format!("holds {a}, an address of the router's own: the outside addresses must be the NAT's alone"),
        );
        return None;
    }
    Some(Det {
        inside,
        outside,
        block,
    })
}
