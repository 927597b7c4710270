//! Decision trees over the IPv4 rules for large wildcard-heavy sets
//! (HyperSplit, Qi et al., INFOCOM 2009, over rule groups separated by
//! which addresses are specific, as in EffiCuts and CutSplit), and over
//! large IPv6 rule sets, their addresses numbered as `u32`s ([`Remap`]).
//!
//! The bit vectors of the `bitvec` module grow with the square of the
//! rules a cell holds: 100,000 rules grown from fw1, a quarter of them
//! wildcards on one address, take 782 MiB of vectors and 2,400 cycles a
//! lookup. A tree holds each rule once per leaf it reaches instead: 7 MiB
//! for the same set.
//!
//! The rules are separated into four groups by whether each address is
//! specific (a prefix of at least [`SMALL`] bits): in a group, a split on
//! an address that is specific in it replicates few of its rules. Each
//! group's tree is first cut into 2^[`CUT`] cells on the top bits of an
//! address specific in it (none for the group where neither is), each
//! cell with its
//! own subtree (a table lookup instead of 16 levels). A node splits one
//! field (source, destination, source port, destination port, protocol)
//! at one value, chosen where the larger side holds the fewest rules,
//! then where the two hold the fewest together; a leaf holds at most
//! [`LEAF`] rules, in priority order: a few side by side in half a cache
//! line each, checked one by one, more in blocks of eight checked eight
//! at once (`lanes`). A rule that
//! covers a node's whole region in every field and needs no residual
//! check (TCP flags, metadata, a protocol mask) hides every rule after it
//! there, and they are dropped. A lookup walks the trees side by side
//! (independent chains of loads that the core overlaps), then checks the
//! leaves in the order of the trees' first rules, and stops at a rule or
//! a tree that comes after what it found.
//!
//! The parameters were measured on the 100k-rule sets grown from fw1,
//! ipc1 and acl1 (`sluice-bench acl --classifier-only`): specific from
//! /12 rather than /16 took ipc1's trees from 24 to 9 MiB and 1.9 to 3.4
//! M lookups/s (from /24: 123 MiB). With each leaf's rules side by side
//! and checked one by one, leaves of 24 rules gave acl1 6.2–6.9, fw1
//! 7.3–8.3 and ipc1 4.9–5.1 M/s against 3.3, 3.9 and 3.5 for leaves of 8
//! (1.4–2× the memory). Checked eight at once, larger leaves pay: valgrind
//! counts 730, 720 and 858 instructions a lookup (acl1, fw1, ipc1) with
//! leaves of 24, 698, 668 and 839 with leaves of 40 (8.7, 6.9 and 7.6
//! MiB, against 11.9, 7.7 and 9.8), 700, 657 and 833 with 48, where the
//! scalar leaves of 24 took 1141, 1314 and 1212; six alternating rounds
//! gave leaves of 40 medians of 8.7, 8.9 and 7.2 M lookups/s against 5.9,
//! 5.6 and 4.9 for the scalar leaves of 24, and fw1_10k 14.3 against 10.4.

use super::lanes::{Block, LANES, MORE};
use super::{proto_range, Key, Member, Residual, Rule};

/// An order-preserving map of one address field's `u128` values onto
/// `u32`s, for trees over IPv6 rules, built from the field's elementary
/// intervals (where some rule's range starts or ends). A value's number
/// is its bucket (the 16 bits after the prefix that the starts share: all
/// but the first, 0, and a last one just past that prefix's block, as a
/// range to the block's end leaves) in the top 16 bits, and in the low 16
/// either its next 16 bits (a direct bucket: one whose starts have no bit
/// set past those, as a set of prefixes no longer than 32 bits past the
/// shared one has everywhere; every bucket but the first and the last may
/// be) or how many starts in its bucket are at or below it; a value
/// before every start but the first is 0, one past the shared prefix
/// above them `u32::MAX`. Two values have the same number only in the
/// same interval, a larger value never a smaller number, and every range
/// starts at a start and ends before one, so a value is in a rule's range
/// exactly when its number is in the range of its ends' numbers. The top
/// bits keep the address's bits after the shared prefix, so the trees'
/// cut works as on IPv4 addresses (a specific prefix spans few cells).
/// Where a bucket that is not direct holds 65,535 starts or more, the
/// number is the interval's rank instead, spread over the `u32`s (and the
/// trees are built without a cut). A counted bucket is binary-searched.
/// Two faster searches were tried on 2026-12-07 against the 100k sets with
/// hosts as /128s (`sluice-bench acl --ipv6`, rows `…k6h`), neither
/// faster in alternating rounds: an index of cells on the bits past a
/// bucket's shared ones, each crowded cell with its own (0.75–0.98×: its
/// cells missed the caches where the search's first steps hit them), and
/// numbering a bucket by cells of 12 to 15 bits and the few starts inside
/// each, found by a hash (no change: the lookups that cost are in the few
/// buckets of hundreds of hosts, where a cell holds too many to count).
/// Nor was comparing each start's 64 bits after the bucket's first (the
/// `u128` compares a tie-break): 1,096 / 845 / 1,185 valgrind
/// instructions a lookup against 1,102 / 820 / 1,208, for 8 bytes more a
/// start; the search's cost is its ten steps, not their compares.
pub(super) struct Remap {
    /// The intervals' first values within the shared prefix, ascending,
    /// the first 0.
    starts: Vec<u128>,
    /// Bits shared by every start after the first (but one just past
    /// their block).
    pub(super) common: u32,
    /// By bucket (the 16 bits after `common`), the index of the first
    /// start after the first in that bucket or a later one; one more
    /// entry, `starts.len()`.
    first: Vec<u32>,
    /// By bucket, one bit: numbered by its next 16 bits (8 KiB: the
    /// buckets' index is read only for the others).
    direct: Vec<u64>,
    /// Numbered by rank (a bucket too full): the rank's shift.
    rank: Option<u32>,
    /// The number of a value past the shared prefix, above every start.
    past: u32,
}

/// Bits of a [`Remap`]'s buckets.
const REMAP_BITS: u32 = 16;

impl Remap {
    /// The intervals of `ranges` (inclusive).
    pub(super) fn new(ranges: impl IntoIterator<Item = (u128, u128)>) -> Remap {
        let mut starts = vec![0];
        for (lo, hi) in ranges {
            starts.push(lo);
            starts.extend(hi.checked_add(1));
        }
        starts.sort_unstable();
        starts.dedup();
        let top = (starts.len() - 1) as u64;
        let bits = u64::BITS - top.leading_zeros();
        assert!(bits <= 32, "{} intervals", starts.len());
        let shared = |a: u128, b: u128| (a ^ b).leading_zeros().min(128 - REMAP_BITS);
        let n = starts.len();
        let mut common = match n {
            0..=2 => 128 - REMAP_BITS,
            n => shared(starts[1], starts[n - 1]),
        };
        // A last start just past the others' block (a range to the
        // block's end, as 2001:db8::/32's end leaves 2001:db9::) is
        // numbered as the values past it: outside the shared prefix (by
        // rank, the last interval's either way).
        if n >= 4 {
            let c = shared(starts[1], starts[n - 2]);
            if c > common && (starts[1] | u128::MAX >> c).checked_add(1) == Some(starts[n - 1]) {
                common = c;
                starts.pop();
            }
        }
        let mut r = Remap {
            starts,
            common,
            first: Vec::new(),
            direct: vec![0; (1 << REMAP_BITS) / 64],
            rank: None,
            past: u32::MAX,
        };
        let after = &r.starts[1..];
        r.first = (0..=1usize << REMAP_BITS)
            .map(|b| (1 + after.partition_point(|&s| r.bucket(s) < b)) as u32)
            .collect();
        // Bits past the 16 after the bucket's.
        let below = u128::MAX.checked_shr(common + 2 * REMAP_BITS).unwrap_or(0);
        for b in 1..(1 << REMAP_BITS) - 1 {
            let (lo, hi) = (r.first[b] as usize, r.first[b + 1] as usize);
            if r.starts[lo..hi].iter().all(|&s| s & below == 0) {
                r.direct[b / 64] |= 1 << (b % 64);
            }
        }
        if (0..1 << REMAP_BITS).any(|b| !r.direct(b) && r.first[b + 1] - r.first[b] >= 0xffff) {
            let shift = 32 - bits;
            r.rank = Some(shift);
            r.direct.fill(0);
            r.past = (((n - 1) as u64) << shift) as u32;
        }
        r
    }

    /// Whether bucket `b` is numbered by its next 16 bits.
    #[inline(always)]
    fn direct(&self, b: usize) -> bool {
        self.direct[b / 64] & 1 << (b % 64) != 0
    }

    #[inline(always)]
    fn bucket(&self, a: u128) -> usize {
        ((a << self.common) >> (128 - REMAP_BITS)) as usize
    }

    /// The number of `a`.
    #[inline(always)]
    pub(super) fn at(&self, a: u128) -> u32 {
        let s = &self.starts;
        if s.len() < 2 {
            return 0;
        }
        if (a ^ s[1]).checked_shr(128 - self.common).unwrap_or(0) != 0 {
            // Outside the shared prefix: before every start after the
            // first, or after all of them.
            return if a < s[1] { 0 } else { self.past };
        }
        let b = self.bucket(a);
        if self.direct(b) {
            // The 16 bits after the bucket's (two shifts: `common` may
            // leave none).
            return (b as u32) << REMAP_BITS | (a << self.common << REMAP_BITS >> 112) as u32;
        }
        let (lo, hi) = (self.first[b] as usize, self.first[b + 1] as usize);
        let j = s[lo..hi].partition_point(|&x| x <= a);
        match self.rank {
            None => (b as u32) << REMAP_BITS | j as u32,
            Some(shift) => (((lo + j - 1) as u64) << shift) as u32,
        }
    }

    /// How many buckets are numbered by their bits.
    #[cfg(test)]
    fn directs(&self) -> u32 {
        self.direct.iter().map(|w| w.count_ones()).sum()
    }

    /// Whether the numbers keep the buckets (the trees may cut on them).
    pub(super) fn bucketed(&self) -> bool {
        self.rank.is_none()
    }

    /// The numbers of the values of `(lo, hi)`, a range of whole
    /// intervals (and no other value's).
    pub(super) fn range(&self, (lo, hi): (u128, u128)) -> (u32, u32) {
        let h = match self.rank {
            None => self.at(hi),
            Some(shift) => self.at(hi) | ((1u64 << shift) - 1) as u32,
        };
        (self.at(lo), h)
    }

    pub(super) fn bytes(&self) -> usize {
        self.starts.len() * std::mem::size_of::<u128>()
            + self.first.len() * 4
            + self.direct.len() * 8
    }
}

/// An IPv4 prefix this long or longer is specific (the address splits
/// well).
const SMALL: u8 = 12;

/// Which addresses a set of trees is over.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Space {
    /// IPv4's, as themselves: an address is specific from a /[`SMALL`]
    /// (of the IPv4-mapped form, 96 bits more), and the trees of the
    /// groups with a specific address start with a cut on its top bits.
    V4,
    /// IPv6's, numbered by [`Remap`]: the source's and the destination's
    /// prefix length from which each is specific ([`SMALL`] bits past the
    /// prefix its rules share, where its cut's bits start), and whether
    /// the trees may cut (the numbers keep the buckets).
    V6 { specific: [u8; 2], cut: bool },
}

impl Space {
    /// The specific lengths of [`Space::V6`] for fields numbered by `src`
    /// and `dst`.
    pub(super) fn v6(src: &Remap, dst: &Remap) -> Space {
        let specific = |r: &Remap| (r.common + u32::from(SMALL)).min(128) as u8;
        Space::V6 {
            specific: [specific(src), specific(dst)],
            cut: src.bucketed() && dst.bucketed(),
        }
    }
}

/// Bits of the cut on a specific address.
const CUT: u32 = 16;
/// The cell of `a` in a cut on its top `bits` bits.
#[inline(always)]
fn cell(a: u32, bits: u32) -> usize {
    (u64::from(a) >> (32 - bits)) as usize
}
/// Most rules in a leaf.
const LEAF: usize = 40;
/// Deepest node (a leaf there keeps whatever rules reach it).
const MAX_DEPTH: u32 = 48;

/// Most nodes of a tree (a node's kids are at a 28-bit index into the
/// trees' nodes together; a set that would need more gets leaves of more
/// rules instead).
const MAX_NODES: usize = 0x0fff_ffff / GROUPS;
/// The flag of a leaf in [`Node::meta`].
const IS_LEAF: u32 = 1 << 31;
/// The flag in [`Node::meta`] of a leaf whose rules are in blocks of
/// eight ([`Block`]), checked eight at once.
const IN_BLOCKS: u32 = 1 << 30;
/// Leaves of this many rules or more are in blocks; smaller ones are
/// checked rule by rule (a block takes 256 bytes however few rules it
/// holds: 20,000 host-pair rules, one to a leaf, would take 5 MiB).
const IN_BLOCKS_FROM: usize = 4;
/// Groups (and trees) at most.
const GROUPS: usize = 4;

/// A node: an inner node sends a key whose field `meta >> 28 & 7` is
/// below `split` to node `meta & 0x0fff_ffff`, and others to the node
/// after it; a leaf (`IS_LEAF`) has its rules at `split..` of the tree's
/// slots, `meta & !IS_LEAF` of them, or with `IN_BLOCKS` (bit 30, which
/// only a leaf's `meta` has as a flag) at `split..` of its blocks, that
/// many blocks.
#[derive(Clone, Copy)]
struct Node {
    split: u32,
    meta: u32,
}

/// A rule as the build splits it: five inclusive ranges (source,
/// destination, source port, destination port, protocol).
#[derive(Clone, Copy)]
struct Leaf {
    lo: [u32; 5],
    hi: [u32; 5],
    /// Whether the rule needs a check besides its ranges ([`Residual`]).
    more: bool,
    id: u32,
}

/// A rule in a leaf, as a lookup checks it: its ranges in half a cache
/// line, each leaf's rules side by side (a scan reads on, and the
/// prefetcher reads ahead, instead of a load per rule from a table).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Slot {
    src: [u32; 2],
    dst: [u32; 2],
    sport: [u16; 2],
    dport: [u16; 2],
    id: u32,
    proto: [u8; 2],
    /// Whether [`Split::residual`] has more to check.
    more: bool,
}

impl Slot {
    fn of(r: &Leaf) -> Slot {
        Slot {
            src: [r.lo[0], r.hi[0]],
            dst: [r.lo[1], r.hi[1]],
            sport: [r.lo[2] as u16, r.hi[2] as u16],
            dport: [r.lo[3] as u16, r.hi[3] as u16],
            id: r.id,
            proto: [r.lo[4] as u8, r.hi[4] as u8],
            more: r.more,
        }
    }

    #[inline(always)]
    fn covers(&self, k: &Key, src: u32, dst: u32) -> bool {
        // One branch, not ten (a leaf's rules fail on any field): ipc1's
        // 100k grown set went from 4.5–4.8 to 5.2–5.9 M lookups/s in four
        // alternating runs of each build.
        (self.src[0] <= src)
            & (src <= self.src[1])
            & (self.dst[0] <= dst)
            & (dst <= self.dst[1])
            & (self.sport[0] <= k.sport)
            & (k.sport <= self.sport[1])
            & (self.dport[0] <= k.dport)
            & (k.dport <= self.dport[1])
            & (self.proto[0] <= k.proto)
            & (k.proto <= self.proto[1])
    }
}

/// One group's tree.
struct Tree {
    nodes: Vec<Node>,
    /// Small leaves' rules, each leaf's in priority order.
    slots: Vec<Slot>,
    /// Larger leaves' rules, each leaf's in priority order, eight to a
    /// block.
    blocks: Vec<Block>,
    /// The group's rules (while it is built).
    rules: Vec<Leaf>,
    /// The group's first rule (its lowest index).
    first: u32,
    /// The field whose top `bits` bits pick a root (0 bits: one root).
    field: usize,
    bits: u32,
    /// Each cell's root node.
    roots: Vec<u32>,
}

/// A node's region: five inclusive ranges.
type Region = ([u32; 5], [u32; 5]);

impl Tree {
    /// The tree of `rules` (in priority order), cut first into cells on
    /// the top `bits` bits of `field` (an address, 0 or 1).
    fn build(rules: Vec<Leaf>, field: usize, bits: u32) -> Tree {
        let first = rules.first().map_or(u32::MAX, |r| r.id);
        let mut t = Tree {
            // Node 0: the empty leaf, shared by cells no rule meets.
            nodes: vec![Node {
                split: 0,
                meta: IS_LEAF,
            }],
            slots: Vec::new(),
            blocks: Vec::new(),
            rules,
            first,
            field,
            bits,
            roots: Vec::new(),
        };
        let full = ([0; 5], [u32::MAX, u32::MAX, 0xffff, 0xffff, 0xff]);
        let mut cells: Vec<Vec<u32>> = vec![Vec::new(); 1 << bits];
        for (i, r) in t.rules.iter().enumerate() {
            for c in &mut cells[cell(r.lo[field], bits)..=cell(r.hi[field], bits)] {
                c.push(i as u32);
            }
        }
        for (c, list) in cells.into_iter().enumerate() {
            if list.is_empty() {
                t.roots.push(0);
                continue;
            }
            let at = t.nodes.len();
            t.nodes.push(Node { split: 0, meta: 0 });
            t.roots.push(at as u32);
            let mut region = full;
            let lo = (c as u64) << (32 - bits);
            region.0[field] = lo as u32;
            region.1[field] = (lo + (1u64 << (32 - bits)) - 1) as u32;
            t.grow(at, list, region, 0);
        }
        // The leaves hold what a lookup reads.
        t.rules = Vec::new();
        t
    }

    fn leaf(&mut self, at: usize, list: &[u32]) {
        let rules = &self.rules;
        if list.len() < IN_BLOCKS_FROM {
            self.nodes[at] = Node {
                split: self.slots.len() as u32,
                meta: IS_LEAF | list.len() as u32,
            };
            self.slots
                .extend(list.iter().map(|&i| Slot::of(&rules[i as usize])));
            return;
        }
        self.nodes[at] = Node {
            split: self.blocks.len() as u32,
            meta: IS_LEAF | IN_BLOCKS | list.len().div_ceil(LANES) as u32,
        };
        self.blocks.extend(list.chunks(LANES).map(|c| {
            let lanes: Vec<_> = c
                .iter()
                .map(|&i| {
                    let r = &rules[i as usize];
                    ((r.lo, r.hi), r.id | if r.more { MORE } else { 0 })
                })
                .collect();
            Block::new(&lanes)
        }));
    }

    fn grow(&mut self, at: usize, mut list: Vec<u32>, region: Region, depth: u32) {
        // A rule covering the region and needing no residual check hides
        // the rules after it.
        if let Some(p) = list.iter().position(|&i| {
            let r = &self.rules[i as usize];
            !r.more && (0..5).all(|f| r.lo[f] <= region.0[f] && r.hi[f] >= region.1[f])
        }) {
            list.truncate(p + 1);
        }
        // Kids' indexes take 28 bits of `meta`.
        if list.len() <= LEAF || depth >= MAX_DEPTH || self.nodes.len() + 2 > MAX_NODES {
            return self.leaf(at, &list);
        }
        let Some((f, s)) = self.best_split(&list, &region) else {
            return self.leaf(at, &list);
        };
        let (left, right): (Vec<u32>, Vec<u32>) = (
            list.iter()
                .copied()
                .filter(|&i| self.rules[i as usize].lo[f].max(region.0[f]) < s)
                .collect(),
            list.iter()
                .copied()
                .filter(|&i| self.rules[i as usize].hi[f].min(region.1[f]) >= s)
                .collect(),
        );
        drop(list);
        let kids = self.nodes.len();
        self.nodes.push(Node { split: 0, meta: 0 });
        self.nodes.push(Node { split: 0, meta: 0 });
        self.nodes[at] = Node {
            split: s,
            meta: (f as u32) << 28 | kids as u32,
        };
        let mut lr = region;
        lr.1[f] = s - 1;
        let mut rr = region;
        rr.0[f] = s;
        self.grow(kids, left, lr, depth + 1);
        self.grow(kids + 1, right, rr, depth + 1);
    }

    /// The field and value to split `list` at (keys below the value go
    /// left): where the larger side holds the fewest rules, then the two
    /// sides the fewest together; `None` when no split leaves both sides
    /// smaller.
    fn best_split(&self, list: &[u32], region: &Region) -> Option<(usize, u32)> {
        let n = list.len();
        let mut best: Option<(usize, usize, usize, u32)> = None;
        let mut los = Vec::with_capacity(n);
        let mut ends = Vec::with_capacity(n);
        for f in 0..5 {
            los.clear();
            ends.clear();
            for &i in list {
                let r = &self.rules[i as usize];
                los.push(r.lo[f].max(region.0[f]));
                // One past the clipped end (u64: the end may be u32::MAX).
                ends.push(u64::from(r.hi[f].min(region.1[f])) + 1);
            }
            los.sort_unstable();
            ends.sort_unstable();
            // Candidates: every start and end inside the region.
            let mut cand: Vec<u32> = los
                .iter()
                .copied()
                .chain(ends.iter().filter_map(|&e| u32::try_from(e).ok()))
                .filter(|&s| s > region.0[f] && s <= region.1[f])
                .collect();
            cand.sort_unstable();
            cand.dedup();
            for s in cand {
                let l = los.partition_point(|&x| x < s);
                let r = n - ends.partition_point(|&e| e <= u64::from(s));
                let score = (l.max(r), l + r, f, s);
                if l.max(r) < n && best.is_none_or(|b| (score.0, score.1) < (b.0, b.1)) {
                    best = Some(score);
                }
            }
        }
        best.map(|b| (b.2, b.3))
    }
}

/// A tree's way in: its cut's roots.
struct Root {
    /// The tree's first rule (its lowest index).
    first: u32,
    /// The field whose top `bits` bits pick a root (0 bits: one root).
    field: usize,
    bits: u32,
    /// Each cell's root node, in [`Split::nodes`].
    roots: Vec<u32>,
}

impl Root {
    /// The root of `x`'s cell.
    #[inline(always)]
    fn root(&self, x: &[u32; 5]) -> usize {
        self.roots[cell(x[self.field], self.bits)] as usize
    }
}

/// Rules as separated decision trees (the IPv4 rules, or the IPv6 rules
/// with their addresses numbered by [`Remap`]).
pub(super) struct Split {
    /// Each tree's roots, in the order of their first rules.
    trees: Vec<Root>,
    /// The trees' nodes, one after the other (a walk's state is an index).
    nodes: Vec<Node>,
    /// Small leaves' rules, each leaf's in priority order.
    slots: Vec<Slot>,
    /// Larger leaves' rules, each leaf's in priority order, eight to a
    /// block.
    blocks: Vec<Block>,
    /// Each rule's residual check, by its index (where [`MORE`]).
    residual: Vec<Residual>,
}

impl Split {
    /// The trees of `members` (their address ranges as `u32`s).
    pub(super) fn build(all: &[Rule], members: &[Member<u32>], space: Space) -> Split {
        let (specific, c) = match space {
            Space::V4 => ([96 + SMALL; 2], CUT),
            Space::V6 { specific, cut } => (specific, if cut { CUT } else { 0 }),
        };
        let mut groups: [Vec<Leaf>; GROUPS] = Default::default();
        let residual: Vec<Residual> = all.iter().map(Residual::of).collect();
        for &(i, s, d) in members {
            let r = &all[i];
            let (plo, phi) = proto_range(r.proto);
            let leaf = Leaf {
                lo: [s.0, d.0, r.sport.0.into(), r.dport.0.into(), plo.into()],
                hi: [s.1, d.1, r.sport.1.into(), r.dport.1.into(), phi.into()],
                more: residual[i].needed(),
                id: i as u32,
            };
            let g = usize::from(r.src.1 >= specific[0]) | usize::from(r.dst.1 >= specific[1]) << 1;
            groups[g].push(leaf);
        }
        let cut: [(usize, u32); GROUPS] = [(0, 0), (0, c), (1, c), (0, c)];
        let mut trees: Vec<Tree> = groups
            .into_iter()
            .zip(cut)
            .filter(|(g, _)| !g.is_empty())
            .map(|(g, (f, bits))| Tree::build(g, f, bits))
            .collect();
        trees.sort_by_key(|t| t.first);
        // The trees' nodes, slots and blocks one after the other: each
        // tree's indexes moved on by those before it.
        let mut split = Split {
            trees: Vec::new(),
            nodes: Vec::new(),
            slots: Vec::new(),
            blocks: Vec::new(),
            residual,
        };
        for t in trees {
            let base = split.nodes.len() as u32;
            let (slots, blocks) = (split.slots.len() as u32, split.blocks.len() as u32);
            split.nodes.extend(t.nodes.iter().map(|&n| match n.meta {
                m if m & IS_LEAF == 0 => Node {
                    split: n.split,
                    meta: m + base,
                },
                m if m & IN_BLOCKS != 0 => Node {
                    split: n.split + blocks,
                    meta: m,
                },
                m => Node {
                    split: n.split + slots,
                    meta: m,
                },
            }));
            split.slots.extend(t.slots);
            split.blocks.extend(t.blocks);
            split.trees.push(Root {
                first: t.first,
                field: t.field,
                bits: t.bits,
                roots: t.roots.iter().map(|r| r + base).collect(),
            });
        }
        split
    }

    /// The first rule of `leaf` matching, or `best` when none before it
    /// does.
    #[inline(always)]
    fn scan(&self, leaf: Node, k: &Key, x: &[u32; 5], best: u32) -> u32 {
        let s = leaf.split as usize;
        let e = s + (leaf.meta & !(IS_LEAF | IN_BLOCKS)) as usize;
        if leaf.meta & IN_BLOCKS == 0 {
            for r in &self.slots[s..e] {
                if r.id >= best {
                    return best;
                }
                if r.covers(k, x[0], x[1]) && (!r.more || self.residual[r.id as usize].matches(k)) {
                    return r.id;
                }
            }
            return best;
        }
        for b in &self.blocks[s..e] {
            if b.ids[0] & !MORE >= best {
                return best;
            }
            let mut m = b.covers(x);
            while m != 0 {
                let id = b.ids[m.trailing_zeros() as usize];
                m &= m - 1;
                let rule = id & !MORE;
                if rule >= best {
                    return best;
                }
                if id & MORE == 0 || self.residual[rule as usize].matches(k) {
                    return rule;
                }
            }
        }
        best
    }

    #[inline]
    pub(super) fn classify(&self, k: &Key, src: u32, dst: u32) -> Option<u32> {
        let x = [
            src,
            dst,
            u32::from(k.sport),
            u32::from(k.dport),
            u32::from(k.proto),
        ];
        // The trees' walks are independent chains of loads: run them
        // side by side (each step a step of every tree not yet at its
        // leaf, a tree leaving the walk when it reaches one), then check
        // their leaves in the trees' order. The fields padded to eight,
        // so a node's field number (3 bits) needs no bounds check.
        let xf = [x[0], x[1], x[2], x[3], x[4], 0, 0, 0];
        let mut walk = [(0usize, 0usize); GROUPS];
        let mut live = self.trees.len().min(GROUPS);
        for (t, tree) in self.trees.iter().take(live).enumerate() {
            walk[t] = (tree.root(&x), t);
        }
        let mut leaf = [Node {
            split: 0,
            meta: IS_LEAF,
        }; GROUPS];
        while live > 0 {
            let mut i = 0;
            while i < live {
                let (at, t) = walk[i];
                let node = self.nodes[at];
                if node.meta & IS_LEAF != 0 {
                    leaf[t] = node;
                    live -= 1;
                    walk[i] = walk[live];
                    continue;
                }
                let f = (node.meta >> 28 & 7) as usize;
                walk[i].0 = (node.meta & 0x0fff_ffff) as usize + usize::from(xf[f] >= node.split);
                i += 1;
            }
        }
        let mut best = u32::MAX;
        for (t, tree) in self.trees.iter().enumerate() {
            if tree.first >= best {
                break;
            }
            best = self.scan(leaf[t], k, &x, best);
        }
        (best != u32::MAX).then_some(best)
    }

    pub(super) fn bytes(&self) -> usize {
        self.nodes.len() * std::mem::size_of::<Node>()
            + self.slots.len() * std::mem::size_of::<Slot>()
            + self.blocks.len() * std::mem::size_of::<Block>()
            + self.trees.iter().map(|t| t.roots.len() * 4).sum::<usize>()
            + self.residual.len() * std::mem::size_of::<Residual>()
    }

    /// Trees (one per group with rules).
    pub(super) fn trees(&self) -> usize {
        self.trees.len()
    }

    /// Nodes of all trees.
    pub(super) fn nodes(&self) -> usize {
        self.nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::Remap;
    use proptest::prelude::*;

    /// A prefix as an inclusive range: under 2001:db8::/32 (as most
    /// sets' addresses share a prefix) or anywhere.
    /// Lengths of any size, or up to 32 bits past 2001:db8::/32 (the
    /// buckets numbered by their bits).
    fn prefix() -> impl Strategy<Value = (u128, u128)> {
        let len = prop_oneof![0u32..=128, 32u32..=64];
        (any::<u128>(), len, any::<bool>()).prop_map(|(a, len, shared)| {
            let a = if shared {
                0x2001_0db8_u128 << 96 | a >> 32
            } else {
                a
            };
            let host = u128::MAX.checked_shr(len).unwrap_or(0);
            (a & !host, a | host)
        })
    }

    /// A prefix, or a range that is none (`src = "a-b"` in a rule), under
    /// 2001:db8::/32.
    fn range() -> impl Strategy<Value = (u128, u128)> {
        let net = 0x2001_0db8_u128 << 96;
        let within = (any::<u128>(), any::<u128>())
            .prop_map(move |(a, b)| (net | a.min(b) >> 32, net | a.max(b) >> 32));
        prop_oneof![prefix(), within]
    }

    proptest! {
        /// A value is in a range exactly when its number is in the
        /// range's numbers, and the numbers keep the values' order, for
        /// values at the ranges' ends, next to them, and anywhere.
        #[test]
        fn the_numbers_keep_order_and_membership(
            ranges in proptest::collection::vec(range(), 0..40),
            free in proptest::collection::vec(any::<u128>(), 8),
        ) {
            let r = Remap::new(ranges.iter().copied());
            let mut values = free;
            for &(lo, hi) in &ranges {
                values.extend([lo, hi, lo.wrapping_sub(1), hi.wrapping_add(1)]);
            }
            values.extend([0, u128::MAX, 0x2001_0db8_u128 << 96]);
            for &a in &values {
                for &(lo, hi) in &ranges {
                    let (l, h) = r.range((lo, hi));
                    prop_assert_eq!((lo..=hi).contains(&a), (l..=h).contains(&r.at(a)));
                }
                for &b in &values {
                    prop_assert!(a > b || r.at(a) <= r.at(b));
                }
            }
        }
    }

    /// A prefix or host in a few /64s of one /48 (one counted bucket of
    /// hundreds of starts).
    fn crowded() -> impl Strategy<Value = (u128, u128)> {
        (0u128..4, any::<u64>(), 0u32..6, 64u32..=128).prop_map(|(net, low, spread, len)| {
            let a = 0x2001_0db8_0000_u128 << 80 | net << 64 | u128::from(low >> (spread * 11));
            let host = u128::MAX.checked_shr(len).unwrap_or(0);
            (a & !host, a | host)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The numbers keep the values' order and step at every range's
        /// ends (so a value is in a range exactly when its number is in
        /// the range's numbers), in buckets of hundreds of starts.
        #[test]
        fn crowded_buckets_keep_order_and_membership(
            ranges in proptest::collection::vec(crowded(), 1..400),
            free in proptest::collection::vec(crowded(), 50),
        ) {
            let r = Remap::new(ranges.iter().copied());
            let mut values: Vec<u128> = free.iter().map(|f| f.0).collect();
            for &(lo, hi) in &ranges {
                values.extend([lo, hi, lo - 1, hi + 1]);
                prop_assert!(r.at(lo - 1) < r.at(lo));
                prop_assert!(r.at(hi) < r.at(hi + 1));
                prop_assert_eq!(r.range((lo, hi)), (r.at(lo), r.at(hi)));
            }
            values.sort_unstable();
            for w in values.windows(2) {
                prop_assert!(r.at(w[0]) <= r.at(w[1]), "{:x} {:x}", w[0], w[1]);
            }
        }
    }

    /// The shapes of a real IPv6 rule set: 2001:db8::/32 itself (whose
    /// end leaves a start just past the block), /48s and /64s under it,
    /// a host, and twenty hosts in one /64, 4 apart (values between
    /// them). The starts share 32 bits, the buckets of prefixes are
    /// numbered by their bits and the hosts' by counting, all exact.
    #[test]
    fn prefixes_number_by_their_bits_and_hosts_by_count() {
        let net = 0x2001_0db8_u128 << 96;
        let host = net | 0x0042_0007_u128 << 64 | 0x10;
        let mut ranges = vec![(net, net | u128::MAX >> 32), (host, host)];
        let hosts = net | 0x0099_0001_u128 << 64 | 0x100;
        ranges.extend((0..20).map(|i| (hosts + 4 * i, hosts + 4 * i)));
        for i in 0..200u128 {
            let (p48, p64) = (net | (i * 331 % 0xffff) << 80, net | (i * 7919) << 64);
            ranges.push((p48, p48 | u128::MAX >> 48));
            ranges.push((p64, p64 | u128::MAX >> 64));
        }
        let r = Remap::new(ranges.iter().copied());
        assert_eq!(r.common, 32);
        assert!(r.bucketed());
        let counted = (1u32 << 16) - r.directs();
        assert_eq!(counted, 4, "the first, the last and the hosts' buckets");
        let mut values = vec![0, u128::MAX, net - 1, (net | u128::MAX >> 32) + 1];
        for &(lo, hi) in &ranges {
            values.extend([lo, hi, lo - 1, hi + 1, lo | 0x1234, hi - 0x77]);
        }
        for &a in &values {
            for &(lo, hi) in &ranges {
                let (l, h) = r.range((lo, hi));
                assert_eq!(
                    (lo..=hi).contains(&a),
                    (l..=h).contains(&r.at(a)),
                    "{a:x} in {lo:x}..={hi:x}"
                );
            }
        }
    }

    /// A bucket of 65,535 starts or more: numbered by rank instead, and
    /// still exact.
    #[test]
    fn a_crowded_bucket_is_numbered_by_rank() {
        let net = 0x2001_0db8_u128 << 96;
        let mut ranges: Vec<(u128, u128)> = (0..40_000u128)
            .map(|i| (net + 2 * i, net + 2 * i))
            .collect();
        ranges.push((1, 1));
        let r = Remap::new(ranges.iter().copied());
        assert!(!r.bucketed());
        for i in (0..40_000u128).step_by(997).chain([39_999]) {
            for a in [net + 2 * i, net + 2 * i + 1, net + 2 * i - 1] {
                for &(lo, hi) in ranges
                    .iter()
                    .skip(i.saturating_sub(1) as usize)
                    .take(3)
                    .chain(&ranges[40_000..])
                {
                    let (l, h) = r.range((lo, hi));
                    assert_eq!(
                        (lo..=hi).contains(&a),
                        (l..=h).contains(&r.at(a)),
                        "{a:x} in {lo:x}..={hi:x}"
                    );
                }
            }
        }
        assert_eq!(r.at(0), 0);
        assert_eq!(r.at(1), r.range((1, 1)).0);
        assert!(r.at(u128::MAX) >= r.at(net + 80_000));
    }
}
