//! The gateway stage: parse → conntrack → firewall → NAT → route, the
//! `l3fwd` mode when the config has firewall rules or NAT.
//!
//! Per IPv4 packet addressed to the port's MAC:
//!
//! 1. Validate the header (as the router does) and build the tuple:
//!    TCP/UDP ports, the ICMP query identifier as both ports, the quoted
//!    packet's tuple for ICMP errors. A fragment goes by its datagram's
//!    first fragment, which alone carries the ports ([`reass`]: virtual
//!    reassembly, nothing reassembled). TTL ≤ 1 and packets for the router
//!    itself go straight to the router (Time Exceeded, echo, ARP).
//! 2. Conntrack: one lookup finds the flow and the direction. A packet of
//!    a tracked flow moves its state machine on and skips the rule lookup;
//!    if the flow is translated the packet is rewritten to
//!    [`Flow::translated`]. An ICMP error whose quote belongs to a tracked
//!    flow is `related`: it goes through the rules as such, and its quoted
//!    header is translated back too.
//! 3. A new flow: destination NAT (port forwards, 1:1) first, then the
//!    route lookup gives the egress port, then the firewall decides on the
//!    post-DNAT header with ingress/egress port and state `new` (a TCP
//!    packet that is not a bare SYN is `invalid` instead and opens
//!    nothing). Accepted: source NAT picks the address (egress interface,
//!    pool, or 1:1) and a port from this worker's slice of the range such
//!    that the reply tuple is unused; a DNAT flow that leaves on the port
//!    it came in is masqueraded to that interface (hairpinning); the flow
//!    is opened with both tuples; the packet is translated.
//! 4. The router forwards the (translated) packet: TTL, checksum, MACs.
//!
//! IPv6 goes through the same conntrack and firewall, without NAT;
//! Neighbor Discovery and packets for the router bypass both.
//!
//! Rejects answer with a TCP RST (built in place) or an ICMP/ICMPv6
//! unreachable, through the router's per-core ICMP token bucket.
//!
//! [`Flow::translated`]: crate::conntrack::Flow::translated

use crate::acl::{v4, Key, Memo};
use crate::conntrack::{self, opens_flow, ConnTrack, Refused, Segment, Timeouts, Tuple};
use crate::events;
use crate::firewall::{self, meta, meta_ct, state, status, Action, RuleSet};
use crate::fwd::{ForwardMode, Frame};
use crate::nat::{self, addr4, has_ports, NatConfig, PortRange, SnatTo};
use crate::router::{self, Router};
use crate::verdict::{DropReason, Verdict};
use crate::wire::{EtherType, IpProto, Ipv4Packet, Ipv6Packet, ETHERNET_HEADER_LEN as ETH};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod clock;
mod ipv4;
mod ipv6;
pub mod mss;
mod nat64;
mod ports;
mod profiled;
pub mod reass;
mod reject;
pub use clock::{CycleClock, NoClock, Stage, StageClock};
pub use profiled::Profiled;

/// Ports tried for a new source NAT mapping before giving up.
pub const NAT_PROBES: u32 = 256;

/// What the gateway is built from (control path).
#[derive(Clone)]
pub struct GatewayConfig {
    /// Firewall rules and default policy.
    pub rules: Arc<RuleSet>,
    /// NAT rules.
    pub nat: Arc<NatConfig>,
    /// Flows per worker.
    pub ct_capacity: usize,
    /// Conntrack timeouts.
    pub timeouts: Timeouts,
    /// Whether conntrack tracks TCP flows' windows
    /// ([`conntrack::Window`]).
    pub tcp_window: bool,
    /// Workers (the NAT port range is split among them).
    pub workers: u16,
    /// Per interface (ports, then VLAN sub-interfaces): the most a TCP
    /// SYN entering or leaving through it may say in its MSS option,
    /// over IPv4 and over IPv6 (`clamp_mss`; `u16::MAX`, or no entry:
    /// not clamped).
    pub mss_limits: Arc<[[u16; 2]]>,
    /// Clamping rules, first match wins (`[[firewall.clamp_mss]]`).
    pub mss_rules: Arc<[mss::MssRule]>,
}

/// Per-rule hit counters of one worker, published on each tick.
pub type RuleHits = Arc<[AtomicU64]>;

/// The gateway's counters: the router's, the firewall's, conntrack's,
/// NAT's and the fragments' (virtual reassembly), one after another, each
/// under its stage's names.
pub const EVENTS: [&str;
    router::Event::COUNT
        + firewall::Event::COUNT
        + conntrack::Event::COUNT
        + nat::Event::COUNT
        + reass::Event::COUNT] = events::concat(&[
    router::Event::NAMES,
    firewall::Event::NAMES,
    conntrack::Event::NAMES,
    nat::Event::NAMES,
    reass::Event::NAMES,
]);

/// New settings for a running gateway (a hot reload): rules, NAT and
/// routes. Tracked flows and their translations survive: rules decide new
/// flows (as an nftables ruleset that accepts `established` first), so a
/// flow the new rules would refuse keeps going until it ends or times out;
/// new flows follow the new rules from the first packet after the update.
#[derive(Clone)]
pub struct GatewayUpdate {
    /// The new routes and neighbours.
    pub router: crate::router::RouterUpdate,
    /// The new rules (with the new NAT's original destinations compiled in).
    pub rules: Arc<RuleSet>,
    /// The new NAT.
    pub nat: Arc<NatConfig>,
    /// Where this worker publishes the new rules' hit counts.
    pub hits: Option<RuleHits>,
}

/// The gateway's gauges: flows tracked, the table's size, flows holding a
/// NAT mapping, NAT ports this worker may hand out.
pub const GAUGES: [&str; 5] = [
    "conntrack_entries",
    "conntrack_limit",
    "nat_mappings",
    "nat_ports",
    "nat_blocks_held",
];

/// The gateway stage of one worker; `C` profiles its stages (the
/// benchmark's [`CycleClock`]; by default nothing).
pub struct Gateway<C: StageClock = NoClock> {
    router: Router,
    rules: Arc<RuleSet>,
    nat: Arc<NatConfig>,
    ct: ConnTrack,
    ports: Option<PortRange>,
    next_port: u32,
    /// Whether a source NAT rule is deterministic (its flows' ports are
    /// picked from their host's block, not from `ports`).
    det: bool,
    hits: Vec<u64>,
    hits_out: Option<RuleHits>,
    /// The firewall's and NAT's counters (the router and conntrack keep
    /// their own).
    fw_events: [u64; firewall::Event::COUNT],
    nat_events: [u64; nat::Event::COUNT],
    /// What the rules decided for recent keys' intervals (cleared when
    /// the rules change).
    memo: Memo,
    /// Every stage's counters side by side, as [`EVENTS`] names them
    /// (refreshed on each tick).
    events: [u64; EVENTS.len()],
    /// Levels, as [`GAUGES`] names them (refreshed on each tick).
    gauges: [u64; GAUGES.len()],
    /// The fragments' datagrams and those waiting for their first.
    reass: reass::Reass,
    /// The smallest interface MTU (packets below it skip the MTU check).
    min_mtu: u16,
    /// This worker's index among `workers` (for return-traffic steering).
    worker: u16,
    workers: u16,
    /// TCP MSS clamping.
    mss: MssClamp,
    /// The identification of the last NAT64-translated IPv4 packet that
    /// may be fragmented.
    nat64_id: u16,
    /// While a NAT64 ICMP message's first fragment is processed, the
    /// whole message's length (its checksum's pseudo-header holds it);
    /// 0 otherwise.
    frag_len: u32,
    /// A datagram's first fragment is being processed: one that would open
    /// a flow here goes to the worker its flow's packets reach, where the
    /// port's spread says (`spreads`).
    first_fragment: bool,
    /// By port, how it spreads flows over the workers, where known.
    spreads: Arc<[Option<crate::steer::Spread>]>,
    clock: C,
}

/// What [`Gateway`] clamps TCP SYNs' MSS to, per interface.
struct MssClamp {
    /// [`GatewayConfig::mss_limits`].
    limits: Arc<[[u16; 2]]>,
    /// Whether any interface clamps (else nothing is looked at).
    any: bool,
    /// A held SYN's copy, clamped on its way out ([`Gateway::emit`]).
    scratch: Vec<u8>,
    /// [`GatewayConfig::mss_rules`].
    rules: Arc<[mss::MssRule]>,
    /// The addresses of the SYN being forwarded, as it came in, the
    /// interface its destination routed to then, and its sequence and
    /// acknowledgment numbers (which NAT leaves alone: they name it when
    /// it leaves after its neighbour was resolved) (for the rules).
    seen: Option<(u128, u128, Option<u16>, u64)>,
    /// SYNs the router held for their neighbour, to clamp by the rules
    /// when they leave ([`Gateway::emit`]): their numbers, the interface
    /// they came in on and their addresses as they came in.
    held: [Option<HeldSyn>; 4],
    /// Where the next held SYN is written in `held`.
    held_next: usize,
}

impl MssClamp {
    fn new(limits: &Arc<[[u16; 2]]>, rules: &Arc<[mss::MssRule]>) -> Self {
        let any = limits.iter().any(|l| l.iter().any(|&m| m != u16::MAX)) || !rules.is_empty();
        MssClamp {
            limits: limits.clone(),
            rules: rules.clone(),
            seen: None,
            held: [None; 4],
            held_next: 0,
            any,
            scratch: if any {
                Vec::with_capacity(16384)
            } else {
                Vec::new()
            },
        }
    }

    /// Interface `i`'s limit (`u16::MAX`: none) over IPv4 or IPv6.
    #[inline]
    fn limit(&self, i: u16, v6: bool) -> u16 {
        mss_limit(&self.limits, i, v6)
    }
}

/// A SYN the router held for its neighbour, as the clamping rules need
/// it: its sequence and acknowledgment numbers, the interface it came in
/// on, its source and destination as it came in.
type HeldSyn = (u64, u16, (u128, u128));

/// Frame `b` (a SYN in on `in_if`, out by `o`, `addrs` its source and
/// destination as it came in) clamped by the first of `rules` that
/// matches it (`mtu`: an interface's MTU); whether its MSS was lowered.
fn rule_clamp(
    rules: &[mss::MssRule],
    mtu: impl Fn(u16) -> u16,
    b: &mut [u8],
    in_if: u16,
    o: u16,
    (src, dst): (u128, u128),
) -> bool {
    let Some(r) = rules.iter().find(|r| r.matches(in_if, o, src, dst)) else {
        return false;
    };
    let path = mtu(in_if).min(mtu(o));
    let clamp = r.clamp;
    let limit = |v6: bool| match clamp {
        mss::Clamp::Pmtu => path.saturating_sub(mss::headers(v6)),
        mss::Clamp::Max(n) => n,
        mss::Clamp::Off => u16::MAX,
    };
    mss::clamp(b, limit)
}

/// Interface `i`'s entry of `limits` ([`GatewayConfig::mss_limits`]) over
/// IPv4 or IPv6, `u16::MAX` where it has none.
fn mss_limit(limits: &[[u16; 2]], i: u16, v6: bool) -> u16 {
    limits
        .get(usize::from(i))
        .map_or(u16::MAX, |l| l[usize::from(v6)])
}

/// Packets of a burst the burst path takes through each stage together.
const CHUNK: usize = 32;
const _: () = assert!(CHUNK <= 64, "a chunk's new flows are a 64-bit mask");

/// A packet of a burst its first stage found plain (a TCP or UDP packet
/// in one valid IPv4 header to this port's MAC, or an IPv6 one,
/// [`ipv6::plain6`]): its tuple, TCP flags and hash, the conntrack entry
/// its signature matched, and (a likely new flow's first packet) what
/// opening its flow takes from the configuration.
#[derive(Clone, Copy)]
struct Lane {
    t: Tuple,
    flags: u16,
    h: u64,
    hint: Option<u32>,
    plan: Option<Plan4>,
    way: Way,
}

/// Which way a [`Lane`] goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    /// IPv4 ([`Gateway::track4`]).
    V4,
    /// IPv6 to a NAT64 prefix ([`Gateway::nat64_lane`]).
    Nat64,
    /// IPv6 to any other address ([`Gateway::track6`]).
    Plain6,
}

/// What opening a new IPv4 flow takes from the configuration alone
/// ([`Gateway::plan4`]): destination NAT, the route, the reply tuple.
/// The burst path works it out for a chunk's likely new flows before the
/// first of them is opened, so that each one's reply tuple's index bucket
/// (which the NAT port's check or the reply's lookup reads first, and
/// which misses the caches at any table size) is on its way while the
/// flows before it are opened, not only while its own rules are matched.
/// Nothing it holds changes within a burst (configuration changes come
/// between rounds) except the NAT port, which depends on the flows opened
/// before and is taken again when the flow is opened.
#[derive(Clone, Copy)]
enum Plan4 {
    /// To one of the router's own addresses, not translated.
    Local,
    /// No route to the destination (translated if `dnat`).
    NoRoute { dnat: bool },
    /// Routed: see [`Open4`].
    Open(Open4),
}

/// A routed new flow's plan ([`Plan4::Open`]).
#[derive(Clone, Copy)]
struct Open4 {
    /// The destination address and port, after destination NAT.
    dst: u32,
    dport: u16,
    /// Whether destination NAT applies, and its entry.
    dnat: bool,
    entry: usize,
    /// The source NAT's entry (a 1:1 mapping's or a rule's,
    /// [`NatConfig::entries`]' numbering; 0: none).
    snat_entry: usize,
    /// The route: next hop, path, and whether it is multipath.
    nh: u32,
    hop: crate::fib::NextHop,
    multi: bool,
    /// The reply tuple; for a translated source with ports (`pick`), with
    /// the port [`Gateway::pick_port`] was expected to try first.
    reply: Tuple,
    pick: bool,
    /// `reply`'s hash (its index bucket prefetched).
    hash: u64,
}

/// Whether a packet of `total` bytes with DF set will not fit the MTU of
/// `router`'s route to `to` (`min_mtu`: the smallest of its interfaces'):
/// it is then left untranslated so that the router's Fragmentation Needed
/// reaches its real sender. Not a method: the established path holds its
/// flow, borrowed from the gateway's conntrack, across it.
#[inline(always)]
fn too_big4(router: &Router, min_mtu: u16, total: u16, flags_frag: u16, to: &Tuple) -> bool {
    total > min_mtu && flags_frag & 0x4000 != 0 && too_big4_routed(router, total, to)
}

/// [`too_big4`] past the quick tests: the route's MTU.
#[cold]
fn too_big4_routed(router: &Router, total: u16, to: &Tuple) -> bool {
    router
        .route4(addr4(to.dst), router.tuple_hash(to))
        .and_then(|p| router.iface(p))
        .is_some_and(|i| total > i.mtu)
}

impl<C: StageClock> Clone for Gateway<C> {
    /// A fresh worker instance: same rules, an empty table.
    fn clone(&self) -> Self {
        Gateway {
            router: self.router.clone(),
            rules: self.rules.clone(),
            nat: self.nat.clone(),
            ct: self.ct.empty_like(),
            ports: self.ports,
            next_port: self.next_port,
            det: self.det,
            hits: vec![0; self.hits.len()],
            hits_out: None,
            fw_events: [0; firewall::Event::COUNT],
            memo: Memo::default(),
            nat_events: [0; nat::Event::COUNT],
            events: [0; EVENTS.len()],
            gauges: [0; GAUGES.len()],
            reass: reass::Reass::new(self.router.frame_room()),
            min_mtu: self.min_mtu,
            worker: self.worker,
            workers: self.workers,
            mss: MssClamp::new(&self.mss.limits, &self.mss.rules),
            nat64_id: self.nat64_id,
            frag_len: 0,
            first_fragment: false,
            spreads: self.spreads.clone(),
            clock: self.clock.clone(),
        }
    }
}

/// The tuple and TCP flags of frame `b` if it is a plain TCP or UDP
/// packet to MAC `mac`: one valid IPv4 header of 20 bytes, TTL above 1
/// (`router::plain4`, `nic` the NIC's checksum verdict), not a fragment,
/// the whole L4 header within the packet; what [`Gateway::process`] would
/// find for it on its way to conntrack. `None` for anything else.
#[inline(always)]
fn plain_l4(b: &[u8], mac: [u8; 6], nic: crate::fwd::IpCsum) -> Option<(Tuple, u16)> {
    // The Ethernet and IPv4 headers and the ports as a fixed array: no
    // bounds checks on the reads below. A frame shorter than that fails
    // the length checks anyway (a UDP header needs 42 bytes).
    let h: &[u8; ETH + 24] = b.get(..ETH + 24)?.try_into().ok()?;
    if h[..6] != mac || !crate::router::plain4(b, nic) {
        return None;
    }
    let l3 = &h[ETH..];
    let total = usize::from(u16::from_be_bytes([l3[2], l3[3]]));
    let frag = u16::from_be_bytes([l3[6], l3[7]]) & 0x3fff;
    let proto = l3[9];
    let need = match proto {
        IpProto::TCP => 40,
        IpProto::UDP => 28,
        _ => return None,
    };
    if frag != 0 || total < need {
        return None;
    }
    // What `ports` reads, at the fixed offsets of a 20-byte header (through
    // `ports` it measured 20 instructions more a packet; the burst tests
    // check that the two agree).
    let be32 = |i: usize| u32::from_be_bytes(l3[i..i + 4].try_into().expect("4 bytes"));
    let be16 = |i: usize| u16::from_be_bytes([l3[i], l3[i + 1]]);
    let flags = if proto == IpProto::TCP {
        // Inside the frame: `total` (at least 40) fits in it.
        let f = b.get(ETH + 32..ETH + 34)?;
        u16::from(f[1]) | u16::from(f[0] & 1) << 8
    } else {
        0
    };
    Some((tuple4(be32(12), be32(16), be16(20), be16(22), proto), flags))
}

/// Writes addresses `src` and `dst` (IPv4 mapped) into IPv4 header `l3`
/// where they differ from its own, its checksum adjusted; IPv6 is never
/// translated.
fn readdress(l3: &mut [u8], src: u128, dst: u128) {
    let (src, dst) = (addr4(src), addr4(dst));
    if l3.len() >= 20
        && l3[0] >> 4 == 4
        && (l3[12..16] != src.to_be_bytes() || l3[16..20] != dst.to_be_bytes())
    {
        nat::readdress4(l3, src, dst);
    }
}

/// A tuple from IPv4 addresses.
fn tuple4(src: u32, dst: u32, sport: u16, dport: u16, proto: u8) -> Tuple {
    Tuple {
        src: v4(src),
        dst: v4(dst),
        sport,
        dport,
        proto,
        zone: 0,
    }
}

/// The TCP segment of IPv4 packet `b` (a frame whose header was
/// validated) for window tracking, unless it is a fragment (its segment's
/// length is its datagram's, which a fragment does not give).
#[inline(always)]
fn segment4(b: &[u8]) -> Option<Segment> {
    let ip = Ipv4Packet::new_unchecked(&b[ETH..]);
    if ip.flags_frag() & 0x3fff != 0 {
        return None;
    }
    let (h, total) = (ip.header_len(), usize::from(ip.total_len()));
    b.get(ETH + h..ETH + total).map(Segment::parse)
}

/// The ports (or ICMP query identifier) and the flags word of an L4
/// header: TCP flags, or for ICMP/ICMPv6 the type and code (`type << 8 |
/// code`, what a rule's `icmp_type`/`icmp_code` match); `Err` when too
/// short, `Ok(None)` for an ICMP error.
#[allow(clippy::type_complexity)]
#[inline(always)]
fn ports(proto: u8, l4: &[u8], v6: bool) -> Result<Option<(u16, u16, u16)>, DropReason> {
    let be = |i: usize| u16::from_be_bytes([l4[i], l4[i + 1]]);
    match proto {
        IpProto::TCP => {
            if l4.len() < 20 {
                return Err(DropReason::Truncated);
            }
            let flags = u16::from(l4[13]) | u16::from(l4[12] & 1) << 8;
            Ok(Some((be(0), be(2), flags)))
        }
        IpProto::UDP => {
            if l4.len() < 8 {
                return Err(DropReason::Truncated);
            }
            Ok(Some((be(0), be(2), 0)))
        }
        IpProto::ICMP if !v6 => {
            if l4.len() < 8 {
                return Err(DropReason::Truncated);
            }
            let tc = be(0);
            match l4[0] {
                0 | 8 | 13 | 14 => Ok(Some((be(4), be(4), tc))),
                3 | 4 | 5 | 11 | 12 => Ok(None),
                _ => Ok(Some((0, 0, tc))),
            }
        }
        IpProto::ICMPV6 if v6 => {
            if l4.len() < 8 {
                return Err(DropReason::Truncated);
            }
            let tc = be(0);
            match l4[0] {
                128 | 129 => Ok(Some((be(4), be(4), tc))),
                1..=4 => Ok(None),
                _ => Ok(Some((0, 0, tc))),
            }
        }
        _ => Ok(Some((0, 0, 0))),
    }
}

/// The ports (or ICMP query identifier) of the packet an ICMP error
/// quotes, `l4` being what the quote holds of its L4 header: as
/// [`ports`], but a TCP header needs only its first 8 bytes (RFC 792's
/// least quote, which routers still send), its flags then not known.
#[allow(clippy::type_complexity)]
fn quoted_ports(proto: u8, l4: &[u8], v6: bool) -> Result<Option<(u16, u16, u16)>, DropReason> {
    if proto == IpProto::TCP && (8..20).contains(&l4.len()) {
        let be = |i: usize| u16::from_be_bytes([l4[i], l4[i + 1]]);
        return Ok(Some((be(0), be(2), 0)));
    }
    ports(proto, l4, v6)
}

/// The tuple of the packet an ICMPv6 error quotes (`l4`: the error's
/// ICMPv6 header and quote), as that packet was sent: `None` when the
/// quote holds less than an IPv6 header and 8 bytes of what follows it;
/// ports 0 where the quote does not say them ([`quoted_ports`]).
fn quoted6(l4: &[u8]) -> Option<Tuple> {
    let q = l4.get(8..)?;
    if q.len() < 48 || q[0] >> 4 != 6 {
        return None;
    }
    let a = |i: usize| u128::from_be_bytes(q[i..i + 16].try_into().expect("16 bytes"));
    let (sport, dport) = match quoted_ports(q[6], &q[40..], true) {
        Ok(Some((x, y, _))) => (x, y),
        _ => (0, 0),
    };
    Some(Tuple {
        src: a(8),
        dst: a(24),
        sport,
        dport,
        proto: q[6],
        zone: 0,
    })
}

/// The port blocks of `nat`'s block rules in this worker's slice of the
/// NAT port range (`None`: no such rule, or no slice).
fn blocks_of(
    nat: &NatConfig,
    slice: Option<PortRange>,
) -> Option<crate::conntrack::blocks::Blocks> {
    let r = slice?;
    crate::conntrack::blocks::Blocks::new(&nat.block_rules(), r.lo, r.len())
}

impl Gateway {
    /// A gateway over `router` for worker `worker` of `cfg.workers`.
    pub fn new(router: Router, cfg: &GatewayConfig, worker: u16) -> Self {
        Gateway::with_clock(router, cfg, worker, NoClock)
    }
}

impl<C: StageClock> Gateway<C> {
    /// [`Gateway::new`], its stages profiled by `clock`.
    pub fn with_clock(router: Router, cfg: &GatewayConfig, worker: u16, clock: C) -> Self {
        let ports = cfg.nat.ports.slice(worker, cfg.workers);
        let min_mtu = (0..u16::MAX)
            .map_while(|p| router.iface(p))
            .map(|i| i.mtu)
            .min()
            .unwrap_or(1500);
        Gateway {
            reass: reass::Reass::new(router.frame_room()),
            min_mtu,
            worker,
            workers: cfg.workers.max(1),
            mss: MssClamp::new(&cfg.mss_limits, &cfg.mss_rules),
            nat64_id: 0,
            frag_len: 0,
            first_fragment: false,
            spreads: Arc::from([]),
            router,
            rules: cfg.rules.clone(),
            nat: cfg.nat.clone(),
            ct: {
                let mut ct = ConnTrack::new(cfg.ct_capacity, cfg.timeouts);
                ct.set_tcp_window(cfg.tcp_window);
                ct.set_blocks(blocks_of(&cfg.nat, ports));
                ct
            },
            ports,
            next_port: 0,
            det: cfg.nat.dets().next().is_some(),
            hits: vec![0; cfg.rules.rules().len() + cfg.nat.entries()],
            hits_out: None,
            fw_events: [0; firewall::Event::COUNT],
            memo: Memo::default(),
            nat_events: [0; nat::Event::COUNT],
            events: [0; EVENTS.len()],
            gauges: [0; GAUGES.len()],
            clock,
        }
    }

    /// The stage profile.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// This gateway, its tables, flows and counters as they are, its
    /// stages profiled by `clock` from now on (the old clock dropped):
    /// how [`Profiled`] switches its clock on and off while it runs.
    pub fn reclock<D: StageClock>(self, clock: D) -> Gateway<D> {
        let Gateway {
            router,
            rules,
            nat,
            ct,
            ports,
            next_port,
            det,
            hits,
            hits_out,
            fw_events,
            nat_events,
            memo,
            events,
            gauges,
            reass,
            min_mtu,
            worker,
            workers,
            mss,
            nat64_id,
            frag_len: _,
            first_fragment: _,
            spreads,
            clock: _,
        } = self;
        Gateway {
            router,
            rules,
            nat,
            ct,
            ports,
            next_port,
            det,
            hits,
            hits_out,
            fw_events,
            nat_events,
            memo,
            events,
            gauges,
            reass,
            min_mtu,
            worker,
            workers,
            mss,
            nat64_id,
            frag_len: 0,
            first_fragment: false,
            spreads,
            clock,
        }
    }

    /// Takes new interfaces, routes and neighbours; rules and NAT as they
    /// were (the netlink mirror's address changes).
    pub fn reroute(&mut self, u: &crate::router::RouterUpdate) {
        self.router.reconfigure(u.0.clone());
        self.min_mtu = (0..u16::MAX)
            .map_while(|p| self.router.iface(p))
            .map(|i| i.mtu)
            .min()
            .unwrap_or(1500);
    }

    /// Takes new rules, NAT and routes (see [`GatewayUpdate`]): hit counts
    /// start again with the new rules; NAT allocates new ports from this
    /// worker's share of the new range.
    pub fn reconfigure(&mut self, u: &GatewayUpdate) {
        self.reroute(&u.router);
        self.rules = u.rules.clone();
        self.memo.clear();
        let old_rules = self.nat.block_rules();
        self.nat = u.nat.clone();
        self.hits = vec![0; self.rules.rules().len() + self.nat.entries()];
        self.hits_out = u.hits.clone();
        let ports = self.nat.ports.slice(self.worker, self.workers);
        // The blocks cut again (their flows holding theirs) when the rules
        // or the slice changed; else as they are.
        if ports != self.ports || self.nat.block_rules() != old_rules {
            self.ct.set_blocks(blocks_of(&self.nat, ports));
        }
        self.ports = ports;
        self.det = self.nat.dets().next().is_some();
        // Where it was (within the new slice): not back to its start.
        self.next_port = self.ports.map_or(0, |r| self.next_port % r.len());
    }

    /// How each port spreads flows over the workers (by port; `None`
    /// where not known): a datagram's first fragment that would open a
    /// flow here goes to the worker its flow's packets reach
    /// ([`crate::steer`]).
    pub fn set_spreads(&mut self, spreads: Arc<[Option<crate::steer::Spread>]>) {
        self.spreads = spreads;
    }

    /// Starts this worker's choice of NAT ports `offset` ports into its
    /// slice (a random offset at each start, as the worker is built): a
    /// restarted gateway without its flows does not hand out again the
    /// ports it handed out last, which servers may still hold in
    /// TIME_WAIT for the connections it carried (a new SYN on such a
    /// tuple is answered with the old connection's ACK, and the client
    /// waits). Flows read back or synced keep their own ports.
    pub fn start_ports_at(&mut self, offset: u32) {
        self.next_port = self.ports.map_or(0, |r| offset % r.len());
    }

    /// Logs this worker's flow changes into `out` for the HA peer
    /// ([`crate::conntrack::sync`]).
    pub fn set_sync(&mut self, out: rtrb::Producer<crate::conntrack::sync::Change>) {
        self.ct.set_sync(out, self.worker);
    }

    /// Writes this worker's flow records and NAT events (`s`) into `out`
    /// for the flow exporter ([`crate::conntrack::export`]; times from
    /// `base_ns`).
    pub fn set_export(
        &mut self,
        out: rtrb::Producer<crate::conntrack::export::Record>,
        base_ns: u64,
        s: &crate::conntrack::export::Settings,
    ) {
        self.ct.set_export(out, self.worker, base_ns, s);
    }

    /// Publishes the per-rule hit counts into `out` (one per rule) on each
    /// tick.
    pub fn publish_hits(&mut self, out: RuleHits) {
        self.hits_out = Some(out);
    }

    /// The conntrack table.
    pub fn conntrack(&self) -> &ConnTrack {
        &self.ct
    }

    /// Hits per rule.
    pub fn hits(&self) -> &[u64] {
        &self.hits[..self.rules.rules().len()]
    }

    /// New flows translated by each NAT entry ([`NatConfig::entries`]).
    pub fn nat_hits(&self) -> &[u64] {
        &self.hits[self.rules.rules().len()..]
    }
}

/// Counts in `hits` (the firewall's `rules` rules, then the NAT's
/// entries) a new flow translated by NAT entry `entry` (1-based; 0: none).
#[inline]
fn nat_hit(hits: &mut [u64], rules: usize, entry: usize) {
    if entry != 0 {
        if let Some(h) = hits.get_mut(rules + entry - 1) {
            *h += 1;
        }
    }
}

impl<C: StageClock> Gateway<C> {
    /// This worker's source-NAT ports.
    pub fn port_range(&self) -> Option<PortRange> {
        self.ports
    }

    /// The firewall's verdict on a new, related or invalid packet.
    #[inline]
    fn decide(&mut self, k: &Key) -> Action {
        let (a, rule) = self.rules.decide_memo(k, &mut self.memo);
        if let Some(r) = rule {
            self.hits[r as usize] += 1;
        }
        a
    }

    /// The conntrack status and destination NAT entry of an open flow,
    /// for the rule lookup of its related packets.
    fn ct_meta(&self, f: &crate::conntrack::Flow) -> u32 {
        if !f.nat() {
            return 0;
        }
        let dnat = f.orig.dst != f.reply.src || f.orig.dport != f.reply.sport;
        let snat = f.orig.src != f.reply.dst || f.orig.sport != f.reply.dport;
        let st = if dnat { status::DNAT } else { 0 } | if snat { status::SNAT } else { 0 };
        let entry = if dnat {
            self.nat.entry_of(&f.orig).unwrap_or(0)
        } else {
            0
        };
        meta_ct(st, entry)
    }

    /// An untagged frame (or one whose tags were taken off) received on
    /// interface `iface` (a port, or a VLAN sub-interface): IPv4 and IPv6
    /// to the router's MAC through the rules, the rest to the router. The
    /// verdict names an interface ([`Gateway::out`] names the port).
    #[inline(always)]
    fn dispatch<P: Frame>(&mut self, pkt: &mut P, iface: u16) -> Verdict {
        let b = pkt.bytes();
        let Some(i) = self.router.iface(iface) else {
            return Verdict::Drop(DropReason::NotForUs);
        };
        if i.down {
            return Verdict::Drop(DropReason::LinkDown);
        }
        let for_us = b[0..6] == i.mac.0;
        match u16::from_be_bytes([b[12], b[13]]) {
            EtherType::IPV4 if for_us => self.ipv4(pkt, iface),
            EtherType::IPV6 if for_us => self.ipv6(pkt, iface),
            _ => self.router.process(pkt, iface),
        }
    }

    /// A TCP SYN's MSS clamped to what interface `iface` allows
    /// (`clamp_mss`), counted. Only called when some interface clamps.
    #[cold]
    #[inline(never)]
    fn clamp_mss<P: Frame>(&mut self, pkt: &mut P, iface: u16) {
        if !self.mss.rules.is_empty() {
            self.clamp_seen(pkt, iface);
        }
        self.clamp_port(pkt, iface);
    }

    /// A SYN coming in on `iface`, with clamping rules: clamped by the
    /// first that matches it on its way to the interface its destination
    /// routes to, now (before the router may hold it for its next hop);
    /// its addresses and that interface kept for [`Gateway::clamp_post`]
    /// (a destination NAT sends it elsewhere, and a SYN to the router's
    /// own address is clamped there, once its way is known).
    #[cold]
    #[inline(never)]
    fn clamp_seen<P: Frame>(&mut self, pkt: &mut P, iface: u16) {
        // To one of the router's own addresses (a reply to a translated
        // flow, a port forward): where it goes is known once conntrack
        // and NAT have seen it (`clamp_post`).
        let numbers = mss::syn_numbers(pkt.bytes());
        self.mss.seen = mss::syn_addrs(pkt.bytes()).map(|(src, dst)| {
            let out = if crate::acl::is_v4(dst) {
                let d = addr4(dst);
                (!self.router.is_local4(d))
                    .then(|| self.router.route4(d, 0))
                    .flatten()
            } else {
                (!self.router.is_local6(dst))
                    .then(|| self.router.route6(dst, 0))
                    .flatten()
            };
            (src, dst, out, numbers.unwrap_or(0))
        });
        if let Some((src, dst, Some(o), _)) = self.mss.seen {
            self.clamp_rule(pkt, iface, o, src, dst);
        }
    }

    /// [`Gateway::clamp_mss`] for interface `iface`'s `clamp_mss` alone.
    #[cold]
    #[inline(never)]
    fn clamp_port<P: Frame>(&mut self, pkt: &mut P, iface: u16) {
        let mss = &self.mss;
        if mss
            .limits
            .get(usize::from(iface))
            .is_none_or(|l| *l == [u16::MAX; 2])
        {
            return;
        }
        if mss::clamp(pkt.bytes_mut(), |v6| mss.limit(iface, v6)) {
            self.nat_events[nat::Event::MssClamped as usize] += 1;
        }
    }

    /// A forwarded TCP SYN's MSS clamped for the interface it leaves by,
    /// unless the one it came in on (`in_if`), which clamped it before
    /// the rules and NAT saw it, allows no more. Only called when some
    /// interface clamps.
    #[inline(always)]
    fn clamp_post<P: Frame>(&mut self, pkt: &mut P, in_if: u16, v: Verdict) {
        if let Verdict::Forward(o) = v {
            let m = &self.mss;
            if (0..2).any(|f| m.limit(o, f == 1) < m.limit(in_if, f == 1)) {
                self.clamp_port(pkt, o);
            }
            match self.mss.seen.take() {
                // Held for its neighbour (the frame is now the ARP or ND
                // request): clamped when it leaves.
                Some((src, dst, _, n)) if mss::syn_at(pkt.bytes()).is_none() => {
                    let m = &mut self.mss;
                    m.held[m.held_next] = Some((n, in_if, (src, dst)));
                    m.held_next = (m.held_next + 1) % m.held.len();
                }
                Some((src, dst, routed, _)) if routed != Some(o) => {
                    self.clamp_rule(pkt, in_if, o, src, dst);
                }
                _ => {}
            }
        }
    }

    /// A forwarded SYN (in on `in_if`, out by `o`, from `src` to `dst` as
    /// it came in) clamped by the first clamping rule that matches it.
    #[cold]
    #[inline(never)]
    fn clamp_rule<P: Frame>(&mut self, pkt: &mut P, in_if: u16, o: u16, src: u128, dst: u128) {
        let router = &self.router;
        let mtu = |i: u16| router.iface(i).map_or(u16::MAX, |f| f.mtu);
        if rule_clamp(&self.mss.rules, mtu, pkt.bytes_mut(), in_if, o, (src, dst)) {
            self.nat_events[nat::Event::MssClamped as usize] += 1;
        }
    }

    /// Verdict `v` as the worker takes it: a frame leaving on a VLAN
    /// sub-interface is tagged, and its port named.
    #[inline(always)]
    fn out<P: Frame>(&mut self, pkt: &mut P, v: Verdict) -> Verdict {
        match v {
            Verdict::Forward(o) if o >= self.router.ports => self.router.tag(pkt, o),
            v => v,
        }
    }

    /// A packet of a burst that is not plain IPv4 TCP/UDP to the port
    /// (IPv6, ARP, tagged, options, fragments, ICMP...): [`Gateway::process`],
    /// out of line, so that the burst loop stays the established path's.
    #[inline(never)]
    fn process_other<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        self.process(pkt, in_port)
    }

    /// The verdicts of a burst (its plain packets' name interfaces) as the
    /// worker takes them: each frame leaving on a VLAN sub-interface
    /// tagged ([`Gateway::out`]), and the burst's verdict if all are the
    /// same. Out of the burst loop, and only with sub-interfaces: the
    /// established path does not pay for them.
    #[cold]
    #[inline(never)]
    fn tag_burst<P: Frame>(&mut self, pkts: &mut [P], verdicts: &mut [Verdict]) -> Option<Verdict> {
        let (mut first, mut uniform) = (None, true);
        for (p, v) in pkts.iter_mut().zip(verdicts.iter_mut()) {
            *v = self.out(p, *v);
            crate::fwd::note_verdict(&mut first, &mut uniform, *v);
        }
        first.filter(|_| uniform)
    }

    /// A tagged frame received on `port`: its tags name the VLAN
    /// sub-interface it came in on (as the router's own path names it),
    /// and it goes through the rules, conntrack and NAT as received there
    /// (rules and NAT name sub-interfaces as they name ports). One another
    /// worker owns is handed over with its tags put back (the other worker
    /// takes it from the port, as it came).
    #[cold]
    #[inline(never)]
    fn tagged<P: Frame>(&mut self, pkt: &mut P, port: u16) -> Verdict {
        let iface = match self.router.untag(pkt, port) {
            Ok(i) => i,
            Err(v) => return v,
        };
        let b = pkt.bytes();
        if b.len() < ETH
            || matches!(
                u16::from_be_bytes([b[12], b[13]]),
                EtherType::VLAN | EtherType::QINQ
            )
        {
            // More tags than a sub-interface has.
            return Verdict::Drop(DropReason::UnknownVlan);
        }
        if self.mss.any {
            self.clamp_mss(pkt, iface);
        }
        let v = self.dispatch(pkt, iface);
        if self.mss.any {
            self.clamp_post(pkt, iface, v);
        }
        match v {
            Verdict::Handoff(w) if iface >= self.router.ports => {
                match self.router.tag(pkt, iface) {
                    Verdict::Forward(_) => Verdict::Handoff(w),
                    v => v,
                }
            }
            v => self.out(pkt, v),
        }
    }

    fn refresh_events(&mut self) {
        self.fw_events[firewall::Event::MemoHit as usize] = self.memo.hits;
        self.fw_events[firewall::Event::MemoMiss as usize] = self.memo.misses;
        let parts: [&[u64]; 5] = [
            self.router.events(),
            &self.fw_events,
            self.ct.events(),
            &self.nat_events,
            self.reass.events(),
        ];
        for (d, v) in self.events.iter_mut().zip(parts.into_iter().flatten()) {
            *d = *v;
        }
        self.gauges = [
            self.ct.len() as u64,
            self.ct.capacity() as u64,
            self.ct.nat_flows() as u64,
            self.ports.map_or(0, |r| r.len() as u64),
            self.ct.blocks().map_or(0, |b| b.held() as u64),
        ];
        if let Some(out) = &self.hits_out {
            for (o, h) in out.iter().zip(&self.hits) {
                o.store(*h, Ordering::Relaxed);
            }
        }
    }
}

impl<C: StageClock> ForwardMode for Gateway<C> {
    const NAME: &'static str = "l3fwd";

    /// Puts the whole burst's headers on their way, as the router does
    /// ([`crate::fwd::prefetch_heads`]); the stages prefetch their tables
    /// through the frame type ([`Frame::prefetch`]).
    #[inline]
    fn prefetch<P: Frame>(&mut self, pkts: &[P], pf: fn(*const u8)) {
        crate::fwd::prefetch_heads(pkts, pf);
    }

    /// The burst in chunks, each in stages, as `rte_hash`'s bulk lookup:
    /// plain TCP/UDP packets are parsed and hashed and their first
    /// conntrack bucket prefetched; then each one's signature is matched
    /// there (those lines on their way or in) and the flow it names
    /// prefetched (for one it names none, most likely a new flow, its
    /// route's entry); then the likely new flows are planned (`Plan4`,
    /// their reply buckets prefetched); then each packet goes its way, a
    /// plain one straight to conntrack with what the stages found
    /// (checked against the flow: a hint), any other through
    /// [`Gateway::process`]. The verdicts are those of `process`, packet
    /// by packet. Inlined into its caller, as the worker's round has it
    /// anyway (a call site per port type): forced, so that a caller with
    /// two call sites (the bench's passes over UDP and TCP frames) runs
    /// the same code.
    #[inline(always)]
    fn process_burst<P: Frame>(
        &mut self,
        pkts: &mut [P],
        in_port: u16,
        verdicts: &mut [Verdict],
    ) -> Option<Verdict> {
        let mac = match self.router.iface(in_port) {
            Some(i) if !i.down => i.mac.0,
            _ => return crate::fwd::process_each(self, pkts, in_port, verdicts),
        };
        // The frame type's prefetch, inline.
        let pf = P::prefetch;
        let mut first: Option<Verdict> = None;
        let mut uniform = true;
        let n = pkts.len().min(verdicts.len());
        for (pc, vc) in pkts[..n]
            .chunks_mut(CHUNK)
            .zip(verdicts[..n].chunks_mut(CHUNK))
        {
            self.clock.start();
            let mut lanes = [None::<Lane>; CHUNK];
            // IPv6 packets take lanes too, where nothing comes before
            // conntrack in their way (NPTv6's inbound translation): to a
            // NAT64 prefix NAT64's, to any other address not the
            // router's (nor multicast) conntrack's.
            let v6 = self.nat.npt.is_empty();
            for (p, l) in pc.iter().zip(lanes.iter_mut()) {
                let mut plain =
                    plain_l4(p.bytes(), mac, p.ip4_csum()).map(|(t, f)| (t, f, Way::V4));
                if plain.is_none() && v6 {
                    plain = ipv6::plain6(p.bytes(), mac).and_then(|(t, f)| {
                        if !self.nat.nat64.is_empty() && self.nat64_of(t.dst).is_some() {
                            Some((t, f, Way::Nat64))
                        } else {
                            let mine = t.dst >> 120 == 0xff || self.router.is_local6_global(t.dst);
                            (!mine).then_some((t, f, Way::Plain6))
                        }
                    });
                }
                *l = plain.map(|(t, flags, way)| {
                    let h = t.hash();
                    pf(self.ct.bucket_of(h));
                    Lane {
                        t,
                        flags,
                        h,
                        hint: None,
                        plan: None,
                        way,
                    }
                });
            }
            self.clock.mark(Stage::Parse);
            let windows = self.ct.tcp_window();
            let exported = self.ct.exports();
            let lpm = self.router.lpm4();
            // The lanes planned below.
            let mut new = 0u64;
            for (i, l) in lanes.iter_mut().enumerate() {
                let Some(l) = l else { continue };
                l.hint = self.ct.hint(l.h);
                if l.hint.is_none() {
                    // Most likely a new flow's first packet: its route is
                    // looked up in the table (an established flow's is in
                    // its flow), whose first level misses the caches.
                    if l.way == Way::Plain6 {
                        pf(self.router.lpm6().entry_of(l.t.dst));
                    } else {
                        pf(lpm.entry_of(addr4(l.t.dst)));
                    }
                    // Only NAT44's are planned (`Plan4`).
                    let v4 = l.way == Way::V4;
                    new |= u64::from(v4 && opens_flow(l.t.proto, l.flags)) << i;
                }
                if let Some(f) = l.hint.and_then(|v| self.ct.flow_at(v)) {
                    pf(f);
                    pf(f.wrapping_add(64));
                    if windows && l.t.proto == IpProto::TCP {
                        if let Some(w) = l.hint.and_then(|v| self.ct.window_at(v)) {
                            pf(w);
                        }
                    }
                    // Its accounting, when flows are exported.
                    if exported {
                        if let Some(a) = l.hint.and_then(|v| self.ct.acct_at(v)) {
                            pf(a);
                        }
                    }
                }
            }
            self.clock.mark(Stage::Conntrack);
            // The likely new flows planned (`Plan4`: their routes, whose
            // entries are on their way since the loop above, and their
            // reply tuples' buckets put on their way), before the first is
            // opened; each translated one expected to take the next port.
            let mut ahead = 0;
            while new != 0 {
                let i = new.trailing_zeros() as usize;
                new &= new - 1;
                if let Some(l) = &mut lanes[i] {
                    let plan = self.plan4::<P>(&l.t, in_port, ahead);
                    if let Plan4::Open(Open4 { pick: true, .. }) = plan {
                        ahead += 1;
                    }
                    l.plan = Some(plan);
                }
            }
            self.clock.mark(Stage::Route);
            for ((p, v), l) in pc.iter_mut().zip(vc.iter_mut()).zip(&lanes) {
                *v = match l {
                    // IPv6 (MSS clamping: the full way, which clamps).
                    Some(l) if l.way != Way::V4 => {
                        if self.mss.any {
                            self.process_other(p, in_port)
                        } else if l.way == Way::Plain6 {
                            self.clock.start();
                            self.track6(p, in_port, l)
                        } else {
                            self.clock.start();
                            self.nat64_lane(p, in_port, l)
                        }
                    }
                    Some(l) if self.mss.any && l.t.proto == IpProto::TCP && l.flags & 0x02 != 0 => {
                        self.clock.start();
                        self.clamp_mss(p, in_port);
                        let v = self.track4(p, in_port, l);
                        self.clamp_post(p, in_port, v);
                        v
                    }
                    Some(l) => {
                        self.clock.start();
                        self.track4(p, in_port, l)
                    }
                    None => self.process_other(p, in_port),
                };
                crate::fwd::note_verdict(&mut first, &mut uniform, *v);
            }
        }
        if self.router.has_sub_interfaces() {
            return self.tag_burst(&mut pkts[..n], &mut verdicts[..n]);
        }
        first.filter(|_| uniform)
    }

    #[inline]
    fn process<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        self.clock.start();
        let b = pkt.bytes();
        if b.len() < ETH {
            return Verdict::Drop(DropReason::Truncated);
        }
        if matches!(
            u16::from_be_bytes([b[12], b[13]]),
            EtherType::VLAN | EtherType::QINQ
        ) {
            return self.tagged(pkt, in_port);
        }
        if self.mss.any {
            self.clamp_mss(pkt, in_port);
            let v = self.dispatch(pkt, in_port);
            self.clamp_post(pkt, in_port, v);
            return self.out(pkt, v);
        }
        let v = self.dispatch(pkt, in_port);
        self.out(pkt, v)
    }

    #[inline]
    fn enter(&mut self) {
        self.router.enter();
    }

    #[inline]
    fn leave(&mut self) {
        self.router.leave();
    }

    #[inline]
    fn pending(&self) -> bool {
        ForwardMode::pending(&self.router) || self.reass.ready() || self.reass.firsts_ready()
    }

    /// Held packets were translated and passed the rules before they were
    /// held: only routing is left. Fragments that waited for their
    /// datagram's first go first, after the NAT64 ICMP first fragments
    /// that waited for their message's length (which go the whole way
    /// now, and decide the fate of those after them).
    fn emit(&mut self, send: &mut dyn FnMut(u16, &[u8]) -> bool) {
        if self.reass.firsts_ready() {
            self.release_firsts(send);
        }
        if self.reass.ready() {
            self.release_fragments(send);
        }
        if self.mss.any {
            // A SYN held for its neighbour leaves now: clamped for the
            // port it leaves by (it was, for the one it came in on, before
            // it was held), in a copy (the router lends its frame).
            let Gateway {
                router,
                mss,
                nat_events,
                ..
            } = self;
            let MssClamp {
                limits,
                scratch,
                rules,
                held,
                ..
            } = mss;
            // The interfaces' MTUs as the rules read them (the router is
            // lent to its emit).
            let mut mtus = [u16::MAX; 64];
            let waiting = held.iter().any(Option::is_some);
            for (i, m) in mtus.iter_mut().enumerate().take_while(|_| waiting) {
                match router.iface(i as u16) {
                    Some(f) => *m = f.mtu,
                    None => break,
                }
            }
            let mut clamped = |port: u16, f: &[u8]| {
                let limit = |v6: bool| mss_limit(limits, port, v6);
                if f.len() > scratch.capacity() || mss::syn_at(f).is_none() {
                    return send(port, f);
                }
                scratch.clear();
                scratch.extend_from_slice(f);
                let n = mss::syn_numbers(f);
                let by_rule = held
                    .iter_mut()
                    .find(|h| h.is_some_and(|(k, _, _)| Some(k) == n))
                    .and_then(Option::take);
                let mut lowered = mss::clamp(scratch, limit);
                if let Some((_, in_if, addrs)) = by_rule {
                    let mtu = |i: u16| mtus.get(usize::from(i)).copied().unwrap_or(u16::MAX);
                    lowered |= rule_clamp(rules, mtu, scratch, in_if, port, addrs);
                }
                if lowered {
                    nat_events[nat::Event::MssClamped as usize] += 1;
                    send(port, scratch)
                } else {
                    send(port, f)
                }
            };
            ForwardMode::emit(router, &mut clamped);
        } else {
            ForwardMode::emit(&mut self.router, send);
        }
        self.refresh_events();
    }

    fn stopping(&mut self) {
        self.router.stopping();
    }

    fn tick(&mut self, now_ns: u64) {
        self.router.tick(now_ns);
        self.ct.tick(now_ns);
        self.reass.tick(now_ns);
        self.refresh_events();
    }

    const EVENTS: &'static [&'static str] = &EVENTS;

    fn events(&self) -> &[u64] {
        &self.events
    }

    const GAUGES: &'static [&'static str] = &GAUGES;

    fn gauges(&self) -> &[u64] {
        &self.gauges
    }

    fn dump(
        &self,
        from: usize,
        scan: usize,
        max: usize,
        filter: &crate::conntrack::Filter,
        out: &mut Vec<crate::conntrack::Listed>,
    ) -> Option<usize> {
        self.ct.copy_flows(from, scan, max, filter, out)
    }

    fn delete_flows(
        &mut self,
        from: usize,
        scan: usize,
        filter: &crate::conntrack::Filter,
    ) -> (u64, Option<usize>) {
        let r = self.ct.delete_flows(from, scan, filter);
        self.refresh_events();
        r
    }

    fn apply_sync(&mut self, c: &crate::conntrack::sync::Change) -> bool {
        self.ct.apply(c)
    }

    fn bulk_sync(&mut self, from: usize, scan: usize) -> Option<usize> {
        self.ct.bulk(from, scan)
    }

    fn export_open(&mut self, from: usize, end: bool) -> Option<usize> {
        self.ct.export_open(from, end)
    }

    fn install_flows(
        &mut self,
        flows: &[crate::conntrack::saved::Saved],
        now_ns: u64,
    ) -> (u64, u64) {
        self.ct.set_now(now_ns);
        let installed = flows.iter().filter(|s| self.ct.install(s).is_ok()).count() as u64;
        self.refresh_events();
        (installed, flows.len() as u64 - installed)
    }

    fn reconfigure(&mut self, update: &dyn std::any::Any) -> bool {
        if let Some(u) = update.downcast_ref::<GatewayUpdate>() {
            Gateway::reconfigure(self, u);
            true
        } else if let Some(u) = update.downcast_ref::<crate::router::RouterUpdate>() {
            self.reroute(u);
            true
        } else if let Some(u) = update.downcast_ref::<crate::router::NeighborUpdate>() {
            self.router.mirror_neighbors(&u.0);
            true
        } else if let Some(u) = update.downcast_ref::<crate::router::LearnedNeighbors>() {
            self.router.learn_shared(&u.0);
            true
        } else {
            false
        }
    }

    fn take_learned(&mut self) -> Option<crate::router::LearnedNeighbors> {
        ForwardMode::take_learned(&mut self.router)
    }
}

#[cfg(test)]
mod tests;
