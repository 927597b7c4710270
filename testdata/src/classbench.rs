//! ClassBench-style rule sets of any size, grown from a real one.
//!
//! ClassBench (Taylor and Turner, "ClassBench: A Packet Classification
//! Benchmark", 2005) makes a rule set from a *seed*: the statistics of a
//! real filter set (how prefix lengths pair up, which port ranges and
//! protocols occur, and how the addresses branch in a binary tree), and
//! draws new rules that keep them. Its seed files are not here, but three
//! of the sets it made from them are (`classbench/acl1_10k`, `fw1_10k`,
//! `ipc1_10k`), and a set is its own best seed. [`grow`] takes one as the
//! seed and draws `n` distinct rules the same way:
//!
//! - Each new rule starts from a seed rule picked at random, and takes
//!   its place in the order (a real set's broad rules come last, and
//!   first-match classification depends on it): its source
//!   and destination prefix lengths (so their joint distribution, which
//!   sets the classification's hard cases, is kept), its port ranges
//!   (exact, ranges, wildcards, as they occur together) and its protocol.
//! - Its prefixes are drawn by walking the binary tree of the seed's
//!   prefixes (one tree for sources, one for destinations) from the top
//!   down to the length wanted: at each bit the walk follows the seed's
//!   prefixes in proportion to how many go each way, with a little weight
//!   (`NEW`) on a side none took. So the new prefixes cluster and nest
//!   where the seed's do (shared high-order bits, ClassBench's branching
//!   and skew), and sparse parts of the tree give new addresses.
//!
//! [`trace`] draws headers for a set as ClassBench's trace generator
//! does without locality: a rule at random, then a point inside it (its
//! prefixes' free bits, its port ranges, its protocol or a common one).
//!
//! Both write ClassBench's text formats, so what they make is read by the
//! same parsers as the real sets (`pipeline::acl::parse_classbench` and
//! `parse_trace`), and both are deterministic for a given `seed`.

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::collections::HashSet;

/// Weight of a side of the tree the seed's prefixes did not take, against
/// one prefix that did.
const NEW: f64 = 0.5;

/// A rule as ClassBench writes it (IPv4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Rule {
    src: (u32, u8),
    dst: (u32, u8),
    sport: (u16, u16),
    dport: (u16, u16),
    proto: (u8, u8),
}

impl Rule {
    fn line(&self) -> String {
        let p = |(a, l): (u32, u8)| format!("{}/{l}", std::net::Ipv4Addr::from(a));
        format!(
            "@{}\t{}\t{} : {}\t{} : {}\t0x{:02x}/0x{:02X}\t0x0000/0x0000\t",
            p(self.src),
            p(self.dst),
            self.sport.0,
            self.sport.1,
            self.dport.0,
            self.dport.1,
            self.proto.0,
            self.proto.1
        )
    }
}

/// Parses one ClassBench rule line (IPv4); None for anything else.
fn parse(line: &str) -> Option<Rule> {
    let f: Vec<&str> = line
        .trim()
        .strip_prefix('@')?
        .split('\t')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if f.len() < 5 {
        return None;
    }
    let prefix = |s: &str| -> Option<(u32, u8)> {
        let (a, l) = s.split_once('/')?;
        let a: std::net::Ipv4Addr = a.parse().ok()?;
        let l: u8 = l.parse().ok().filter(|l| *l <= 32)?;
        Some((mask(u32::from(a), l), l))
    };
    let range = |s: &str| -> Option<(u16, u16)> {
        let (a, b) = s.split_once(':')?;
        Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
    };
    let (pv, pm) = f[4].split_once('/')?;
    let hex = |x: &str| u8::from_str_radix(x.trim_start_matches("0x"), 16).ok();
    Some(Rule {
        src: prefix(f[0])?,
        dst: prefix(f[1])?,
        sport: range(f[2])?,
        dport: range(f[3])?,
        proto: (hex(pv)?, hex(pm)?),
    })
}

fn mask(a: u32, len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        a & (u32::MAX << (32 - u32::from(len)))
    }
}

/// The binary tree of a set's prefixes: each node counts the prefixes at
/// or below it.
struct Tree {
    /// Children (0: none; the root is node 0 and is no one's child).
    kids: Vec<[u32; 2]>,
    count: Vec<u32>,
}

impl Tree {
    fn new(prefixes: impl Iterator<Item = (u32, u8)>) -> Tree {
        let mut t = Tree {
            kids: vec![[0, 0]],
            count: vec![0],
        };
        for (a, len) in prefixes {
            let mut n = 0usize;
            t.count[0] += 1;
            for d in 0..len {
                let bit = ((a >> (31 - d)) & 1) as usize;
                if t.kids[n][bit] == 0 {
                    t.kids.push([0, 0]);
                    t.count.push(0);
                    t.kids[n][bit] = (t.kids.len() - 1) as u32;
                }
                n = t.kids[n][bit] as usize;
                t.count[n] += 1;
            }
        }
        t
    }

    /// A prefix of `len` bits drawn by walking down the tree.
    fn draw(&self, len: u8, rng: &mut SmallRng) -> (u32, u8) {
        let mut a = 0u32;
        let mut n = Some(0usize);
        for d in 0..len {
            let bit = match n {
                Some(i) => {
                    let w = |b: usize| {
                        let k = self.kids[i][b] as usize;
                        if k == 0 {
                            NEW
                        } else {
                            f64::from(self.count[k])
                        }
                    };
                    let (w0, w1) = (w(0), w(1));
                    usize::from(rng.random::<f64>() * (w0 + w1) >= w0)
                }
                None => usize::from(rng.random::<bool>()),
            };
            a |= (bit as u32) << (31 - d);
            n = n.and_then(|i| Some(self.kids[i][bit] as usize).filter(|&k| k != 0));
        }
        (a, len)
    }
}

/// `n` distinct rules grown from the seed set's lines (ClassBench's rule
/// format; lines that are not IPv4 rules are skipped), as ClassBench rule
/// lines. Fewer if the seed cannot give that many distinct ones.
pub fn grow(seed_lines: &[String], n: usize, seed: u64) -> Vec<String> {
    let rules: Vec<Rule> = seed_lines.iter().filter_map(|l| parse(l)).collect();
    if rules.is_empty() {
        return Vec::new();
    }
    let srcs = Tree::new(rules.iter().map(|r| r.src));
    let dsts = Tree::new(rules.iter().map(|r| r.dst));
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    let mut tries = 0usize;
    while out.len() < n && tries < 50 * n {
        tries += 1;
        let i = rng.random_range(0..rules.len());
        let r = rules[i];
        let new = Rule {
            src: srcs.draw(r.src.1, &mut rng),
            dst: dsts.draw(r.dst.1, &mut rng),
            ..r
        };
        if seen.insert(new) {
            out.push((i, new));
        }
    }
    // In the seed's order (each where its seed rule is), as a real set
    // orders its rules: the broad ones that end it end this one too.
    out.sort_by_key(|&(i, _)| i);
    out.into_iter().map(|(_, r)| r.line()).collect()
}

/// `n` headers for the rule lines' set, in ClassBench's trace format
/// (source, destination, ports, protocol, flags 0, and the rule drawn
/// from, 1-based).
pub fn trace(rule_lines: &[String], n: usize, seed: u64) -> Vec<String> {
    let rules: Vec<Rule> = rule_lines.iter().filter_map(|l| parse(l)).collect();
    if rules.is_empty() {
        return Vec::new();
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let i = rng.random_range(0..rules.len());
            let r = &rules[i];
            let inside = |(a, len): (u32, u8), rng: &mut SmallRng| {
                if len == 32 {
                    a
                } else {
                    a | (rng.random::<u32>() >> len)
                }
            };
            let proto = if r.proto.1 == 0 {
                [6, 17, 1][rng.random_range(0..3)]
            } else {
                r.proto.0
            };
            format!(
                "{}\t{}\t{}\t{}\t{}\t0\t{}",
                inside(r.src, &mut rng),
                inside(r.dst, &mut rng),
                rng.random_range(r.sport.0..=r.sport.1),
                rng.random_range(r.dport.0..=r.dport.1),
                proto,
                i + 1
            )
        })
        .collect()
}

/// An IPv4 address or prefix as Sluice's classifier holds it (IPv4-mapped
/// `u128`, its length 96 more) moved into IPv6: its 32 bits after
/// 2001:db8::/32, its length 32 more; an address as a /128. For IPv6 rule
/// sets of ClassBench's shapes (the IPv4 sets' prefix trees, 32 bits
/// down).
pub fn into_ipv6((a, len): (u128, u8)) -> (u128, u8) {
    (
        0x2001_0db8_u128 << 96 | u128::from(a as u32) << 64,
        len.saturating_sub(96) + 32,
    )
}

/// As [`into_ipv6`], but an IPv4 host (a /32) as an IPv6 host, a /128 at
/// the address [`into_ipv6`] gives it (a real IPv6 rule set's host
/// rules: their ends are not on the 32 bits after 2001:db8::/32).
pub fn into_ipv6_hosts((a, len): (u128, u8)) -> (u128, u8) {
    let (a6, len6) = into_ipv6((a, len));
    (a6, if len >= 128 { 128 } else { len6 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> Vec<String> {
        [
            "@10.0.0.0/8\t192.168.1.0/24\t0 : 65535\t80 : 80\t0x06/0xFF\t0x0000/0x0000",
            "@10.1.0.0/16\t192.168.2.0/24\t1024 : 65535\t53 : 53\t0x11/0xFF\t0x0000/0x0000",
            "@10.1.2.0/24\t0.0.0.0/0\t0 : 65535\t0 : 65535\t0x00/0x00\t0x0000/0x0000",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn grown_rules_keep_the_seeds_lengths_ports_and_protocols_and_are_distinct() {
        let seed = seed();
        let seeds: Vec<Rule> = seed.iter().filter_map(|l| parse(l)).collect();
        let grown = grow(&seed, 500, 1);
        assert_eq!(grown.len(), 500);
        let rules: Vec<Rule> = grown.iter().map(|l| parse(l).unwrap()).collect();
        assert_eq!(rules.iter().collect::<HashSet<_>>().len(), 500);
        for r in &rules {
            assert!(
                seeds.iter().any(|s| s.src.1 == r.src.1
                    && s.dst.1 == r.dst.1
                    && s.sport == r.sport
                    && s.dport == r.dport
                    && s.proto == r.proto),
                "{r:?}"
            );
            assert_eq!(mask(r.src.0, r.src.1), r.src.0, "a network address");
        }
        // The tree is followed: with three seed prefixes against NEW at
        // each of 8 bits, about 0.86^8 = 29% of sources stay in 10/8,
        // where drawing each bit at random would put 0.4%.
        let ten = rules.iter().filter(|r| r.src.0 >> 24 == 10).count();
        assert!(ten * 5 > rules.len(), "{ten} of {}", rules.len());
        assert_eq!(grow(&seed, 500, 1), grown, "deterministic");
        // In the seed's order: the /8 sources' rules (from the first
        // seed rule) before the /24 ones (from the third).
        let lens: Vec<u8> = rules.iter().map(|r| r.src.1).collect();
        assert!(lens.windows(2).all(|w| w[0] <= w[1]), "{lens:?}");
        assert_ne!(grow(&seed, 500, 2), grown);
    }

    #[test]
    fn a_seed_too_small_gives_what_it_can() {
        let one = vec![seed()[2].clone()];
        // 10.1.2.0/24 with every free bit drawn: 2^24 sources, so 100 new
        // ones come easily; a /0 destination has one value.
        assert_eq!(grow(&one, 100, 3).len(), 100);
        let fixed =
            vec!["@1.2.3.4/32\t5.6.7.8/32\t1 : 1\t2 : 2\t0x06/0xFF\t0x0000/0x0000".to_string()];
        let g = grow(&fixed, 10, 3);
        assert!(!g.is_empty() && g.len() <= 10);
    }

    #[test]
    fn trace_headers_fall_inside_their_rules() {
        let rules = grow(&seed(), 200, 4);
        let parsed: Vec<Rule> = rules.iter().map(|l| parse(l).unwrap()).collect();
        for l in trace(&rules, 1000, 5) {
            let f: Vec<u64> = l.split('\t').map(|x| x.parse().unwrap()).collect();
            let r = &parsed[f[6] as usize - 1];
            assert_eq!(mask(f[0] as u32, r.src.1), r.src.0);
            assert_eq!(mask(f[1] as u32, r.dst.1), r.dst.0);
            assert!((u64::from(r.sport.0)..=u64::from(r.sport.1)).contains(&f[2]));
            assert!((u64::from(r.dport.0)..=u64::from(r.dport.1)).contains(&f[3]));
            assert_eq!(f[4] as u8 & r.proto.1, r.proto.0 & r.proto.1);
        }
    }
}
