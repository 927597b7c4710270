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

use crate::acl::{Classifier, Key, Rule};
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

/// The metadata word of a key: ingress port (bits 0–7), egress port (bits
/// 8–15, 255 when not routed), state (bits 16–19).
pub fn meta(in_port: u16, out_port: Option<u16>, state: u8) -> u32 {
    u32::from(in_port as u8)
        | u32::from(out_port.map_or(255, |p| p as u8)) << 8
        | u32::from(state) << 16
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
}

impl FwRule {
    /// Whether the rule matches (the reference semantics, for tests).
    pub fn matches(&self, k: &Key) -> bool {
        let m = k.meta;
        let (inp, outp, st) = ((m & 0xff) as u16, ((m >> 8) & 0xff) as u16, (m >> 16) as u8);
        Rule {
            meta: (0, 0),
            ..self.hdr
        }
        .matches(k)
            && (self.in_ports.is_empty() || self.in_ports.contains(&inp))
            && (self.out_ports.is_empty() || self.out_ports.contains(&outp))
            && (self.states == 0 || self.states & st != 0)
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
    /// Compiles `rules` with `default` for packets no rule matches.
    pub fn build(rules: Vec<FwRule>, default: Action) -> RuleSet {
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
            for &ip in &ins {
                for &op in &outs {
                    for &st in &states {
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
                            meta: (v, m),
                            ..r.hdr
                        });
                        owner.push(i as u32);
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
        match self.lookup(k) {
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
        let set = RuleSet::build(rules.clone(), Action::Drop);
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
                rules.iter().position(|r| r.matches(&k)).map(|i| i as u32),
                want
            );
        }
        assert_eq!(set.decide(&cases[4].0), (Action::Drop, None));
        assert_eq!(set.decide(&cases[0].0).0, Action::Reject(RejectWith::Auto));
    }
}
