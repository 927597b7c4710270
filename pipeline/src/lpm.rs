//! Longest-prefix match for IPv4 and IPv6, changed in place by the one
//! control-path writer (each entry one atomic word, groups filled before
//! they are linked, freed groups reused only after every reader has left:
//! [`crate::rcu`]); the fast path only reads.
//!
//! # Algorithm
//!
//! A multibit trie with a 24-bit first level and 8-bit levels below, with
//! leaf pushing — DPDK's `rte_lpm` (DIR-24-8) for IPv4 and the same layout as
//! `rte_lpm6` for IPv6. Every entry is a `u32`: a leaf (next hop), a pointer
//! to a 256-entry group of the next level, or empty. An IPv4 lookup is one
//! load from the 2^24-entry first level and, for the few prefixes longer
//! than /24 (about 29 thousand of the 902 thousand in the full table), a
//! second load; an IPv6 lookup follows one pointer per byte after the first
//! 24 bits (at most 14 loads, typically 4 for /48s). No branches depend on
//! the prefix set and the loads of a burst are independent, so lookups in a
//! loop overlap their cache misses.
//!
//! Why not poptrie or a compressed trie: those need far less memory (a few
//! MB instead of 64 MB for the first level) but every lookup walks dependent
//! loads with popcounts; DIR-24-8 trades memory for at most two dependent
//! loads, which is what a router core with plenty of RAM wants. Measured on
//! the full table here (`bench/run-lpm.sh`, `bench/results/lpm.md`, one
//! core of a 2.6 GHz EPYC VM): IPv4 builds in 42 ms into 64.4 MiB (451
//! second-level groups) and answers 134 M uniformly random lookups/s (19
//! cycles each, the first-level load missing cache) and 268 M/s for hosts
//! inside table prefixes; IPv6 builds in 21 ms into 101 MiB and answers 52 M
//! lookups/s for hosts inside table prefixes (50 cycles: a /48 is four
//! dependent loads).
//!
//! # Building and changing
//!
//! A table is built from a builder (routes inserted in order of increasing
//! prefix length) or changed in place, one route at a time, by the one
//! control thread that owns its [`TrieWriter`] while workers look up
//! concurrently (see `fib`): entries are atomic words, so a lookup sees
//! every entry either before or after a change, never half of one. The
//! writer keeps, beside each entry, the length of the prefix that wrote it
//! (the entries themselves stay one word, so lookups are unchanged), which
//! is what lets an insert overwrite only what shorter prefixes wrote and a
//! delete put back the next shorter covering prefix (as `rte_lpm` keeps a
//! depth in each entry). Lower-level groups come from a pool allocated
//! with the table (`rte_lpm`'s `number_tbl8s`); a delete that leaves a
//! group uniform folds it back into its parent entry and retires it, and a
//! retired group is reused only once every worker that could still be
//! reading it has left ([`crate::rcu`]). Next hops are indexes below 2^24
//! into the caller's next-hop table.

use crate::prefix::network6;
use crate::rcu::Epochs;
use rustc_hash::FxHashSet;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

/// An entry is a leaf (`LEAF`, the writer's depth — prefix length + 1 —
/// in bits 16–23, the next hop in bits 0–15), a pointer (`PTR`, the group
/// in bits 0–23) or empty (0).
const LEAF: u32 = 1 << 31;
const PTR: u32 = 1 << 30;
const IDX: u32 = (1 << 24) - 1;
const NH: u32 = 0xffff;
const DEPTH_SHIFT: u32 = 16;
const DEPTH: u32 = 0xff << DEPTH_SHIFT;
const TOP_BITS: u32 = 24;
const TOP_LEN: usize = 1 << TOP_BITS;

/// The most addresses [`Lpm4::lookup_burst`] takes at once.
pub const BURST: usize = 32;

/// Largest next-hop index.
pub const MAX_NEXT_HOP: u32 = NH;

/// A route that cannot be added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LpmError {
    /// Prefix length beyond the address size.
    PrefixLen(u8),
    /// Next hop above [`MAX_NEXT_HOP`].
    NextHop(u32),
    /// Every lower-level group of the pool is in use.
    Full(usize),
}

impl fmt::Display for LpmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LpmError::PrefixLen(l) => write!(f, "prefix length /{l} is too long"),
            LpmError::NextHop(n) => write!(f, "next hop {n} is above {MAX_NEXT_HOP}"),
            LpmError::Full(g) => write!(f, "all {g} lower-level groups of the table are in use"),
        }
    }
}

impl std::error::Error for LpmError {}

/// The lookup side of a trie shared by both families (addresses
/// left-aligned in a u128): what workers read. Slot numbers below
/// `TOP_LEN` are first-level entries, the others group entries.
struct Trie {
    top: Box<[AtomicU32; TOP_LEN]>,
    groups: Box<[AtomicU32]>,
    routes: AtomicUsize,
}

fn atomics(n: usize) -> Box<[AtomicU32]> {
    // A zeroed allocation: the kernel maps zero pages lazily, so an empty
    // 64 MiB first level costs nothing until written.
    bytemuck::zeroed_slice_box(n)
}

impl Trie {
    fn new(groups: usize) -> Self {
        Trie {
            // A fixed length: a first-level index (< 2^24) needs no bounds
            // check.
            top: atomics(TOP_LEN)
                .try_into()
                .unwrap_or_else(|_| unreachable!("TOP_LEN entries")),
            groups: atomics(groups << 8),
            routes: AtomicUsize::new(0),
        }
    }

    #[inline(always)]
    fn top(&self, i: usize) -> u32 {
        self.top[i].load(Ordering::Acquire)
    }

    #[inline(always)]
    fn group(&self, i: usize) -> u32 {
        self.groups[i].load(Ordering::Acquire)
    }

    fn capacity(&self) -> usize {
        self.groups.len() >> 8
    }
}

/// The first slot of group `g`.
fn group_slot(g: u32) -> usize {
    TOP_LEN + ((g as usize) << 8)
}

/// The writer's side of a trie: the group pool. One per table, owned by
/// the one thread that changes it.
#[derive(Default)]
pub struct TrieWriter {
    /// Groups ever taken from the pool (the next fresh one).
    fresh: u32,
    free: Vec<u32>,
    /// Folded groups and the epoch they were retired in.
    retired: Vec<(u64, u32)>,
    live: usize,
}

impl TrieWriter {
    fn new() -> Self {
        TrieWriter {
            fresh: 0,
            free: Vec::new(),
            retired: Vec::new(),
            live: 0,
        }
    }

    /// The value (without depth bits) and depth of slot `s`.
    #[inline]
    fn entry(&self, t: &Trie, s: usize) -> (u32, u8) {
        let e = match s.checked_sub(TOP_LEN) {
            None => t.top(s),
            Some(g) => t.group(g),
        };
        if e & PTR != 0 {
            (e, 0)
        } else {
            (e & !DEPTH, ((e & DEPTH) >> DEPTH_SHIFT) as u8)
        }
    }

    /// Writes value `v` of depth `d` to slot `s` (one store: a reader sees
    /// the old or the new entry).
    #[inline]
    fn put(&mut self, t: &Trie, s: usize, v: u32, d: u8) {
        let e = if v & PTR != 0 {
            v
        } else {
            v | u32::from(d) << DEPTH_SHIFT
        };
        match s.checked_sub(TOP_LEN) {
            None => t.top[s].store(e, Ordering::Release),
            Some(g) => t.groups[g].store(e, Ordering::Release),
        }
    }

    /// Groups in use (not free, not waiting to be reused).
    pub fn groups(&self) -> usize {
        self.live
    }

    /// Groups folded and waiting for readers to leave.
    pub fn retired(&self) -> usize {
        self.retired.len()
    }

    /// Moves retired groups whose readers have all left to the free list.
    pub fn reclaim(&mut self, ep: &Epochs) {
        if self.retired.is_empty() {
            return;
        }
        let Some(oldest) = ep.oldest_inside() else {
            self.free.extend(self.retired.drain(..).map(|(_, g)| g));
            return;
        };
        let free = &mut self.free;
        self.retired.retain(|&(tag, g)| {
            if tag < oldest {
                free.push(g);
                false
            } else {
                true
            }
        });
    }

    /// A group filled with `fill` (written by a prefix of stored depth
    /// `d`), not yet linked.
    fn alloc(&mut self, t: &Trie, ep: &Epochs, fill: u32, d: u8) -> Result<u32, LpmError> {
        if self.free.is_empty() {
            self.reclaim(ep);
        }
        let g = match self.free.pop() {
            Some(g) => g,
            None if (self.fresh as usize) < t.capacity() => {
                self.fresh += 1;
                self.fresh - 1
            }
            None => return Err(LpmError::Full(t.capacity())),
        };
        let base = (g as usize) << 8;
        let e = if fill & PTR != 0 {
            fill
        } else {
            fill | u32::from(d) << DEPTH_SHIFT
        };
        for x in &t.groups[base..base + 256] {
            x.store(e, Ordering::Relaxed);
        }
        self.live += 1;
        Ok(g)
    }

    /// The slots `addr/len` covers at its last level, walking down (and,
    /// when `create`, pushing leaves down into new groups) from the top;
    /// with the groups passed through: (parent slot, group, group depth).
    fn range(
        &mut self,
        t: &Trie,
        ep: &Epochs,
        addr: u128,
        len: u32,
        create: bool,
        path: &mut Vec<(usize, u32, u32)>,
    ) -> Result<Option<std::ops::Range<usize>>, LpmError> {
        if len <= TOP_BITS {
            let n = 1usize << (TOP_BITS - len);
            let start = ((addr >> (128 - TOP_BITS)) as usize) & !(n - 1);
            return Ok(Some(start..start + n));
        }
        let mut s = (addr >> (128 - TOP_BITS)) as usize;
        let mut depth = TOP_BITS;
        loop {
            let (e, d) = self.entry(t, s);
            let g = if e & PTR != 0 {
                e & IDX
            } else if create {
                let g = self.alloc(t, ep, e, d)?;
                self.put(t, s, PTR | g, 0);
                g
            } else {
                return Ok(None);
            };
            path.push((s, g, depth));
            let base = group_slot(g);
            let byte = ((addr >> (128 - depth - 8)) & 0xff) as usize;
            if len <= depth + 8 {
                let n = 1usize << (depth + 8 - len);
                let start = base + (byte & !(n - 1));
                return Ok(Some(start..start + n));
            }
            s = base + byte;
            depth += 8;
        }
    }

    /// Adds or replaces `addr/len → leaf` (left-aligned, host bits zero).
    fn insert(
        &mut self,
        t: &Trie,
        ep: &Epochs,
        addr: u128,
        len: u32,
        nh: u32,
    ) -> Result<(), LpmError> {
        let mut path = Vec::new();
        let range = self.range(t, ep, addr, len, true, &mut path)?;
        let d = (len + 1) as u8;
        for s in range.into_iter().flatten() {
            self.fill(t, s, LEAF | nh, d);
        }
        Ok(())
    }

    /// Writes `leaf` wherever a prefix no longer than this one wrote.
    fn fill(&mut self, t: &Trie, s: usize, leaf: u32, d: u8) {
        let (e, ed) = self.entry(t, s);
        if e & PTR != 0 {
            let base = group_slot(e & IDX);
            for c in base..base + 256 {
                self.fill(t, c, leaf, d);
            }
        } else if ed <= d && (e != leaf || ed != d) {
            self.put(t, s, leaf, d);
        }
    }

    /// Removes `addr/len`, putting back what `rep` (the longest shorter
    /// prefix covering it: length and next hop) or nothing routes there;
    /// folds groups left uniform.
    fn remove(&mut self, t: &Trie, ep: &Epochs, addr: u128, len: u32, rep: Option<(u8, u32)>) {
        let mut path = Vec::new();
        let Ok(Some(range)) = self.range(t, ep, addr, len, false, &mut path) else {
            return;
        };
        let (rv, rd) = rep.map_or((0, 0), |(l, nh)| (LEAF | nh, l + 1));
        let below = path.last().map_or(TOP_BITS, |&(_, _, d)| d + 8);
        for s in range {
            self.unfill(t, ep, s, (len + 1) as u8, rv, rd, below);
        }
        for &(s, g, gd) in path.iter().rev() {
            if !self.fold(t, ep, s, g, gd) {
                break;
            }
        }
    }

    /// Puts `rv` (depth `rd`) where the prefix of depth `d` wrote; `gd` is
    /// the depth of the groups entries at `s` point to.
    #[allow(clippy::too_many_arguments)]
    fn unfill(&mut self, t: &Trie, ep: &Epochs, s: usize, d: u8, rv: u32, rd: u8, gd: u32) {
        let (e, ed) = self.entry(t, s);
        if e & PTR != 0 {
            let g = e & IDX;
            let base = group_slot(g);
            for c in base..base + 256 {
                self.unfill(t, ep, c, d, rv, rd, gd + 8);
            }
            self.fold(t, ep, s, g, gd);
        } else if ed == d {
            self.put(t, s, rv, rd);
        }
    }

    /// Folds group `g` (at depth `gd`, linked from `s`) into `s` when every
    /// entry holds the same leaf pushed down from above; retires it.
    fn fold(&mut self, t: &Trie, ep: &Epochs, s: usize, g: u32, gd: u32) -> bool {
        let base = group_slot(g);
        let (v, d) = self.entry(t, base);
        if v & PTR != 0 || u32::from(d) > gd + 1 {
            return false;
        }
        let raw = t.group(base - TOP_LEN);
        if !(base - TOP_LEN..base - TOP_LEN + 256).all(|c| t.group(c) == raw) {
            return false;
        }
        self.put(t, s, v, d);
        self.retired.push((ep.retire(), g));
        self.live -= 1;
        true
    }
}

/// Lower-level groups a table of `routes` (left-aligned keys, lengths)
/// needs when built: one per distinct parent of each level a prefix
/// longer than 24 bits passes through.
fn groups_needed<'a>(routes: impl Iterator<Item = &'a (u128, u8)>) -> usize {
    let mut seen = FxHashSet::default();
    for &(a, len) in routes {
        let mut depth = TOP_BITS;
        while u32::from(len) > depth {
            seen.insert((depth, a >> (128 - depth)));
            depth += 8;
        }
    }
    seen.len()
}

/// A group pool for a table that will change: half again what its routes
/// need when built, and at least `min` groups. The pool is a zeroed
/// allocation, so groups never used cost address space, not memory (a
/// pool of 32 MiB or more is mapped lazily by the kernel).
pub fn spare_groups(needed: usize, min: usize) -> usize {
    (needed + needed / 2).max(min)
}

/// A table type, its builder and what both share, for one address family:
/// routes are collected as 128-bit keys (IPv4 in the top 32 bits) and built
/// into one [`Trie`] of `$bits`-bit prefixes.
macro_rules! lpm_family {
    ($builder:ident, $table:ident, $addr:ty, $bits:expr, $key:expr, $what:literal) => {
        #[doc = concat!("Collects ", $what, " routes, then builds an [`", stringify!($table), "`].")]
        #[derive(Clone, Debug, Default)]
        pub struct $builder {
            routes: Vec<(u128, u8, u32)>,
        }

        impl $builder {
            /// An empty builder.
            pub fn new() -> Self {
                Self::default()
            }

            /// Adds `addr/len → nh` (host bits are ignored).
            pub fn add(&mut self, addr: $addr, len: u8, nh: u32) -> &mut Self {
                let key: fn($addr) -> u128 = $key;
                self.routes
                    .push((network6(key(addr), len.min($bits)), len, nh));
                self
            }

            /// Routes added so far.
            pub fn len(&self) -> usize {
                self.routes.len()
            }

            /// True when no route was added.
            pub fn is_empty(&self) -> bool {
                self.routes.is_empty()
            }

            /// Builds the table with a pool of `pool(n)` groups where its
            /// routes need `n` (see [`spare_groups`]), and the writer that
            /// changes it.
            pub fn build_writable(
                mut self,
                pool: impl FnOnce(usize) -> usize,
                ep: &Epochs,
            ) -> Result<($table, TrieWriter), LpmError> {
                for &(_, len, nh) in &self.routes {
                    if len > $bits {
                        return Err(LpmError::PrefixLen(len));
                    }
                    if nh > MAX_NEXT_HOP {
                        return Err(LpmError::NextHop(nh));
                    }
                }
                let keys: Vec<(u128, u8)> = self.routes.iter().map(|r| (r.0, r.1)).collect();
                let needed = groups_needed(keys.iter());
                let groups = pool(needed).max(needed);
                // Increasing length (stable: the last of duplicates wins),
                // so that inserts seldom overwrite.
                self.routes.sort_by_key(|&(_, len, _)| len);
                let t = Trie::new(groups);
                let mut w = TrieWriter::new();
                let mut distinct = FxHashSet::default();
                for (addr, len, nh) in self.routes {
                    w.insert(&t, ep, addr, u32::from(len), nh)?;
                    distinct.insert((addr, len));
                }
                t.routes.store(distinct.len(), Ordering::Relaxed);
                Ok(($table { t: Arc::new(t) }, w))
            }

            /// Builds the table (read-only: nothing will change it).
            pub fn build(self) -> Result<$table, LpmError> {
                Ok(self.build_writable(|n| n, &Epochs::default())?.0)
            }
        }

        impl std::fmt::Debug for $table {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($table))
                    .field("routes", &self.routes())
                    .finish()
            }
        }

        impl $table {
            /// An empty table with a pool of `groups` lower-level groups,
            /// and its writer.
            pub fn with_groups(groups: usize) -> ($table, TrieWriter) {
                (
                    $table {
                        t: Arc::new(Trie::new(groups)),
                    },
                    TrieWriter::new(),
                )
            }

            /// Distinct routes in the table.
            pub fn routes(&self) -> usize {
                self.t.routes.load(Ordering::Relaxed)
            }

            /// Bytes of lookup tables.
            pub fn memory(&self) -> usize {
                (self.t.top.len() + self.t.groups.len()) * 4
            }

            /// The size of the group pool.
            pub fn capacity(&self) -> usize {
                self.t.capacity()
            }

            /// Adds or replaces `addr/len → nh` in place; `w` must be this
            /// table's writer (the one returned with it).
            pub fn insert(
                &self,
                w: &mut TrieWriter,
                ep: &Epochs,
                addr: $addr,
                len: u8,
                nh: u32,
            ) -> Result<(), LpmError> {
                if len > $bits {
                    return Err(LpmError::PrefixLen(len));
                }
                if nh > MAX_NEXT_HOP {
                    return Err(LpmError::NextHop(nh));
                }
                let key: fn($addr) -> u128 = $key;
                w.insert(&self.t, ep, network6(key(addr), len), u32::from(len), nh)
            }

            /// Removes `addr/len` in place: addresses it covered route by
            /// `rep` (the longest shorter prefix covering it: length and
            /// next hop; the caller keeps the route list) or nothing.
            pub fn remove(
                &self,
                w: &mut TrieWriter,
                ep: &Epochs,
                addr: $addr,
                len: u8,
                rep: Option<(u8, u32)>,
            ) {
                let key: fn($addr) -> u128 = $key;
                w.remove(
                    &self.t,
                    ep,
                    network6(key(addr), len.min($bits)),
                    u32::from(len.min($bits)),
                    rep,
                )
            }

            /// Sets the route count reported by [`Self::routes`] (the
            /// writer's owner keeps the route list).
            pub fn set_routes(&self, n: usize) {
                self.t.routes.store(n, Ordering::Relaxed);
            }
        }
    };
}

lpm_family!(
    Lpm4Builder,
    Lpm4,
    Ipv4Addr,
    32,
    |a| u128::from(u32::from(a)) << 96,
    "IPv4"
);
lpm_family!(Lpm6Builder, Lpm6, Ipv6Addr, 128, u128::from, "IPv6");

/// An IPv4 longest-prefix-match table (DIR-24-8). Clones share the table.
#[derive(Clone)]
pub struct Lpm4 {
    t: Arc<Trie>,
}

/// An IPv6 longest-prefix-match table (24-bit first level, 8-bit levels).
/// Clones share the table.
#[derive(Clone)]
pub struct Lpm6 {
    t: Arc<Trie>,
}

impl Lpm4 {
    /// The next hop of the longest prefix covering `a`.
    #[inline(always)]
    pub fn lookup(&self, a: u32) -> Option<u32> {
        self.resolve(self.t.top((a >> 8) as usize), a)
    }

    /// Where the lookup of `a` reads first: its first-level entry (to
    /// prefetch; on a full table it misses the caches).
    #[inline(always)]
    pub fn entry_of(&self, a: u32) -> *const u8 {
        self.first().entry_of(a)
    }

    /// The first level's entries, whose addresses [`First4::entry_of`]
    /// gives without reading the table's pointers again: for a loop that
    /// prefetches many lookups' first reads.
    #[inline(always)]
    pub fn first(&self) -> First4<'_> {
        First4(&self.t.top)
    }

    /// The next hop of `a` from its first-level entry `e`: `e` itself, or
    /// the entry of `a`'s last byte in the group `e` points to.
    #[inline(always)]
    fn resolve(&self, mut e: u32, a: u32) -> Option<u32> {
        if e & PTR != 0 {
            e = self
                .t
                .group((((e & IDX) as usize) << 8) | (a & 0xff) as usize);
        }
        (e & LEAF != 0).then_some(e & NH)
    }

    /// Looks up a burst of up to [`BURST`] addresses: `out[i]` is the next
    /// hop of `addrs[i]`, or `none` without a route. The first-level
    /// entries are all loaded first, in a loop of nothing else, and only
    /// then are the second levels read: on a full table most first-level
    /// loads miss the caches, and a loop of four instructions a load keeps
    /// the whole burst's misses in flight at once, where a loop that also
    /// tests and follows each entry fills the CPU's window with a third as
    /// many.
    /// When no entry of the burst points to a second level (a table of
    /// prefixes no longer than /24, or a burst that meets none longer),
    /// the entries are turned into next hops in a loop without branches
    /// over the whole array, which the compiler vectorises; `out` past
    /// `addrs.len()` is then unspecified.
    #[inline(always)]
    pub fn lookup_burst(&self, addrs: &[u32], out: &mut [u32; BURST], none: u32) {
        let addrs = &addrs[..addrs.len().min(BURST)];
        // The first level's address read once (the loads are acquires,
        // which the compiler does not move a re-read of it across).
        let top = &*self.t.top;
        let mut any = 0;
        for (a, o) in addrs.iter().zip(out.iter_mut()) {
            let e = top[(a >> 8) as usize].load(Ordering::Acquire);
            any |= e;
            *o = e;
        }
        if any & PTR == 0 {
            for o in out.iter_mut() {
                *o = if *o & LEAF != 0 { *o & NH } else { none };
            }
            return;
        }
        for (a, o) in addrs.iter().zip(out.iter_mut()) {
            *o = self.resolve(*o, *a).unwrap_or(none);
        }
    }
}

/// An IPv4 table's first level ([`Lpm4::first`]).
#[derive(Clone, Copy)]
pub struct First4<'a>(&'a [AtomicU32; TOP_LEN]);

impl First4<'_> {
    /// [`Lpm4::entry_of`].
    #[inline(always)]
    pub fn entry_of(self, a: u32) -> *const u8 {
        std::ptr::from_ref(&self.0[(a >> 8) as usize]).cast()
    }
}

impl Lpm6 {
    /// The next hop of the longest prefix covering `a`.
    #[inline]
    pub fn lookup(&self, a: u128) -> Option<u32> {
        let mut e = self.t.top((a >> (128 - TOP_BITS)) as usize);
        let mut shift = 128 - TOP_BITS;
        while e & PTR != 0 && shift >= 8 {
            shift -= 8;
            let byte = ((a >> shift) & 0xff) as usize;
            e = self.t.group((((e & IDX) as usize) << 8) | byte);
        }
        (e & LEAF != 0).then_some(e & NH)
    }

    /// Where the lookup of `a` reads first: its first-level entry (to
    /// prefetch).
    #[inline(always)]
    pub fn entry_of(&self, a: u128) -> *const u8 {
        std::ptr::from_ref(&self.t.top[(a >> (128 - TOP_BITS)) as usize]).cast()
    }

    /// Looks up a burst of up to [`BURST`] addresses, as
    /// [`Lpm4::lookup_burst`] does: `out[i]` is the next hop of
    /// `addrs[i]`, or `none` without a route. Level by level over the
    /// whole burst: every first-level entry is loaded, then every entry
    /// that points to a group follows it one level down, and so on, so
    /// that the burst's loads of one level are all in flight at once
    /// where the lookup of one address is a chain of up to 14 dependent
    /// loads (a /48 four). Every entry still pointing after a pass is one
    /// level deeper than after the pass before, so one shift serves the
    /// whole burst.
    #[inline]
    pub fn lookup_burst(&self, addrs: &[u128], out: &mut [u32; BURST], none: u32) {
        let addrs = &addrs[..addrs.len().min(BURST)];
        let top = &*self.t.top;
        let mut any = 0;
        for (a, o) in addrs.iter().zip(out.iter_mut()) {
            let e = top[(a >> (128 - TOP_BITS)) as usize].load(Ordering::Acquire);
            any |= e;
            *o = e;
        }
        let mut shift = 128 - TOP_BITS;
        while any & PTR != 0 && shift >= 8 {
            shift -= 8;
            any = 0;
            for (a, o) in addrs.iter().zip(out.iter_mut()) {
                if *o & PTR != 0 {
                    let byte = ((a >> shift) & 0xff) as usize;
                    *o = self.t.group((((*o & IDX) as usize) << 8) | byte);
                    any |= *o;
                }
            }
        }
        for o in out[..addrs.len()].iter_mut() {
            *o = if *o & LEAF != 0 { *o & NH } else { none };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> u32 {
        u32::from(s.parse::<Ipv4Addr>().unwrap())
    }

    fn v6(s: &str) -> u128 {
        u128::from(s.parse::<Ipv6Addr>().unwrap())
    }

    /// The prefetch address is the first-level entry the lookup reads:
    /// one per /24, four bytes apart, whatever the last byte.
    #[test]
    fn ipv4_entry_of_is_the_lookups_first_read() {
        let t = Lpm4Builder::new().build().unwrap();
        let at = |a: &str| t.entry_of(v4(a)) as usize;
        let base = std::ptr::from_ref(&t.t.top[0]) as usize;
        assert_eq!(at("0.0.0.255"), base);
        assert_eq!(at("10.1.2.3") - base, 0x000a_0102 * 4);
        assert_eq!(at("10.1.2.3"), at("10.1.2.200"));
        assert_eq!(at("255.255.255.255") - base, 0x00ff_ffff * 4);
    }

    #[test]
    fn ipv4_longest_prefix_wins() {
        let mut b = Lpm4Builder::new();
        b.add("0.0.0.0".parse().unwrap(), 0, 1)
            .add("10.0.0.0".parse().unwrap(), 8, 2)
            .add("10.1.0.0".parse().unwrap(), 16, 3)
            .add("10.1.2.0".parse().unwrap(), 24, 4)
            .add("10.1.2.128".parse().unwrap(), 25, 5)
            .add("10.1.2.200".parse().unwrap(), 32, 6)
            .add("10.1.2.77".parse().unwrap(), 16, 7); // host bits ignored: 10.1/16 again
        let t = b.build().unwrap();
        assert_eq!(t.lookup(v4("9.9.9.9")), Some(1));
        assert_eq!(t.lookup(v4("10.9.9.9")), Some(2));
        assert_eq!(
            t.lookup(v4("10.1.9.9")),
            Some(7),
            "a duplicate keeps the last next hop"
        );
        assert_eq!(t.lookup(v4("10.1.2.1")), Some(4));
        assert_eq!(t.lookup(v4("10.1.2.129")), Some(5));
        assert_eq!(t.lookup(v4("10.1.2.200")), Some(6));
        assert_eq!(t.lookup(v4("10.1.2.201")), Some(5));
        assert_eq!(t.capacity(), 1);
    }

    /// The burst lookup (first levels in one loop, second levels in
    /// another) gives what one lookup at a time gives: over routes with
    /// second-level groups, holes without a route, and every burst length
    /// up to `BURST` (and one past it: the rest is left alone).
    #[test]
    fn burst_lookup_is_one_lookup_at_a_time() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(24);
        // Two tables: one with second-level groups (prefixes past /24),
        // where most bursts meet one, and one without, whose bursts all
        // take the branch-free conversion.
        for (lens, groups) in [
            (&[8u8, 16, 20, 24, 25, 28, 30, 32][..], true),
            (&[8, 12, 16, 20, 22, 24][..], false),
        ] {
            let mut b = Lpm4Builder::new();
            let mut bases = vec![];
            for i in 0..400u32 {
                let base = rng.random::<u32>() & 0xffff_ff00;
                let len = lens[i as usize % lens.len()];
                b.add(
                    std::net::Ipv4Addr::from(base | rng.random::<u32>() & 0xff),
                    len,
                    i,
                );
                bases.push(base);
            }
            let t = b.build().unwrap();
            assert_eq!(t.capacity() > 0, groups, "second-level groups in use");
            for n in 0..=BURST + 1 {
                let addrs: Vec<u32> = (0..n)
                    .map(|_| match rng.random_range(0..3) {
                        0 => rng.random(),
                        _ => bases[rng.random_range(0..bases.len())] | rng.random::<u32>() & 0xff,
                    })
                    .collect();
                let mut out = [7u32; BURST];
                t.lookup_burst(&addrs, &mut out, u32::MAX);
                for (i, &a) in addrs.iter().enumerate().take(BURST) {
                    let want = t.lookup(a).unwrap_or(u32::MAX);
                    assert_eq!(out[i], want, "burst of {n}, address {i}");
                }
            }
        }
    }

    /// The IPv6 burst lookup (level by level over the burst) gives what
    /// one lookup at a time gives: prefixes of every length from /8 to
    /// /128 (chains of up to 14 levels, bursts whose addresses stop at
    /// different depths), holes without a route, and every burst length
    /// up to `BURST` (and one past it).
    #[test]
    fn ipv6_burst_lookup_is_one_lookup_at_a_time() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(6);
        let lens = [
            8u8, 16, 20, 24, 29, 32, 40, 48, 56, 64, 80, 96, 112, 127, 128,
        ];
        let mut b = Lpm6Builder::new();
        let mut bases = vec![];
        // Prefixes nested under a few /20s (deep chains under one first
        // entry) and scattered ones.
        let roots: Vec<u128> = (0..4).map(|_| rng.random::<u128>() & !0 << 108).collect();
        for i in 0..600u32 {
            let len = lens[i as usize % lens.len()];
            let base = match i % 3 {
                0 => rng.random::<u128>(),
                _ => roots[rng.random_range(0..roots.len())] | rng.random::<u128>() >> 20,
            };
            b.add(std::net::Ipv6Addr::from(base), len, i);
            bases.push(base);
        }
        let t = b.build().unwrap();
        for n in 0..=BURST + 1 {
            let addrs: Vec<u128> = (0..n)
                .map(|_| {
                    let base = bases[rng.random_range(0..bases.len())];
                    // Random, the base itself (the longest chain), or a
                    // host under the base's top bits.
                    match rng.random_range(0..4) {
                        0 => rng.random(),
                        1 => base,
                        k => base ^ rng.random::<u128>() >> (40 * k),
                    }
                })
                .collect();
            let mut out = [7u32; BURST];
            t.lookup_burst(&addrs, &mut out, u32::MAX);
            for (i, &a) in addrs.iter().enumerate().take(BURST) {
                let want = t.lookup(a).unwrap_or(u32::MAX);
                assert_eq!(out[i], want, "burst of {n}, address {i} ({a:#x})");
            }
            if n > 0 {
                let first = std::ptr::from_ref(&t.t.top[0]) as usize;
                assert_eq!(
                    t.entry_of(addrs[0]) as usize - first,
                    (addrs[0] >> 104) as usize * 4,
                    "the prefetch address is the first-level entry read"
                );
            }
        }
    }

    #[test]
    fn ipv4_no_default_route_misses() {
        let mut b = Lpm4Builder::new();
        b.add("198.18.0.0".parse().unwrap(), 15, 9);
        let t = b.build().unwrap();
        assert_eq!(t.lookup(v4("198.19.255.255")), Some(9));
        assert_eq!(t.lookup(v4("198.20.0.0")), None);
        assert_eq!(t.lookup(0), None);
        // A /26 inside a group inherits nothing where nothing covered it.
        let mut b = Lpm4Builder::new();
        b.add("203.0.113.64".parse().unwrap(), 26, 3);
        let t = b.build().unwrap();
        assert_eq!(t.lookup(v4("203.0.113.70")), Some(3));
        assert_eq!(t.lookup(v4("203.0.113.10")), None);
    }

    #[test]
    fn ipv6_longest_prefix_wins() {
        let mut b = Lpm6Builder::new();
        b.add("::".parse().unwrap(), 0, 1)
            .add("2001:db8::".parse().unwrap(), 32, 2)
            .add("2001:db8:1::".parse().unwrap(), 48, 3)
            .add("2001:db8:1:2::".parse().unwrap(), 64, 4)
            .add("2001:db8:1:2::80".parse().unwrap(), 121, 5)
            .add("2001:db8:1:2::ff".parse().unwrap(), 128, 6)
            .add("2001:dc0::".parse().unwrap(), 20, 7);
        let t = b.build().unwrap();
        assert_eq!(t.lookup(v6("3000::1")), Some(1));
        assert_eq!(t.lookup(v6("2001:db8:ffff::1")), Some(2));
        assert_eq!(t.lookup(v6("2001:db8:1:ffff::1")), Some(3));
        assert_eq!(t.lookup(v6("2001:db8:1:2::1")), Some(4));
        assert_eq!(t.lookup(v6("2001:db8:1:2::81")), Some(5));
        assert_eq!(t.lookup(v6("2001:db8:1:2::ff")), Some(6));
        assert_eq!(t.lookup(v6("2001:dc0:abcd::")), Some(7));
    }

    #[test]
    fn bad_routes_are_refused() {
        let mut b = Lpm4Builder::new();
        b.add("1.2.3.4".parse().unwrap(), 33, 1);
        assert_eq!(b.build().err(), Some(LpmError::PrefixLen(33)));
        let mut b = Lpm6Builder::new();
        b.add("::".parse().unwrap(), 0, MAX_NEXT_HOP + 1);
        assert_eq!(b.build().err(), Some(LpmError::NextHop(MAX_NEXT_HOP + 1)));
    }
}
