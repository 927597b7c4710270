//! Per-packet outcomes and the reasons a packet is dropped.

crate::counter_enum! {
    /// Why a packet was dropped. Every drop in the data plane is counted by
    /// one of these reasons, per port and per core. A new reason is one
    /// line here (its name is what reports and metrics show).
    #[derive(PartialOrd, Ord)]
    pub enum DropReason {
        /// The frame is shorter than the headers the stage needs to read.
        Truncated = "truncated",
        /// A header field is invalid (bad version, bad header length, bad length).
        Malformed = "malformed",
        /// An IPv4 loose or strict source route option (refused, as
        /// Linux's `accept_source_route` = 0 refuses it).
        SourceRoute = "source_route",
        /// The IPv4 header checksum does not verify.
        BadChecksum = "bad_checksum",
        /// Neither IPv4, IPv6 nor ARP.
        NotIp = "not_ip",
        /// An 802.1Q/802.1ad tagged frame whose tags name no VLAN
        /// sub-interface of the port it arrived on.
        UnknownVlan = "unknown_vlan",
        /// An IP frame not addressed to the receiving port's MAC.
        NotForUs = "not_for_us",
        /// A destination a router never forwards to (0/8, 127/8, multicast,
        /// broadcast), or IPv6 multicast (not supported yet).
        NotRoutable = "not_routable",
        /// TTL or hop limit expired (and no ICMP error could be sent).
        TtlExceeded = "ttl_exceeded",
        /// No route (and no ICMP error could be sent).
        NoRoute = "no_route",
        /// The next hop's MAC is unknown (dropped while resolving).
        NoNeighbor = "no_neighbor",
        /// Larger than the output MTU and not sent as fragments: Don't
        /// Fragment set (and no ICMP error could be sent), an MTU with no
        /// room for 8 bytes past the header, or no room to keep it while
        /// its fragments are made.
        MtuExceeded = "mtu_exceeded",
        /// Received on, or routed out of, an interface that is down: set
        /// down from the kernel (its mirror, `ip link set sl-PORT down`)
        /// or without a carrier.
        LinkDown = "link_down",
        /// For the router itself, which has no local stack to give it to
        /// (local traffic other than echo requests).
        ToRouter = "to_router",
        /// Dropped or rejected by a firewall rule or the default policy.
        Filtered = "filtered",
        /// An IP fragment the gateway could not follow: no record of its
        /// datagram could be made, or no slot to wait for its first
        /// fragment in; a TCP fragment at byte 8 (RFC 1858); the rest of
        /// a datagram whose first fragment had no ports to track.
        Fragment = "fragment",
        /// A new flow the full conntrack table refused.
        CtFull = "ct_full",
        /// A new flow needing a NAT port when none was free.
        NatExhausted = "nat_exhausted",
        /// A new flow whose tuple collides with a tracked one.
        CtClash = "ct_clash",
        /// For the kernel, but its mirror's ring was full (or there is
        /// no mirror for the port).
        PuntFull = "punt_full",
        /// For the router, on an interface with a mirror, but no punt
        /// rule admits it (`[[control_plane.punt]]`).
        PuntDenied = "punt_denied",
        /// For the kernel, but over its punt rule's rate.
        PuntPoliced = "punt_policed",
        /// Bound for the core that owns its NAT mapping, but that core's
        /// handoff ring was full (or it had stopped).
        HandoffFull = "handoff_full",
        /// For a NAT64 prefix (or the IPv4 side of a NAT64 flow), but
        /// not translatable: a fragment, a protocol other than TCP, UDP
        /// and ICMP echo, an ICMP type RFC 7915 drops, or no flow to
        /// translate it by.
        Untranslatable = "untranslatable",
        /// Not a loss: used up by the router's own slow path (ARP replies and
        /// requests, Neighbor Solicitations and Advertisements it learned
        /// from or that were for another host), or a fragment the gateway
        /// keeps a copy of until its datagram's first fragment comes (the
        /// copy leaves as `injected`). Reports keep it apart from the
        /// drops, as a term of its own in the balance.
        Consumed = "consumed",
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
    /// For the kernel: the worker copies the packet to the control-plane
    /// mirror (TAP) of this interface (the port it arrived on, or the
    /// VLAN sub-interface, its tags stripped), then frees it. Only with
    /// `[control_plane] tap`.
    Punt(u16),
}
