//! `[port.ra]`: the Router Advertisements a port sends (RFC 4861 6.2.1's
//! settings with radvd's defaults), checked into the router's
//! [`Advert`]s.

use super::router::PortAddrs;
use super::schema::RawRa;
use super::typed::RouterSetup;
use super::Ctx;
use pipeline::router::{AdvPrefix, Advert};
use std::net::Ipv6Addr;
use toml::Spanned;

/// At most this many prefixes and DNS servers a port advertises (the
/// advertisement stays well inside IPv6's minimum MTU).
const MAX_PREFIXES: usize = 16;
const MAX_RDNSS: usize = 8;
const MAX_DNSSL: usize = 8;

/// Why `name` cannot be a DNSSL entry (RFC 1035 2.3.1's letters, digits
/// and hyphens, labels of 1 to 63, 253 in all), if it cannot.
fn bad_domain(name: &str) -> Option<String> {
    let n = name.strip_suffix('.').unwrap_or(name);
    if n.is_empty() || n.len() > 253 {
        return Some(format!("`{name}`: a domain name is 1 to 253 characters"));
    }
    for l in n.split('.') {
        let ok = (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-');
        if !ok {
            return Some(format!(
                "`{name}`: label `{l}` must be 1 to 63 letters, digits or inner hyphens"
            ));
        }
    }
    None
}

/// PREF64's lifetime is in units of 8 s, 13 bits (RFC 8781 4).
const MAX_PREF64_LIFETIME_S: u32 = 8191 * 8;

/// The advertisements of the router's interfaces (ports, then VLAN
/// sub-interfaces), by interface (`None` where one has no `ra` table);
/// `nat64` are the NAT64 prefixes PREF64 announces.
pub(super) fn check(
    cx: &mut Ctx<'_>,
    ifaces: &[PortAddrs<'_>],
    router: &RouterSetup,
    nat64: &[(u128, u8)],
) -> Vec<Option<Advert>> {
    ifaces
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let ra = a.ra?;
            let mtu = router.interfaces.get(i).map_or(1500, |f| f.mtu);
            advert(cx, &format!("{}.ra", a.key), ra, a.ipv6, mtu, nat64)
        })
        .collect()
}

fn advert(
    cx: &mut Ctx<'_>,
    key: &str,
    ra: &Spanned<RawRa>,
    ipv6: &[super::Str<super::Prefix<Ipv6Addr>>],
    mtu: u16,
    nat64: &[(u128, u8)],
) -> Option<Advert> {
    let k = |f: &str| format!("{key}.{f}");
    let r = ra.get_ref();
    let errs = cx.errs.len();
    if ipv6.is_empty() {
        cx.err(
            ra,
            key,
            "an interface advertises from its IPv6 link-local address: give it `ipv6` addresses",
        );
    }
    let get = |v: &Option<Spanned<u32>>, d: u32| v.as_ref().map_or(d, |x| *x.get_ref());
    let max = get(&r.interval_s, 600);
    if let Some(v) = &r.interval_s {
        if !(4..=1800).contains(&max) {
            cx.err(
                v,
                k("interval_s"),
                "must be 4 to 1800 seconds (RFC 4861's MaxRtrAdvInterval)",
            );
        }
    }
    let max_ms = max.clamp(4, 1800) * 1000;
    // RFC 4861 6.2.1: 3 s to 0.75 × the interval; a third by default.
    let min_ms = match &r.min_interval_s {
        Some(v) => {
            let ms = v.get_ref().saturating_mul(1000);
            if ms < 3000 || ms > max_ms * 3 / 4 {
                cx.err(
                    v,
                    k("min_interval_s"),
                    format!(
                        "must be 3 seconds to three quarters of interval_s ({} s); got {}",
                        max_ms * 3 / 4000,
                        v.get_ref()
                    ),
                );
            }
            ms.clamp(3000, max_ms * 3 / 4)
        }
        None => (max_ms / 3).clamp(3000, max_ms * 3 / 4),
    };
    let lifetime = get(&r.lifetime_s, (3 * max).min(9000));
    if let Some(v) = &r.lifetime_s {
        if lifetime != 0 && !(max..=9000).contains(&lifetime) {
            cx.err(
                v,
                k("lifetime_s"),
                format!("must be 0 (not a default router) or interval_s ({max}) to 9000 seconds; got {lifetime}"),
            );
        }
    }
    let valid = get(&r.valid_lifetime_s, 86_400);
    let preferred = get(&r.preferred_lifetime_s, 14_400);
    if let Some(v) = &r.preferred_lifetime_s {
        if preferred > valid {
            cx.err(
                v,
                k("preferred_lifetime_s"),
                format!("must not exceed valid_lifetime_s ({valid})"),
            );
        }
    }
    // The prefixes: the port's subnets unless listed (link-local ones
    // never), each on-link, and for SLAAC where it is a /64.
    let listed: Vec<(Ipv6Addr, u8)> = match &r.prefixes {
        Some(v) => v.get_ref().iter().map(|p| (p.0.addr, p.0.len)).collect(),
        None => ipv6.iter().map(|p| (p.0.addr, p.0.len)).collect(),
    };
    let mut prefixes: Vec<AdvPrefix> = Vec::new();
    for (a, len) in listed {
        let net = u128::from(a) & pipeline::prefix::mask6(len);
        if Ipv6Addr::from(net).is_unicast_link_local() || len > 64 && r.prefixes.is_none() {
            continue; // fe80::/10, or a subnet no host forms addresses in
        }
        if prefixes
            .iter()
            .any(|p| u128::from(p.prefix) == net && p.len == len)
        {
            continue;
        }
        prefixes.push(AdvPrefix {
            prefix: Ipv6Addr::from(net),
            len,
            on_link: true,
            autonomous: len == 64,
            valid_s: valid,
            preferred_s: preferred,
        });
    }
    if let Some(v) = &r.prefixes {
        if prefixes.len() > MAX_PREFIXES {
            cx.err(v, k("prefixes"), format!("at most {MAX_PREFIXES} prefixes"));
        }
        if let Some(p) = v
            .get_ref()
            .iter()
            .find(|p| p.0.addr.is_unicast_link_local())
        {
            cx.err(
                v,
                k("prefixes"),
                format!(
                    "{}/{} is link-local: hosts have their own",
                    p.0.addr, p.0.len
                ),
            );
        }
    }
    prefixes.truncate(MAX_PREFIXES);
    let managed = r.managed.as_ref().is_some_and(|m| *m.get_ref());
    if !managed && !prefixes.iter().any(|p| p.autonomous) {
        let msg = "no /64 prefix: hosts cannot form addresses by SLAAC (RFC 4862 needs a /64), and managed = false says no DHCPv6 either";
        match &r.prefixes {
            Some(p) => cx.warn(p, k("prefixes"), msg),
            None => cx.warn(ra, k("prefixes"), msg),
        }
    }
    let rdnss: Vec<Ipv6Addr> = r
        .rdnss
        .as_ref()
        .map(|v| v.get_ref().iter().map(|a| a.0).collect())
        .unwrap_or_default();
    if let Some(v) = &r.rdnss {
        if rdnss.len() > MAX_RDNSS {
            cx.err(v, k("rdnss"), format!("at most {MAX_RDNSS} DNS servers"));
        }
        if let Some(a) = rdnss
            .iter()
            .find(|a| a.is_unspecified() || a.is_multicast())
        {
            cx.err(v, k("rdnss"), format!("{a} is not a DNS server's address"));
        }
    }
    let dnssl: Vec<String> = r
        .dnssl
        .as_ref()
        .map(|v| v.get_ref().clone())
        .unwrap_or_default();
    if let Some(v) = &r.dnssl {
        if dnssl.len() > MAX_DNSSL {
            cx.err(v, k("dnssl"), format!("at most {MAX_DNSSL} domains"));
        }
        if let Some(why) = dnssl.iter().find_map(|n| bad_domain(n)) {
            cx.err(v, k("dnssl"), why);
        }
    }
    let pref64: Vec<(Ipv6Addr, u8)> = match &r.pref64 {
        Some(v) if *v.get_ref() && nat64.is_empty() => {
            cx.err(
                v,
                k("pref64"),
                "announces the [[nat.nat64]] prefixes, and there is none",
            );
            Vec::new()
        }
        Some(v) if !*v.get_ref() => Vec::new(),
        _ => nat64
            .iter()
            .map(|&(p, len)| (Ipv6Addr::from(p), len))
            .collect(),
    };
    if cx.errs.len() > errs {
        return None;
    }
    Some(Advert {
        max_interval_ms: max_ms,
        min_interval_ms: min_ms,
        lifetime_s: lifetime as u16,
        hop_limit: r.hop_limit.as_ref().map_or(64, |h| *h.get_ref()),
        managed,
        other: r.other.as_ref().is_some_and(|m| *m.get_ref()),
        mtu: r
            .mtu
            .as_ref()
            .is_none_or(|m| *m.get_ref())
            .then_some(u32::from(mtu)),
        prefixes,
        rdnss_lifetime_s: 3 * max,
        rdnss: rdnss.into_iter().take(MAX_RDNSS).collect(),
        dnssl,
        // RFC 8781 4: at least 3 × the interval, rounded up to 8 s.
        pref64_lifetime_s: (3 * max)
            .div_ceil(8)
            .saturating_mul(8)
            .min(MAX_PREF64_LIFETIME_S) as u16,
        pref64,
    })
}
