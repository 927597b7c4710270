//! Connection tracking: a per-core flow table (one per worker, so no locks),
//! both directions of a flow found by one lookup, a TCP state machine, UDP
//! and ICMP pseudo-states, per-state timeouts, a capacity limit with early
//! drop, and counters. The gateway stage ([`crate::gateway`]) runs it
//! before the firewall and NAT.
//!
//! # Keys
//!
//! A flow is entered under both of its [`Tuple`]s (addresses, ports,
//! protocol, zone) as received: the originator's and the reply's. One hash
//! lookup of a packet's tuple finds its flow and its direction. With NAT
//! the reply tuple is the translated one, so the same lookup serves the
//! return traffic of a mapping, and the two tuples say how to translate.
//! ICMP queries use the identifier as both ports. Addresses are `u128`
//! (IPv4 mapped, as in [`crate::acl`]).
//!
//! # Eviction
//!
//! Expired entries are removed lazily (a lookup that finds one starts over)
//! and by an incremental sweep at each [`ConnTrack::tick`]: at least
//! [`SWEEP_PER_TICK`] slots, and a large table's [`SWEEP_TICKS`]th part,
//! so that every slot is visited within that many ticks whatever the
//! table's size; a tick removes at most [`SWEEP_PER_TICK`] flows, which
//! bounds how long it holds the worker when many expire at once. When the table is full, a new flow may take the slot
//! of an entry that has not seen a reply (Linux's "early drop"), searched
//! for among the next [`EARLY_DROP_PROBES`] entries of the sweep order;
//! established flows are never evicted, and if none can be, the new flow is
//! refused and counted as `table_full`.

use crate::acl::Key;
use crate::route_cache::RouteCache;

pub mod blocks;
pub mod export;
mod index;
pub mod saved;
pub mod sync;
mod tcp;
mod window;
use index::{written, Hit, Index};
use tcp::{stale, step};
pub use window::{Check, Segment, Side, Window};

/// Slots examined by each [`ConnTrack::tick`] sweep at least, and the
/// most flows one tick removes.
pub const SWEEP_PER_TICK: usize = 1024;
/// Ticks in which the sweep visits every slot of a table larger than
/// `SWEEP_PER_TICK` times this (a worker ticks every 10 ms: 10 s); a
/// smaller table is visited faster.
pub const SWEEP_TICKS: usize = 1000;
/// The slots one tick's sweep examines in a table of `n` slots in use:
/// at least [`SWEEP_PER_TICK`], a [`SWEEP_TICKS`]th of a larger table,
/// never more than it has.
pub fn sweep_scan(n: usize) -> usize {
    n.div_ceil(SWEEP_TICKS).max(SWEEP_PER_TICK).min(n)
}

/// Entries examined for early drop when the table is full.
pub const EARLY_DROP_PROBES: usize = 16;

/// A flow's state. A new state goes into `STATES` too (the timeout
/// table is indexed by it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// TCP: SYN seen from the originator.
    SynSent,
    /// TCP: SYN+ACK seen from the responder.
    SynRecv,
    /// TCP: handshake complete.
    Established,
    /// TCP: one side sent FIN.
    FinWait,
    /// TCP: both sides sent FIN.
    TimeWait,
    /// TCP: reset.
    Closed,
    /// UDP/ICMP/other: only the originator has spoken.
    Unreplied,
    /// UDP/ICMP/other: the responder answered.
    Replied,
}

/// Per-state timeouts in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// TCP SYN_SENT and SYN_RECV.
    pub tcp_handshake: u64,
    /// TCP ESTABLISHED.
    pub tcp_established: u64,
    /// TCP FIN_WAIT and TIME_WAIT.
    pub tcp_closing: u64,
    /// TCP after RST.
    pub tcp_closed: u64,
    /// UDP/ICMP/other without a reply.
    pub unreplied: u64,
    /// UDP/ICMP/other with a reply.
    pub replied: u64,
}

const S: u64 = 1_000_000_000;

impl Default for Timeouts {
    /// Linux's defaults, except 2 hours (not 5 days) for established TCP.
    fn default() -> Self {
        Timeouts {
            tcp_handshake: 60 * S,
            tcp_established: 7200 * S,
            tcp_closing: 120 * S,
            tcp_closed: 10 * S,
            unreplied: 30 * S,
            replied: 180 * S,
        }
    }
}

/// Every state, in declaration order (`State as usize` indexes it).
const STATES: [State; 8] = [
    State::SynSent,
    State::SynRecv,
    State::Established,
    State::FinWait,
    State::TimeWait,
    State::Closed,
    State::Unreplied,
    State::Replied,
];

const _: () = {
    let mut i = 0;
    while i < STATES.len() {
        assert!(STATES[i] as usize == i, "STATES in declaration order");
        i += 1;
    }
};

/// Per-state timeouts as a table indexed by `State as usize`: one load
/// per packet where the `match` in [`Timeouts::of`] is an indirect jump.
type Limits = [u64; STATES.len()];

impl Timeouts {
    fn limits(&self) -> Limits {
        STATES.map(|s| self.of(s))
    }

    fn of(&self, s: State) -> u64 {
        match s {
            State::SynSent | State::SynRecv => self.tcp_handshake,
            State::Established => self.tcp_established,
            State::FinWait | State::TimeWait => self.tcp_closing,
            State::Closed => self.tcp_closed,
            State::Unreplied => self.unreplied,
            State::Replied => self.replied,
        }
    }
}

/// What the firewall learns about a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conn {
    /// The first packet of a flow (created in the table).
    New,
    /// A packet of a known flow; `reply` is true in the responder's
    /// direction.
    Established {
        /// Responder-to-originator direction.
        reply: bool,
    },
    /// An ICMP error about a known flow.
    Related,
    /// Not acceptable: a TCP packet other than SYN with no flow, a
    /// state-machine violation, or a new flow the full table refused.
    Invalid,
}

crate::counter_enum! {
    /// What a conntrack table counts (conntrack's own names, as
    /// `conntrack -S` shows them).
    pub enum Event {
        /// Flows created.
        Created = "ct_created",
        /// Flows removed after their timeout.
        Expired = "ct_expired",
        /// Unreplied flows dropped to make room.
        Evicted = "ct_evicted",
        /// New flows refused because the table was full.
        TableFull = "ct_table_full",
        /// Packets classified invalid.
        Invalid = "ct_invalid",
        /// TCP segments classified invalid by window tracking (beyond
        /// the window, acknowledging unsent data, malformed): counted in
        /// `ct_invalid` too.
        OutOfWindow = "ct_out_of_window",
        /// TCP segments window tracking passed without moving their flow
        /// (below the window: retransmitted or much delayed; a RST in the
        /// window but not where its sender is, after which the flow
        /// expires as a closed one unless another packet comes), and a
        /// responder's bare ACK while the SYN is unanswered (a challenge
        /// ACK, Linux's "ignore"; with or without window tracking).
        WindowIgnored = "ct_window_ignored",
        /// ICMP errors matched to a tracked flow (`related`).
        Related = "ct_related",
        /// Flows deleted on request (`sluice ctl clear conntrack`, as
        /// `conntrack -D`).
        Deleted = "ct_deleted",
        /// Changes for the HA peer that did not fit the worker's sync
        /// ring (repaired by the next bulk sync).
        SyncDropped = "ha_sync_dropped",
        /// Flows, changes and deletions from the HA peer applied here.
        SyncApplied = "ha_sync_applied",
        /// Flows from the HA peer refused (a tuple tracked here for
        /// another flow, or the table full).
        SyncRefused = "ha_sync_refused",
        /// Flow records (`[export]`) that did not fit the worker's export
        /// ring (the collector sees the gap in IPFIX's sequence numbers).
        ExportLost = "export_lost",
    }
}

/// One direction of a flow as it appears on the wire: addresses, ports
/// (the identifier, twice, for ICMP queries), protocol and zone. Packed to
/// 8-byte alignment (40 bytes, not 48), so a flow and its cached next hops
/// fit two cache lines.
#[derive(Clone, Copy, Debug, Eq, Default)]
#[repr(C, packed(8))]
pub struct Tuple {
    /// Source address (IPv4 mapped).
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Protocol.
    pub proto: u8,
    /// Zone (flows in different zones never match).
    pub zone: u16,
}

impl PartialEq for Tuple {
    /// Without branches, in 64-bit words (the derived comparison becomes a
    /// `memcmp` call on this 40-byte struct): the addresses' differences
    /// folded to one word, the ports, protocol and zone placed as they lie
    /// in memory (the compiler loads them as one word, less the padding
    /// byte), so the whole test is a few loads, XORs and ORs.
    #[inline(always)]
    fn eq(&self, o: &Tuple) -> bool {
        let a = (self.src ^ o.src) | (self.dst ^ o.dst);
        let rest = |t: &Tuple| {
            u64::from(t.sport)
                | u64::from(t.dport) << 16
                | u64::from(t.proto) << 32
                | u64::from(t.zone) << 48
        };
        (a as u64 | (a >> 64) as u64 | (rest(self) ^ rest(o))) == 0
    }
}

impl Tuple {
    /// The tuple of `k` in `zone`.
    pub fn of(zone: u16, k: &Key) -> Tuple {
        Tuple {
            src: k.src,
            dst: k.dst,
            sport: k.sport,
            dport: k.dport,
            proto: k.proto,
            zone,
        }
    }

    /// The classification key of the tuple (flags and metadata zero).
    pub fn key(&self) -> Key {
        Key {
            src: self.src,
            dst: self.dst,
            sport: self.sport,
            dport: self.dport,
            proto: self.proto,
            flags: 0,
            meta: 0,
        }
    }

    /// The same flow seen from the other end.
    #[inline]
    pub fn reverse(&self) -> Tuple {
        Tuple {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..*self
        }
    }
}

/// A tracked flow: the tuple its originator sent and the tuple the reply
/// is expected with. Without NAT the reply tuple is the original reversed;
/// with NAT it is what the translated packet's reply looks like, so the two
/// tuples also say how to translate (as in Linux's conntrack).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub struct Flow {
    // Two cache lines: the first holds what the originator's packets need
    // (time, original tuple, state, their next hop), the second the reply
    // tuple and the replies' next hop.
    last_ns: u64,
    /// The originator's direction, as received.
    pub orig: Tuple,
    /// State.
    pub state: State,
    live: bool,
    nat: bool,
    /// Taken from the HA peer and not seen here since (not refreshed
    /// back to it: its copy is the one that moves).
    remote: bool,
    /// Next hop of the originator's packets.
    pub(crate) orig_hop: RouteCache,
    /// The responder's direction, as received.
    pub reply: Tuple,
    /// Next hop of the replies.
    pub(crate) reply_hop: RouteCache,
    /// Per direction (the originator's, the replies'), what translating
    /// one of its IPv4 packets adds to the IP header checksum and to the
    /// TCP/UDP checksum (ones-complement sums of the changed words, RFC
    /// 1624), a flow's packets all changing the same words the same way
    /// (`nat::rewrite4_flow`); 0 when not translated. In the second line's
    /// spare bytes: the packets of either direction read both lines.
    pub(crate) deltas: [(u16, u16); 2],
    /// Where a SYN ends (its sequence number and one) that came for the
    /// established flow's tuple and was passed without changing its
    /// state, as Linux ignores it: the SYN+ACK that acknowledges it says
    /// the client opened a new connection on the tuple (a stale flow's:
    /// its end went another way), and the flow takes it up ([`tcp`]). 0:
    /// none.
    pub(crate) syn_end: u32,
}

const _: () = assert!(std::mem::size_of::<Flow>() == 128, "two cache lines");

/// A flow as a listing gives it ([`ConnTrack::copy_flows`]): a copy, the
/// nanoseconds until it expires unless a packet of it comes, and its
/// packets and bytes per direction since its last record when flows are
/// accounted (`[export]`).
pub type Listed = (Flow, u64, Option<Counts>);

/// Packets and bytes of a flow's originator's and replies' directions.
pub type Counts = [(u64, u64); 2];

/// What translating the IPv4 packets of a flow adds to their IP header
/// checksum (the addresses) and to their TCP/UDP checksum (the addresses,
/// in the pseudo-header, and the ports), per direction: RFC 1624's
/// `~m + m'` over the changed words, folded to 16 bits. A packet received
/// as `orig` leaves as `reply` reversed, and one received as `reply` as
/// `orig` reversed. Zeros for IPv6 tuples (only IPv4 is translated). Out
/// of line: inlined, it cost `open` more in spilled registers than it
/// computes.
#[inline(never)]
fn nat_deltas(orig: &Tuple, reply: &Tuple) -> [(u16, u16); 2] {
    let v4 = crate::acl::is_v4;
    let halves = |x: u32| u64::from(x >> 16) + u64::from(x & 0xffff);
    let neg = |x: u16| u64::from(!x);
    if !v4(orig.src) && !v4(orig.dst) && v4(reply.src) && v4(reply.dst) {
        return nat64_deltas(orig, reply);
    }
    if !(v4(orig.src) || v4(orig.dst) || v4(reply.src) || v4(reply.dst)) {
        return nat66_deltas(orig, reply);
    }
    if !(v4(orig.src) && v4(orig.dst) && v4(reply.src) && v4(reply.dst)) {
        return [(0, 0); 2];
    }
    let (os, od) = (orig.src as u32, orig.dst as u32);
    let (rs, rd) = (reply.src as u32, reply.dst as u32);
    let a0 = halves(!os) + halves(!od) + halves(rd) + halves(rs);
    let a1 = halves(!rs) + halves(!rd) + halves(od) + halves(os);
    let p0 = neg(orig.sport) + neg(orig.dport) + u64::from(reply.dport) + u64::from(reply.sport);
    let p1 = neg(reply.sport) + neg(reply.dport) + u64::from(orig.dport) + u64::from(orig.sport);
    let f = crate::checksum::fold;
    [(f(a0), f(a0 + p0)), (f(a1), f(a1 + p1))]
}

/// [`nat_deltas`] of a NAT64 flow (IPv6 original, IPv4 reply), for the
/// TCP/UDP checksum each way (the pseudo-header's addresses, which change
/// family, and the ports: `crate::nat64`), and for the IPv4 header written
/// on the way out: the sum of its words that do not change from packet to
/// packet (version, protocol, addresses), in place of the IP header's
/// delta (the way back has no IP header checksum: 0).
fn nat64_deltas(orig: &Tuple, reply: &Tuple) -> [(u16, u16); 2] {
    let words = |a: u128| {
        (0..8)
            .map(|i| u64::from((a >> (16 * i)) as u16))
            .sum::<u64>()
    };
    let negs = |a: u128| {
        (0..8)
            .map(|i| u64::from(!((a >> (16 * i)) as u16)))
            .sum::<u64>()
    };
    let halves = |x: u32| u64::from(x >> 16) + u64::from(x & 0xffff);
    let neg = |x: u16| u64::from(!x);
    let (rs, rd) = (reply.src as u32, reply.dst as u32);
    let l4_out = negs(orig.src)
        + negs(orig.dst)
        + neg(orig.sport)
        + neg(orig.dport)
        + halves(rd)
        + halves(rs)
        + u64::from(reply.dport)
        + u64::from(reply.sport);
    let l4_back = halves(!rs)
        + halves(!rd)
        + neg(reply.sport)
        + neg(reply.dport)
        + words(orig.dst)
        + words(orig.src)
        + u64::from(orig.dport)
        + u64::from(orig.sport);
    let header = 0x4500 + u64::from(reply.proto) + halves(rd) + halves(rs);
    let f = crate::checksum::fold;
    [(f(header), f(l4_out)), (0, f(l4_back))]
}

/// [`nat_deltas`] of an IPv6 flow translated (IPv6 masquerade): the
/// TCP/UDP/ICMPv6 checksum's each way (all three cover the addresses in
/// their pseudo-header; an echo's identifier is in it once, where TCP and
/// UDP have two ports); IPv6 has no header checksum (0).
fn nat66_deltas(orig: &Tuple, reply: &Tuple) -> [(u16, u16); 2] {
    let words = |a: u128| {
        (0..8)
            .map(|i| u64::from((a >> (16 * i)) as u16))
            .sum::<u64>()
    };
    let negs = |a: u128| {
        (0..8)
            .map(|i| u64::from(!((a >> (16 * i)) as u16)))
            .sum::<u64>()
    };
    let neg = |x: u16| u64::from(!x);
    let echo = orig.proto == 58;
    let p0 = if echo {
        neg(orig.sport) + u64::from(reply.dport)
    } else {
        neg(orig.sport) + neg(orig.dport) + u64::from(reply.dport) + u64::from(reply.sport)
    };
    let p1 = if echo {
        neg(reply.dport) + u64::from(orig.sport)
    } else {
        neg(reply.sport) + neg(reply.dport) + u64::from(orig.dport) + u64::from(orig.sport)
    };
    let d0 = negs(orig.src) + negs(orig.dst) + words(reply.dst) + words(reply.src) + p0;
    let d1 = negs(reply.src) + negs(reply.dst) + words(orig.dst) + words(orig.src) + p1;
    let f = crate::checksum::fold;
    [(0, f(d0)), (0, f(d1))]
}

/// A tuple's 128-bit address as an IP address (IPv4 mapped: IPv4).
pub fn address(a: u128) -> std::net::IpAddr {
    if crate::acl::is_v4(a) {
        std::net::IpAddr::V4(std::net::Ipv4Addr::from(a as u32))
    } else {
        std::net::IpAddr::V6(std::net::Ipv6Addr::from(a))
    }
}

impl std::fmt::Display for Tuple {
    /// `udp 198.18.0.5:1024 -> 203.0.113.7:53` (ICMP: the identifier).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addr = address;
        let proto = match self.proto {
            6 => "tcp".to_string(),
            17 => "udp".to_string(),
            1 => "icmp".to_string(),
            58 => "icmpv6".to_string(),
            p => format!("proto {p}"),
        };
        let ep = |a: u128, p: u16| match addr(a) {
            std::net::IpAddr::V6(v) => format!("[{v}]:{p}"),
            v => format!("{v}:{p}"),
        };
        write!(
            f,
            "{proto} {} -> {}",
            ep(self.src, self.sport),
            ep(self.dst, self.dport)
        )
    }
}

impl State {
    /// Name in reports (conntrack's own words).
    pub fn name(self) -> &'static str {
        match self {
            State::SynSent => "syn_sent",
            State::SynRecv => "syn_recv",
            State::Established => "established",
            State::FinWait => "fin_wait",
            State::TimeWait => "time_wait",
            State::Closed => "close",
            State::Unreplied => "unreplied",
            State::Replied => "replied",
        }
    }
}

impl Flow {
    /// An empty slot.
    const DEAD: Flow = {
        const NONE: Tuple = Tuple {
            src: 0,
            dst: 0,
            sport: 0,
            dport: 0,
            proto: 0,
            zone: 0,
        };
        const NO_HOP: RouteCache = RouteCache {
            generation: 0,
            port: 0,
            mac: [0; 6],
        };
        Flow {
            orig: NONE,
            reply: NONE,
            state: State::Closed,
            last_ns: 0,
            live: false,
            nat: false,
            remote: false,
            orig_hop: NO_HOP,
            reply_hop: NO_HOP,
            deltas: [(0, 0); 2],
            syn_end: 0,
        }
    };

    /// The flow as `conntrack -L` shows one: original tuple, state, the
    /// seconds until it expires unless a packet comes (`expires_ns`, as
    /// [`ConnTrack::copy_flows`] gives it), reply tuple, translated or not,
    /// and when flows are accounted, the packets and bytes of each
    /// direction (the originator's / the replies') since its last record.
    pub fn describe(&self, expires_ns: u64, counts: Option<Counts>) -> String {
        let counted = counts.map_or(String::new(), |[(op, ob), (rp, rb)]| {
            format!(" packets {op}/{rp} bytes {ob}/{rb}")
        });
        format!(
            "{} {} {}s reply {}{}{counted}",
            self.orig,
            self.state.name(),
            expires_ns / 1_000_000_000,
            self.reply,
            if self.nat { " [nat]" } else { "" }
        )
    }

    /// Whether packets of the flow are translated.
    #[inline]
    pub fn nat(&self) -> bool {
        self.nat
    }

    /// What translating a packet received in direction `reply` adds to
    /// its IP header checksum and to its TCP/UDP checksum (IPv4).
    #[inline(always)]
    pub(crate) fn nat_deltas(&self, reply: bool) -> (u16, u16) {
        self.deltas[usize::from(reply)]
    }

    /// The cached next hop of the flow's packets in direction `reply`.
    #[inline(always)]
    pub(crate) fn hop_mut(&mut self, reply: bool) -> &mut RouteCache {
        if reply {
            &mut self.reply_hop
        } else {
            &mut self.orig_hop
        }
    }

    /// The tuple a packet received in direction `reply` leaves with.
    #[inline]
    pub fn translated(&self, reply: bool) -> Tuple {
        if reply {
            self.orig.reverse()
        } else {
            self.reply.reverse()
        }
    }
}

/// Why [`ConnTrack::open`] refused a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// A TCP flow must open with a bare SYN.
    NotSyn,
    /// The table is full and nothing could be evicted.
    Full,
    /// One of the tuples is already tracked.
    Exists,
}

const TCP: u8 = 6;
/// TCP flag bits (as in the classifier key's `flags`).
pub(crate) const SYN: u16 = 0x02;
pub(crate) const ACK: u16 = 0x10;
pub(crate) const FIN: u16 = 0x01;
pub(crate) const RST: u16 = 0x04;

/// Whether a first packet of protocol `proto` with TCP `flags` may open a
/// flow: anything but TCP, and TCP only with a bare SYN.
#[inline]
pub fn opens_flow(proto: u8, flags: u16) -> bool {
    proto != TCP || flags & (SYN | ACK | RST | FIN) == SYN
}

/// Which flows a control-path request is about, as conntrack(8)'s `-s`,
/// `-d`, `-p`, `--sport` and `--dport` select them: each field given must
/// match the flow's original direction (as first seen, before NAT); none
/// given, every flow. Prefixes are on the tuples' 128-bit addresses (IPv4
/// mapped: a /24 is a /120).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Source prefix.
    pub src: Option<(u128, u8)>,
    /// Destination prefix.
    pub dst: Option<(u128, u8)>,
    /// Protocol.
    pub proto: Option<u8>,
    /// Source port (ICMP: the query's identifier).
    pub sport: Option<u16>,
    /// Destination port.
    pub dport: Option<u16>,
}

impl Filter {
    /// Whether flow `f` is one of those selected.
    pub fn matches(&self, f: &Flow) -> bool {
        let t = &f.orig;
        let within = |a: u128, p: Option<(u128, u8)>| p.is_none_or(|p| crate::prefix::in6(a, p));
        within(t.src, self.src)
            && within(t.dst, self.dst)
            && self.proto.is_none_or(|p| p == t.proto)
            && self.sport.is_none_or(|p| p == t.sport)
            && self.dport.is_none_or(|p| p == t.dport)
    }
}

impl Tuple {
    /// The tuple's hash, as the flow index places it (computed once per
    /// packet: [`ConnTrack::find_hashed`]).
    #[inline(always)]
    pub fn hash(&self) -> u64 {
        let t = self;
        let m = |x: u64, y: u64| {
            let p = u128::from(x ^ 0x9e37_79b9_7f4a_7c15) * u128::from(y ^ 0xd6e8_feb8_6659_fd93);
            (p as u64) ^ ((p >> 64) as u64)
        };
        let ports = u64::from(t.sport) << 48
            | u64::from(t.dport) << 32
            | u64::from(t.proto) << 16
            | u64::from(t.zone);
        let a = m(t.src as u64 ^ (t.src >> 64) as u64, t.dst as u64);
        let b = m((t.dst >> 64) as u64, ports);
        m(a, b)
    }
}

/// A per-core connection table.
#[derive(Clone)]
pub struct ConnTrack {
    /// Both tuples of every flow → slot << 1 | reply.
    map: Index,
    slots: Vec<Flow>,
    /// Per slot, the TCP windows of its flow (when `tcp_window`).
    windows: Vec<Window>,
    /// Whether TCP flows' windows are tracked.
    tcp_window: bool,
    free: Vec<u32>,
    capacity: usize,
    timeouts: Timeouts,
    /// `timeouts` per state.
    limits: Limits,
    cursor: usize,
    now_ns: u64,
    events: [u64; Event::COUNT],
    /// Flows whose packets are translated (each holds a NAT mapping).
    nat_flows: usize,
    /// Where changes go for the HA peer (`[ha] peer`; `None`: off).
    sync: sync::Slot,
    /// Per slot, its flow's accounting (`[export]`; empty: off).
    acct: Vec<export::Acct>,
    /// Where flow records go (`[export]`; `None`: off).
    export: export::Slot,
    /// The accounting's clock: milliseconds since the export was set.
    now_ms: u32,
    /// The port blocks of source NAT rules with `block` (`None`: none).
    blocks: Option<Box<blocks::Blocks>>,
}

impl ConnTrack {
    /// The bytes a table of `capacity` flows takes, all allocated and
    /// written at [`ConnTrack::new`]: the flows, the free list, the index
    /// (two entries a flow), the TCP windows when tracked, and the flows'
    /// accounting when they are exported ([`ConnTrack::set_export`]).
    pub fn bytes_for(capacity: usize, tcp_window: bool, exported: bool) -> usize {
        let c = capacity.max(1);
        let per = std::mem::size_of::<Flow>()
            + std::mem::size_of::<u32>()
            + if tcp_window {
                std::mem::size_of::<Window>()
            } else {
                0
            }
            + if exported {
                std::mem::size_of::<export::Acct>()
            } else {
                0
            };
        c * per + Index::bytes_for(2 * c)
    }

    /// A table for at most `capacity` flows, allocated and written up
    /// front (as DPDK's rte_hash is): every page of the index, the flow
    /// slots and the free list is faulted in here, on the control path,
    /// and none by a new flow's first packet in the fast path (a page
    /// fault there costs a kernel entry, and with huge pages the zeroing,
    /// or compaction, of 2 MiB). The price is the whole table resident
    /// from the start: about 190–230 bytes per flow of capacity (the TCP
    /// windows are 32 of them, none with `set_tcp_window(false)`).
    pub fn new(capacity: usize, timeouts: Timeouts) -> Self {
        let capacity = capacity.max(1);
        let (mut slots, mut free) = (written(capacity, Flow::DEAD), written(capacity, 0));
        slots.clear();
        free.clear();
        ConnTrack {
            map: Index::new(2 * capacity),
            slots,
            windows: written(capacity, Window::default()),
            tcp_window: true,
            free,
            capacity,
            timeouts,
            limits: timeouts.limits(),
            cursor: 0,
            now_ns: 0,
            events: [0; Event::COUNT],
            nat_flows: 0,
            sync: sync::Slot(None),
            acct: Vec::new(),
            export: export::Slot(None),
            now_ms: 0,
            blocks: None,
        }
    }

    /// An empty table with the same capacity, timeouts, window tracking
    /// and port blocks (all free).
    pub fn empty_like(&self) -> Self {
        let mut t = ConnTrack::new(self.capacity, self.timeouts);
        t.tcp_window = self.tcp_window;
        t.blocks = self.blocks.as_ref().map(|b| Box::new(b.emptied()));
        t
    }

    /// Tracks TCP flows' windows ([`Window`]; on by default, as Linux's
    /// `nf_conntrack_tcp_be_liberal = 0`) or not (the TCP state machine
    /// alone, as `be_liberal = 1`). Off, the windows' table (32 bytes a
    /// flow of capacity) is given back; set before any flow is tracked
    /// (the configuration's `tcp_window` is applied by a restart).
    pub fn set_tcp_window(&mut self, on: bool) {
        if on && !self.tcp_window {
            self.windows = written(self.capacity, Window::default());
        } else if !on {
            self.windows = Vec::new();
        }
        self.tcp_window = on;
    }

    /// Whether TCP flows' windows are tracked.
    pub fn tcp_window(&self) -> bool {
        self.tcp_window
    }

    /// Flows in the table.
    pub fn len(&self) -> usize {
        self.map.len / 2
    }

    /// Flows whose packets are translated (each holds a NAT mapping).
    pub fn nat_flows(&self) -> usize {
        self.nat_flows
    }

    /// The live flows, in slot order.
    pub fn flows(&self) -> impl Iterator<Item = &Flow> {
        self.slots.iter().filter(|f| f.live)
    }

    /// How long flow `f` has left, in nanoseconds, unless a packet of it
    /// comes: its state's timeout less its idle time at the table's clock
    /// (the timeout column of `conntrack -L`).
    pub fn expires_in(&self, f: &Flow) -> u64 {
        self.limits[f.state as usize].saturating_sub(self.now_ns.saturating_sub(f.last_ns))
    }

    /// Copies into `out` the live flows `filter` selects of at most `scan`
    /// slots from slot `from`, each with the nanoseconds until it expires
    /// ([`ConnTrack::expires_in`]), until `out` holds `max`; returns the
    /// slot to go on from, or `None` past the last (control path, `sluice
    /// ctl show conntrack`: a worker answers a page per tick, its work
    /// bounded by `scan`).
    pub fn copy_flows(
        &self,
        from: usize,
        scan: usize,
        max: usize,
        filter: &Filter,
        out: &mut Vec<Listed>,
    ) -> Option<usize> {
        let end = from.saturating_add(scan).min(self.slots.len());
        for i in from..end {
            if out.len() >= max {
                return Some(i);
            }
            let f = &self.slots[i];
            if f.live && filter.matches(f) {
                out.push((*f, self.expires_in(f), self.counts(i)));
            }
        }
        (end < self.slots.len()).then_some(end)
    }

    /// Deletes the live flows `filter` selects in at most `scan` slots from
    /// slot `from` (counted `ct_deleted`; a translated flow's NAT port is
    /// free again): how many, and the slot to go on from, or `None` past
    /// the last (control path, `sluice ctl clear conntrack`, as `conntrack
    /// -D`: a page per tick, as [`ConnTrack::copy_flows`]). The next
    /// packet of a deleted flow is a new flow's (the rules decide it
    /// again, and it gets a new mapping).
    pub fn delete_flows(
        &mut self,
        from: usize,
        scan: usize,
        filter: &Filter,
    ) -> (u64, Option<usize>) {
        let end = from.saturating_add(scan).min(self.slots.len());
        let mut n = 0;
        for i in from..end {
            if self.slots[i].live && filter.matches(&self.slots[i]) {
                self.remove(i as u32, export::EndReason::Forced);
                n += 1;
            }
        }
        self.events[Event::Deleted as usize] += n;
        (n, (end < self.slots.len()).then_some(end))
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.len == 0
    }

    /// Where the lookup of the tuple hashed `h` ([`Tuple::hash`]) reads
    /// first: its first bucket (to prefetch).
    #[inline]
    pub fn bucket_of(&self, h: u64) -> *const u8 {
        let b1 = self.map.first(h);
        std::ptr::from_ref(&self.map.buckets[b1]).cast()
    }

    /// The first entry whose signature matches hash `h`: a hint for
    /// [`ConnTrack::find_hashed`], not checked against the tuple (to
    /// prefetch its flow, [`ConnTrack::flow_at`], before the packet's turn).
    #[inline]
    pub fn hint(&self, h: u64) -> Option<u32> {
        self.map.find(h, |_| true).map(|(_, _, v)| v)
    }

    /// Where the flow of a hint lives (to prefetch).
    #[inline]
    pub fn flow_at(&self, hint: u32) -> Option<*const u8> {
        self.slots
            .get((hint >> 1) as usize)
            .map(|f| std::ptr::from_ref(f).cast())
    }

    /// Where the TCP windows of a hint's flow live (to prefetch with the
    /// flow, when they are tracked).
    #[inline]
    pub fn window_at(&self, hint: u32) -> Option<*const u8> {
        self.windows
            .get((hint >> 1) as usize)
            .map(|w| std::ptr::from_ref(w).cast())
    }

    /// The index position of tuple `t`, hashed `h`.
    #[inline(always)]
    fn locate(&self, t: &Tuple, h: u64) -> Option<(usize, usize, u32)> {
        let slots = &self.slots;
        self.map.find(h, |v| Self::holds(slots, v, t))
    }

    /// Whether index value `v` (slot << 1 | reply) names a live flow with
    /// tuple `t` in its direction.
    #[inline(always)]
    fn holds(slots: &[Flow], v: u32, t: &Tuple) -> bool {
        match slots.get((v >> 1) as usize) {
            Some(f) => f.live && t == if v & 1 == 1 { &f.reply } else { &f.orig },
            None => false,
        }
    }

    /// Most flows it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The counters, indexed by [`Event`].
    pub fn events(&self) -> &[u64; Event::COUNT] {
        &self.events
    }

    /// One counter.
    pub fn event(&self, e: Event) -> u64 {
        self.events[e as usize]
    }

    /// Counts an event the caller found (an invalid packet, a related
    /// ICMP error).
    pub fn count(&mut self, e: Event) {
        self.events[e as usize] += 1;
    }

    /// The current time (ns) as last given to [`ConnTrack::tick`].
    pub fn now(&self) -> u64 {
        self.now_ns
    }

    fn expired(&self, e: &Flow) -> bool {
        stale(self.now_ns, &self.limits, e)
    }

    /// Removes flow `i` (if live), its records written for `why` when
    /// flows are exported.
    fn remove(&mut self, i: u32, why: export::EndReason) {
        let e = self.slots[i as usize];
        if e.live {
            if self.sync.0.is_some() {
                self.log(sync::Kind::Deleted, i as usize);
            }
            if self.export.0.is_some() {
                self.export_end(i as usize, why);
            }
            for t in [e.orig, e.reply] {
                let h = t.hash();
                if let Some((b, w, _)) = self.locate(&t, h) {
                    self.map.remove_at(h, b, w);
                }
            }
            self.slots[i as usize].live = false;
            self.free.push(i);
            if e.nat {
                self.nat_flows -= 1;
                if self.blocks.is_some() {
                    self.block_leave(&e);
                }
            }
        }
    }

    /// Advances the clock and sweeps a part of the table for expired
    /// flows (see the module's "Eviction").
    pub fn tick(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
        self.tick_export();
        let n = self.slots.len();
        let mut removed = 0;
        for _ in 0..sweep_scan(n) {
            self.cursor = (self.cursor + 1) % n;
            let e = self.slots[self.cursor];
            if e.live && self.expired(&e) {
                self.remove(self.cursor as u32, Self::timed_out(&e));
                self.events[Event::Expired as usize] += 1;
                removed += 1;
            } else if e.live && !self.acct.is_empty() {
                self.sweep_export(self.cursor);
            }
            if self.sync.0.is_some() {
                self.sweep_sync(self.cursor);
            }
            if removed == SWEEP_PER_TICK {
                break;
            }
        }
    }

    /// A slot for a new flow, evicting an unreplied one if the table is
    /// full.
    fn slot(&mut self) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            return Some(i);
        }
        if self.slots.len() < self.capacity {
            self.slots.push(Flow::DEAD);
            return Some((self.slots.len() - 1) as u32);
        }
        let n = self.slots.len();
        for _ in 0..EARLY_DROP_PROBES.min(n) {
            self.cursor = (self.cursor + 1) % n;
            let e = self.slots[self.cursor];
            let expired = self.expired(&e);
            let early = matches!(e.state, State::Unreplied | State::SynSent | State::Closed);
            if e.live && (expired || early) {
                let why = if expired {
                    Self::timed_out(&e)
                } else {
                    export::EndReason::Resources
                };
                self.remove(self.cursor as u32, why);
                if expired {
                    self.events[Event::Expired as usize] += 1;
                } else {
                    self.events[Event::Evicted as usize] += 1;
                }
                return self.free.pop();
            }
        }
        None
    }

    /// The live flow a packet with tuple `t` belongs to, and whether it
    /// travels in the reply direction; an expired flow is removed.
    #[inline]
    pub fn find(&mut self, t: &Tuple) -> Option<Hit> {
        self.find_hashed(t, t.hash(), None)
    }

    /// [`ConnTrack::find`] of `t` hashed `h`, trying first the entry
    /// [`ConnTrack::hint`] gave for it (when the burst was prefetched): if
    /// that names a live flow with this tuple, it is the one (a tuple
    /// belongs to at most one live flow), and the bucket is not scanned
    /// again.
    #[inline(always)]
    pub fn find_hashed(&mut self, t: &Tuple, h: u64, hint: Option<u32>) -> Option<Hit> {
        let v = match hint {
            Some(v) if Self::holds(&self.slots, v, t) => v,
            _ => self.locate(t, h)?.2,
        };
        let (i, reply) = (v >> 1, v & 1 == 1);
        if self.expired(self.slots.get(i as usize)?) {
            self.expire(i);
            return None;
        }
        Some((i, reply))
    }

    /// Removes flow `i`, found expired by a lookup.
    #[cold]
    #[inline(never)]
    fn expire(&mut self, i: u32) {
        let why = Self::timed_out(&self.slots[i as usize]);
        self.remove(i, why);
        self.events[Event::Expired as usize] += 1;
    }

    /// Whether `t` is either tuple of a tracked flow (expired or not).
    #[inline]
    pub fn contains(&self, t: &Tuple) -> bool {
        self.contains_hashed(t, t.hash())
    }

    /// [`ConnTrack::contains`] of `t` hashed `h` ([`Tuple::hash`]).
    #[inline]
    pub fn contains_hashed(&self, t: &Tuple, h: u64) -> bool {
        self.locate(t, h).is_some()
    }

    /// The flow in slot `i`.
    #[inline]
    pub fn flow(&self, i: u32) -> &Flow {
        &self.slots[i as usize]
    }

    /// The cached next hop of flow `i`'s packets in direction `reply`.
    #[inline]
    pub(crate) fn hop_mut(&mut self, i: u32, reply: bool) -> &mut RouteCache {
        self.slots[i as usize].hop_mut(reply)
    }

    /// Moves flow `i` on by a packet in direction `reply` with TCP `flags`
    /// (and, for TCP, its segment `seg`, checked against the flow's
    /// windows when they are tracked; `None`: not checked, as for a first
    /// fragment): `Established` or, for a TCP packet the state machine or
    /// the windows refuse, `Invalid` (the flow is left as it was).
    #[inline(always)]
    pub fn advance(&mut self, i: u32, reply: bool, flags: u16, seg: Option<&Segment>) -> Conn {
        self.step_slot(i as usize, reply, flags, seg)
            .unwrap_or(Conn::Invalid)
    }

    /// [`step`] of the flow in slot `i` (`None`: no such slot), with its
    /// windows when they are tracked and `seg` is given.
    #[inline(always)]
    fn step_slot(
        &mut self,
        i: usize,
        reply: bool,
        flags: u16,
        seg: Option<&Segment>,
    ) -> Option<Conn> {
        let e = self.slots.get_mut(i)?;
        let before = e.state;
        let win = match seg {
            Some(s) if self.tcp_window && e.orig.proto == TCP => Some((&mut self.windows[i], s)),
            _ => None,
        };
        let c = step(
            e,
            reply,
            flags,
            win,
            self.now_ns,
            &self.limits,
            &mut self.events,
        );
        if self.sync.0.is_some() && self.slots[i].state != before {
            self.log(sync::Kind::Updated, i);
        }
        Some(c)
    }

    /// [`ConnTrack::find_hashed`] then [`ConnTrack::advance`], handing
    /// back the flow itself (the established path's lookup: its caller
    /// translates and routes through the reference instead of indexing
    /// the slot again for each): the live flow of `t`, the packet's
    /// direction and what the state machine made of it. A packet the
    /// state machine takes is accounted when flows are
    /// ([`ConnTrack::account`]: `bytes()` of IP, read only then, in on
    /// `in_port`).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn track_hashed(
        &mut self,
        t: &Tuple,
        h: u64,
        hint: Option<u32>,
        flags: u16,
        seg: Option<&Segment>,
        bytes: impl FnOnce() -> usize,
        in_port: u16,
    ) -> Option<(&mut Flow, bool, Conn)> {
        let (i, reply, conn) = self.track_index(t, h, hint, flags, seg, bytes, in_port)?;
        Some((&mut self.slots[i as usize], reply, conn))
    }

    /// [`ConnTrack::track_hashed`] handing back the flow's index (for a
    /// caller that needs the table between: NAT64's translation).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn track_index(
        &mut self,
        t: &Tuple,
        h: u64,
        hint: Option<u32>,
        flags: u16,
        seg: Option<&Segment>,
        bytes: impl FnOnce() -> usize,
        in_port: u16,
    ) -> Option<(u32, bool, Conn)> {
        let (i, reply) = self.find_hashed(t, h, hint)?;
        let conn = self.step_slot(i as usize, reply, flags, seg)?;
        if !self.acct.is_empty() && conn != Conn::Invalid {
            // Out of line: inlined, the path's registers spilled around
            // it (3 instructions a packet more without export, counted).
            self.account_out_of_line(i, reply, bytes(), flags, in_port);
        }
        Some((i, reply, conn))
    }

    /// Starts tracking a flow whose first packet had tuple `orig` (and TCP
    /// `flags`, and segment `seg`: its windows start from it) and whose
    /// replies will carry `reply`.
    pub fn open(
        &mut self,
        orig: Tuple,
        reply: Tuple,
        flags: u16,
        seg: Option<&Segment>,
    ) -> Result<u32, Refused> {
        let ho = orig.hash();
        if opens_flow(orig.proto, flags) && self.locate(&orig, ho).is_some() {
            self.events[Event::Invalid as usize] += 1;
            return Err(Refused::Exists);
        }
        self.open_missed(orig, ho, reply, reply.hash(), flags, seg)
    }

    /// [`ConnTrack::open`] of a flow whose tuple `orig` (hashed `ho`) the
    /// caller has just looked up and not found (a new flow's first
    /// packet: [`ConnTrack::find_hashed`] gave `None`, and nothing was
    /// opened since), with `reply` hashed `hr`: each tuple is hashed once
    /// per packet, and `orig` not looked up again.
    pub fn open_missed(
        &mut self,
        orig: Tuple,
        ho: u64,
        reply: Tuple,
        hr: u64,
        flags: u16,
        seg: Option<&Segment>,
    ) -> Result<u32, Refused> {
        debug_assert_eq!(ho, orig.hash());
        debug_assert_eq!(hr, reply.hash());
        debug_assert!(!self.contains(&orig), "open_missed of a tracked tuple");
        if !opens_flow(orig.proto, flags) {
            self.events[Event::Invalid as usize] += 1;
            return Err(Refused::NotSyn);
        }
        if orig == reply || self.locate(&reply, hr).is_some() {
            self.events[Event::Invalid as usize] += 1;
            return Err(Refused::Exists);
        }
        self.enter(orig, ho, reply, hr, seg)
    }

    /// [`ConnTrack::open_missed`] of a packet that opens a flow
    /// (`opens_flow` of its protocol and flags holds) and whose reply
    /// tuple `reply` (hashed `hr`) the caller has also just found
    /// untracked ([`ConnTrack::contains_hashed`] gave `false`, and
    /// nothing was opened since): a source-NAT port picked for it. Neither
    /// tuple is looked up again.
    pub fn open_picked(
        &mut self,
        orig: Tuple,
        ho: u64,
        reply: Tuple,
        hr: u64,
        flags: u16,
        seg: Option<&Segment>,
    ) -> Result<u32, Refused> {
        debug_assert_eq!(ho, orig.hash());
        debug_assert_eq!(hr, reply.hash());
        debug_assert!(
            opens_flow(orig.proto, flags),
            "open_picked of a packet that opens nothing"
        );
        debug_assert!(!self.contains(&orig), "open_picked of a tracked tuple");
        debug_assert!(
            !self.contains(&reply),
            "open_picked of a tracked reply tuple"
        );
        if orig == reply {
            self.events[Event::Invalid as usize] += 1;
            return Err(Refused::Exists);
        }
        self.enter(orig, ho, reply, hr, seg)
    }

    /// Enters a new flow of tuples `orig` and `reply` (hashed `ho`, `hr`),
    /// both known to be untracked: its slot, then both index entries.
    #[inline(always)]
    fn enter(
        &mut self,
        orig: Tuple,
        ho: u64,
        reply: Tuple,
        hr: u64,
        seg: Option<&Segment>,
    ) -> Result<u32, Refused> {
        let state = if orig.proto == TCP {
            State::SynSent
        } else {
            State::Unreplied
        };
        self.enter_as(orig, ho, reply, hr, seg, state, self.now_ns)
    }

    /// [`ConnTrack::enter`] in state `state`, last seen at `last_ns` (a
    /// flow read back: [`saved`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn enter_as(
        &mut self,
        orig: Tuple,
        ho: u64,
        reply: Tuple,
        hr: u64,
        seg: Option<&Segment>,
        state: State,
        last_ns: u64,
    ) -> Result<u32, Refused> {
        let Some(i) = self.slot() else {
            self.events[Event::TableFull as usize] += 1;
            return Err(Refused::Full);
        };
        let nat = reply != orig.reverse();
        let deltas = if nat {
            nat_deltas(&orig, &reply)
        } else {
            [(0, 0); 2]
        };
        // The flow first: entering a tuple may move another flow's entry,
        // whose hash comes from its slot (this one's among them).
        self.slots[i as usize] = Flow {
            orig,
            reply,
            state,
            last_ns,
            live: true,
            nat,
            remote: false,
            orig_hop: RouteCache::default(),
            reply_hop: RouteCache::default(),
            deltas,
            syn_end: 0,
        };
        let slots = &self.slots;
        let hash_of = |v: u32| {
            let f = &slots[(v >> 1) as usize];
            if v & 1 == 1 {
                f.reply.hash()
            } else {
                f.orig.hash()
            }
        };
        if !self.map.insert(ho, i << 1, hash_of) || !self.map.insert(hr, i << 1 | 1, hash_of) {
            // Out again: the original tuple's entry if it went in (where
            // the reply's insert may have moved it).
            if let Some((b, w, _)) = self.locate(&orig, ho) {
                self.map.remove_at(ho, b, w);
            }
            self.slots[i as usize].live = false;
            self.free.push(i);
            self.events[Event::TableFull as usize] += 1;
            return Err(Refused::Full);
        }
        self.events[Event::Created as usize] += 1;
        if nat {
            self.nat_flows += 1;
            if self.blocks.is_some() {
                self.block_enter(i as usize);
            }
        }
        if self.sync.0.is_some() {
            self.log(sync::Kind::Created, i as usize);
        }
        if !self.acct.is_empty() {
            self.account_new(i as usize);
        }
        if self.tcp_window && orig.proto == TCP {
            // A flow without its SYN's segment (a first fragment) starts
            // with nothing seen: each side is taken from its first segment.
            self.windows[i as usize] = seg.map_or(Window::default(), Window::open);
        }
        Ok(i)
    }

    /// Tracks one packet of an untranslated flow (lookup, then advance or
    /// open); `k.flags` are the TCP flags (windows are not checked: the
    /// key has no segment).
    pub fn track(&mut self, zone: u16, k: &Key) -> Conn {
        let t = Tuple::of(zone, k);
        let h = t.hash();
        if let Some((i, reply)) = self.find_hashed(&t, h, None) {
            return self.advance(i, reply, k.flags, None);
        }
        let reply = t.reverse();
        match self.open_missed(t, h, reply, reply.hash(), k.flags, None) {
            Ok(_) => Conn::New,
            Err(_) => Conn::Invalid,
        }
    }

    /// Classifies an ICMP error quoting the packet `quoted` (as it was sent
    /// by the flow's endpoint): `Related` if that flow is tracked.
    pub fn related(&self, zone: u16, quoted: &Key) -> Conn {
        let t = Tuple::of(zone, quoted);
        match self.locate(&t, t.hash()) {
            Some((_, _, v)) if !self.expired(&self.slots[(v >> 1) as usize]) => Conn::Related,
            _ => Conn::Invalid,
        }
    }

    /// The state of the flow of `k`, if tracked.
    pub fn state(&self, zone: u16, k: &Key) -> Option<State> {
        let t = Tuple::of(zone, k);
        self.locate(&t, t.hash())
            .map(|(_, _, v)| self.slots[(v >> 1) as usize].state)
    }
}

#[cfg(test)]
mod tests;
