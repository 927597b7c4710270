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
//!
//! IPv4 and IPv6 rules share the `u128` rule format; they are compiled into
//! two families: keys whose addresses are both IPv4-mapped search a family
//! over `u32` addresses holding every rule whose ranges meet the IPv4
//! space; other keys search a family over `u128` addresses holding every
//! rule that could match a key outside it.

use super::{Key, Rule};
use rustc_hash::FxHashMap;

const V4_LO: u128 = 0xffff << 32;
const V4_HI: u128 = V4_LO | 0xffff_ffff;

/// A coordinate type of one field.
trait Coord: Copy + Ord + Default + std::fmt::Debug {
    const MAX: Self;
    /// Buckets of the top-bits index (1: no index).
    const BUCKETS: usize;
    fn bucket(self) -> usize;
    fn next(self) -> Self;
    fn bucket_start(b: usize) -> Self;
}

impl Coord for u32 {
    const MAX: Self = u32::MAX;
    const BUCKETS: usize = 4096;
    #[inline(always)]
    fn bucket(self) -> usize {
        (self >> 20) as usize
    }
    fn next(self) -> Self {
        self + 1
    }
    fn bucket_start(b: usize) -> Self {
        (b as u32) << 20
    }
}

impl Coord for u16 {
    const MAX: Self = u16::MAX;
    const BUCKETS: usize = 256;
    #[inline(always)]
    fn bucket(self) -> usize {
        (self >> 8) as usize
    }
    fn next(self) -> Self {
        self + 1
    }
    fn bucket_start(b: usize) -> Self {
        (b as u16) << 8
    }
}

impl Coord for u128 {
    const MAX: Self = u128::MAX;
    const BUCKETS: usize = 1;
    #[inline(always)]
    fn bucket(self) -> usize {
        0
    }
    fn next(self) -> Self {
        self + 1
    }
    fn bucket_start(_: usize) -> Self {
        0
    }
}

/// Interned bit vectors with their aggregates.
struct Store {
    /// Words per vector.
    w: usize,
    /// Aggregate words per vector.
    a: usize,
    words: Vec<u64>,
    aggs: Vec<u64>,
    index: FxHashMap<Vec<u64>, u32>,
}

impl Store {
    fn new(rules: usize) -> Store {
        let w = rules.div_ceil(64).max(1);
        Store {
            w,
            a: w.div_ceil(64),
            words: Vec::new(),
            aggs: Vec::new(),
            index: FxHashMap::default(),
        }
    }

    fn intern(&mut self, v: &[u64]) -> u32 {
        if let Some(&id) = self.index.get(v) {
            return id;
        }
        let id = (self.words.len() / self.w) as u32;
        self.words.extend_from_slice(v);
        let mut agg = vec![0u64; self.a];
        for (i, &x) in v.iter().enumerate() {
            if x != 0 {
                agg[i / 64] |= 1 << (i % 64);
            }
        }
        self.aggs.extend_from_slice(&agg);
        self.index.insert(v.to_vec(), id);
        id
    }
}

/// One field: the elementary intervals' starts and their vectors.
struct Dim<T> {
    starts: Vec<T>,
    vecs: Vec<u32>,
    /// `index[b]`: the number of starts below bucket `b`'s first value.
    index: Vec<u32>,
}

impl<T: Coord> Dim<T> {
    /// `ranges[i]`: rule `i`'s inclusive range, `None` when the rule is
    /// not in this family.
    fn build(ranges: &[(T, T)], store: &mut Store) -> Dim<T> {
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
        let index = (0..=T::BUCKETS)
            .map(|b| {
                if b == T::BUCKETS {
                    starts.len() as u32
                } else {
                    starts.partition_point(|&x| x < T::bucket_start(b)) as u32
                }
            })
            .collect();
        Dim {
            starts,
            vecs,
            index,
        }
    }

    /// The vector of `x`'s interval.
    #[inline(always)]
    fn find(&self, x: T) -> u32 {
        let b = x.bucket();
        let (lo, hi) = (self.index[b] as usize, self.index[b + 1] as usize);
        let i = lo + self.starts[lo..hi].partition_point(|&s| s <= x);
        // starts[0] is the minimum, so i >= 1.
        self.vecs[i - 1]
    }

    fn bytes(&self) -> usize {
        self.starts.len() * std::mem::size_of::<T>() + self.vecs.len() * 4 + self.index.len() * 4
    }
}

/// What the bit vectors leave to check: TCP flags, metadata, and a
/// protocol mask other than 0 or 0xff (16 bytes, so the check stays in
/// cache).
#[derive(Clone, Copy)]
struct Residual {
    flags: (u16, u16),
    proto: (u8, u8),
    meta: (u32, u32),
}

impl Residual {
    fn of(r: &Rule) -> Residual {
        Residual {
            flags: (r.flags.0 & r.flags.1, r.flags.1),
            proto: (r.proto.0 & r.proto.1, r.proto.1),
            meta: (r.meta.0 & r.meta.1, r.meta.1),
        }
    }

    #[inline(always)]
    fn matches(&self, k: &Key) -> bool {
        k.flags & self.flags.1 == self.flags.0
            && k.proto & self.proto.1 == self.proto.0
            && k.meta & self.meta.1 == self.meta.0
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

fn proto_range(p: (u8, u8)) -> (u8, u8) {
    if p.1 == 0xff {
        (p.0, p.0)
    } else {
        (0, 255) // other masks: checked by `matches`
    }
}

impl<A: Coord> Family<A> {
    fn build(all: &[Rule], pick: impl Fn(&Rule) -> Option<((A, A), (A, A))>) -> Family<A> {
        let mut global = Vec::new();
        let mut rules: Vec<Rule> = Vec::new();
        let mut srcs = Vec::new();
        let mut dsts = Vec::new();
        for (i, r) in all.iter().enumerate() {
            if let Some((s, d)) = pick(r) {
                global.push(i as u32);
                rules.push(*r);
                srcs.push(s);
                dsts.push(d);
            }
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

    #[inline(always)]
    fn classify(&self, k: &Key, src: A, dst: A) -> Option<u32> {
        let s = &self.store;
        let ids = [
            self.src.find(src) as usize,
            self.dst.find(dst) as usize,
            self.dport.find(k.dport) as usize,
            self.proto[usize::from(k.proto)] as usize,
            self.sport.find(k.sport) as usize,
        ];
        let (w, a) = (s.w, s.a);
        // Each field's vector and aggregate as slices of one length (`w`,
        // `a`): one bounds check per word index below, not one per field.
        let rows = ids.map(|v| &s.words[v * w..][..w]);
        let aggs = ids.map(|v| &s.aggs[v * a..][..a]);
        for ai in 0..a {
            let mut agg = !0u64;
            for g in &aggs {
                agg &= g[ai];
            }
            while agg != 0 {
                let wi = ai * 64 + agg.trailing_zeros() as usize;
                agg &= agg - 1;
                // Addresses first: they are the selective fields, and when
                // they share no rule the port and protocol words are not
                // read.
                let mut bits = rows[0][wi] & rows[1][wi];
                if bits == 0 {
                    continue;
                }
                for r in &rows[2..] {
                    bits &= r[wi];
                }
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

    fn bytes(&self) -> usize {
        self.src.bytes()
            + self.dst.bytes()
            + self.sport.bytes()
            + self.dport.bytes()
            + 256 * 4
            + (self.store.words.len() + self.store.aggs.len()) * 8
            + self.rules.len() * (std::mem::size_of::<Residual>() + 4)
    }

    fn vectors(&self) -> usize {
        self.store.words.len() / self.store.w
    }
}

/// A built classifier; the fast path only reads it.
pub struct Classifier {
    v4: Family<u32>,
    v6: Family<u128>,
    len: usize,
}

impl Classifier {
    /// Builds the classifier (control path).
    pub fn build(rules: Vec<Rule>) -> Classifier {
        // Family over u32: the part of each address range inside the
        // IPv4-mapped space.
        let v4 = Family::build(&rules, |r| {
            let clip = |p| {
                let (lo, hi) = range128(p);
                (lo <= V4_HI && hi >= V4_LO).then(|| (lo.max(V4_LO) as u32, hi.min(V4_HI) as u32))
            };
            Some((clip(r.src)?, clip(r.dst)?))
        });
        // Family over u128: rules that can match a key with an address
        // outside the IPv4-mapped space.
        let v6 = Family::build(&rules, |r| {
            let (s, d) = (range128(r.src), range128(r.dst));
            let inside = |x: (u128, u128)| x.0 >= V4_LO && x.1 <= V4_HI;
            (!(inside(s) && inside(d))).then_some((s, d))
        });
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
            self.v4.classify(k, k.src as u32, k.dst as u32)
        } else {
            self.v6.classify(k, k.src, k.dst)
        }
    }

    /// Distinct bit vectors stored (both families).
    pub fn vectors(&self) -> usize {
        self.v4.vectors() + self.v6.vectors()
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True with no rules.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the tables (intervals, vectors, rules).
    pub fn memory(&self) -> usize {
        self.v4.bytes() + self.v6.bytes()
    }
}
