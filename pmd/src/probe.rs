//! The tester's wire format and measurements, shared by the softnic's
//! generator and sink and by the `txonly`/`flowgen`/`rxonly` workers on
//! real ports (DPDK, AF_XDP, AF_PACKET), as a hardware tester (TRex,
//! MoonGen, pktgen-dpdk) stamps and checks its streams:
//!
//! - [`Flow`]: a precomputed frame per flow (Ethernet, IPv4 or IPv6, UDP or
//!   TCP, valid checksums) with a 16-byte signature in the payload:
//!   magic `"SL"`, the flow's number, its sequence number in that flow and
//!   the TSC when it was made. Stamping patches the signature and adjusts
//!   the L4 checksum incrementally.
//! - [`Pacer`]: when packets are due, from the TSC: evenly spaced
//!   (constant rate), Poisson arrivals (exponential gaps, same mean), or
//!   as fast as possible; a sender that fell behind skips the backlog
//!   (counted) rather than bursting it.
//! - [`Probe`]: what a receiver makes of a stamped stream: packets with a
//!   signature, one-way latency (TSC now minus the stamp: same host, or
//!   hosts with synchronised invariant TSCs), and per flow loss,
//!   reordering and duplicates from the sequence numbers (a 64-packet
//!   window; a packet older than that is counted as reordered).

use crate::hist::HistWriter;
use crate::Counter;
use pipeline::checksum;
use pipeline::wire::MacAddr;
use pipeline::wire::{
    EtherType, EthernetFrame, IpProto, Ipv4Packet, Ipv6Packet, ETHERNET_HEADER_LEN,
};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp};
use std::net::{Ipv4Addr, Ipv6Addr};

/// First two bytes of the payload signature ("SL").
pub const MAGIC: u16 = 0x534c;
/// Bytes of the signature: magic, flow, sequence, TSC.
pub const SIG_LEN: usize = 16;
/// The most flows a stream has (the flow number is 16 bits).
pub const MAX_FLOWS: u32 = 65536;
/// The longest frame a generator makes (without FCS): a 9,000-byte IP
/// packet (jumbo frames) and its Ethernet header.
pub const MAX_FRAME_LEN: usize = 9014;

/// Offered load.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rate {
    /// Packets per second.
    Pps(f64),
    /// As fast as the generator can go; what does not fit the ring is missed.
    Max,
}

/// Inter-arrival pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Evenly spaced packets.
    Constant,
    /// Exponential gaps (Poisson arrivals) with the same mean rate.
    Poisson,
}

/// How flows take their addresses and ports from the spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walk {
    /// Each field drawn at random from its span (reproducible from the
    /// seed).
    Random,
    /// Flow `i` takes the `i`-th value of each span (wrapping at its end):
    /// testpmd's `flowgen` walks its destination addresses this way, and
    /// TRex's field engine with `op = "inc"`.
    Sequential,
}

/// An inclusive range of values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span<T> {
    /// First value.
    pub first: T,
    /// Last value (inclusive).
    pub last: T,
}

/// What the generator sends on one port.
#[derive(Clone, Debug)]
pub struct GenConfig {
    /// Offered load.
    pub rate: Rate,
    /// Frame length in bytes without FCS (raised to the minimum that holds
    /// the headers and the 16-byte signature: 58 for IPv4/UDP, 70 for
    /// IPv4/TCP, 78 for IPv6/UDP, 90 for IPv6/TCP).
    pub size: usize,
    /// A mix of frame lengths (IMIX), one per flow in turn: flow `i` is
    /// `sizes[i % sizes.len()]` bytes (without FCS; raised and capped as
    /// `size` is), so with the flows sent round-robin and a multiple of
    /// `sizes.len()` of them, the packets follow the list's proportions,
    /// as TRex's IMIX profile mixes streams of three sizes. Empty: every
    /// flow is `size` bytes.
    pub sizes: Vec<usize>,
    /// Number of distinct flows (5-tuples), sent round-robin.
    pub flows: u32,
    /// Share of flows that are TCP (the rest UDP).
    pub tcp_share: f64,
    /// Share of flows that are IPv6 (the rest IPv4).
    pub ipv6_share: f64,
    /// Inter-arrival pattern.
    pub pattern: Pattern,
    /// How flows take their addresses and ports from the spans.
    pub walk: Walk,
    /// IPv4 source addresses.
    pub src_ip: Span<Ipv4Addr>,
    /// IPv4 destination addresses.
    pub dst_ip: Span<Ipv4Addr>,
    /// IPv6 source addresses.
    pub src_ip6: Span<Ipv6Addr>,
    /// IPv6 destination addresses.
    pub dst_ip6: Span<Ipv6Addr>,
    /// Source ports.
    pub src_port: Span<u16>,
    /// Destination ports.
    pub dst_port: Span<u16>,
    /// Source MAC of generated frames (the tester's).
    pub src_mac: MacAddr,
    /// Destination MAC of generated frames (the port's).
    pub dst_mac: MacAddr,
    /// Seed for flow fields and Poisson gaps (runs are reproducible).
    pub seed: u64,
    /// Whether each packet carries the 16-byte signature (flow, sequence,
    /// TSC) a receiving probe reads. Without it a packet is its flow's
    /// frame as is, with no per-packet work beyond the copy (testpmd's
    /// txonly), and a receiver counts it as unsigned.
    pub signature: bool,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            rate: Rate::Pps(100_000.0),
            size: 64,
            sizes: Vec::new(),
            flows: 1024,
            tcp_share: 0.0,
            ipv6_share: 0.0,
            pattern: Pattern::Constant,
            walk: Walk::Random,
            src_ip: Span {
                first: Ipv4Addr::new(198, 18, 0, 1),
                last: Ipv4Addr::new(198, 18, 0, 254),
            },
            dst_ip: Span {
                first: Ipv4Addr::new(198, 19, 0, 1),
                last: Ipv4Addr::new(198, 19, 0, 254),
            },
            src_ip6: Span {
                first: "2001:db8:18::1".parse().expect("literal"),
                last: "2001:db8:18::ffff".parse().expect("literal"),
            },
            dst_ip6: Span {
                first: "2001:db8:19::1".parse().expect("literal"),
                last: "2001:db8:19::ffff".parse().expect("literal"),
            },
            src_port: Span {
                first: 1024,
                last: 65535,
            },
            dst_port: Span { first: 9, last: 9 },
            src_mac: MacAddr([0x02, 0x5e, 0, 0, 0, 0x01]),
            dst_mac: MacAddr([0x02, 0x51, 0, 0, 0, 0x01]),
            seed: 1,
            signature: true,
        }
    }
}

/// A signature read back from a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sig {
    /// The flow's number in its stream.
    pub flow: u16,
    /// Its sequence number in that flow (from 0).
    pub seq: u32,
    /// TSC when the sender made it.
    pub tsc: u64,
}

/// One precomputed flow: its frame with a zero signature and the offsets to
/// patch per packet.
#[derive(Clone, Debug)]
pub struct Flow {
    /// The frame (signature zero, checksums valid for it).
    pub frame: Vec<u8>,
    stamper: Stamper,
    /// The RX queue its RSS hash picks among `nrxq`.
    pub queue: u16,
    /// Its symmetric RSS hash.
    pub rss: u32,
}

/// What stamping a copy of a flow's frame needs (a small copy, so that a
/// loop over a burst keeps it in registers).
#[derive(Clone, Copy, Debug)]
pub struct Stamper {
    sig_off: usize,
    csum_off: usize,
    /// The frame's L4 checksum field, inverted (the ones' complement sum it
    /// covers), plus the signature's constant magic: where a stamp's sum
    /// starts.
    sum0: u64,
    udp: bool,
}

/// An order-independent hash of both endpoints (both directions of a flow
/// land on the same queue).
fn symmetric_hash(a: &[u8], b: &[u8], pa: u16, pb: u16) -> u32 {
    let mut x: u64 = u64::from(pa ^ pb);
    for (i, (p, q)) in a.iter().zip(b).enumerate() {
        x ^= u64::from(p ^ q) << ((i % 8) * 8);
    }
    x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x = (x ^ (x >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    (x ^ (x >> 33)) as u32
}

/// A value from span `s` for flow number `flow`: drawn from `rng`, or
/// (sequential) the flow's place in the span, wrapping at its end.
fn pick<T: Copy + Into<u128> + TryFrom<u128>>(
    rng: &mut SmallRng,
    s: Span<T>,
    walk: Walk,
    flow: usize,
) -> T {
    let (a, b) = (s.first.into(), s.last.into());
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let v = match walk {
        Walk::Random => lo + rng.random_range(0..=(hi - lo).min(u64::MAX as u128) as u64) as u128,
        Walk::Sequential => lo + (flow as u128) % (hi - lo).saturating_add(1),
    };
    T::try_from(v).unwrap_or(s.first)
}

impl<T: Copy> Span<T> {
    fn map<U>(self, f: impl Fn(T) -> U) -> Span<U> {
        Span {
            first: f(self.first),
            last: f(self.last),
        }
    }
}

/// The shortest frame for a flow: headers and the signature (58 bytes for
/// IPv4/UDP, 70 for IPv4/TCP, 78 for IPv6/UDP, 90 for IPv6/TCP).
pub fn min_len(v6: bool, tcp: bool) -> usize {
    ETHERNET_HEADER_LEN + if v6 { 40 } else { 20 } + if tcp { 20 } else { 8 } + SIG_LEN
}

/// The simple IMIX (TRex's `imix.py`, after the classic Agilent mix): 64,
/// 594 and 1518-byte frames on the wire (FCS included) in the proportions
/// 7:4:1, as a list of lengths without FCS for [`GenConfig::sizes`].
pub const IMIX: [usize; 12] = [60, 60, 60, 60, 60, 60, 60, 590, 590, 590, 590, 1514];

/// The flows of a stream, drawn from `cfg` with `rng` (reproducible from
/// its seed); frames are `cfg.size` bytes, or flow by flow the lengths of
/// `cfg.sizes` in turn (raised to [`min_len`], capped at `max_len`),
/// queues picked among `nrxq`.
pub fn build_flows(cfg: &GenConfig, rng: &mut SmallRng, nrxq: u16, max_len: usize) -> Vec<Flow> {
    (0..cfg.flows.clamp(1, MAX_FLOWS) as usize)
        .map(|i| {
            let size = match cfg.sizes.len() {
                0 => cfg.size,
                n => cfg.sizes[i % n],
            };
            build_flow(cfg, i, size, rng, nrxq, max_len)
        })
        .collect()
}

fn build_flow(
    cfg: &GenConfig,
    i: usize,
    size: usize,
    rng: &mut SmallRng,
    nrxq: u16,
    max_len: usize,
) -> Flow {
    let tcp = rng.random_bool(cfg.tcp_share.clamp(0.0, 1.0));
    let v6 = rng.random_bool(cfg.ipv6_share.clamp(0.0, 1.0));
    let w = cfg.walk;
    let sport = pick(rng, cfg.src_port, w, i);
    let dport = pick(rng, cfg.dst_port, w, i);
    let l3_len = if v6 { 40 } else { 20 };
    let l4_len = if tcp { 20 } else { 8 };
    let min = min_len(v6, tcp);
    let len = size.clamp(min, max_len.max(min));
    let mut f = vec![0u8; len];
    // Payload after the signature: a recognisable byte pattern.
    for (i, b) in f[min..].iter_mut().enumerate() {
        *b = i as u8;
    }
    let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
    eth.set_dst(cfg.dst_mac);
    eth.set_src(cfg.src_mac);
    let l4_off = ETHERNET_HEADER_LEN + l3_len;
    let l4_total = len - l4_off;
    let proto = if tcp { IpProto::TCP } else { IpProto::UDP };
    let (pseudo, rss) = if v6 {
        eth.set_ethertype(EtherType::IPV6);
        let src = pick(rng, cfg.src_ip6.map(u128::from), w, i).to_be_bytes();
        let dst = pick(rng, cfg.dst_ip6.map(u128::from), w, i).to_be_bytes();
        let mut ip = Ipv6Packet::new_unchecked(&mut f[ETHERNET_HEADER_LEN..]);
        ip.set_version();
        ip.set_payload_len(l4_total as u16);
        ip.set_next_header(proto);
        ip.set_hop_limit(64);
        ip.set_src(src);
        ip.set_dst(dst);
        (
            checksum::pseudo_v6(src, dst, proto, l4_total as u32),
            symmetric_hash(&src, &dst, sport, dport),
        )
    } else {
        eth.set_ethertype(EtherType::IPV4);
        let src = pick(rng, cfg.src_ip.map(u32::from), w, i).to_be_bytes();
        let dst = pick(rng, cfg.dst_ip.map(u32::from), w, i).to_be_bytes();
        let mut ip = Ipv4Packet::new_unchecked(&mut f[ETHERNET_HEADER_LEN..]);
        ip.set_version_ihl(20);
        ip.set_total_len((len - ETHERNET_HEADER_LEN) as u16);
        ip.set_flags_frag(0x4000);
        ip.set_ttl(64);
        ip.set_protocol(proto);
        ip.set_src(src);
        ip.set_dst(dst);
        ip.fill_checksum();
        (
            checksum::pseudo_v4(src, dst, proto, l4_total as u16),
            symmetric_hash(&src, &dst, sport, dport),
        )
    };
    let l4 = &mut f[l4_off..];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    let csum_off = if tcp {
        l4[4..8].copy_from_slice(&1u32.to_be_bytes()); // seq
        l4[8..12].copy_from_slice(&1u32.to_be_bytes()); // ack
        l4[12] = 5 << 4; // data offset
        l4[13] = 0x18; // PSH|ACK
        l4[14..16].copy_from_slice(&65535u16.to_be_bytes());
        16
    } else {
        l4[4..6].copy_from_slice(&(l4_total as u16).to_be_bytes());
        6
    };
    let c = !checksum::fold(checksum::sum(l4, pseudo));
    let c = if !tcp && c == 0 { 0xffff } else { c };
    l4[csum_off..csum_off + 2].copy_from_slice(&c.to_be_bytes());
    Flow {
        frame: f,
        stamper: Stamper {
            sig_off: l4_off + l4_len,
            csum_off: l4_off + csum_off,
            sum0: u64::from(!c) + u64::from(MAGIC),
            udp: !tcp,
        },
        queue: (rss % u32::from(nrxq.max(1))) as u16,
        rss,
    }
}

impl Flow {
    /// Writes the signature into `d` (a copy of [`Flow::frame`]) and
    /// adjusts the L4 checksum, which covered a zero signature.
    #[inline]
    pub fn stamp(&self, d: &mut [u8], flow: u16, seq: u32, tsc: u64) {
        self.stamper.stamp(d, flow, seq, tsc);
    }

    /// A copy of what stamping this flow's frames needs.
    #[inline]
    pub fn stamper(&self) -> Stamper {
        self.stamper
    }

    /// Copies the frame into `d` (exactly its length): 32-byte pieces, the
    /// last one overlapping the one before where the length is not a
    /// multiple of 32. The compiler keeps these as a few vector moves,
    /// where a copy of a length known only at run time is a call per
    /// packet.
    #[inline]
    pub fn copy_to(&self, d: &mut [u8]) {
        let f = &self.frame[..];
        let n = f.len();
        if n < 32 || d.len() != n {
            d.copy_from_slice(f);
            return;
        }
        let mut at = 0;
        while at + 32 <= n {
            let piece: &[u8; 32] = f[at..at + 32].try_into().expect("32 bytes");
            d[at..at + 32].copy_from_slice(piece);
            at += 32;
        }
        if at < n {
            let piece: &[u8; 32] = f[n - 32..].try_into().expect("32 bytes");
            d[n - 32..].copy_from_slice(piece);
        }
    }
}

impl Stamper {
    /// Writes the signature into `d` (a copy of its flow's frame) and
    /// adjusts the L4 checksum, which covered a zero signature.
    #[inline]
    pub fn stamp(&self, d: &mut [u8], flow: u16, seq: u32, tsc: u64) {
        let sig = (u128::from(MAGIC) << 112)
            | (u128::from(flow) << 96)
            | (u128::from(seq) << 64)
            | u128::from(tsc);
        d[self.sig_off..self.sig_off + SIG_LEN].copy_from_slice(&sig.to_be_bytes());
        // The signature's ones' complement sum, taken in 32-bit pieces
        // (2^16 = 1 modulo 0xffff, so this is the sum of its 16-bit words
        // up to folding), added to the sum the template's checksum covers;
        // three folds bring any sum below 2^35 to 16 bits, without a loop.
        let mut acc =
            self.sum0 + u64::from(flow) + u64::from(seq) + (tsc & 0xffff_ffff) + (tsc >> 32);
        acc = (acc & 0xffff) + (acc >> 16);
        acc = (acc & 0xffff) + (acc >> 16);
        acc = (acc & 0xffff) + (acc >> 16);
        let mut new = !(acc as u16);
        if self.udp && new == 0 {
            new = 0xffff;
        }
        d[self.csum_off..self.csum_off + 2].copy_from_slice(&new.to_be_bytes());
    }
}

/// The signature of a frame a tester sent, if it is one and arrived whole
/// (IPv4 header checksum and lengths check; up to two VLAN tags skipped).
pub fn read(frame: &[u8]) -> Option<Sig> {
    let (ethertype, eth_len, _) = pipeline::wire::l3_offset(frame).ok()?;
    let l3 = frame.get(eth_len..)?;
    let (proto, l4) = match ethertype {
        EtherType::IPV4 => {
            let ip = Ipv4Packet::new_checked(l3).ok()?;
            if !ip.verify_checksum() || eth_len + usize::from(ip.total_len()) != frame.len() {
                return None;
            }
            (
                ip.protocol(),
                &l3[ip.header_len()..usize::from(ip.total_len())],
            )
        }
        EtherType::IPV6 => {
            let ip = Ipv6Packet::new_checked(l3).ok()?;
            (
                ip.next_header(),
                l3.get(40..40 + usize::from(ip.payload_len()))?,
            )
        }
        _ => return None,
    };
    let hl = match proto {
        IpProto::UDP => 8,
        IpProto::TCP => usize::from(l4.get(12)? >> 4) * 4,
        _ => return None,
    };
    let sig = l4.get(hl..hl + SIG_LEN)?;
    if u16::from_be_bytes([sig[0], sig[1]]) != MAGIC {
        return None;
    }
    let word = |a: usize| u32::from_be_bytes([sig[a], sig[a + 1], sig[a + 2], sig[a + 3]]);
    Some(Sig {
        flow: u16::from_be_bytes([sig[2], sig[3]]),
        seq: word(4),
        tsc: u64::from(word(8)) << 32 | u64::from(word(12)),
    })
}

/// When packets are due (TSC).
#[derive(Debug)]
pub struct Pacer {
    gap: f64,
    next_due: f64,
    exp: Option<Exp<f64>>,
    rng: SmallRng,
    max: bool,
}

impl Pacer {
    /// A pacer for `rate` with `pattern` on a TSC of `hz`; Poisson gaps
    /// drawn from `seed`. `Rate::Max`: every call is due a whole burst.
    pub fn new(rate: Rate, pattern: Pattern, hz: u64, seed: u64) -> Pacer {
        let (gap, exp, max) = match rate {
            Rate::Pps(pps) if pps > 0.0 => {
                let gap = hz as f64 / pps;
                let exp = (pattern == Pattern::Poisson)
                    .then(|| Exp::new(1.0 / gap).ok())
                    .flatten();
                (gap, exp, false)
            }
            Rate::Pps(_) => (f64::INFINITY, None, false),
            Rate::Max => (0.0, None, true),
        };
        Pacer {
            gap,
            next_due: 0.0,
            exp,
            rng: SmallRng::seed_from_u64(seed),
            max,
        }
    }

    /// Starts the schedule at `now`: the first packet is due then.
    pub fn start(&mut self, now: u64) {
        self.next_due = now as f64;
    }

    /// As fast as possible.
    pub fn is_max(&self) -> bool {
        self.max
    }

    /// The TSC the next packet is due at (`None` at no rate or at the
    /// top rate).
    pub fn next_due(&self) -> Option<u64> {
        (self.gap.is_finite() && !self.max).then_some(self.next_due as u64)
    }

    /// How many packets are due by `now`, at most `budget` (taken off the
    /// schedule), and how many were skipped because the sender fell more
    /// than `max_lag` cycles behind (counted, not sent: a tester that
    /// bursts its backlog measures its own hiccup). At the top rate,
    /// `budget`.
    #[inline]
    pub fn due(&mut self, now: u64, budget: usize, max_lag: f64) -> (usize, u64) {
        if self.max {
            return (budget, 0);
        }
        let nowf = now as f64;
        let mut skipped = 0;
        if nowf - self.next_due > max_lag && self.gap > 0.0 {
            // Whole gaps off the schedule (mean gaps for Poisson), so that
            // made + skipped is the schedule's count.
            let k = ((nowf - max_lag - self.next_due) / self.gap).floor() + 1.0;
            if k.is_finite() {
                skipped = k as u64;
                self.next_due += k * self.gap;
            }
        }
        let mut n = 0;
        while self.next_due <= nowf && n < budget {
            n += 1;
            self.next_due += match &self.exp {
                Some(e) => e.sample(&mut self.rng),
                None => self.gap,
            };
        }
        (n, skipped)
    }
}

/// A receiver's counters (written by its one worker, read by anyone).
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct ProbeCounters {
    /// Packets with a signature.
    pub signed: Counter,
    /// Packets without one (or broken).
    pub unsigned: Counter,
    /// Sequence numbers skipped (less those that came late).
    pub lost: Counter,
    /// Packets that came after a later one of their flow.
    pub reordered: Counter,
    /// Packets seen twice (within the window).
    pub duplicate: Counter,
}

/// What a receiver tracks per flow: the next sequence number expected and
/// which of the 64 before it were seen (bit i: `next - 1 - i`).
#[derive(Clone, Copy, Debug, Default)]
struct FlowState {
    next: u32,
    seen: u64,
}

/// A receiver of stamped streams: counters, per-flow sequence tracking,
/// latency into a histogram (TSC cycles).
pub struct Probe {
    flows: Box<[FlowState]>,
    /// The counters.
    pub counters: std::sync::Arc<ProbeCounters>,
    /// One-way latency (cycles).
    pub hist: HistWriter,
}

impl Probe {
    /// A probe for up to [`MAX_FLOWS`] flows (allocates its table now).
    pub fn new(counters: std::sync::Arc<ProbeCounters>, hist: HistWriter) -> Probe {
        Probe {
            flows: vec![FlowState::default(); MAX_FLOWS as usize].into_boxed_slice(),
            counters,
            hist,
        }
    }

    /// Forgets every flow's sequence (a new stream starts at 0).
    pub fn restart(&mut self) {
        self.flows.fill(FlowState::default());
    }

    /// A frame received at TSC `now`.
    #[inline]
    pub fn record(&mut self, frame: &[u8], now: u64) {
        let Some(s) = read(frame) else {
            self.counters.unsigned.add(1);
            return;
        };
        self.counters.signed.add(1);
        self.hist.record(now.saturating_sub(s.tsc));
        let f = &mut self.flows[usize::from(s.flow)];
        let c = &self.counters;
        if s.seq >= f.next {
            let gap = s.seq - f.next;
            if gap > 0 {
                c.lost.add(u64::from(gap));
            }
            f.seen = if gap >= 63 {
                1
            } else {
                (f.seen << (gap + 1)) | 1
            };
            f.next = s.seq.wrapping_add(1);
            return;
        }
        let back = f.next - 1 - s.seq;
        if back < 64 {
            if f.seen & (1 << back) != 0 {
                c.duplicate.add(1);
                return;
            }
            f.seen |= 1 << back;
        }
        // Counted as lost when the gap opened; it came after all.
        c.reordered.add(1);
        c.lost.set(c.lost.get().saturating_sub(1));
    }
}

/// A generator's seed for a port (so that two ports draw different flows
/// from one configured seed).
pub fn rng_for(seed: u64, port: u16) -> SmallRng {
    SmallRng::seed_from_u64(seed ^ u64::from(port) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::hist_pair;
    use std::sync::Arc;

    fn flows(v6: f64, tcp: f64) -> Vec<Flow> {
        let cfg = GenConfig {
            flows: 8,
            ipv6_share: v6,
            tcp_share: tcp,
            size: 128,
            ..Default::default()
        };
        build_flows(&cfg, &mut rng_for(1, 0), 4, 2048)
    }

    /// Whether an untagged frame's TCP/UDP checksum verifies.
    fn l4_checksum_ok(d: &[u8]) -> bool {
        let l3 = &d[14..];
        let (pseudo, l4) = if l3[0] >> 4 == 4 {
            let l4 = &l3[20..];
            let mut s = [0u8; 4];
            let mut t = [0u8; 4];
            s.copy_from_slice(&l3[12..16]);
            t.copy_from_slice(&l3[16..20]);
            (checksum::pseudo_v4(s, t, l3[9], l4.len() as u16), l4)
        } else {
            let l4 = &l3[40..];
            let mut s = [0u8; 16];
            let mut t = [0u8; 16];
            s.copy_from_slice(&l3[8..24]);
            t.copy_from_slice(&l3[24..40]);
            (checksum::pseudo_v6(s, t, l3[6], l4.len() as u32), l4)
        };
        checksum::fold(checksum::sum(l4, pseudo)) == 0xffff
    }

    /// Stamped frames keep valid checksums and read back.
    #[test]
    fn stamps_read_back_with_valid_checksums() {
        for (v6, tcp) in [(0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0)] {
            for f in flows(v6, tcp) {
                let mut d = f.frame.clone();
                f.stamp(&mut d, 7, 123_456, 0x0102_0304_0506_0708);
                assert_eq!(
                    read(&d),
                    Some(Sig {
                        flow: 7,
                        seq: 123_456,
                        tsc: 0x0102_0304_0506_0708
                    })
                );
                assert!(l4_checksum_ok(&d), "v6 {v6} tcp {tcp}");
                let mut bad = d.clone();
                bad.pop();
                assert_eq!(read(&bad), None, "a cut frame is not signed");
                // The fast sum against the whole frame's: every stamp over
                // a spread of values (all-ones, zeros, carries), and a
                // copy made by copy_to is the frame.
                let mut rng = SmallRng::seed_from_u64(9);
                for i in 0..2000u32 {
                    let (flow, seq, tsc) = match i {
                        0 => (0, 0, 0),
                        1 => (u16::MAX, u32::MAX, u64::MAX),
                        _ => (rng.random(), rng.random(), rng.random()),
                    };
                    let mut d = vec![0u8; f.frame.len()];
                    f.copy_to(&mut d);
                    assert_eq!(d, f.frame);
                    f.stamp(&mut d, flow, seq, tsc);
                    assert!(l4_checksum_ok(&d), "{flow} {seq} {tsc}");
                    assert_eq!(read(&d), Some(Sig { flow, seq, tsc }));
                }
            }
        }
    }

    /// copy_to makes the frame at every length (whole 32-byte pieces, an
    /// overlapping last piece, the smallest frames).
    #[test]
    fn copies_frames_of_every_length() {
        for size in [58, 60, 63, 64, 65, 95, 96, 97, 128, 1500, 2048] {
            let cfg = GenConfig {
                size,
                ..Default::default()
            };
            for f in build_flows(&cfg, &mut rng_for(3, 0), 1, 2048) {
                let mut d = vec![0xaa; f.frame.len()];
                f.copy_to(&mut d);
                assert_eq!(d, f.frame, "size {size}");
            }
        }
    }

    /// A size mix gives each flow its length in turn (IMIX: 7:4:1 over
    /// every 12 flows, IPv4 and IPv6, UDP and TCP), each frame whole:
    /// IP lengths and checksums match the frame, and a stamp keeps them.
    #[test]
    fn a_size_mix_gives_each_flow_its_length() {
        for (v6, tcp) in [(0.0, 0.0), (1.0, 1.0)] {
            let cfg = GenConfig {
                flows: 24,
                sizes: IMIX.to_vec(),
                ipv6_share: v6,
                tcp_share: tcp,
                ..Default::default()
            };
            let f = build_flows(&cfg, &mut rng_for(5, 0), 1, 2048);
            let lens: Vec<usize> = f.iter().map(|f| f.frame.len()).collect();
            let min = min_len(v6 > 0.0, tcp > 0.0);
            let want: Vec<usize> = (0..24).map(|i| IMIX[i % 12].max(min)).collect();
            assert_eq!(lens, want);
            for f in &f {
                let d = &f.frame;
                let ip_len = if v6 > 0.0 {
                    40 + usize::from(u16::from_be_bytes([d[18], d[19]]))
                } else {
                    usize::from(u16::from_be_bytes([d[16], d[17]]))
                };
                assert_eq!(ip_len + 14, d.len());
                let mut c = d.clone();
                f.stamp(&mut c, 3, 9, 27);
                assert!(l4_checksum_ok(&c));
            }
        }
        // The mean of the simple IMIX on the wire (with FCS): 353.8 bytes.
        let wire: usize = IMIX.iter().map(|l| l + 4).sum();
        assert_eq!(wire, 64 * 7 + 594 * 4 + 1518);
    }

    /// A sequential walk gives flow `i` the `i`-th value of each span,
    /// wrapping at its end (testpmd's flowgen: destinations in order);
    /// a random one draws, reproducibly from the seed.
    #[test]
    fn a_sequential_walk_takes_each_span_in_order() {
        let span = |a: [u8; 4], b: [u8; 4]| Span {
            first: Ipv4Addr::from(a),
            last: Ipv4Addr::from(b),
        };
        let cfg = GenConfig {
            flows: 6,
            walk: Walk::Sequential,
            src_ip: span([10, 254, 0, 0], [10, 254, 0, 0]),
            dst_ip: span([10, 253, 0, 0], [10, 253, 0, 3]),
            src_port: Span {
                first: 1000,
                last: 1001,
            },
            dst_port: Span {
                first: 1001,
                last: 1001,
            },
            ..Default::default()
        };
        let fields = |f: &Flow| {
            let d = &f.frame;
            (
                [d[26], d[27], d[28], d[29]],
                [d[30], d[31], d[32], d[33]],
                u16::from_be_bytes([d[34], d[35]]),
                u16::from_be_bytes([d[36], d[37]]),
            )
        };
        let got: Vec<_> = build_flows(&cfg, &mut rng_for(1, 0), 1, 2048)
            .iter()
            .map(fields)
            .collect();
        let want: Vec<_> = (0..6u8)
            .map(|i| {
                (
                    [10, 254, 0, 0],
                    [10, 253, 0, i % 4],
                    1000 + u16::from(i % 2),
                    1001,
                )
            })
            .collect();
        assert_eq!(got, want);
        // IPv6 walks the same way.
        let v6 = GenConfig {
            ipv6_share: 1.0,
            ..cfg.clone()
        };
        let dsts: Vec<u8> = build_flows(&v6, &mut rng_for(1, 0), 1, 2048)
            .iter()
            .map(|f| f.frame[14 + 39])
            .collect();
        let first = GenConfig::default().dst_ip6.first.octets()[15];
        assert_eq!(dsts, (0..6).map(|i| first + i).collect::<Vec<u8>>());
        // Random: the same seed, the same flows; not in order.
        let random = GenConfig {
            walk: Walk::Random,
            flows: 64,
            dst_ip: span([10, 253, 0, 0], [10, 253, 255, 255]),
            ..cfg
        };
        let a: Vec<_> = build_flows(&random, &mut rng_for(1, 0), 1, 2048);
        let b: Vec<_> = build_flows(&random, &mut rng_for(1, 0), 1, 2048);
        assert!(a.iter().zip(&b).all(|(x, y)| x.frame == y.frame));
        assert!(a.windows(2).any(|w| fields(&w[1]).1 != {
            let mut n = fields(&w[0]).1;
            n[3] = n[3].wrapping_add(1);
            n
        }));
    }

    /// Constant pacing spaces packets evenly, skips a backlog, and the
    /// top rate gives the whole budget.
    #[test]
    fn pacer_spaces_and_skips() {
        let mut p = Pacer::new(Rate::Pps(1000.0), Pattern::Constant, 1_000_000, 1);
        p.start(0);
        // 1 kHz on a 1 MHz clock: one packet per 1000 cycles.
        assert_eq!(p.due(0, 32, 1e9), (1, 0));
        assert_eq!(p.due(999, 32, 1e9), (0, 0));
        assert_eq!(p.due(5_000, 32, 1e9), (5, 0));
        assert_eq!(p.next_due(), Some(6_000));
        // 100 ms late with a 10 ms lag allowed: 91 skipped (whole gaps),
        // 10 due, 8 of them in this call (its budget), the rest next.
        let (n, skipped) = p.due(106_000, 8, 10_000.0);
        assert_eq!((n, skipped), (8, 91));
        assert_eq!(p.due(106_000, 8, 10_000.0), (2, 0));
        let mut m = Pacer::new(Rate::Max, Pattern::Constant, 1_000_000, 1);
        assert_eq!(m.due(5, 32, 1.0), (32, 0));
        // Poisson: the mean gap over many packets is the rate's.
        let mut q = Pacer::new(Rate::Pps(1000.0), Pattern::Poisson, 1_000_000, 3);
        q.start(0);
        let (n, _) = q.due(10_000_000, usize::MAX, f64::INFINITY);
        assert!((9_500..10_500).contains(&n), "{n}");
    }

    /// Loss, reordering and duplicates per flow.
    #[test]
    fn probe_counts_loss_reordering_and_duplicates() {
        let (w, _r) = hist_pair();
        let c = Arc::new(ProbeCounters::default());
        let mut p = Probe::new(c.clone(), w);
        let f = &flows(0.0, 0.0)[0];
        let send = |p: &mut Probe, flow: u16, seq: u32| {
            let mut d = f.frame.clone();
            f.stamp(&mut d, flow, seq, 100);
            p.record(&d, 150);
        };
        // Flow 0: 0 1 2 5 4 3 3 6; flow 1: 0 2 (1 lost); 0 again is a
        // duplicate.
        for s in [0, 1, 2, 5, 4, 3, 3, 6] {
            send(&mut p, 0, s);
        }
        for s in [0, 2, 0] {
            send(&mut p, 1, s);
        }
        p.record(&f.frame[..40], 150);
        assert_eq!(c.signed.get(), 11);
        assert_eq!(c.unsigned.get(), 1);
        assert_eq!(c.reordered.get(), 2);
        assert_eq!(c.duplicate.get(), 2);
        assert_eq!(c.lost.get(), 1);
        // A gap of 100, then two of it late: one in the window, one
        // behind it (reordered too).
        for s in 7..200 {
            send(&mut p, 0, s);
        }
        send(&mut p, 0, 300);
        send(&mut p, 0, 250);
        send(&mut p, 0, 230);
        assert_eq!(c.lost.get(), 1 + 98);
        assert_eq!(c.reordered.get(), 4);
        assert_eq!(c.duplicate.get(), 2);
    }
}
