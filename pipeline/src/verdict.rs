//! Per-packet outcomes and the reasons a packet is dropped.

/// Why a packet was dropped. Every drop in the data plane is counted by one
/// of these reasons, per stage and per core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DropReason {
    /// The frame is shorter than the headers the stage needs to read.
    Truncated = 0,
    /// A header field is invalid (bad version, bad header length, bad length).
    Malformed = 1,
    /// The IPv4 header checksum does not verify.
    BadChecksum = 2,
    /// Neither IPv4, IPv6 nor ARP.
    NotIp = 3,
    /// An IP frame not addressed to the receiving port's MAC.
    NotForUs = 4,
    /// A destination a router never forwards to (0/8, 127/8, multicast,
    /// broadcast), or IPv6 multicast (not supported yet).
    NotRoutable = 5,
    /// TTL or hop limit expired (and no ICMP error could be sent).
    TtlExceeded = 6,
    /// No route (and no ICMP error could be sent).
    NoRoute = 7,
    /// The next hop's MAC is unknown (dropped while resolving).
    NoNeighbor = 8,
    /// Larger than the output MTU (fragmentation is not implemented).
    MtuExceeded = 9,
    /// For the router itself, which has no local stack to give it to
    /// (local traffic other than echo requests).
    ToRouter = 10,
    /// Dropped or rejected by a firewall rule or the default policy.
    Filtered = 11,
    /// An IP fragment (the gateway does not reassemble, so cannot track
    /// or translate fragments).
    Fragment = 12,
    /// A new flow the full conntrack table refused.
    CtFull = 13,
    /// A new flow needing a NAT port when none was free.
    NatExhausted = 14,
    /// A new flow whose tuple collides with a tracked one.
    CtClash = 15,
    /// Bound for the core that owns its NAT mapping, but that core's
    /// handoff ring was full (or it had stopped).
    HandoffFull = 16,
    /// Not a loss: used up by the router's own slow path (ARP replies and
    /// requests, Neighbor Solicitations and Advertisements it learned
    /// from or that were for another host). Reports keep it apart from
    /// the drops, as a term of its own in the balance.
    Consumed = 17,
}

impl DropReason {
    /// Number of reasons (array size for per-reason counters).
    pub const COUNT: usize = 18;
    /// Every reason, in counter order.
    pub const ALL: [DropReason; Self::COUNT] = [
        DropReason::Truncated,
        DropReason::Malformed,
        DropReason::BadChecksum,
        DropReason::NotIp,
        DropReason::NotForUs,
        DropReason::NotRoutable,
        DropReason::TtlExceeded,
        DropReason::NoRoute,
        DropReason::NoNeighbor,
        DropReason::MtuExceeded,
        DropReason::ToRouter,
        DropReason::Filtered,
        DropReason::Fragment,
        DropReason::CtFull,
        DropReason::NatExhausted,
        DropReason::CtClash,
        DropReason::HandoffFull,
        DropReason::Consumed,
    ];

    /// Short name used in stats output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::Malformed => "malformed",
            DropReason::BadChecksum => "bad_checksum",
            DropReason::NotIp => "not_ip",
            DropReason::NotForUs => "not_for_us",
            DropReason::NotRoutable => "not_routable",
            DropReason::TtlExceeded => "ttl_exceeded",
            DropReason::NoRoute => "no_route",
            DropReason::NoNeighbor => "no_neighbor",
            DropReason::MtuExceeded => "mtu_exceeded",
            DropReason::ToRouter => "to_router",
            DropReason::Filtered => "filtered",
            DropReason::Fragment => "fragment",
            DropReason::CtFull => "ct_full",
            DropReason::NatExhausted => "nat_exhausted",
            DropReason::CtClash => "ct_clash",
            DropReason::HandoffFull => "handoff_full",
            DropReason::Consumed => "consumed",
        }
    }
}

/// What happens to one packet after a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Transmit on this port (index into the appliance's port table).
    Forward(u16),
    /// Drop, counted under this reason.
    Drop(DropReason),
    /// Hand the packet, unchanged, to the worker with this index (among
    /// the workers running the stage): it holds the state the packet
    /// needs (the gateway's NAT mappings).
    Handoff(u16),
}
