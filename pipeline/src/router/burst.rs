//! The burst path: plain IPv4 packets are routed in stages over a chunk
//! of the burst (all headers checked, then all routes looked up, then all
//! rewritten), as DPDK's l3fwd does, then the chunk's plain IPv6 packets
//! in the same stages (the IPv6 LPM level by level over all of them);
//! anything else falls back to the per-packet path.

use super::ipv4::martian;
use super::Router;
use crate::fwd::{ForwardMode, Frame, IpCsum, StageCycles};
use crate::verdict::Verdict;
use crate::wire::{IpProto, MacAddr, ETHERNET_HEADER_LEN};

/// Bursts are routed in chunks of this many packets (stack arrays; the
/// LPM's burst lookup takes as many).
const CHUNK: usize = crate::lpm::BURST;
const _: () = assert!(CHUNK <= 64, "a chunk's slow packets are a 64-bit mask");

/// "No route" among a chunk's next hops: above every next-hop slot.
const NO_HOP: u32 = u32::MAX;

/// The stages of the burst path its stage clock charges (`sluice ctl set
/// runtime`), each over a whole chunk: the IPv4 header checks (with each
/// route's first-level prefetch), the IPv4 route lookups, the cached next
/// hops' rewrites, the plain IPv6 packets among those the IPv4 stages did
/// not take (the same three stages for them, see `route6_chunk`), and the
/// packets none of those take (a next hop to resolve, the router's own,
/// ARP, ND, errors: the full path, packet by packet).
pub(super) const STAGES: [&str; 5] = ["parse", "lookup", "rewrite", "ipv6", "slow path"];

/// The burst path's stage clock: off (no clock), nothing is read and the
/// burst path is compiled without its marks; on, each chunk's stages are
/// charged the cycles between the clock's reads that end them, less a
/// read's cost (measured when it is switched on).
#[derive(Clone, Debug, Default)]
pub(super) struct BurstClock {
    clock: Option<StageCycles<{ STAGES.len() }>>,
    read: u64,
    /// Since it was last switched on: the packets, and per stage the
    /// cycles less the reads (refreshed on each tick).
    packets: u64,
    cycles: [u64; STAGES.len()],
}

impl BurstClock {
    /// Whether it runs.
    #[inline(always)]
    pub(super) fn on(&self) -> bool {
        self.clock.is_some()
    }

    /// Switches it on, reading `now`, or off (`None`); on starts the
    /// totals afresh (also when it already runs: VPP's `clear runtime`),
    /// off keeps them.
    pub(super) fn switch(&mut self, now: Option<fn() -> u64>) {
        self.refresh();
        match now {
            Some(n) => {
                *self = BurstClock {
                    clock: Some(StageCycles::new(n)),
                    read: crate::fwd::read_cost(n),
                    ..BurstClock::default()
                };
            }
            None => self.clock = None,
        }
    }

    #[inline(always)]
    fn start(&mut self) {
        if let Some(c) = &mut self.clock {
            c.begin();
        }
    }

    #[inline(always)]
    fn mark(&mut self, stage: usize) {
        if let Some(c) = &mut self.clock {
            c.charge(stage);
        }
    }

    /// `cycles` from the marks so far.
    pub(super) fn refresh(&mut self) {
        if let Some(c) = &self.clock {
            self.cycles = c.net_of_reads(self.read);
        }
    }

    /// Whether it runs, the packets and each stage's cycles since it was
    /// last switched on.
    pub(super) fn totals(&self) -> (bool, u64, &[u64]) {
        (self.on(), self.packets, &self.cycles)
    }
}

/// The destination of a plain IPv4 packet to the port whose MAC is `mac`
/// (see [`mac_word`]) that the fast path can route: a plain header (see
/// [`plain4`]; `nic` the NIC's checksum verdict). 0 for anything else
/// (options, ARP, IPv6, errors, ...), which takes the full path: 0.0.0.0
/// is martian, as the chunk holds such a packet. The destination may
/// still be martian: the burst path tests that for the whole chunk at
/// once ([`unroute_martians`]).
/// The tests are combined without branches (`&` of their truths, not
/// `&&`, and a select for the result): with both families in a burst,
/// whether a packet is IPv4 is a coin toss the branch predictor loses
/// half the time (`sluice-bench gateway --ipv6-rows`: the router alone on
/// both families interleaved cost 1.5× the mean of each alone, grouped
/// per burst 1.0×).
#[inline(always)]
fn fast4(b: &[u8], mac: u64, nic: IpCsum) -> u32 {
    let Some(h) = b
        .get(..ETHERNET_HEADER_LEN + 20)
        .and_then(|h| <&[u8; ETHERNET_HEADER_LEN + 20]>::try_from(h).ok())
    else {
        return 0;
    };
    let eth = u64::from_le_bytes(h[..8].try_into().expect("8 bytes"));
    // The destination MAC (the low 48 bits).
    let ok = ((eth ^ mac) << 16 == 0) & plain4_flat(h, b.len(), nic);
    let d = u32::from_be_bytes(h[30..34].try_into().expect("4 bytes"));
    // A select the compiler keeps without a branch (it had made the
    // checksum's outcome one).
    std::hint::select_unpredictable(ok, d, 0)
}

/// [`plain4`]'s tests of the 34 bytes `h` of a frame of `len` bytes, as
/// one value without a branch on the packet (the NIC's verdict, the same
/// for a port's packets, aside). `plain4` keeps its early returns: the
/// gateway's lanes with it as a wrapper over this counted 4.9
/// instructions a packet more (callgrind, `sluice-bench gateway`, IPv4
/// alone), for no case measured where it would win.
#[inline(always)]
fn plain4_flat(h: &[u8; ETHERNET_HEADER_LEN + 20], len: usize, nic: IpCsum) -> bool {
    let w = |i: usize| u64::from_ne_bytes(h[i..i + 8].try_into().expect("8 bytes"));
    let (x, y) = (w(14), w(22));
    let ty = u32::from_le_bytes(h[12..16].try_into().expect("4 bytes")) & 0x00ff_ffff;
    let total = usize::from(u16::from_be_bytes([h[16], h[17]]));
    let z = u32::from_ne_bytes(h[30..34].try_into().expect("4 bytes"));
    let sum = if nic != IpCsum::UNKNOWN {
        nic_says(nic, x, y, z)
    } else {
        sum_ok(x, y, z)
    };
    (ty == 0x0045_0008)
        & (total.wrapping_sub(20) <= len - (ETHERNET_HEADER_LEN + 20))
        & (h[22] > 1)
        & sum
}

/// Takes the route from every packet of a chunk whose destination is
/// martian (see `martian`; 0, what the chunk holds for a packet the fast
/// path does not take, is one): `nh[i]` becomes `NO_HOP`. One pass
/// without branches or conditional stores over the whole arrays, which
/// the compiler vectorises (about three instructions a packet, counted,
/// where the same test in the header loop took eight).
#[inline(always)]
fn unroute_martians(dst: &[u32; CHUNK], nh: &mut [u32; CHUNK]) {
    const { assert!(NO_HOP == u32::MAX) };
    for (h, &d) in nh.iter_mut().zip(dst) {
        *h |= u32::from(martian(d)).wrapping_neg();
    }
}

/// The destination of a plain IPv6 packet to the port whose MAC is `mac`
/// (see [`mac_word`]) that the fast path can route: version 6, a payload
/// length the frame holds, a hop limit above 1, the upper layer right
/// after the fixed header (TCP, UDP, or ICMPv6 other than a neighbour
/// solicitation or advertisement: no extension header, which the full
/// path walks), and a destination that is not multicast. `None` for
/// anything else, which takes the full path; what the full path checks
/// past this (the router's own address, the route, the output port, the
/// MTU, the neighbour) the IPv6 stage checks or leaves to it.
#[inline(always)]
fn fast6(b: &[u8], mac: u64) -> Option<u128> {
    const L3: usize = ETHERNET_HEADER_LEN;
    let h: &[u8; L3 + 40] = b.get(..L3 + 40)?.try_into().ok()?;
    let eth = u64::from_le_bytes(h[..8].try_into().expect("8 bytes"));
    // The destination MAC, the EtherType and the version.
    if (eth ^ mac) << 16 != 0 || h[12..14] != [0x86, 0xdd] || h[L3] >> 4 != 6 {
        return None;
    }
    let payload = usize::from(u16::from_be_bytes([h[L3 + 4], h[L3 + 5]]));
    if payload > b.len() - (L3 + 40) || h[L3 + 7] <= 1 {
        return None;
    }
    match h[L3 + 6] {
        IpProto::TCP | IpProto::UDP => {}
        IpProto::ICMPV6 if !matches!(b.get(L3 + 40), Some(135 | 136)) => {}
        _ => return None,
    }
    let dst = u128::from_be_bytes(h[L3 + 24..L3 + 40].try_into().expect("16 bytes"));
    // Multicast and link-scoped packets (fe80::/10 either way) are the
    // full way's: one test each way on the top byte, fe00::/7 (the full
    // way forwards fe00::/9 and fec0::/10 as before).
    (dst >> 121 != 0x7f && h[L3 + 8] < 0xfe).then_some(dst)
}

/// Whether frame `b` holds a plain IPv4 packet: a 20-byte header that is
/// valid (version, lengths, checksum) with a TTL above 1 (the gateway's
/// fast check too). The checksum is the NIC's where it verified it (`nic`,
/// [`Frame::ip4_csum`]: `BAD` is not plain), else summed here.
/// The header is read in machine words: the checksum is summed in native
/// byte order, which RFC 1071 (2.B) shows gives the byte-swapped sum, and
/// 0xffff swapped is itself.
#[inline(always)]
pub(crate) fn plain4(b: &[u8], nic: IpCsum) -> bool {
    let Some(h) = b.get(..ETHERNET_HEADER_LEN + 20) else {
        return false;
    };
    let h: &[u8; ETHERNET_HEADER_LEN + 20] = h.try_into().expect("34 bytes");
    // Whole words (one load each): `h` is a fixed array, so the ranges are
    // checked at compile time.
    let w = |i: usize| u64::from_ne_bytes(h[i..i + 8].try_into().expect("8 bytes"));
    let (x, y) = (w(14), w(22));
    // EtherType IPv4 (bytes 12-13) and 0x45 (byte 14): the low three bytes
    // of the little-endian word at 12.
    let ty = u32::from_le_bytes(h[12..16].try_into().expect("4 bytes")) & 0x00ff_ffff;
    if ty != 0x0045_0008 {
        return false;
    }
    // The total length from 20 to what the frame holds past the Ethernet
    // header, as one unsigned compare (the frame holds at least 34).
    let total = usize::from(u16::from_be_bytes([h[16], h[17]]));
    if total.wrapping_sub(20) > b.len() - (ETHERNET_HEADER_LEN + 20) || h[22] <= 1 {
        return false;
    }
    let z = u32::from_ne_bytes(h[30..34].try_into().expect("4 bytes"));
    // No verdict (the usual case without the offload) is one test; the
    // others out of line, where the compiler cannot fold that test into
    // two compares again.
    if nic != IpCsum::UNKNOWN {
        return nic_says(nic, x, y, z);
    }
    sum_ok(x, y, z)
}

/// `plain4`'s checksum test with a verdict from the NIC: good or bad as
/// it says, else (both bits: not checked in the packet) summed here.
#[cold]
#[inline(never)]
fn nic_says(nic: IpCsum, x: u64, y: u64, z: u32) -> bool {
    match nic {
        IpCsum::GOOD => true,
        IpCsum::BAD => false,
        _ => sum_ok(x, y, z),
    }
}

/// Whether an IPv4 header's checksum verifies, from its 20 bytes read as
/// two 64-bit words (`x`, `y`) and a 32-bit one (`z`) in native order.
#[inline(always)]
fn sum_ok(x: u64, y: u64, z: u32) -> bool {
    // The header's ones-complement sum must be 0xffff. That sum is the
    // 16-bit words' plain sum folded, which keeps it modulo 0xffff (2^16 =
    // 1 modulo 0xffff), in 1..=0xffff for a sum above 0 (this header's is:
    // its byte 14 is 0x45). So the test is that the plain sum is a
    // multiple of 0xffff, and words of 32 or 64 bits sum to the same
    // thing modulo 0xffff as their 16-bit halves do (2^32 and 2^64 are 1
    // too): the two 64-bit and one 32-bit word are added exactly (in 128
    // bits), the carries above 2^64 added back in, and the divisibility
    // test is a multiply and a compare.
    let s = u128::from(x) + u128::from(y) + u128::from(z);
    let (v, o) = (s as u64).overflowing_add((s >> 64) as u64);
    // After a wrap `v` is at most 1: adding the carry cannot wrap again.
    (v + u64::from(o)) % 0xffff == 0
}

/// A MAC as `fast4` compares it: the 6 bytes as the low 48 bits of a
/// little-endian word.
#[inline]
fn mac_word(m: MacAddr) -> u64 {
    let m = m.0;
    u64::from_le_bytes([m[0], m[1], m[2], m[3], m[4], m[5], 0, 0])
}

/// A next hop resolved for the burst path, DPDK l3fwd's per-port
/// `val_eth` kept per next-hop slot: the Ethernet addresses it writes (the
/// gateway's MAC, then the output port's), the output port and its MTU.
/// Valid until the router's generation changes, which empties the table
/// (`Router::bump`): a change of neighbours or interfaces bumps it, and so
/// does a slot given a next hop (the FIB's `hops_version`; it reuses a
/// slot only after every worker has left the round that could have seen
/// it). Routes moving between next hops leave it valid: every packet's
/// route is looked up. A slot not filled is the default, whose MTU of 0
/// no packet fits: the MTU test is the validity test too.
/// Only single-path routes via a gateway on a port are kept (a connected
/// route's MAC depends on the destination, a multipath route's path on
/// the flow). 16-byte aligned: never split over two cache lines.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(16))]
pub(super) struct Adj {
    eth: [u8; 12],
    port: u16,
    mtu: u16,
}

impl Adj {
    /// To the gateway at `mac` out of `port` (MAC `out_mac`, MTU `mtu`).
    fn new(mac: MacAddr, out_mac: MacAddr, port: u16, mtu: u16) -> Adj {
        let mut eth = [0u8; 12];
        eth[..6].copy_from_slice(&mac.0);
        eth[6..].copy_from_slice(&out_mac.0);
        Adj { eth, port, mtu }
    }

    /// Kept in `table` as next hop `nh`'s (the table grows to it; a slot
    /// past the FIB's is not kept).
    fn keep(self, table: &mut Vec<Adj>, nh: u32) {
        let i = nh as usize;
        if i >= crate::fib::HOP_SLOTS {
            return;
        }
        if table.len() <= i {
            table.resize(i + 1, Adj::default());
        }
        table[i] = self;
    }
}

/// Forwards a packet `fast4` accepted over `a`: TTL decremented with its
/// checksum updated (RFC 1624), MACs written. False, and nothing changed,
/// when it is larger than the output MTU.
#[inline(always)]
fn rewrite4(b: &mut [u8], a: &Adj) -> bool {
    let Some(h) = b
        .get_mut(..ETHERNET_HEADER_LEN + 12)
        .and_then(|h| <&mut [u8; ETHERNET_HEADER_LEN + 12]>::try_from(h).ok())
    else {
        return false;
    };
    if u16::from_be_bytes([h[16], h[17]]) > a.mtu {
        return false;
    }
    super::ipv4::dec_ttl4(h);
    h[..12].copy_from_slice(&a.eth);
    true
}

/// Forwards a packet `fast6` accepted over `a`: hop limit decremented
/// (IPv6 has no header checksum), MACs written. False, and nothing
/// changed, when it is larger than the output MTU.
#[inline(always)]
fn rewrite6(b: &mut [u8], a: &Adj) -> bool {
    let Some(h) = b
        .get_mut(..ETHERNET_HEADER_LEN + 8)
        .and_then(|h| <&mut [u8; ETHERNET_HEADER_LEN + 8]>::try_from(h).ok())
    else {
        return false;
    };
    let payload = u32::from(u16::from_be_bytes([h[18], h[19]]));
    if payload + 40 > u32::from(a.mtu) || h[21] <= 1 {
        return false;
    }
    h[21] -= 1;
    h[..12].copy_from_slice(&a.eth);
    true
}

impl Router {
    /// The per-packet loop, out of line (a port without an interface).
    #[cold]
    #[inline(never)]
    pub(super) fn process_each_cold<P: Frame>(
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
    pub(super) fn forward_fast(
        &mut self,
        pkt: &mut impl Frame,
        dst: u32,
        lpm_nh: u32,
    ) -> Option<Verdict> {
        let l3 = &pkt.bytes()[ETHERNET_HEADER_LEN..];
        let (nh, hop) = self.cfg.fib.path(lpm_nh, || Router::flow_hash(l3))?;
        if hop.port >= self.ports {
            return None; // a VLAN sub-interface: tagged on the full path
        }
        let oif = self.iface(hop.port).filter(|i| !i.down)?;
        let (out_mac, mtu) = (oif.mac, oif.mtu);
        let mac = self.hop_mac4(nh, hop, dst).ok()?;
        let a = Adj::new(mac, out_mac, hop.port, mtu);
        if nh == lpm_nh && hop.via.is_some() {
            a.keep(&mut self.adj4, nh);
        }
        // The cached path's rewrite (MTU, TTL, checksum, MACs).
        rewrite4(pkt.bytes_mut(), &a).then_some(Verdict::Forward(hop.port))
    }

    /// The destination of frame `b` if it is a plain IPv6 packet to the
    /// port whose MAC is `mac` ([`fast6`]) for another host than the
    /// router: what the IPv6 stage and the slow path's IPv6 resolution
    /// take.
    #[inline(always)]
    fn plain6(&self, b: &[u8], mac: u64) -> Option<u128> {
        fast6(b, mac).filter(|&d| !self.is_local6_global(d))
    }

    /// [`Router::forward_fast`] for a packet `fast6` accepted, addressed
    /// to `dst` (not the router's), whose route is next hop `lpm_nh`: the
    /// next hop resolved, cached in `adj6` when it is a single gateway,
    /// and the packet forwarded (hop limit, MACs), or `None`, nothing
    /// changed, when it needs the full path (no path, a VLAN
    /// sub-interface, a port down, no fresh neighbour, over the MTU).
    fn forward_fast6(&mut self, pkt: &mut impl Frame, dst: u128, lpm_nh: u32) -> Option<Verdict> {
        let l3 = &pkt.bytes()[ETHERNET_HEADER_LEN..];
        let (nh, hop) = self.cfg.fib.path(lpm_nh, || Router::flow_hash(l3))?;
        if hop.port >= self.ports {
            return None;
        }
        let oif = self.iface(hop.port).filter(|i| !i.down)?;
        let (out_mac, mtu) = (oif.mac, oif.mtu);
        let mac = self.hop_mac6(hop, dst).ok()?;
        let a = Adj::new(mac, out_mac, hop.port, mtu);
        if nh == lpm_nh && matches!(hop.via, Some(std::net::IpAddr::V6(_))) {
            a.keep(&mut self.adj6, nh);
        }
        rewrite6(pkt.bytes_mut(), &a).then_some(Verdict::Forward(hop.port))
    }

    /// A packet the cached next hops do not take: the next hop resolved
    /// (and cached, see `Adj`), or the full path. `nh` is an IPv4
    /// packet's route from the burst's lookup; without one, a plain IPv6
    /// packet (`fast6`, the port's MAC `mac`) is looked up here. Out of
    /// line, so that the burst loop stays small.
    #[inline(never)]
    fn route_slow<P: Frame>(
        &mut self,
        pkt: &mut P,
        in_port: u16,
        dst: u32,
        nh: Option<u32>,
        mac: u64,
    ) -> Verdict {
        let fast = match nh {
            Some(h) => self.forward_fast(pkt, dst, h),
            None => self
                .plain6(pkt.bytes(), mac)
                .and_then(|d| Some((d, self.cfg.fib.lpm6().lookup(d)?)))
                .and_then(|(d, h)| self.forward_fast6(pkt, d, h)),
        };
        match fast {
            Some(v) => v,
            None => self.process(pkt, in_port),
        }
    }

    /// The plain IPv6 packets among a chunk's packets the IPv4 stages did
    /// not take (`rest`), routed in the same stages: headers checked (each
    /// route's first-level entry prefetched), routes looked up level by
    /// level over all of them ([`crate::lpm::Lpm6::lookup_burst`]), and
    /// those whose next hop is cached (`adj6`) rewritten, their verdicts
    /// written to `vc`. Returns what is left of `rest` (a next hop to
    /// resolve or cache, anything `fast6` refuses: the slow path's, in
    /// order) and, if any packet was forwarded, the first one's verdict
    /// and whether all of theirs were that one. Out of line, taking and
    /// returning values (no address of the burst loop's state taken): a
    /// chunk of IPv4 alone never calls it.
    #[inline(never)]
    fn route6_chunk<P: Frame>(
        &mut self,
        pc: &mut [P],
        vc: &mut [Verdict],
        mac: u64,
        mut rest: u64,
    ) -> (u64, Option<(Verdict, bool)>) {
        let mut at = [0u8; CHUNK];
        let mut dst = [0u128; CHUNK];
        let mut n = 0;
        let lpm = self.cfg.fib.lpm6();
        let mut r = rest;
        while r != 0 {
            let i = r.trailing_zeros() as usize;
            r &= r - 1;
            let Some(p) = pc.get(i) else { break };
            if let Some(d) = self.plain6(p.bytes(), mac) {
                P::prefetch(lpm.entry_of(d));
                at[n] = i as u8;
                dst[n] = d;
                n += 1;
            }
        }
        if n == 0 {
            return (rest, None);
        }
        let mut nh = [NO_HOP; CHUNK];
        lpm.lookup_burst(&dst[..n], &mut nh, NO_HOP);
        let adj = &self.adj6[..];
        let mut first: Option<Verdict> = None;
        let mut same = true;
        for (&i, h) in at[..n].iter().zip(&nh) {
            let i = usize::from(i);
            let (Some(a), Some(p), Some(v)) = (adj.get(*h as usize), pc.get_mut(i), vc.get_mut(i))
            else {
                continue;
            };
            if !rewrite6(p.bytes_mut(), a) {
                continue;
            }
            *v = Verdict::Forward(a.port);
            rest &= !(1 << i);
            match first {
                None => first = Some(*v),
                Some(f) => same &= f == *v,
            }
        }
        (rest, first.map(|f| (f, same)))
    }

    /// Routes a burst in stages, as DPDK's l3fwd does: the headers of all
    /// packets are checked first, then all routes are looked up, then the
    /// packets are rewritten, so that the CPU overlaps the packets' loads
    /// instead of running one packet's chain of dependent loads (header,
    /// LPM entry, next hop, interface, neighbour) after another. Packets
    /// the fast path does not take (see `fast4`; local, unrouted, over the
    /// MTU, unresolved next hop) go through `process`, so the verdicts and
    /// events are those of `process`, packet by packet.
    /// With `CLOCKED`, the stage clock charges each chunk's stages
    /// (`BurstClock`; the marks are compiled out without).
    pub(super) fn route_burst<P: Frame, const CLOCKED: bool>(
        &mut self,
        pkts: &mut [P],
        in_port: u16,
        verdicts: &mut [Verdict],
    ) -> Option<Verdict> {
        // A port that is down: every packet the full way (dropped there).
        let Some(mac) = self
            .iface(in_port)
            .filter(|i| !i.down)
            .map(|i| mac_word(i.mac))
        else {
            return self.process_each_cold(pkts, in_port, verdicts);
        };
        // Whether every verdict is the same, tracked apart for the two
        // paths: the cached path's output port (the first, and whether
        // another differed), the slow path's verdicts as verdicts
        // (comparing enums per packet measured a jump table).
        let mut fast: Option<u16> = None;
        let mut mixed = false;
        let mut slow: Option<Verdict> = None;
        let mut same = true;
        // The cached path's verdicts are written only when the burst's
        // are not all one (`process_burst` leaves them unwritten then):
        // each chunk's slow packets (a mask) and the port all its fast
        // packets took, for the first `LAZY` chunks; a chunk whose fast
        // packets took different ports, or one past those, writes them
        // at once.
        let mut lazy = [(u64::MAX, 0u16); LAZY];
        let n = pkts.len().min(verdicts.len());
        if CLOCKED {
            self.clock.packets += n as u64;
        }
        for (k, (pc, vc)) in pkts[..n]
            .chunks_mut(CHUNK)
            .zip(verdicts[..n].chunks_mut(CHUNK))
            .enumerate()
        {
            if CLOCKED {
                self.clock.start();
            }
            // Headers checked for the whole chunk, then routes looked up
            // in a loop of their own, so that many lookups' loads (cache
            // and TLB misses on a full table) are in flight at once. Each
            // packet's first-level entry is prefetched as soon as its
            // destination is known: the misses then overlap the header
            // checks of the packets after it, instead of all waiting in
            // the lookup loop (on the full table 13 % more packets a
            // second, per round of alternating runs; two instructions a
            // packet).
            // No route is `NO_HOP`, past every slot: `adj4.get` misses it
            // without a test of its own.
            let mut dst = [0u32; CHUNK];
            let mut nh = [NO_HOP; CHUNK];
            // 0 (martian) for a packet the fast path does not take.
            let lpm = self.cfg.fib.lpm4();
            let first = lpm.first();
            for (p, d) in pc.iter().zip(dst.iter_mut()) {
                let a = fast4(p.bytes(), mac, p.ip4_csum());
                *d = std::hint::select_unpredictable(self.is_local4(a), 0, a);
                P::prefetch(first.entry_of(*d));
            }
            if CLOCKED {
                self.clock.mark(0);
            }
            lpm.lookup_burst(&dst[..pc.len()], &mut nh, NO_HOP);
            // From here on a packet the fast path does not take, or one
            // to a martian destination, has no route: the cached next
            // hops miss it.
            unroute_martians(&dst, &mut nh);
            if CLOCKED {
                self.clock.mark(1);
            }
            // The cached next hops first, in a loop without calls (the
            // table's address stays in a register, each packet's output
            // port goes to an array of its own: no chain from packet to
            // packet); the packets they do not take are marked and then
            // go the resolving way in order. A slow packet's effects (a
            // neighbour learned, the cache refilled) reach the chunk's
            // fast packets only from the next chunk on, as if those had
            // arrived just before it.
            // A chunk whose packets all have a route (one family, no
            // exceptions) is rewritten in a plain loop; one with packets
            // of no route (the other family's among them) visits only
            // those with one, the bits of a mask made without branches:
            // a test per packet of which it is would be a coin toss the
            // branch predictor loses.
            let adj = &self.adj4[..];
            let all = u64::MAX >> (64 - pc.len());
            let mut routed = 0u64;
            for (i, h) in nh[..pc.len()].iter().enumerate() {
                routed |= u64::from(*h != NO_HOP) << i;
            }
            let mut rest = all & !routed;
            let mut outp = [0u16; CHUNK];
            if routed == all {
                for (i, (p, h)) in pc.iter_mut().zip(&nh).enumerate() {
                    match adj.get(*h as usize) {
                        Some(a) if rewrite4(p.bytes_mut(), a) => outp[i] = a.port,
                        _ => rest |= 1 << i,
                    }
                }
            } else {
                while routed != 0 {
                    let i = routed.trailing_zeros() as usize;
                    routed &= routed - 1;
                    let (Some(a), Some(p)) = (adj.get(nh[i] as usize), pc.get_mut(i)) else {
                        rest |= 1 << i;
                        continue;
                    };
                    if rewrite4(p.bytes_mut(), a) {
                        outp[i] = a.port;
                    } else {
                        rest |= 1 << i;
                    }
                }
            }
            // The fast packets' ports all the first one's: the slow
            // packets' entries set to it, then one pass the compiler
            // vectorises.
            if rest != all {
                let p0 = outp[(!rest).trailing_zeros() as usize];
                let mut r = rest;
                while r != 0 {
                    outp[r.trailing_zeros() as usize] = p0;
                    r &= r - 1;
                }
                let differ = outp[..pc.len()].iter().fold(0, |m, &p| m | (p ^ p0));
                mixed |= differ != 0 || fast.is_some_and(|f| f != p0);
                fast = Some(p0);
                match lazy.get_mut(k) {
                    Some(l) if differ == 0 => *l = (rest, p0),
                    _ => write_fast(vc, rest, &outp),
                }
            }
            if CLOCKED {
                self.clock.mark(2);
            }
            if rest != 0 {
                let (r, v6) = self.route6_chunk(pc, vc, mac, rest);
                rest = r;
                if let Some((v, all)) = v6 {
                    same &= all;
                    match slow {
                        None => slow = Some(v),
                        Some(s) => same &= s == v,
                    }
                }
            }
            if CLOCKED {
                self.clock.mark(3);
            }
            while rest != 0 {
                let i = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                let h = (nh[i] != NO_HOP).then_some(nh[i]);
                let v = self.route_slow(&mut pc[i], in_port, dst[i], h, mac);
                vc[i] = v;
                match slow {
                    None => slow = Some(v),
                    Some(s) => same &= s == v,
                }
            }
            if CLOCKED {
                self.clock.mark(4);
            }
        }
        let one = match (fast, slow) {
            _ if !same || mixed => None,
            (None, s) => s,
            (Some(p), None) => Some(Verdict::Forward(p)),
            (Some(p), Some(s)) => (s == Verdict::Forward(p)).then_some(s),
        };
        if one.is_none() {
            for (vc, &(rest, p)) in verdicts[..n].chunks_mut(CHUNK).zip(&lazy) {
                write_fast(vc, rest, &[p; CHUNK]);
            }
        }
        one
    }
}

/// How many chunks of a burst keep their cached path's verdicts unwritten
/// until the burst's end (see `route_burst`): 256 packets.
const LAZY: usize = 8;

/// Writes the verdicts of a chunk's packets that took the cached path
/// (those not in `rest`): forwarded to `outp[i]`.
#[cold]
fn write_fast(vc: &mut [Verdict], rest: u64, outp: &[u16; CHUNK]) {
    // Every entry written, each a select without a branch: with both
    // families in a chunk the slow packets' bits are a coin toss.
    for (i, (v, &p)) in vc.iter_mut().zip(outp).enumerate() {
        *v = std::hint::select_unpredictable(rest & (1 << i) == 0, Verdict::Forward(p), *v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum;
    use rand::{Rng, RngExt, SeedableRng};

    const MAC: MacAddr = MacAddr([2, 0x51, 0, 0, 0, 0]);

    /// A frame to `MAC` with a random IPv4 header (version 4, IHL 5, TTL
    /// at least 2, a unicast destination, a total length that fits) and
    /// its checksum: valid, or (`corrupt`) off by a random nonzero value.
    fn frame(rng: &mut impl Rng, corrupt: bool) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        rng.fill(&mut f[..]);
        f[..6].copy_from_slice(&MAC.0);
        f[12..15].copy_from_slice(&[0x08, 0x00, 0x45]);
        f[16..18].copy_from_slice(&rng.random_range(20u16..=46).to_be_bytes());
        f[22] = rng.random_range(2..=255);
        f[30] = rng.random_range(1..224);
        if f[30] == 127 {
            f[30] = 128;
        }
        f[24..26].fill(0);
        let mut c = checksum::checksum(&f[14..34]);
        if corrupt {
            c = c.wrapping_add(rng.random_range(1..=0xfffe));
        }
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f
    }

    /// `fast4`'s checksum test (native-order words, their sum a multiple
    /// of 0xffff) takes exactly the headers whose RFC 1071 checksum
    /// verifies, over random headers, valid and corrupted, and the edge
    /// sums.
    #[test]
    fn fast_header_check_is_the_full_checksum() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1624);
        let mac = mac_word(MAC);
        for i in 0..20_000 {
            let f = frame(&mut rng, i % 2 == 1);
            let valid = checksum::checksum(&f[14..34]) == 0;
            assert_eq!(
                valid,
                i % 2 == 0 || checksum::fold(checksum::sum(&f[14..34], 0)) == 0xffff
            );
            assert_eq!(
                fast4(&f, mac, IpCsum::UNKNOWN) != 0,
                valid,
                "header {:02x?}",
                &f[14..34]
            );
        }
        // A header summing to 0 before the checksum (checksum 0xffff),
        // and one whose checksum field is 0.
        let mut f = frame(&mut rng, false);
        f[14..34].fill(0);
        f[14] = 0x45;
        f[17] = 20;
        f[22] = 2;
        f[30] = 1;
        let c = checksum::checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        assert!(fast4(&f, mac, IpCsum::UNKNOWN) != 0);
        let s = u16::from_be_bytes([f[24], f[25]]);
        f[24..26].copy_from_slice(&(!s).to_be_bytes());
        assert!(fast4(&f, mac, IpCsum::UNKNOWN) == 0);
    }

    /// The NIC's checksum verdict replaces the checksum test and nothing
    /// else: a header it calls good is plain whatever its sum, one it
    /// calls bad is not, one it did not check is summed, and the other
    /// fields are still checked.
    #[test]
    fn the_nics_verdict_replaces_only_the_checksum_test() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1071);
        let mac = mac_word(MAC);
        for i in 0..2_000 {
            let f = frame(&mut rng, i % 2 == 1);
            assert!(fast4(&f, mac, IpCsum::GOOD) != 0);
            assert!(fast4(&f, mac, IpCsum::BAD) == 0);
            // Both bits (DPDK's `_NONE`: not checked in the packet): the
            // header is summed here.
            let both = IpCsum(IpCsum::GOOD.0 | IpCsum::BAD.0);
            assert_eq!(fast4(&f, mac, both) != 0, i % 2 == 0);
            assert_eq!(IpCsum::from_ol_flags(0xff).ok(), None);
            let mut g = f.clone();
            g[22] = 1; // TTL 1
            assert!(fast4(&g, mac, IpCsum::GOOD) == 0);
            let mut g = f.clone();
            g[14] = 0x46; // options
            assert!(fast4(&g, mac, IpCsum::GOOD) == 0);
            let mut g = f.clone();
            g[16..18].copy_from_slice(&47u16.to_be_bytes()); // past the frame
            assert!(fast4(&g, mac, IpCsum::GOOD) == 0);
            let mut g = f;
            g[0] ^= 1; // another MAC
            assert!(fast4(&g, mac, IpCsum::GOOD) == 0);
        }
    }

    /// `rewrite4`'s TTL decrement leaves exactly the checksum a full
    /// recomputation gives, over random headers (every checksum value
    /// occurs, 0x0000 and 0xfeff among them).
    #[test]
    fn ttl_decrement_checksum_is_the_recomputed_one() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1141);
        let a = Adj {
            eth: [7; 12],
            port: 1,
            mtu: 1500,
        };
        let mut seen = [false; 2];
        for _ in 0..50_000 {
            let mut f = frame(&mut rng, false);
            let ttl = f[22];
            let before = u16::from_be_bytes([f[24], f[25]]);
            seen[0] |= before == 0;
            seen[1] |= before == 0xfeff;
            assert!(rewrite4(&mut f, &a));
            assert_eq!(f[22], ttl - 1);
            assert_eq!(f[..12], [7; 12]);
            let got = u16::from_be_bytes([f[24], f[25]]);
            f[24..26].fill(0);
            assert_eq!(
                got,
                checksum::checksum(&f[14..34]),
                "TTL {ttl}, checksum {before:#06x}"
            );
        }
        // Over the MTU: untouched.
        let mut f = frame(&mut rng, false);
        let before = f.clone();
        assert!(!rewrite4(&mut f, &Adj { mtu: 19, ..a }));
        assert_eq!(f, before);
    }
}
