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
use crate::checksum;
use crate::conntrack::{
    self, opens_flow, ConnTrack, Refused, Segment, Timeouts, Tuple, ACK, FIN, RST, SYN,
};
use crate::events;
use crate::firewall::{self, meta, meta_ct, state, status, Action, RejectWith, RuleSet};
use crate::fwd::{ForwardMode, Frame};
use crate::nat::{self, addr4, has_ports, NatConfig, PortRange, SnatTo};
use crate::router::{self, Router};
use crate::verdict::{DropReason, Verdict};
use crate::wire::{EtherType, IpProto, Ipv4Packet, Ipv6Packet, ETHERNET_HEADER_LEN as ETH};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod clock;
mod profiled;
pub mod reass;
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
pub const GAUGES: [&str; 4] = [
    "conntrack_entries",
    "conntrack_limit",
    "nat_mappings",
    "nat_ports",
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
    clock: C,
}

/// Packets of a burst the burst path takes through each stage together.
const CHUNK: usize = 32;
const _: () = assert!(CHUNK <= 64, "a chunk's new flows are a 64-bit mask");

/// A packet of a burst its first stage found plain (a TCP or UDP packet
/// in one valid IPv4 header to this port's MAC): its tuple, TCP flags and
/// hash, the conntrack entry its signature matched, and (a likely new
/// flow's first packet) what opening its flow takes from the
/// configuration.
#[derive(Clone, Copy)]
struct Lane {
    t: Tuple,
    flags: u16,
    h: u64,
    hint: Option<u32>,
    plan: Option<Plan4>,
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
            router,
            rules: cfg.rules.clone(),
            nat: cfg.nat.clone(),
            ct: {
                let mut ct = ConnTrack::new(cfg.ct_capacity, cfg.timeouts);
                ct.set_tcp_window(cfg.tcp_window);
                ct
            },
            ports,
            next_port: 0,
            hits: vec![0; cfg.rules.rules().len()],
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
            clock: _,
        } = self;
        Gateway {
            router,
            rules,
            nat,
            ct,
            ports,
            next_port,
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
        self.hits = vec![0; self.rules.rules().len()];
        self.hits_out = u.hits.clone();
        self.nat = u.nat.clone();
        self.ports = self.nat.ports.slice(self.worker, self.workers);
        self.next_port = 0;
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
        &self.hits
    }

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

    /// Applies a non-accept action.
    fn refuse<P: Frame>(&mut self, pkt: &mut P, in_port: u16, a: Action, tcp: bool) -> Verdict {
        let v6 = pkt.bytes()[12..14] == EtherType::IPV6.to_be_bytes();
        let v = match a {
            Action::Reject(RejectWith::Auto | RejectWith::TcpReset) if tcp => {
                self.tcp_reset(pkt, in_port, v6)
            }
            Action::Reject(w) => {
                let admin = w == RejectWith::AdminProhibited;
                if v6 {
                    let code = if admin { 1 } else { 4 };
                    self.router
                        .icmp6_error(pkt, in_port, 1, code, 0, DropReason::Filtered)
                } else {
                    let code = if admin { 13 } else { 3 };
                    self.router
                        .icmp4_error(pkt, in_port, 3, code, 0, DropReason::Filtered)
                }
            }
            _ => Verdict::Drop(DropReason::Filtered),
        };
        if matches!(v, Verdict::Forward(_)) {
            self.fw_events[firewall::Event::Reject as usize] += 1;
        }
        v
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
        match self.dispatch(pkt, iface) {
            Verdict::Handoff(w) if iface >= self.router.ports => {
                match self.router.tag(pkt, iface) {
                    Verdict::Forward(_) => Verdict::Handoff(w),
                    v => v,
                }
            }
            v => self.out(pkt, v),
        }
    }

    fn ipv4<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        let b = pkt.bytes();
        // A plain header (20 bytes, valid, TTL above 1) is checked in a few
        // machine words, as the router's burst path does; anything else
        // the full way.
        if !crate::router::plain4(b, pkt.ip4_csum()) {
            let ip = match Ipv4Packet::new_checked(&b[ETH..]) {
                Ok(ip) => ip,
                Err(e) => return Verdict::Drop(e.into()),
            };
            if !ip.verify_checksum() {
                return Verdict::Drop(DropReason::BadChecksum);
            }
            if ip.ttl() <= 1 {
                return self.router.process(pkt, in_port);
            }
        }
        let ip = Ipv4Packet::new_unchecked(&b[ETH..]);
        let h = ip.header_len();
        if ip.flags_frag() & 0x3fff != 0 {
            return self.fragment4(pkt, in_port);
        }
        self.l4_4(pkt, in_port, h)
    }

    /// The part of [`Gateway::ipv4`] from the L4 header on, for a packet
    /// whose IPv4 header (`h` bytes) was validated.
    #[inline(always)]
    fn l4_4<P: Frame>(&mut self, pkt: &mut P, in_port: u16, h: usize) -> Verdict {
        let b = pkt.bytes();
        let ip = Ipv4Packet::new_unchecked(&b[ETH..]);
        let l4 = &b[ETH + h..ETH + usize::from(ip.total_len())];
        let (sport, dport, flags) = match ports(ip.protocol(), l4, false) {
            Ok(Some(p)) => p,
            Ok(None) => return self.icmp_error4(pkt, in_port, h),
            Err(r) => return Verdict::Drop(r),
        };
        let (src, dst) = (u32::from_be_bytes(ip.src()), u32::from_be_bytes(ip.dst()));
        let t = tuple4(src, dst, sport, dport, ip.protocol());
        self.clock.mark(Stage::Parse);
        let lane = Lane {
            t,
            flags,
            h: t.hash(),
            hint: None,
            plan: None,
        };
        self.track4(pkt, in_port, &lane)
    }

    /// An IPv4 fragment (its header validated): a datagram's first goes
    /// the way of any packet (its ports are in it) and its fate is kept
    /// for the others (`reass`), which are then translated, routed, given
    /// to the router or dropped as it was, or wait for it.
    #[cold]
    #[inline(never)]
    fn fragment4<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        let b = pkt.bytes();
        let ip = Ipv4Packet::new_unchecked(&b[ETH..]);
        let (h, total, proto) = (ip.header_len(), usize::from(ip.total_len()), ip.protocol());
        let (src, dst) = (u32::from_be_bytes(ip.src()), u32::from_be_bytes(ip.dst()));
        let key = reass::Key {
            src: v4(src),
            dst: v4(dst),
            id: u32::from(ip.ident()),
            proto,
            v6: false,
        };
        let ff = ip.flags_frag();
        let (at, len, last) = (
            u32::from(ff & 0x1fff) * 8,
            (total - h) as u32,
            ff & 0x2000 == 0,
        );
        if at == 0 {
            let t = match ports(proto, &b[ETH + h..ETH + total], false) {
                Ok(Some((sport, dport, _))) => Some(tuple4(src, dst, sport, dport, proto)),
                _ => None,
            };
            let v = self.l4_4(pkt, in_port, h);
            let fate = self.fate(v, t, self.router.is_local4(dst));
            self.reass.first(&key, len, last, fate);
            return v;
        }
        // A TCP fragment at byte 8 would overwrite the first's flags (RFC
        // 1858's overlapping fragment attack).
        if proto == IpProto::TCP && at == 8 {
            return Verdict::Drop(DropReason::Fragment);
        }
        self.later(pkt, in_port, &key, (at, len, last), ETH + total)
    }

    /// A fragment that is not its datagram's first (`key`), at payload
    /// byte `at` with `len` bytes (`last`: the datagram's last), the frame
    /// `frame` bytes long: it meets the datagram's fate if the first has
    /// come, else waits for it (its buffer `consumed`: a copy waits).
    fn later<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        key: &reass::Key,
        (at, len, last): (u32, u32, bool),
        frame: usize,
    ) -> Verdict {
        match self.reass.later(key, at, len, last) {
            reass::Later::Fate(f) => self.follow(pkt, in_port, f),
            reass::Later::Wait if self.reass.hold(key, in_port, &pkt.bytes()[..frame]) => {
                Verdict::Drop(DropReason::Consumed)
            }
            reass::Later::Wait | reass::Later::Full => Verdict::Drop(DropReason::Fragment),
        }
    }

    /// What became of a datagram's first fragment, whose verdict was `v`
    /// (`t`: its tuple, when it had ports; `local`: it is addressed to
    /// the router): handed over or dropped as it was; if it went on,
    /// forwarded with its flow's addresses, or, without a flow, given to
    /// the router if it is the router's (which answers or punts it to the
    /// kernel); any other first fragment that went on without a flow was
    /// refused with an answer, or was invalid and let through: the others
    /// are dropped.
    fn fate(&mut self, v: Verdict, t: Option<Tuple>, local: bool) -> reass::Fate {
        let flow = match v {
            Verdict::Handoff(w) => return reass::Fate::Handoff(w),
            Verdict::Drop(r) if r != DropReason::Consumed => return reass::Fate::Drop(r),
            _ => t.and_then(|t| Some((t, self.ct.find(&t)?))),
        };
        match flow {
            Some((t, (i, reply))) => {
                let f = self.ct.flow(i);
                let to = if f.nat() { f.translated(reply) } else { t };
                reass::Fate::Forward {
                    src: to.src,
                    dst: to.dst,
                }
            }
            None if local => reass::Fate::Router,
            None if t.is_none() => reass::Fate::Drop(DropReason::Fragment),
            None => reass::Fate::Drop(DropReason::Filtered),
        }
    }

    /// A fragment (not its datagram's first) meets its datagram's `fate`.
    fn follow<P: Frame>(&mut self, pkt: &mut P, in_port: u16, fate: reass::Fate) -> Verdict {
        match fate {
            reass::Fate::Forward { src, dst } => {
                readdress(&mut pkt.bytes_mut()[ETH..], src, dst);
                self.router.process(pkt, in_port)
            }
            reass::Fate::Router => self.router.process(pkt, in_port),
            reass::Fate::Drop(r) => Verdict::Drop(r),
            reass::Fate::Handoff(w) => Verdict::Handoff(w),
        }
    }

    /// Sends the fragments that waited for their datagram's first, as
    /// [`Gateway::follow`] would have (a fragment handed to another
    /// worker cannot be: it is dropped).
    fn release_fragments(&mut self, send: &mut dyn FnMut(u16, &[u8]) -> bool) {
        let router = &mut self.router;
        self.reass.release(|frame, in_port, fate| match fate {
            reass::Fate::Forward { src, dst } => {
                readdress(&mut frame[ETH..], src, dst);
                router.route_and_send(frame, in_port, send)
            }
            _ => false,
        });
    }

    /// The part of [`Gateway::ipv4`] past the parse, for a TCP/UDP/ICMP
    /// query packet whose header was validated: conntrack, then the
    /// established path (translation, the flow's cached route) or a new
    /// flow's.
    #[inline(always)]
    fn track4<P: Frame>(&mut self, pkt: &mut P, in_port: u16, lane: &Lane) -> Verdict {
        // The tuple by reference: a packet of a flow that is not
        // translated never copies it.
        let (t, flags) = (&lane.t, lane.flags);
        let dst = addr4(t.dst);
        let seg = if t.proto == IpProto::TCP && self.ct.tcp_window() {
            segment4(pkt.bytes())
        } else {
            None
        };
        if let Some((f, reply, conn)) =
            self.ct
                .track_hashed(t, lane.h, lane.hint, flags, seg.as_ref())
        {
            self.clock.mark(Stage::Conntrack);
            if conn == crate::conntrack::Conn::Invalid {
                return self.invalid(
                    pkt,
                    in_port,
                    t,
                    flags,
                    self.router.route4(dst, self.router.tuple_hash(t)),
                );
            }
            // The tuple as sent.
            let translated;
            let to = if f.nat() {
                translated = f.translated(reply);
                &translated
            } else {
                t
            };
            let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ETH..]);
            if f.nat()
                && !too_big4(
                    &self.router,
                    self.min_mtu,
                    ip.total_len(),
                    ip.flags_frag(),
                    to,
                )
            {
                nat::rewrite4_flow(&mut pkt.bytes_mut()[ETH..], to, f.nat_deltas(reply));
                self.clock.mark(Stage::Nat);
            }
            // Validated above (the rewrite kept the checksum right); the
            // flow caches its next hop, a multipath route's path chosen
            // by the packet as sent (hashed only when the cache is filled
            // with such a route: `Fib::path` asks for the hash then).
            let hop = f.hop_mut(reply);
            // The route's end where the cached path takes the packet
            // (else the full way's is all route).
            let clock = &mut self.clock;
            let mut cached = false;
            let v = self.router.forward4_cached(
                pkt,
                in_port,
                hop,
                || crate::fib::tuple_hash(to.src, to.dst, to.proto, to.sport, to.dport),
                || {
                    clock.mark(Stage::Route);
                    cached = true;
                },
            );
            self.clock
                .mark(if cached { Stage::Rewrite } else { Stage::Route });
            return v;
        }
        self.clock.mark(Stage::Conntrack);
        self.miss4(pkt, in_port, lane, seg.as_ref())
    }

    /// A packet that no flow here accounts for: another worker's, or a
    /// new flow's. Out of line, with the lane and the TCP segment (parsed
    /// for the lookup, when windows are tracked) by reference: the
    /// established path it branches from is not made to keep anything
    /// for it.
    #[inline(never)]
    fn miss4<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        lane: &Lane,
        seg: Option<&Segment>,
    ) -> Verdict {
        if let Some(o) = self.owner(in_port, &lane.t) {
            return Verdict::Handoff(o);
        }
        self.new4(pkt, in_port, lane, seg)
    }

    /// A packet that no flow accounts for (or that its flow's state
    /// machine refused): the rules decide with state `invalid`; accepted,
    /// it is forwarded as it is and opens nothing.
    fn invalid<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        t: &Tuple,
        flags: u16,
        out: Option<u16>,
    ) -> Verdict {
        let k = Key {
            src: t.src,
            dst: t.dst,
            sport: t.sport,
            dport: t.dport,
            proto: t.proto,
            flags,
            meta: meta(in_port, out, state::INVALID),
        };
        match self.decide(&k) {
            Action::Accept => self.router.process(pkt, in_port),
            a => self.refuse(pkt, in_port, a, false),
        }
    }

    /// A packet whose tuple `t` (hashed `h`) conntrack has just looked up
    /// and not found: the rules decide whether it opens a flow (its
    /// windows starting from `seg`, its TCP segment when they are
    /// tracked).
    fn new4<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        lane: &Lane,
        seg: Option<&Segment>,
    ) -> Verdict {
        let (t, h, flags) = (lane.t, lane.h, lane.flags);
        let proto = t.proto;
        let tcp = proto == IpProto::TCP;
        if !opens_flow(proto, flags) {
            self.ct.count(conntrack::Event::Invalid);
            if self.router.is_local4(addr4(t.dst)) {
                return self.router.process(pkt, in_port);
            }
            return self.invalid(
                pkt,
                in_port,
                &t,
                flags,
                self.router.route4(addr4(t.dst), self.router.tuple_hash(&t)),
            );
        }
        // Destination NAT, the route, the reply tuple: planned ahead for
        // the burst's likely new flows (`Plan4`), else here.
        let here;
        let plan = match &lane.plan {
            Some(p) => p,
            None => {
                here = self.plan4::<P>(&t, in_port, 0);
                &here
            }
        };
        self.clock.mark(Stage::Route);
        let &Open4 {
            dst,
            dport,
            dnat,
            entry,
            nh,
            hop,
            multi,
            mut reply,
            pick,
            hash: mut first_hash,
        } = match plan {
            Plan4::Open(o) => o,
            // Local, or an ICMP unreachable.
            Plan4::Local | Plan4::NoRoute { dnat: false } => {
                return self.router.process(pkt, in_port);
            }
            Plan4::NoRoute { dnat: true } => return Verdict::Drop(DropReason::NoRoute),
        };
        let out = hop.port;
        // A translated source's port as it is to be tried now: the planned
        // one unless the flows opened since went past it (its bucket then
        // on its way only from here).
        if pick {
            let planned = reply.dport;
            self.next_port_of(&mut reply);
            if reply.dport != planned {
                first_hash = reply.hash();
                P::prefetch(self.ct.bucket_of(first_hash));
            }
        }
        self.clock.mark(Stage::Nat);
        // Firewall.
        let k = Key {
            src: t.src,
            dst: v4(dst),
            sport: t.sport,
            dport,
            proto,
            flags,
            meta: meta(in_port, Some(out), state::NEW)
                | meta_ct(if dnat { status::DNAT } else { 0 }, entry),
        };
        let action = self.decide(&k);
        self.clock.mark(Stage::Firewall);
        match action {
            Action::Accept => {}
            a => return self.refuse(pkt, in_port, a, tcp),
        }
        let hr = if pick {
            match self.pick_port(&mut reply, first_hash) {
                Some(h) => h,
                None => {
                    self.nat_events[nat::Event::Exhausted as usize] += 1;
                    return Verdict::Drop(DropReason::NatExhausted);
                }
            }
        } else {
            first_hash
        };
        self.clock.mark(Stage::Nat);
        // A picked port's reply tuple was just found untracked (and
        // `opens_flow` holds, checked above): not looked up again.
        let opened = if pick {
            self.ct.open_picked(t, h, reply, hr, flags, seg)
        } else {
            self.ct.open_missed(t, h, reply, hr, flags, seg)
        };
        self.clock.mark(Stage::Conntrack);
        match opened {
            Ok(i) => {
                let f = self.ct.flow(i);
                // The tuple as sent.
                let to = if f.nat() { f.translated(false) } else { t };
                if f.nat() {
                    self.nat_events[nat::Event::Mapped as usize] += 1;
                    let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ETH..]);
                    if !too_big4(
                        &self.router,
                        self.min_mtu,
                        ip.total_len(),
                        ip.flags_frag(),
                        &to,
                    ) {
                        nat::rewrite4_flow(&mut pkt.bytes_mut()[ETH..], &to, f.nat_deltas(false));
                    }
                    self.clock.mark(Stage::Nat);
                }
                // The header was validated on the way in (`ipv4`, or the
                // burst path's `plain_l4`) and the translation kept its
                // checksum right: the packet goes the established path's
                // way, through the flow's route cache, which it fills for
                // the packets after it (a destination that is the router's
                // own, or any other case the cache does not take, goes the
                // router's full way from there).
                let cache = self.ct.hop_mut(i, false);
                // A single-path route (the one the rules saw) fills the
                // cache as it is; a multipath route's path is the one the
                // flow's packets as sent hash to, picked by the fill below
                // (as every later fill picks it).
                if !multi {
                    self.router.fill4_route(cache, nh, hop, dst);
                }
                let clock = &mut self.clock;
                let mut cached = false;
                let v = self.router.forward4_cached(
                    pkt,
                    in_port,
                    cache,
                    || crate::fib::tuple_hash(to.src, to.dst, to.proto, to.sport, to.dport),
                    || {
                        clock.mark(Stage::Route);
                        cached = true;
                    },
                );
                self.clock
                    .mark(if cached { Stage::Rewrite } else { Stage::Route });
                v
            }
            Err(Refused::Full) => Verdict::Drop(DropReason::CtFull),
            Err(_) => Verdict::Drop(DropReason::CtClash),
        }
    }

    /// The plan ([`Plan4`]) of the flow that a packet of tuple `t` from
    /// `in_port` opens, if it opens one: destination NAT, the route, and
    /// the reply tuple (source NAT), a translated port being the one
    /// [`Gateway::pick_port`] tries `ahead` picks from now; the reply
    /// tuple's index bucket is prefetched. Inlined into both callers (the
    /// burst path's look-ahead, `new4`): 44 instructions a new flow fewer
    /// than as a call (counted). The burst path still copies the plan
    /// into the packet's lane (~45 instructions the compiler does not
    /// elide).
    #[inline(always)]
    fn plan4<P: Frame>(&self, t: &Tuple, in_port: u16, ahead: u32) -> Plan4 {
        let (src, proto) = (addr4(t.src), t.proto);
        let (mut dst, mut dport) = (addr4(t.dst), t.dport);
        let mut dnat = false;
        let mut entry = 0;
        if !self.nat.is_empty() {
            if let Some((e, a, p)) = self.nat.dnat_entry(in_port, proto, dst, dport) {
                (dst, dport, dnat) = (a, if has_ports(proto) { p } else { dport }, true);
                entry = e;
                if proto == IpProto::ICMP {
                    dport = t.dport; // the identifier stays
                }
            }
        }
        if !dnat && self.router.is_local4(dst) {
            return Plan4::Local;
        }
        let Some((nh, hop, multi)) = self.router.route4_path(dst, self.router.tuple_hash(t)) else {
            return Plan4::NoRoute { dnat };
        };
        let out = hop.port;
        // Source NAT: the reply tuple, worked out before the rules are
        // matched (it does not depend on their verdict).
        let mut reply = tuple4(dst, src, dport, t.sport, proto);
        let snat_addr = if dnat && out == in_port {
            self.router.source4(out).map(|(a, _)| u32::from(a))
        } else if let Some(o) = self.nat.static_out(src) {
            reply.dst = v4(o);
            None
        } else {
            match self.nat.snat(out, src) {
                Some(r) => match &r.to {
                    SnatTo::Masquerade => self.router.source4(out).map(|(a, _)| u32::from(a)),
                    SnatTo::Pool(p) if !p.is_empty() => {
                        let hsh = src.wrapping_mul(0x9e37_79b1) >> 16;
                        Some(p[hsh as usize % p.len()])
                    }
                    SnatTo::Pool(_) => None,
                },
                None => None,
            }
        };
        let pick = snat_addr.is_some() && has_ports(proto);
        if let Some(a) = snat_addr {
            reply.dst = v4(a);
        }
        if pick {
            self.port_ahead(&mut reply, ahead);
        }
        // Hashed once: the prefetch, the port's check or the reply's
        // lookup, and the insert use it.
        let hash = reply.hash();
        P::prefetch(self.ct.bucket_of(hash));
        Plan4::Open(Open4 {
            dst,
            dport,
            dnat,
            entry,
            nh,
            hop,
            multi,
            reply,
            pick,
            hash,
        })
    }

    /// The worker that owns the state a packet with no flow here belongs
    /// to, when that is another worker: replies to a source-NAT mapping
    /// (destination: a NAT address, destination port in another worker's
    /// slice of the port range) and the flows of destination and 1:1 NAT
    /// (new ones, and replies from the inside host), which worker 0 owns:
    /// their two directions have different tuples, so symmetric RSS cannot
    /// bring both to one core.
    #[inline(always)]
    fn owner(&self, in_port: u16, t: &Tuple) -> Option<u16> {
        if self.workers <= 1 || self.nat.is_empty() {
            return None;
        }
        self.owner_of(in_port, t)
    }

    /// [`Gateway::owner`] with more than one worker and NAT rules.
    #[inline(never)]
    fn owner_of(&self, in_port: u16, t: &Tuple) -> Option<u16> {
        let (src, dst) = (addr4(t.src), addr4(t.dst));
        let to_nat = self.router.is_local4(dst)
            || self.nat.snat.iter().any(|r| match &r.to {
                SnatTo::Pool(p) => p.contains(&dst),
                SnatTo::Masquerade => false,
            });
        let o = if self
            .nat
            .dnat
            .iter()
            .any(|d| d.to == src && d.to_port.is_none_or(|p| p == t.sport))
            || self.nat.dnat(in_port, t.proto, dst, t.dport).is_some()
            || self.nat.statics.iter().any(|s| s.inside == src)
        {
            Some(0)
        } else if to_nat && has_ports(t.proto) {
            self.nat.ports.owner(t.dport, self.workers)
        } else {
            None
        };
        o.filter(|&o| o != self.worker)
    }

    /// Chooses this worker's next free port for the reply tuple `r`
    /// (its destination port; for ICMP both ports), which
    /// [`Gateway::next_port_of`] gave the port tried first and which is
    /// hashed `h`: the hash of `r` with the port chosen, or `None` when
    /// [`NAT_PROBES`] tries found none.
    fn pick_port(&mut self, r: &mut Tuple, mut h: u64) -> Option<u64> {
        let n = self.ports?.len();
        for _ in 0..n.min(NAT_PROBES) {
            // Wraps at the range's end without a division (`next_port`
            // stays below `n`: it starts at 0 whenever the range is set).
            self.next_port = if self.next_port + 1 >= n {
                0
            } else {
                self.next_port + 1
            };
            if !self.ct.contains_hashed(r, h) {
                return Some(h);
            }
            self.next_port_of(r);
            h = r.hash();
        }
        None
    }

    /// Gives reply tuple `r` the port [`Gateway::pick_port`] tries next
    /// (its destination port; for ICMP both ports), if this worker has a
    /// range.
    #[inline]
    fn next_port_of(&self, r: &mut Tuple) {
        self.port_ahead(r, 0);
    }

    /// Gives reply tuple `r` the port [`Gateway::pick_port`] tries `ahead`
    /// tries from now ([`Gateway::next_port_of`] is `ahead` 0).
    #[inline]
    fn port_ahead(&self, r: &mut Tuple, ahead: u32) {
        if let Some(range) = self.ports {
            // `next_port` is below the range's length (see `pick_port`)
            // and `ahead` a chunk's packets at most: no division per new
            // flow, the remainder only past the range's end.
            let (k, len) = (self.next_port + ahead, range.len());
            let k = if k < len { k } else { k % len };
            let p = (u32::from(range.lo) + k) as u16;
            r.dport = p;
            if r.proto == IpProto::ICMP {
                r.sport = p;
            }
        }
    }

    /// An ICMPv4 error (IPv4 header of `h` bytes): related if its quote
    /// belongs to a tracked flow (translated back if the flow is).
    fn icmp_error4<P: Frame>(&mut self, pkt: &mut P, in_port: u16, h: usize) -> Verdict {
        let b = pkt.bytes();
        let l3 = &b[ETH..];
        let total = usize::from(u16::from_be_bytes([l3[2], l3[3]]));
        let outer_src = u32::from_be_bytes([l3[12], l3[13], l3[14], l3[15]]);
        let outer_dst = u32::from_be_bytes([l3[16], l3[17], l3[18], l3[19]]);
        // The error's ICMP type and code (what `icmp_type` rules match).
        let tc = u16::from_be_bytes([l3[h], l3[h + 1]]);
        let quote = &l3[h + 8..total];
        let q = Ipv4Packet::new_unchecked(quote);
        let ok = quote.len() >= 20 && q.version() == 4 && q.header_len() >= 20;
        let qh = if ok { q.header_len() } else { 0 };
        let inner = if ok && quote.len() >= qh + 8 {
            match ports(q.protocol(), &quote[qh..], false) {
                Ok(Some((sp, dp, _))) => Some(tuple4(
                    u32::from_be_bytes(q.src()),
                    u32::from_be_bytes(q.dst()),
                    sp,
                    dp,
                    q.protocol(),
                )),
                _ => None,
            }
        } else {
            None
        };
        let outer = tuple4(outer_src, outer_dst, 0, 0, IpProto::ICMP);
        let hit = inner.and_then(|t| self.ct.find(&t.reverse()));
        if hit.is_none() {
            if let Some(o) = inner.and_then(|t| self.owner(in_port, &t.reverse())) {
                return Verdict::Handoff(o);
            }
        }
        let Some((i, reply)) = hit else {
            if self.router.is_local4(outer_dst) {
                return self.router.process(pkt, in_port);
            }
            self.ct.count(conntrack::Event::Invalid);
            return self.invalid(
                pkt,
                in_port,
                &outer,
                tc,
                self.router
                    .route4(outer_dst, self.router.tuple_hash(&outer)),
            );
        };
        self.ct.count(conntrack::Event::Related);
        let f = *self.ct.flow(i);
        let to_inner = if reply { f.orig } else { f.reply };
        let new_dst = if f.nat() {
            addr4(to_inner.src)
        } else {
            outer_dst
        };
        let k = Key {
            meta: meta(
                in_port,
                self.router.route4(new_dst, self.router.tuple_hash(&outer)),
                state::RELATED,
            ) | self.ct_meta(&f),
            flags: tc,
            ..outer.key()
        };
        match self.decide(&k) {
            Action::Accept => {}
            a => return self.refuse(pkt, in_port, a, false),
        }
        if f.nat() {
            nat::rewrite_icmp_error4(&mut pkt.bytes_mut()[ETH..], &to_inner);
        }
        self.router.process(pkt, in_port)
    }

    fn ipv6<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        let b = pkt.bytes();
        let ip = match Ipv6Packet::new_checked(&b[ETH..]) {
            Ok(ip) => ip,
            Err(_) => return self.router.process(pkt, in_port),
        };
        let dst = u128::from_be_bytes(ip.dst());
        let (proto, off, frag) = match ip.headers() {
            Ok(x) => x,
            Err(_) => return self.router.process(pkt, in_port),
        };
        if ip.hop_limit() <= 1 || dst >> 120 == 0xff || self.router.is_local6(dst) {
            return self.router.process(pkt, in_port);
        }
        if proto == 44 || frag.is_some() {
            return self.fragment6(pkt, in_port, proto, off, frag);
        }
        self.l4_6(pkt, in_port, proto, off, true)
    }

    /// An IPv6 fragment not for the router, whose extension headers end
    /// with upper-layer protocol `proto` at `off` (a datagram's first,
    /// whose fragment header is at `frag`), or with the fragment header at
    /// `off` (`proto` 44: any other): as [`Gateway::fragment4`], without
    /// translation.
    #[cold]
    #[inline(never)]
    fn fragment6<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        proto: u8,
        off: usize,
        frag: Option<usize>,
    ) -> Verdict {
        let b = pkt.bytes();
        let ip = Ipv6Packet::new_unchecked(&b[ETH..]);
        let end = 40 + usize::from(ip.payload_len());
        let fh = frag.unwrap_or(off);
        // (A later fragment's header was found within the frame, not
        // checked against the payload length.)
        if fh + 8 > end {
            return Verdict::Drop(DropReason::Truncated);
        }
        let f = &b[ETH + fh..ETH + fh + 8];
        let fo = u16::from_be_bytes([f[2], f[3]]);
        let key = reass::Key {
            src: u128::from_be_bytes(ip.src()),
            dst: u128::from_be_bytes(ip.dst()),
            id: u32::from_be_bytes([f[4], f[5], f[6], f[7]]),
            proto: f[0],
            v6: true,
        };
        let (at, len, last) = (u32::from(fo >> 3) * 8, (end - fh - 8) as u32, fo & 1 == 0);
        if frag.is_some() {
            let t = match ports(proto, &b[ETH + off..ETH + end], true) {
                Ok(Some((sport, dport, _))) => Some(Tuple {
                    src: key.src,
                    dst: key.dst,
                    sport,
                    dport,
                    proto,
                    zone: 0,
                }),
                _ => None,
            };
            let v = self.l4_6(pkt, in_port, proto, off, false);
            if !last {
                let fate = self.fate(v, t, false);
                self.reass.first(&key, len, last, fate);
            }
            return v;
        }
        self.later(pkt, in_port, &key, (at, len, last), ETH + end)
    }

    /// The part of [`Gateway::ipv6`] from the L4 header on (protocol
    /// `proto` at `off`), for a packet the router does not take itself.
    fn l4_6<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        proto: u8,
        off: usize,
        whole: bool,
    ) -> Verdict {
        let b = pkt.bytes();
        let ip = Ipv6Packet::new_unchecked(&b[ETH..]);
        let dst = u128::from_be_bytes(ip.dst());
        let src = u128::from_be_bytes(ip.src());
        let end = ETH + 40 + usize::from(ip.payload_len());
        let l4 = &b[ETH + off..end];
        if proto == IpProto::ICMPV6 && l4.first().is_some_and(|t| (133..=137).contains(t)) {
            return self.router.process(pkt, in_port);
        }
        let out = self.router.route6(dst, self.router.packet_hash(&b[ETH..]));
        let (sport, dport, flags) = match ports(proto, l4, true) {
            Ok(Some(p)) => p,
            Ok(None) => {
                // ICMPv6 error: related if the quoted packet's flow is
                // tracked.
                let related = Ipv6Packet::new_unchecked(&l4[8.min(l4.len())..]);
                let q = &l4[8.min(l4.len())..];
                let inner = (q.len() >= 48 && related.version() == 6).then(|| {
                    let mut s = [0u8; 16];
                    let mut d = [0u8; 16];
                    s.copy_from_slice(&q[8..24]);
                    d.copy_from_slice(&q[24..40]);
                    let p = q[6];
                    let (sp, dp) = match ports(p, &q[40..], true) {
                        Ok(Some((a, b, _))) => (a, b),
                        _ => (0, 0),
                    };
                    Tuple {
                        src: u128::from_be_bytes(s),
                        dst: u128::from_be_bytes(d),
                        sport: sp,
                        dport: dp,
                        proto: p,
                        zone: 0,
                    }
                });
                let st = if inner.is_some_and(|t| self.ct.find(&t.reverse()).is_some()) {
                    self.ct.count(conntrack::Event::Related);
                    state::RELATED
                } else {
                    self.ct.count(conntrack::Event::Invalid);
                    state::INVALID
                };
                let k = Key {
                    src,
                    dst,
                    sport: 0,
                    dport: 0,
                    proto,
                    // The error's ICMPv6 type and code.
                    flags: u16::from_be_bytes([l4[0], l4[1]]),
                    meta: meta(in_port, out, st),
                };
                return match self.decide(&k) {
                    Action::Accept => self.router.process(pkt, in_port),
                    a => self.refuse(pkt, in_port, a, false),
                };
            }
            Err(r) => return Verdict::Drop(r),
        };
        let t = Tuple {
            src,
            dst,
            sport,
            dport,
            proto,
            zone: 0,
        };
        // The TCP segment for window tracking (not a fragment's: its
        // length is the datagram's).
        let seg = (proto == IpProto::TCP && whole && self.ct.tcp_window()).then(|| {
            let b = pkt.bytes();
            let end = ETH + 40 + usize::from(Ipv6Packet::new_unchecked(&b[ETH..]).payload_len());
            Segment::parse(&b[ETH + off..end])
        });
        if let Some((i, reply)) = self.ct.find(&t) {
            if self.ct.advance(i, reply, flags, seg.as_ref()) == crate::conntrack::Conn::Invalid {
                return self.invalid(pkt, in_port, &t, flags, out);
            }
            return self.router.process(pkt, in_port);
        }
        let tcp = proto == IpProto::TCP;
        if !opens_flow(proto, flags) {
            self.ct.count(conntrack::Event::Invalid);
            return self.invalid(pkt, in_port, &t, flags, out);
        }
        let Some(out) = out else {
            return self.router.process(pkt, in_port);
        };
        let k = Key {
            flags,
            meta: meta(in_port, Some(out), state::NEW),
            ..t.key()
        };
        match self.decide(&k) {
            Action::Accept => {}
            a => return self.refuse(pkt, in_port, a, tcp),
        }
        match self.ct.open(t, t.reverse(), flags, seg.as_ref()) {
            Ok(_) => self.router.process(pkt, in_port),
            Err(Refused::Full) => Verdict::Drop(DropReason::CtFull),
            Err(_) => Verdict::Drop(DropReason::CtClash),
        }
    }

    /// Turns a TCP segment into the RST that refuses it (RFC 793 "Reset
    /// Generation"), sent back out of `in_port`.
    fn tcp_reset<P: Frame>(&mut self, pkt: &mut P, in_port: u16, v6: bool) -> Verdict {
        let Some(mac) = self.router.iface(in_port).map(|i| i.mac) else {
            return Verdict::Drop(DropReason::Filtered);
        };
        let b = pkt.bytes();
        let (hl, total) = if v6 {
            let ip = Ipv6Packet::new_unchecked(&b[ETH..]);
            match ip.upper_layer() {
                Ok((IpProto::TCP, off)) => (off, 40 + usize::from(ip.payload_len())),
                _ => return Verdict::Drop(DropReason::Filtered),
            }
        } else {
            let ip = Ipv4Packet::new_unchecked(&b[ETH..]);
            (ip.header_len(), usize::from(ip.total_len()))
        };
        let tcp = &b[ETH + hl..ETH + total];
        let flags = u16::from(tcp[13]);
        if flags & RST != 0 || !self.router.take_token() {
            return Verdict::Drop(DropReason::Filtered);
        }
        let be32 = |i: usize| u32::from_be_bytes([tcp[i], tcp[i + 1], tcp[i + 2], tcp[i + 3]]);
        let (their_seq, their_ack) = (be32(4), be32(8));
        let seg = (total - hl).saturating_sub(usize::from(tcp[12] >> 4) * 4) as u32
            + u32::from(flags & SYN != 0)
            + u32::from(flags & FIN != 0);
        let (seq, ack, out_flags) = if flags & ACK != 0 {
            (their_ack, 0, RST as u8)
        } else {
            (0, their_seq.wrapping_add(seg), (RST | ACK) as u8)
        };
        let (sport, dport) = (
            u16::from_be_bytes([tcp[0], tcp[1]]),
            u16::from_be_bytes([tcp[2], tcp[3]]),
        );
        let mut peer = [0u8; 6];
        peer.copy_from_slice(&b[6..12]);
        let mut addrs = [0u8; 32];
        let al = if v6 { 16 } else { 4 };
        let (so, dof) = if v6 { (8, 24) } else { (12, 16) };
        addrs[..al].copy_from_slice(&b[ETH + so..ETH + so + al]);
        addrs[16..16 + al].copy_from_slice(&b[ETH + dof..ETH + dof + al]);
        let ihl = if v6 { 40 } else { 20 };
        if !pkt.set_len(ETH + ihl + 20) {
            return Verdict::Drop(DropReason::Filtered);
        }
        let b = pkt.bytes_mut();
        b[0..6].copy_from_slice(&peer);
        b[6..12].copy_from_slice(&mac.0);
        let (src, dst) = (&addrs[16..16 + al], &addrs[..al]); // swapped
        let pseudo = if v6 {
            b[12..14].copy_from_slice(&EtherType::IPV6.to_be_bytes());
            let mut ip = Ipv6Packet::new_unchecked(&mut b[ETH..ETH + 40]);
            ip.set_version();
            ip.set_payload_len(20);
            ip.set_next_header(IpProto::TCP);
            ip.set_hop_limit(64);
            let (mut s, mut d) = ([0u8; 16], [0u8; 16]);
            s.copy_from_slice(src);
            d.copy_from_slice(dst);
            ip.set_src(s);
            ip.set_dst(d);
            checksum::pseudo_v6(s, d, IpProto::TCP, 20)
        } else {
            b[12..14].copy_from_slice(&EtherType::IPV4.to_be_bytes());
            b[ETH + 1] = 0;
            let mut ip = Ipv4Packet::new_unchecked(&mut b[ETH..ETH + 20]);
            ip.set_version_ihl(20);
            ip.set_total_len(40);
            ip.set_ident(0);
            ip.set_flags_frag(0x4000);
            ip.set_ttl(64);
            ip.set_protocol(IpProto::TCP);
            let (mut s, mut d) = ([0u8; 4], [0u8; 4]);
            s.copy_from_slice(src);
            d.copy_from_slice(dst);
            ip.set_src(s);
            ip.set_dst(d);
            ip.fill_checksum();
            checksum::pseudo_v4(s, d, IpProto::TCP, 20)
        };
        let t = &mut b[ETH + ihl..ETH + ihl + 20];
        t[0..2].copy_from_slice(&dport.to_be_bytes());
        t[2..4].copy_from_slice(&sport.to_be_bytes());
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[8..12].copy_from_slice(&ack.to_be_bytes());
        t[12] = 5 << 4;
        t[13] = out_flags;
        t[14..20].copy_from_slice(&[0; 6]);
        let c = !checksum::fold(checksum::sum(t, pseudo));
        t[16..18].copy_from_slice(&c.to_be_bytes());
        Verdict::Forward(in_port)
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
            for (p, l) in pc.iter().zip(lanes.iter_mut()) {
                *l = plain_l4(p.bytes(), mac, p.ip4_csum()).map(|(t, flags)| {
                    let h = t.hash();
                    pf(self.ct.bucket_of(h));
                    Lane {
                        t,
                        flags,
                        h,
                        hint: None,
                        plan: None,
                    }
                });
            }
            self.clock.mark(Stage::Parse);
            let windows = self.ct.tcp_window();
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
                    pf(lpm.entry_of(addr4(l.t.dst)));
                    new |= u64::from(opens_flow(l.t.proto, l.flags)) << i;
                }
                if let Some(f) = l.hint.and_then(|v| self.ct.flow_at(v)) {
                    pf(f);
                    pf(f.wrapping_add(64));
                    if windows && l.t.proto == IpProto::TCP {
                        if let Some(w) = l.hint.and_then(|v| self.ct.window_at(v)) {
                            pf(w);
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
        ForwardMode::pending(&self.router) || self.reass.ready()
    }

    /// Held packets were translated and passed the rules before they were
    /// held: only routing is left. Fragments that waited for their
    /// datagram's first go first.
    fn emit(&mut self, send: &mut dyn FnMut(u16, &[u8]) -> bool) {
        if self.reass.ready() {
            self.release_fragments(send);
        }
        ForwardMode::emit(&mut self.router, send);
        self.refresh_events();
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
