//! The classifier: bit vectors over elementary intervals per field
//! (Lakshman and Stiliadis, SIGCOMM 1998) with aggregated bit vectors
//! (Baboescu and Varghese, SIGCOMM 2001).
//!
//! For each of the five range-like fields (source and destination address,
//! source and destination port, protocol) the rules' ranges cut the field's
//! space into elementary intervals; each interval has the bit vector of the
//! rules whose range covers it (bit `i` = rule `i`, so bit order is
//! priority order). Identical vectors are stored once. A lookup finds the
//! key's interval in each field (a binary search, narrowed for addresses by
//! an index on their top 12 bits), ANDs the five vectors, and checks the
//! set bits in order against what the vectors do not encode (TCP flags,
//! metadata, protocol masks other than 0/0xff: 16 bytes per rule), so the
//! first bit that passes is the exact first match. The intervals are
//! exact, so nothing else needs checking.
//!
//! Each vector has an aggregate: one bit per 64-bit word, set when the word
//! is non-zero. The lookup ANDs the aggregates first and visits only the
//! words all five fields have bits in, so a 10,000-rule set costs a few
//! words, not 157 per field. (Finer aggregates, one bit per 8–32 rules,
//! were measured: fewer words visited on fw1, but slower on every set.)
//! A vector's aggregate words and its words are stored together, so a
//! field's are one slice and one bounds check.
//!
//! The IPv4 rules are first cut into cells on the top bits of both
//! addresses ([`Cut`]), each cell with its own family of the rules that
//! meet it: a lookup picks its cell by its addresses and ANDs vectors of
//! those rules only. The build chooses the cut (up to 4,096 cells) whose
//! cells hold the fewest rules on average within the memory of no cut.
//! Above [`LARGE_SET`] IPv4 rules, or where the chosen cut takes more than
//! [`VECTORS_CACHED`] (vectors grow with the square of the rules a cell
//! holds), the IPv4 rules are decision trees instead (the `split` module),
//! which hold each rule once per leaf it reaches; the elementary
//! intervals are kept beside the trees for a worker's [`Memo`].
//!
//! IPv4 and IPv6 rules share the `u128` rule format; they are compiled into
//! two families: keys whose addresses are both IPv4-mapped search a family
//! over `u32` addresses holding every rule whose ranges meet the IPv4
//! space; other keys search a family over `u128` addresses holding every
//! rule that could match a key outside it, or, where its vectors would
//! take more than [`VECTORS_CACHED`] (or past [`V6_VECTORS_MAX`] such
//! rules), decision trees over its addresses' elementary intervals
//! numbered as `u32`s.

use super::split::{Remap, Space, Split};
use super::{proto_range, Key, Member, Residual, Rule};
use rustc_hash::FxHashMap;

const V4_LO: u128 = 0xffff << 32;
const V4_HI: u128 = V4_LO | 0xffff_ffff;

/// A coordinate type of one field.
trait Coord: Copy + Ord + Default + std::fmt::Debug {
    const MAX: Self;
    /// Most bits of the top-bits index (0: no index).
    const INDEX_BITS: u32;
    /// The top `bits` bits (`bits` at most `INDEX_BITS`; 0 gives 0).
    fn top(self, bits: u32) -> usize;
    fn next(self) -> Self;
    /// The first value whose top `bits` bits are `b`.
    fn bucket_start(b: usize, bits: u32) -> Self;
}

impl Coord for u32 {
    const MAX: Self = u32::MAX;
    const INDEX_BITS: u32 = 12;
    #[inline(always)]
    fn top(self, bits: u32) -> usize {
        (u64::from(self) >> (32 - bits)) as usize
    }
    fn next(self) -> Self {
        self + 1
    }
    fn bucket_start(b: usize, bits: u32) -> Self {
        ((b as u64) << (32 - bits)) as u32
    }
}

impl Coord for u16 {
    const MAX: Self = u16::MAX;
    const INDEX_BITS: u32 = 8;
    #[inline(always)]
    fn top(self, bits: u32) -> usize {
        (u32::from(self) >> (16 - bits)) as usize
    }
    fn next(self) -> Self {
        self + 1
    }
    fn bucket_start(b: usize, bits: u32) -> Self {
        ((b as u32) << (16 - bits)) as u16
    }
}

impl Coord for u128 {
    const MAX: Self = u128::MAX;
    const INDEX_BITS: u32 = 0;
    #[inline(always)]
    fn top(self, _: u32) -> usize {
        0
    }
    fn next(self) -> Self {
        self + 1
    }
    fn bucket_start(_: usize, _: u32) -> Self {
        0
    }
}

/// Interned bit vectors with their aggregates.
struct Store {
    /// Words per vector.
    w: usize,
    /// Aggregate words per vector.
    a: usize,
    /// Each vector's aggregate words then its words (`a + w` words).
    data: Vec<u64>,
    index: FxHashMap<Vec<u64>, u32>,
}

impl Store {
    fn new(rules: usize) -> Store {
        let w = rules.div_ceil(64).max(1);
        Store {
            w,
            a: w.div_ceil(64),
            data: Vec::new(),
            index: FxHashMap::default(),
        }
    }

    fn intern(&mut self, v: &[u64]) -> u32 {
        if let Some(&id) = self.index.get(v) {
            return id;
        }
        let id = (self.data.len() / (self.a + self.w)) as u32;
        let mut agg = vec![0u64; self.a];
        for (i, &x) in v.iter().enumerate() {
            if x != 0 {
                agg[i / 64] |= 1 << (i % 64);
            }
        }
        self.data.extend_from_slice(&agg);
        self.data.extend_from_slice(v);
        self.index.insert(v.to_vec(), id);
        id
    }
}

/// One field: the elementary intervals' starts and their vectors.
struct Dim<T> {
    starts: Vec<T>,
    vecs: Vec<u32>,
    /// `index[b]`: the number of starts below bucket `b`'s first value,
    /// bucket `b` being the values whose top `bits` bits are `b`.
    index: Vec<u32>,
    /// Bits of the index: about one start per bucket, at most
    /// `T::INDEX_BITS` (a family of a few rules needs no 16 KiB index).
    bits: u32,
}

impl<T: Coord> Dim<T> {
    /// `ranges[i]`: rule `i`'s inclusive range, `None` when the rule is
    /// not in this family.
    fn build(ranges: &[(T, T)], store: &mut Store) -> Dim<T> {
        let starts = Self::starts(ranges);
        let mut opens: Vec<(T, usize)> = ranges.iter().enumerate().map(|(i, r)| (r.0, i)).collect();
        let mut closes: Vec<(T, usize)> = ranges
            .iter()
            .enumerate()
            .filter(|(_, r)| r.1 < T::MAX)
            .map(|(i, r)| (r.1.next(), i))
            .collect();
        opens.sort_unstable();
        closes.sort_unstable();
        let (mut o, mut c) = (0, 0);
        let mut cur = vec![0u64; store.w];
        let mut vecs = Vec::with_capacity(starts.len());
        for &s in &starts {
            while c < closes.len() && closes[c].0 == s {
                let i = closes[c].1;
                cur[i / 64] &= !(1 << (i % 64));
                c += 1;
            }
            while o < opens.len() && opens[o].0 == s {
                let i = opens[o].1;
                cur[i / 64] |= 1 << (i % 64);
                o += 1;
            }
            vecs.push(store.intern(&cur));
        }
        Self::with(starts, vecs)
    }

    /// The elementary intervals' starts of `ranges`, increasing.
    fn starts(ranges: &[(T, T)]) -> Vec<T> {
        let mut starts: Vec<T> = Vec::with_capacity(2 * ranges.len() + 1);
        starts.push(T::default());
        for &(lo, hi) in ranges {
            starts.push(lo);
            if hi < T::MAX {
                starts.push(hi.next());
            }
        }
        starts.sort_unstable();
        starts.dedup();
        starts
    }

    /// The dimension of intervals starting at `starts`, the `i`th with
    /// `vecs[i]`.
    fn with(starts: Vec<T>, vecs: Vec<u32>) -> Dim<T> {
        let bits = (usize::BITS - (starts.len() - 1).leading_zeros()).min(T::INDEX_BITS);
        let buckets = 1usize << bits;
        let index = (0..=buckets)
            .map(|b| {
                if b == buckets {
                    starts.len() as u32
                } else {
                    starts.partition_point(|&x| x < T::bucket_start(b, bits)) as u32
                }
            })
            .collect();
        Dim {
            starts,
            vecs,
            index,
            bits,
        }
    }

    /// The vector of `x`'s interval.
    #[inline(always)]
    fn find(&self, x: T) -> u32 {
        let b = x.top(self.bits);
        let (lo, hi) = (self.index[b] as usize, self.index[b + 1] as usize);
        let i = lo + self.starts[lo..hi].partition_point(|&s| s <= x);
        // starts[0] is the minimum, so i >= 1.
        self.vecs[i - 1]
    }

    fn bytes(&self) -> usize {
        self.starts.len() * std::mem::size_of::<T>() + self.vecs.len() * 4 + self.index.len() * 4
    }
}

/// The rules of one address family.
struct Family<A> {
    /// Local bit → global rule index (increasing).
    global: Vec<u32>,
    rules: Vec<Residual>,
    src: Dim<A>,
    dst: Dim<A>,
    sport: Dim<u16>,
    dport: Dim<u16>,
    proto: [u32; 256],
    store: Store,
}

fn range128((a, len): (u128, u8)) -> (u128, u128) {
    if len == 0 {
        (0, u128::MAX)
    } else {
        let m = !0u128 << (128 - u32::from(len.min(128)));
        (a & m, a | !m)
    }
}

impl<A: Coord> Family<A> {
    /// The family of `members`: (index in `all`, increasing; source and
    /// destination range).
    fn build(all: &[Rule], members: impl IntoIterator<Item = Member<A>>) -> Family<A> {
        let mut global = Vec::new();
        let mut rules: Vec<Rule> = Vec::new();
        let mut srcs = Vec::new();
        let mut dsts = Vec::new();
        for (i, s, d) in members {
            global.push(i as u32);
            rules.push(all[i]);
            srcs.push(s);
            dsts.push(d);
        }
        let mut store = Store::new(rules.len());
        let src = Dim::build(&srcs, &mut store);
        let dst = Dim::build(&dsts, &mut store);
        let sports: Vec<_> = rules.iter().map(|r| r.sport).collect();
        let dports: Vec<_> = rules.iter().map(|r| r.dport).collect();
        let sport = Dim::build(&sports, &mut store);
        let dport = Dim::build(&dports, &mut store);
        let protos: Vec<(u16, u16)> = rules
            .iter()
            .map(|r| {
                let (a, b) = proto_range(r.proto);
                (u16::from(a), u16::from(b))
            })
            .collect();
        let pd = Dim::build(&protos, &mut store);
        let proto = std::array::from_fn(|p| pd.find(p as u16));
        Family {
            global,
            rules: rules.iter().map(Residual::of).collect(),
            src,
            dst,
            sport,
            dport,
            proto,
            store,
        }
    }

    /// The vectors of the key's elementary intervals: source, destination,
    /// destination port, protocol, source port.
    #[inline(always)]
    fn ids(&self, k: &Key, src: A, dst: A) -> [u32; 5] {
        [
            self.src.find(src),
            self.dst.find(dst),
            self.dport.find(k.dport),
            self.proto[usize::from(k.proto)],
            self.sport.find(k.sport),
        ]
    }

    #[inline(always)]
    fn classify(&self, k: &Key, src: A, dst: A) -> Option<u32> {
        self.first_of(self.ids(k, src, dst), k)
    }

    /// The first rule in all five vectors `ids` whose residual `k` passes.
    #[inline(always)]
    fn first_of(&self, ids: [u32; 5], k: &Key) -> Option<u32> {
        let s = &self.store;
        let a = s.a;
        let stride = a + s.w;
        // Each field's aggregate and vector as slices of one length: one
        // bounds check per word index below, not one per field.
        let row = |v: u32| &s.data[v as usize * stride..][..stride];
        let (r0, r1, r2, r3, r4) = (
            row(ids[0]),
            row(ids[1]),
            row(ids[2]),
            row(ids[3]),
            row(ids[4]),
        );
        for ai in 0..a {
            let mut agg = r0[ai] & r1[ai] & r2[ai] & r3[ai] & r4[ai];
            while agg != 0 {
                let wi = ai * 64 + agg.trailing_zeros() as usize;
                agg &= agg - 1;
                // Addresses first: they are the selective fields, and when
                // they share no rule the port and protocol words are not
                // read.
                let mut bits = r0[a + wi] & r1[a + wi];
                if bits == 0 {
                    continue;
                }
                bits &= r2[a + wi] & r3[a + wi] & r4[a + wi];
                while bits != 0 {
                    let r = wi * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if self.rules[r].matches(k) {
                        return Some(self.global[r]);
                    }
                }
            }
        }
        None
    }

    /// [`Family::classify`] through `memo`; `tag` names this family
    /// there (not 0).
    #[inline(always)]
    fn classify_memo(&self, k: &Key, src: A, dst: A, tag: u32, memo: &mut Memo) -> Option<u32> {
        let ids = self.ids(k, src, dst);
        memo.answer(tag, [ids[0], ids[1], ids[2], ids[4]], k, || {
            self.first_of(ids, k)
        })
    }

    fn bytes(&self) -> usize {
        self.src.bytes()
            + self.dst.bytes()
            + self.sport.bytes()
            + self.dport.bytes()
            + 256 * 4
            + self.store.data.len() * 8
            + self.rules.len() * (std::mem::size_of::<Residual>() + 4)
    }

    fn vectors(&self) -> usize {
        self.store.data.len() / (self.store.a + self.store.w)
    }
}

/// The IPv4 family cut into cells on the top bits of both addresses (a
/// one-level cutting tree, as in HiCuts, over bit-vector leaves): cell
/// `(s, d)` has the family of the rules whose source range meets the
/// source addresses with top `sbits` bits `s` and whose destination range
/// meets those with top `dbits` bits `d`. A lookup then ANDs the vectors
/// of the rules that can match its cell, not of the whole set: fewer
/// words per vector, and fewer words whose bits share no rule.
///
/// In a cell the top bits of each address are the same for every key, so
/// its ranges are clipped to the cell and shifted left past them
/// (`[lo << bits, hi << bits | ones]`): the family's index then sorts the
/// cell's keys by the bits below the cut. Cells with the same clipped
/// rules share one family.
struct Cut {
    /// Bits of the source address in the cell number.
    sbits: u32,
    /// Bits of the destination address in the cell number.
    dbits: u32,
    /// Cell `s << dbits | d` → its family in `fams`.
    cells: Vec<u32>,
    fams: Vec<Family<u32>>,
}

/// Cells are at most `2^MAX_CUT_BITS` (a 16 KiB cell table; sets are
/// cut as finely as they need within 12 bits, and finer cuts there only
/// add families' fixed tables).
const MAX_CUT_BITS: u32 = 12;

/// Sets of more IPv4 rules than this are decision trees ([`Split`]), not
/// bit vectors, which grow with the square of the rules a cell holds: on
/// the 100k-rule sets grown from acl1, fw1 and ipc1 the best cuts took
/// 19.5, 782 and 142 MiB and the trees 7–11 MiB, with more lookups on
/// each (`bench/run-acl.sh`, whose table has both side by side). At 10k
/// the memory decides ([`VECTORS_CACHED`]).
const LARGE_SET: usize = 50_000;

/// Bit vectors taking more than this are decision trees instead: their
/// lookups miss a core's cache where the trees' do not. On the 10k-rule
/// ClassBench sets (`bench/run-acl.sh`) acl1's and ipc1's vectors take
/// 1.2 and 1.9 MiB and are faster than their trees (35.7 against 21.5,
/// 16.0 against 12.3 M lookups/s); fw1's take 9.9 MiB against its trees'
/// 1.4 and are slower (8.6 against 11.5).
const VECTORS_CACHED: usize = 4 << 20;

/// A cut may always take this much memory (the uncut family of a small
/// set is a few KiB; its cells' families fit in a core's L2 all the same).
const CUT_SMALL: usize = 256 << 10;

/// Uncut families whose upper bound is past this are not built to be
/// measured, and no cut (nor no cut) taking more is chosen: the IPv4
/// rules are decision trees instead.
const CUT_LARGE: usize = 64 << 20;

/// An upper bound on the bytes of the uncut family of `members`: a
/// vector per elementary interval of each field (fewer where intervals
/// share one), each of `n / 64` words and their aggregates.
fn uncut_upper(all: &[Rule], members: &[Member<u32>]) -> usize {
    fn intervals<T: Ord + Copy>(mut edges: Vec<T>) -> usize {
        edges.sort_unstable();
        edges.dedup();
        edges.len() + 1
    }
    let ends = |f: &dyn Fn(&Member<u32>) -> (u32, u32)| {
        intervals(
            members
                .iter()
                .flat_map(|m| {
                    let (lo, hi) = f(m);
                    [u64::from(lo), u64::from(hi) + 1]
                })
                .collect(),
        )
    };
    let ports = |f: &dyn Fn(&Rule) -> (u16, u16)| {
        intervals(
            members
                .iter()
                .flat_map(|m| {
                    let (lo, hi) = f(&all[m.0]);
                    [u32::from(lo), u32::from(hi) + 1]
                })
                .collect(),
        )
    };
    let vectors = ends(&|m| m.1) + ends(&|m| m.2) + ports(&|r| r.sport) + ports(&|r| r.dport) + 256;
    let w = members.len().div_ceil(64);
    vectors * (w + w.div_ceil(64)) * 8
}

/// A family's tables that do not grow with its rules, in bytes (about:
/// the protocol table, the port indexes, a few vectors).
const FAMILY_FIXED: f64 = 2048.0;

/// The top `bits` bits of `a`.
#[inline(always)]
fn top(a: u32, bits: u32) -> usize {
    (u64::from(a) >> (32 - bits)) as usize
}

/// The first and last address of cell `c` of a cut on `bits` bits.
fn cell_bounds(c: usize, bits: u32) -> (u64, u64) {
    (
        (c as u64) << (32 - bits),
        (((c as u64) + 1) << (32 - bits)) - 1,
    )
}

/// Marks the cells that differ from the cell before them because a range
/// from cell `first` to cell `last` begins or ends there (in part or
/// whole): `events` has two cells past the last.
fn mark_ends(events: &mut [bool], first: usize, last: usize) {
    for c in [first, first + 1, last, last + 1] {
        events[c] = true;
    }
}

/// The cells of `members` split on `field`'s (0 source, 1 destination)
/// top `bits` bits: for each cell, its members with that range clipped to
/// the cell and shifted left by `bits`, or `None` where they are those of
/// the cell before (the same members, all covering both cells whole).
fn sweep(members: &[Member<u32>], field: usize, bits: u32) -> Vec<Option<Vec<Member<u32>>>> {
    let cells = 1usize << bits;
    let mut opens = Vec::with_capacity(members.len());
    let mut closes = Vec::with_capacity(members.len());
    let mut events = vec![false; cells + 2];
    for (j, m) in members.iter().enumerate() {
        let (lo, hi) = if field == 0 { m.1 } else { m.2 };
        let (lc, hc) = (top(lo, bits), top(hi, bits));
        opens.push((lc, j));
        closes.push((hc + 1, j));
        mark_ends(&mut events, lc, hc);
    }
    opens.sort_unstable();
    closes.sort_unstable();
    let (mut o, mut x) = (0, 0);
    let ones = (1u64 << bits) - 1;
    let mut live = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(cells);
    for (c, &event) in events[..cells].iter().enumerate() {
        while x < closes.len() && closes[x].0 == c {
            live.remove(&closes[x].1);
            x += 1;
        }
        while o < opens.len() && opens[o].0 == c {
            live.insert(opens[o].1);
            o += 1;
        }
        if c > 0 && !event {
            out.push(None);
            continue;
        }
        let (clo, chi) = cell_bounds(c, bits);
        out.push(Some(
            live.iter()
                .map(|&j| {
                    let (i, mut s, mut d) = members[j];
                    let r = if field == 0 { &mut s } else { &mut d };
                    let (lo, hi) = (u64::from(r.0).max(clo), u64::from(r.1).min(chi));
                    *r = ((lo << bits) as u32, ((hi << bits) | ones) as u32);
                    (i, s, d)
                })
                .collect(),
        ));
    }
    out
}

/// The cell map of a cut and its distinct cells' members.
fn cells_of(members: &[Member<u32>], sbits: u32, dbits: u32) -> (Vec<u32>, Vec<Vec<Member<u32>>>) {
    let mut map = vec![0u32; 1 << (sbits + dbits)];
    let mut index: FxHashMap<Vec<Member<u32>>, u32> = FxHashMap::default();
    let row = 1usize << dbits;
    for (s, by_src) in sweep(members, 0, sbits).into_iter().enumerate() {
        let Some(by_src) = by_src else {
            map.copy_within((s - 1) * row..s * row, s * row);
            continue;
        };
        for (d, cell) in sweep(&by_src, 1, dbits).into_iter().enumerate() {
            map[s * row + d] = match cell {
                None => map[s * row + d - 1],
                Some(cell) => {
                    let next = index.len() as u32;
                    *index.entry(cell).or_insert(next)
                }
            };
        }
    }
    let mut distinct: Vec<(u32, Vec<Member<u32>>)> =
        index.into_iter().map(|(c, id)| (id, c)).collect();
    distinct.sort_unstable_by_key(|d| d.0);
    (map, distinct.into_iter().map(|d| d.1).collect())
}

/// The estimated memory of a cut's families (`uncut`: bytes of the
/// family of all `members`): each distinct cell's family grows about as
/// its rules squared, plus its fixed tables. Cells are told apart by a
/// hash of their clipped members, so nothing is built or copied: a cut of
/// 4,096 cells over 10,000 rules is estimated in milliseconds.
fn estimate(members: &[Member<u32>], sbits: u32, dbits: u32, uncut: f64) -> f64 {
    let n = members.len() as f64;
    // A member as clipped to a cell: `None` where it covers the cell.
    let clip = |r: (u32, u32), c: usize, bits: u32| {
        let (clo, chi) = cell_bounds(c, bits);
        let (lo, hi) = (u64::from(r.0).max(clo), u64::from(r.1).min(chi));
        (lo != clo || hi != chi).then_some((lo, hi))
    };
    let hash = |j: usize, s: Option<(u64, u64)>, d: Option<(u64, u64)>| {
        use std::hash::{Hash, Hasher};
        let mut h = rustc_hash::FxHasher::default();
        (j, s, d).hash(&mut h);
        h.finish()
    };
    let mut seen: FxHashMap<u64, usize> = FxHashMap::default();
    let rows = 1usize << sbits;
    let cols = 1usize << dbits;
    // Members by the first and last source row and destination column
    // they meet.
    let span = |r: (u32, u32), bits: u32| (top(r.0, bits), top(r.1, bits));
    // Rows no member begins or ends in (nor in the row before) have the
    // cells of the row before.
    let mut events = vec![false; rows + 2];
    let mut copies = 0;
    for m in members {
        let (a, b) = span(m.1, sbits);
        mark_ends(&mut events, a, b);
        copies += b - a + 1;
    }
    // Too many rules spanning rows to estimate quickly: such a cut
    // replicates them past any budget.
    if copies > 16 * members.len() {
        return f64::INFINITY;
    }
    let mut by_row: Vec<Vec<usize>> = vec![Vec::new(); rows];
    for (j, m) in members.iter().enumerate() {
        let (a, b) = span(m.1, sbits);
        for (r, row) in by_row[a..=b].iter_mut().enumerate() {
            if events[a + r] {
                row.push(j);
            }
        }
    }
    for (r, row) in by_row.iter().enumerate() {
        if !events[r] {
            continue;
        }
        // Each member's first and last column, and its hash where it
        // covers a cell whole (its source range as clipped to this row).
        let mut opens: Vec<(usize, usize, u64)> = Vec::with_capacity(row.len());
        let mut closes: Vec<(usize, usize, u64)> = Vec::with_capacity(row.len());
        for &j in row {
            let (a, b) = span(members[j].2, dbits);
            let full = hash(j, clip(members[j].1, r, sbits), None);
            opens.push((a, j, full));
            closes.push((b, j, full));
        }
        opens.sort_unstable();
        closes.sort_unstable();
        let (mut o, mut x, mut live, mut sum) = (0, 0, 0usize, 0u64);
        for c in 0..cols {
            let first = o;
            while o < opens.len() && opens[o].0 == c {
                live += 1;
                sum = sum.wrapping_add(opens[o].2);
                o += 1;
            }
            let mut y = x;
            while y < closes.len() && closes[y].0 == c {
                y += 1;
            }
            // Members opening or closing in this column (once each: one
            // that does both is among the openings) may cover it in part:
            // their hash here is of their clipped range.
            let mut cell = sum;
            let ending = closes[x..y]
                .iter()
                .filter(|&&(_, j, _)| span(members[j].2, dbits).0 != c);
            for &(_, j, full) in opens[first..o].iter().chain(ending) {
                if let Some(d) = clip(members[j].2, c, dbits) {
                    cell = cell.wrapping_sub(full).wrapping_add(hash(
                        j,
                        clip(members[j].1, r, sbits),
                        Some(d),
                    ));
                }
            }
            seen.insert(cell, live);
            for &(_, _, full) in &closes[x..y] {
                live -= 1;
                sum = sum.wrapping_sub(full);
            }
            x = y;
        }
    }
    seen.values()
        .map(|&c| (c as f64 / n).powi(2) * uncut + FAMILY_FIXED)
        .sum()
}

impl Cut {
    /// The cut whose cells hold the fewest rules on average (over the
    /// cells, each rule counted in every cell it meets) among those that
    /// take no more memory than no cut: the cells' families replicate the
    /// rules that span cells, and more memory costs more cache misses than
    /// the shorter vectors save (measured on fw1_10k, a quarter of whose
    /// rules are wildcards on the destination). No cut unless one lowers
    /// the average by 10 %. Cuts on up to `max` bits; `None` when every
    /// cut (and no cut) would take more than `cap`.
    fn build(all: &[Rule], members: &[Member<u32>], max: u32, cap: usize) -> Option<Cut> {
        if members.len() < 64 {
            return Some(Self::with(all, members, 0, 0));
        }
        let n = members.len() as f64;
        // The uncut family is built to measure it unless even its upper
        // bound is large (100,000 host rules: 1.2 GiB and 23 s to build;
        // cut, 13 MiB and 0.2 s): then the bound stands for it.
        let upper = uncut_upper(all, members);
        let uncut = (upper <= CUT_LARGE).then(|| Self::with(all, members, 0, 0));
        let scale = uncut.as_ref().map_or(upper, Cut::bytes);
        let budget = scale.max(CUT_SMALL).min(cap);
        let mut cands: Vec<(f64, u32, u32)> = (0..=max)
            .step_by(2)
            .flat_map(|s| (0..=max - s).step_by(2).map(move |d| (s, d)))
            .map(|(sbits, dbits)| {
                // The rules per cell, averaged over the cells.
                let span = |(lo, hi): (u32, u32), bits: u32| {
                    (top(hi, bits) - top(lo, bits) + 1) as f64 / (1u64 << bits) as f64
                };
                let mean = members
                    .iter()
                    .map(|m| span(m.1, sbits) * span(m.2, dbits))
                    .sum::<f64>();
                (mean, sbits, dbits)
            })
            .collect();
        cands.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (mean, sbits, dbits) in cands {
            if mean > 0.9 * n {
                break;
            }
            if estimate(members, sbits, dbits, scale as f64) > budget as f64 {
                continue;
            }
            // The estimate can be short: check what was built.
            let cut = Self::with(all, members, sbits, dbits);
            if cut.bytes() <= budget {
                return Some(cut);
            }
        }
        uncut.filter(|u| u.bytes() <= cap)
    }

    /// The cut on `sbits` source and `dbits` destination bits.
    fn with(all: &[Rule], members: &[Member<u32>], sbits: u32, dbits: u32) -> Cut {
        let (cells, distinct) = cells_of(members, sbits, dbits);
        Cut {
            sbits,
            dbits,
            cells,
            fams: distinct
                .into_iter()
                .map(|c| Family::build(all, c))
                .collect(),
        }
    }

    #[inline(always)]
    fn classify(&self, k: &Key, src: u32, dst: u32) -> Option<u32> {
        let c = top(src, self.sbits) << self.dbits | top(dst, self.dbits);
        let fam = &self.fams[self.cells[c] as usize];
        let shifted = |a: u32, bits: u32| (u64::from(a) << bits) as u32;
        fam.classify(k, shifted(src, self.sbits), shifted(dst, self.dbits))
    }

    #[inline(always)]
    fn classify_memo(&self, k: &Key, src: u32, dst: u32, memo: &mut Memo) -> Option<u32> {
        let c = top(src, self.sbits) << self.dbits | top(dst, self.dbits);
        let f = self.cells[c];
        let fam = &self.fams[f as usize];
        let shifted = |a: u32, bits: u32| (u64::from(a) << bits) as u32;
        fam.classify_memo(
            k,
            shifted(src, self.sbits),
            shifted(dst, self.dbits),
            f + 1,
            memo,
        )
    }

    fn bytes(&self) -> usize {
        self.cells.len() * 4 + self.fams.iter().map(Family::bytes).sum::<usize>()
    }

    fn vectors(&self) -> usize {
        self.fams.iter().map(Family::vectors).sum()
    }
}

/// How the IPv4 rules are searched.
enum V4 {
    Cut(Cut),
    Trees(Trees),
}

/// Bytes the vectors of the trees' intervals may take while they are
/// built and interned: 45 MiB a field for fw1_10k, for milliseconds. Sets
/// past it (about 11,000 IPv4 rules) have no memo: the ClassBench traces
/// of the 100k-rule sets hit none of their intervals, and searching them
/// cost 0.6× the lookups there (`bench/run-acl.sh`).
const CLASSES_BUILD: usize = 64 << 20;

/// The IPv4 rules as decision trees, with the elementary intervals of
/// their four range fields over all of them where they are few enough to
/// name by their rules.
struct Trees {
    split: Split,
    classes: Option<Box<Classes>>,
}

/// Each field's elementary intervals named by the rules that cover them
/// (the vectors of the `Family` of all IPv4 rules, interned, then
/// dropped): a key's intervals and its protocol, flags and metadata
/// decide its first rule as they do in the vectors, so the memo works the
/// same, the trees replacing the vectors' AND on a miss.
struct Classes {
    src: Dim<u32>,
    dst: Dim<u32>,
    sport: Dim<u16>,
    dport: Dim<u16>,
}

impl Trees {
    /// The trees of `members`, with their intervals where interning them
    /// takes at most `budget` bytes.
    fn build(all: &[Rule], members: &[Member<u32>], budget: usize) -> Trees {
        let n = members.len();
        // A field's store: each interval's vector and the map's copy of
        // each distinct one.
        let store = Store::new(n);
        let need = (2 * n + 1) * (store.w + store.a) * 16;
        let classes = (need <= budget).then(|| {
            let field = |f: &dyn Fn(&Member<u32>) -> (u32, u32)| {
                let r: Vec<_> = members.iter().map(f).collect();
                Dim::build(&r, &mut Store::new(n))
            };
            let port = |f: &dyn Fn(&Rule) -> (u16, u16)| {
                let r: Vec<_> = members.iter().map(|m| f(&all[m.0])).collect();
                Dim::build(&r, &mut Store::new(n))
            };
            Box::new(Classes {
                src: field(&|m| m.1),
                dst: field(&|m| m.2),
                sport: port(&|r| r.sport),
                dport: port(&|r| r.dport),
            })
        });
        Trees {
            split: Split::build(all, members, Space::V4),
            classes,
        }
    }

    #[inline(always)]
    fn classify_memo(&self, k: &Key, src: u32, dst: u32, memo: &mut Memo) -> Option<u32> {
        let Some(c) = &self.classes else {
            memo.misses += 1;
            return self.split.classify(k, src, dst);
        };
        let ids = [
            c.src.find(src),
            c.dst.find(dst),
            c.dport.find(k.dport),
            c.sport.find(k.sport),
        ];
        // Tag 1: the cut's families are 1 and up, but a memo serves one
        // classifier, which has trees or a cut.
        memo.answer(1, ids, k, || self.split.classify(k, src, dst))
    }

    fn bytes(&self) -> usize {
        self.split.bytes()
            + self.classes.as_ref().map_or(0, |c| {
                c.src.bytes() + c.dst.bytes() + c.sport.bytes() + c.dport.bytes()
            })
    }
}

/// How a classifier searches its IPv4 rules (for reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Bit vectors in cells cut on the top bits of both addresses.
    Cut {
        /// Source address bits of a cell (0: not cut on it).
        sbits: u32,
        /// Destination address bits of a cell.
        dbits: u32,
        /// Distinct cells.
        cells: usize,
    },
    /// Decision trees.
    Trees {
        /// Trees (one per group with rules).
        trees: usize,
        /// Nodes in all trees.
        nodes: usize,
    },
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Layout::Cut {
                sbits: 0, dbits: 0, ..
            } => write!(f, "bit vectors, not cut"),
            Layout::Cut {
                sbits,
                dbits,
                cells,
            } => write!(
                f,
                "bit vectors in {cells} cells on {sbits} source and {dbits} destination bits"
            ),
            Layout::Trees { trees, nodes } => {
                write!(f, "{trees} decision trees, {nodes} nodes")
            }
        }
    }
}

/// A built classifier; the fast path only reads it.
pub struct Classifier {
    v4: V4,
    v6: V6,
    len: usize,
}

/// How the rules that can match a key outside the IPv4-mapped space (the
/// IPv6 rules) are searched: bit vectors over `u128` intervals, uncut, as
/// long as they take at most [`VECTORS_CACHED`]; decision trees over the
/// addresses numbered as `u32`s ([`Remap`]: buckets on the 16 bits after
/// the rules' shared prefix, the intervals within) past that, or past
/// [`V6_VECTORS_MAX`] rules, whose vectors would take hundreds of MiB:
/// the 100k sets grown from acl1, fw1 and ipc1, moved into
/// 2001:db8::/32, took 554, 1,336 and 753 MiB as vectors (builds of 1.1,
/// 5.4 and 2.2 s) and 10–11 MiB as trees (40–180 ms), 7.9–10.6 M
/// lookups/s, 0.87–0.92× the IPv4 sets' trees in the same run; with each
/// host a /128 (its buckets searched), 3.6–7.2 M/s (`bench/run-acl.sh
/// --ipv6`, 2026-12-07).
enum V6 {
    Vectors(Box<Family<u128>>),
    Trees(Box<Trees6>),
}

/// Rules above which the IPv6 rules are trees without trying vectors.
const V6_VECTORS_MAX: usize = 20_000;

struct Trees6 {
    split: Split,
    src: Remap,
    dst: Remap,
}

impl V6 {
    fn build(rules: &[Rule], members: Vec<Member<u128>>) -> V6 {
        if members.len() <= V6_VECTORS_MAX {
            let fam = Family::build(rules, members.iter().copied());
            if fam.bytes() <= VECTORS_CACHED {
                return V6::Vectors(Box::new(fam));
            }
        }
        let src = Remap::new(members.iter().map(|m| m.1));
        let dst = Remap::new(members.iter().map(|m| m.2));
        let m32: Vec<Member<u32>> = members
            .iter()
            .map(|&(i, s, d)| (i, src.range(s), dst.range(d)))
            .collect();
        V6::Trees(Box::new(Trees6 {
            split: Split::build(rules, &m32, Space::v6(&src, &dst)),
            src,
            dst,
        }))
    }

    #[inline(always)]
    fn classify(&self, k: &Key) -> Option<u32> {
        match self {
            V6::Vectors(fam) => fam.classify(k, k.src, k.dst),
            V6::Trees(t) => t.split.classify(k, t.src.at(k.src), t.dst.at(k.dst)),
        }
    }

    #[inline(always)]
    fn classify_memo(&self, k: &Key, memo: &mut Memo) -> Option<u32> {
        match self {
            V6::Vectors(fam) => fam.classify_memo(k, k.src, k.dst, u32::MAX, memo),
            V6::Trees(_) => {
                memo.misses += 1;
                self.classify(k)
            }
        }
    }

    fn vectors(&self) -> usize {
        match self {
            V6::Vectors(fam) => fam.vectors(),
            V6::Trees(_) => 0,
        }
    }

    fn bytes(&self) -> usize {
        match self {
            V6::Vectors(fam) => fam.bytes(),
            V6::Trees(t) => t.split.bytes() + t.src.bytes() + t.dst.bytes(),
        }
    }
}

impl Classifier {
    /// Builds the classifier (control path).
    pub fn build(rules: Vec<Rule>) -> Classifier {
        let members = v4_members(&rules);
        let cut = (members.len() <= LARGE_SET)
            .then(|| Cut::build(&rules, &members, MAX_CUT_BITS, CUT_LARGE))
            .flatten()
            .filter(|cut| cut.bytes() <= VECTORS_CACHED);
        let v4 = match cut {
            Some(cut) => V4::Cut(cut),
            None => V4::Trees(Trees::build(&rules, &members, CLASSES_BUILD)),
        };
        Self::with_v4(rules, v4)
    }

    /// Builds the classifier with its IPv4 rules cut on `sbits` source
    /// and `dbits` destination bits, whatever the plan would choose (for
    /// tests).
    #[cfg(test)]
    pub(crate) fn build_cut(rules: Vec<Rule>, sbits: u32, dbits: u32) -> Classifier {
        let v4 = Cut::with(&rules, &v4_members(&rules), sbits, dbits);
        Self::with_v4(rules, V4::Cut(v4))
    }

    /// Builds the classifier with its IPv4 rules as bit vectors whatever
    /// their size, cut on up to 12 bits (16 above [`LARGE_SET`] rules)
    /// within the memory of no cut (for benchmarks: the layout
    /// [`Classifier::build`] chose up to 2026-12-06 for every set, 782 MiB
    /// and 4 s for 100,000 rules grown from fw1).
    pub fn build_vectors(rules: Vec<Rule>) -> Classifier {
        let members = v4_members(&rules);
        let max = if members.len() > LARGE_SET {
            16
        } else {
            MAX_CUT_BITS
        };
        let cut = Cut::build(&rules, &members, max, usize::MAX)
            .unwrap_or_else(|| Cut::with(&rules, &members, 0, 0));
        Self::with_v4(rules, V4::Cut(cut))
    }

    /// Builds the classifier with its IPv4 rules as decision trees,
    /// whatever their size (for tests and benchmarks: [`Classifier::build`]
    /// chooses).
    pub fn build_trees(rules: Vec<Rule>) -> Classifier {
        let v4 = Trees::build(&rules, &v4_members(&rules), CLASSES_BUILD);
        Self::with_v4(rules, V4::Trees(v4))
    }

    fn with_v4(rules: Vec<Rule>, v4: V4) -> Classifier {
        // Family over u128: rules that can match a key with an address
        // outside the IPv4-mapped space.
        let members = rules
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let (s, d) = (range128(r.src), range128(r.dst));
                let inside = |x: (u128, u128)| x.0 >= V4_LO && x.1 <= V4_HI;
                (!(inside(s) && inside(d))).then_some((i, s, d))
            })
            .collect();
        let v6 = V6::build(&rules, members);
        Classifier {
            v4,
            v6,
            len: rules.len(),
        }
    }

    /// The first (highest-priority) rule matching `k`.
    #[inline]
    pub fn classify(&self, k: &Key) -> Option<u32> {
        let v4 = |a: u128| (V4_LO..=V4_HI).contains(&a);
        if v4(k.src) && v4(k.dst) {
            match &self.v4 {
                V4::Cut(cut) => cut.classify(k, k.src as u32, k.dst as u32),
                V4::Trees(trees) => trees.split.classify(k, k.src as u32, k.dst as u32),
            }
        } else {
            self.v6.classify(k)
        }
    }

    /// [`Classifier::classify`], remembering in `memo` what it found
    /// for the key's elementary intervals (see [`Memo`]): the cell's
    /// family's where the IPv4 rules are vectors, the intervals of all
    /// IPv4 rules where they are trees (trees of more than about 11,000
    /// rules have none: their IPv4 lookups count as misses).
    #[inline]
    pub fn classify_memo(&self, k: &Key, memo: &mut Memo) -> Option<u32> {
        let v4 = |a: u128| (V4_LO..=V4_HI).contains(&a);
        if v4(k.src) && v4(k.dst) {
            match &self.v4 {
                V4::Cut(cut) => cut.classify_memo(k, k.src as u32, k.dst as u32, memo),
                V4::Trees(trees) => trees.classify_memo(k, k.src as u32, k.dst as u32, memo),
            }
        } else {
            self.v6.classify_memo(k, memo)
        }
    }

    /// Distinct bit vectors stored (all families).
    pub fn vectors(&self) -> usize {
        let v4 = match &self.v4 {
            V4::Cut(cut) => cut.vectors(),
            V4::Trees(_) => 0,
        };
        v4 + self.v6.vectors()
    }

    /// How the IPv4 rules are searched.
    pub fn layout(&self) -> Layout {
        match &self.v4 {
            V4::Cut(cut) => Layout::Cut {
                sbits: cut.sbits,
                dbits: cut.dbits,
                cells: cut.fams.len(),
            },
            V4::Trees(trees) => Layout::Trees {
                trees: trees.split.trees(),
                nodes: trees.split.nodes(),
            },
        }
    }

    /// How the rules that can match a key outside the IPv4-mapped space
    /// (the IPv6 rules) are searched.
    pub fn ipv6_layout(&self) -> &'static str {
        match self.v6 {
            V6::Vectors(_) => "bit vectors, not cut",
            V6::Trees(_) => "decision trees over their intervals",
        }
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True with no rules.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the tables (cells, intervals, vectors, rules).
    pub fn memory(&self) -> usize {
        let v4 = match &self.v4 {
            V4::Cut(cut) => cut.bytes(),
            V4::Trees(trees) => trees.bytes(),
        };
        v4 + self.v6.bytes()
    }
}

/// The rules whose address ranges both meet the IPv4-mapped space, with
/// the parts inside it as `u32` ranges.
fn v4_members(rules: &[Rule]) -> Vec<Member<u32>> {
    let clip = |p| {
        let (lo, hi) = range128(p);
        (lo <= V4_HI && hi >= V4_LO).then(|| (lo.max(V4_LO) as u32, hi.min(V4_HI) as u32))
    };
    rules
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((i, clip(r.src)?, clip(r.dst)?)))
        .collect()
}

/// Entries of a [`Memo`].
const MEMO_SLOTS: usize = 1024;

/// One classification remembered: the family's tag, the vectors of the
/// key's source, destination, destination and source port intervals,
/// protocol and TCP flags, metadata; the rule found (`u32::MAX`: none).
#[derive(Clone, Copy, Default)]
struct MemoSlot {
    key: [u32; 7],
    rule: u32,
}

impl MemoSlot {
    #[inline(always)]
    fn found(&self) -> Option<u32> {
        (self.rule != u32::MAX).then_some(self.rule)
    }
}

/// What a classifier found for recent keys, by elementary interval: two
/// keys whose fields fall in the same intervals (the same vector in each
/// field, so the same candidate rules) and that have the same protocol,
/// TCP flags and metadata (what the residual check reads) match the same
/// first rule, whatever their addresses and ports. A worker keeps one for
/// its classifier: a key whose intervals were classified before skips the
/// vectors' AND, or the trees' walk, and the residual checks (the
/// interval searches remain).
/// Direct-mapped, 1,024 entries of 32 bytes; a collision replaces the
/// entry, so adversarial keys cost a miss, never a wrong answer. Valid
/// only for the classifier it was filled by.
pub struct Memo {
    slots: Box<[MemoSlot]>,
    /// Lookups answered from the memo.
    pub hits: u64,
    /// Lookups that went through the vectors or trees.
    pub misses: u64,
}

impl Default for Memo {
    fn default() -> Memo {
        Memo {
            slots: vec![MemoSlot::default(); MEMO_SLOTS].into_boxed_slice(),
            hits: 0,
            misses: 0,
        }
    }
}

impl Memo {
    /// Forgets every classification (for a classifier of other rules);
    /// the counts go on.
    pub fn clear(&mut self) {
        self.slots.fill(MemoSlot::default());
    }

    /// The rule remembered for `k` in the family `tag` with the vectors
    /// `ids` of its source, destination, destination port and source
    /// port intervals, or else `miss()`'s, then remembered.
    #[inline(always)]
    fn answer(
        &mut self,
        tag: u32,
        ids: [u32; 4],
        k: &Key,
        miss: impl FnOnce() -> Option<u32>,
    ) -> Option<u32> {
        let key = [
            tag,
            ids[0],
            ids[1],
            ids[2],
            ids[3],
            u32::from(k.proto) | u32::from(k.flags) << 8,
            k.meta,
        ];
        let slot = self.slot(&key);
        if self.slots[slot].key == key {
            self.hits += 1;
            return self.slots[slot].found();
        }
        self.misses += 1;
        let found = miss();
        self.slots[slot] = MemoSlot {
            key,
            rule: found.unwrap_or(u32::MAX),
        };
        found
    }

    /// The slot of `key`.
    #[inline(always)]
    fn slot(&self, key: &[u32; 7]) -> usize {
        let w = |i: usize| u64::from(key[i]) | u64::from(key[i + 1]) << 32;
        let h = w(0).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ w(2).wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
            ^ w(4).wrapping_mul(0x1656_67b1_9e37_79f9)
            ^ u64::from(key[6]).wrapping_mul(0xd6e8_feb8_6659_fd93);
        (h >> 54) as usize & (MEMO_SLOTS - 1)
    }
}
