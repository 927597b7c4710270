//! The tuple -> flow index: two-choice hashing over 8-way buckets of one
//! cache line each, as DPDK's rte_hash.

/// A flow handle: slot index and direction (`reply`).
pub(super) type Hit = (u32, bool);

/// Entries per bucket (one 64-byte cache line).
pub(super) const WAYS: usize = 8;

/// A bucket: signatures (0 = free, four 16-bit lanes to a word, so one
/// bucket is matched by a few word operations instead of a loop over its
/// ways), values (slot << 1 | reply), and how many entries whose first
/// choice is this bucket had to go to their second (while none has, a
/// lookup that misses here need not read the second bucket).
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
pub(super) struct Bucket {
    sig: [u64; 2],
    val: [u32; WAYS],
    pub(super) moved: u32,
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
    pub(super) fn free_way(&self) -> Option<usize> {
        let m = self.ways_of(0);
        (m != 0).then(|| m.trailing_zeros() as usize / 16)
    }
}

/// The tuple → flow index: two-choice hashing over 8-way buckets of one
/// cache line each (as DPDK's rte_hash), sized for at most half of its
/// entries in use, so a lookup reads one line (two when its first bucket
/// has overflowed) and the flow.
#[derive(Clone)]
pub(super) struct Index {
    pub(super) buckets: Vec<Bucket>,
    mask: usize,
    pub(super) len: usize,
}

impl Index {
    /// The bytes this index holds.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.buckets.capacity() * std::mem::size_of::<Bucket>()
    }

    /// The bytes an index of `entries` takes.
    pub(super) fn bytes_for(entries: usize) -> usize {
        Self::buckets_for(entries) * std::mem::size_of::<Bucket>()
    }

    fn buckets_for(entries: usize) -> usize {
        (2 * entries).div_ceil(WAYS).next_power_of_two().max(2)
    }

    pub(super) fn new(entries: usize) -> Index {
        let n = Self::buckets_for(entries);
        Index {
            buckets: written(n, Bucket::default()),
            mask: n - 1,
            len: 0,
        }
    }

    /// Buckets and signature of hash `h`.
    #[inline(always)]
    pub(super) fn place(&self, h: u64) -> (usize, usize, u16) {
        let b1 = self.first(h);
        (b1, self.second(h, b1), Self::sig(h))
    }

    /// The first bucket of hash `h`.
    #[inline(always)]
    pub(super) fn first(&self, h: u64) -> usize {
        h as usize & self.mask
    }

    /// The second bucket of hash `h`, whose first is `b1` (worked out only
    /// where it is read: most lookups and inserts end in the first).
    #[inline(always)]
    pub(super) fn second(&self, h: u64, b1: usize) -> usize {
        let b2 = (h >> 24) as usize & self.mask;
        if b2 == b1 {
            b2 ^ 1
        } else {
            b2
        }
    }

    /// The signature of hash `h` (never 0, which marks a free way).
    #[inline(always)]
    pub(super) fn sig(h: u64) -> u16 {
        (h >> 48) as u16 | 1
    }

    /// Calls `eq` on each value whose signature matches, in the first
    /// bucket and (if any entry had to move there) the second; returns the
    /// first value `eq` accepts, and where it is.
    #[inline(always)]
    pub(super) fn find(
        &self,
        h: u64,
        mut eq: impl FnMut(u32) -> bool,
    ) -> Option<(usize, usize, u32)> {
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
    pub(super) fn scan(bk: &Bucket, sig: u16, eq: &mut impl FnMut(u32) -> bool) -> Option<usize> {
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
    pub(super) fn insert(&mut self, h: u64, v: u32, hash_of: impl Fn(u32) -> u64) -> bool {
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
    pub(super) fn make_room(
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
    pub(super) fn put(&mut self, b: usize, w: usize, sig: u16, v: u32, b1: usize) {
        self.buckets[b].set_sig(w, sig);
        self.buckets[b].val[w] = v;
        self.len += 1;
        if b != b1 {
            self.buckets[b1].moved += 1;
        }
    }

    /// Moves the entry at way `w` of bucket `b`, hashed `h`, to a free way
    /// of its other bucket; the way it left, if it could.
    pub(super) fn displace(&mut self, b: usize, w: usize, h: u64) -> Option<(usize, usize)> {
        let (o1, o2, sig) = self.place(h);
        let to = if b == o1 { o2 } else { o1 };
        let tw = self.buckets[to].free_way()?;
        let v = self.buckets[b].val[w];
        self.remove_at(h, b, w);
        self.put(to, tw, sig, v, o1);
        Some((b, w))
    }

    /// Removes the entry of hash `h` at way `w` of bucket `b`.
    pub(super) fn remove_at(&mut self, h: u64, b: usize, w: usize) {
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
pub(super) fn written<T: Copy>(n: usize, fill: T) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    // The allocation is seen before it is filled, so the compiler cannot
    // fuse the two into a `calloc` (zero pages again).
    std::hint::black_box(v.as_mut_ptr());
    v.extend(std::iter::repeat_n(fill, n));
    // And the writes are seen, so none is left out.
    std::hint::black_box(&mut v);
    v
}
