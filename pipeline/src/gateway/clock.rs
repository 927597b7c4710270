//! Per-stage cycle profile of the gateway, as VPP's `show runtime` gives
//! clocks per graph node: the gateway marks where each stage of a packet
//! ends, and a [`StageClock`] charges the time since the previous mark to
//! that stage. The appliance runs with [`NoClock`], whose marks compile
//! to nothing, and moves its gateway to a [`CycleClock`] over the TSC
//! while an operator has the clock on ([`super::Profiled`]); the
//! benchmark runs one throughout.
//!
//! The burst's prefetch pass (each packet's conntrack buckets and flow,
//! hashed and touched ahead) is charged to conntrack. Only IPv4
//! TCP/UDP/ICMP packets that reach conntrack are profiled (the
//! established path and new flows); a packet that leaves another way
//! (IPv6, ARP, ICMP errors, drops before conntrack) charges nothing: the
//! next packet starts the clock afresh.

/// A stage of the gateway's IPv4 path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Ethernet dispatch, IPv4 header checks, the L4 ports: the tuple.
    Parse = 0,
    /// Conntrack lookup and state update; for a new flow, its entry.
    Conntrack = 1,
    /// The rules (new flows only).
    Firewall = 2,
    /// Destination and source NAT: the mapping, the port, the rewrite.
    Nat = 3,
    /// Route lookup (a new flow's; an established flow's cached next
    /// hop checked: still valid, its interface up, the MTU).
    Route = 4,
    /// The header rewrite on the way out: TTL and its checksum, the MACs.
    Rewrite = 5,
}

impl Stage {
    /// Stages, in the order of [`Stage::NAMES`].
    pub const COUNT: usize = 6;
    /// Their names.
    pub const NAMES: [&'static str; Stage::COUNT] =
        ["parse", "conntrack", "firewall", "nat", "route", "rewrite"];
}

/// Where stage boundaries go.
pub trait StageClock: Clone + Send + 'static {
    /// A packet's processing begins.
    fn start(&mut self);
    /// The time since the last mark (or the start) was stage `s`'s.
    fn mark(&mut self, s: Stage);
}

/// No profile (the appliance's gateway): nothing is read or kept.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoClock;

impl StageClock for NoClock {
    #[inline(always)]
    fn start(&mut self) {}
    #[inline(always)]
    fn mark(&mut self, _: Stage) {}
}

/// Cycles per gateway [`Stage`], read through `now` (the benchmark passes
/// the TSC; this crate reads no clock itself).
pub type CycleClock = crate::fwd::StageCycles<{ Stage::COUNT }>;

impl StageClock for CycleClock {
    #[inline(always)]
    fn start(&mut self) {
        self.begin();
    }
    #[inline(always)]
    fn mark(&mut self, s: Stage) {
        self.charge(s as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    static T: AtomicU64 = AtomicU64::new(0);
    fn fake() -> u64 {
        T.fetch_add(10, Ordering::Relaxed)
    }

    /// Each mark charges what passed since the previous one; a start
    /// drops what passed before it.
    #[test]
    fn marks_charge_the_time_since_the_last() {
        let mut c = CycleClock::new(fake);
        c.start(); // 0
        c.mark(Stage::Parse); // 10
        c.mark(Stage::Route); // 20
        fake(); // 30 passes uncharged
        c.start(); // 40
        c.mark(Stage::Parse); // 50
        assert_eq!(c.cycles, [20, 0, 0, 0, 10, 0]);
        assert_eq!(c.marks, [2, 0, 0, 0, 1, 0]);
    }
}
