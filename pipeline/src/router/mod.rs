//! The router stage (`l3fwd` mode): RFC 1812 IPv4 forwarding and IPv6
//! forwarding through the LPM tables, ARP, and the ICMP messages a router
//! owes its hosts.
//!
//! Per packet, IPv4: the frame must be addressed to the port's MAC; the
//! header is validated (version, IHL, total length against the frame,
//! header checksum); packets for the router's own addresses are answered
//! (ICMP echo) or consumed; a TTL of 1 or less turns the packet into an
//! ICMP Time Exceeded from the receiving interface's address, no route into
//! Destination Unreachable, a packet over the output MTU with DF set into
//! Fragmentation Needed (all rate-limited per core by a token bucket, and
//! never sent about ICMP errors, non-first fragments or martian sources),
//! one without DF into fragments (see `frag`);
//! otherwise the TTL is decremented with an RFC 1624 checksum update, the
//! MACs rewritten from the neighbour table and the packet sent. A neighbour
//! miss turns the packet into an ARP request for the next hop and keeps a
//! copy of it, sent when the neighbour answers (see `hold`). ARP requests for the router's addresses
//! are answered in place, and senders on connected subnets are learned.
//!
//! IPv6: validated, hop limit decremented, routed through the LPM6 table;
//! echo requests to the router are answered; hop-limit expiry, no route and
//! packets over the MTU get ICMPv6 Time Exceeded, Destination Unreachable
//! and Packet Too Big (RFC 4443, same rate limit); Neighbor Discovery
//! (RFC 4861) answers solicitations for the router's addresses, learns from
//! solicitations and advertisements, and a neighbour miss becomes a
//! Neighbor Solicitation to the solicited-node address.
//!
//! Every packet gets a [`Verdict`]; the slow-path work is counted in
//! [`Event`]s. Per-core state (neighbours learned, the ICMP token bucket)
//! lives in each worker's own `Router`; the route tables are the shared
//! [`Fib`], changed in place by its one writer while workers forward
//! (each worker reads it between [`ForwardMode::enter`] and
//! [`ForwardMode::leave`], one poll round). A multipath route's path is
//! picked per flow ([`flow_hash`]).

mod advert;
pub use advert::{link_local, AdvPrefix, Advert};
mod burst;
pub(crate) use burst::plain4;
mod emit;
mod frag;
mod hold;
mod icmp;
mod ipv4;
mod ipv6;
pub mod kernel_flows;
mod local;
mod neighbors;
mod options;
mod punt;
mod vlan;

pub use crate::fib::NextHop;
use crate::fib::{flow_hash, Fib};
use crate::fwd::{ForwardMode, Frame};
use crate::rcu::Reader;
use crate::verdict::{DropReason, Verdict};
use crate::wire::{EtherType, MacAddr, ETHERNET_HEADER_LEN};
use neighbors::{BROADCAST, STATIC};
pub use punt::{PuntPolicy, PuntRule};
use rustc_hash::FxHashMap as HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
pub use vlan::Vlan;

crate::counter_enum! {
    /// Slow-path work the router did, counted per core.
    pub enum Event {
        /// ICMP (v4 or v6) echo replies sent.
        EchoReply = "echo_reply",
        /// ICMP Time Exceeded sent.
        TimeExceeded = "icmp_time_exceeded",
        /// ICMP Destination Unreachable (no route) sent.
        Unreachable = "icmp_unreachable",
        /// ICMP Fragmentation Needed sent.
        FragNeeded = "icmp_frag_needed",
        /// ICMP Parameter Problem sent (malformed IPv4 options).
        ParamProblem = "icmp_param_problem",
        /// Forwarded IPv4 packets whose Record Route or Timestamp option
        /// was stamped.
        OptionsStamped = "ip_options_stamped",
        /// TCP resets sent for the router's own addresses: a closed port
        /// (no mirror) or an input rule's reject.
        TcpReset = "tcp_reset",
        /// ICMP errors not sent because of the rate limit.
        IcmpRateLimited = "icmp_rate_limited",
        /// ARP replies sent for the router's addresses.
        ArpReply = "arp_reply",
        /// ARP requests sent to resolve next hops.
        ArpRequest = "arp_request",
        /// Neighbours learned from ARP.
        ArpLearned = "arp_learned",
        /// Neighbor Advertisements sent for the router's IPv6 addresses.
        NdAdvert = "nd_advert",
        /// Neighbor Solicitations sent to resolve IPv6 next hops.
        NdSolicit = "nd_solicit",
        /// IPv6 neighbours learned from ND.
        NdLearned = "nd_learned",
        /// Packets kept (copied) while their next hop is resolved.
        Held = "neighbor_held",
        /// Held packets sent once their neighbour answered.
        HeldSent = "held_sent",
        /// Held packets dropped after waiting too long for an answer.
        HeldExpired = "held_expired",
        /// Packets not held or not sent: the store or the neighbour's
        /// queue full, a frame too large, no buffer to send it in.
        HeldDropped = "held_dropped",
        /// IPv4 packets over the output MTU, without DF, sent as
        /// fragments (see `frag`).
        FragPackets = "frag_packets",
        /// Fragments sent (the first of each packet included).
        FragSent = "frag_sent",
        /// Packets not fragmented (the store full) and fragments not sent
        /// (no route or buffer for them).
        FragDropped = "frag_dropped",
        /// Periodic Router Advertisements sent (see `advert`).
        RaSent = "ra_sent",
        /// Router Solicitations answered with an advertisement.
        RaSolicited = "ra_solicited",
        /// Router Solicitations from `::` not answered: an advertisement
        /// to all nodes went less than 3 s before (RFC 4861 6.2.6).
        RaLimited = "ra_limited",
    }
}

/// A router interface: one per port (index = port), then the VLAN
/// sub-interfaces.
#[derive(Clone, Debug, Default)]
pub struct Interface {
    /// The port's MAC.
    pub mac: MacAddr,
    /// IPv4 addresses with prefix lengths.
    pub ipv4: Vec<(Ipv4Addr, u8)>,
    /// IPv6 addresses with prefix lengths.
    pub ipv6: Vec<(Ipv6Addr, u8)>,
    /// Largest IP packet (bytes, without Ethernet header) it sends.
    pub mtu: u16,
    /// For a VLAN sub-interface: its port and tags (`None` for a port).
    pub vlan: Option<Vlan>,
    /// Down (its kernel mirror set down, or its link lost): what arrives
    /// on it or would leave by it is dropped as `link_down`.
    pub down: bool,
}

/// What the router is built from (control path).
#[derive(Clone, Debug)]
pub struct RouterConfig {
    /// Interfaces: index = port, then VLAN sub-interfaces (next hops
    /// and neighbours name interfaces).
    pub interfaces: Vec<Interface>,
    /// The route tables and next hops (changed in place by their
    /// writer).
    pub fib: Arc<Fib>,
    /// Static IPv4 neighbours: (port, address, MAC).
    pub neighbors4: Vec<(u16, Ipv4Addr, MacAddr)>,
    /// Static IPv6 neighbours: (port, address, MAC).
    pub neighbors6: Vec<(u16, Ipv6Addr, MacAddr)>,
    /// ICMP errors and ARP requests per second per core.
    pub icmp_rate: u32,
    /// Learned neighbours older than this (ns) are resolved again; static
    /// ones never age.
    pub neighbor_timeout_ns: u64,
    /// What goes to the kernel (the TAP mirrors): the interfaces that
    /// have one and the rules admitting traffic ([`PuntPolicy`]). What is
    /// for the router and not answered here (TCP, UDP and other traffic to
    /// its addresses, link-local multicast), and copies of ARP replies and
    /// Neighbor Advertisements (so that the kernel resolves its own
    /// neighbours). Without a mirror those are dropped as `to_router` /
    /// consumed.
    pub punt: PuntPolicy,
    /// Router Advertisements, by interface (index = port; none where
    /// missing): see [`Advert`].
    pub adverts: Vec<Option<Advert>>,
}

/// New routes, neighbours and interfaces for running routers (a hot
/// reload): learned neighbours are kept, static ones replaced, cached next
/// hops resolved again.
#[derive(Clone)]
pub struct RouterUpdate(pub Arc<RouterConfig>);

/// Neighbours from the kernel's table for running routers (the netlink
/// mirror): `(interface, address, Some(MAC))` added or changed,
/// `(…, None)` removed. See [`Router::mirror_neighbors`].
#[derive(Clone, Debug)]
pub struct NeighborUpdate(pub Arc<[(u16, std::net::IpAddr, Option<MacAddr>)]>);

/// Neighbours learned since the last [`ForwardMode::take_learned`] kept for
/// the other workers at most (more in one publishing period are learned
/// here only; the others resolve them themselves).
const LEARNED_MAX: usize = 256;

pub use crate::fwd::LearnedNeighbors;

/// The router stage; clone one per worker.
#[derive(Clone)]
pub struct Router {
    cfg: Arc<RouterConfig>,
    /// Neighbours: MAC and when learned (ns; `STATIC` for configured ones).
    neigh4: HashMap<(u16, u32), (MacAddr, u64)>,
    neigh6: HashMap<(u16, u128), (MacAddr, u64)>,
    now_ns: u64,
    tokens: f64,
    last_ns: u64,
    events: [u64; Event::COUNT],
    /// Changes when a neighbour is learned or changes, and every second
    /// (so that aged entries are looked up again): next hops cached
    /// elsewhere ([`RouteCache`]) are valid while it is unchanged.
    generation: u32,
    gen_at_ns: u64,
    /// Changes with every FIB change: with `generation`, what a flow's
    /// cached path ([`RouteCache`]) is valid for (its route may have
    /// moved). The burst path's per-slot cache follows next-hop slot
    /// changes only (`hops_version`): it looks every route up.
    route_gen: u32,
    /// The FIB's next-hop slot version last seen.
    hops_version: u64,
    /// Per next-hop slot: the generation its gateway's MAC was resolved
    /// in, the gateway and port it was resolved for (a slot can be reused
    /// for another next hop), and the MAC. Grows to the highest slot
    /// resolved (once per slot).
    hop_macs: Vec<HopMac>,
    /// Per next-hop slot: what the burst path rewrites with (see
    /// `burst::Adj`); grows like `hop_macs`.
    adj4: Vec<burst::Adj>,
    /// The same for IPv6 next hops (their slots are the FIB's too).
    adj6: Vec<burst::Adj>,
    /// The router's own IPv4 addresses (from the interfaces), flat.
    local4: Box<[u32]>,
    /// The router's own IPv6 addresses (from the interfaces), flat.
    local6: Box<[u128]>,
    /// Its interfaces' link-local addresses (see [`link_local`]).
    ll6: Box<[u128]>,
    /// A one-word Bloom filter of `local4` (see `local4_bit`): most
    /// destinations are told apart from the router's own with one test.
    local4_bloom: u64,
    /// This worker's hold on the FIB.
    reader: Reader,
    /// The FIB version last seen: when it changes, cached paths are
    /// resolved again.
    fib_version: u64,
    /// Packets waiting for ARP/ND.
    hold: hold::Hold,
    /// The largest frame an interface carries (with a VLAN tag).
    room: usize,
    /// Packets whose later fragments wait.
    frags: frag::Frags,
    /// The gateway checks and stamps the IPv4 options of the packet in
    /// hand itself (`ipv4::options4`): the router leaves them alone.
    pub(crate) options_outside: bool,
    /// Interfaces below this index are ports; the others are VLAN
    /// sub-interfaces, whose frames are tagged as they leave.
    pub(crate) ports: u16,
    /// The punt rules' token buckets (grown to the highest rule with a
    /// rate that was hit).
    punt_buckets: Vec<punt::Bucket>,
    /// Neighbours learned (or confirmed) from ARP/ND since the other
    /// workers were last told (at most `LEARNED_MAX`, one entry each).
    learned: Vec<(u16, std::net::IpAddr, MacAddr)>,
    /// The burst path's stage clock (`sluice ctl set runtime`).
    clock: burst::BurstClock,
    /// The ports whose periodic Router Advertisements this worker sends,
    /// when the next is due, and the intervals' random state.
    adverts: Vec<advert::AdvState>,
    adv_next_ns: u64,
    adv_seed: u64,
    /// By interface, when this worker last answered a solicitation with
    /// an advertisement to all nodes (ns; see `advert`).
    adv_multicast_ns: Vec<u64>,
}

/// `a`'s bit in the one-word Bloom filter of the router's addresses (a
/// multiplicative hash's top 6 bits).
#[inline(always)]
fn local4_bit(a: u32) -> u64 {
    1 << (a.wrapping_mul(0x9e37_79b1) >> 26)
}

/// The Bloom filter of `addrs` (see `local4_bit`).
fn bloom(addrs: &[u32]) -> u64 {
    addrs.iter().fold(0, |b, &a| b | local4_bit(a))
}

/// A next hop's resolved MAC, valid for its generation, gateway and port.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct HopMac {
    pub(super) generation: u32,
    pub(super) gw: u32,
    pub(super) port: u16,
    pub(super) mac: MacAddr,
}

impl Router {
    /// A router over `cfg` with its static neighbours.
    pub fn new(cfg: RouterConfig) -> Self {
        let mut neigh4 = HashMap::with_capacity_and_hasher(4096, Default::default());
        for &(p, a, m) in &cfg.neighbors4 {
            neigh4.insert((p, u32::from(a)), (m, STATIC));
        }
        let mut neigh6 = HashMap::with_capacity_and_hasher(1024, Default::default());
        for &(p, a, m) in &cfg.neighbors6 {
            neigh6.insert((p, u128::from(a)), (m, STATIC));
        }
        let tokens = Self::burst(cfg.icmp_rate);
        let ports = ports(&cfg.interfaces);
        // Held copies are frames of up to the largest MTU (and a VLAN tag).
        let room = cfg
            .interfaces
            .iter()
            .map(|i| usize::from(i.mtu))
            .max()
            .unwrap_or(1500)
            + ETHERNET_HEADER_LEN
            + 4;
        let local4: Box<[u32]> = cfg
            .interfaces
            .iter()
            .flat_map(|i| i.ipv4.iter().map(|(a, _)| u32::from(*a)))
            .collect();
        let hops_version = cfg.fib.hops_version();
        Router {
            local4_bloom: bloom(&local4),
            local4,
            local6: local6(&cfg.interfaces),
            ll6: ll6(&cfg.interfaces),
            reader: cfg.fib.reader(),
            fib_version: cfg.fib.version(),
            cfg: Arc::new(cfg),
            neigh4,
            neigh6,
            now_ns: 0,
            tokens,
            last_ns: 0,
            events: [0; Event::COUNT],
            generation: 1,
            gen_at_ns: 0,
            route_gen: 0,
            hops_version,
            hop_macs: Vec::new(),
            adj4: Vec::new(),
            adj6: Vec::new(),
            hold: hold::Hold::new(room),
            frags: frag::Frags::new(room),
            options_outside: false,
            room,
            ports,
            punt_buckets: Vec::new(),
            learned: Vec::new(),
            clock: burst::BurstClock::default(),
            adverts: Vec::new(),
            adv_next_ns: u64::MAX,
            adv_seed: 0x2545_f491_4f6c_dd1d,
            adv_multicast_ns: Vec::new(),
        }
    }

    pub(super) fn count(&mut self, e: Event) {
        self.events[e as usize] += 1;
    }

    /// The tables and settings it routes with.
    pub fn config(&self) -> &Arc<RouterConfig> {
        &self.cfg
    }

    /// Routes with `cfg` from the next packet on: static neighbours are
    /// replaced, learned ones kept (ageing as before), and every cached
    /// next hop (here and in conntrack's flows) is resolved again.
    pub fn reconfigure(&mut self, cfg: Arc<RouterConfig>) {
        self.neigh4.retain(|_, (_, at)| *at != STATIC);
        self.neigh6.retain(|_, (_, at)| *at != STATIC);
        for &(p, a, m) in &cfg.neighbors4 {
            self.neigh4.insert((p, u32::from(a)), (m, STATIC));
        }
        for &(p, a, m) in &cfg.neighbors6 {
            self.neigh6.insert((p, u128::from(a)), (m, STATIC));
        }
        self.local4 = cfg
            .interfaces
            .iter()
            .flat_map(|i| i.ipv4.iter().map(|(a, _)| u32::from(*a)))
            .collect();
        self.local4_bloom = bloom(&self.local4);
        self.local6 = local6(&cfg.interfaces);
        self.ll6 = ll6(&cfg.interfaces);
        self.ports = ports(&cfg.interfaces);
        self.punt_buckets.clear();
        self.reader.leave();
        if !Arc::ptr_eq(&self.cfg.fib, &cfg.fib) {
            self.reader = cfg.fib.reader();
        }
        self.fib_version = cfg.fib.version();
        self.hops_version = cfg.fib.hops_version();
        let old = std::mem::replace(&mut self.cfg, cfg);
        self.adverts_changed(&old);
        self.bump();
    }

    /// Whether any interface is a VLAN sub-interface (whose frames are
    /// tagged as they leave).
    #[inline]
    pub fn has_sub_interfaces(&self) -> bool {
        usize::from(self.ports) < self.cfg.interfaces.len()
    }

    /// IPv4 routes in the table.
    pub fn routes4(&self) -> usize {
        self.cfg.fib.routes4()
    }

    /// IPv6 routes in the table.
    pub fn routes6(&self) -> usize {
        self.cfg.fib.routes6()
    }

    /// Enters the FIB for a poll round; a changed FIB drops the paths
    /// flows cached from it (conntrack's), a next-hop slot given a new
    /// next hop what is cached per slot.
    #[inline]
    pub fn enter(&mut self) {
        self.reader.enter();
        let v = self.cfg.fib.version();
        if v != self.fib_version {
            self.fib_version = v;
            self.route_gen = self.route_gen.wrapping_add(1);
            let h = self.cfg.fib.hops_version();
            if h != self.hops_version {
                self.hops_version = h;
                self.bump();
            }
        }
    }

    /// What a flow's cached path is valid for: changes with the
    /// neighbours, the interfaces and every FIB change (never 0, the
    /// empty cache).
    #[inline]
    pub(super) fn flow_generation(&self) -> u32 {
        self.generation.wrapping_add(self.route_gen).max(1)
    }

    /// Leaves the FIB at the end of a poll round.
    #[inline]
    pub fn leave(&mut self) {
        self.reader.leave();
    }

    /// The flow hash multipath routes pick a path by, for an IP packet
    /// (`l3` from the IP header).
    #[inline]
    pub fn flow_hash(l3: &[u8]) -> u32 {
        flow_hash(l3)
    }

    /// [`Router::flow_hash`] of a packet, or 0 while no route has several
    /// paths.
    #[inline]
    pub fn packet_hash(&self, l3: &[u8]) -> u32 {
        if !self.cfg.fib.multipath() {
            return 0;
        }
        flow_hash(l3)
    }

    /// [`Router::flow_hash`] of a conntrack tuple, or 0 while no route has
    /// several paths (the hash is then never used).
    #[inline(always)]
    pub fn tuple_hash(&self, t: &crate::conntrack::Tuple) -> u32 {
        if !self.cfg.fib.multipath() {
            return 0;
        }
        crate::fib::tuple_hash(t.src, t.dst, t.proto, t.sport, t.dport)
    }

    /// The interface of `port`.
    pub fn iface(&self, port: u16) -> Option<&Interface> {
        self.cfg.interfaces.get(usize::from(port))
    }

    /// The address `port` sends from (its first IPv4 address) and its MAC.
    pub(crate) fn source4(&self, port: u16) -> Option<(Ipv4Addr, MacAddr)> {
        let i = self.iface(port)?;
        Some((i.ipv4.first()?.0, i.mac))
    }

    /// The address `port` sends from (its first IPv6 address) and its MAC.
    pub(crate) fn source6(&self, port: u16) -> Option<(Ipv6Addr, MacAddr)> {
        let i = self.iface(port)?;
        Some((i.ipv6.first()?.0, i.mac))
    }

    /// The largest frame an interface carries, with a VLAN tag (the size
    /// of the slots that keep copies of frames).
    pub fn frame_room(&self) -> usize {
        self.room
    }

    /// Whether `a` is one of the router's IPv4 addresses.
    #[inline]
    pub fn is_local4(&self, a: u32) -> bool {
        self.local4_bloom & local4_bit(a) != 0 && self.local4_has(a)
    }

    /// `is_local4` past the Bloom filter, out of line: the search's
    /// vector loop would otherwise hold registers in every loop that
    /// inlines the test (the burst path's header loop spilled for it).
    #[cold]
    #[inline(never)]
    fn local4_has(&self, a: u32) -> bool {
        self.local4.contains(&a)
    }

    /// Whether `a` is one of the router's IPv6 addresses (its link-local
    /// ones included).
    #[inline]
    pub fn is_local6(&self, a: u128) -> bool {
        self.local6.contains(&a) || (is_link_local(a) && self.ll6.contains(&a))
    }

    /// [`Router::is_local6`] for an address that is not link-local (the
    /// burst paths', which leave link-scoped packets to the full way).
    #[inline(always)]
    pub(crate) fn is_local6_global(&self, a: u128) -> bool {
        self.local6.contains(&a)
    }

    /// The paths of the longest prefix covering `dst` (control path:
    /// `sluice ctl show routes ADDR`; takes a reader slot of its own).
    pub fn lookup(&self, dst: std::net::IpAddr) -> Vec<NextHop> {
        let mut r = self.cfg.fib.reader();
        r.enter();
        let nh = match dst {
            std::net::IpAddr::V4(a) => self.cfg.fib.lpm4().lookup(u32::from(a)),
            std::net::IpAddr::V6(a) => self.cfg.fib.lpm6().lookup(u128::from(a)),
        };
        let paths = nh.map(|nh| self.cfg.fib.paths(nh)).unwrap_or_default();
        r.leave();
        paths
    }

    /// The output port of the IPv4 route to `dst` for a flow of hash
    /// `hash` ([`Router::flow_hash`]; used by multipath routes only).
    #[inline]
    pub fn route4(&self, dst: u32, hash: u32) -> Option<u16> {
        self.route4_path(dst, hash).map(|(_, h, _)| h.port)
    }

    /// The IPv4 routes' table (to prefetch a lookup's first read,
    /// [`crate::lpm::Lpm4::entry_of`]).
    #[inline(always)]
    pub(crate) fn lpm4(&self) -> &crate::lpm::Lpm4 {
        self.cfg.fib.lpm4()
    }

    /// The IPv6 route table (for a stage that prefetches its lookups).
    #[inline(always)]
    pub(crate) fn lpm6(&self) -> &crate::lpm::Lpm6 {
        self.cfg.fib.lpm6()
    }

    /// [`Router::route4`]'s route itself: the next-hop slot and the path
    /// (for a flow of hash `hash`), and whether the route has several
    /// paths (one was picked by the hash).
    #[inline]
    pub(crate) fn route4_path(&self, dst: u32, hash: u32) -> Option<(u32, NextHop, bool)> {
        self.path_of(self.cfg.fib.lpm4().lookup(dst)?, hash)
    }

    /// The path of next-hop slot `nh` for a flow of hash `hash`, and
    /// whether the route has several (one was picked by the hash).
    #[inline]
    fn path_of(&self, nh: u32, hash: u32) -> Option<(u32, NextHop, bool)> {
        let mut multi = false;
        let (nh, hop) = self.cfg.fib.path(nh, || {
            multi = true;
            hash
        })?;
        Some((nh, hop, multi))
    }

    /// The output port of the IPv6 route to `dst` for a flow of hash
    /// `hash`.
    #[inline]
    pub fn route6(&self, dst: u128, hash: u32) -> Option<u16> {
        self.route6_path(dst, hash).map(|(_, h, _)| h.port)
    }

    /// [`Router::route6`]'s route itself, as [`Router::route4_path`]
    /// gives IPv4's.
    #[inline]
    pub(crate) fn route6_path(&self, dst: u128, hash: u32) -> Option<(u32, NextHop, bool)> {
        self.path_of(self.cfg.fib.lpm6().lookup(dst)?, hash)
    }
}

impl Router {
    /// [`ForwardMode::process`] up to the verdict, which names an
    /// interface (a sub-interface's frame is tagged after).
    #[inline]
    fn process_iface<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        let b = pkt.bytes();
        if b.len() < ETHERNET_HEADER_LEN {
            return Verdict::Drop(DropReason::Truncated);
        }
        let mut ethertype = u16::from_be_bytes([b[12], b[13]]);
        let mut in_port = in_port;
        if matches!(ethertype, EtherType::VLAN | EtherType::QINQ) {
            in_port = match self.untag(pkt, in_port) {
                Ok(i) => i,
                Err(v) => return v,
            };
            let b = pkt.bytes();
            ethertype = u16::from_be_bytes([b[12], b[13]]);
            if matches!(ethertype, EtherType::VLAN | EtherType::QINQ) {
                // More tags than a sub-interface has.
                return Verdict::Drop(DropReason::UnknownVlan);
            }
        }
        let b = pkt.bytes();
        let dst = MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]]);
        let Some(iface) = self.iface(in_port) else {
            return Verdict::Drop(DropReason::NotForUs);
        };
        if iface.down {
            return Verdict::Drop(DropReason::LinkDown);
        }
        let for_us = dst == iface.mac;
        match ethertype {
            EtherType::IPV4 if for_us => self.ipv4(pkt, in_port),
            EtherType::IPV4 if dst.0[0] & 1 == 1 && self.cfg.punt.mirrored(in_port) => {
                self.ipv4_link_local(pkt, in_port)
            }
            EtherType::IPV6 if for_us || dst.0[0] & 1 == 1 => self.ipv6(pkt, in_port),
            EtherType::ARP if for_us || dst == BROADCAST => self.arp(pkt, in_port),
            EtherType::IPV4 | EtherType::IPV6 | EtherType::ARP => {
                Verdict::Drop(DropReason::NotForUs)
            }
            _ => Verdict::Drop(DropReason::NotIp),
        }
    }
}

/// The IPv6 addresses of `ifaces`, flat.
fn local6(ifaces: &[Interface]) -> Box<[u128]> {
    ifaces
        .iter()
        .flat_map(|i| i.ipv6.iter().map(|(a, _)| u128::from(*a)))
        .collect()
}

/// The link-local address of each of `ifaces` with IPv6 addresses (see
/// [`link_local`]; a VLAN sub-interface's is its port's), once each.
fn ll6(ifaces: &[Interface]) -> Box<[u128]> {
    let mut all: Vec<u128> = Vec::new();
    for i in ifaces.iter().filter(|i| !i.ipv6.is_empty()) {
        let ll = u128::from(link_local(i.mac));
        if !all.contains(&ll) {
            all.push(ll);
        }
    }
    all.into()
}

/// Whether `a` is a link-local unicast address (fe80::/10).
#[inline(always)]
pub(crate) fn is_link_local(a: u128) -> bool {
    a >> 118 == 0x3fa
}

/// Whether an IPv6 packet from `src` to `dst` is confined to its link
/// (either address link-local): never forwarded (RFC 4291 2.5.6).
#[inline(always)]
pub(crate) fn link_scoped(src: u128, dst: u128) -> bool {
    is_link_local(src) || is_link_local(dst)
}

/// How many of the interfaces are ports (they come first).
fn ports(ifaces: &[Interface]) -> u16 {
    ifaces.iter().take_while(|i| i.vlan.is_none()).count() as u16
}

impl ForwardMode for Router {
    const NAME: &'static str = "l3fwd";

    /// The whole burst's headers on their way before the burst path's
    /// header loop reads them ([`crate::fwd::prefetch_heads`]).
    #[inline]
    fn prefetch<P: Frame>(&mut self, pkts: &[P], pf: fn(*const u8)) {
        crate::fwd::prefetch_heads(pkts, pf);
    }

    /// Routes the burst in stages (header checks, then route lookups,
    /// then rewrites over a chunk), as DPDK's l3fwd does.
    #[inline]
    fn process_burst<P: Frame>(
        &mut self,
        pkts: &mut [P],
        in_port: u16,
        verdicts: &mut [Verdict],
    ) -> Option<Verdict> {
        if self.clock.on() {
            self.route_burst::<P, true>(pkts, in_port, verdicts)
        } else {
            self.route_burst::<P, false>(pkts, in_port, verdicts)
        }
    }

    #[inline]
    fn process<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        match self.process_iface(pkt, in_port) {
            Verdict::Forward(o) if o >= self.ports => self.tag(pkt, o),
            v => v,
        }
    }

    #[inline]
    fn enter(&mut self) {
        Router::enter(self);
    }

    #[inline]
    fn leave(&mut self) {
        Router::leave(self);
    }

    fn stopping(&mut self) {
        self.retire_adverts();
    }

    fn tick(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
        self.expire_held();
        if now_ns.saturating_sub(self.gen_at_ns) >= 1_000_000_000 {
            self.gen_at_ns = now_ns;
            self.bump();
        }
        if self.last_ns != 0 {
            let dt = now_ns.saturating_sub(self.last_ns) as f64 / 1e9;
            let rate = f64::from(self.cfg.icmp_rate);
            self.tokens = (self.tokens + dt * rate).min(Self::burst(self.cfg.icmp_rate));
        }
        self.last_ns = now_ns;
        self.clock.refresh();
    }

    #[inline]
    fn pending(&self) -> bool {
        self.hold.ready() || self.frags.ready() || self.adverts_due()
    }

    fn emit(&mut self, send: &mut dyn FnMut(u16, &[u8]) -> bool) {
        self.release(send);
        self.send_fragments(send);
        self.send_adverts(send);
    }

    const EVENTS: &'static [&'static str] = Event::NAMES;

    fn events(&self) -> &[u64] {
        &self.events
    }

    const STAGES: &'static [&'static str] = &burst::STAGES;

    fn stage_clock(&self) -> Option<(bool, u64, &[u64])> {
        Some(self.clock.totals())
    }

    fn reconfigure(&mut self, update: &dyn std::any::Any) -> bool {
        if let Some(&crate::fwd::Profile(now)) = update.downcast_ref::<crate::fwd::Profile>() {
            self.clock.switch(now);
            true
        } else if let Some(u) = update.downcast_ref::<RouterUpdate>() {
            Router::reconfigure(self, u.0.clone());
            true
        } else if let Some(u) = update.downcast_ref::<NeighborUpdate>() {
            self.mirror_neighbors(&u.0);
            true
        } else if let Some(u) = update.downcast_ref::<LearnedNeighbors>() {
            self.learn_shared(&u.0);
            true
        } else {
            false
        }
    }

    fn take_learned(&mut self) -> Option<LearnedNeighbors> {
        if self.learned.is_empty() {
            return None;
        }
        Some(LearnedNeighbors(std::mem::take(&mut self.learned).into()))
    }
}

#[cfg(test)]
mod tests;
