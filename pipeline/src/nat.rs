//! NAT44: the rules (source NAT to an interface address or a pool,
//! destination NAT port forwards, 1:1 static NAT), per-worker port ranges,
//! and the in-place packet rewrites with incremental checksum updates
//! (RFC 1624) for IPv4, TCP, UDP and ICMP, including ICMP errors whose
//! quoted header is translated too (so traceroute and PMTU discovery work
//! through the NAT).
//!
//! A mapping is a conntrack flow whose reply tuple is not its original
//! reversed ([`crate::conntrack::Flow`]); the gateway stage
//! ([`crate::gateway`]) chooses the tuples here when a flow opens and the
//! rewrite functions make each packet carry [`Flow::translated`].
//!
//! # Port ranges and return traffic
//!
//! The source-NAT port range (default 1024–65535) is cut into one disjoint
//! slice per worker ([`PortRange::slice`]), so no two cores can hand out
//! the same mapping and the owner of a translated port is a division
//! ([`PortRange::owner`]). Replies to a mapping carry its port as their
//! destination port; that is how they are steered to the owning core (see
//! `docs/firewall-nat.md`, "NAT and multiple cores").
//!
//! [`Flow::translated`]: crate::conntrack::Flow::translated

use crate::checksum;
pub use crate::conntrack::blocks::Rule as BlockRule;
use crate::conntrack::Tuple;
use crate::prefix::{self, mask4};
use crate::wire::IpProto;

/// Where source NAT takes its addresses from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnatTo {
    /// The first IPv4 address of the egress interface.
    Masquerade,
    /// A pool; an inside host always gets the same address (chosen by a
    /// hash of its address), as RFC 4787 "paired" pooling asks.
    Pool(Vec<u32>),
    /// A pool whose ports go out in blocks (port-block allocation): an
    /// inside host gets its address as with [`SnatTo::Pool`] and blocks
    /// of `size` ports on it, at most `max` at once on each worker, so
    /// that one log line covers the flows of a block
    /// ([`crate::conntrack::blocks`]).
    Blocks(BlockRule),
    /// Deterministic NAT (RFC 7422; VPP's det44): each inside address
    /// has an outside address and a block of ports computed from it, so
    /// that no log is needed to find who used a public address and port.
    Deterministic(Det),
}

/// Deterministic NAT's mapping: the `inside` prefix's hosts share the
/// `outside` prefix's addresses, `ratio` hosts to an address (both
/// prefixes' sizes are powers of two), each host with `block` ports of
/// the NAT port range to itself: host `i` of the inside prefix (its
/// offset) is outside address `i / ratio`, ports from
/// `lo + (i % ratio) × block` (VPP det44's layout). With several
/// workers, each takes an equal share of every block (`block / workers`
/// ports), so that the owner of a port is a division, as with the
/// per-worker slices of the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Det {
    /// Inside prefix (address, length).
    pub inside: (u32, u8),
    /// Outside prefix.
    pub outside: (u32, u8),
    /// Ports each inside host has.
    pub block: u32,
}

impl Det {
    /// Inside hosts to an outside address.
    pub fn ratio(&self) -> u32 {
        1u32 << (u32::from(self.outside.1) - u32::from(self.inside.1)).min(31)
    }

    /// The most ports a host can have from `range`.
    pub fn max_block(inside: u8, outside: u8, range: &PortRange) -> u32 {
        let ratio = 1u64 << (u32::from(outside.saturating_sub(inside))).min(32);
        (u64::from(range.len()) / ratio) as u32
    }

    /// Inside address `src`'s outside address and the first port of its
    /// block in `range` (`None`: not in the inside prefix).
    pub fn map(&self, src: u32, range: &PortRange) -> Option<(u32, u32)> {
        if !prefix::in4(src, self.inside) {
            return None;
        }
        let i = src.wrapping_sub(self.inside.0 & mask4(self.inside.1));
        let r = self.ratio();
        let out = (self.outside.0 & mask4(self.outside.1)).wrapping_add(i / r);
        Some((out, u32::from(range.lo) + (i % r) * self.block))
    }

    /// Worker `w`'s share of a block starting at `start`, among
    /// `workers`: its first port and length.
    pub fn share(&self, start: u32, w: u16, workers: u16) -> (u32, u32) {
        let per = self.block / u32::from(workers.max(1));
        (start + u32::from(w) * per, per)
    }

    /// The worker whose share holds `port` of an outside address (`None`:
    /// not a port of any block).
    pub fn owner(&self, port: u16, range: &PortRange, workers: u16) -> Option<u16> {
        let k = u32::from(port).checked_sub(u32::from(range.lo))?;
        if k >= self.ratio() * self.block {
            return None;
        }
        let per = self.block / u32::from(workers.max(1));
        let w = (k % self.block) / per.max(1);
        (w < u32::from(workers.max(1))).then_some(w as u16)
    }

    /// Whether `a` is one of the outside addresses.
    pub fn is_outside(&self, a: u32) -> bool {
        prefix::in4(a, self.outside)
    }

    /// The inside address that public address `a` and `port` belong to
    /// (`sluice ctl nat lookup`), computed: `None` when they are not the
    /// mapping's.
    pub fn inside_of(&self, a: u32, port: u16, range: &PortRange) -> Option<u32> {
        if !self.is_outside(a) {
            return None;
        }
        let o = a.wrapping_sub(self.outside.0 & mask4(self.outside.1));
        let k = u32::from(port).checked_sub(u32::from(range.lo))?;
        let j = k / self.block.max(1);
        if j >= self.ratio() {
            return None;
        }
        Some((self.inside.0 & mask4(self.inside.1)).wrapping_add(o * self.ratio() + j))
    }
}

/// A source NAT rule: flows leaving through `out_port` from `src` get a
/// new source address and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snat {
    /// Egress port.
    pub out_port: u16,
    /// Source prefix (address, length) the rule applies to.
    pub src: (u32, u8),
    /// Addresses.
    pub to: SnatTo,
    /// Only flows whose destination was translated (`Some(true)`,
    /// nftables' `ct status dnat`: hairpinning written out) or only those
    /// whose was not (`Some(false)`, `ct status != dnat`); `None`: any.
    pub dnatted: Option<bool>,
}

/// A destination NAT rule (port forward, or a whole address when `dport`
/// is `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dnat {
    /// Only for packets received on this port.
    pub in_port: Option<u16>,
    /// Protocol (required with a port).
    pub proto: Option<u8>,
    /// External address.
    pub dst: u32,
    /// External port.
    pub dport: Option<u16>,
    /// Internal address.
    pub to: u32,
    /// Internal port (`None` keeps the port).
    pub to_port: Option<u16>,
}

/// 1:1 NAT: `inside` appears as `outside` in both directions, ports kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticNat {
    /// Inside address.
    pub inside: u32,
    /// Outside address.
    pub outside: u32,
}

/// An inclusive port range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// First port.
    pub lo: u16,
    /// Last port.
    pub hi: u16,
}

impl Default for PortRange {
    fn default() -> Self {
        PortRange {
            lo: 1024,
            hi: 65535,
        }
    }
}

impl PortRange {
    /// Ports in the range.
    pub fn len(&self) -> u32 {
        u32::from(self.hi) - u32::from(self.lo) + 1
    }

    /// Never empty (`lo <= hi` by construction); for clippy.
    pub fn is_empty(&self) -> bool {
        self.hi < self.lo
    }

    fn per_worker(&self, workers: u16) -> u32 {
        (self.len() / u32::from(workers.max(1))).max(1)
    }

    /// Worker `i`'s slice of the range among `workers` (the last one takes
    /// the remainder); `None` when the range has fewer ports than workers.
    pub fn slice(&self, i: u16, workers: u16) -> Option<PortRange> {
        let per = self.per_worker(workers);
        let lo = u32::from(self.lo) + u32::from(i) * per;
        let hi = if i + 1 == workers.max(1) {
            u32::from(self.hi)
        } else {
            lo + per - 1
        };
        (hi <= u32::from(self.hi) && lo <= hi).then_some(PortRange {
            lo: lo as u16,
            hi: hi as u16,
        })
    }

    /// The worker whose slice holds `port`, if it is in the range.
    pub fn owner(&self, port: u16, workers: u16) -> Option<u16> {
        if port < self.lo || port > self.hi {
            return None;
        }
        let w = (u32::from(port) - u32::from(self.lo)) / self.per_worker(workers);
        Some((w as u16).min(workers.max(1) - 1))
    }
}

/// All NAT rules (control path; shared read-only by the workers).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NatConfig {
    /// Source NAT, first match wins.
    pub snat: Vec<Snat>,
    /// Destination NAT, first match wins.
    pub dnat: Vec<Dnat>,
    /// 1:1 NAT.
    pub statics: Vec<StaticNat>,
    /// Source ports handed out (split over the workers).
    pub ports: PortRange,
    /// The built-in hairpinning switched off (`[nat] hairpin = false`): a
    /// port-forwarded flow leaving by the interface it came in on is then
    /// translated only by the source NAT rules (one with `ct_status =
    /// "dnat"` writes the built-in out).
    pub no_hairpin: bool,
    /// IPv6 prefix translation (NPTv6), per interface.
    pub npt: Vec<crate::npt::Npt>,
    /// Stateful NAT64 translators (their prefixes do not overlap).
    pub nat64: Vec<crate::nat64::Nat64>,
    /// IPv6 masquerade, first match wins.
    pub masq6: Vec<Masq6>,
}

/// IPv6 masquerade (nftables' `masquerade` in an `ip6` postrouting
/// chain): a flow from `src` leaving by `out_port` leaves from that
/// interface's first IPv6 address, its source port (ICMPv6 echo: its
/// identifier) one of the worker's NAT ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Masq6 {
    /// Egress interface.
    pub out_port: u16,
    /// Source prefix (address, length).
    pub src: (u128, u8),
}

impl NatConfig {
    /// True with no rules.
    pub fn is_empty(&self) -> bool {
        self.snat.is_empty()
            && self.dnat.is_empty()
            && self.statics.is_empty()
            && self.nat64.is_empty()
            && self.masq6.is_empty()
    }

    /// The IPv6 masquerade rule of a flow from `src` leaving by
    /// `out_port`.
    pub fn masq6_for(&self, out_port: u16, src: u128) -> Option<&Masq6> {
        self.masq6
            .iter()
            .find(|m| m.out_port == out_port && prefix::in6(src, m.src))
    }

    /// The deterministic mappings ([`SnatTo::Deterministic`]).
    pub fn dets(&self) -> impl Iterator<Item = &Det> {
        self.snat.iter().filter_map(|s| match &s.to {
            SnatTo::Deterministic(d) => Some(d),
            _ => None,
        })
    }

    /// The source NAT rules with port blocks ([`SnatTo::Blocks`]).
    pub fn block_rules(&self) -> Vec<BlockRule> {
        self.snat
            .iter()
            .filter_map(|s| match &s.to {
                SnatTo::Blocks(b) => Some(b.clone()),
                _ => None,
            })
            .collect()
    }

    /// The worker that owns source-NAT port `port` of NAT address `dst`
    /// among `workers`: a deterministic mapping's share of a block, else
    /// the range's slice.
    pub fn port_owner(&self, dst: u32, port: u16, workers: u16) -> Option<u16> {
        match self.dets().find(|d| d.is_outside(dst)) {
            Some(d) => d.owner(port, &self.ports, workers),
            None => self.ports.owner(port, workers),
        }
    }

    /// The inside address behind public address `a` and `port`, where a
    /// deterministic mapping says (`sluice ctl nat lookup`).
    pub fn det_inside(&self, a: u32, port: u16) -> Option<u32> {
        self.dets().find_map(|d| d.inside_of(a, port, &self.ports))
    }

    /// Inside address `src`'s public address and block of ports (first,
    /// last), where a deterministic mapping gives it one.
    pub fn det_outside(&self, src: u32) -> Option<(u32, u16, u16)> {
        self.dets().find_map(|d| {
            let (a, start) = d.map(src, &self.ports)?;
            Some((a, start as u16, (start + d.block - 1) as u16))
        })
    }

    /// The destination NAT of a new flow: new (address, port) for a packet
    /// to `dst:dport` received on `in_port`.
    pub fn dnat(&self, in_port: u16, proto: u8, dst: u32, dport: u16) -> Option<(u32, u16)> {
        self.dnat_entry(in_port, proto, dst, dport)
            .map(|(_, a, p)| (a, p))
    }

    /// [`NatConfig::dnat`] with the entry that translated it: 1-based,
    /// counting the `dnat` rules and then the `statics` (the numbering of
    /// [`NatConfig::original_dsts`], which the firewall's
    /// `ct_original_dst` matches go by).
    pub fn dnat_entry(
        &self,
        in_port: u16,
        proto: u8,
        dst: u32,
        dport: u16,
    ) -> Option<(usize, u32, u16)> {
        for (i, d) in self.dnat.iter().enumerate() {
            if d.dst != dst || d.in_port.is_some_and(|p| p != in_port) {
                continue;
            }
            if d.proto.is_some_and(|p| p != proto) {
                continue;
            }
            match d.dport {
                Some(p) if p != dport || !has_ports(proto) => continue,
                _ => {}
            }
            return Some((i + 1, d.to, d.to_port.unwrap_or(dport)));
        }
        self.statics
            .iter()
            .position(|s| s.outside == dst)
            .map(|i| (self.dnat.len() + i + 1, self.statics[i].inside, dport))
    }

    /// The original (pre-translation) destination of every destination
    /// NAT entry, in entry order (entry `i` is element `i - 1`): address,
    /// and the port when the entry matches one (otherwise the port is
    /// kept).
    pub fn original_dsts(&self) -> Vec<(u32, Option<u16>)> {
        self.dnat
            .iter()
            .map(|d| (d.dst, d.dport))
            .chain(self.statics.iter().map(|s| (s.outside, None)))
            .collect()
    }

    /// The entry that would translate a flow whose original tuple is
    /// `orig` (as [`NatConfig::dnat_entry`], on any ingress port): for
    /// packets of a flow that is already open (ICMP errors about it).
    pub fn entry_of(&self, orig: &Tuple) -> Option<usize> {
        let (dst, proto) = (addr4(orig.dst), orig.proto);
        let by_rule = self.dnat.iter().position(|d| {
            d.dst == dst
                && d.proto.is_none_or(|p| p == proto)
                && d.dport.is_none_or(|p| p == orig.dport && has_ports(proto))
        });
        by_rule.map(|i| i + 1).or_else(|| {
            self.statics
                .iter()
                .position(|s| s.outside == dst)
                .map(|i| self.dnat.len() + i + 1)
        })
    }

    /// The 1:1 outside address of inside host `src`.
    pub fn static_out(&self, src: u32) -> Option<u32> {
        self.static_out_entry(src).map(|(_, o)| o)
    }

    /// [`NatConfig::static_out`] with its entry (numbered as
    /// [`NatConfig::dnat_entry`] numbers the statics).
    pub fn static_out_entry(&self, src: u32) -> Option<(usize, u32)> {
        self.statics
            .iter()
            .position(|s| s.inside == src)
            .map(|i| (self.dnat.len() + i + 1, self.statics[i].outside))
    }

    /// The source NAT rule for a flow from `src` leaving on `out_port`.
    pub fn snat(&self, out_port: u16, src: u32, dnatted: bool) -> Option<&Snat> {
        self.snat_entry(out_port, src, dnatted).map(|(_, r)| r)
    }

    /// [`NatConfig::snat`] with its entry: numbered after the destination
    /// NAT rules and the statics (1-based), as [`NatConfig::entries`]
    /// counts them.
    pub fn snat_entry(&self, out_port: u16, src: u32, dnatted: bool) -> Option<(usize, &Snat)> {
        self.snat
            .iter()
            .position(|s| {
                s.out_port == out_port
                    && prefix::in4(src, s.src)
                    && s.dnatted.is_none_or(|d| d == dnatted)
            })
            .map(|i| (self.dnat.len() + self.statics.len() + i + 1, &self.snat[i]))
    }

    /// How many entries count their new flows (`sluice ctl show nat`):
    /// the destination NAT rules, the 1:1 mappings (both ways), the source
    /// NAT rules, in that order.
    pub fn entries(&self) -> usize {
        self.dnat.len() + self.statics.len() + self.snat.len()
    }
}

crate::counter_enum! {
    /// What NAT counts.
    pub enum Event {
        /// NAT mappings created.
        Mapped = "nat_mapped",
        /// New flows refused because the NAT port range was exhausted.
        Exhausted = "nat_exhausted",
        /// New flows refused because their inside host's port blocks
        /// were full and it held as many as its rule allows
        /// (`max_blocks`).
        BlockQuota = "nat_block_quota",
        /// TCP SYNs whose MSS option was lowered (`clamp_mss`).
        MssClamped = "tcp_mss_clamped",
        /// IPv6 packets NAT64 translated to IPv4 (ICMPv6 errors among them).
        Nat64To4 = "nat64_to_ipv4",
        /// IPv4 packets NAT64 translated to IPv6 (ICMP errors among them).
        Nat64To6 = "nat64_to_ipv6",
    }
}

/// Protocols whose tuples carry ports (or an ICMP query identifier).
pub fn has_ports(proto: u8) -> bool {
    matches!(proto, IpProto::TCP | IpProto::UDP | IpProto::ICMP)
}

/// The IPv4 address in a conntrack `u128`.
#[inline]
pub fn addr4(a: u128) -> u32 {
    a as u32
}

/// Offset of the checksum in a TCP or UDP header, if the protocol has one
/// that covers the pseudo-header.
fn l4_csum_at(proto: u8) -> Option<usize> {
    match proto {
        IpProto::TCP => Some(16),
        IpProto::UDP => Some(6),
        _ => None,
    }
}

/// Rewrites the addresses and ports of the IPv4 packet `l3` (header
/// validated, first fragment) to those of `to`, updating the IP checksum
/// and the TCP/UDP checksum, or for ICMP queries the identifier and the
/// ICMP checksum. The L4 header must be present in full (the gateway
/// checked it when it built the key). TCP and UDP take the straight path:
/// one RFC 1624 sum of the changed words (`!old + new` for each) applied
/// to both checksums.
#[inline]
pub fn rewrite4(l3: &mut [u8], to: &Tuple) {
    let h = usize::from(l3[0] & 0x0f) * 4;
    let proto = l3[9];
    let at = match proto {
        IpProto::TCP => 16,
        IpProto::UDP => 6,
        _ => usize::MAX,
    };
    if h >= 20 && at != usize::MAX && l3.len() >= h + at + 2 {
        // The header and the L4 header as arrays: no bounds checks below.
        let (ip, l4) = l3.split_at_mut(h);
        let Ok(ip) = <&mut [u8; 20]>::try_from(&mut ip[..20]) else {
            return;
        };
        let l4 = &mut l4[..at + 2];
        let Ok(pp) = <&mut [u8; 4]>::try_from(&mut l4[..4]) else {
            return;
        };
        let be32 =
            |b: &[u8; 20], i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        // The 16-bit halves of a word, summed.
        let halves = |x: u32| (x >> 16) + (x & 0xffff);
        let (src, dst) = (addr4(to.src), addr4(to.dst));
        let addrs = halves(!be32(ip, 12)) + halves(!be32(ip, 16)) + halves(src) + halves(dst);
        let ports = halves(!u32::from_be_bytes(*pp))
            + halves(u32::from(to.sport) << 16 | u32::from(to.dport));
        ip[12..16].copy_from_slice(&src.to_be_bytes());
        ip[16..20].copy_from_slice(&dst.to_be_bytes());
        pp[..2].copy_from_slice(&to.sport.to_be_bytes());
        pp[2..].copy_from_slice(&to.dport.to_be_bytes());
        let c = u16::from_be_bytes([ip[10], ip[11]]);
        ip[10..12].copy_from_slice(&checksum::adjust(c, addrs).to_be_bytes());
        let c = u16::from_be_bytes([l4[at], l4[at + 1]]);
        if let Some(n) = l4_adjust(c, addrs + ports, proto == IpProto::UDP) {
            l4[at..at + 2].copy_from_slice(&n.to_be_bytes());
        }
        return;
    }
    let (old_sum, new_sum) = readdress4(l3, addr4(to.src), addr4(to.dst));
    let l4 = &mut l3[h..];
    rewrite_l4(l4, proto, old_sum, new_sum, to.sport, to.dport);
}

/// Writes source `src` and destination `dst` into IPv4 header `l3` (at
/// least 20 bytes) and adjusts its checksum; nothing past the header
/// changes (a fragment that is not its datagram's first holds no L4
/// header). Returns the sums of the old and the new addresses, which an
/// L4 checksum's pseudo-header changes by.
pub fn readdress4(l3: &mut [u8], src: u32, dst: u32) -> (u64, u64) {
    let old_sum = checksum::sum(&l3[12..20], 0);
    l3[12..16].copy_from_slice(&src.to_be_bytes());
    l3[16..20].copy_from_slice(&dst.to_be_bytes());
    let new_sum = checksum::sum(&l3[12..20], 0);
    let c = u16::from_be_bytes([l3[10], l3[11]]);
    l3[10..12].copy_from_slice(&checksum::update_sums(c, old_sum, new_sum).to_be_bytes());
    (old_sum, new_sum)
}

/// [`rewrite4`] for a packet of a tracked flow, whose addresses and ports
/// are the flow's tuple in its direction: the checksums change by what the
/// flow computed once (`deltas`: the IP header's, the TCP/UDP
/// checksum's), not by sums over the packet's words. A 20-byte header and
/// TCP or UDP take that way; anything else (options, ICMP) [`rewrite4`]'s.
#[inline(always)]
pub fn rewrite4_flow(l3: &mut [u8], to: &Tuple, deltas: (u16, u16)) {
    let (Some(&vihl), Some(&proto)) = (l3.first(), l3.get(9)) else {
        return rewrite4(l3, to);
    };
    let done = match (vihl, proto) {
        (0x45, IpProto::TCP) => l3
            .get_mut(..38)
            .and_then(|h| <&mut [u8; 38]>::try_from(h).ok())
            .map(|h| rewrite_plain(h, to, deltas, false))
            .is_some(),
        (0x45, IpProto::UDP) => l3
            .get_mut(..28)
            .and_then(|h| <&mut [u8; 28]>::try_from(h).ok())
            .map(|h| rewrite_plain(h, to, deltas, true))
            .is_some(),
        _ => false,
    };
    if !done {
        rewrite4(l3, to);
    }
}

/// [`rewrite4_flow`] on the IPv4 header and the L4 header up to its
/// checksum (`N` bytes: the checksum is the last two).
#[inline(always)]
fn rewrite_plain<const N: usize>(h: &mut [u8; N], to: &Tuple, deltas: (u16, u16), udp: bool) {
    const { assert!(N >= 28) };
    h[12..16].copy_from_slice(&addr4(to.src).to_be_bytes());
    h[16..20].copy_from_slice(&addr4(to.dst).to_be_bytes());
    h[20..22].copy_from_slice(&to.sport.to_be_bytes());
    h[22..24].copy_from_slice(&to.dport.to_be_bytes());
    let c = u16::from_be_bytes([h[10], h[11]]);
    h[10..12].copy_from_slice(&checksum::adjust(c, u32::from(deltas.0)).to_be_bytes());
    let c = u16::from_be_bytes([h[N - 2], h[N - 1]]);
    if let Some(n) = l4_adjust(c, u32::from(deltas.1), udp) {
        h[N - 2..].copy_from_slice(&n.to_be_bytes());
    }
}

/// TCP/UDP checksum `c` adjusted by `delta` (RFC 1624), or `None` for a
/// UDP datagram sent without a checksum (0), which stays so; a UDP
/// checksum that comes to 0 is sent as 0xffff (RFC 768).
#[inline(always)]
fn l4_adjust(c: u16, delta: u32, udp: bool) -> Option<u16> {
    if udp && c == 0 {
        return None;
    }
    let n = checksum::adjust(c, delta);
    Some(if udp && n == 0 { 0xffff } else { n })
}

/// Rewrites the ports (or ICMP identifier) of the L4 header `l4` (possibly
/// cut short, as in a quote) to `sport`/`dport` and updates its checksum by
/// the address change `old_sum` → `new_sum` (TCP/UDP)
/// and the port change. Fields past the end of `l4` are left alone.
#[inline]
fn rewrite_l4(
    l4: &mut [u8],
    proto: u8,
    mut old_sum: u64,
    mut new_sum: u64,
    sport: u16,
    dport: u16,
) {
    match proto {
        IpProto::TCP | IpProto::UDP if l4.len() >= 4 => {
            old_sum = checksum::sum(&l4[0..4], old_sum);
            l4[0..2].copy_from_slice(&sport.to_be_bytes());
            l4[2..4].copy_from_slice(&dport.to_be_bytes());
            new_sum = checksum::sum(&l4[0..4], new_sum);
            let Some(at) = l4_csum_at(proto) else { return };
            if l4.len() < at + 2 {
                return;
            }
            let c = u16::from_be_bytes([l4[at], l4[at + 1]]);
            if proto == IpProto::UDP && c == 0 {
                return; // no checksum
            }
            let mut n = checksum::update_sums(c, old_sum, new_sum);
            if proto == IpProto::UDP && n == 0 {
                n = 0xffff;
            }
            l4[at..at + 2].copy_from_slice(&n.to_be_bytes());
        }
        IpProto::ICMP if l4.len() >= 6 && matches!(l4[0], 0 | 8 | 13 | 14) => {
            let old = u16::from_be_bytes([l4[4], l4[5]]);
            l4[4..6].copy_from_slice(&sport.to_be_bytes());
            let c = u16::from_be_bytes([l4[2], l4[3]]);
            l4[2..4].copy_from_slice(&checksum::update16(c, old, sport).to_be_bytes());
        }
        _ => {}
    }
}

/// Translates an ICMPv4 error (`l3`: outer IPv4 header, ICMP error, quoted
/// IPv4 header and at least 8 bytes of its payload) about a translated
/// flow: the quoted packet gets the addresses and ports of `inner_to` (its
/// own checksums updated as far as the quote holds them), the outer
/// destination becomes the quoted packet's new source, and the outer source
/// becomes the quoted packet's new destination when the error came from
/// that endpoint itself. The ICMP checksum is recomputed.
pub fn rewrite_icmp_error4(l3: &mut [u8], inner_to: &Tuple) {
    let h = usize::from(l3[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([l3[2], l3[3]])).min(l3.len());
    let old_inner_dst = [
        l3[h + 8 + 16],
        l3[h + 8 + 17],
        l3[h + 8 + 18],
        l3[h + 8 + 19],
    ];
    {
        let inner = &mut l3[h + 8..total];
        let ih = usize::from(inner[0] & 0x0f) * 4;
        let proto = inner[9];
        let old_sum = checksum::sum(&inner[12..20], 0);
        inner[12..16].copy_from_slice(&addr4(inner_to.src).to_be_bytes());
        inner[16..20].copy_from_slice(&addr4(inner_to.dst).to_be_bytes());
        let new_sum = checksum::sum(&inner[12..20], 0);
        let c = u16::from_be_bytes([inner[10], inner[11]]);
        inner[10..12].copy_from_slice(&checksum::update_sums(c, old_sum, new_sum).to_be_bytes());
        let end = inner.len();
        let l4 = &mut inner[ih.min(end)..];
        rewrite_l4(l4, proto, old_sum, new_sum, inner_to.sport, inner_to.dport);
    }
    // Outer header.
    let old_sum = checksum::sum(&l3[12..20], 0);
    if l3[12..16] == old_inner_dst {
        l3[12..16].copy_from_slice(&addr4(inner_to.dst).to_be_bytes());
    }
    l3[16..20].copy_from_slice(&addr4(inner_to.src).to_be_bytes());
    let new_sum = checksum::sum(&l3[12..20], 0);
    let c = u16::from_be_bytes([l3[10], l3[11]]);
    l3[10..12].copy_from_slice(&checksum::update_sums(c, old_sum, new_sum).to_be_bytes());
    let icmp = &mut l3[h..total];
    icmp[2..4].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
}

/// Rewrites the IPv6 packet `l3` (upper layer `proto` at `off`, its
/// TCP/UDP header or ICMPv6 echo whole) of a masqueraded flow to the
/// addresses and ports of `to` (an echo's identifier: `to.sport`), its
/// checksum adjusted by the flow's `delta` ([`crate::conntrack`]'s NAT66
/// deltas: RFC 1624 over the pseudo-header's addresses and the ports).
pub fn rewrite6_flow(l3: &mut [u8], proto: u8, off: usize, to: &Tuple, delta: u16) {
    l3[8..24].copy_from_slice(&to.src.to_be_bytes());
    l3[24..40].copy_from_slice(&to.dst.to_be_bytes());
    let l4 = &mut l3[off..];
    let at = match proto {
        IpProto::TCP => 16,
        IpProto::UDP => 6,
        _ => 2,
    };
    if proto == IpProto::ICMPV6 {
        l4[4..6].copy_from_slice(&to.sport.to_be_bytes());
    } else {
        l4[0..2].copy_from_slice(&to.sport.to_be_bytes());
        l4[2..4].copy_from_slice(&to.dport.to_be_bytes());
    }
    let c = u16::from_be_bytes([l4[at], l4[at + 1]]);
    let c = checksum::adjust(c, u32::from(delta));
    l4[at..at + 2].copy_from_slice(
        &(if c == 0 && proto == IpProto::UDP {
            0xffff
        } else {
            c
        })
        .to_be_bytes(),
    );
}

/// Translates an ICMPv6 error (`l3`, its ICMPv6 header at `off`) about a
/// masqueraded flow back inside: its destination becomes `client`, the
/// packet it quotes (as the flow's source sent it through the router)
/// gets `client` as its source and `sport` as its source port (an echo's
/// identifier), its own checksum updated as far as the quote holds it,
/// and the ICMPv6 checksum is computed again.
pub fn rewrite_icmp_error6(l3: &mut [u8], off: usize, client: u128, sport: u16) {
    let end = (40 + usize::from(u16::from_be_bytes([l3[4], l3[5]]))).min(l3.len());
    l3[24..40].copy_from_slice(&client.to_be_bytes());
    {
        let q = &mut l3[off + 8..end];
        if q.len() >= 40 {
            let proto = q[6];
            let old = checksum::sum(&q[8..24], 0);
            q[8..24].copy_from_slice(&client.to_be_bytes());
            let new = checksum::sum(&q[8..24], 0);
            let l4 = &mut q[40..];
            let (pat, at) = match proto {
                IpProto::TCP => (0, 16),
                IpProto::UDP => (0, 6),
                _ => (4, 2),
            };
            if l4.len() >= pat + 2 {
                let op = u16::from_be_bytes([l4[pat], l4[pat + 1]]);
                l4[pat..pat + 2].copy_from_slice(&sport.to_be_bytes());
                if l4.len() >= at + 2 {
                    let c = u16::from_be_bytes([l4[at], l4[at + 1]]);
                    if !(proto == IpProto::UDP && c == 0) {
                        let c =
                            checksum::update_sums(c, old + u64::from(op), new + u64::from(sport));
                        l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
                    }
                }
            }
        }
    }
    let (mut s, mut d) = ([0u8; 16], [0u8; 16]);
    s.copy_from_slice(&l3[8..24]);
    d.copy_from_slice(&l3[24..40]);
    let icmp = &mut l3[off..end];
    icmp[2..4].copy_from_slice(&[0, 0]);
    let c = !checksum::fold(checksum::sum(
        icmp,
        checksum::pseudo_v6(s, d, IpProto::ICMPV6, icmp.len() as u32),
    ));
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7422's layout as VPP's det44 computes it: a /22 of subscribers
    /// on a /28 of public addresses, 64 to an address, 1,008 ports each;
    /// every host's every port computed back to it, and nothing outside.
    #[test]
    fn deterministic_blocks_compute_back_to_their_host() {
        let range = PortRange::default();
        let ip = |s: &str| u32::from(s.parse::<std::net::Ipv4Addr>().unwrap());
        let block = Det::max_block(22, 28, &range);
        assert_eq!(block, 1008);
        let d = Det {
            inside: (ip("100.64.0.0"), 22),
            outside: (ip("198.51.100.0"), 28),
            block,
        };
        assert_eq!(d.ratio(), 64);
        assert_eq!(
            d.map(ip("100.64.0.0"), &range),
            Some((ip("198.51.100.0"), 1024))
        );
        assert_eq!(
            d.map(ip("100.64.0.1"), &range),
            Some((ip("198.51.100.0"), 2032))
        );
        assert_eq!(
            d.map(ip("100.64.1.0"), &range),
            Some((ip("198.51.100.4"), 1024))
        );
        assert_eq!(
            d.map(ip("100.64.3.255"), &range),
            Some((ip("198.51.100.15"), 1024 + 63 * 1008))
        );
        assert_eq!(d.map(ip("100.64.4.0"), &range), None);
        for i in 0..1024u32 {
            let host = ip("100.64.0.0") + i;
            let (out, start) = d.map(host, &range).unwrap();
            for p in [start, start + 1, start + block / 2, start + block - 1] {
                assert_eq!(d.inside_of(out, p as u16, &range), Some(host), "{i} {p}");
            }
        }
        // Ports past the last block, below the range, other addresses.
        assert_eq!(
            d.inside_of(ip("198.51.100.0"), (1024 + 64 * 1008) as u16, &range),
            None
        );
        assert_eq!(d.inside_of(ip("198.51.100.0"), 1000, &range), None);
        assert_eq!(d.inside_of(ip("198.51.100.16"), 1024, &range), None);
        // Four workers: 252 ports each of every block.
        assert_eq!(d.share(2032, 3, 4), (2032 + 756, 252));
        assert_eq!(d.owner(2032 + 756, &range, 4), Some(3));
        assert_eq!(d.owner(2032 + 251, &range, 4), Some(0));
        assert_eq!(d.owner(1023, &range, 4), None);
    }

    #[test]
    fn port_slices_are_disjoint_and_cover_the_range() {
        let r = PortRange::default();
        for workers in [1u16, 2, 3, 7, 16] {
            let mut next = r.lo;
            for i in 0..workers {
                let s = r.slice(i, workers).unwrap();
                assert_eq!(s.lo, next, "contiguous");
                assert_eq!(r.owner(s.lo, workers), Some(i));
                assert_eq!(r.owner(s.hi, workers), Some(i));
                next = s.hi.wrapping_add(1);
            }
            assert_eq!(next, 0, "ends at 65535");
            assert_eq!(r.owner(80, workers), None);
        }
        assert!(PortRange { lo: 5000, hi: 5001 }.slice(2, 3).is_none());
    }

    #[test]
    fn dnat_rules_and_statics() {
        let n = NatConfig {
            dnat: vec![Dnat {
                in_port: Some(1),
                proto: Some(IpProto::TCP),
                dst: 0xc613_0001,
                dport: Some(8080),
                to: 0xc612_000a,
                to_port: Some(80),
            }],
            statics: vec![StaticNat {
                inside: 0xc612_0005,
                outside: 0xc613_0005,
            }],
            ..NatConfig::default()
        };
        assert_eq!(
            n.dnat(1, IpProto::TCP, 0xc613_0001, 8080),
            Some((0xc612_000a, 80))
        );
        assert_eq!(n.dnat(0, IpProto::TCP, 0xc613_0001, 8080), None, "port");
        assert_eq!(n.dnat(1, IpProto::UDP, 0xc613_0001, 8080), None, "proto");
        assert_eq!(n.dnat(1, IpProto::TCP, 0xc613_0001, 8081), None);
        assert_eq!(
            n.dnat(0, IpProto::UDP, 0xc613_0005, 53),
            Some((0xc612_0005, 53))
        );
        assert_eq!(n.static_out(0xc612_0005), Some(0xc613_0005));
    }
}
