//! NAT port ownership: which worker owns a flow's NAT port (return traffic
//! is handed to it), and the picking of a free port from this worker's
//! slice of the range.

use super::*;

impl<C: StageClock> Gateway<C> {
    /// The worker that owns the state a packet with no flow here belongs
    /// to, when that is another worker: replies to a source-NAT mapping
    /// (destination: a NAT address, destination port in another worker's
    /// slice of the port range) and the flows of destination and 1:1 NAT
    /// (new ones, and replies from the inside host), which worker 0 owns:
    /// their two directions have different tuples, so symmetric RSS cannot
    /// bring both to one core.
    /// A datagram's first fragment (whose flow its port's spread names:
    /// [`Gateway::spread_owner`]) too.
    #[inline(always)]
    pub(super) fn owner(&self, in_port: u16, t: &Tuple) -> Option<u16> {
        if self.workers <= 1 || (self.nat.is_empty() && !self.first_fragment) {
            return None;
        }
        self.owner_of(in_port, t)
    }

    /// While a datagram's first fragment is processed: the worker that
    /// the flow of tuple `t` reaches on `in_port`, when it is another
    /// and the port's spread is known. (A datagram's fragments are
    /// spread by their addresses alone, so they can reach another worker
    /// than the flow's packets: `crate::steer`.)
    pub(super) fn spread_owner(&self, in_port: u16, t: &Tuple) -> Option<u16> {
        if !self.first_fragment || self.workers <= 1 {
            return None;
        }
        self.spreads
            .get(usize::from(in_port))?
            .as_ref()?
            .owner(t)
            .filter(|&o| o != self.worker)
    }

    /// [`Gateway::owner`] with more than one worker and NAT rules.
    #[inline(never)]
    pub(super) fn owner_of(&self, in_port: u16, t: &Tuple) -> Option<u16> {
        let (src, dst) = (addr4(t.src), addr4(t.dst));
        let to_nat = self.router.is_local4(dst)
            || self.nat.snat.iter().any(|r| match &r.to {
                SnatTo::Pool(p) => p.contains(&dst),
                SnatTo::Blocks(b) => b.addrs.contains(&dst),
                SnatTo::Masquerade => false,
                SnatTo::Deterministic(d) => d.is_outside(dst),
            })
            || self.nat.nat64.iter().any(|n| n.pool.contains(&dst));
        let o = if self
            .nat
            .dnat
            .iter()
            .any(|d| d.to == src && d.to_port.is_none_or(|p| p == t.sport))
            || self.nat.dnat(in_port, t.proto, dst, t.dport).is_some()
            || self.nat.statics.iter().any(|s| s.inside == src)
        {
            Some(0)
        } else if to_nat && has_ports(t.proto) {
            self.nat.port_owner(dst, t.dport, self.workers)
        } else {
            return self.spread_owner(in_port, t);
        };
        o.filter(|&o| o != self.worker)
    }

    /// Chooses this worker's next free port for the reply tuple `r`
    /// (its destination port; for ICMP both ports), which
    /// [`Gateway::next_port_of`] gave the port tried first and which is
    /// hashed `h`: the hash of `r` with the port chosen, or `None` when
    /// [`NAT_PROBES`] tries found none.
    pub(super) fn pick_port(&mut self, r: &mut Tuple, mut h: u64) -> Option<u64> {
        let n = self.ports?.len();
        for _ in 0..n.min(NAT_PROBES) {
            // Wraps at the range's end without a division (`next_port`
            // stays below `n`: it starts at 0 whenever the range is set).
            self.next_port = if self.next_port + 1 >= n {
                0
            } else {
                self.next_port + 1
            };
            if !self.ct.contains_hashed(r, h) {
                return Some(h);
            }
            self.next_port_of(r);
            h = r.hash();
        }
        None
    }

    /// Deterministic mapping `d`'s outside address for inside host `src`,
    /// and this worker's share of the host's block (first port, ports).
    pub(super) fn det_share(&self, d: &crate::nat::Det, src: u32) -> Option<(u32, (u16, u16))> {
        let (a, start) = d.map(src, &self.nat.ports)?;
        let (lo, len) = d.share(start, self.worker, self.workers);
        Some((a, (lo as u16, len as u16)))
    }

    /// [`Gateway::det_share`]'s share for a new flow from `src` that
    /// source NAT entry `snat_entry` translates, if that rule is
    /// deterministic.
    #[inline(never)]
    pub(super) fn det_share_of(&self, src: u32, snat_entry: usize) -> Option<(u16, u16)> {
        let base = self.nat.dnat.len() + self.nat.statics.len() + 1;
        let r = self.nat.snat.get(snat_entry.checked_sub(base)?)?;
        match &r.to {
            SnatTo::Deterministic(d) => self.det_share(d, src).map(|(_, s)| s),
            _ => None,
        }
    }

    /// Chooses a free port for reply tuple `r` (hashed `h`, its port the
    /// first to try) in this worker's share of a deterministic mapping's
    /// block, `len` ports from `lo`: the hash of `r` with the port chosen,
    /// or `None` when [`NAT_PROBES`] tries (or the whole share) found
    /// none.
    pub(super) fn pick_det(&self, r: &mut Tuple, mut h: u64, lo: u16, len: u16) -> Option<u64> {
        let n = u32::from(len);
        let first = u32::from(r.dport).wrapping_sub(u32::from(lo));
        for k in 0..n.min(NAT_PROBES) {
            if k > 0 {
                let p = (u32::from(lo) + (first + k) % n) as u16;
                r.dport = p;
                if r.proto == IpProto::ICMP {
                    r.sport = p;
                }
                h = r.hash();
            }
            if !self.ct.contains_hashed(r, h) {
                return Some(h);
            }
        }
        None
    }

    /// Chooses a free port for reply tuple `r` of a new flow from inside
    /// host `src` in the host's port blocks (its address one of them):
    /// in a block it holds, else in a free block of `r`'s address while
    /// it holds fewer than its rule's most. `r` comes hashed `h` (the
    /// plan's guess, [`crate::conntrack::blocks::Blocks::next_port`],
    /// its bucket prefetched). The hash of `r` with the port chosen, or
    /// `None` (counted: no block could be taken, or the host's are full
    /// and it may take no more).
    #[inline(never)]
    pub(super) fn pick_block(&mut self, r: &mut Tuple, src: u32, h: u64) -> Option<u64> {
        let planned = (*r, h);
        let blocks = self.ct.blocks()?;
        let max = blocks.max_of(addr4(r.dst));
        let (mut held, mut b) = (0, blocks.first(src));
        while let Some(x) = b {
            held += 1;
            if let Some(h) = self.pick_in_block(r, x, &planned) {
                return Some(h);
            }
            b = self.ct.blocks()?.next_of(x);
        }
        if held >= max {
            self.nat_events[nat::Event::BlockQuota as usize] += 1;
            return None;
        }
        let x = self.ct.blocks_mut()?.free_block(addr4(r.dst))?;
        self.pick_in_block(r, x, &planned)
    }

    /// A free port in block `b` for reply tuple `r` (its address the
    /// block's), trying from the block's cursor: `r`'s hash, or `None`
    /// when [`NAT_PROBES`] tries (or the whole block) found none. The
    /// `planned` tuple's hash is not worked out again.
    fn pick_in_block(&mut self, r: &mut Tuple, b: u32, planned: &(Tuple, u64)) -> Option<u64> {
        let blocks = self.ct.blocks()?;
        let (a, lo, size) = blocks.range(b);
        let start = u32::from(blocks.cursor(b));
        r.dst = crate::acl::v4(a);
        let n = u32::from(size);
        for k in 0..n.min(NAT_PROBES) {
            let off = ((start + k) % n) as u16;
            let p = lo + off;
            r.dport = p;
            if r.proto == IpProto::ICMP {
                r.sport = p;
            }
            let h = if *r == planned.0 { planned.1 } else { r.hash() };
            if !self.ct.contains_hashed(r, h) {
                self.ct.blocks_mut()?.advance(b, off);
                return Some(h);
            }
        }
        None
    }

    /// Gives reply tuple `r` the port [`Gateway::pick_port`] tries next
    /// (its destination port; for ICMP both ports), if this worker has a
    /// range.
    #[inline]
    pub(super) fn next_port_of(&self, r: &mut Tuple) {
        self.port_ahead(r, 0);
    }

    /// Gives reply tuple `r` the port [`Gateway::pick_port`] tries `ahead`
    /// tries from now ([`Gateway::next_port_of`] is `ahead` 0).
    #[inline]
    pub(super) fn port_ahead(&self, r: &mut Tuple, ahead: u32) {
        if let Some(range) = self.ports {
            // `next_port` is below the range's length (see `pick_port`)
            // and `ahead` a chunk's packets at most: no division per new
            // flow, the remainder only past the range's end.
            let (k, len) = (self.next_port + ahead, range.len());
            let k = if k < len { k } else { k % len };
            let p = (u32::from(range.lo) + k) as u16;
            r.dport = p;
            if r.proto == IpProto::ICMP || r.proto == IpProto::ICMPV6 {
                r.sport = p;
            }
        }
    }
}
