//! testpmd's forwarding modes as per-packet transforms.
//!
//! Each mode is a type implementing [`ForwardMode`]; the worker loop is
//! generic over it, so the mode is chosen once at start-up and the loop is
//! monomorphised (no per-packet dispatch). The output port is the input
//! port's peer, as in testpmd's default `paired` port topology.

use crate::verdict::{DropReason, Verdict};
use crate::wire::{
    EtherType, EthernetFrame, IpProto, Ipv4Packet, Ipv6Packet, L4Ports, MacAddr,
    ETHERNET_HEADER_LEN,
};

/// A packet as a forwarding stage sees it: bytes it may rewrite, and a
/// length it may change (to turn a packet into an ICMP error or an ARP
/// reply in place). `pmd`'s buffers implement it; so does `Vec<u8>` for
/// tests.
pub trait Frame {
    /// The packet bytes.
    fn bytes(&self) -> &[u8];
    /// The packet bytes, mutable.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// Sets the length (new bytes at the end are unspecified); false, and
    /// unchanged, when the buffer is too small.
    fn set_len(&mut self, len: usize) -> bool;
    /// Removes `n` bytes from the front (a VLAN tag's room); false, and
    /// unchanged, when the frame is shorter. None by default.
    fn cut_front(&mut self, _n: usize) -> bool {
        false
    }
    /// Adds `n` bytes at the front (unspecified; room for VLAN tags);
    /// false, and unchanged, without the headroom. None by default.
    fn grow_front(&mut self, _n: usize) -> bool {
        false
    }
    /// The NIC's verdict on the frame's IPv4 header checksum, where the
    /// port verifies it (DPDK's `RTE_ETH_RX_OFFLOAD_IPV4_CKSUM`: the
    /// mbuf's `RX_IP_CKSUM_GOOD` or `_BAD`): [`IpCsum::GOOD`] verified, so
    /// the fast paths skip their own check; [`IpCsum::BAD`] bad, so the
    /// packet takes the full path, which checks it again and drops it
    /// counted; anything else not verified (checked in software).
    /// [`IpCsum::UNKNOWN`] by default.
    #[inline(always)]
    fn ip4_csum(&self) -> IpCsum {
        IpCsum::UNKNOWN
    }
    /// Starts loading the cache line at `addr` (a hint: it never faults
    /// and changes nothing). The buffer type knows the platform's
    /// instruction, so that a stage's loop issues it inline where the
    /// address becomes known (the router's header loop, the route's
    /// first-level entry). Nothing by default.
    #[inline(always)]
    fn prefetch(_addr: *const u8) {}
}

/// A NIC's verdict on a received IPv4 header checksum
/// ([`Frame::ip4_csum`]), as DPDK's mbuf carries it: the
/// `RX_IP_CKSUM_GOOD` (0x80) and `_BAD` (0x10) bits of `ol_flags`, so that
/// a DPDK port's verdict is one masked byte, and no verdict (a port
/// without the offload) one test in the fast paths. Both bits (`_NONE`,
/// not checked in the packet) or neither (unknown) are no verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpCsum(pub u8);

impl IpCsum {
    /// Not verified by the NIC.
    pub const UNKNOWN: IpCsum = IpCsum(0);
    /// The NIC found the header checksum wrong.
    pub const BAD: IpCsum = IpCsum(0x10);
    /// The NIC verified the header checksum.
    pub const GOOD: IpCsum = IpCsum(0x80);
    /// The verdict bits of an mbuf's `ol_flags`.
    #[inline(always)]
    pub fn from_ol_flags(flags: u64) -> IpCsum {
        IpCsum(flags as u8 & (Self::GOOD.0 | Self::BAD.0))
    }
    /// The verdict: `Some(true)` good, `Some(false)` bad, `None` none.
    pub fn ok(self) -> Option<bool> {
        match self {
            Self::GOOD => Some(true),
            Self::BAD => Some(false),
            _ => None,
        }
    }
}

impl From<Option<bool>> for IpCsum {
    fn from(v: Option<bool>) -> IpCsum {
        match v {
            Some(true) => Self::GOOD,
            Some(false) => Self::BAD,
            None => Self::UNKNOWN,
        }
    }
}

/// A frame from a port whose NIC verifies IPv4 header checksums (its
/// verdict, or `None`), for tests.
#[cfg(test)]
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NicFrame(pub Vec<u8>, pub Option<bool>);

#[cfg(test)]
impl Frame for NicFrame {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
    fn set_len(&mut self, len: usize) -> bool {
        Frame::set_len(&mut self.0, len)
    }
    fn ip4_csum(&self) -> IpCsum {
        self.1.into()
    }
}

impl Frame for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
    fn set_len(&mut self, len: usize) -> bool {
        self.resize(len, 0);
        true
    }
    fn cut_front(&mut self, n: usize) -> bool {
        if n > self.len() {
            return false;
        }
        self.drain(..n);
        true
    }
    fn grow_front(&mut self, n: usize) -> bool {
        self.splice(0..0, std::iter::repeat_n(0, n));
        true
    }
}

/// A forwarding mode: transforms one packet in place and names its output.
/// Each worker owns its own instance (per-core state needs no locks).
pub trait ForwardMode: Clone + Send + 'static {
    /// The mode's name as in testpmd's `--forward-mode`.
    const NAME: &'static str;

    /// Processes one packet received on `in_port`.
    fn process<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict;

    /// Called with each received burst before any of its packets is
    /// processed, so a stage with large tables can start the reads the
    /// packets will need (`pf` prefetches an address; DPDK's l3fwd and
    /// rte_hash_lookup_bulk do the same). A hint only: `process` must not
    /// depend on it.
    #[inline]
    fn prefetch<P: Frame>(&mut self, _pkts: &[P], _pf: fn(*const u8)) {}

    /// The verdict of every packet received on `in_port`, when it does not
    /// depend on the packet (io): the worker then skips the per-packet
    /// calls and hands whole bursts on.
    #[inline]
    fn burst_verdict(&self, _in_port: u16) -> Option<Verdict> {
        None
    }

    /// Processes a burst received on `in_port`. Returns `Some(v)` when
    /// every packet's verdict is `v` (then `verdicts` may be left
    /// unwritten), else `None` with `verdicts[i]` the verdict of
    /// `pkts[i]`. The default calls [`ForwardMode::process`] per packet; a
    /// mode whose verdict rarely depends on the packet (macswap) can do
    /// the burst in one tight loop.
    #[inline]
    fn process_burst<P: Frame>(
        &mut self,
        pkts: &mut [P],
        in_port: u16,
        verdicts: &mut [Verdict],
    ) -> Option<Verdict> {
        process_each(self, pkts, in_port, verdicts)
    }

    /// Called by the worker before the first packet of a poll round and
    /// [`ForwardMode::leave`] after the last: between them the stage may
    /// read tables a control thread changes in place (which reuses what
    /// it unlinks only once every worker has left; see `rcu`).
    #[inline]
    fn enter(&mut self) {}

    /// See [`ForwardMode::enter`].
    #[inline]
    fn leave(&mut self) {}

    /// Whether the stage has packets of its own to send ([`ForwardMode::emit`]):
    /// asked after each poll round that had packets.
    #[inline]
    fn pending(&self) -> bool {
        false
    }

    /// Hands the stage's own packets (not in any received buffer: packets
    /// held for ARP that can go now) to `send(port, frame)`, which copies
    /// each into a fresh buffer for `port`'s TX queue and returns false
    /// when it has none. Called between [`ForwardMode::enter`] and
    /// [`ForwardMode::leave`] when [`ForwardMode::pending`] says so.
    fn emit(&mut self, _send: &mut dyn FnMut(u16, &[u8]) -> bool) {}

    /// Called once per poll round with the current time (ns, monotonic).
    #[inline]
    fn tick(&mut self, _now_ns: u64) {}

    /// The worker is stopping: what the stage says as it goes (the
    /// router's final Router Advertisements) is made [`ForwardMode::pending`],
    /// and sent by the worker's last rounds.
    fn stopping(&mut self) {}

    /// The names of the mode's event counters (slow-path work done), in
    /// the order of [`ForwardMode::events`]; each stage names its own
    /// ([`crate::events`]).
    const EVENTS: &'static [&'static str] = &[];

    /// The event counters, as many as [`ForwardMode::EVENTS`] names; empty
    /// for modes without any.
    fn events(&self) -> &[u64] {
        &[]
    }

    /// The names of the mode's gauges (levels, such as table occupancy), in
    /// the order of [`ForwardMode::gauges`].
    const GAUGES: &'static [&'static str] = &[];

    /// The gauges, as many as [`ForwardMode::GAUGES`] names (refreshed by
    /// [`ForwardMode::tick`]).
    fn gauges(&self) -> &[u64] {
        &[]
    }

    /// The names of the stages the mode's stage clock profiles, in the
    /// order of [`ForwardMode::stage_clock`] (`sluice ctl show runtime`).
    const STAGES: &'static [&'static str] = &[];

    /// The stage clock (`sluice ctl set runtime`): whether it runs, and
    /// since it was last switched on the packets the mode processed and
    /// the cycles they spent in each stage, as [`ForwardMode::STAGES`]
    /// names them (refreshed by [`ForwardMode::tick`]). `None` for a mode
    /// without one.
    fn stage_clock(&self) -> Option<(bool, u64, &[u64])> {
        None
    }

    /// A page of the mode's tracked flows, on request from the control
    /// path (never per packet): see [`crate::conntrack::ConnTrack::copy_flows`].
    fn dump(
        &self,
        _from: usize,
        _scan: usize,
        _max: usize,
        _filter: &crate::conntrack::Filter,
        _out: &mut Vec<crate::conntrack::Listed>,
    ) -> Option<usize> {
        None
    }

    /// Deletes tracked flows, a page at a time, on request from the
    /// control path (never per packet): see
    /// [`crate::conntrack::ConnTrack::delete_flows`]. How many, and where
    /// to go on from.
    fn delete_flows(
        &mut self,
        _from: usize,
        _scan: usize,
        _filter: &crate::conntrack::Filter,
    ) -> (u64, Option<usize>) {
        (0, None)
    }

    /// Tracks flows read back (`[ha] state_file`: a restart), before the
    /// worker runs, with its clock at `now_ns`: how many were installed,
    /// and how many refused (one of its tuples tracked already, or the
    /// table full). A mode without a flow table refuses them all.
    fn install_flows(
        &mut self,
        flows: &[crate::conntrack::saved::Saved],
        _now_ns: u64,
    ) -> (u64, u64) {
        (0, flows.len() as u64)
    }

    /// Applies a change the HA peer sent (control path, at a tick): see
    /// [`crate::conntrack::ConnTrack::apply`]. A mode without a flow
    /// table refuses it.
    fn apply_sync(&mut self, _c: &crate::conntrack::sync::Change) -> bool {
        false
    }

    /// A step of a bulk sync for the HA peer: see
    /// [`crate::conntrack::ConnTrack::bulk`].
    fn bulk_sync(&mut self, _from: usize, _scan: usize) -> Option<usize> {
        None
    }

    /// A step of writing the records of the flows still open as the
    /// worker stops (flow export): see
    /// [`crate::conntrack::ConnTrack::export_open`].
    fn export_open(&mut self, _from: usize, _end: bool) -> Option<usize> {
        None
    }

    /// Takes new settings while running (a hot reload), between bursts:
    /// `update` is the mode's own update type
    /// ([`crate::router::RouterUpdate`], [`crate::gateway::GatewayUpdate`]).
    /// False when the mode does not understand it (and nothing changed).
    fn reconfigure(&mut self, _update: &dyn std::any::Any) -> bool {
        false
    }

    /// What this worker learned that the others running the mode need
    /// (neighbours resolved by ARP/ND replies that reached this worker's
    /// queue), taken every publishing period; the caller hands it to the
    /// other workers' [`ForwardMode::reconfigure`].
    fn take_learned(&mut self) -> Option<LearnedNeighbors> {
        None
    }
}

/// Switches a mode's stage clock (`sluice ctl set runtime`) on, reading
/// the clock given (the TSC; this crate reads none), or off (`None`): an
/// update for [`ForwardMode::reconfigure`], which modes with a stage
/// clock ([`ForwardMode::stage_clock`]) take. Switching it on starts the
/// totals afresh (also when it already runs); off keeps them as they
/// were, for reading.
#[derive(Clone, Copy, Debug)]
pub struct Profile(pub Option<fn() -> u64>);

/// Cycles per stage of `N` stages by index, read through `now` (a stage
/// clock: the gateway's `CycleClock`, the router's burst clock): the time
/// from one read to the next is charged to the stage the second ends.
#[derive(Clone, Debug)]
pub struct StageCycles<const N: usize> {
    now: fn() -> u64,
    last: u64,
    /// Cycles charged to each stage.
    pub cycles: [u64; N],
    /// Marks of each stage (one per packet, or chunk, that went through
    /// it).
    pub marks: [u64; N],
}

impl<const N: usize> StageCycles<N> {
    /// A clock reading `now`, all stages at zero.
    pub fn new(now: fn() -> u64) -> Self {
        StageCycles {
            now,
            last: 0,
            cycles: [0; N],
            marks: [0; N],
        }
    }

    /// A packet's (or a chunk's) processing begins.
    #[inline(always)]
    pub fn begin(&mut self) {
        self.last = (self.now)();
    }

    /// The time since the last mark (or the beginning) was stage `i`'s.
    #[inline(always)]
    pub fn charge(&mut self, i: usize) {
        let t = (self.now)();
        self.cycles[i] += t.wrapping_sub(self.last);
        self.marks[i] += 1;
        self.last = t;
    }

    /// Each stage's cycles less its marks' own reads of the clock, at
    /// `read` a read (`read_cost`).
    pub fn net_of_reads(&self, read: u64) -> [u64; N] {
        std::array::from_fn(|i| self.cycles[i].saturating_sub(self.marks[i].saturating_mul(read)))
    }
}

/// The cheapest of a few back-to-back reads of `now`: what a stage mark
/// adds to the stage it ends (taken off by the stage clocks).
pub(crate) fn read_cost(now: fn() -> u64) -> u64 {
    (0..64)
        .map(|_| {
            let a = now();
            now().wrapping_sub(a)
        })
        .min()
        .unwrap_or(0)
}

/// What the stage clocks' tests share: a fake clock and a burst run
/// through two modes side by side.
#[cfg(test)]
pub(crate) mod testing {
    use super::{ForwardMode, Verdict};
    use crate::verdict::DropReason;

    std::thread_local! {
        /// What the fake clock reads, and how far each read moves it.
        static NOW: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 1)) };
    }

    /// The fake clock: each read moves it on by its step.
    pub(crate) fn fake_now() -> u64 {
        NOW.with(|c| {
            let (t, step) = c.get();
            c.set((t + step, step));
            t + step
        })
    }

    /// Sets the fake clock to `t`, each read moving it by `step`.
    pub(crate) fn set_fake_now(t: u64, step: u64) {
        NOW.with(|c| c.set((t, step)));
    }

    /// `frames` as a burst from port 0 through `a` and through `b`: their
    /// verdicts and bytes must agree; the verdicts.
    pub(crate) fn same_burst(
        a: &mut impl ForwardMode,
        b: &mut impl ForwardMode,
        frames: Vec<Vec<u8>>,
    ) -> Vec<Verdict> {
        let n = frames.len();
        let (mut fa, mut fb) = (frames.clone(), frames);
        let none = Verdict::Drop(DropReason::NotIp);
        let (mut va, mut vb) = (vec![none; n], vec![none; n]);
        if let Some(v) = a.process_burst(&mut fa, 0, &mut va) {
            va.fill(v);
        }
        if let Some(v) = b.process_burst(&mut fb, 0, &mut vb) {
            vb.fill(v);
        }
        assert_eq!((&va, fa), (&vb, fb));
        va
    }
}

/// Neighbours one worker learned from ARP/ND, for the other workers
/// ([`ForwardMode::take_learned`]): `(interface, address, MAC)`. With
/// several workers a reply reaches one of them (the queue RSS or a fanout
/// gives it), while packets for that neighbour can be waiting on any.
#[derive(Clone, Debug)]
pub struct LearnedNeighbors(pub std::sync::Arc<[(u16, std::net::IpAddr, crate::wire::MacAddr)]>);

/// Starts loading every packet's first line (the Ethernet and IP headers
/// a stage reads first) with `pf`, for a [`ForwardMode::prefetch`] that
/// wants the whole burst's data on its way, as l3fwd prefetches its
/// packets: where another agent wrote them (a NIC's DMA into the
/// last-level cache, the kernel, the softnic's generator on another core)
/// their misses overlap instead of arriving one packet at a time.
#[inline]
pub fn prefetch_heads<P: Frame>(pkts: &[P], pf: fn(*const u8)) {
    for p in pkts {
        pf(p.bytes().as_ptr());
    }
}

/// [`ForwardMode::process_burst`] by [`ForwardMode::process`] packet by
/// packet (the default, and what modes with their own burst path fall
/// back to).
#[inline]
pub fn process_each<F: ForwardMode, P: Frame>(
    f: &mut F,
    pkts: &mut [P],
    in_port: u16,
    verdicts: &mut [Verdict],
) -> Option<Verdict> {
    // Two locals, not a tracker struct: one (`SameVerdict`) cost the
    // router's burst loop 5 cycles per packet.
    let mut first: Option<Verdict> = None;
    let mut uniform = true;
    for (m, v) in pkts.iter_mut().zip(verdicts.iter_mut()) {
        *v = f.process(m, in_port);
        note_verdict(&mut first, &mut uniform, *v);
    }
    first.filter(|_| uniform)
}

/// Notes verdict `v` in a burst loop's same-verdict tracking: `first` is
/// the burst's first verdict, `uniform` whether every one since was the
/// same (the burst's verdict is then `first`).
#[inline(always)]
pub fn note_verdict(first: &mut Option<Verdict>, uniform: &mut bool, v: Verdict) {
    match (*first, v) {
        // The common case first, without the derived comparison's jump
        // on the variant.
        (Some(Verdict::Forward(a)), Verdict::Forward(b)) => *uniform &= a == b,
        (None, _) => *first = Some(v),
        (Some(x), _) => *uniform &= x == v,
    }
}

/// For each input port, the port its packets leave on.
#[derive(Clone, Debug)]
pub struct Peers(Box<[u16]>);

impl Peers {
    /// `peers[i]` is the output port of input port `i`.
    pub fn new(peers: Vec<u16>) -> Self {
        Peers(peers.into_boxed_slice())
    }

    /// testpmd's `paired` topology over `n` ports: 0↔1, 2↔3, …; with an odd
    /// count the last port forwards to itself.
    pub fn paired(n: u16) -> Self {
        Peers((0..n).map(|p| if p ^ 1 < n { p ^ 1 } else { p }).collect())
    }

    /// Output port of `in_port` (itself when out of range).
    #[inline]
    pub fn of(&self, in_port: u16) -> u16 {
        self.0.get(usize::from(in_port)).copied().unwrap_or(in_port)
    }
}

/// `io`: forwards packets untouched.
#[derive(Clone, Debug)]
pub struct Io(pub Peers);

impl ForwardMode for Io {
    const NAME: &'static str = "io";
    #[inline]
    fn process<P: Frame>(&mut self, _pkt: &mut P, in_port: u16) -> Verdict {
        Verdict::Forward(self.0.of(in_port))
    }
    #[inline]
    fn burst_verdict(&self, in_port: u16) -> Option<Verdict> {
        Some(Verdict::Forward(self.0.of(in_port)))
    }
}

/// `mac`: sets the source MAC to the output port's address and the
/// destination MAC to that port's configured peer address (testpmd's
/// `--eth-peer`).
#[derive(Clone, Debug)]
pub struct Mac {
    peers: Peers,
    /// Per output port: (source MAC, destination MAC).
    addrs: Box<[(MacAddr, MacAddr)]>,
}

impl Mac {
    /// `addrs[p]` is (own MAC, peer MAC) of port `p`.
    pub fn new(peers: Peers, addrs: Vec<(MacAddr, MacAddr)>) -> Self {
        Mac {
            peers,
            addrs: addrs.into_boxed_slice(),
        }
    }
}

impl ForwardMode for Mac {
    const NAME: &'static str = "mac";
    #[inline]
    fn process<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        let out = self.peers.of(in_port);
        let Ok(mut eth) = EthernetFrame::new_checked(pkt.bytes_mut()) else {
            return Verdict::Drop(DropReason::Truncated);
        };
        if let Some(&(src, dst)) = self.addrs.get(usize::from(out)) {
            eth.set_src(src);
            eth.set_dst(dst);
        }
        Verdict::Forward(out)
    }
}

/// `macswap`: swaps source and destination MAC.
#[derive(Clone, Debug)]
pub struct MacSwap(pub Peers);

impl ForwardMode for MacSwap {
    const NAME: &'static str = "macswap";
    #[inline]
    fn process<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        let Ok(mut eth) = EthernetFrame::new_checked(pkt.bytes_mut()) else {
            return Verdict::Drop(DropReason::Truncated);
        };
        eth.swap_addrs();
        Verdict::Forward(self.0.of(in_port))
    }

    #[inline]
    fn process_burst<P: Frame>(
        &mut self,
        pkts: &mut [P],
        in_port: u16,
        verdicts: &mut [Verdict],
    ) -> Option<Verdict> {
        let fwd = Verdict::Forward(self.0.of(in_port));
        let mut short = false;
        for m in pkts.iter_mut() {
            match EthernetFrame::new_checked(m.bytes_mut()) {
                Ok(mut eth) => eth.swap_addrs(),
                Err(_) => short = true,
            }
        }
        if !short {
            return Some(fwd);
        }
        // A runt in the burst (rare): per-packet verdicts.
        for (m, v) in pkts.iter().zip(verdicts.iter_mut()) {
            *v = if m.bytes().len() < ETHERNET_HEADER_LEN {
                Verdict::Drop(DropReason::Truncated)
            } else {
                fwd
            };
        }
        None
    }
}

/// `5tswap`: swaps MACs, IPv4/IPv6 addresses and UDP/TCP ports, so the packet
/// goes back as the reply of its flow. Checksums stay valid (the swaps do not
/// change the ones-complement sums). Frames that are neither IPv4 nor IPv6
/// get only the MAC swap; an IP header that does not parse is dropped.
#[derive(Clone, Debug)]
pub struct FiveTupleSwap(pub Peers);

impl ForwardMode for FiveTupleSwap {
    const NAME: &'static str = "5tswap";
    #[inline]
    fn process<P: Frame>(&mut self, pkt: &mut P, in_port: u16) -> Verdict {
        match five_tuple_swap(pkt.bytes_mut()) {
            Ok(()) => Verdict::Forward(self.0.of(in_port)),
            Err(r) => Verdict::Drop(r),
        }
    }
}

fn five_tuple_swap(pkt: &mut [u8]) -> Result<(), DropReason> {
    let mut eth = EthernetFrame::new_checked(&mut *pkt)?;
    eth.swap_addrs();
    let ethertype = eth.ethertype();
    let l3 = &mut pkt[ETHERNET_HEADER_LEN..];
    let (proto, l4) = match ethertype {
        EtherType::IPV4 => {
            let mut ip = Ipv4Packet::new_checked(&mut *l3)?;
            ip.swap_addrs();
            // Only the first fragment carries the ports.
            let first = ip.flags_frag() & 0x1fff == 0;
            let proto = if first { ip.protocol() } else { 0 };
            let h = ip.header_len();
            (proto, &mut l3[h..])
        }
        EtherType::IPV6 => {
            let mut ip = Ipv6Packet::new_checked(&mut *l3)?;
            ip.swap_addrs();
            let (proto, off) = ip.upper_layer()?;
            (proto, &mut l3[off..])
        }
        _ => return Ok(()),
    };
    if proto == IpProto::UDP || proto == IpProto::TCP {
        L4Ports::new_checked(l4)?.swap();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum;

    /// Ethernet + IPv4 + UDP with a valid UDP checksum over a 4-byte payload.
    fn udp4() -> Vec<u8> {
        let mut f = vec![
            0x02, 0, 0, 0, 0, 0x02, // dst
            0x02, 0, 0, 0, 0, 0x01, // src
            0x08, 0x00, // IPv4
            0x45, 0x00, 0x00, 0x20, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11, 0, 0, // header
            198, 18, 0, 1, // src
            198, 19, 0, 7, // dst
            0x04, 0x00, 0x00, 0x35, 0x00, 0x0c, 0, 0, // udp 1024 -> 53, len 12
            1, 2, 3, 4, // payload
        ];
        let mut ip = Ipv4Packet::new_unchecked(&mut f[14..34]);
        ip.fill_checksum();
        let ph = checksum::pseudo_v4([198, 18, 0, 1], [198, 19, 0, 7], 17, 12);
        let c = !checksum::fold(checksum::sum(&f[34..], ph));
        f[40..42].copy_from_slice(&c.to_be_bytes());
        f
    }

    fn udp_ok(f: &[u8]) -> bool {
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        let ph = checksum::pseudo_v4(ip.src(), ip.dst(), 17, 12);
        ip.verify_checksum() && checksum::fold(checksum::sum(&f[34..], ph)) == 0xffff
    }

    #[test]
    fn paired_topology() {
        let p = Peers::paired(3);
        assert_eq!((p.of(0), p.of(1), p.of(2)), (1, 0, 2));
        assert_eq!(p.of(9), 9);
    }

    #[test]
    fn io_leaves_bytes_alone() {
        let mut f = udp4();
        let before = f.clone();
        assert_eq!(Io(Peers::paired(2)).process(&mut f, 0), Verdict::Forward(1));
        assert_eq!(f, before);
    }

    #[test]
    fn mac_rewrites_from_config() {
        let own: MacAddr = "02:aa:00:00:00:01".parse().unwrap();
        let peer: MacAddr = "02:bb:00:00:00:01".parse().unwrap();
        let mut m = Mac::new(
            Peers::paired(2),
            vec![(MacAddr::default(), MacAddr::default()), (own, peer)],
        );
        let mut f = udp4();
        assert_eq!(m.process(&mut f, 0), Verdict::Forward(1));
        assert_eq!(&f[0..6], &peer.0);
        assert_eq!(&f[6..12], &own.0);
        assert_eq!(
            m.process(&mut vec![0u8; 13], 0),
            Verdict::Drop(DropReason::Truncated)
        );
    }

    #[test]
    fn macswap_swaps() {
        let mut f = udp4();
        MacSwap(Peers::paired(1)).process(&mut f, 0);
        assert_eq!(&f[0..6], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&f[6..12], &[2, 0, 0, 0, 0, 2]);
    }

    #[test]
    fn burst_paths_agree_with_per_packet() {
        // MacSwap's burst loop: a clean burst gives one verdict; a runt in
        // it gives per-packet verdicts, and every packet is as `process`
        // leaves it.
        let runt = vec![1u8; 10];
        for burst in [vec![udp4(), udp4()], vec![udp4(), runt.clone(), udp4()]] {
            let mut one = burst.clone();
            let mut m = MacSwap(Peers::paired(2));
            let want: Vec<Verdict> = one.iter_mut().map(|f| m.process(f, 1)).collect();
            let mut all = burst.clone();
            let mut v = vec![Verdict::Drop(DropReason::NotIp); all.len()];
            match m.process_burst(&mut all, 1, &mut v) {
                Some(x) => assert!(want.iter().all(|w| *w == x)),
                None => assert_eq!(v, want),
            }
            assert_eq!(all, one);
            assert_eq!(
                burst.len() == 2,
                m.process_burst(&mut burst.clone(), 1, &mut v).is_some()
            );
        }
        // The default (per-packet) burst: 5tswap drops the runt only.
        let mut m = FiveTupleSwap(Peers::paired(2));
        let mut pkts = vec![udp4(), runt];
        let mut v = vec![Verdict::Forward(9); 2];
        assert_eq!(m.process_burst(&mut pkts, 0, &mut v), None);
        assert_eq!(v[0], Verdict::Forward(1));
        assert!(matches!(v[1], Verdict::Drop(_)));
        let mut pkts = vec![udp4(), udp4()];
        assert_eq!(
            m.process_burst(&mut pkts, 0, &mut v),
            Some(Verdict::Forward(1))
        );
    }

    #[test]
    fn five_tuple_swap_keeps_checksums() {
        let mut f = udp4();
        assert!(udp_ok(&f));
        let mut m = FiveTupleSwap(Peers::paired(2));
        assert_eq!(m.process(&mut f, 1), Verdict::Forward(0));
        assert_eq!(&f[26..30], &[198, 19, 0, 7], "src is the old dst");
        assert_eq!(&f[30..34], &[198, 18, 0, 1]);
        assert_eq!(&f[34..38], &[0x00, 0x35, 0x04, 0x00], "ports swapped");
        assert!(udp_ok(&f), "checksums still verify");
        // Twice is the identity.
        m.process(&mut f, 1);
        assert_eq!(f, udp4());
    }

    #[test]
    fn five_tuple_swap_drops_bad_ip() {
        let mut f = udp4();
        f[14] = 0x43; // IHL 3
        let v = FiveTupleSwap(Peers::paired(2)).process(&mut f, 0);
        assert_eq!(v, Verdict::Drop(DropReason::Malformed));
        let mut short = udp4();
        short.truncate(30);
        let v = FiveTupleSwap(Peers::paired(2)).process(&mut short, 0);
        assert_eq!(v, Verdict::Drop(DropReason::Truncated));
    }
}
