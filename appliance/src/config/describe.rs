//! A validated config as `sluice check`, `sluice run` and `sluice ctl show
//! config` print it: one line per port and worker, the firewall and NAT in
//! figures. Never Debug formatting.

use super::{Config, PortKind};
use std::path::PathBuf;

/// A generator's frame length, or its mix (`imix`, or the lengths and the
/// mean).
fn sizes_of(g: &pmd::probe::GenConfig) -> String {
    if g.sizes.is_empty() {
        return g.size.to_string();
    }
    let mean = g.sizes.iter().sum::<usize>() as f64 / g.sizes.len() as f64;
    if g.sizes == pmd::probe::IMIX {
        return format!("imix (mean {mean:.1})");
    }
    let l: Vec<String> = g.sizes.iter().map(|x| x.to_string()).collect();
    format!("[{}] (mean {mean:.1})", l.join(","))
}

/// The config in a few lines.
pub fn describe(c: &Config) -> String {
    let mut s = format!("{}: ok\n", c.source);
    for p in &c.ports {
        let kind = match &p.kind {
            PortKind::Softnic { gen, .. } => format!(
                "softnic rate {} size {} flows {}",
                match gen.rate {
                    pmd::softnic::Rate::Pps(p) => format!("{p} pps"),
                    pmd::softnic::Rate::Max => "max".into(),
                },
                sizes_of(gen),
                gen.flows
            ),
            PortKind::Null { size } => format!("null size {size}"),
            PortKind::Dpdk { device } => format!("dpdk {device}"),
            PortKind::AfPacket { iface, .. } => format!("afpacket {iface}"),
            PortKind::AfXdp { iface, .. } => format!("afxdp {iface}"),
            PortKind::Pcap {
                rx_file, tx_file, ..
            } => {
                let f = |p: &Option<PathBuf>| {
                    p.as_ref().map_or("-".into(), |p| p.display().to_string())
                };
                format!("pcap rx {} tx {}", f(rx_file), f(tx_file))
            }
        };
        s += &format!(
            "  port {:<6} {kind}; rxq {} txq {} rxd {} txd {}; peer {}\n",
            p.name,
            p.rxq,
            p.txq,
            p.rxd,
            p.txd,
            c.ports[usize::from(p.peer)].name
        );
    }
    for w in &c.workers {
        let q = |v: &[(u16, u16)]| {
            v.iter()
                .map(|&(p, q)| format!("{}:{q}", c.ports[usize::from(p)].name))
                .collect::<Vec<_>>()
                .join(" ")
        };
        s += &format!(
            "  worker core {} mode {}: rx [{}] tx [{}]\n",
            w.core,
            w.mode.name(),
            q(&w.rx),
            q(&w.tx)
        );
    }
    let g = &c.gateway;
    if g.enabled {
        let set =
            pipeline::firewall::RuleSet::build(g.rules.clone(), g.default, &g.nat.original_dsts());
        s += &format!(
            "  firewall: {} rules ({} after port/state expansion, {} distinct bit vectors; IPv4: {}), default {}; classifier built in {:.2} ms, {:.1} KiB\n",
            set.rules().len(),
            set.expanded(),
            set.vectors(),
            set.layout(),
            match g.default {
                pipeline::firewall::Action::Accept => "accept",
                pipeline::firewall::Action::Drop => "drop",
                pipeline::firewall::Action::Reject(_) => "reject",
            },
            set.build_ns() as f64 / 1e6,
            set.memory() as f64 / 1024.0
        );
        let workers = c.l3fwd_workers().max(1);
        let per = g.nat.ports.slice(0, workers).map_or(0, |r| r.len());
        s += &format!(
            "  conntrack: {} flows per worker ({:.0} MiB each, allocated at start), TCP windows {}; nat: {} snat, {} dnat, {} static; ports {}-{} ({} per worker)\n",
            g.ct_capacity,
            pipeline::conntrack::ConnTrack::bytes_for(
                g.ct_capacity,
                g.ct_tcp_window,
                c.export.as_ref().is_some_and(|e| !e.collectors.is_empty())
            ) as f64
                / f64::from(1 << 20),
            if g.ct_tcp_window { "tracked" } else { "not tracked" },
            g.nat.snat.len(),
            g.nat.dnat.len(),
            g.nat.statics.len(),
            g.nat.ports.lo,
            g.nat.ports.hi,
            per
        );
    }
    for (i, name) in c.router.names.iter().enumerate() {
        let Some((iface, v)) = c.router.interfaces.get(i).and_then(|f| Some((f, f.vlan?))) else {
            continue;
        };
        let tags = match v.outer {
            Some(o) => format!("QinQ {o}.{}", v.id),
            None => format!("802.1Q {}", v.id),
        };
        let addrs: Vec<String> = iface
            .ipv4
            .iter()
            .map(|(a, l)| format!("{a}/{l}"))
            .chain(iface.ipv6.iter().map(|(a, l)| format!("{a}/{l}")))
            .collect();
        s += &format!(
            "  vlan {name} on {}: {tags}; mtu {}; {}\n",
            c.ports[usize::from(v.port)].name,
            iface.mtu,
            addrs.join(" ")
        );
    }
    for (i, ad) in c.router.adverts.iter().enumerate() {
        let (Some(ad), Some(name), Some(iface)) =
            (ad, c.router.names.get(i), c.router.interfaces.get(i))
        else {
            continue;
        };
        s += &format!("  ra on {name}: {}\n", advert(ad, iface.mac));
    }
    let multipath = c.router.routes.iter().filter(|r| r.paths.len() > 1).count();
    if multipath > 0 {
        s += &format!("  ecmp: {multipath} routes with several paths\n");
    }
    if !c.taps.is_empty() {
        let t: Vec<String> = c
            .taps
            .iter()
            .map(|(i, n)| {
                format!(
                    "{}={n}",
                    super::control_plane::name_of(&c.router, &c.ports, *i)
                )
            })
            .collect();
        s += &format!(
            "  control plane: TAP mirrors {} (traffic for the router's addresses to the kernel)\n",
            t.join(", ")
        );
        if c.punt_rules.is_empty() {
            s += "  control plane: no punt rules (everything for the router goes to the kernel)\n";
        }
    }
    for (i, r) in c.punt_rules.iter().enumerate() {
        let mut what = Vec::new();
        if let Some(p) = r.proto {
            what.push(format!("proto {p}"));
        }
        for (name, range) in [("port", r.ports), ("sport", r.sports)] {
            if let Some((lo, hi)) = range {
                what.push(if lo == hi {
                    format!("{name} {lo}")
                } else {
                    format!("{name} {lo}-{hi}")
                });
            }
        }
        if !r.from.is_empty() {
            let f: Vec<String> = r.from.iter().map(|(a, l)| format!("{a}/{l}")).collect();
            what.push(format!("from {}", f.join(" ")));
        }
        if r.states != 0 {
            let st: Vec<&str> = pipeline::firewall::state::NAMES
                .iter()
                .filter(|(_, b)| r.states & b != 0)
                .map(|(n, _)| *n)
                .collect();
            what.push(format!("state {}", st.join(",")));
        }
        if what.is_empty() {
            what.push("any".into());
        }
        let rate = r
            .rate
            .map_or("unlimited".to_string(), |n| format!("{n} pps per core"));
        s += &format!(
            "  control plane: punt rule {i}: {}, {rate} (the rest: punt_denied)\n",
            what.join(" ")
        );
    }
    if let Some(cp) = &c.control_plane {
        let ifs: Vec<String> = cp
            .interfaces
            .iter()
            .map(|(i, n)| {
                format!(
                    "{}={n}",
                    super::control_plane::name_of(&c.router, &c.ports, *i)
                )
            })
            .collect();
        s += &format!(
            "  control plane: routes mirrored from kernel table {} over netlink (receive buffer {} KiB); kernel interfaces {}\n",
            cp.table,
            cp.rcvbuf / 1024,
            ifs.join(", ")
        );
    }
    s
}

/// A port's Router Advertisements in one line.
fn advert(ad: &pipeline::router::Advert, mac: pipeline::wire::MacAddr) -> String {
    let mut parts = vec![
        format!("from {}", pipeline::router::link_local(mac)),
        format!(
            "every {}-{} s",
            ad.min_interval_ms / 1000,
            ad.max_interval_ms / 1000
        ),
        format!("router lifetime {} s", ad.lifetime_s),
    ];
    let prefixes: Vec<String> = ad
        .prefixes
        .iter()
        .map(|p| {
            format!(
                "{}/{}{}",
                p.prefix,
                p.len,
                if p.autonomous { " (SLAAC)" } else { "" }
            )
        })
        .collect();
    if !prefixes.is_empty() {
        parts.push(format!("prefixes {}", prefixes.join(" ")));
    }
    if let Some(m) = ad.mtu {
        parts.push(format!("mtu {m}"));
    }
    if ad.managed || ad.other {
        parts.push(format!(
            "DHCPv6 for {}",
            if ad.managed {
                "addresses"
            } else {
                "other settings"
            }
        ));
    }
    let join = |v: Vec<String>| v.join(" ");
    if !ad.rdnss.is_empty() {
        parts.push(format!(
            "rdnss {}",
            join(ad.rdnss.iter().map(|a| a.to_string()).collect())
        ));
    }
    if !ad.dnssl.is_empty() {
        parts.push(format!("dnssl {}", ad.dnssl.join(" ")));
    }
    if !ad.pref64.is_empty() {
        parts.push(format!(
            "pref64 {}",
            join(ad.pref64.iter().map(|(a, l)| format!("{a}/{l}")).collect())
        ));
    }
    parts.join("; ")
}
