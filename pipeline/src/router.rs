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
//! never sent about ICMP errors, non-first fragments or martian sources);
//! otherwise the TTL is decremented with an RFC 1624 checksum update, the
//! MACs rewritten from the neighbour table and the packet sent. A neighbour
//! miss turns the packet into an ARP request for the next hop (the packet
//! itself is dropped and counted). ARP requests for the router's addresses
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
//! lives in each worker's own `Router`; the route tables are shared
//! read-only (`Arc`).

use crate::checksum;
use crate::fwd::{ForwardMode, Frame};
use crate::lpm::{Lpm4, Lpm6};
use crate::verdict::{DropReason, Verdict};
use crate::wire::{
    ArpPacket, EtherType, IcmpPacket, IpProto, Ipv4Packet, Ipv6Packet, MacAddr, ARP_REPLY,
    ARP_REQUEST, ETHERNET_HEADER_LEN,
};
use rustc_hash::FxHashMap as HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// Slow-path work the router (and the gateway's firewall, conntrack and
/// NAT) did, counted per core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Event {
    /// ICMP (v4 or v6) echo replies sent.
    EchoReply = 0,
    /// ICMP Time Exceeded sent.
    TimeExceeded = 1,
    /// ICMP Destination Unreachable (no route) sent.
    Unreachable = 2,
    /// ICMP Fragmentation Needed sent.
    FragNeeded = 3,
    /// ICMP errors not sent because of the rate limit.
    IcmpRateLimited = 4,
    /// ARP replies sent for the router's addresses.
    ArpReply = 5,
    /// ARP requests sent to resolve next hops.
    ArpRequest = 6,
    /// Neighbours learned from ARP.
    ArpLearned = 7,
    /// Neighbor Advertisements sent for the router's IPv6 addresses.
    NdAdvert = 8,
    /// Neighbor Solicitations sent to resolve IPv6 next hops.
    NdSolicit = 9,
    /// IPv6 neighbours learned from ND.
    NdLearned = 10,
    /// Firewall rejects answered (TCP RST or ICMP).
    FwReject = 11,
    /// Flows opened by conntrack (gateway).
    CtCreated = 12,
    /// Flows timed out.
    CtExpired = 13,
    /// Unreplied flows evicted from a full table.
    CtEvicted = 14,
    /// New flows refused by a full table.
    CtTableFull = 15,
    /// Packets conntrack found invalid.
    CtInvalid = 16,
    /// NAT mappings created.
    NatMapped = 17,
    /// New flows refused because the NAT port range was exhausted.
    NatExhausted = 18,
    /// ICMP errors matched to a tracked flow (`related`).
    CtRelated = 19,
}

impl Event {
    /// Number of events.
    pub const COUNT: usize = 20;
    /// All events, in counter order.
    pub const ALL: [Event; Event::COUNT] = [
        Event::EchoReply,
        Event::TimeExceeded,
        Event::Unreachable,
        Event::FragNeeded,
        Event::IcmpRateLimited,
        Event::ArpReply,
        Event::ArpRequest,
        Event::ArpLearned,
        Event::NdAdvert,
        Event::NdSolicit,
        Event::NdLearned,
        Event::FwReject,
        Event::CtCreated,
        Event::CtExpired,
        Event::CtEvicted,
        Event::CtTableFull,
        Event::CtInvalid,
        Event::NatMapped,
        Event::NatExhausted,
        Event::CtRelated,
    ];

    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Event::EchoReply => "echo_reply",
            Event::TimeExceeded => "icmp_time_exceeded",
            Event::Unreachable => "icmp_unreachable",
            Event::FragNeeded => "icmp_frag_needed",
            Event::IcmpRateLimited => "icmp_rate_limited",
            Event::ArpReply => "arp_reply",
            Event::ArpRequest => "arp_request",
            Event::ArpLearned => "arp_learned",
            Event::NdAdvert => "nd_advert",
            Event::NdSolicit => "nd_solicit",
            Event::NdLearned => "nd_learned",
            Event::FwReject => "fw_reject",
            Event::CtCreated => "ct_created",
            Event::CtExpired => "ct_expired",
            Event::CtEvicted => "ct_evicted",
            Event::CtTableFull => "ct_table_full",
            Event::CtInvalid => "ct_invalid",
            Event::NatMapped => "nat_mapped",
            Event::NatExhausted => "nat_exhausted",
            Event::CtRelated => "ct_related",
        }
    }
}

/// A router interface (one per port).
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
}

/// Where a route leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NextHop {
    /// Output port.
    pub port: u16,
    /// Gateway; `None` for a connected route (the destination is the
    /// neighbour).
    pub via: Option<std::net::IpAddr>,
}

/// What the router is built from (control path).
#[derive(Clone, Debug)]
pub struct RouterConfig {
    /// Interfaces, index = port.
    pub interfaces: Vec<Interface>,
    /// Next hops, index = the LPM tables' next-hop values.
    pub next_hops: Vec<NextHop>,
    /// IPv4 routes.
    pub lpm4: Arc<Lpm4>,
    /// IPv6 routes.
    pub lpm6: Arc<Lpm6>,
    /// Static IPv4 neighbours: (port, address, MAC).
    pub neighbors4: Vec<(u16, Ipv4Addr, MacAddr)>,
    /// Static IPv6 neighbours: (port, address, MAC).
    pub neighbors6: Vec<(u16, Ipv6Addr, MacAddr)>,
    /// ICMP errors and ARP requests per second per core.
    pub icmp_rate: u32,
    /// Learned neighbours older than this (ns) are resolved again; static
    /// ones never age.
    pub neighbor_timeout_ns: u64,
}

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
    /// Per next hop (index as in the LPM tables): the gateway's MAC and the
    /// generation it was resolved in.
    hop_macs: Vec<(u32, MacAddr)>,
    /// The router's own IPv4 addresses (from the interfaces), flat.
    local4: Box<[u32]>,
}

/// A next hop resolved for a flow: valid while the router's generation is
/// the one recorded (0 = empty).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct RouteCache {
    generation: u32,
    port: u16,
    mac: [u8; 6],
}

const BROADCAST: MacAddr = MacAddr([0xff; 6]);
const STATIC: u64 = u64::MAX;
/// Longest IPv4 header plus 8 bytes: what an ICMP error quotes.
const QUOTE_MAX: usize = 60 + 8;

impl Router {
    /// A router over `cfg` with its static neighbours.
    pub fn new(cfg: RouterConfig) -> Self {
        let hops = cfg.next_hops.len();
        let mut neigh4 = HashMap::with_capacity_and_hasher(4096, Default::default());
        for &(p, a, m) in &cfg.neighbors4 {
            neigh4.insert((p, u32::from(a)), (m, STATIC));
        }
        let mut neigh6 = HashMap::with_capacity_and_hasher(1024, Default::default());
        for &(p, a, m) in &cfg.neighbors6 {
            neigh6.insert((p, u128::from(a)), (m, STATIC));
        }
        let tokens = Self::burst(cfg.icmp_rate);
        let local4 = cfg
            .interfaces
            .iter()
            .flat_map(|i| i.ipv4.iter().map(|(a, _)| u32::from(*a)))
            .collect();
        Router {
            local4,
            cfg: Arc::new(cfg),
            neigh4,
            neigh6,
            now_ns: 0,
            tokens,
            last_ns: 0,
            events: [0; Event::COUNT],
            generation: 1,
            gen_at_ns: 0,
            hop_macs: vec![(0, MacAddr::default()); hops],
        }
    }

    fn burst(rate: u32) -> f64 {
        f64::from(rate / 10).max(1.0)
    }

    /// The neighbour MAC for `addr` on `port`, if known and fresh.
    pub fn neighbor4(&self, port: u16, addr: Ipv4Addr) -> Option<MacAddr> {
        self.fresh(self.neigh4.get(&(port, u32::from(addr))))
    }

    #[inline]
    fn fresh(&self, e: Option<&(MacAddr, u64)>) -> Option<MacAddr> {
        let &(m, at) = e?;
        (at == STATIC || self.now_ns.saturating_sub(at) <= self.cfg.neighbor_timeout_ns)
            .then_some(m)
    }

    fn learn4(&mut self, port: u16, a: u32, m: MacAddr) -> bool {
        let changed = learn(&mut self.neigh4, self.now_ns, (port, a), m);
        if changed {
            self.bump();
        }
        changed
    }

    fn learn6(&mut self, port: u16, a: u128, m: MacAddr) -> bool {
        let changed = learn(&mut self.neigh6, self.now_ns, (port, a), m);
        if changed {
            self.bump();
        }
        changed
    }

    fn bump(&mut self) {
        self.generation = self.generation.wrapping_add(1).max(1);
    }

    /// Forwards an IPv4 packet whose header the caller validated (TTL > 1,
    /// not for the router) through `cache`, filling it on a miss: TTL
    /// decrement with its checksum update and MAC rewrite, without the
    /// route and neighbour lookups while the cache holds. Anything else
    /// (no route, no neighbour, over the MTU) goes the full way
    /// ([`Router::ipv4_valid`]).
    #[inline]
    pub(crate) fn forward4_cached(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        cache: &mut RouteCache,
    ) -> Verdict {
        let b = pkt.bytes_mut();
        let l3 = &b[ETHERNET_HEADER_LEN..];
        let total = u16::from_be_bytes([l3[2], l3[3]]);
        if cache.generation != self.generation {
            let dst = u32::from_be_bytes([l3[16], l3[17], l3[18], l3[19]]);
            let Some((port, mac)) = self.resolve4(dst) else {
                return self.ipv4_valid(pkt, in_port);
            };
            *cache = RouteCache {
                generation: self.generation,
                port,
                mac: mac.0,
            };
        }
        let Some(oif) = self.cfg.interfaces.get(usize::from(cache.port)) else {
            return self.ipv4_valid(pkt, in_port);
        };
        if total > oif.mtu || martian(u32::from_be_bytes([l3[16], l3[17], l3[18], l3[19]])) {
            return self.ipv4_valid(pkt, in_port);
        }
        forward4_rewrite(b, cache.mac, oif.mac.0);
        Verdict::Forward(cache.port)
    }

    /// The output port and next hop's MAC for `dst`, if routed and the
    /// neighbour is known and fresh (no side effects).
    fn resolve4(&mut self, dst: u32) -> Option<(u16, MacAddr)> {
        if self.is_local4(dst) {
            return None;
        }
        let nh = self.cfg.lpm4.lookup(dst)?;
        let hop = *self.cfg.next_hops.get(nh as usize)?;
        let mac = self.hop_mac4(nh, hop, dst).ok()?;
        Some((hop.port, mac))
    }

    /// The MAC of IPv4 next hop `nh` (`hop`) for `dst`, or the address to
    /// resolve when it is not known and fresh. A gateway's MAC is cached
    /// per next hop while the neighbour generation holds (no hash lookup
    /// per packet); connected destinations are looked up.
    #[inline]
    fn hop_mac4(&mut self, nh: u32, hop: NextHop, dst: u32) -> Result<MacAddr, u32> {
        if hop.via.is_some() {
            if let Some(&(g, m)) = self.hop_macs.get(nh as usize) {
                if g == self.generation {
                    return Ok(m);
                }
            }
        }
        let gw = match hop.via {
            Some(std::net::IpAddr::V4(g)) => u32::from(g),
            _ => dst,
        };
        let mac = self.fresh(self.neigh4.get(&(hop.port, gw))).ok_or(gw)?;
        if hop.via.is_some() {
            if let Some(e) = self.hop_macs.get_mut(nh as usize) {
                *e = (self.generation, mac);
            }
        }
        Ok(mac)
    }

    fn count(&mut self, e: Event) {
        self.events[e as usize] += 1;
    }

    pub(crate) fn take_token(&mut self) -> bool {
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            self.count(Event::IcmpRateLimited);
            false
        }
    }

    /// IPv4 routes in the table (as built, duplicates included).
    pub fn routes4(&self) -> usize {
        self.cfg.lpm4.routes()
    }

    /// IPv6 routes in the table.
    pub fn routes6(&self) -> usize {
        self.cfg.lpm6.routes()
    }

    /// The interface of `port`.
    pub fn iface(&self, port: u16) -> Option<&Interface> {
        self.cfg.interfaces.get(usize::from(port))
    }

    /// Whether `a` is one of the router's IPv4 addresses.
    #[inline]
    pub fn is_local4(&self, a: u32) -> bool {
        self.local4.contains(&a)
    }

    /// Whether `a` is one of the router's IPv6 addresses.
    pub fn is_local6(&self, a: u128) -> bool {
        self.cfg
            .interfaces
            .iter()
            .any(|i| i.ipv6.iter().any(|(x, _)| u128::from(*x) == a))
    }

    /// The output port of the IPv4 route to `dst`.
    #[inline]
    pub fn route4(&self, dst: u32) -> Option<u16> {
        let nh = self.cfg.lpm4.lookup(dst)?;
        self.cfg.next_hops.get(nh as usize).map(|h| h.port)
    }

    /// The output port of the IPv6 route to `dst`.
    #[inline]
    pub fn route6(&self, dst: u128) -> Option<u16> {
        let nh = self.cfg.lpm6.lookup(dst)?;
        self.cfg.next_hops.get(nh as usize).map(|h| h.port)
    }

    /// Counts a slow-path event.
    pub(crate) fn count_event(&mut self, e: Event) {
        self.count(e);
    }

    fn ipv4(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        let b = pkt.bytes_mut();
        let ip = match Ipv4Packet::new_checked(&b[ETHERNET_HEADER_LEN..]) {
            Ok(ip) => ip,
            Err(e) => return Verdict::Drop(e.into()),
        };
        if !ip.verify_checksum() {
            return Verdict::Drop(DropReason::BadChecksum);
        }
        self.ipv4_valid(pkt, in_port)
    }

    /// Routes an IPv4 packet addressed to `in_port`'s MAC whose header the
    /// caller has validated (version, lengths, checksum): the gateway's
    /// entry, which checks the header before conntrack.
    #[inline]
    pub(crate) fn ipv4_valid(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ETHERNET_HEADER_LEN..]);
        let dst = u32::from_be_bytes(ip.dst());
        let (ttl, total) = (ip.ttl(), ip.total_len());
        let df = ip.flags_frag() & 0x4000 != 0;
        if martian(dst) {
            return Verdict::Drop(DropReason::NotRoutable);
        }
        if self.is_local4(dst) {
            return self.local4(pkt, in_port);
        }
        if ttl <= 1 {
            return self.icmp4_error(pkt, in_port, 11, 0, 0, DropReason::TtlExceeded);
        }
        let Some(nh) = self.cfg.lpm4.lookup(dst) else {
            return self.icmp4_error(pkt, in_port, 3, 0, 0, DropReason::NoRoute);
        };
        let Some(&hop) = self.cfg.next_hops.get(nh as usize) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        let out = hop.port;
        let Some(oif) = self.iface(out) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        let (out_mac, mtu) = (oif.mac, oif.mtu);
        if total > mtu {
            if df {
                return self.icmp4_error(
                    pkt,
                    in_port,
                    3,
                    4,
                    u32::from(mtu),
                    DropReason::MtuExceeded,
                );
            }
            return Verdict::Drop(DropReason::MtuExceeded);
        }
        let mac = match self.hop_mac4(nh, hop, dst) {
            Ok(m) => m,
            Err(gw) => return self.arp_request(pkt, out, gw),
        };
        forward4_rewrite(pkt.bytes_mut(), mac.0, out_mac.0);
        Verdict::Forward(out)
    }

    /// The per-packet loop, out of line (a port without an interface).
    #[cold]
    #[inline(never)]
    fn process_each_cold<P: Frame>(
        &mut self,
        pkts: &mut [P],
        in_port: u16,
        verdicts: &mut [Verdict],
    ) -> Option<Verdict> {
        crate::fwd::process_each(self, pkts, in_port, verdicts)
    }

    /// The last stage of the burst path for a packet `fast4` accepted,
    /// addressed to `dst`, whose route is next hop `nh`: forwards it (TTL
    /// and checksum update, MACs) and returns the verdict, or `None` when
    /// it needs the full path (next hop unknown or unresolved, over the
    /// MTU), which then decides with nothing changed.
    #[inline(always)]
    fn forward_fast(&mut self, pkt: &mut impl Frame, dst: u32, nh: u32) -> Option<Verdict> {
        let hop = *self.cfg.next_hops.get(nh as usize)?;
        let oif = self.iface(hop.port)?;
        let (out_mac, mtu) = (oif.mac, oif.mtu);
        let b = pkt.bytes_mut();
        if u16::from_be_bytes([b[16], b[17]]) > mtu {
            return None;
        }
        let mac = self.hop_mac4(nh, hop, dst).ok()?;
        forward4_rewrite(pkt.bytes_mut(), mac.0, out_mac.0);
        Some(Verdict::Forward(hop.port))
    }

    /// Packets for the router itself: answer echo requests, consume the rest.
    fn local4(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        let Some(mac) = self.iface(in_port).map(|i| i.mac) else {
            return Verdict::Drop(DropReason::ToRouter);
        };
        let b = pkt.bytes_mut();
        let mut ip = Ipv4Packet::new_unchecked(&mut b[ETHERNET_HEADER_LEN..]);
        let h = ip.header_len();
        let is_echo = ip.protocol() == IpProto::ICMP
            && ip.flags_frag() & 0x3fff == 0
            && IcmpPacket::new_checked(ip.payload())
                .is_ok_and(|i| (i.msg_type(), i.code()) == (8, 0));
        if !is_echo {
            return Verdict::Drop(DropReason::ToRouter);
        }
        ip.swap_addrs();
        ip.set_ttl(64);
        ip.fill_checksum();
        let icmp = &mut b[ETHERNET_HEADER_LEN + h..];
        icmp[0] = 0; // echo reply
        let c = u16::from_be_bytes([icmp[2], icmp[3]]);
        icmp[2..4].copy_from_slice(&checksum::update16(c, 0x0800, 0x0000).to_be_bytes());
        b.copy_within(6..12, 0);
        b[6..12].copy_from_slice(&mac.0);
        self.count(Event::EchoReply);
        Verdict::Forward(in_port)
    }

    /// Turns the packet into an ICMPv4 error back to its source, or drops it
    /// with `reason` when no error may be sent (RFC 1812 4.3.2.7) or the
    /// rate limit is spent.
    pub(crate) fn icmp4_error(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        ty: u8,
        code: u8,
        extra: u32,
        reason: DropReason,
    ) -> Verdict {
        let Some(iface) = self.iface(in_port) else {
            return Verdict::Drop(reason);
        };
        let Some(&(our, _)) = iface.ipv4.first() else {
            return Verdict::Drop(reason);
        };
        let our_mac = iface.mac;
        let b = pkt.bytes();
        let ip = Ipv4Packet::new_unchecked(&b[ETHERNET_HEADER_LEN..]);
        let src = u32::from_be_bytes(ip.src());
        let h = ip.header_len();
        let payload = ip.payload();
        let is_icmp_error = ip.protocol() == IpProto::ICMP
            && IcmpPacket::new_checked(payload).is_ok_and(|i| i.is_v4_error());
        if ip.flags_frag() & 0x1fff != 0 || is_icmp_error || martian(src) || src == 0 {
            return Verdict::Drop(reason);
        }
        if !self.take_token() {
            return Verdict::Drop(reason);
        }
        let qlen = h + payload.len().min(8);
        let mut quote = [0u8; QUOTE_MAX];
        quote[..qlen].copy_from_slice(&b[ETHERNET_HEADER_LEN..ETHERNET_HEADER_LEN + qlen]);
        let mut src_mac = [0u8; 6];
        src_mac.copy_from_slice(&b[6..12]);
        let len = ETHERNET_HEADER_LEN + 20 + 8 + qlen;
        if !pkt.set_len(len) {
            return Verdict::Drop(reason);
        }
        let b = pkt.bytes_mut();
        b[0..6].copy_from_slice(&src_mac);
        b[6..12].copy_from_slice(&our_mac.0);
        b[12..14].copy_from_slice(&EtherType::IPV4.to_be_bytes());
        b[ETHERNET_HEADER_LEN + 1] = 0; // TOS
        {
            let mut ip =
                Ipv4Packet::new_unchecked(&mut b[ETHERNET_HEADER_LEN..ETHERNET_HEADER_LEN + 20]);
            ip.set_version_ihl(20);
            ip.set_total_len((20 + 8 + qlen) as u16);
            ip.set_ident(0);
            ip.set_flags_frag(0);
            ip.set_ttl(64);
            ip.set_protocol(IpProto::ICMP);
            ip.set_src(our.octets());
            ip.set_dst(src.to_be_bytes());
            ip.fill_checksum();
        }
        let mut icmp = IcmpPacket::new_unchecked(&mut b[ETHERNET_HEADER_LEN + 20..len]);
        icmp.set_type_code(ty, code);
        icmp.set_rest(extra);
        icmp.body_mut().copy_from_slice(&quote[..qlen]);
        icmp.fill_v4();
        self.count(match ty {
            11 => Event::TimeExceeded,
            _ if code == 4 => Event::FragNeeded,
            _ => Event::Unreachable,
        });
        Verdict::Forward(in_port)
    }

    /// Turns the packet (dropped, waiting for resolution) into an ARP
    /// request for `target` on `port`.
    fn arp_request(&mut self, pkt: &mut impl Frame, port: u16, target: u32) -> Verdict {
        let Some(iface) = self.iface(port) else {
            return Verdict::Drop(DropReason::NoNeighbor);
        };
        let Some(&(our, _)) = iface.ipv4.first() else {
            return Verdict::Drop(DropReason::NoNeighbor);
        };
        let mac = iface.mac;
        if !self.take_token() || !pkt.set_len(ETHERNET_HEADER_LEN + 28) {
            return Verdict::Drop(DropReason::NoNeighbor);
        }
        let b = pkt.bytes_mut();
        b[0..6].copy_from_slice(&BROADCAST.0);
        b[6..12].copy_from_slice(&mac.0);
        b[12..14].copy_from_slice(&EtherType::ARP.to_be_bytes());
        let mut a = ArpPacket::new_unchecked(&mut b[ETHERNET_HEADER_LEN..]);
        a.set_fixed();
        a.set_oper(ARP_REQUEST);
        a.set_sender(mac, our.octets());
        a.set_target(MacAddr::default(), target.to_be_bytes());
        self.count(Event::ArpRequest);
        Verdict::Forward(port)
    }

    fn arp(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        let Some(iface) = self.iface(in_port) else {
            return Verdict::Drop(DropReason::ToRouter);
        };
        let mac = iface.mac;
        let b = pkt.bytes_mut();
        let a = match ArpPacket::new_checked(&b[ETHERNET_HEADER_LEN..]) {
            Ok(a) => a,
            Err(e) => return Verdict::Drop(e.into()),
        };
        let (op, sha) = (a.oper(), a.sha());
        let (spa, tpa) = (a.spa(), a.tpa());
        let spa_u = u32::from_be_bytes(spa);
        let on_link = iface
            .ipv4
            .iter()
            .any(|(x, l)| crate::nat::in_prefix(spa_u, (u32::from(*x), *l)));
        let ours = iface.ipv4.iter().any(|(x, _)| x.octets() == tpa);
        if on_link && spa_u != 0 && self.learn4(in_port, spa_u, sha) {
            self.count(Event::ArpLearned);
        }
        if op == ARP_REQUEST && ours {
            let mut r = ArpPacket::new_unchecked(&mut b[ETHERNET_HEADER_LEN..]);
            r.set_oper(ARP_REPLY);
            r.set_target(sha, spa);
            r.set_sender(mac, tpa);
            b[0..6].copy_from_slice(&sha.0);
            b[6..12].copy_from_slice(&mac.0);
            self.count(Event::ArpReply);
            return Verdict::Forward(in_port);
        }
        Verdict::Drop(DropReason::Consumed)
    }

    fn ipv6(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        let b = pkt.bytes_mut();
        let ip = match Ipv6Packet::new_checked(&b[ETHERNET_HEADER_LEN..]) {
            Ok(ip) => ip,
            Err(e) => return Verdict::Drop(e.into()),
        };
        let dst = u128::from_be_bytes(ip.dst());
        let (hop, plen) = (ip.hop_limit(), ip.payload_len());
        let (proto, off) = match ip.upper_layer() {
            Ok(x) => x,
            Err(e) => return Verdict::Drop(e.into()),
        };
        let icmp_type = (proto == IpProto::ICMPV6)
            .then(|| b.get(ETHERNET_HEADER_LEN + off).copied())
            .flatten();
        if let Some(135 | 136) = icmp_type {
            if off != 40 || plen < 24 {
                return Verdict::Drop(DropReason::Malformed);
            }
            return self.nd(pkt, in_port);
        }
        if dst >> 120 == 0xff {
            return Verdict::Drop(DropReason::NotRoutable); // other multicast
        }
        if !self.for_us6(pkt.bytes()) {
            return Verdict::Drop(DropReason::NotForUs);
        }
        if self.is_local6(dst) {
            return self.local6(pkt, in_port, icmp_type, off);
        }
        if hop <= 1 {
            return self.icmp6_error(pkt, in_port, 3, 0, 0, DropReason::TtlExceeded);
        }
        let Some(nh) = self.cfg.lpm6.lookup(dst) else {
            return self.icmp6_error(pkt, in_port, 1, 0, 0, DropReason::NoRoute);
        };
        let Some(&h) = self.cfg.next_hops.get(nh as usize) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        let Some(oif) = self.iface(h.port) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        let mtu = oif.mtu;
        if 40 + plen > mtu {
            return self.icmp6_error(pkt, in_port, 2, 0, u32::from(mtu), DropReason::MtuExceeded);
        }
        let out_mac = oif.mac;
        let gw = match h.via {
            Some(std::net::IpAddr::V6(g)) => u128::from(g),
            _ => dst,
        };
        let Some(mac) = self.fresh(self.neigh6.get(&(h.port, gw))) else {
            return self.solicit(pkt, h.port, gw);
        };
        let b = pkt.bytes_mut();
        b[ETHERNET_HEADER_LEN + 7] = hop - 1;
        b[0..6].copy_from_slice(&mac.0);
        b[6..12].copy_from_slice(&out_mac.0);
        Verdict::Forward(h.port)
    }

    /// Unicast IPv6 frames must be addressed to the port (multicast frames
    /// are let through for ND only).
    fn for_us6(&self, b: &[u8]) -> bool {
        b[0] & 1 == 0
    }

    /// Turns the packet into an ICMPv6 error back to its source (RFC 4443:
    /// as much of the invoking packet as fits in 1280 bytes), or drops it
    /// with `reason`.
    pub(crate) fn icmp6_error(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        ty: u8,
        code: u8,
        extra: u32,
        reason: DropReason,
    ) -> Verdict {
        let Some(iface) = self.iface(in_port) else {
            return Verdict::Drop(reason);
        };
        let Some(&(our, _)) = iface.ipv6.first() else {
            return Verdict::Drop(reason);
        };
        let our_mac = iface.mac;
        let b = pkt.bytes();
        let ip = Ipv6Packet::new_unchecked(&b[ETHERNET_HEADER_LEN..]);
        let src = u128::from_be_bytes(ip.src());
        let l4 = ETHERNET_HEADER_LEN + 40;
        let is_error = match ip.upper_layer() {
            Ok((IpProto::ICMPV6, off)) => {
                b.get(ETHERNET_HEADER_LEN + off).is_some_and(|t| *t < 128)
            }
            _ => false,
        };
        if src == 0 || src >> 120 == 0xff || is_error {
            return Verdict::Drop(reason);
        }
        if !self.take_token() {
            return Verdict::Drop(reason);
        }
        let orig_len = (40 + usize::from(ip.payload_len())).min(b.len() - ETHERNET_HEADER_LEN);
        let q = orig_len.min(1280 - 48);
        let mut src_mac = [0u8; 6];
        src_mac.copy_from_slice(&b[6..12]);
        if !pkt.set_len(ETHERNET_HEADER_LEN + 48 + q) {
            return Verdict::Drop(reason);
        }
        let b = pkt.bytes_mut();
        b.copy_within(
            ETHERNET_HEADER_LEN..ETHERNET_HEADER_LEN + q,
            ETHERNET_HEADER_LEN + 48,
        );
        b[0..6].copy_from_slice(&src_mac);
        b[6..12].copy_from_slice(&our_mac.0);
        b[12..14].copy_from_slice(&EtherType::IPV6.to_be_bytes());
        let (s6, d6) = (our.octets(), src.to_be_bytes());
        {
            let mut ip = Ipv6Packet::new_unchecked(&mut b[ETHERNET_HEADER_LEN..]);
            ip.set_version();
            ip.set_payload_len((8 + q) as u16);
            ip.set_next_header(IpProto::ICMPV6);
            ip.set_hop_limit(64);
            ip.set_src(s6);
            ip.set_dst(d6);
        }
        let icmp = &mut b[l4..l4 + 8 + q];
        icmp[0] = ty;
        icmp[1] = code;
        icmp[2..4].copy_from_slice(&[0, 0]);
        icmp[4..8].copy_from_slice(&extra.to_be_bytes());
        let c = !checksum::fold(checksum::sum(
            icmp,
            checksum::pseudo_v6(s6, d6, 58, (8 + q) as u32),
        ));
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        self.count(match ty {
            3 => Event::TimeExceeded,
            2 => Event::FragNeeded,
            _ => Event::Unreachable,
        });
        Verdict::Forward(in_port)
    }

    /// Neighbor Discovery (RFC 4861): answer solicitations for the
    /// router's addresses, learn from solicitations and advertisements.
    fn nd(&mut self, pkt: &mut impl Frame, in_port: u16) -> Verdict {
        let Some(iface) = self.iface(in_port) else {
            return Verdict::Drop(DropReason::ToRouter);
        };
        let mac = iface.mac;
        let b = pkt.bytes();
        let ip = Ipv6Packet::new_unchecked(&b[ETHERNET_HEADER_LEN..]);
        if ip.hop_limit() != 255 {
            return Verdict::Drop(DropReason::Malformed); // not from a neighbour
        }
        let src = u128::from_be_bytes(ip.src());
        let l4 = ETHERNET_HEADER_LEN + 40;
        let end = l4 + usize::from(ip.payload_len());
        let ty = b[l4];
        let mut target = [0u8; 16];
        target.copy_from_slice(&b[l4 + 8..l4 + 24]);
        let target_u = u128::from_be_bytes(target);
        // The link-layer address option (source for NS, target for NA).
        let mut lla = None;
        let mut o = l4 + 24;
        while o + 8 <= end {
            let (t, len) = (b[o], usize::from(b[o + 1]) * 8);
            if len == 0 || o + len > end {
                return Verdict::Drop(DropReason::Malformed);
            }
            if (t == 1 && ty == 135) || (t == 2 && ty == 136) {
                lla = Some(MacAddr([
                    b[o + 2],
                    b[o + 3],
                    b[o + 4],
                    b[o + 5],
                    b[o + 6],
                    b[o + 7],
                ]));
            }
            o += len;
        }
        let ours = iface.ipv6.iter().any(|(a, _)| u128::from(*a) == target_u);
        let (learn_ip, learn_mac) = if ty == 135 {
            (src, lla)
        } else {
            (
                target_u,
                lla.or(Some(MacAddr([b[6], b[7], b[8], b[9], b[10], b[11]]))),
            )
        };
        if learn_ip != 0 {
            if let Some(m) = learn_mac {
                if self.learn6(in_port, learn_ip, m) {
                    self.count(Event::NdLearned);
                }
            }
        }
        if ty != 135 || !ours {
            return Verdict::Drop(DropReason::Consumed);
        }
        // Answer with a Neighbor Advertisement (router, solicited, override).
        let mut src_mac = [0u8; 6];
        src_mac.copy_from_slice(&b[6..12]);
        let dst: [u8; 16] = if src == 0 {
            [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
        } else {
            src.to_be_bytes()
        };
        let flags = if src == 0 { 0xa0 } else { 0xe0 };
        if !pkt.set_len(l4 + 32) {
            return Verdict::Drop(DropReason::ToRouter);
        }
        let b = pkt.bytes_mut();
        b[0..6].copy_from_slice(&src_mac);
        b[6..12].copy_from_slice(&mac.0);
        {
            let mut ip = Ipv6Packet::new_unchecked(&mut b[ETHERNET_HEADER_LEN..]);
            ip.set_version();
            ip.set_payload_len(32);
            ip.set_next_header(IpProto::ICMPV6);
            ip.set_hop_limit(255);
            ip.set_src(target);
            ip.set_dst(dst);
        }
        let icmp = &mut b[l4..l4 + 32];
        icmp[0..8].copy_from_slice(&[136, 0, 0, 0, flags, 0, 0, 0]);
        icmp[8..24].copy_from_slice(&target);
        icmp[24..26].copy_from_slice(&[2, 1]);
        icmp[26..32].copy_from_slice(&mac.0);
        let c = !checksum::fold(checksum::sum(
            icmp,
            checksum::pseudo_v6(target, dst, 58, 32),
        ));
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        self.count(Event::NdAdvert);
        Verdict::Forward(in_port)
    }

    /// Turns the packet (dropped, waiting for resolution) into a Neighbor
    /// Solicitation for `target` on `port`.
    fn solicit(&mut self, pkt: &mut impl Frame, port: u16, target: u128) -> Verdict {
        let Some(iface) = self.iface(port) else {
            return Verdict::Drop(DropReason::NoNeighbor);
        };
        let Some(&(our, _)) = iface.ipv6.first() else {
            return Verdict::Drop(DropReason::NoNeighbor);
        };
        let mac = iface.mac;
        let l4 = ETHERNET_HEADER_LEN + 40;
        if !self.take_token() || !pkt.set_len(l4 + 32) {
            return Verdict::Drop(DropReason::NoNeighbor);
        }
        let t = target.to_be_bytes();
        // Solicited-node multicast ff02::1:ffXX:XXXX and its MAC 33:33:ff:XX:XX:XX.
        let mut snm = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
        snm[13..16].copy_from_slice(&t[13..16]);
        let b = pkt.bytes_mut();
        b[0..6].copy_from_slice(&[0x33, 0x33, 0xff, t[13], t[14], t[15]]);
        b[6..12].copy_from_slice(&mac.0);
        b[12..14].copy_from_slice(&EtherType::IPV6.to_be_bytes());
        let s6 = our.octets();
        {
            let mut ip = Ipv6Packet::new_unchecked(&mut b[ETHERNET_HEADER_LEN..]);
            ip.set_version();
            ip.set_payload_len(32);
            ip.set_next_header(IpProto::ICMPV6);
            ip.set_hop_limit(255);
            ip.set_src(s6);
            ip.set_dst(snm);
        }
        let icmp = &mut b[l4..l4 + 32];
        icmp[0..8].copy_from_slice(&[135, 0, 0, 0, 0, 0, 0, 0]);
        icmp[8..24].copy_from_slice(&t);
        icmp[24..26].copy_from_slice(&[1, 1]);
        icmp[26..32].copy_from_slice(&mac.0);
        let c = !checksum::fold(checksum::sum(icmp, checksum::pseudo_v6(s6, snm, 58, 32)));
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        self.count(Event::NdSolicit);
        Verdict::Forward(port)
    }

    /// Packets for the router's IPv6 addresses: answer echo requests
    /// (`icmp_type` 128, ICMPv6 at `off` from the IPv6 header), consume the
    /// rest.
    fn local6(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        icmp_type: Option<u8>,
        off: usize,
    ) -> Verdict {
        let Some(mac) = self.iface(in_port).map(|i| i.mac) else {
            return Verdict::Drop(DropReason::ToRouter);
        };
        let b = pkt.bytes_mut();
        let l4 = ETHERNET_HEADER_LEN + off;
        if icmp_type != Some(128) || b.len() < l4 + 8 {
            return Verdict::Drop(DropReason::ToRouter);
        }
        // Swapping the addresses leaves the pseudo-header sum unchanged;
        // type 128 → 129 changes one word.
        let mut ip = Ipv6Packet::new_unchecked(&mut b[ETHERNET_HEADER_LEN..]);
        ip.swap_addrs();
        ip.set_hop_limit(64);
        b[l4] = 129;
        let c = u16::from_be_bytes([b[l4 + 2], b[l4 + 3]]);
        b[l4 + 2..l4 + 4].copy_from_slice(&checksum::update16(c, 0x8000, 0x8100).to_be_bytes());
        b.copy_within(6..12, 0);
        b[6..12].copy_from_slice(&mac.0);
        self.count(Event::EchoReply);
        Verdict::Forward(in_port)
    }
}

/// Learns a neighbour at time `now` (static entries are kept); true when it
/// is new or its MAC changed.
fn learn<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, (MacAddr, u64)>,
    now: u64,
    key: K,
    m: MacAddr,
) -> bool {
    match map.get_mut(&key) {
        Some((_, STATIC)) => false,
        Some(e) => {
            let changed = e.0 != m;
            *e = (m, now);
            changed
        }
        None => {
            map.insert(key, (m, now));
            true
        }
    }
}

/// Destinations and sources a router never forwards for (RFC 1812 5.3.7):
/// 0/8, 127/8, multicast and reserved 224/3, limited broadcast.
/// Forwards an IPv4 frame whose TTL is above 1: decrements the TTL
/// (the high byte of the TTL/protocol word, so an RFC 1624 update of the
/// header checksum) and sets the destination and source MACs.
#[inline(always)]
fn forward4_rewrite(b: &mut [u8], dst: [u8; 6], src: [u8; 6]) {
    let l3 = &mut b[ETHERNET_HEADER_LEN..];
    let old = u16::from_be_bytes([l3[8], l3[9]]);
    l3[8] -= 1;
    let new = u16::from_be_bytes([l3[8], l3[9]]);
    let c = u16::from_be_bytes([l3[10], l3[11]]);
    l3[10..12].copy_from_slice(&checksum::update16(c, old, new).to_be_bytes());
    b[0..6].copy_from_slice(&dst);
    b[6..12].copy_from_slice(&src);
}

fn martian(a: u32) -> bool {
    let first = a >> 24;
    first == 0 || first == 127 || first >= 224
}

/// Bursts are routed in chunks of this many packets (stack arrays).
const CHUNK: usize = 32;

/// The destination of a plain IPv4 packet to `mac` that the fast path can
/// route: a 20-byte header that is valid (version, lengths, checksum), a
/// TTL above 1, a unicast destination that is not martian. `None` for
/// anything else (options, ARP, IPv6, errors, ...), which takes the full
/// path.
#[inline(always)]
fn fast4(b: &[u8], mac: MacAddr) -> Option<u32> {
    let h = b.get(..ETHERNET_HEADER_LEN + 20)?;
    let eth: &[u8; 14] = h[..14].try_into().ok()?;
    if eth[..6] != mac.0 || eth[12..14] != [0x08, 0x00] || h[14] != 0x45 {
        return None;
    }
    let ip: &[u8; 20] = h[14..].try_into().ok()?;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if total < 20 || total > b.len() - ETHERNET_HEADER_LEN || ip[8] <= 1 {
        return None;
    }
    // The header's ones-complement sum must be 0xffff: five 32-bit words
    // summed (2^16 = 1 in ones-complement arithmetic), then folded three
    // times from under 2^35. What is still above 16 bits then (0x10000 or
    // 0x10001) folds on to 1 or 2, never to 0xffff, so the test is exact.
    let mut acc = 0u64;
    for w in ip.chunks_exact(4) {
        acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    acc = (acc >> 32) + (acc & 0xffff_ffff);
    acc = (acc >> 16) + (acc & 0xffff);
    acc = (acc >> 16) + (acc & 0xffff);
    if acc != 0xffff {
        return None;
    }
    let dst = u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]);
    (!martian(dst)).then_some(dst)
}

impl ForwardMode for Router {
    const NAME: &'static str = "l3fwd";

    /// Routes a burst in stages, as DPDK's l3fwd does: the headers of all
    /// packets are checked first, then all routes are looked up, then the
    /// packets are rewritten, so that the CPU overlaps the packets' loads
    /// instead of running one packet's chain of dependent loads (header,
    /// LPM entry, next hop, interface, neighbour) after another. Packets
    /// the fast path does not take (see `fast4`; local, unrouted, over the
    /// MTU, unresolved next hop) go through `process`, so the verdicts and
    /// events are those of `process`, packet by packet.
    fn process_burst<P: Frame>(
        &mut self,
        pkts: &mut [P],
        in_port: u16,
        verdicts: &mut [Verdict],
    ) -> Option<Verdict> {
        let Some(mac) = self.iface(in_port).map(|i| i.mac) else {
            return self.process_each_cold(pkts, in_port, verdicts);
        };
        // Uniform-verdict tracking in two locals, as in `fwd::process_each`
        // (a tracker struct measured 5 cycles per packet more here).
        let mut first: Option<Verdict> = None;
        let mut uniform = true;
        let n = pkts.len().min(verdicts.len());
        for (pc, vc) in pkts[..n]
            .chunks_mut(CHUNK)
            .zip(verdicts[..n].chunks_mut(CHUNK))
        {
            let mut dst = [0u32; CHUNK];
            let mut nh = [None::<u32>; CHUNK];
            for (p, d) in pc.iter().zip(dst.iter_mut()) {
                *d = fast4(p.bytes(), mac).unwrap_or(0);
            }
            for (d, h) in dst.iter().zip(nh.iter_mut()).take(pc.len()) {
                // 0 is martian: never a fast-path destination.
                if *d != 0 && !self.is_local4(*d) {
                    *h = self.cfg.lpm4.lookup(*d);
                }
            }
            for ((p, v), (d, h)) in pc.iter_mut().zip(vc.iter_mut()).zip(dst.iter().zip(&nh)) {
                *v = match h.and_then(|h| self.forward_fast(p, *d, h)) {
                    Some(v) => v,
                    None => self.process(p, in_port),
                };
                match first {
                    None => first = Some(*v),
                    Some(f) if f == *v => {}
                    Some(_) => uniform = false,
                }
            }
        }
        first.filter(|_| uniform)
    }

    #[inline]
    fn process<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        let b = pkt.bytes();
        if b.len() < ETHERNET_HEADER_LEN {
            return Verdict::Drop(DropReason::Truncated);
        }
        let dst = MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]]);
        let ethertype = u16::from_be_bytes([b[12], b[13]]);
        let Some(iface) = self.iface(in_port) else {
            return Verdict::Drop(DropReason::NotForUs);
        };
        let for_us = dst == iface.mac;
        match ethertype {
            EtherType::IPV4 if for_us => self.ipv4(pkt, in_port),
            EtherType::IPV6 if for_us || dst.0[0] & 1 == 1 => self.ipv6(pkt, in_port),
            EtherType::ARP if for_us || dst == BROADCAST => self.arp(pkt, in_port),
            EtherType::IPV4 | EtherType::IPV6 | EtherType::ARP => {
                Verdict::Drop(DropReason::NotForUs)
            }
            _ => Verdict::Drop(DropReason::NotIp),
        }
    }

    fn tick(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
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
    }

    fn events(&self) -> &[u64] {
        &self.events
    }
}

#[cfg(test)]
mod tests;
