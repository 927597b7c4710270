//! The classifier against a linear scan on every ClassBench rule set and
//! trace in `../shared/data/classbench`: exact first-match semantics, with
//! the rules' TCP-flag constraints as written and with them cleared. The
//! traces' flags column is not usable (0 or 0xffffffff; the data's own
//! verification ignores flags), so the trace's rule id — a rule the header
//! was generated from, which must match and cannot come before the first
//! match — is checked with flags cleared. Lookups through a worker's memo
//! ([`pipeline::acl::Memo`]) find what the classifier finds, for the
//! trace's headers and for each with other TCP flags and metadata (which
//! the memo's key must tell apart), while the memo answers some of them.
//! The IPv4 rules as decision trees (which the build chooses for large
//! wildcard-heavy sets) find the same rules, and so do IPv6 rules as
//! trees (sets grown from ClassBench's moved into 2001:db8::/32).

use pipeline::acl::{
    linear, parse_classbench, parse_trace, v4, Classifier, Key, Layout, Memo, Rule,
};
use testdata::classbench::{into_ipv6, into_ipv6_hosts};

fn lines(rel: &str) -> Option<Vec<String>> {
    if rel.ends_with(".gz") {
        testdata::gz_lines(rel)
    } else {
        let p = testdata::shared(rel)?;
        Some(
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(String::from)
                .collect(),
        )
    }
}

#[test]
fn every_set_matches_linear_scan() {
    let sets = [
        ("acl1_1k", "acl1_1k_trace"),
        ("fw1_1k", "fw1_1k_trace"),
        ("ipc1_1k", "ipc1_1k_trace"),
        ("fw1_10k", "fw1_10k_trace.gz"),
        ("ipc1_10k", "ipc1_10k_trace.gz"),
        ("acl1_10k", "acl1_1k_trace"), // no 10k trace for acl1: reuse headers
    ];
    let mut checked = 0;
    for (rules_f, trace_f) in sets {
        let Some(rl) = lines(&format!("classbench/{rules_f}")) else {
            return;
        };
        let rules: Vec<_> = rl
            .iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| parse_classbench(l).unwrap_or_else(|| panic!("{rules_f}: {l}")))
            .collect();
        let c = Classifier::build(rules.clone());
        let no_flags: Vec<_> = rules
            .iter()
            .map(|r| pipeline::acl::Rule {
                flags: (0, 0),
                ..*r
            })
            .collect();
        let c2 = Classifier::build(no_flags.clone());
        let trees = Classifier::build_trees(rules.clone());
        let trace: Vec<(Key, u32)> = lines(&format!("classbench/{trace_f}"))
            .unwrap()
            .iter()
            .filter_map(|l| parse_trace(l))
            .collect();
        assert!(!trace.is_empty());
        let (mut memo, mut memo2) = (Memo::default(), Memo::default());
        for (k, id) in &trace {
            assert_eq!(c.classify(k), linear(&rules, k), "{rules_f}: {k:?}");
            for v in [*k, Key { flags: 0x12, ..*k }, Key { meta: 1, ..*k }] {
                assert_eq!(trees.classify(&v), c.classify(&v), "{rules_f} trees: {v:?}");
            }
            for v in [
                *k,
                Key { flags: 0x12, ..*k },
                Key { flags: 0x02, ..*k },
                Key { meta: 1, ..*k },
            ] {
                assert_eq!(
                    c.classify_memo(&v, &mut memo),
                    c.classify(&v),
                    "{rules_f} memo: {v:?}"
                );
            }
            assert_eq!(
                c2.classify_memo(k, &mut memo2),
                c2.classify(k),
                "{rules_f} memo: {k:?}"
            );
            let want = linear(&no_flags, k);
            assert_eq!(c2.classify(k), want, "{rules_f} without flags: {k:?}");
            if trace_f.starts_with(rules_f) {
                let first = want.expect("the trace header matches its rule");
                assert!(first <= *id, "{rules_f}");
                assert!(no_flags[*id as usize].matches(k), "{rules_f}: rule {id}");
            }
            checked += 1;
        }
        assert!(
            memo.hits > 0 && memo.misses > 0 && memo2.hits > 0,
            "{rules_f}: memo hits {} misses {}",
            memo.hits,
            memo.misses
        );
    }
    assert!(checked > 150_000, "{checked}");
}

/// Sets grown to up to 100,000 rules from the 10k ones
/// (`testdata::classbench`: rules no one tuned the classifier on; 20,000
/// from acl1 as bit vectors cut into cells, 3 MiB; the larger ones as
/// decision trees, 40,000 from acl1 because its cut would take 6 MiB):
/// each header of a trace drawn inside the rules finds what a linear scan
/// finds, and the rule it was drawn from matches it, at or after the
/// first match.
#[test]
fn grown_sets_match_linear_scan() {
    for (seed, n, trees) in [
        ("acl1_10k", 20_000, false),
        ("acl1_10k", 40_000, true),
        ("acl1_10k", 100_000, true),
        ("ipc1_10k", 60_000, true),
        ("fw1_10k", 100_000, true),
    ] {
        let Some(seed_lines) = lines(&format!("classbench/{seed}")) else {
            return;
        };
        let grown = testdata::classbench::grow(&seed_lines, n, 7);
        assert_eq!(grown.len(), n, "{seed}");
        let rules: Vec<_> = grown
            .iter()
            .map(|l| parse_classbench(l).unwrap_or_else(|| panic!("{seed}: {l}")))
            .collect();
        let c = Classifier::build(rules.clone());
        match c.layout() {
            Layout::Cut { cells, .. } => assert!(!trees && cells > 1, "{seed}: {}", c.layout()),
            Layout::Trees { .. } => assert!(trees, "{seed}: {}", c.layout()),
        }
        assert!(c.memory() < 64 << 20, "{seed}: {} bytes", c.memory());
        let trace: Vec<(Key, u32)> = testdata::classbench::trace(&grown, 300, 8)
            .iter()
            .filter_map(|l| parse_trace(l))
            .collect();
        assert_eq!(trace.len(), 300);
        for (k, id) in &trace {
            let want = linear(&rules, k);
            assert_eq!(c.classify(k), want, "{seed} grown: {k:?}");
            let id = id - 1;
            assert!(rules[id as usize].matches(k), "{seed}: rule {id}");
            assert!(want.is_some_and(|w| w <= id), "{seed}: {want:?} after {id}");
        }
    }
}

#[test]
fn ipv6_sets_match_linear_scan() {
    // 5,000 IPv6 rules as vectors, 30,000 as trees (past 20,000: their
    // vectors would take tens of MiB), each with the seed's IPv4 rules
    // before them in priority; the keys of a trace of the IPv6 rules,
    // each also with a field changed, and the IPv4 trace's keys. The
    // trees also with each host a /128 (its buckets searched, not
    // numbered by their bits).
    type To6 = fn((u128, u8)) -> (u128, u8);
    let sets: [(&str, usize, To6); 3] = [
        ("fw1_10k", 5_000, into_ipv6),
        ("ipc1_10k", 30_000, into_ipv6),
        ("ipc1_10k", 30_000, into_ipv6_hosts),
    ];
    for (seed, n, to6) in sets {
        let most = 16 << 20;
        let Some(seed_lines) = lines(&format!("classbench/{seed}")) else {
            return;
        };
        let grown = testdata::classbench::grow(&seed_lines, n, 9);
        let parse = |l: &String| parse_classbench(l).unwrap_or_else(|| panic!("{seed}: {l}"));
        let mut rules: Vec<Rule> = seed_lines.iter().take(500).map(parse).collect();
        let ipv4 = rules.len();
        rules.extend(grown.iter().map(parse).map(|mut r| {
            r.src = to6(r.src);
            r.dst = to6(r.dst);
            r
        }));
        let c = Classifier::build(rules.clone());
        assert!(c.memory() < most, "{seed} as IPv6: {} bytes", c.memory());
        let trace = |lines: &[String], seed: u64| -> Vec<Key> {
            testdata::classbench::trace(lines, 400, seed)
                .iter()
                .filter_map(|l| parse_trace(l))
                .map(|(k, _)| k)
                .collect()
        };
        let mut keys = trace(&seed_lines[..ipv4], 10);
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        for k in trace(&grown, 11) {
            let mut k6 = k;
            k6.src = to6((k.src, 128)).0;
            k6.dst = to6((k.dst, 128)).0;
            keys.push(k6);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut other = k6;
            match x % 4 {
                0 => other.src ^= u128::from(x) << (x % 96),
                1 => other.dst ^= u128::from(x) << (x % 96),
                2 => other.dport ^= x as u16,
                _ => other.src = v4(x as u32),
            }
            keys.push(other);
        }
        assert_eq!(keys.len(), 1200, "{seed}");
        let mut memo = Memo::default();
        let mut found = 0;
        for k in &keys {
            let want = linear(&rules, k);
            found += usize::from(want.is_some_and(|w| w as usize >= ipv4));
            assert_eq!(c.classify(k), want, "{seed} as IPv6: {k:?}");
            assert_eq!(
                c.classify_memo(k, &mut memo),
                want,
                "{seed} as IPv6, memo: {k:?}"
            );
        }
        // Most of the IPv6 trace's keys find an IPv6 rule.
        assert!(found >= 400, "{seed}: {found} keys found IPv6 rules");
    }
}
