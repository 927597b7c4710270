//! The firewall's rule set: ordered rules, first match wins, on source and
//! destination prefixes (IPv4 and IPv6), port ranges, protocol and TCP
//! flags (value/mask), ingress and egress port, and connection state; with
//! an action (accept, drop, reject) and an optional counter per rule, and
//! a default policy.
//!
//! The rules compile into one [`Classifier`]: ports and state go into the
//! key's metadata word (see [`meta`]), and a rule naming several ports or
//! states becomes one classifier rule per combination, all pointing back
//! to it. The built set is immutable and shared by the workers (`Arc`); a
//! new rule set is built on the control path and swapped in whole.

use crate::acl::{Classifier, Key, Memo, Rule};
use crate::prefix;
use std::time::Instant;

/// Connection states a rule can match (bits of a set).
pub mod state {
    /// First packet of a flow.
    pub const NEW: u8 = 1;
    /// A packet of a tracked flow.
    pub const ESTABLISHED: u8 = 2;
    /// An ICMP error about a tracked flow.
    pub const RELATED: u8 = 4;
    /// Neither: refused by conntrack.
    pub const INVALID: u8 = 8;
    /// Names, in bit order.
    pub const NAMES: [(&str, u8); 4] = [
        ("new", NEW),
        ("established", ESTABLISHED),
        ("related", RELATED),
        ("invalid", INVALID),
    ];
}

/// Conntrack status bits a rule can match (nftables `ct status`).
pub mod status {
    /// The flow's destination is translated (a port forward or 1:1 NAT).
    pub const DNAT: u8 = 1;
    /// The flow's source is translated. The firewall decides on a new
    /// flow before source NAT picks its mapping (as nftables' forward
    /// chain runs before postrouting), so only packets of open flows
    /// (`related`) can carry it.
    pub const SNAT: u8 = 2;
    /// Names, in bit order.
    pub const NAMES: [(&str, u8); 2] = [("dnat", DNAT), ("snat", SNAT)];
}

/// Bit of the metadata word where the conntrack status starts.
const STATUS_SHIFT: u32 = 20;
/// Bit of the metadata word where the destination NAT entry starts.
const ENTRY_SHIFT: u32 = 24;
/// Destination NAT entries a `ct_original_*` match can tell apart.
pub const MAX_DNAT_ENTRIES: usize = 255;

/// The metadata word of a key: ingress port (bits 0–7), egress port (bits
/// 8–15, 255 when not routed), state (bits 16–19), conntrack status (bits
/// 20–21, [`status`]) and the destination NAT entry that translated the
/// flow (bits 24–31, 1-based as [`crate::nat::NatConfig::dnat_entry`]; 0
/// for none or unknown).
pub fn meta(in_port: u16, out_port: Option<u16>, state: u8) -> u32 {
    u32::from(in_port as u8)
        | u32::from(out_port.map_or(255, |p| p as u8)) << 8
        | u32::from(state) << 16
}

/// The conntrack part of the metadata word: `status` bits and the
/// destination NAT entry (0 for none); OR it into [`meta`].
pub fn meta_ct(status: u8, dnat_entry: usize) -> u32 {
    let e = if dnat_entry <= MAX_DNAT_ENTRIES {
        dnat_entry as u32
    } else {
        0
    };
    u32::from(status & 3) << STATUS_SHIFT | e << ENTRY_SHIFT
}

/// What a rule asks of the connection beyond its state: the nftables
/// `ct status` and `ct original ip daddr` / `ct original proto-dst`
/// matches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtMatch {
    /// Status bits (value, mask): mask bits that are set in value must be
    /// set, the others in mask must be clear.
    pub status: (u8, u8),
    /// The flow's original destination (before destination NAT), an IPv4
    /// prefix in the classifier's form (see [`crate::acl::v4_prefix`]).
    pub orig_dst: Option<(u128, u8)>,
    /// The flow's original destination port range.
    pub orig_dport: Option<(u16, u16)>,
}

impl CtMatch {
    /// True when the rule asks nothing of the connection.
    pub fn is_any(&self) -> bool {
        self.status.1 == 0 && self.orig_dst.is_none() && self.orig_dport.is_none()
    }
}

/// Intersection of two classifier prefixes (None when disjoint).
fn and_prefix(a: (u128, u8), b: (u128, u8)) -> Option<(u128, u8)> {
    let (long, short) = if a.1 >= b.1 { (a, b) } else { (b, a) };
    prefix::in6(long.0, short).then_some(long)
}

/// Intersection of two port ranges.
fn and_ports(a: (u16, u16), b: (u16, u16)) -> Option<(u16, u16)> {
    let r = (a.0.max(b.0), a.1.min(b.1));
    (r.0 <= r.1).then_some(r)
}

crate::counter_enum! {
    /// What the firewall counts besides its per-rule hits.
    pub enum Event {
        /// Rejects answered (TCP RST or ICMP).
        Reject = "fw_reject",
        /// Rule lookups answered by the worker's memo of classified
        /// intervals ([`crate::acl::Memo`]).
        MemoHit = "fw_memo_hit",
        /// Rule lookups that went through the classifier's vectors.
        MemoMiss = "fw_memo_miss",
    }
}

/// How a rejected packet is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectWith {
    /// TCP reset for TCP, ICMP port unreachable otherwise.
    Auto,
    /// TCP reset (TCP packets; others get port unreachable).
    TcpReset,
    /// ICMP (v6) port unreachable.
    PortUnreachable,
    /// ICMP communication administratively prohibited (v6: code 1).
    AdminProhibited,
}

/// What a rule does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Let the packet through (and open its flow).
    Accept,
    /// Drop it silently.
    Drop,
    /// Drop it and answer (rate-limited).
    Reject(RejectWith),
}

/// One firewall rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FwRule {
    /// Header fields (its `meta` is ignored: see the fields below).
    pub hdr: Rule,
    /// Ingress ports; empty for any.
    pub in_ports: Vec<u16>,
    /// Egress ports; empty for any.
    pub out_ports: Vec<u16>,
    /// States (bits of [`state`]); 0 for any.
    pub states: u8,
    /// Action.
    pub action: Action,
    /// Count the packets it matches.
    pub counter: bool,
    /// Where it came from (for reports: `file:line`).
    pub origin: String,
    /// Conntrack status and original-destination matches.
    pub ct: CtMatch,
}

impl FwRule {
    /// Whether the rule matches (the reference semantics, for tests);
    /// `dnat_dsts` is [`crate::nat::NatConfig::original_dsts`].
    pub fn matches(&self, k: &Key, dnat_dsts: &[(u32, Option<u16>)]) -> bool {
        let m = k.meta;
        let (inp, outp, st) = (
            (m & 0xff) as u16,
            ((m >> 8) & 0xff) as u16,
            ((m >> 16) & 0xf) as u8,
        );
        let status = ((m >> STATUS_SHIFT) & 3) as u8;
        let entry = (m >> ENTRY_SHIFT) as usize;
        // The original destination: the entry's, or the packet's own.
        let (odst, odport) = match entry.checked_sub(1).and_then(|e| dnat_dsts.get(e)) {
            Some(&(a, p)) => (crate::acl::v4(a), p.unwrap_or(k.dport)),
            None if status & status::DNAT != 0 => (0, 0), // unknown entry
            None => (k.dst, k.dport),
        };
        let known = entry > 0 || status & status::DNAT == 0;
        Rule {
            meta: (0, 0),
            ..self.hdr
        }
        .matches(k)
            && (self.in_ports.is_empty() || self.in_ports.contains(&inp))
            && (self.out_ports.is_empty() || self.out_ports.contains(&outp))
            && (self.states == 0 || self.states & st != 0)
            && status & self.ct.status.1 == self.ct.status.0 & self.ct.status.1
            && self
                .ct
                .orig_dst
                .is_none_or(|p| known && prefix::in6(odst, p))
            && self
                .ct
                .orig_dport
                .is_none_or(|(lo, hi)| known && (lo..=hi).contains(&odport))
    }

    /// The (header, conntrack metadata) pairs that express the rule's
    /// conntrack match for the classifier, given the original
    /// destinations of the destination NAT entries: one for flows not
    /// translated (their original destination is the packet's own) and
    /// one per entry whose original destination matches.
    fn ct_variants(&self, dnat_dsts: &[(u32, Option<u16>)]) -> Vec<(Rule, (u32, u32))> {
        let c = &self.ct;
        let status = (
            u32::from(c.status.0 & c.status.1) << STATUS_SHIFT,
            u32::from(c.status.1) << STATUS_SHIFT,
        );
        if c.orig_dst.is_none() && c.orig_dport.is_none() {
            return vec![(self.hdr, status)];
        }
        let dnat_bit = u32::from(status::DNAT) << STATUS_SHIFT;
        let mut out = Vec::new();
        // Not destination-translated: the original is the packet's own.
        let wants_dnat = c.status.1 & status::DNAT != 0 && c.status.0 & status::DNAT != 0;
        if !wants_dnat {
            let dst = match c.orig_dst {
                Some(p) => and_prefix(self.hdr.dst, p),
                None => Some(self.hdr.dst),
            };
            let dport = match c.orig_dport {
                Some(r) => and_ports(self.hdr.dport, r),
                None => Some(self.hdr.dport),
            };
            if let (Some(dst), Some(dport)) = (dst, dport) {
                out.push((
                    Rule {
                        dst,
                        dport,
                        ..self.hdr
                    },
                    (status.0, status.1 | dnat_bit),
                ));
            }
        }
        // Translated by entry `i`: its original destination decides.
        let refuses_dnat = c.status.1 & status::DNAT != 0 && c.status.0 & status::DNAT == 0;
        if !refuses_dnat {
            for (i, &(a, p)) in dnat_dsts.iter().enumerate().take(MAX_DNAT_ENTRIES) {
                if c.orig_dst
                    .is_some_and(|pre| !prefix::in6(crate::acl::v4(a), pre))
                {
                    continue;
                }
                let dport = match (p, c.orig_dport) {
                    (Some(p), Some((lo, hi))) if !(lo..=hi).contains(&p) => continue,
                    // The entry keeps the port: the packet's is the original.
                    (None, Some(r)) => match and_ports(self.hdr.dport, r) {
                        Some(d) => d,
                        None => continue,
                    },
                    _ => self.hdr.dport,
                };
                out.push((
                    Rule { dport, ..self.hdr },
                    (
                        status.0 | dnat_bit | ((i as u32 + 1) << ENTRY_SHIFT),
                        status.1 | dnat_bit | 0xff << ENTRY_SHIFT,
                    ),
                ));
            }
        }
        out
    }
}

/// A built rule set.
pub struct RuleSet {
    rules: Vec<FwRule>,
    classifier: Classifier,
    /// Classifier rule index → rule index.
    owner: Vec<u32>,
    default: Action,
    build_ns: u64,
}

impl RuleSet {
    /// Compiles `rules` with `default` for packets no rule matches;
    /// `dnat_dsts` ([`crate::nat::NatConfig::original_dsts`]) resolves
    /// the rules' `ct_original_*` matches.
    pub fn build(rules: Vec<FwRule>, default: Action, dnat_dsts: &[(u32, Option<u16>)]) -> RuleSet {
        let t0 = Instant::now();
        let mut expanded = Vec::with_capacity(rules.len());
        let mut owner = Vec::with_capacity(rules.len());
        let any = [None];
        for (i, r) in rules.iter().enumerate() {
            let ins: Vec<Option<u16>> = if r.in_ports.is_empty() {
                any.to_vec()
            } else {
                r.in_ports.iter().map(|&p| Some(p)).collect()
            };
            let outs: Vec<Option<u16>> = if r.out_ports.is_empty() {
                any.to_vec()
            } else {
                r.out_ports.iter().map(|&p| Some(p)).collect()
            };
            let states: Vec<Option<u8>> = if r.states == 0 {
                vec![None]
            } else {
                state::NAMES
                    .iter()
                    .filter(|(_, b)| r.states & b != 0)
                    .map(|&(_, b)| Some(b))
                    .collect()
            };
            let variants = r.ct_variants(dnat_dsts);
            for &ip in &ins {
                for &op in &outs {
                    for &st in &states {
                        for &(hdr, ct) in &variants {
                            let mut v = 0u32;
                            let mut m = 0u32;
                            if let Some(p) = ip {
                                v |= u32::from(p as u8);
                                m |= 0xff;
                            }
                            if let Some(p) = op {
                                v |= u32::from(p as u8) << 8;
                                m |= 0xff << 8;
                            }
                            if let Some(s) = st {
                                v |= u32::from(s) << 16;
                                m |= u32::from(s) << 16;
                            }
                            expanded.push(Rule {
                                meta: (v | ct.0, m | ct.1),
                                ..hdr
                            });
                            owner.push(i as u32);
                        }
                    }
                }
            }
        }
        let classifier = Classifier::build(expanded);
        RuleSet {
            rules,
            classifier,
            owner,
            default,
            build_ns: t0.elapsed().as_nanos() as u64,
        }
    }

    /// The first rule matching `k` (its `meta` from [`meta`]), if any.
    #[inline]
    pub fn lookup(&self, k: &Key) -> Option<u32> {
        self.classifier.classify(k).map(|i| self.owner[i as usize])
    }

    /// The action for `k` and the rule that decided it (`None`: the
    /// default policy).
    #[inline]
    pub fn decide(&self, k: &Key) -> (Action, Option<u32>) {
        self.action_of(self.lookup(k))
    }

    /// [`RuleSet::decide`] through a worker's `memo` of what these rules
    /// decided for the key's intervals (a memo filled by other rules must
    /// be cleared first: [`Memo::clear`]).
    #[inline]
    pub fn decide_memo(&self, k: &Key, memo: &mut Memo) -> (Action, Option<u32>) {
        let found = self.classifier.classify_memo(k, memo);
        self.action_of(found.map(|i| self.owner[i as usize]))
    }

    #[inline(always)]
    fn action_of(&self, rule: Option<u32>) -> (Action, Option<u32>) {
        match rule {
            Some(i) => (self.rules[i as usize].action, Some(i)),
            None => (self.default, None),
        }
    }

    /// The rules.
    pub fn rules(&self) -> &[FwRule] {
        &self.rules
    }

    /// The default policy.
    pub fn default_action(&self) -> Action {
        self.default
    }

    /// Classifier rules after expanding port and state sets.
    pub fn expanded(&self) -> usize {
        self.classifier.len()
    }

    /// Distinct bit vectors in the classifier.
    pub fn vectors(&self) -> usize {
        self.classifier.vectors()
    }

    /// How the classifier searches the IPv4 rules (see
    /// [`Classifier::layout`]).
    pub fn layout(&self) -> crate::acl::Layout {
        self.classifier.layout()
    }

    /// Bytes the classifier uses (approximate).
    pub fn memory(&self) -> usize {
        self.classifier.memory() + self.owner.len() * 4
    }

    /// How long [`RuleSet::build`] took (ns).
    pub fn build_ns(&self) -> u64 {
        self.build_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{v4, v4_prefix};

    fn rule(hdr: Rule, ins: &[u16], outs: &[u16], states: u8, action: Action) -> FwRule {
        FwRule {
            hdr,
            in_ports: ins.to_vec(),
            out_ports: outs.to_vec(),
            states,
            action,
            counter: false,
            origin: String::new(),
            ct: CtMatch::default(),
        }
    }

    #[test]
    fn ports_and_states_select_rules_first_match_wins() {
        let ssh = Rule {
            dport: (22, 22),
            proto: (6, 0xff),
            ..Rule::any()
        };
        let lan = Rule {
            src: v4_prefix("198.18.0.0".parse().unwrap(), 24),
            ..Rule::any()
        };
        let rules = vec![
            rule(ssh, &[1], &[], 0, Action::Reject(RejectWith::Auto)),
            rule(Rule::any(), &[], &[], state::INVALID, Action::Drop),
            rule(lan, &[0], &[1], state::NEW | state::RELATED, Action::Accept),
            rule(Rule::any(), &[1], &[0], state::RELATED, Action::Accept),
        ];
        let set = RuleSet::build(rules.clone(), Action::Drop, &[]);
        assert_eq!(set.expanded(), 5, "rule 2 names two states");
        let key = |src: u32, dport: u16, m: u32| Key {
            src: v4(src),
            dst: v4(0xcb00_7101),
            sport: 40000,
            dport,
            proto: 6,
            flags: 2,
            meta: m,
        };
        let lan_host = 0xc612_000a;
        let cases = [
            (key(lan_host, 22, meta(1, Some(0), state::NEW)), Some(0)),
            (key(lan_host, 22, meta(0, Some(1), state::NEW)), Some(2)),
            (key(lan_host, 80, meta(0, Some(1), state::INVALID)), Some(1)),
            (key(lan_host, 80, meta(0, Some(1), state::RELATED)), Some(2)),
            (key(lan_host, 80, meta(0, Some(0), state::NEW)), None),
            (key(0x0808_0808, 80, meta(0, Some(1), state::NEW)), None),
            (
                key(0x0808_0808, 80, meta(1, Some(0), state::RELATED)),
                Some(3),
            ),
        ];
        for (k, want) in cases {
            assert_eq!(set.lookup(&k), want, "{k:?}");
            assert_eq!(
                rules
                    .iter()
                    .position(|r| r.matches(&k, &[]))
                    .map(|i| i as u32),
                want
            );
        }
        assert_eq!(set.decide(&cases[4].0), (Action::Drop, None));
        assert_eq!(set.decide(&cases[0].0).0, Action::Reject(RejectWith::Auto));
    }

    use proptest::prelude::*;

    fn arb_ct() -> impl Strategy<Value = CtMatch> {
        let dst = prop_oneof![
            Just(None),
            (0u32..4, 28u8..=32)
                .prop_map(|(b, l)| Some(v4_prefix(std::net::Ipv4Addr::from(0xc613_0000 | b), l))),
        ];
        let ports = prop_oneof![
            Just(None),
            (0u16..4, 0u16..4).prop_map(|(a, b)| Some((79 + a.min(b), 79 + a.max(b)))),
        ];
        (0u8..4, 0u8..4, dst, ports).prop_map(|(v, m, orig_dst, orig_dport)| CtMatch {
            status: (v, m),
            orig_dst,
            orig_dport,
        })
    }

    fn arb_rule() -> impl Strategy<Value = FwRule> {
        let dst = prop_oneof![
            Just((0u128, 0u8)),
            (0u32..4, 28u8..=32)
                .prop_map(|(b, l)| v4_prefix(std::net::Ipv4Addr::from(0xc613_0000 | b), l)),
        ];
        let ports = (0u16..4, 0u16..4).prop_map(|(a, b)| (79 + a.min(b), 79 + a.max(b)));
        (dst, ports, 0u8..16, arb_ct(), 0u8..3).prop_map(|(dst, dport, states, ct, act)| FwRule {
            hdr: Rule {
                dst,
                dport,
                ..Rule::any()
            },
            in_ports: vec![],
            out_ports: vec![],
            states,
            action: [
                Action::Accept,
                Action::Drop,
                Action::Reject(RejectWith::Auto),
            ][act as usize],
            counter: false,
            origin: String::new(),
            ct,
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The compiled rule set finds the first rule that the reference
        /// semantics ([`FwRule::matches`]) matches, with conntrack status
        /// and original-destination matches over several DNAT entries.
        #[test]
        fn ct_matches_compile_exactly(
            rules in proptest::collection::vec(arb_rule(), 1..30),
            entries in proptest::collection::vec(
                (0u32..4, prop_oneof![Just(None), (79u16..83).prop_map(Some)]),
                0..4,
            ),
            keys in proptest::collection::vec(
                (0u32..4, 78u16..84, 0u8..4, 0u8..4, 0usize..5),
                60,
            ),
        ) {
            let dsts: Vec<(u32, Option<u16>)> =
                entries.iter().map(|&(a, p)| (0xc613_0000 | a, p)).collect();
            let set = RuleSet::build(rules.clone(), Action::Drop, &dsts);
            for (d, dport, st, status, entry) in keys {
                let entry = entry.min(dsts.len());
                // A DNAT entry implies the status bit, as the gateway sets it.
                let status = if entry > 0 { status | status::DNAT } else { status };
                let k = Key {
                    src: v4(0x0a00_0001),
                    dst: v4(0xc613_0000 | d),
                    sport: 1234,
                    dport,
                    proto: 6,
                    flags: 0,
                    meta: meta(0, Some(1), 1 << st) | meta_ct(status, entry),
                };
                let want = rules.iter().position(|r| r.matches(&k, &dsts)).map(|i| i as u32);
                prop_assert_eq!(set.lookup(&k), want, "{:?}", k);
            }
        }
    }
}
