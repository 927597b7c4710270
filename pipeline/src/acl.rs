//! Multi-field packet classification with exact first-match semantics: the
//! rule lookup of the firewall ([`crate::firewall`]).
//!
//! # Algorithm
//!
//! [`Classifier`] is a bit-vector classifier with aggregated bit vectors
//! (see the `bitvec` module for how it works). It was chosen over the tuple space
//! search this module started with ([`TupleSpace`], coarse prefix-length
//! tuples in the spirit of TupleMerge, kept as a benchmark reference) on
//! measured figures: `bench/run-acl.sh` (`bench/results/acl.md`, one 2.6
//! GHz EPYC core) gives, at about 10k rules, 38.5 M lookups/s on acl1,
//! 12.4 M on fw1 and 17.3 M on ipc1 against the tuple space's 8.0, 1.8 and
//! 4.6 (fw1's wildcard-heavy rules collide in the tuple space's coarse
//! buckets, which are then scanned), and 124–531× a linear scan. Builds
//! take 3–54 ms and 3–12 MiB at 10k rules.
//!
//! Bit vectors grow with the square of the rules a cell holds: 100,000
//! rules grown from fw1 or ipc1 would take 782 or 142 MiB. Above 50,000
//! IPv4 rules, or where the best cut takes more than 4 MiB (past a core's
//! cache: fw1_10k's 9.9), the IPv4 rules are decision trees instead
//! (HyperSplit over rule groups, the `split` module): 7–11 MiB at 100k
//! rules, and more lookups than the bit vectors on each set there;
//! [`Classifier::layout`] says which was built.
//!
//! IPv4 and IPv6 rules share one format: addresses are `u128`, IPv4 mapped
//! as `::ffff:a.b.c.d` (prefix length + 96).

use crate::prefix::network6;
use rustc_hash::FxHashMap;
use std::net::{IpAddr, Ipv4Addr};

mod bitvec;
mod lanes;
mod split;
pub use bitvec::{Classifier, Layout, Memo};

/// A rule as a classifier's part holds it: its index in the rule list,
/// and its source and destination ranges in the part's coordinates.
type Member<A> = (usize, (A, A), (A, A));

/// What a rule's ranges leave to check (the bit vectors' and the trees'):
/// TCP flags, metadata, and a protocol mask other than 0 or 0xff (16
/// bytes, so the check stays in cache).
#[derive(Clone, Copy)]
struct Residual {
    flags: (u16, u16),
    proto: (u8, u8),
    meta: (u32, u32),
}

impl Residual {
    fn of(r: &Rule) -> Residual {
        Residual {
            flags: (r.flags.0 & r.flags.1, r.flags.1),
            proto: (r.proto.0 & r.proto.1, r.proto.1),
            meta: (r.meta.0 & r.meta.1, r.meta.1),
        }
    }

    /// Whether there is anything to check.
    fn needed(&self) -> bool {
        self.flags.1 != 0 || self.meta.1 != 0 || !matches!(self.proto.1, 0 | 0xff)
    }

    #[inline(always)]
    fn matches(&self, k: &Key) -> bool {
        k.flags & self.flags.1 == self.flags.0
            && k.proto & self.proto.1 == self.proto.0
            && k.meta & self.meta.1 == self.meta.0
    }
}

/// A rule's protocol as a range: its value under a 0xff mask, every
/// protocol under another (then checked by [`Residual::matches`]).
fn proto_range(p: (u8, u8)) -> (u8, u8) {
    if p.1 == 0xff {
        (p.0, p.0)
    } else {
        (0, 255)
    }
}

/// One classification rule. Priority is its index in the list (0 first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Source prefix (IPv4 mapped into IPv6) and length.
    pub src: (u128, u8),
    /// Destination prefix and length.
    pub dst: (u128, u8),
    /// Source port range (inclusive).
    pub sport: (u16, u16),
    /// Destination port range (inclusive).
    pub dport: (u16, u16),
    /// Protocol value and mask.
    pub proto: (u8, u8),
    /// TCP flags value and mask.
    pub flags: (u16, u16),
    /// Metadata value and mask: what the firewall knows besides the headers
    /// (ingress and egress port, connection state; see
    /// [`crate::firewall`]). ClassBench rules leave it unmasked.
    pub meta: (u32, u32),
}

/// A packet's classification key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    /// Source address (IPv4 mapped).
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Protocol.
    pub proto: u8,
    /// TCP flags.
    pub flags: u16,
    /// Metadata (see [`Rule::meta`]).
    pub meta: u32,
}

const V4_MAPPED: u128 = 0xffff << 32;

/// An IPv4 address as the classifier's `u128`.
pub fn v4(a: u32) -> u128 {
    V4_MAPPED | u128::from(a)
}

/// Whether a `u128` address is an IPv4 one ([`v4`]'s, IPv4 mapped).
#[inline(always)]
pub fn is_v4(a: u128) -> bool {
    a >> 32 == V4_MAPPED >> 32
}

/// An IPv4 prefix as the classifier's (address, length).
pub fn v4_prefix(a: Ipv4Addr, len: u8) -> (u128, u8) {
    (network6(v4(u32::from(a)), len + 96), len + 96)
}

/// Any IP address as the classifier's `u128`.
pub fn ip(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => v4(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

impl Rule {
    /// The rule that matches everything (a base to set fields on).
    pub fn any() -> Rule {
        Rule {
            src: (0, 0),
            dst: (0, 0),
            sport: (0, 65535),
            dport: (0, 65535),
            proto: (0, 0),
            flags: (0, 0),
            meta: (0, 0),
        }
    }

    /// Whether the rule matches `k` (the reference semantics).
    #[inline]
    pub fn matches(&self, k: &Key) -> bool {
        network6(k.src, self.src.1) == self.src.0
            && network6(k.dst, self.dst.1) == self.dst.0
            && (self.sport.0..=self.sport.1).contains(&k.sport)
            && (self.dport.0..=self.dport.1).contains(&k.dport)
            && k.proto & self.proto.1 == self.proto.0 & self.proto.1
            && k.flags & self.flags.1 == self.flags.0 & self.flags.1
            && k.meta & self.meta.1 == self.meta.0 & self.meta.1
    }
}

/// The first rule matching `k`, by scanning all of them (the reference).
pub fn linear(rules: &[Rule], k: &Key) -> Option<u32> {
    rules.iter().position(|r| r.matches(k)).map(|i| i as u32)
}

/// Prefix-length levels of the coarse tuples.
const LEVELS: [u8; 10] = [0, 32, 48, 64, 96, 104, 112, 116, 120, 128];

fn level(len: u8) -> u8 {
    LEVELS
        .iter()
        .rev()
        .copied()
        .find(|&l| l <= len)
        .unwrap_or(0)
}

struct Tuple {
    ls: u8,
    ld: u8,
    /// Best (lowest) rule index in the tuple.
    best: u32,
    table: FxHashMap<(u128, u128), Vec<u32>>,
}

/// The earlier classifier: tuple space search over coarse prefix-length
/// tuples (see the module notes), kept as the benchmark's second
/// reference.
pub struct TupleSpace {
    rules: Vec<Rule>,
    tuples: Vec<Tuple>,
}

impl TupleSpace {
    /// Builds the classifier (control path).
    pub fn build(rules: Vec<Rule>) -> TupleSpace {
        let mut by: FxHashMap<(u8, u8), Tuple> = FxHashMap::default();
        for (i, r) in rules.iter().enumerate() {
            let (ls, ld) = (level(r.src.1), level(r.dst.1));
            let t = by.entry((ls, ld)).or_insert_with(|| Tuple {
                ls,
                ld,
                best: u32::MAX,
                table: FxHashMap::default(),
            });
            t.best = t.best.min(i as u32);
            t.table
                .entry((network6(r.src.0, ls), network6(r.dst.0, ld)))
                .or_default()
                .push(i as u32);
        }
        let mut tuples: Vec<Tuple> = by.into_values().collect();
        tuples.sort_by_key(|t| t.best);
        TupleSpace { rules, tuples }
    }

    /// The first (highest-priority) rule matching `k`.
    #[inline]
    pub fn classify(&self, k: &Key) -> Option<u32> {
        let mut best = u32::MAX;
        for t in &self.tuples {
            if t.best >= best {
                break; // tuples are sorted by their best rule
            }
            if let Some(list) = t.table.get(&(network6(k.src, t.ls), network6(k.dst, t.ld))) {
                for &i in list {
                    if i >= best {
                        break;
                    }
                    if self.rules[i as usize].matches(k) {
                        best = i;
                        break;
                    }
                }
            }
        }
        (best != u32::MAX).then_some(best)
    }

    /// Number of tuples (hash tables probed at most per lookup).
    pub fn tuples(&self) -> usize {
        self.tuples.len()
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True with no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Rough bytes used by the tables (entries and rule indexes).
    pub fn memory(&self) -> usize {
        let per_entry = std::mem::size_of::<((u128, u128), Vec<u32>)>() + 1;
        self.rules.len() * (std::mem::size_of::<Rule>() + 4)
            + self
                .tuples
                .iter()
                .map(|t| t.table.capacity() * per_entry)
                .sum::<usize>()
    }
}

/// Parses one ClassBench rule line (`@src/len dst/len lo : hi lo : hi
/// 0xPP/0xMM 0xFFFF/0xMMMM`).
pub fn parse_classbench(line: &str) -> Option<Rule> {
    let line = line.trim().strip_prefix('@')?;
    let f: Vec<&str> = line
        .split('\t')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if f.len() < 6 {
        return None;
    }
    let prefix = |s: &str| -> Option<(u128, u8)> {
        let (a, l) = s.split_once('/')?;
        let a: Ipv4Addr = a.parse().ok()?;
        let l: u8 = l.parse().ok().filter(|l| *l <= 32)?;
        Some(v4_prefix(a, l))
    };
    let range = |s: &str| -> Option<(u16, u16)> {
        let (a, b) = s.split_once(':')?;
        let (a, b): (u16, u16) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        (a <= b).then_some((a, b))
    };
    let hex_pair = |s: &str| -> Option<(u32, u32)> {
        let (v, m) = s.split_once('/')?;
        let p = |x: &str| u32::from_str_radix(x.trim_start_matches("0x"), 16).ok();
        Some((p(v)?, p(m)?))
    };
    let (pv, pm) = hex_pair(f[4])?;
    let (fv, fm) = hex_pair(f[5])?;
    Some(Rule {
        src: prefix(f[0])?,
        dst: prefix(f[1])?,
        sport: range(f[2])?,
        dport: range(f[3])?,
        proto: (u8::try_from(pv).ok()?, u8::try_from(pm).ok()?),
        flags: (u16::try_from(fv).ok()?, u16::try_from(fm).ok()?),
        meta: (0, 0),
    })
}

/// Parses one ClassBench trace line into a key and the rule id it was
/// generated from.
pub fn parse_trace(line: &str) -> Option<(Key, u32)> {
    let f: Vec<u64> = line
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if f.len() < 7 {
        return None;
    }
    Some((
        Key {
            src: v4(f[0] as u32),
            dst: v4(f[1] as u32),
            sport: f[2] as u16,
            dport: f[3] as u16,
            proto: f[4] as u8,
            flags: f[5] as u16,
            meta: 0,
        },
        f[6] as u32,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(line: &str) -> Rule {
        parse_classbench(line).unwrap()
    }

    #[test]
    fn parses_classbench_lines() {
        let r = rule(
            "@237.73.3.4/32\t67.236.63.210/32\t0 : 65535\t1711 : 1711\t0x06/0xFF\t0x0000/0x0200\t",
        );
        assert_eq!(r.src, v4_prefix("237.73.3.4".parse().unwrap(), 32));
        assert_eq!(r.sport, (0, 65535));
        assert_eq!(r.dport, (1711, 1711));
        assert_eq!(r.proto, (6, 0xff));
        assert_eq!(r.flags, (0, 0x200));
        assert!(
            parse_classbench("@1.2.3.4/33\t0.0.0.0/0\t0 : 1\t0 : 1\t0x00/0x00\t0x0000/0x0000")
                .is_none()
        );
        let (k, id) = parse_trace("1923697128\t2273746465\t0\t1221\t6\t4294967295\t261").unwrap();
        assert_eq!((k.dport, k.proto, id), (1221, 6, 261));
    }

    #[test]
    fn first_match_wins() {
        let rules = vec![
            rule("@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t22 : 22\t0x06/0xFF\t0x0000/0x0000"),
            rule("@10.1.0.0/16\t198.18.0.0/15\t0 : 65535\t0 : 65535\t0x00/0x00\t0x0000/0x0000"),
            rule("@0.0.0.0/0\t0.0.0.0/0\t0 : 65535\t0 : 65535\t0x00/0x00\t0x0000/0x0000"),
        ];
        let c = Classifier::build(rules.clone());
        let ts = TupleSpace::build(rules.clone());
        let k = |s: &str, d: &str, dp: u16, p: u8| Key {
            src: v4(u32::from(s.parse::<Ipv4Addr>().unwrap())),
            dst: v4(u32::from(d.parse::<Ipv4Addr>().unwrap())),
            sport: 1000,
            dport: dp,
            proto: p,
            flags: 0,
            meta: 0,
        };
        for (key, want) in [
            (k("10.1.2.3", "198.18.0.1", 22, 6), Some(0)),
            (k("10.1.2.3", "198.18.0.1", 80, 6), Some(1)),
            (k("10.1.2.3", "8.8.8.8", 22, 17), Some(2)),
            (k("11.1.2.3", "198.19.0.1", 22, 6), Some(2)),
        ] {
            assert_eq!(c.classify(&key), want);
            assert_eq!(ts.classify(&key), want);
            assert_eq!(linear(&rules, &key), want);
        }
        assert!(Classifier::build(vec![])
            .classify(&k("1.1.1.1", "2.2.2.2", 1, 1))
            .is_none());
    }

    use proptest::prelude::*;

    /// A rule from small random choices, so that rules and keys overlap:
    /// addresses from a few IPv4 and IPv6 bases, prefix lengths, port
    /// ranges, protocol and flag masks, metadata.
    fn arb_rule() -> impl Strategy<Value = Rule> {
        let addr = prop_oneof![
            (0u32..4, 0u8..=32)
                .prop_map(|(b, l)| v4_prefix(Ipv4Addr::from(0xc612_0000 | (b << 6)), l)),
            (0u128..4, 0u8..=128).prop_map(|(b, l)| {
                let a = 0x2001_0db8_u128 << 96 | b << 60;
                (network6(a, l), l)
            }),
        ];
        let ports = (0u16..8, 0u16..8).prop_map(|(a, b)| (a.min(b) * 1000, a.max(b) * 1000 + 999));
        (
            addr.clone(),
            addr,
            ports.clone(),
            ports,
            0u8..3,
            0u8..3,
            any::<u16>(),
            0u32..3,
        )
            .prop_map(|(src, dst, sport, dport, p, pm, fl, m)| Rule {
                src,
                dst,
                sport,
                dport,
                proto: ([6, 17, 1][p as usize], [0, 0xff, 0x0f][pm as usize]),
                flags: (fl & 0x1f, (fl >> 5) & 0x1f),
                meta: (m, m & 1),
            })
    }

    fn arb_key() -> impl Strategy<Value = Key> {
        let addr = prop_oneof![
            (0u32..256).prop_map(|x| v4(0xc612_0000 | x)),
            (0u128..5, 0u128..3).prop_map(|(b, x)| (0x2001_0db8_u128 << 96) | b << 60 | x),
            any::<u128>(),
        ];
        (
            addr.clone(),
            addr,
            0u16..9000,
            0u16..9000,
            0u8..3,
            any::<u16>(),
            0u32..3,
        )
            .prop_map(|(src, dst, sport, dport, p, flags, meta)| Key {
                src,
                dst,
                sport,
                dport,
                proto: [6, 17, 1][p as usize],
                flags: flags & 0x1f,
                meta,
            })
    }

    /// Bases spread over the IPv4 space, for rules and keys near them.
    const BASES: [u32; 8] = [
        0x0000_0001,
        0x0a00_0000,
        0x4000_1234,
        0x8080_8080,
        0xc0a8_0101,
        0xc612_0000,
        0xdfff_ff00,
        0xffff_fffe,
    ];

    /// A xorshift64 generator: test data that is the same every run.
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// An address from a few bases spread over the IPv4 space (so that
    /// cuts on the top bits put rules in different cells), or a prefix of
    /// the IPv6 space that holds all of it or none of it.
    fn arb_wide_addr() -> impl Strategy<Value = (u128, u8)> {
        prop_oneof![
            8 => (0usize..8, 0u32..512, 0u8..=32).prop_map(|(b, off, l)| {
                v4_prefix(Ipv4Addr::from(BASES[b].wrapping_add(off << 4)), l)
            }),
            1 => (0u8..=80).prop_map(|l| (0, l)),
            1 => (0u8..=64).prop_map(|l| (network6(0x2001_0db8_u128 << 96, l), l)),
        ]
    }

    fn arb_wide_rule() -> impl Strategy<Value = Rule> {
        (arb_wide_addr(), arb_wide_addr(), arb_rule()).prop_map(|(src, dst, r)| Rule {
            src,
            dst,
            ..r
        })
    }

    fn arb_wide_key() -> impl Strategy<Value = Key> {
        let addr = prop_oneof![
            (0usize..8, any::<u32>(), 0u32..=32).prop_map(|(b, x, keep)| {
                // Near a base: its top `keep` bits, the rest random.
                let base = BASES[b];
                let m = (!0u64 << (32 - keep)) as u32;
                v4((base & m) | (x & !m))
            }),
            any::<u32>().prop_map(v4),
            any::<u128>(),
        ];
        (addr.clone(), addr, arb_key()).prop_map(|(src, dst, k)| Key { src, dst, ..k })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// With its IPv4 rules cut into cells on both addresses' top bits
        /// (forced cuts, and the one the build plans) or as decision
        /// trees, the classifier returns the linear scan's first match:
        /// rules spanning cells, rules inside one, IPv6 prefixes holding
        /// the IPv4 space.
        #[test]
        fn cut_classifiers_equal_linear_scan(
            rules in proptest::collection::vec(arb_wide_rule(), 1..300),
            keys in proptest::collection::vec(arb_wide_key(), 64),
        ) {
            let mut built = vec![Classifier::build(rules.clone())];
            for (s, d) in [(0, 0), (2, 2), (4, 6), (6, 4), (12, 0), (0, 12), (6, 6)] {
                built.push(Classifier::build_cut(rules.clone(), s, d));
            }
            built.push(Classifier::build_trees(rules.clone()));
            let mut memos: Vec<Memo> = built.iter().map(|_| Memo::default()).collect();
            for k in &keys {
                let want = linear(&rules, k);
                for (c, m) in built.iter().zip(&mut memos) {
                    prop_assert_eq!(c.classify(k), want, "{}: {:?}", c.layout(), k);
                    prop_assert_eq!(c.classify_memo(k, m), want, "memo, {}: {:?}", c.layout(), k);
                }
                // Keys likely in the same intervals (the memo's hits) and
                // with other flags or metadata (which must not hit).
                for v in [
                    Key { src: k.src ^ 1, dst: k.dst ^ 1, ..*k },
                    Key { flags: k.flags ^ 0x5, ..*k },
                    Key { meta: k.meta ^ 1, ..*k },
                    Key { proto: 17, sport: k.sport ^ 1, ..*k },
                ] {
                    let want = linear(&rules, &v);
                    for (c, m) in built.iter().zip(&mut memos) {
                        prop_assert_eq!(c.classify_memo(&v, m), want, "memo, {}: {:?}", c.layout(), v);
                    }
                }
            }
            // Every layout remembers intervals: the cells' families' for
            // bit vectors, all IPv4 rules' for trees.
            for (c, m) in built.iter().zip(&memos) {
                prop_assert!(m.hits > 0, "{}", c.layout());
            }
        }
    }

    /// A memo cleared between two classifiers answers for the second; one
    /// not cleared would answer the first's rule (which is why a gateway
    /// clears its memo when its rules change).
    #[test]
    fn a_memo_is_for_one_classifier() {
        let k = Key {
            src: v4(0x0a00_0001),
            dst: v4(0xc612_0001),
            sport: 1000,
            dport: 53,
            proto: 17,
            flags: 0,
            meta: 0,
        };
        let a = Classifier::build(vec![Rule::any()]);
        // The same intervals (every rule covers every field whole), so
        // the same memo key; b's first rule asks for other metadata.
        let b = Classifier::build(vec![
            Rule {
                meta: (1, 1),
                ..Rule::any()
            },
            Rule::any(),
        ]);
        let mut m = Memo::default();
        assert_eq!(a.classify_memo(&k, &mut m), Some(0));
        assert_eq!(a.classify_memo(&Key { sport: 2000, ..k }, &mut m), Some(0));
        assert_eq!((m.hits, m.misses), (1, 1));
        assert_eq!(b.classify_memo(&k, &mut m), Some(0), "the stale answer");
        m.clear();
        assert_eq!(b.classify_memo(&k, &mut m), Some(1));
        assert_eq!(b.classify(&k), Some(1));
    }

    /// 20,000 host-pair rules (a block list): the uncut family would take
    /// about 48 MiB (a vector of 313 words per address interval); cut, the
    /// vectors take a few MiB, yet more than the trees the build chooses
    /// (6.1 against 1.3 MiB; 3.6 against 21.8 M lookups/s measured once),
    /// and both find each rule for its own pair.
    #[test]
    fn host_rules_are_cut_small() {
        let mut next = xorshift(0x853c_49e6_748f_ea9b_u64);
        let hosts: Vec<(u32, u32)> = (0..20_000)
            .map(|_| (next() as u32, (next() >> 32) as u32))
            .collect();
        let rules: Vec<Rule> = hosts
            .iter()
            .map(|&(a, b)| Rule {
                src: v4_prefix(Ipv4Addr::from(a), 32),
                dst: v4_prefix(Ipv4Addr::from(b), 32),
                ..Rule::any()
            })
            .collect();
        let cut = Classifier::build_vectors(rules.clone());
        assert!(
            matches!(cut.layout(), Layout::Cut { cells, .. } if cells > 1),
            "not cut: {}",
            cut.layout()
        );
        assert!(cut.memory() < 8 << 20, "{} bytes", cut.memory());
        let trees = Classifier::build(rules.clone());
        assert!(
            matches!(trees.layout(), Layout::Trees { .. }),
            "{}",
            trees.layout()
        );
        assert!(
            trees.memory() < cut.memory() / 2,
            "{} bytes",
            trees.memory()
        );
        for (i, &(a, b)) in hosts.iter().enumerate().step_by(97) {
            let k = Key {
                src: v4(a),
                dst: v4(b),
                sport: 1,
                dport: 2,
                proto: 17,
                flags: 0,
                meta: 0,
            };
            let miss = Key {
                dst: v4(b ^ 1),
                ..k
            };
            for c in [&cut, &trees] {
                assert_eq!(c.classify(&k), linear(&rules, &k), "{k:?}");
                assert!(c.classify(&k).is_some_and(|r| r as usize <= i));
                assert_eq!(c.classify(&miss), linear(&rules, &miss), "{miss:?}");
            }
        }
    }

    /// In a tree, a rule covering a node's whole region hides the rules
    /// after it there only when nothing else about it is checked: a
    /// wildcard on the two /16s that asks for SYN hides nothing, the same
    /// rule without flags hides the 200 host rules after it.
    #[test]
    fn trees_prune_behind_plain_rules_only() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15_u64);
        let net = Rule {
            src: v4_prefix(Ipv4Addr::from(0xc612_0000), 16),
            dst: v4_prefix(Ipv4Addr::from(0xc613_0000), 16),
            ..Rule::any()
        };
        let hosts: Vec<(u32, u32)> = (0..400)
            .map(|_| {
                let x = next();
                (
                    0xc612_0000 | (x as u32 & 0xffff),
                    0xc613_0000 | (x >> 48) as u32,
                )
            })
            .collect();
        let host = |&(a, b): &(u32, u32)| Rule {
            src: v4_prefix(Ipv4Addr::from(a), 32),
            dst: v4_prefix(Ipv4Addr::from(b), 32),
            ..Rule::any()
        };
        let mut rules = vec![Rule {
            flags: (0x02, 0x02),
            proto: (6, 0xff),
            ..net
        }];
        rules.extend(hosts[..200].iter().map(host));
        rules.push(net);
        rules.extend(hosts[200..].iter().map(host));
        let c = Classifier::build_trees(rules.clone());
        assert!(matches!(c.layout(), Layout::Trees { .. }), "{}", c.layout());
        let key = |(a, b): (u32, u32), flags: u16| Key {
            src: v4(a),
            dst: v4(b),
            sport: 1000,
            dport: 80,
            proto: 6,
            flags,
            meta: 0,
        };
        for (i, &h) in hosts.iter().enumerate() {
            let hidden = if i < 200 { i as u32 + 1 } else { 201 };
            for (k, want) in [
                (key(h, 0x10), Some(hidden)),
                (key(h, 0x02), Some(0)),
                (
                    key((h.0, h.1 ^ 0x8000), 0x10),
                    linear(&rules, &key((h.0, h.1 ^ 0x8000), 0x10)),
                ),
                (key((h.0 ^ 1 << 20, h.1), 0x10), None),
            ] {
                assert_eq!(c.classify(&k), want, "{k:?}");
                assert_eq!(linear(&rules, &k), want, "{k:?}");
            }
        }
    }

    /// Rules spread over the address space are cut (each cell's family
    /// holds a few of them), within the memory of no cut, and classified
    /// as the linear scan does.
    #[test]
    fn spread_rules_are_cut_within_memory() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d_u64);
        let rules: Vec<Rule> = (0..2000)
            .map(|i| {
                let (a, b) = (next() as u32, (next() >> 32) as u32);
                Rule {
                    src: v4_prefix(Ipv4Addr::from(a), 8 + (i % 17) as u8),
                    dst: v4_prefix(
                        Ipv4Addr::from(b),
                        if i % 10 == 0 { 0 } else { 16 + (i % 9) as u8 },
                    ),
                    dport: if i % 3 == 0 {
                        (0, 65535)
                    } else {
                        (80, 80 + (i % 100) as u16)
                    },
                    proto: (6, 0xff),
                    ..Rule::any()
                }
            })
            .collect();
        let c = Classifier::build(rules.clone());
        let uncut = Classifier::build_cut(rules.clone(), 0, 0);
        let Layout::Cut {
            sbits,
            dbits,
            cells,
        } = c.layout()
        else {
            panic!("{}", c.layout());
        };
        assert!(sbits + dbits > 0 && cells > 1, "not cut: {}", c.layout());
        assert!(
            c.memory() <= uncut.memory().max(256 << 10),
            "{} vs {}",
            c.memory(),
            uncut.memory()
        );
        for r in rules.iter().take(500) {
            for _ in 0..4 {
                let host =
                    |p: (u128, u8), r: u64| p.0 | (u128::from(r as u32) & (u128::MAX >> p.1));
                let k = Key {
                    src: host(r.src, next()),
                    dst: host(r.dst, next()),
                    sport: next() as u16,
                    dport: 80 + (next() % 120) as u16,
                    proto: 6,
                    flags: 0,
                    meta: 0,
                };
                assert_eq!(c.classify(&k), linear(&rules, &k), "{k:?}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// The classifiers (bit vectors, decision trees, tuple space)
        /// return the linear scan's first match on mixed IPv4/IPv6 rule
        /// sets with masks, TCP flags and metadata.
        #[test]
        fn classifiers_equal_linear_scan(
            rules in proptest::collection::vec(arb_rule(), 1..200),
            keys in proptest::collection::vec(arb_key(), 50),
        ) {
            let c = Classifier::build(rules.clone());
            let trees = Classifier::build_trees(rules.clone());
            let ts = TupleSpace::build(rules.clone());
            for k in &keys {
                let want = linear(&rules, k);
                prop_assert_eq!(c.classify(k), want, "{:?}", k);
                prop_assert_eq!(trees.classify(k), want, "trees: {:?}", k);
                prop_assert_eq!(ts.classify(k), want, "{:?}", k);
            }
        }
    }
}
