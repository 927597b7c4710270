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
//! and by an incremental sweep of [`SWEEP_PER_TICK`] slots per
//! [`ConnTrack::tick`]. When the table is full, a new flow may take the slot
//! of an entry that has not seen a reply (Linux's "early drop"), searched
//! for among the next [`EARLY_DROP_PROBES`] entries of the sweep order;
//! established flows are never evicted, and if none can be, the new flow is
//! refused and counted as `table_full`.

use crate::acl::Key;
use crate::route_cache::RouteCache;

mod window;
pub use window::{Check, Segment, Side, Window};

/// Slots examined by each [`ConnTrack::tick`] sweep.
pub const SWEEP_PER_TICK: usize = 1024;
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
        /// expires as a closed one unless another packet comes).
        WindowIgnored = "ct_window_ignored",
        /// ICMP errors matched to a tracked flow (`related`).
        Related = "ct_related",
        /// Flows deleted on request (`sluice ctl clear conntrack`, as
        /// `conntrack -D`).
        Deleted = "ct_deleted",
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
}

const _: () = assert!(std::mem::size_of::<Flow>() == 128, "two cache lines");

/// A flow as a listing gives it ([`ConnTrack::copy_flows`]): a copy, and
/// the nanoseconds until it expires unless a packet of it comes.
pub type Listed = (Flow, u64);

/// Whether flow `e` has been idle longer than its state's timeout at
/// `now`.
#[inline(always)]
fn stale(now: u64, limits: &Limits, e: &Flow) -> bool {
    now.saturating_sub(e.last_ns) > limits[e.state as usize]
}

/// Moves flow `e` on by a packet in direction `reply` with TCP `flags` at
/// `now` (see [`ConnTrack::advance`]); a refused packet is counted in
/// `events`. `win`: the flow's window and the segment, when a TCP flow's
/// windows are tracked (the state moves only if the segment is in them).
#[inline(always)]
fn step(
    e: &mut Flow,
    reply: bool,
    flags: u16,
    win: Option<(&mut Window, &Segment)>,
    now: u64,
    limits: &Limits,
    events: &mut [u64; Event::COUNT],
) -> Conn {
    let next = if e.orig.proto == TCP {
        match tcp_next(e.state, reply, flags) {
            Some(s) => s,
            None => {
                events[Event::Invalid as usize] += 1;
                return Conn::Invalid;
            }
        }
    } else if reply {
        State::Replied
    } else {
        e.state
    };
    if let Some((w, seg)) = win {
        match w.check(reply, flags, seg, e.state) {
            Check::Accept => {}
            Check::Ignore => {
                events[Event::WindowIgnored as usize] += 1;
                return Conn::Established { reply };
            }
            Check::Reset => {
                // Expires as a closed flow would, unless a packet comes:
                // its last packet dated back by the difference (a clock
                // younger than that, hours from boot, keeps it at most
                // until the clock reaches its own timeout).
                events[Event::WindowIgnored as usize] += 1;
                let shorter =
                    limits[e.state as usize].saturating_sub(limits[State::Closed as usize]);
                e.last_ns = now.saturating_sub(shorter);
                return Conn::Established { reply };
            }
            Check::Invalid => {
                events[Event::OutOfWindow as usize] += 1;
                events[Event::Invalid as usize] += 1;
                return Conn::Invalid;
            }
        }
    }
    e.state = next;
    e.last_ns = now;
    Conn::Established { reply }
}

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
    let v4 = |a: u128| a >> 32 == 0xffff;
    if !(v4(orig.src) && v4(orig.dst) && v4(reply.src) && v4(reply.dst)) {
        return [(0, 0); 2];
    }
    let halves = |x: u32| u64::from(x >> 16) + u64::from(x & 0xffff);
    let neg = |x: u16| u64::from(!x);
    let (os, od) = (orig.src as u32, orig.dst as u32);
    let (rs, rd) = (reply.src as u32, reply.dst as u32);
    let a0 = halves(!os) + halves(!od) + halves(rd) + halves(rs);
    let a1 = halves(!rs) + halves(!rd) + halves(od) + halves(os);
    let p0 = neg(orig.sport) + neg(orig.dport) + u64::from(reply.dport) + u64::from(reply.sport);
    let p1 = neg(reply.sport) + neg(reply.dport) + u64::from(orig.dport) + u64::from(orig.sport);
    let f = crate::checksum::fold;
    [(f(a0), f(a0 + p0)), (f(a1), f(a1 + p1))]
}

/// A tuple's 128-bit address as an IP address (IPv4 mapped: IPv4).
pub fn address(a: u128) -> std::net::IpAddr {
    if a >> 32 == 0xffff {
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
            orig_hop: NO_HOP,
            reply_hop: NO_HOP,
            deltas: [(0, 0); 2],
        }
    };

    /// The flow as `conntrack -L` shows one: original tuple, state, the
    /// seconds until it expires unless a packet comes (`expires_ns`, as
    /// [`ConnTrack::copy_flows`] gives it), reply tuple, translated or not.
    pub fn describe(&self, expires_ns: u64) -> String {
        format!(
            "{} {} {}s reply {}{}",
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

/// A flow handle: slot index and direction (`reply`).
type Hit = (u32, bool);

/// Entries per bucket (one 64-byte cache line).
const WAYS: usize = 8;

/// A bucket: signatures (0 = free, four 16-bit lanes to a word, so one
/// bucket is matched by a few word operations instead of a loop over its
/// ways), values (slot << 1 | reply), and how many entries whose first
/// choice is this bucket had to go to their second (while none has, a
/// lookup that misses here need not read the second bucket).
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Bucket {
    sig: [u64; 2],
    val: [u32; WAYS],
    moved: u32,
}

/// Each 16-bit lane's lowest bit.
const LANE_LO: u64 = 0x0001_0001_0001_0001;
/// Each 16-bit lane's highest bit.
const LANE_HI: u64 = 0x8000_8000_8000_8000;

/// The high bit of each 16-bit lane of `x` that is zero (exact: no borrow
/// crosses lanes).
#[inline(always)]
fn zero_lanes(x: u64) -> u64 {
    !(((x & !LANE_HI).wrapping_add(!LANE_HI)) | x) & LANE_HI
}

impl Bucket {
    #[inline(always)]
    fn set_sig(&mut self, w: usize, s: u16) {
        let sh = 16 * (w % 4);
        let word = &mut self.sig[w / 4];
        *word = (*word & !(0xffff << sh)) | u64::from(s) << sh;
    }

    /// The ways holding signature `s`, as bit `16 * way + 15` of the mask.
    #[inline(always)]
    fn ways_of(&self, s: u16) -> u128 {
        let b = LANE_LO.wrapping_mul(u64::from(s));
        u128::from(zero_lanes(self.sig[0] ^ b)) | u128::from(zero_lanes(self.sig[1] ^ b)) << 64
    }

    /// The first free way.
    #[inline(always)]
    fn free_way(&self) -> Option<usize> {
        let m = self.ways_of(0);
        (m != 0).then(|| m.trailing_zeros() as usize / 16)
    }
}

/// The tuple → flow index: two-choice hashing over 8-way buckets of one
/// cache line each (as DPDK's rte_hash), sized for at most half of its
/// entries in use, so a lookup reads one line (two when its first bucket
/// has overflowed) and the flow.
#[derive(Clone)]
struct Index {
    buckets: Vec<Bucket>,
    mask: usize,
    len: usize,
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

impl Index {
    fn new(entries: usize) -> Index {
        let n = (2 * entries).div_ceil(WAYS).next_power_of_two().max(2);
        Index {
            buckets: written(n, Bucket::default()),
            mask: n - 1,
            len: 0,
        }
    }

    /// Buckets and signature of hash `h`.
    #[inline(always)]
    fn place(&self, h: u64) -> (usize, usize, u16) {
        let b1 = self.first(h);
        (b1, self.second(h, b1), Self::sig(h))
    }

    /// The first bucket of hash `h`.
    #[inline(always)]
    fn first(&self, h: u64) -> usize {
        h as usize & self.mask
    }

    /// The second bucket of hash `h`, whose first is `b1` (worked out only
    /// where it is read: most lookups and inserts end in the first).
    #[inline(always)]
    fn second(&self, h: u64, b1: usize) -> usize {
        let b2 = (h >> 24) as usize & self.mask;
        if b2 == b1 {
            b2 ^ 1
        } else {
            b2
        }
    }

    /// The signature of hash `h` (never 0, which marks a free way).
    #[inline(always)]
    fn sig(h: u64) -> u16 {
        (h >> 48) as u16 | 1
    }

    /// Calls `eq` on each value whose signature matches, in the first
    /// bucket and (if any entry had to move there) the second; returns the
    /// first value `eq` accepts, and where it is.
    #[inline(always)]
    fn find(&self, h: u64, mut eq: impl FnMut(u32) -> bool) -> Option<(usize, usize, u32)> {
        let (b1, sig) = (self.first(h), Self::sig(h));
        let first = &self.buckets[b1];
        if let Some(w) = Self::scan(first, sig, &mut eq) {
            return Some((b1, w, first.val[w]));
        }
        if first.moved == 0 {
            return None;
        }
        let b2 = self.second(h, b1);
        let second = &self.buckets[b2];
        Self::scan(second, sig, &mut eq).map(|w| (b2, w, second.val[w]))
    }

    /// The way of bucket `bk` with signature `sig` whose value `eq` accepts.
    #[inline(always)]
    fn scan(bk: &Bucket, sig: u16, eq: &mut impl FnMut(u32) -> bool) -> Option<usize> {
        let mut m = bk.ways_of(sig);
        while m != 0 {
            let w = m.trailing_zeros() as usize / 16;
            if eq(bk.val[w]) {
                return Some(w);
            }
            m &= m - 1;
        }
        None
    }

    /// Enters value `v` of hash `h` in the first of its buckets with a
    /// free way. When both are full, one of their entries moves to its
    /// other bucket to make room (one step of cuckoo hashing, as rte_hash
    /// takes several): `hash_of` gives an entry's hash from its value.
    /// False only when neither bucket has a free way and none of their
    /// entries' other buckets has one either.
    #[inline(always)]
    fn insert(&mut self, h: u64, v: u32, hash_of: impl Fn(u32) -> u64) -> bool {
        let (b1, sig) = (self.first(h), Self::sig(h));
        let way = match self.buckets[b1].free_way() {
            Some(w) => Some((b1, w)),
            None => {
                let b2 = self.second(h, b1);
                match self.buckets[b2].free_way() {
                    Some(w) => Some((b2, w)),
                    None => self.make_room(b1, b2, hash_of),
                }
            }
        };
        let Some((b, w)) = way else {
            return false;
        };
        self.put(b, w, sig, v, b1);
        true
    }

    /// A way freed in bucket `b1` or `b2`, both full, by moving one of
    /// their entries to its other bucket.
    #[cold]
    #[inline(never)]
    fn make_room(
        &mut self,
        b1: usize,
        b2: usize,
        hash_of: impl Fn(u32) -> u64,
    ) -> Option<(usize, usize)> {
        [b1, b2].into_iter().find_map(|b| {
            (0..WAYS).find_map(|w| self.displace(b, w, hash_of(self.buckets[b].val[w])))
        })
    }

    /// Enters value `v` with signature `sig` at free way `w` of bucket
    /// `b`; `b1` is the value's first choice.
    #[inline(always)]
    fn put(&mut self, b: usize, w: usize, sig: u16, v: u32, b1: usize) {
        self.buckets[b].set_sig(w, sig);
        self.buckets[b].val[w] = v;
        self.len += 1;
        if b != b1 {
            self.buckets[b1].moved += 1;
        }
    }

    /// Moves the entry at way `w` of bucket `b`, hashed `h`, to a free way
    /// of its other bucket; the way it left, if it could.
    fn displace(&mut self, b: usize, w: usize, h: u64) -> Option<(usize, usize)> {
        let (o1, o2, sig) = self.place(h);
        let to = if b == o1 { o2 } else { o1 };
        let tw = self.buckets[to].free_way()?;
        let v = self.buckets[b].val[w];
        self.remove_at(h, b, w);
        self.put(to, tw, sig, v, o1);
        Some((b, w))
    }

    /// Removes the entry of hash `h` at way `w` of bucket `b`.
    fn remove_at(&mut self, h: u64, b: usize, w: usize) {
        self.buckets[b].set_sig(w, 0);
        self.len -= 1;
        let b1 = self.first(h);
        if b != b1 {
            self.buckets[b1].moved -= 1;
        }
    }
}

/// `n` copies of `fill` in memory written now: every page is faulted in
/// here (on the control path) rather than by the first write of the fast
/// path. Not `vec![fill; n]`, which for a zero `fill` maps zero pages
/// that fault when first written.
fn written<T: Copy>(n: usize, fill: T) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    // The allocation is seen before it is filled, so the compiler cannot
    // fuse the two into a `calloc` (zero pages again).
    std::hint::black_box(v.as_mut_ptr());
    v.extend(std::iter::repeat_n(fill, n));
    // And the writes are seen, so none is left out.
    std::hint::black_box(&mut v);
    v
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
}

impl ConnTrack {
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
        }
    }

    /// An empty table with the same capacity, timeouts and window
    /// tracking.
    pub fn empty_like(&self) -> Self {
        let mut t = ConnTrack::new(self.capacity, self.timeouts);
        t.tcp_window = self.tcp_window;
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
                out.push((*f, self.expires_in(f)));
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
                self.remove(i as u32);
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

    fn remove(&mut self, i: u32) {
        let e = self.slots[i as usize];
        if e.live {
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
            }
        }
    }

    /// Advances the clock and sweeps a few slots for expired flows.
    pub fn tick(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
        let n = self.slots.len();
        for _ in 0..SWEEP_PER_TICK.min(n) {
            self.cursor = (self.cursor + 1) % n;
            let e = self.slots[self.cursor];
            if e.live && self.expired(&e) {
                self.remove(self.cursor as u32);
                self.events[Event::Expired as usize] += 1;
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
                self.remove(self.cursor as u32);
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
        self.remove(i);
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
        let win = match seg {
            Some(s) if self.tcp_window && e.orig.proto == TCP => Some((&mut self.windows[i], s)),
            _ => None,
        };
        Some(step(
            e,
            reply,
            flags,
            win,
            self.now_ns,
            &self.limits,
            &mut self.events,
        ))
    }

    /// [`ConnTrack::find_hashed`] then [`ConnTrack::advance`], handing
    /// back the flow itself (the established path's lookup: its caller
    /// translates and routes through the reference instead of indexing
    /// the slot again for each): the live flow of `t`, the packet's
    /// direction and what the state machine made of it.
    #[inline(always)]
    pub(crate) fn track_hashed(
        &mut self,
        t: &Tuple,
        h: u64,
        hint: Option<u32>,
        flags: u16,
        seg: Option<&Segment>,
    ) -> Option<(&mut Flow, bool, Conn)> {
        let (i, reply) = self.find_hashed(t, h, hint)?;
        let conn = self.step_slot(i as usize, reply, flags, seg)?;
        Some((&mut self.slots[i as usize], reply, conn))
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
            last_ns: self.now_ns,
            live: true,
            nat,
            orig_hop: RouteCache::default(),
            reply_hop: RouteCache::default(),
            deltas,
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

/// The TCP state after a packet with `flags` in direction `reply`, or
/// `None` when the packet is not acceptable in `s`.
fn tcp_next(s: State, reply: bool, flags: u16) -> Option<State> {
    if flags & RST != 0 {
        return Some(State::Closed);
    }
    let syn = flags & SYN != 0;
    let ack = flags & ACK != 0;
    let fin = flags & FIN != 0;
    // Where Linux's table (nf_conntrack_proto_tcp.c) says "ignore" (pass,
    // state unchanged: the endpoints may know better), so does this: a
    // SYN retransmitted while the SYN+ACK is on its way, a SYN+ACK
    // retransmitted after the handshake (its ACK was lost beyond the
    // router), and segments still in flight after a RST.
    Some(match s {
        State::SynSent => match (reply, syn, ack) {
            (false, true, false) => State::SynSent, // retransmitted SYN
            (true, true, true) => State::SynRecv,
            _ => return None,
        },
        State::SynRecv => match (reply, syn, ack) {
            (true, true, true) => State::SynRecv,   // retransmitted SYN+ACK
            (false, true, false) => State::SynRecv, // retransmitted SYN
            (false, false, true) if fin => State::FinWait,
            (false, false, true) => State::Established,
            _ => return None,
        },
        State::Established | State::FinWait if syn && ack && reply => s, // SYN+ACK again
        State::Established if syn => return None,
        State::Established if fin => State::FinWait,
        State::Established => State::Established,
        State::FinWait if fin => State::TimeWait,
        State::FinWait => State::FinWait,
        State::TimeWait if syn && !ack && !reply => State::SynSent, // reuse
        State::TimeWait => State::TimeWait,
        State::Closed if syn && !ack && !reply => State::SynSent,
        State::Closed if syn && !(ack && reply) => return None,
        State::Closed => State::Closed, // in flight after the RST
        State::Unreplied | State::Replied => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::v4;

    fn k(src: u32, sp: u16, dst: u32, dp: u16, proto: u8, flags: u16) -> Key {
        Key {
            src: v4(src),
            dst: v4(dst),
            sport: sp,
            dport: dp,
            proto,
            flags,
            meta: 0,
        }
    }

    const C: u32 = 0xc612_000a; // 198.18.0.10
    const V4_MAPPED_TEST: u128 = 0xffff << 32;
    const SV: u32 = 0xc613_0005; // 198.19.0.5

    #[test]
    fn tcp_handshake_data_and_close() {
        let mut t = ConnTrack::new(16, Timeouts::default());
        assert_eq!(t.track(0, &k(C, 40000, SV, 80, 6, SYN)), Conn::New);
        assert_eq!(
            t.track(0, &k(SV, 80, C, 40000, 6, SYN | ACK)),
            Conn::Established { reply: true }
        );
        assert_eq!(t.state(0, &k(C, 40000, SV, 80, 6, 0)), Some(State::SynRecv));
        assert_eq!(
            t.track(0, &k(C, 40000, SV, 80, 6, ACK)),
            Conn::Established { reply: false }
        );
        assert_eq!(
            t.state(0, &k(C, 40000, SV, 80, 6, 0)),
            Some(State::Established)
        );
        assert_eq!(
            t.track(0, &k(SV, 80, C, 40000, 6, ACK | FIN)),
            Conn::Established { reply: true }
        );
        assert_eq!(t.state(0, &k(C, 40000, SV, 80, 6, 0)), Some(State::FinWait));
        t.track(0, &k(C, 40000, SV, 80, 6, ACK | FIN));
        assert_eq!(
            t.state(0, &k(C, 40000, SV, 80, 6, 0)),
            Some(State::TimeWait)
        );
        assert_eq!(t.event(Event::Created), 1);
        assert_eq!(t.len(), 1, "one entry for both directions");
    }

    /// A filter selects flows by their original direction, as conntrack's
    /// `-s`, `-d`, `-p`, `--sport`, `--dport`; a deletion in pages of
    /// bounded work removes exactly those (both directions: neither
    /// tuple is found after), counts them, and the next packet of one is
    /// a new flow.
    #[test]
    fn filtered_flows_are_listed_and_deleted_in_pages() {
        let mut t = ConnTrack::new(300, Timeouts::default());
        let other = 0xc612_0014; // 198.18.0.20
        for p in 0..100u16 {
            t.track(0, &k(C, 1000 + p, SV, 53, 17, 0));
            t.track(0, &k(other, 1000 + p, SV, 80, 6, SYN));
            t.track(0, &k(SV, 80, other, 1000 + p, 6, SYN | ACK));
        }
        let f = |src: Option<u32>, len: u8| Filter {
            src: src.map(|a| (v4(a), 96 + len)),
            ..Filter::default()
        };
        let count = |t: &ConnTrack, flt: &Filter| t.flows().filter(|x| flt.matches(x)).count();
        assert_eq!(count(&t, &Filter::default()), 200);
        assert_eq!(count(&t, &f(Some(C), 32)), 100);
        assert_eq!(count(&t, &f(Some(C & 0xffff_ff00), 24)), 200);
        assert_eq!(count(&t, &f(Some(SV), 32)), 0, "the original source only");
        let tcp = Filter {
            proto: Some(6),
            dport: Some(80),
            ..Filter::default()
        };
        assert_eq!(count(&t, &tcp), 100);
        let one = Filter {
            sport: Some(1007),
            ..tcp
        };
        assert_eq!(count(&t, &one), 1);
        let mut page = Vec::new();
        assert_eq!(t.copy_flows(0, 1 << 20, 1000, &tcp, &mut page), None);
        assert!(page.len() == 100 && page.iter().all(|(x, _)| x.orig.proto == 6));
        // Deleted in pages of 7 slots: the TCP flows only.
        let (mut deleted, mut from) = (0, Some(0));
        while let Some(s) = from {
            let (n, next) = t.delete_flows(s, 7, &tcp);
            deleted += n;
            from = next;
        }
        assert_eq!(deleted, 100);
        assert_eq!(t.event(Event::Deleted), 100);
        assert_eq!((t.len(), count(&t, &tcp)), (100, 0));
        assert!(!t.contains(&Tuple::of(0, &k(SV, 80, other, 1007, 6, 0))));
        assert!(t.contains(&Tuple::of(0, &k(C, 1007, SV, 53, 17, 0))));
        assert_eq!(t.track(0, &k(other, 1007, SV, 80, 6, SYN)), Conn::New);
        // Everything.
        let (n, next) = t.delete_flows(0, 1 << 20, &Filter::default());
        assert_eq!((n, next, t.len()), (101, None, 0));
    }

    /// A listed flow comes with its time to expiry, as `conntrack -L`'s
    /// timeout column: its state's timeout less its idle time, full again
    /// after a packet, and the replied state's timeout once answered.
    #[test]
    fn listed_flows_show_their_time_to_expiry() {
        let mut t = ConnTrack::new(16, Timeouts::default());
        let to = Timeouts::default();
        let now = 3 * 3600 * S;
        t.tick(now);
        t.track(0, &k(C, 1000, SV, 53, 17, 0));
        t.tick(now + 10 * S);
        let list = |t: &ConnTrack| {
            let mut page = Vec::new();
            t.copy_flows(0, 16, 16, &Filter::default(), &mut page);
            page.iter().map(|&(_, e)| e).collect::<Vec<u64>>()
        };
        assert_eq!(list(&t), [to.unreplied - 10 * S]);
        let (f, _) = t.find(&Tuple::of(0, &k(C, 1000, SV, 53, 17, 0))).unwrap();
        assert!(t
            .flow(f)
            .describe(to.unreplied - 10 * S)
            .contains(" 20s reply "));
        // The answer.
        t.track(0, &k(SV, 53, C, 1000, 17, 0));
        assert_eq!(list(&t), [to.replied]);
        t.tick(now + 10 * S + to.replied - 1);
        assert_eq!(list(&t), [1]);
        t.tick(now + 20 * S + to.replied);
        assert_eq!(list(&t), [0; 0], "expired and swept");
    }

    /// A dump in pages of bounded work lists every live flow once, in
    /// slot order, each page at most `max` flows.
    #[test]
    fn flows_are_copied_in_pages_of_bounded_work() {
        let mut t = ConnTrack::new(300, Timeouts::default());
        for p in 0..200u16 {
            assert_eq!(t.track(0, &k(C, 1000 + p, SV, 53, 17, 0)), Conn::New);
        }
        let all: Vec<Tuple> = t.flows().map(|f| f.orig).collect();
        assert_eq!(all.len(), 200);
        for (scan, max) in [(7, 5), (64, 1000), (1, 1), (1 << 20, 33)] {
            let (mut got, mut from, mut pages) = (Vec::new(), Some(0), 0);
            while let Some(f) = from {
                let mut page = Vec::new();
                from = t.copy_flows(f, scan, max, &Filter::default(), &mut page);
                assert!(page.len() <= max && page.len() <= scan, "{scan} {max}");
                if let Some(n) = from {
                    assert!(n > f && n - f <= scan, "{f} -> {n}");
                }
                got.extend(page.iter().map(|(f, _)| f.orig));
                pages += 1;
            }
            assert_eq!(got, all, "scan {scan} max {max}");
            assert!(pages >= t.slots.len().div_ceil(scan), "{pages}");
        }
    }

    #[test]
    fn tcp_invalid_packets() {
        let mut t = ConnTrack::new(16, Timeouts::default());
        // No flow and not a SYN.
        assert_eq!(t.track(0, &k(C, 1, SV, 80, 6, ACK)), Conn::Invalid);
        // SYN, then a second SYN from the responder instead of SYN+ACK.
        t.track(0, &k(C, 2, SV, 80, 6, SYN));
        assert_eq!(t.track(0, &k(SV, 80, C, 2, 6, SYN)), Conn::Invalid);
        // RST closes; segments still in flight pass (as Linux lets
        // them), a SYN from the responder does not, a new SYN reopens.
        t.track(0, &k(C, 3, SV, 80, 6, SYN));
        t.track(0, &k(SV, 80, C, 3, 6, RST | ACK));
        assert_eq!(t.state(0, &k(C, 3, SV, 80, 6, 0)), Some(State::Closed));
        assert_ne!(t.track(0, &k(C, 3, SV, 80, 6, ACK)), Conn::Invalid);
        assert_eq!(t.state(0, &k(C, 3, SV, 80, 6, 0)), Some(State::Closed));
        assert_eq!(t.track(0, &k(SV, 80, C, 3, 6, SYN)), Conn::Invalid);
        t.track(0, &k(C, 3, SV, 80, 6, SYN));
        assert_eq!(t.state(0, &k(C, 3, SV, 80, 6, 0)), Some(State::SynSent));
        // A SYN in an established flow is still refused.
        t.track(0, &k(C, 4, SV, 80, 6, SYN));
        t.track(0, &k(SV, 80, C, 4, 6, SYN | ACK));
        t.track(0, &k(C, 4, SV, 80, 6, ACK));
        assert_eq!(t.track(0, &k(C, 4, SV, 80, 6, SYN)), Conn::Invalid);
        assert_eq!(t.event(Event::Invalid), 4);
    }

    /// Retransmissions around the handshake pass, as in Linux: the
    /// client's SYN again while the SYN+ACK is on its way (SYN+ACK lost
    /// beyond the router), and the server's SYN+ACK again after the
    /// handshake (the client's ACK lost beyond the router).
    #[test]
    fn tcp_handshake_retransmissions_pass() {
        let mut t = ConnTrack::new(16, Timeouts::default());
        t.track(0, &k(C, 9, SV, 80, 6, SYN));
        t.track(0, &k(SV, 80, C, 9, 6, SYN | ACK));
        assert_ne!(t.track(0, &k(C, 9, SV, 80, 6, SYN)), Conn::Invalid);
        assert_eq!(t.state(0, &k(C, 9, SV, 80, 6, 0)), Some(State::SynRecv));
        t.track(0, &k(C, 9, SV, 80, 6, ACK));
        assert_ne!(t.track(0, &k(SV, 80, C, 9, 6, SYN | ACK)), Conn::Invalid);
        assert_eq!(t.state(0, &k(C, 9, SV, 80, 6, 0)), Some(State::Established));
        assert_eq!(t.event(Event::Invalid), 0);
    }

    #[test]
    fn udp_and_icmp_pseudo_states_and_zones() {
        let mut t = ConnTrack::new(16, Timeouts::default());
        assert_eq!(t.track(0, &k(C, 5353, SV, 53, 17, 0)), Conn::New);
        assert_eq!(
            t.state(0, &k(C, 5353, SV, 53, 17, 0)),
            Some(State::Unreplied)
        );
        assert_eq!(
            t.track(0, &k(SV, 53, C, 5353, 17, 0)),
            Conn::Established { reply: true }
        );
        assert_eq!(t.state(0, &k(C, 5353, SV, 53, 17, 0)), Some(State::Replied));
        // The same 5-tuple in another zone is another flow.
        assert_eq!(t.track(1, &k(C, 5353, SV, 53, 17, 0)), Conn::New);
        // An ICMP error quoting the tracked UDP packet is related.
        assert_eq!(t.related(0, &k(C, 5353, SV, 53, 17, 0)), Conn::Related);
        assert_eq!(t.related(0, &k(C, 5354, SV, 53, 17, 0)), Conn::Invalid);
        // ICMP echo: identifier as ports.
        assert_eq!(t.track(0, &k(C, 0x1234, SV, 0x1234, 1, 0)), Conn::New);
        assert_eq!(
            t.track(0, &k(SV, 0x1234, C, 0x1234, 1, 0)),
            Conn::Established { reply: true }
        );
    }

    /// The hand-written equality: any one field differing (in either half
    /// of an address, in any byte of the ports, protocol or zone) makes
    /// two tuples unequal.
    #[test]
    fn tuples_differ_in_every_field() {
        let t = Tuple {
            src: 0x2001_0db8_0000_0000_0000_0000_0000_0001,
            dst: V4_MAPPED_TEST | 0xc613_0005,
            sport: 0x1234,
            dport: 0x5678,
            proto: 17,
            zone: 0x0102,
        };
        assert_eq!(t, t.clone());
        let mut others = vec![];
        for bit in [0, 63, 64, 127] {
            others.push(Tuple {
                src: t.src ^ 1 << bit,
                ..t
            });
            others.push(Tuple {
                dst: t.dst ^ 1 << bit,
                ..t
            });
        }
        for bit in [0, 8, 15] {
            others.push(Tuple {
                sport: t.sport ^ 1 << bit,
                ..t
            });
            others.push(Tuple {
                dport: t.dport ^ 1 << bit,
                ..t
            });
            others.push(Tuple {
                zone: t.zone ^ 1 << bit,
                ..t
            });
        }
        others.push(Tuple { proto: 6, ..t });
        others.push(Tuple {
            proto: 17 | 0x80,
            ..t
        });
        for o in others {
            assert_ne!(t, o, "{o:?}");
            assert_ne!(o, t, "{o:?}");
        }
    }

    /// A RST in the window but not at its sender's next sequence number
    /// keeps the flow established (its endpoint answers with a challenge
    /// ACK) but makes it expire as a closed flow does; a packet after it
    /// gives it its established timeout again.
    #[test]
    fn an_inexact_reset_shortens_the_flows_life() {
        let seg = |seq: u32, ack: u32| Segment {
            seq,
            ack,
            win: 1000,
            ..Segment::default()
        };
        let syn = Segment {
            len: 1,
            ..seg(100, 0)
        };
        let synack = Segment {
            len: 1,
            ..seg(500, 101)
        };
        let mut t = ConnTrack::new(16, Timeouts::default());
        // The workers' clock is the TSC's, from boot: hours.
        let now = 3 * 3600 * S;
        t.tick(now);
        let mut flows = vec![];
        for p in [1u16, 2] {
            let a = Tuple::of(0, &k(C, p, SV, 80, 6, SYN));
            let i = t.open(a, a.reverse(), SYN, Some(&syn)).unwrap();
            assert_eq!(
                t.advance(i, true, SYN | ACK, Some(&synack)),
                Conn::Established { reply: true }
            );
            t.advance(i, false, ACK, Some(&seg(101, 501)));
            // The server's RST, 100 bytes past where it is.
            let rst = t.advance(i, true, RST, Some(&seg(601, 0)));
            assert_eq!(rst, Conn::Established { reply: true });
            assert_eq!(t.flow(i).state, State::Established);
            flows.push(a);
        }
        // The second flow's endpoints go on (the challenge ACK).
        let (i, _) = t.find(&flows[1]).unwrap();
        t.advance(i, false, ACK, Some(&seg(101, 501)));
        let closed = Timeouts::default().tcp_closed;
        t.tick(now + closed - 1);
        assert!(t.find(&flows[0]).is_some(), "kept for the challenge ACK");
        t.tick(now + closed + 1);
        assert!(t.find(&flows[0]).is_none(), "gone after the close timeout");
        assert!(t.find(&flows[1]).is_some(), "refreshed by its next packet");
        assert_eq!(t.event(Event::WindowIgnored), 2);
    }

    /// Without window tracking the windows' table is not kept, and TCP
    /// flows still open, move and close by their flags.
    #[test]
    fn untracked_windows_take_no_memory() {
        let mut t = ConnTrack::new(1024, Timeouts::default());
        assert_eq!(t.windows.len(), 1024);
        t.set_tcp_window(false);
        assert!(t.windows.is_empty() && t.windows.capacity() == 0);
        let syn = Segment {
            seq: 100,
            len: 1,
            win: 1000,
            ..Segment::default()
        };
        let a = Tuple::of(0, &k(C, 1, SV, 80, 6, SYN));
        let i = t.open(a, a.reverse(), SYN, Some(&syn)).unwrap();
        assert_eq!(
            t.advance(i, true, SYN | ACK, Some(&syn)),
            Conn::Established { reply: true }
        );
        // A RST anywhere closes it: nothing checks its sequence number.
        t.advance(i, true, RST, Some(&Segment::default()));
        assert_eq!(t.flow(i).state, State::Closed);
        t.set_tcp_window(true);
        assert_eq!(t.windows.len(), 1024);
    }

    /// `open` refuses a tuple either way round that a flow holds;
    /// `open_missed` (whose caller has just missed the packet's own tuple)
    /// still refuses a reply tuple a flow holds, and a non-SYN TCP packet,
    /// counting each as invalid, and what it opens is found by both tuples.
    #[test]
    fn opens_refuse_tuples_in_use() {
        let mut t = ConnTrack::new(16, Timeouts::default());
        let a = Tuple::of(0, &k(C, 1000, SV, 53, 17, 0));
        let nat = Tuple::of(0, &k(SV, 53, 0xc633_6401, 2000, 17, 0));
        assert!(t.open(a, nat, 0, None).is_ok());
        assert_eq!(t.open(a, a.reverse(), 0, None), Err(Refused::Exists));
        let b = Tuple::of(0, &k(C, 1001, SV, 53, 17, 0));
        assert_eq!(
            t.open_missed(b, b.hash(), nat, nat.hash(), 0, None),
            Err(Refused::Exists),
            "the reply tuple of another flow"
        );
        let syn_less = Tuple::of(0, &k(C, 7, SV, 80, 6, ACK));
        let r = syn_less.reverse();
        assert_eq!(
            t.open_missed(syn_less, syn_less.hash(), r, r.hash(), ACK, None),
            Err(Refused::NotSyn)
        );
        assert_eq!(t.event(Event::Invalid), 3);
        let n = t.open_missed(b, b.hash(), b.reverse(), b.reverse().hash(), 0, None);
        assert_eq!(t.find(&b), Some((n.unwrap(), false)));
        assert_eq!(t.find(&b.reverse()), Some((n.unwrap(), true)));
        assert_eq!(t.find(&nat), Some((0, true)));
        assert_eq!(t.len(), 2);
    }

    /// `open_picked` (whose caller has found both tuples untracked) enters
    /// a flow found by both tuples, as `open_missed` does, and counts it
    /// as created; a reply tuple it entered is refused to the next flow.
    #[test]
    fn open_picked_enters_both_tuples() {
        let mut t = ConnTrack::new(16, Timeouts::default());
        let a = Tuple::of(0, &k(C, 1000, SV, 53, 17, 0));
        let nat = Tuple::of(0, &k(SV, 53, 0xc633_6401, 2000, 17, 0));
        assert!(!t.contains_hashed(&nat, nat.hash()));
        let i = t
            .open_picked(a, a.hash(), nat, nat.hash(), 0, None)
            .unwrap();
        assert_eq!(t.find(&a), Some((i, false)));
        assert_eq!(t.find(&nat), Some((i, true)));
        assert!(t.flow(i).nat());
        assert_eq!(t.event(Event::Created), 1);
        let b = Tuple::of(0, &k(C, 1001, SV, 53, 17, 0));
        assert_eq!(
            t.open_missed(b, b.hash(), nat, nat.hash(), 0, None),
            Err(Refused::Exists)
        );
        let syn = Tuple::of(0, &k(C, 7, SV, 80, 6, SYN));
        let r = Tuple::of(0, &k(SV, 80, 0xc633_6401, 2001, 6, 0));
        let j = t
            .open_picked(syn, syn.hash(), r, r.hash(), SYN, None)
            .unwrap();
        assert_eq!(t.flow(j).state, State::SynSent);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn timeouts_expire_lazily_and_by_sweep() {
        let to = Timeouts {
            unreplied: 30 * S,
            ..Timeouts::default()
        };
        let mut t = ConnTrack::new(16, to);
        t.tick(1);
        t.track(0, &k(C, 1, SV, 53, 17, 0));
        t.track(0, &k(C, 2, SV, 53, 17, 0));
        t.tick(31 * S + 2);
        // Lazy: the next packet of flow 1 finds it expired and starts over.
        assert_eq!(t.track(0, &k(C, 1, SV, 53, 17, 0)), Conn::New);
        // Sweep: flow 2 goes on the next ticks.
        t.tick(31 * S + 3);
        t.tick(31 * S + 4);
        assert_eq!(t.state(0, &k(C, 2, SV, 53, 17, 0)), None);
        assert_eq!(t.event(Event::Expired), 2);
    }

    #[test]
    fn full_table_evicts_unreplied_never_established() {
        let mut t = ConnTrack::new(4, Timeouts::default());
        // Two established TCP flows and two unreplied UDP flows.
        for p in [1, 2] {
            t.track(0, &k(C, p, SV, 80, 6, SYN));
            t.track(0, &k(SV, 80, C, p, 6, SYN | ACK));
            t.track(0, &k(C, p, SV, 80, 6, ACK));
        }
        t.track(0, &k(C, 3, SV, 53, 17, 0));
        t.track(0, &k(C, 4, SV, 53, 17, 0));
        assert_eq!(
            t.track(0, &k(C, 5, SV, 53, 17, 0)),
            Conn::New,
            "evicts an unreplied flow"
        );
        assert_eq!(t.track(0, &k(C, 6, SV, 53, 17, 0)), Conn::New);
        assert_eq!(t.event(Event::Evicted), 2);
        // Now: two established + two unreplied (5, 6). Make them replied.
        t.track(0, &k(SV, 53, C, 5, 17, 0));
        t.track(0, &k(SV, 53, C, 6, 17, 0));
        assert_eq!(
            t.track(0, &k(C, 7, SV, 53, 17, 0)),
            Conn::Invalid,
            "nothing evictable"
        );
        assert_eq!(t.event(Event::TableFull), 1);
        for p in [1, 2] {
            assert_eq!(t.state(0, &k(C, p, SV, 80, 6, 0)), Some(State::Established));
        }
    }

    /// A table takes as many flows as its capacity: with sequential
    /// sources to one server and port (NTP or DNS clients behind a
    /// router), and with random tuples, every one of `capacity` flows
    /// opens. (With a plain two-choice insert, one whose buckets were both
    /// full was refused as `table_full`: here the first at flow 88,724 of
    /// 100,000.)
    #[test]
    fn a_table_fills_to_its_capacity() {
        use rand::{RngExt, SeedableRng};
        let n = 100_000u32;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
        for set in ["sequential", "random"] {
            let mut ct = ConnTrack::new(n as usize, Timeouts::default());
            let mut opened = 0;
            for i in 0..n {
                let t = if set == "sequential" {
                    udp4(i)
                } else {
                    Tuple {
                        src: v4(rng.random()),
                        dst: v4(rng.random()),
                        sport: rng.random(),
                        dport: rng.random(),
                        proto: 17,
                        zone: 0,
                    }
                };
                match ct.open(t, t.reverse(), 0, None) {
                    Ok(_) => opened += 1,
                    Err(Refused::Exists) => {} // a random tuple drawn twice
                    Err(e) => panic!("{set}: flow {i} of {n}: {e:?}"),
                }
            }
            assert_eq!(ct.len(), opened, "{set}");
            assert_eq!(ct.event(Event::TableFull), 0, "{set}");
            assert!(opened > n as usize - 10, "{set}: {opened}");
        }
    }

    /// The UDP flow of client `i` of 10.0.0.0/8 (in order) to one DNS
    /// server, all from the same port.
    fn udp4(i: u32) -> Tuple {
        Tuple {
            src: v4(0x0a00_0000 + i),
            dst: v4(SV),
            sport: 1024,
            dport: 53,
            proto: 17,
            zone: 0,
        }
    }

    /// The index against a model, on four buckets of eight ways filled up
    /// to all 32, so first choices overflow into second ones and entries
    /// move to make room: random inserts and removals; an insert
    /// is refused only when both buckets are full and none of their
    /// entries can move; after each step, every entry is found where the
    /// model says (removed ones never), and each bucket's `moved` count is
    /// the number of its entries living in their second choice.
    #[test]
    fn index_matches_a_model_through_overflow_and_removal() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        let mut ix = Index::new(16);
        assert_eq!(ix.buckets.len(), 4);
        // value -> hash of the entries in the index.
        let mut model: Vec<(u32, u64)> = vec![];
        let mut next = 0u32;
        let mut overflowed = 0;
        let mut displaced = 0;
        let mut refused = 0;
        for _ in 0..20_000 {
            if model.len() < 32 && rng.random_bool(0.5) {
                let h: u64 = rng.random();
                let (b1, b2, _) = ix.place(h);
                let full = |ix: &Index, b: usize| ix.buckets[b].free_way().is_none();
                let first_full = full(&ix, b1);
                let both_full = first_full && full(&ix, b2);
                // Whether every entry of both buckets has its other
                // bucket full too (nothing can move).
                let stuck = both_full
                    && model.iter().all(|&(v, hv)| {
                        let (o1, o2, _) = ix.place(hv);
                        let b = ix.find(hv, |x| x == v).unwrap().0;
                        ![b1, b2].contains(&b) || full(&ix, if b == o1 { o2 } else { o1 })
                    });
                let hash_of = |x: u32| model.iter().find(|e| e.0 == x).unwrap().1;
                let ok = ix.insert(h, next, hash_of);
                assert_eq!(ok, !stuck, "refused only when nothing could move");
                refused += usize::from(!ok);
                if ok {
                    model.push((next, h));
                    overflowed += usize::from(first_full);
                    displaced += usize::from(both_full);
                }
                next += 1;
            } else if !model.is_empty() {
                let (v, h) = model.swap_remove(rng.random_range(0..model.len()));
                let (b, w, got) = ix.find(h, |x| x == v).expect("present");
                assert_eq!(got, v);
                ix.remove_at(h, b, w);
                assert!(ix.find(h, |x| x == v).is_none(), "removed {v}");
            }
            assert_eq!(ix.len, model.len());
            for &(v, h) in &model {
                assert_eq!(ix.find(h, |x| x == v).map(|f| f.2), Some(v));
            }
            let mut moved = vec![0; ix.buckets.len()];
            for &(v, h) in &model {
                let (b1, _, _) = ix.place(h);
                let (b, _, _) = ix.find(h, |x| x == v).unwrap();
                if b != b1 {
                    moved[b1] += 1;
                }
            }
            let counts: Vec<u32> = ix.buckets.iter().map(|b| b.moved).collect();
            assert_eq!(counts, moved);
        }
        assert!(overflowed > 100, "second choices used {overflowed} times");
        assert!(
            displaced > 50,
            "entries moved to make room {displaced} times"
        );
        assert!(refused > 0, "no insert found its buckets stuck");
    }

    /// A lookup given a hint (the prefetch pass's first signature match)
    /// finds what a plain lookup finds whatever the hint names: the flow,
    /// another flow, the other direction, a removed flow's slot, or a slot
    /// out of range.
    #[test]
    fn hints_never_change_what_a_lookup_finds() {
        let to = Timeouts {
            unreplied: 10,
            ..Timeouts::default()
        };
        let mut t = ConnTrack::new(64, to);
        for p in 0..40 {
            assert_eq!(t.track(0, &k(C, p, SV, 53, 17, 0)), Conn::New);
        }
        // Flows 0..20 expire (the sweep removes them); 20..40 stay.
        t.tick(5);
        for p in 20..40 {
            t.track(0, &k(C, p, SV, 53, 17, 0));
        }
        t.tick(12);
        assert_eq!(t.len(), 20);
        let tuple = |p: u16, reply: bool| {
            let o = Tuple::of(0, &k(C, p, SV, 53, 17, 0));
            if reply {
                o.reverse()
            } else {
                o
            }
        };
        let hints = [
            None,
            Some(0),
            Some(1),
            Some(2 * 25),
            Some(2 * 25 + 1),
            Some(9999),
        ];
        for p in 0..40 {
            for reply in [false, true] {
                let x = tuple(p, reply);
                let want = t.clone().find(&x);
                assert_eq!(want.is_some(), p >= 20, "port {p}");
                for &hint in &hints {
                    let got = t.clone().find_hashed(&x, x.hash(), hint);
                    assert_eq!(got, want, "port {p} reply {reply} hint {hint:?}");
                }
            }
        }
    }

    /// Page faults this thread has taken (minor + major), from
    /// /proc/thread-self/stat: `None` where there is no procfs.
    fn faults() -> Option<u64> {
        let s = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
        // Fields after the command (which may hold spaces), from field 3.
        let rest = s.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        // minflt is field 10, majflt field 12 (1-based; rest starts at 3).
        Some(f.get(7)?.parse::<u64>().ok()? + f.get(9)?.parse::<u64>().ok()?)
    }

    /// Filling a new table and emptying it again takes no page faults:
    /// the flow slots and the free list are touched when the table is
    /// made (at start, on the control path), not by the first packet of
    /// each new flow in the fast path, as DPDK's rte_hash allocates and
    /// zeroes its table up front. (Without that, 100,000 flows faulted in
    /// 12.8 MB of slots one 4 KiB page, or one 2 MiB huge page, at a
    /// time: 3,126 faults here, and new flows took up to twice the
    /// cycles in the first pass over a fresh table.)
    #[test]
    fn filling_a_new_table_takes_no_page_faults() {
        if faults().is_none() {
            return;
        }
        let n = 100_000u32;
        // Twice the flows' room: the index's own limits are not this
        // test's subject.
        let mut ct = ConnTrack::new(2 * n as usize, Timeouts::default());
        let made = faults().unwrap();
        for i in 0..n {
            let t = udp4(i);
            let r = ct.open(t, t.reverse(), 0, None);
            assert!(r.is_ok(), "flow {i}: {r:?}");
        }
        let filled = faults().unwrap();
        // Expire them all: the sweep frees every slot.
        for tick in 0..=(n as u64).div_ceil(SWEEP_PER_TICK as u64) {
            ct.tick(3600 * S + tick);
        }
        assert!(ct.is_empty());
        let emptied = faults().unwrap();
        assert!(
            filled - made < 50,
            "opening {n} flows took {} page faults",
            filled - made
        );
        assert!(
            emptied - filled < 50,
            "expiring {n} flows took {} page faults",
            emptied - filled
        );
    }
}
