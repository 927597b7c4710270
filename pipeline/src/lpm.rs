//! Longest-prefix match for IPv4 and IPv6, built on the control path and
//! swapped in whole; the fast path only reads.
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
//! # Building
//!
//! Routes are collected in a builder and inserted in order of increasing
//! prefix length, so that every insert only overwrites what a shorter
//! prefix wrote (leaf pushing without a rule table). The same prefix added
//! twice keeps the last next hop. Next hops are indexes below 2^24 into the
//! caller's next-hop table.

use crate::prefix::network6;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

const LEAF: u32 = 1 << 31;
const PTR: u32 = 1 << 30;
const IDX: u32 = (1 << 24) - 1;
const TOP_BITS: u32 = 24;
const TOP_LEN: usize = 1 << TOP_BITS;

/// Largest next-hop index.
pub const MAX_NEXT_HOP: u32 = IDX;

/// A route that cannot be added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LpmError {
    /// Prefix length beyond the address size.
    PrefixLen(u8),
    /// Next hop above [`MAX_NEXT_HOP`].
    NextHop(u32),
    /// More 256-entry groups than the entry format can address.
    Full,
}

impl fmt::Display for LpmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LpmError::PrefixLen(l) => write!(f, "prefix length /{l} is too long"),
            LpmError::NextHop(n) => write!(f, "next hop {n} is above {MAX_NEXT_HOP}"),
            LpmError::Full => f.write_str("the table needs more than 2^24 groups"),
        }
    }
}

impl std::error::Error for LpmError {}

/// The trie shared by both families; addresses are left-aligned in a u128.
#[derive(Clone)]
struct Trie {
    top: Vec<u32>,
    groups: Vec<u32>,
}

impl Trie {
    fn new() -> Self {
        Trie {
            top: vec![0; TOP_LEN],
            groups: Vec::new(),
        }
    }

    fn new_group(&mut self, fill: u32) -> Result<u32, LpmError> {
        let g = self.groups.len() >> 8;
        if g > IDX as usize {
            return Err(LpmError::Full);
        }
        self.groups.resize(self.groups.len() + 256, fill);
        Ok(g as u32)
    }

    /// Inserts `addr/len` (left-aligned, host bits zero). Callers insert in
    /// order of increasing length, so no pointer lies under the range a
    /// prefix covers at its last level.
    fn insert(&mut self, addr: u128, len: u32, nh: u32) -> Result<(), LpmError> {
        let leaf = LEAF | nh;
        if len <= TOP_BITS {
            let n = 1usize << (TOP_BITS - len);
            let start = ((addr >> (128 - TOP_BITS)) as usize) & !(n - 1);
            self.top[start..start + n].fill(leaf);
            return Ok(());
        }
        // Walk down, turning entries on the path into pointers.
        let mut at_top = true;
        let mut slot = (addr >> (128 - TOP_BITS)) as usize;
        let mut depth = TOP_BITS;
        loop {
            let e = if at_top {
                self.top[slot]
            } else {
                self.groups[slot]
            };
            let g = if e & PTR != 0 {
                e & IDX
            } else {
                let g = self.new_group(e)?;
                if at_top {
                    self.top[slot] = PTR | g;
                } else {
                    self.groups[slot] = PTR | g;
                }
                g
            };
            let base = (g as usize) << 8;
            let byte = ((addr >> (128 - depth - 8)) & 0xff) as usize;
            if len <= depth + 8 {
                let n = 1usize << (depth + 8 - len);
                let start = base + (byte & !(n - 1));
                self.groups[start..start + n].fill(leaf);
                return Ok(());
            }
            at_top = false;
            slot = base + byte;
            depth += 8;
        }
    }

    fn memory(&self) -> usize {
        (self.top.len() + self.groups.len()) * 4
    }
}

fn build(mut routes: Vec<(u128, u8, u32)>, max_len: u8) -> Result<Trie, LpmError> {
    for &(_, len, nh) in &routes {
        if len > max_len {
            return Err(LpmError::PrefixLen(len));
        }
        if nh > MAX_NEXT_HOP {
            return Err(LpmError::NextHop(nh));
        }
    }
    // Increasing length; a stable sort keeps the order of duplicates, and
    // the last one written wins.
    routes.sort_by_key(|&(_, len, _)| len);
    let mut t = Trie::new();
    for (addr, len, nh) in routes {
        t.insert(addr, u32::from(len), nh)?;
    }
    Ok(t)
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

            /// Builds the table.
            pub fn build(self) -> Result<$table, LpmError> {
                let routes = self.routes.len();
                Ok($table {
                    t: build(self.routes, $bits)?,
                    routes,
                })
            }
        }

        impl std::fmt::Debug for $table {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($table))
                    .field("routes", &self.routes)
                    .field("groups", &self.groups())
                    .finish()
            }
        }

        impl $table {
            /// Routes it was built from.
            pub fn routes(&self) -> usize {
                self.routes
            }

            /// Bytes of lookup tables.
            pub fn memory(&self) -> usize {
                self.t.memory()
            }

            /// Lower-level groups in use.
            pub fn groups(&self) -> usize {
                self.t.groups.len() / 256
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

/// An IPv4 longest-prefix-match table (DIR-24-8).
#[derive(Clone)]
pub struct Lpm4 {
    t: Trie,
    routes: usize,
}

/// An IPv6 longest-prefix-match table (24-bit first level, 8-bit levels).
#[derive(Clone)]
pub struct Lpm6 {
    t: Trie,
    routes: usize,
}

impl Lpm4 {
    /// The next hop of the longest prefix covering `a`.
    #[inline(always)]
    pub fn lookup(&self, a: u32) -> Option<u32> {
        let mut e = self.t.top[(a >> 8) as usize];
        if e & PTR != 0 {
            e = self.t.groups[(((e & IDX) as usize) << 8) | (a & 0xff) as usize];
        }
        (e & LEAF != 0).then_some(e & IDX)
    }

    /// Looks up a burst: `out[i]` for `addrs[i]` (the loads overlap).
    #[inline]
    pub fn lookup_bulk(&self, addrs: &[u32], out: &mut [Option<u32>]) {
        for (a, o) in addrs.iter().zip(out.iter_mut()) {
            *o = self.lookup(*a);
        }
    }
}

impl Lpm6 {
    /// The next hop of the longest prefix covering `a`.
    #[inline]
    pub fn lookup(&self, a: u128) -> Option<u32> {
        let mut e = self.t.top[(a >> (128 - TOP_BITS)) as usize];
        let mut shift = 128 - TOP_BITS;
        while e & PTR != 0 && shift >= 8 {
            shift -= 8;
            let byte = ((a >> shift) & 0xff) as usize;
            e = self.t.groups[(((e & IDX) as usize) << 8) | byte];
        }
        (e & LEAF != 0).then_some(e & IDX)
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
        assert_eq!(t.groups(), 1);
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
