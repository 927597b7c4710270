//! Firewall and conntrack settings: `[firewall]` with `[[firewall.rule]]`s,
//! zones and a ClassBench rule file, and `[conntrack]`; the gateway setup
//! they and `[nat]` (see `nat.rs`) make.

use super::schema::{
    port_range, proto_num, OneOrMany, ProtoSpec, RawConntrack, RawFirewall, RawNat, RawRule,
};
use super::typed::GatewaySetup;
use super::Ctx;
use pipeline::acl::{parse_classbench, v4_prefix, Rule};
use pipeline::firewall::{state, status, Action, CtMatch, FwRule, RejectWith, MAX_DNAT_ENTRIES};
use pipeline::gateway::mss::{Clamp, MssRule};
use pipeline::nat::NatConfig;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use toml::Spanned;

pub(super) fn action(s: &str, with: Option<&str>) -> Result<Action, String> {
    let w = match with {
        None => RejectWith::Auto,
        Some("tcp-reset") => RejectWith::TcpReset,
        Some("port-unreachable") => RejectWith::PortUnreachable,
        Some("admin-prohibited") => RejectWith::AdminProhibited,
        Some(o) => {
            return Err(format!(
                "`{o}`: expected tcp-reset, port-unreachable or admin-prohibited"
            ))
        }
    };
    match s {
        "accept" => Ok(Action::Accept),
        "drop" => Ok(Action::Drop),
        "reject" => Ok(Action::Reject(w)),
        o => Err(format!("`{o}`: expected accept, drop or reject")),
    }
}

fn prefix(s: &str) -> Result<(u128, u8, bool), String> {
    let (a, l) = pipeline::prefix::parse(s)
        .ok_or_else(|| format!("`{s}` is not a prefix such as 198.18.0.0/24"))?;
    Ok(match a {
        IpAddr::V4(a) => {
            let (x, l) = v4_prefix(a, l);
            (x, l, true)
        }
        IpAddr::V6(a) => (u128::from(a) & pipeline::prefix::mask6(l), l, false),
    })
}

/// nftables' ICMP and ICMPv6 type names (`nft describe icmp type`).
const ICMP_TYPES: [(&str, u8); 11] = [
    ("echo-reply", 0),
    ("destination-unreachable", 3),
    ("source-quench", 4),
    ("redirect", 5),
    ("echo-request", 8),
    ("router-advertisement", 9),
    ("router-solicitation", 10),
    ("time-exceeded", 11),
    ("parameter-problem", 12),
    ("timestamp-request", 13),
    ("timestamp-reply", 14),
];
const ICMPV6_TYPES: [(&str, u8); 11] = [
    ("destination-unreachable", 1),
    ("packet-too-big", 2),
    ("time-exceeded", 3),
    ("parameter-problem", 4),
    ("echo-request", 128),
    ("echo-reply", 129),
    ("nd-router-solicit", 133),
    ("nd-router-advert", 134),
    ("nd-neighbor-solicit", 135),
    ("nd-neighbor-advert", 136),
    ("nd-redirect", 137),
];

fn icmp_type(t: &ProtoSpec, v6: bool) -> Result<u8, String> {
    let names: &[(&str, u8)] = if v6 { &ICMPV6_TYPES } else { &ICMP_TYPES };
    match t {
        ProtoSpec::Num(n) => u8::try_from(*n).map_err(|_| format!("{n}: must be 0..=255")),
        ProtoSpec::Name(s) => names
            .iter()
            .find(|(n, _)| n == s)
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                let all: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
                format!(
                    "`{s}` is not an {} type: expected a number or one of {}",
                    if v6 { "ICMPv6" } else { "ICMP" },
                    all.join(", ")
                )
            }),
    }
}

const FLAGS: [(&str, u16); 9] = [
    ("fin", 0x01),
    ("syn", 0x02),
    ("rst", 0x04),
    ("psh", 0x08),
    ("ack", 0x10),
    ("urg", 0x20),
    ("ece", 0x40),
    ("cwr", 0x80),
    ("ns", 0x100),
];

/// `syn/syn,ack`: flags set / flags examined (mask defaults to the set).
fn tcp_flags(s: &str) -> Result<(u16, u16), String> {
    let bits = |x: &str| -> Result<u16, String> {
        x.split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(|f| {
                FLAGS
                    .iter()
                    .find(|(n, _)| *n == f)
                    .map(|(_, b)| *b)
                    .ok_or_else(|| {
                        format!("`{f}` is not a TCP flag (fin syn rst psh ack urg ece cwr ns)")
                    })
            })
            .try_fold(0, |a, b| b.map(|b| a | b))
    };
    let (v, m) = s.split_once('/').unwrap_or((s, s));
    Ok((bits(v)?, bits(m)?))
}

/// Checks the sections; `names` maps interface names (ports, then VLAN
/// sub-interfaces) to the router's indexes, `v4` and `v6` each one's
/// addresses.
#[allow(clippy::too_many_arguments)]
pub(super) fn check(
    cx: &mut Ctx<'_>,
    fw: Option<&RawFirewall>,
    ct: Option<&RawConntrack>,
    nat: Option<&RawNat>,
    names: &BTreeMap<&str, u16>,
    v4: &[Vec<Ipv4Addr>],
    v6: &[Vec<std::net::Ipv6Addr>],
    base: Option<&Path>,
) -> GatewaySetup {
    let mut g = GatewaySetup {
        enabled: fw.is_some() || nat.is_some() || ct.is_some(),
        ..GatewaySetup::default()
    };
    if let Some(ct) = ct {
        if let Some(c) = &ct.capacity {
            match usize::try_from(*c.get_ref()) {
                Ok(n) if (1..=1 << 26).contains(&n) => g.ct_capacity = n,
                _ => cx.err(c, "conntrack.capacity", "must be 1..=67108864 flows"),
            }
        }
        if let Some(w) = ct.tcp_window {
            g.ct_tcp_window = w;
        }
        let t = &mut g.timeouts;
        for (v, key, slot) in [
            (&ct.tcp_handshake_s, "tcp_handshake_s", &mut t.tcp_handshake),
            (
                &ct.tcp_established_s,
                "tcp_established_s",
                &mut t.tcp_established,
            ),
            (&ct.tcp_closing_s, "tcp_closing_s", &mut t.tcp_closing),
            (&ct.tcp_closed_s, "tcp_closed_s", &mut t.tcp_closed),
            (&ct.unreplied_s, "unreplied_s", &mut t.unreplied),
            (&ct.replied_s, "replied_s", &mut t.replied),
        ] {
            if let Some(v) = v {
                let max = super::typed::MAX_TIMEOUT_S;
                if !(1..=max).contains(v.get_ref()) {
                    cx.err(
                        v,
                        format!("conntrack.{key}"),
                        format!("must be 1 to {max} seconds (30 days); got {}", v.get_ref()),
                    );
                }
                *slot = v.get_ref().min(&max) * 1_000_000_000;
            }
        }
    }
    // NAT first: the rules' `ct_original_*` matches refer to its entries.
    if let Some(nat) = nat {
        super::nat::check(cx, nat, names, v4, v6, &mut g.nat);
    }
    if let Some(fw) = fw {
        check_firewall(cx, fw, names, base, &mut g);
    }
    g
}

fn check_firewall(
    cx: &mut Ctx<'_>,
    fw: &RawFirewall,
    names: &BTreeMap<&str, u16>,
    base: Option<&Path>,
    g: &mut GatewaySetup,
) {
    if let Some(d) = &fw.default {
        match action(d.get_ref(), None) {
            Ok(a) => g.default = a,
            Err(e) => cx.err(d, "firewall.default", e),
        }
    }
    let mut zones: BTreeMap<&str, Vec<u16>> = BTreeMap::new();
    let mut zone_of: BTreeMap<u16, &str> = BTreeMap::new();
    for (z, ports) in &fw.zones {
        let mut v = Vec::new();
        if names.contains_key(z.as_str()) {
            cx.err(
                ports,
                format!("firewall.zones.{z}"),
                format!("zone `{z}` has the name of an interface: rules could not tell them apart"),
            );
        }
        for p in ports.get_ref() {
            match names.get(p.as_str()) {
                Some(&i) => {
                    if let Some(other) = zone_of.insert(i, z.as_str()) {
                        cx.err(
                            ports,
                            format!("firewall.zones.{z}"),
                            format!("interface `{p}` is already in zone `{other}`: an interface belongs to one zone"),
                        );
                    }
                    v.push(i)
                }
                None => cx.err(
                    ports,
                    format!("firewall.zones.{z}"),
                    format!("interface `{p}` does not exist (a port or VLAN sub-interface)"),
                ),
            }
        }
        zones.insert(z.as_str(), v);
    }
    let resolve = |cx: &mut Ctx<'_>, v: &Spanned<OneOrMany>, key: String| -> Vec<u16> {
        let mut out = Vec::new();
        for n in v.get_ref().names() {
            if let Some(&p) = names.get(n) {
                out.push(p);
            } else if let Some(z) = zones.get(n) {
                out.extend(z);
            } else {
                cx.err(
                    v,
                    key.clone(),
                    format!(
                        "`{n}` is neither an interface (a port or VLAN sub-interface) nor a zone"
                    ),
                );
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    };
    for (ri, r) in fw.clamp_mss.iter().enumerate() {
        let k = |f: &str| format!("firewall.clamp_mss[{ri}].{f}");
        let clamp = match r.mss.get_ref() {
            super::schema::RawClamp::Word(w) if w == "pmtu" => Clamp::Pmtu,
            super::schema::RawClamp::Bytes(n) if (536..=65495).contains(n) => Clamp::Max(*n as u16),
            super::schema::RawClamp::Bytes(n) => {
                cx.err(&r.mss, k("mss"), format!("{n}: an MSS is 536..=65495 bytes (RFC 9293's least, and the most an IPv4 packet holds)"));
                continue;
            }
            super::schema::RawClamp::Word(w) => {
                cx.err(
                    &r.mss,
                    k("mss"),
                    format!("`{w}`: expected \"pmtu\" or a number of bytes"),
                );
                continue;
            }
        };
        let mut pfx = [None, None];
        let mut family = None;
        for (slot, (v, key)) in pfx.iter_mut().zip([(&r.src, "src"), (&r.dst, "dst")]) {
            if let Some(v) = v {
                match prefix(v.get_ref()) {
                    Ok((a, l, is4)) => {
                        if family.is_some_and(|f| f != is4) {
                            cx.err(v, k(key), "src and dst must be the same IP version");
                        }
                        family = Some(is4);
                        *slot = Some((a, l));
                    }
                    Err(e) => cx.err(v, k(key), e),
                }
            }
        }
        let in_ports = r
            .in_
            .as_ref()
            .map_or(Vec::new(), |v| resolve(cx, v, k("in")));
        let out_ports = r
            .out
            .as_ref()
            .map_or(Vec::new(), |v| resolve(cx, v, k("out")));
        g.mss_rules.push(MssRule {
            in_ports,
            out_ports,
            src: pfx[0],
            dst: pfx[1],
            clamp,
        });
    }
    for (ri, r) in fw.rule.iter().enumerate() {
        let k = |f: &str| format!("firewall.rule[{ri}].{f}");
        let rs = r.get_ref();
        let act = match action(
            rs.action.get_ref(),
            rs.reject_with.as_ref().map(|w| w.get_ref().as_str()),
        ) {
            Ok(a) => a,
            Err(e) => {
                let at = match &rs.reject_with {
                    Some(w) if e.contains("tcp-reset") => w.span(),
                    _ => rs.action.span(),
                };
                cx.err(&Spanned::new(at, ()), k("action"), e);
                continue;
            }
        };
        if let Some(w) = &rs.reject_with {
            if !matches!(act, Action::Reject(_)) {
                cx.err(w, k("reject_with"), "only with action = \"reject\"");
            }
        }
        let mut hdr = Rule::any();
        let mut family = None;
        for (v, key, slot) in [
            (&rs.src, "src", &mut hdr.src),
            (&rs.dst, "dst", &mut hdr.dst),
        ] {
            if let Some(v) = v {
                match prefix(v.get_ref()) {
                    Ok((a, l, is4)) => {
                        if family.is_some_and(|f| f != is4) {
                            cx.err(v, k(key), "src and dst must be the same IP version");
                        }
                        family = Some(is4);
                        *slot = (a, l);
                    }
                    Err(e) => cx.err(v, k(key), e),
                }
            }
        }
        // Without any address, a rule matches both families.
        if let Some(p) = &rs.proto {
            match proto_num(p.get_ref()) {
                Ok(n) => hdr.proto = (n, 0xff),
                Err(e) => cx.err(p, k("proto"), e),
            }
        }
        for (v, key, slot) in [
            (&rs.sport, "sport", &mut hdr.sport),
            (&rs.dport, "dport", &mut hdr.dport),
        ] {
            if let Some(v) = v {
                if !matches!(hdr.proto, (6 | 17, 0xff)) {
                    cx.err(v, k(key), "ports need proto = \"tcp\" or \"udp\"");
                }
                match port_range(v.get_ref()) {
                    Ok(r) => *slot = r,
                    Err(e) => cx.err(v, k(key), e),
                }
            }
        }
        if let Some(f) = &rs.tcp_flags {
            if hdr.proto != (6, 0xff) {
                cx.err(f, k("tcp_flags"), "tcp_flags need proto = \"tcp\"");
            }
            match tcp_flags(f.get_ref()) {
                Ok(v) => hdr.flags = v,
                Err(e) => cx.err(f, k("tcp_flags"), e),
            }
        }
        if let Some(t) = &rs.icmp_type {
            let v6 = match hdr.proto {
                (1, 0xff) => Some(false),
                (58, 0xff) => Some(true),
                _ => None,
            };
            match (v6, icmp_type(t.get_ref(), v6.unwrap_or(false))) {
                (None, _) => cx.err(t, k("icmp_type"), "needs proto = \"icmp\" or \"icmpv6\""),
                (Some(_), Err(e)) => cx.err(t, k("icmp_type"), e),
                (Some(_), Ok(ty)) => hdr.flags = (u16::from(ty) << 8, 0xff00),
            }
            if let Some(c) = &rs.icmp_code {
                match u8::try_from(*c.get_ref()) {
                    Ok(c) => hdr.flags = (hdr.flags.0 | u16::from(c), hdr.flags.1 | 0xff),
                    Err(_) => cx.err(c, k("icmp_code"), "must be 0..=255"),
                }
            }
        } else if let Some(c) = &rs.icmp_code {
            cx.err(c, k("icmp_code"), "needs `icmp_type`");
        }
        let in_ports = rs
            .in_
            .as_ref()
            .map_or(Vec::new(), |v| resolve(cx, v, k("in")));
        let out_ports = rs
            .out
            .as_ref()
            .map_or(Vec::new(), |v| resolve(cx, v, k("out")));
        let mut states = 0u8;
        if let Some(st) = &rs.state {
            for n in st.get_ref().names() {
                match state::NAMES.iter().find(|(s, _)| *s == n) {
                    Some((_, b)) => states |= b,
                    None => cx.err(
                        st,
                        k("state"),
                        format!("`{n}`: expected new, established, related or invalid"),
                    ),
                }
            }
        }
        let ct = check_ct(cx, rs, &k, states, family, &g.nat);
        let (line, _) = cx.line_col(r.span().start);
        g.rules.push(FwRule {
            hdr,
            in_ports,
            out_ports,
            states,
            action: act,
            counter: rs.counter,
            origin: format!("{}:{line}", cx.file),
            ct,
        });
    }
    if let Some(f) = &fw.classbench_file {
        let act = match &fw.classbench_action {
            Some(a) => match action(a.get_ref(), None) {
                Ok(x) => x,
                Err(e) => {
                    cx.err(a, "firewall.classbench_action", e);
                    Action::Accept
                }
            },
            None => Action::Accept,
        };
        let path = super::files::beside(base, f.get_ref());
        let first = g.rules.len();
        let running = cx
            .reuse
            .map(|c| &c.gateway)
            .and_then(|r| match &r.rule_file {
                Some((p, range)) if *p == path => r.rules.get(range.clone()),
                _ => None,
            });
        if let Some(rules) = running {
            // The running config's rules from this file, with this
            // config's action.
            g.rules.extend(rules.iter().map(|r| FwRule {
                action: act,
                ..r.clone()
            }));
        } else {
            let read = super::files::read_regular(&path, "rule file", 1 << 30);
            match read {
                Err(e) => cx.err(f, "firewall.classbench_file", e),
                Ok(text) => {
                    for (n, l) in text.lines().enumerate() {
                        if l.trim().is_empty() {
                            continue;
                        }
                        match parse_classbench(l) {
                            Some(hdr) => g.rules.push(FwRule {
                                hdr,
                                in_ports: Vec::new(),
                                out_ports: Vec::new(),
                                states: 0,
                                action: act,
                                counter: false,
                                origin: format!("{}:{}", path.display(), n + 1),
                                ct: CtMatch::default(),
                            }),
                            None => {
                                cx.err(
                                    f,
                                    "firewall.classbench_file",
                                    format!(
                                        "{}:{}: not a ClassBench rule line",
                                        path.display(),
                                        n + 1
                                    ),
                                );
                                break;
                            }
                        }
                    }
                }
            }
        }
        g.rule_file = Some((path, first..g.rules.len()));
    } else if let Some(a) = &fw.classbench_action {
        cx.err(a, "firewall.classbench_action", "needs `classbench_file`");
    }
}

/// A rule's conntrack matches: `ct_status`, `ct_original_dst`,
/// `ct_original_dport`; refused where they can never match.
fn check_ct(
    cx: &mut Ctx<'_>,
    rs: &RawRule,
    k: &dyn Fn(&str) -> String,
    states: u8,
    family: Option<bool>,
    nat: &NatConfig,
) -> CtMatch {
    let mut ct = CtMatch::default();
    let entries = nat.dnat.len() + nat.statics.len();
    if let Some(st) = &rs.ct_status {
        for n in st.get_ref().names() {
            let (neg, name) = match n.strip_prefix('!') {
                Some(x) => (true, x.trim()),
                None => (false, n),
            };
            let Some(&(_, bit)) = status::NAMES.iter().find(|(s, _)| *s == name) else {
                cx.err(
                    st,
                    k("ct_status"),
                    format!("`{n}`: expected dnat, snat, !dnat or !snat"),
                );
                continue;
            };
            if ct.status.1 & bit != 0 && (ct.status.0 & bit != 0) == neg {
                cx.err(
                    st,
                    k("ct_status"),
                    format!("`{name}` and `!{name}` together can never match"),
                );
            }
            ct.status.1 |= bit;
            if !neg {
                ct.status.0 |= bit;
            }
        }
        if ct.status.0 & status::DNAT != 0 && entries == 0 {
            cx.err(
                st,
                k("ct_status"),
                "no [[nat.dnat]] or [[nat.static]] translates a destination: this rule can never match",
            );
        }
        if ct.status.0 & status::SNAT != 0 && states != 0 && states & state::RELATED == 0 {
            cx.err(
                st,
                k("ct_status"),
                "`snat` is known only for packets of open flows (state `related`): the firewall decides on a new flow before source NAT maps it, as nftables' forward chain does",
            );
        }
        if ct.status.0 & status::SNAT != 0 && nat.snat.is_empty() && nat.statics.is_empty() {
            cx.err(
                st,
                k("ct_status"),
                "no [[nat.snat]] or [[nat.static]] translates a source: this rule can never match",
            );
        }
    }
    if let Some(v) = &rs.ct_original_dst {
        let text = v.get_ref();
        let parsed = match text.parse::<Ipv4Addr>() {
            Ok(a) => Some((IpAddr::V4(a), 32)),
            Err(_) => pipeline::prefix::parse(text),
        };
        match parsed {
            Some((IpAddr::V4(a), l)) => {
                if family == Some(false) {
                    cx.err(
                        v,
                        k("ct_original_dst"),
                        "an IPv4 prefix (NAT44) in a rule with IPv6 addresses can never match",
                    );
                }
                ct.orig_dst = Some(v4_prefix(a, l));
            }
            _ => cx.err(
                v,
                k("ct_original_dst"),
                format!(
                    "`{}` is not an IPv4 prefix such as 198.19.0.1/32 (NAT is IPv4 only)",
                    v.get_ref()
                ),
            ),
        }
    }
    if let Some(v) = &rs.ct_original_dport {
        let proto = rs.proto.as_ref().and_then(|p| proto_num(p.get_ref()).ok());
        if !matches!(proto, Some(6 | 17)) {
            cx.err(
                v,
                k("ct_original_dport"),
                "needs proto = \"tcp\" or \"udp\"",
            );
        }
        match port_range(v.get_ref()) {
            Ok(r) => ct.orig_dport = Some(r),
            Err(e) => cx.err(v, k("ct_original_dport"), e),
        }
    }
    if (ct.orig_dst.is_some() || ct.orig_dport.is_some()) && entries > MAX_DNAT_ENTRIES {
        let at = rs
            .ct_original_dst
            .as_ref()
            .map(|v| v.span())
            .or(rs.ct_original_dport.as_ref().map(|v| v.span()))
            .unwrap_or_default();
        cx.err(
            &Spanned::new(at, ()),
            k("ct_original_dst"),
            format!("ct_original_* matches tell apart at most {MAX_DNAT_ENTRIES} destination NAT entries; the config has {entries}"),
        );
    }
    ct
}

#[cfg(test)]
mod tests {
    use super::super::schema::PortSpec;
    use super::*;

    #[test]
    fn parses_flags_ports_and_protocols() {
        assert_eq!(tcp_flags("syn/syn,ack").unwrap(), (0x02, 0x12));
        assert_eq!(tcp_flags("rst").unwrap(), (0x04, 0x04));
        assert!(tcp_flags("syn,bogus").unwrap_err().contains("bogus"));
        assert_eq!(port_range(&PortSpec::Num(53)).unwrap(), (53, 53));
        assert_eq!(
            port_range(&PortSpec::Text("1024-2048".into())).unwrap(),
            (1024, 2048)
        );
        assert!(port_range(&PortSpec::Num(70000)).is_err());
        assert_eq!(proto_num(&ProtoSpec::Name("udp".into())).unwrap(), 17);
        assert!(proto_num(&ProtoSpec::Name("sctp".into())).is_err());
        let (a, l, is4) = prefix("198.18.0.0/15").unwrap();
        assert!(is4 && l == 111 && a == v4_prefix("198.18.0.0".parse().unwrap(), 15).0);
    }
}
