//! Port-block allocation (RFC 7422's blocks, allocated as they are needed;
//! "bulk port allocation" in carrier-grade NATs): a source NAT rule with
//! `block` gives each inside host (a subscriber) a block of that many
//! ports on its pool address, and its flows take their ports from its
//! blocks, so that one log line (the block's allocation and release,
//! [`crate::conntrack::export::NatEvent::BlockAllocate`]) covers every
//! connection the subscriber makes with it.
//!
//! The blocks are this worker's: each pool address's share of the
//! worker's slice of the NAT port range ([`crate::nat::PortRange::slice`])
//! is cut into blocks, so the owner of a port stays a division and no two
//! workers hand out the same block. A subscriber whose flows run on
//! several workers holds a block on each.
//!
//! The table is kept by the flows themselves: a block is taken when the
//! first flow with a port in it enters the table and released when its
//! last flow leaves (whatever ends it: a timeout, a reset, an eviction, a
//! deletion on request or by the HA peer), so flows read back after a
//! restart or taken from the peer hold their blocks again with no state
//! of the blocks' own. A subscriber whose blocks are full takes another
//! while it holds fewer than its rule's `max_blocks`; freed blocks queue
//! behind the others, so a block goes to a new subscriber as late as
//! possible.
//!
//! Memory is all taken when the table is built: per block an owner, a
//! flow count, a link to the subscriber's next block and where its next
//! port is tried; per address a queue of its free blocks; and a map from
//! subscriber to its first block with room for one subscriber a block.

use super::{ConnTrack, Flow, Tuple};
use crate::acl::v4;
use crate::conntrack::export::NatEvent;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// No block (the end of a subscriber's list).
const NONE: u32 = u32::MAX;

/// A pool whose addresses are cut into blocks: the rule's addresses,
/// ports a block and blocks a subscriber may hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Outside addresses.
    pub addrs: Vec<u32>,
    /// Ports in a block.
    pub size: u16,
    /// Blocks one subscriber may hold at once (on this worker).
    pub max: u8,
}

/// One pool address of this worker: where its blocks are.
#[derive(Clone, Debug)]
struct Addr {
    a: u32,
    size: u16,
    max: u8,
    /// Its first block's number.
    base: u32,
    /// Its blocks.
    count: u32,
    /// Its free blocks, the longest free first (may hold blocks taken
    /// since they were queued: skipped when met, see [`Blocks::free_block`]).
    free: VecDeque<u32>,
}

/// What taking or leaving a port did to its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    /// The subscriber.
    pub inside: u32,
    /// The block's address.
    pub outside: u32,
    /// Its first port.
    pub lo: u16,
    /// Its last port.
    pub hi: u16,
}

/// A worker's port blocks (see the module's documentation).
#[derive(Clone, Debug)]
pub struct Blocks {
    /// Sorted by address.
    addrs: Vec<Addr>,
    /// First port of this worker's slice.
    lo: u16,
    /// Per block: its address's index in `addrs`.
    addr_of: Vec<u16>,
    /// Per block: its subscriber (while it has flows).
    owner: Vec<u32>,
    /// Per block: its flows.
    flows: Vec<u32>,
    /// Per block: the subscriber's next block.
    next: Vec<u32>,
    /// Per block: the offset of the port tried first next time.
    cursor: Vec<u16>,
    /// Per block: whether it is in its address's free queue.
    queued: Vec<bool>,
    /// Subscriber → its first block.
    subs: FxHashMap<u32, u32>,
    /// Blocks taken by a flow of another subscriber than their owner's
    /// (flows from the HA peer or read back, under other rules).
    pub shared: u64,
    /// Blocks held now.
    held: usize,
}

impl Blocks {
    /// The blocks of `rules` in this worker's slice of the port range,
    /// `lo` to `lo + len - 1` (`None` when no rule has an address).
    pub fn new(rules: &[Rule], lo: u16, len: u32) -> Option<Blocks> {
        let mut addrs: Vec<Addr> = Vec::new();
        for r in rules {
            let count = len / u32::from(r.size.max(1));
            for &a in &r.addrs {
                if count == 0 || addrs.iter().any(|x| x.a == a) {
                    continue;
                }
                addrs.push(Addr {
                    a,
                    size: r.size,
                    max: r.max.max(1),
                    base: 0,
                    count,
                    free: VecDeque::new(),
                });
            }
        }
        if addrs.is_empty() {
            return None;
        }
        addrs.sort_by_key(|x| x.a);
        let mut total = 0u32;
        for x in &mut addrs {
            x.base = total;
            x.free = (total..total + x.count).collect();
            total += x.count;
        }
        let n = total as usize;
        let mut addr_of = Vec::with_capacity(n);
        for (i, x) in addrs.iter().enumerate() {
            addr_of.extend(std::iter::repeat_n(i as u16, x.count as usize));
        }
        let mut subs = FxHashMap::default();
        subs.reserve(n);
        Some(Blocks {
            addrs,
            lo,
            addr_of,
            owner: vec![0; n],
            flows: vec![0; n],
            next: vec![NONE; n],
            cursor: vec![0; n],
            queued: vec![true; n],
            subs,
            shared: 0,
            held: 0,
        })
    }

    /// The same blocks, all free (an empty table's).
    pub fn emptied(&self) -> Blocks {
        let mut b = self.clone();
        for x in &mut b.addrs {
            x.free = (x.base..x.base + x.count).collect();
        }
        b.owner.fill(0);
        b.flows.fill(0);
        b.next.fill(NONE);
        b.cursor.fill(0);
        b.queued.fill(true);
        b.subs.clear();
        (b.shared, b.held) = (0, 0);
        b
    }

    /// The blocks in the table.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// Never empty ([`Blocks::new`] gives none without a block).
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Blocks held now.
    pub fn held(&self) -> usize {
        self.held
    }

    fn addr(&self, a: u32) -> Option<usize> {
        self.addrs.binary_search_by_key(&a, |x| x.a).ok()
    }

    /// Whether `a` is an address cut into blocks.
    #[inline]
    pub fn has(&self, a: u32) -> bool {
        self.addr(a).is_some()
    }

    /// The block that `port` of address `a` is in.
    pub fn block_of(&self, a: u32, port: u16) -> Option<u32> {
        let x = &self.addrs[self.addr(a)?];
        let k = u32::from(port).checked_sub(u32::from(self.lo))? / u32::from(x.size);
        (k < x.count).then_some(x.base + k)
    }

    /// Block `b`'s address, first port and ports.
    #[inline]
    pub fn range(&self, b: u32) -> (u32, u16, u16) {
        let x = &self.addrs[usize::from(self.addr_of[b as usize])];
        let lo = u32::from(self.lo) + (b - x.base) * u32::from(x.size);
        (x.a, lo as u16, x.size)
    }

    /// Subscriber `inside`'s first block (then [`Blocks::next_of`]).
    pub fn first(&self, inside: u32) -> Option<u32> {
        self.subs.get(&inside).copied()
    }

    /// The block after `b` in its subscriber's list.
    pub fn next_of(&self, b: u32) -> Option<u32> {
        Some(self.next[b as usize]).filter(|&n| n != NONE)
    }

    /// Blocks subscriber `inside` may hold on address `a`.
    pub fn max_of(&self, a: u32) -> usize {
        self.addr(a).map_or(0, |i| usize::from(self.addrs[i].max))
    }

    /// Where subscriber `inside`'s newest block tries a port next: its
    /// address and the port (`None`: it holds no block).
    #[inline]
    pub fn next_port(&self, inside: u32) -> Option<(u32, u16)> {
        let b = self.first(inside)?;
        let (a, lo, _) = self.range(b);
        Some((a, lo + self.cursor(b)))
    }

    /// The offset in block `b` of the port to try first.
    pub fn cursor(&self, b: u32) -> u16 {
        self.cursor[b as usize]
    }

    /// The port after the one at offset `k` of block `b` is tried first
    /// next time.
    #[inline]
    pub fn advance(&mut self, b: u32, k: u16) {
        let size = self.addrs[usize::from(self.addr_of[b as usize])].size;
        self.cursor[b as usize] = if k + 1 >= size { 0 } else { k + 1 };
    }

    /// A free block of address `a` for a subscriber that needs one (the
    /// one free longest), left free: a flow's entering takes it.
    pub fn free_block(&mut self, a: u32) -> Option<u32> {
        let i = self.addr(a)?;
        let x = &mut self.addrs[i];
        while let Some(&b) = x.free.front() {
            if self.flows[b as usize] == 0 {
                return Some(b);
            }
            // Taken since it was queued (by a flow read back or synced).
            x.free.pop_front();
            self.queued[b as usize] = false;
        }
        None
    }

    /// A flow of subscriber `inside` with port `port` of address `a`
    /// entered the table: its block's flows counted, the block taken if
    /// it was free (returned, for the log).
    pub fn enter(&mut self, inside: u32, a: u32, port: u16) -> Option<Change> {
        let b = self.block_of(a, port)?;
        let i = b as usize;
        self.flows[i] += 1;
        if self.flows[i] > 1 {
            if self.owner[i] != inside {
                self.shared += 1;
            }
            return None;
        }
        self.held += 1;
        self.owner[i] = inside;
        self.next[i] = self.subs.get(&inside).copied().unwrap_or(NONE);
        self.subs.insert(inside, b);
        Some(self.change(b))
    }

    /// A flow with port `port` of address `a` left the table: its block
    /// released when it was the last (returned, for the log).
    pub fn leave(&mut self, a: u32, port: u16) -> Option<Change> {
        let b = self.block_of(a, port)?;
        let i = b as usize;
        if self.flows[i] == 0 {
            return None;
        }
        self.flows[i] -= 1;
        if self.flows[i] > 0 {
            return None;
        }
        self.held -= 1;
        let c = self.change(b);
        // Out of its subscriber's list.
        let after = self.next[i];
        self.next[i] = NONE;
        match self.subs.get(&c.inside).copied() {
            Some(f) if f == b => {
                if after == NONE {
                    self.subs.remove(&c.inside);
                } else {
                    self.subs.insert(c.inside, after);
                }
            }
            Some(mut p) => {
                while self.next[p as usize] != NONE {
                    if self.next[p as usize] == b {
                        self.next[p as usize] = after;
                        break;
                    }
                    p = self.next[p as usize];
                }
            }
            None => {}
        }
        if !self.queued[i] {
            self.queued[i] = true;
            if let Some(x) = self.addr(c.outside) {
                self.addrs[x].free.push_back(b);
            }
        }
        Some(c)
    }

    fn change(&self, b: u32) -> Change {
        let (outside, lo, size) = self.range(b);
        Change {
            inside: self.owner[b as usize],
            outside,
            lo,
            hi: lo + (size - 1),
        }
    }
}

impl ConnTrack {
    /// Cuts source NAT's block addresses into `blocks` (`None`: no rule
    /// has blocks), the flows already here holding theirs (a reload that
    /// changed the rules; no log lines for them).
    pub fn set_blocks(&mut self, blocks: Option<Blocks>) {
        self.blocks = blocks.map(Box::new);
        if let Some(b) = self.blocks.as_deref_mut() {
            for f in self.slots.iter().filter(|f| f.live && f.nat) {
                b.enter(f.orig.src as u32, f.reply.dst as u32, f.reply.dport);
            }
        }
    }

    /// The port blocks, if source NAT has any.
    #[inline]
    pub fn blocks(&self) -> Option<&Blocks> {
        self.blocks.as_deref()
    }

    /// [`ConnTrack::blocks`], to pick a port in one.
    #[inline]
    pub fn blocks_mut(&mut self) -> Option<&mut Blocks> {
        self.blocks.as_deref_mut()
    }

    /// Whether flow `i`'s NAT port is one of a port block (its session
    /// events are not written: the block's are the log).
    pub(super) fn in_block(&self, i: usize) -> bool {
        let f = &self.slots[i];
        self.blocks
            .as_deref()
            .is_some_and(|b| b.block_of(f.reply.dst as u32, f.reply.dport).is_some())
    }

    /// Translated flow `i` entered: its port's block counts it (and is
    /// logged when it was taken).
    #[cold]
    #[inline(never)]
    pub(super) fn block_enter(&mut self, i: usize) {
        let f = self.slots[i];
        let Some(b) = self.blocks.as_deref_mut() else {
            return;
        };
        if let Some(c) = b.enter(f.orig.src as u32, f.reply.dst as u32, f.reply.dport) {
            self.block_event(NatEvent::BlockAllocate, &c);
        }
    }

    /// Translated flow `f` left: its port's block released when it was
    /// its last flow (and logged).
    #[cold]
    #[inline(never)]
    pub(super) fn block_leave(&mut self, f: &Flow) {
        let Some(b) = self.blocks.as_deref_mut() else {
            return;
        };
        if let Some(c) = b.leave(f.reply.dst as u32, f.reply.dport) {
            self.block_event(NatEvent::BlockRelease, &c);
        }
    }

    /// Writes a block's allocation or release, when NAT events are.
    fn block_event(&mut self, ev: NatEvent, c: &Change) {
        if !self.nat_events() {
            return;
        }
        let (seen, sent) = block_tuples(c);
        self.push_nat(ev, seen, sent);
    }
}

/// A block event's record tuples ([`crate::conntrack::export::Record`]):
/// `seen.src` the subscriber; `sent.src` the outside address, its ports
/// `sent.sport` to `sent.dport`; the rest zero (IPv4 mapped).
pub fn block_tuples(c: &Change) -> (Tuple, Tuple) {
    let seen = Tuple {
        src: v4(c.inside),
        dst: v4(0),
        ..Tuple::default()
    };
    let sent = Tuple {
        src: v4(c.outside),
        dst: v4(0),
        sport: c.lo,
        dport: c.hi,
        ..Tuple::default()
    };
    (seen, sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Blocks {
        let r = Rule {
            addrs: vec![20, 10],
            size: 100,
            max: 2,
        };
        // Ports 1000-1399 of this worker: 4 blocks an address.
        Blocks::new(&[r], 1000, 400).unwrap()
    }

    #[test]
    fn blocks_cut_each_address_share() {
        let t = table();
        assert_eq!(t.len(), 8);
        assert_eq!(t.block_of(10, 1000), Some(0));
        assert_eq!(t.block_of(10, 1399), Some(3));
        assert_eq!(t.block_of(20, 1100), Some(5));
        assert_eq!(t.block_of(20, 1400), None);
        assert_eq!(t.block_of(20, 999), None);
        assert_eq!(t.block_of(30, 1000), None);
        assert_eq!(t.range(5), (20, 1100, 100));
        assert_eq!(t.max_of(10), 2);
        // No share of the range to cut: no table.
        let r = Rule {
            addrs: vec![1],
            size: 500,
            max: 1,
        };
        assert!(Blocks::new(&[r], 1000, 400).is_none());
    }

    #[test]
    fn a_block_lives_as_long_as_its_flows() {
        let mut t = table();
        let b = t.free_block(10).unwrap();
        let (_, lo, _) = t.range(b);
        let c = t.enter(7, 10, lo).expect("taken");
        assert_eq!((c.inside, c.outside, c.lo, c.hi), (7, 10, lo, lo + 99));
        assert_eq!(t.enter(7, 10, lo + 5), None, "already held");
        assert_eq!(t.first(7), Some(b));
        assert_eq!(t.held(), 1);
        // The next free block is another.
        assert_ne!(t.free_block(10), Some(b));
        assert_eq!(t.leave(10, lo), None);
        assert_eq!(t.leave(10, lo + 5), Some(c));
        assert_eq!(t.first(7), None);
        assert_eq!(t.held(), 0);
        // Released blocks queue behind the others.
        let mut order = Vec::new();
        while let Some(f) = t.free_block(10) {
            let (_, lo, _) = t.range(f);
            t.enter(100 + f, 10, lo);
            order.push(f);
        }
        assert_eq!(order.last(), Some(&b));
        assert_eq!(order.len(), 4);
    }

    #[test]
    fn a_subscriber_holds_a_list_of_blocks() {
        let mut t = table();
        let mut held = Vec::new();
        for _ in 0..3 {
            let b = t.free_block(20).unwrap();
            let (_, lo, _) = t.range(b);
            t.enter(9, 20, lo);
            held.push(b);
        }
        let mut listed = Vec::new();
        let mut b = t.first(9);
        while let Some(x) = b {
            listed.push(x);
            b = t.next_of(x);
        }
        listed.reverse();
        assert_eq!(listed, held);
        // The middle one goes; the list closes over it.
        let (_, lo, _) = t.range(held[1]);
        t.leave(20, lo).unwrap();
        assert_eq!(t.first(9), Some(held[2]));
        assert_eq!(t.next_of(held[2]), Some(held[0]));
        assert_eq!(t.next_of(held[0]), None);
        // A block entered out of turn (a synced flow) is skipped as free.
        let mut u = table();
        let (_, lo, _) = u.range(0);
        u.enter(1, 10, lo);
        assert_eq!(u.free_block(10), Some(1));
        // Another subscriber's flow in a held block is counted.
        u.enter(2, 10, lo + 1);
        assert_eq!(u.shared, 1);
        // Leaving a port no flow holds changes nothing.
        assert_eq!(u.leave(10, 1399), None);
        // An empty table's copy: every block free again, in order.
        let e = u.emptied();
        assert_eq!((e.held(), e.first(1), e.shared), (0, None, 0));
        let mut e = e;
        assert_eq!(e.free_block(10), Some(0));
    }

    #[test]
    fn cursor_wraps_in_the_block() {
        let mut t = table();
        t.advance(0, 98);
        assert_eq!(t.cursor(0), 99);
        t.advance(0, 99);
        assert_eq!(t.cursor(0), 0);
    }
}
