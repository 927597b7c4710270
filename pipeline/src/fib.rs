//! The forwarding information base: the IPv4 and IPv6 LPM tables and the
//! next-hop table they point into, changed in place by one control thread
//! (the [`FibWriter`]: routes from the config, `sluice ctl route`, the
//! netlink listener) while workers forward.
//!
//! - A route change writes only the table entries the prefix covers (see
//!   [`crate::lpm`]); no rebuild, no lock, and no worker ever waits.
//!   Workers see every entry before or after a change, and what a change
//!   unlinks (a folded LPM group, a next hop no route uses) is reused only
//!   after every worker that could still see it has left its poll round
//!   ([`crate::rcu`]).
//! - A next hop is a slot holding (port, gateway), or a set of up to
//!   [`MAX_PATHS`] such slots for an equal-cost multipath route (ECMP): a
//!   flow picks one by a hash of its addresses, protocol and ports that is
//!   the same in both directions, so a flow keeps its path while the set
//!   is unchanged. Routes with the same path set share its slot
//!   (reference-counted).
//! - [`Fib::version`] changes with every change, so that workers drop
//!   what they cached from the old tables (per-flow next hops).
//!
//! A leaf beside `lpm` and `rcu`: it knows nothing of the router.

use crate::lpm::{spare_groups, Lpm4, Lpm4Builder, Lpm6, Lpm6Builder, LpmError, TrieWriter};
use crate::prefix::{mask4, network6};
use crate::rcu::{Epochs, Reader};
use rustc_hash::FxHashMap as HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Most paths of one multipath route.
pub const MAX_PATHS: usize = 16;
/// Next-hop slots (single paths and multipath sets together).
pub const HOP_SLOTS: usize = 1 << 16;

/// Where a route leads (one path).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NextHop {
    /// Output port.
    pub port: u16,
    /// Gateway; `None` for a connected route (the destination is the
    /// neighbour).
    pub via: Option<IpAddr>,
}

// Kind 0: a slot never written.
const KIND_CONNECTED: u64 = 1;
const KIND_VIA4: u64 = 2;
const KIND_VIA6: u64 = 3;
const KIND_MULTI: u64 = 4;

/// The next-hop slots as workers read them, slot `i` at index `i` of
/// `meta` (port in bits 0–15, path count in 16–23 for multipath, kind in
/// 24–31, IPv4 gateway in 32–63), `2i` and `2i + 1` of `v6` (the IPv6
/// gateway) and `4i..4i + 4` of `members` (a multipath set's member slots,
/// 16 bits each). Zeroed allocations: untouched slots cost no memory.
struct Slots {
    meta: Box<[AtomicU64]>,
    v6: Box<[AtomicU64]>,
    members: Box<[AtomicU64]>,
}

impl Slots {
    fn new() -> Self {
        Slots {
            meta: bytemuck::zeroed_slice_box(HOP_SLOTS),
            v6: bytemuck::zeroed_slice_box(HOP_SLOTS * 2),
            members: bytemuck::zeroed_slice_box(HOP_SLOTS * MAX_PATHS / 4),
        }
    }

    #[inline]
    fn member(&self, i: usize, k: usize) -> usize {
        usize::from((self.members[i * 4 + k / 4].load(Ordering::Acquire) >> ((k % 4) * 16)) as u16)
    }
}

/// What a change could not do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FibError {
    /// The LPM table refused (group pool full, bad length).
    Lpm(LpmError),
    /// Every next-hop slot is in use.
    Hops,
    /// A route with no path, more than [`MAX_PATHS`], or paths of the
    /// other family.
    Paths(usize),
}

impl fmt::Display for FibError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FibError::Lpm(e) => e.fmt(f),
            FibError::Hops => write!(f, "all {HOP_SLOTS} next-hop slots are in use"),
            FibError::Paths(n) => write!(
                f,
                "a route needs 1 to {MAX_PATHS} paths of its own family ({n} given)"
            ),
        }
    }
}

impl std::error::Error for FibError {}

impl From<LpmError> for FibError {
    fn from(e: LpmError) -> Self {
        FibError::Lpm(e)
    }
}

/// The tables workers read (shared; changed only through its writer).
pub struct Fib {
    lpm4: Lpm4,
    lpm6: Lpm6,
    slots: Slots,
    epochs: Arc<Epochs>,
    version: AtomicU64,
    /// Changes when a next-hop slot is freed or given a next hop: what a
    /// worker cached per slot may then be stale. Routes moving between
    /// next hops that stay in use leave it alone.
    hops: AtomicU64,
    /// Multipath slots in use (flow hashes are needed only when some).
    multipath: AtomicU64,
}

impl fmt::Debug for Fib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fib")
            .field("routes4", &self.routes4())
            .field("routes6", &self.routes6())
            .field("version", &self.version())
            .finish()
    }
}

/// A symmetric flow hash (the same for both directions of a flow) of an
/// IP packet's addresses, protocol and, for unfragmented TCP/UDP/SCTP,
/// ports: what picks a multipath route's path. `l3` starts at the IP
/// header; anything too short hashes to 0.
#[inline]
pub fn flow_hash(l3: &[u8]) -> u32 {
    let word = |o: usize| {
        let mut x = [0u8; 16];
        x.copy_from_slice(&l3[o..o + 16]);
        u128::from_be_bytes(x)
    };
    let (a, b, proto, l4) = match l3.first().map(|v| v >> 4) {
        Some(4) if l3.len() >= 20 => {
            let ihl = usize::from(l3[0] & 0x0f) * 4;
            let frag = u16::from_be_bytes([l3[6], l3[7]]) & 0x3fff != 0;
            let s = u32::from_be_bytes([l3[12], l3[13], l3[14], l3[15]]);
            let d = u32::from_be_bytes([l3[16], l3[17], l3[18], l3[19]]);
            let m = |a: u32| 0xffff_0000_0000 | u128::from(a);
            (m(s), m(d), l3[9], (!frag).then_some(ihl))
        }
        Some(6) if l3.len() >= 40 => (word(8), word(24), l3[6], Some(40)),
        _ => return 0,
    };
    let (p, q) = match l4 {
        Some(o) if l3.len() >= o + 4 => (
            u16::from_be_bytes([l3[o], l3[o + 1]]),
            u16::from_be_bytes([l3[o + 2], l3[o + 3]]),
        ),
        _ => (0, 0),
    };
    tuple_hash(a, b, proto, p, q)
}

/// [`flow_hash`] of a flow's tuple (IPv4 addresses mapped into IPv6, as
/// conntrack keeps them); ports count for TCP, UDP and SCTP only.
#[inline]
pub fn tuple_hash(src: u128, dst: u128, proto: u8, sport: u16, dport: u16) -> u32 {
    let fold = |v: u128| (v as u64) ^ ((v >> 64) as u64).rotate_left(17);
    let (a, b) = (fold(src), fold(dst));
    let ports = match proto {
        6 | 17 | 132 => (u64::from(sport.min(dport)) << 16) | u64::from(sport.max(dport)),
        _ => 0,
    };
    // Ordered pairs make it symmetric; a multiply-xorshift mixes it.
    let (lo, hi) = (a.min(b), a.max(b));
    let mut h = lo.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ hi.rotate_left(29);
    h ^= (ports << 8 | u64::from(proto)).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    h ^= h >> 31;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (h ^ (h >> 32)) as u32
}

impl Fib {
    /// The IPv4 table.
    pub fn lpm4(&self) -> &Lpm4 {
        &self.lpm4
    }

    /// The IPv6 table.
    pub fn lpm6(&self) -> &Lpm6 {
        &self.lpm6
    }

    /// Changes so far: differs whenever a route or next hop changed.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The next-hop slots' version: changes when a slot is freed or given
    /// a next hop (see [`Fib::version`] for any change of routes).
    #[inline]
    pub fn hops_version(&self) -> u64 {
        self.hops.load(Ordering::Acquire)
    }

    /// Whether some route has several paths (then flows need a hash).
    #[inline]
    pub fn multipath(&self) -> bool {
        self.multipath.load(Ordering::Relaxed) > 0
    }

    /// A reader for one worker (enter it for each poll round).
    pub fn reader(&self) -> Reader {
        self.epochs.reader()
    }

    /// Distinct IPv4 routes.
    pub fn routes4(&self) -> usize {
        self.lpm4.routes()
    }

    /// Distinct IPv6 routes.
    pub fn routes6(&self) -> usize {
        self.lpm6.routes()
    }

    fn single(&self, i: usize, meta: u64) -> Option<NextHop> {
        let port = meta as u16;
        let via = match (meta >> 24) & 0xff {
            KIND_CONNECTED => None,
            KIND_VIA4 => Some(IpAddr::V4(Ipv4Addr::from((meta >> 32) as u32))),
            KIND_VIA6 => {
                let hi = self.slots.v6[2 * i].load(Ordering::Acquire);
                let lo = self.slots.v6[2 * i + 1].load(Ordering::Acquire);
                Some(IpAddr::V6(Ipv6Addr::from(
                    (u128::from(hi) << 64) | u128::from(lo),
                )))
            }
            _ => return None,
        };
        Some(NextHop { port, via })
    }

    /// The path next hop `nh` (an LPM result) takes for a flow: the slot
    /// it resolves to and its (port, gateway). `hash` (see [`flow_hash`])
    /// is called only for a multipath route.
    #[inline]
    pub fn path(&self, nh: u32, hash: impl FnOnce() -> u32) -> Option<(u32, NextHop)> {
        let i = nh as usize;
        let meta = self.slots.meta.get(i)?.load(Ordering::Acquire);
        if (meta >> 24) & 0xff != KIND_MULTI {
            return Some((nh, self.single(i, meta)?));
        }
        let n = (meta >> 16) & 0xff;
        let k = ((u64::from(hash()) * n) >> 32) as usize;
        let m = self.slots.member(i, k);
        let mm = self.slots.meta[m].load(Ordering::Acquire);
        Some((m as u32, self.single(m, mm)?))
    }

    /// Every path of next hop `nh` (control path).
    pub fn paths(&self, nh: u32) -> Vec<NextHop> {
        let i = nh as usize;
        let Some(meta) = self.slots.meta.get(i).map(|m| m.load(Ordering::Acquire)) else {
            return Vec::new();
        };
        if (meta >> 24) & 0xff != KIND_MULTI {
            return self.single(i, meta).into_iter().collect();
        }
        let n = ((meta >> 16) & 0xff) as usize;
        (0..n)
            .filter_map(|k| {
                let m = self.slots.member(i, k);
                self.single(m, self.slots.meta[m].load(Ordering::Acquire))
            })
            .collect()
    }
}

/// Counters of what the writer did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FibStats {
    /// Routes added (new prefixes).
    pub added: u64,
    /// Routes whose paths were replaced.
    pub replaced: u64,
    /// Routes deleted.
    pub deleted: u64,
    /// Changes refused (see [`FibError`]).
    pub failed: u64,
}

/// The one writer of a [`Fib`]: keeps the route list (per prefix length,
/// as `rte_lpm` keeps its rules), the next-hop slots' paths and reference
/// counts, and the LPM tables' writer sides. Not `Clone`: one per FIB.
pub struct FibWriter {
    fib: Arc<Fib>,
    w4: TrieWriter,
    w6: TrieWriter,
    rules4: Vec<HashMap<u32, u32>>,
    rules6: Vec<HashMap<u128, u32>>,
    /// Routes in `rules4` and `rules6`.
    counts: (usize, usize),
    /// Slots of single paths, and of multipath sets (sorted paths).
    singles: HashMap<NextHop, u32>,
    ids: HashMap<Vec<NextHop>, u32>,
    /// Per slot: its paths (empty while free) and the routes and sets
    /// using it.
    paths: Vec<Vec<NextHop>>,
    refs: Vec<u32>,
    fresh: u32,
    free: Vec<u32>,
    retired: Vec<(u64, u32)>,
    stats: FibStats,
}

/// The smallest group pools of a FIB's tables (IPv4, IPv6): 64 Ki and
/// 256 Ki groups of 1 KiB, mapped lazily (see [`spare_groups`]: address
/// space, not memory, until used); a table whose routes need more gets
/// half again as many. A FIB that starts empty and fills from a routing
/// daemon needs room for a whole table: the shared full table uses 451
/// IPv4 and 38,096 IPv6 groups.
pub const SPARE_GROUPS: (usize, usize) = (65536, 262144);

impl FibWriter {
    /// A FIB with `routes` (prefix, length, paths; a later duplicate
    /// replaces an earlier one) and room to change.
    pub fn build(routes: &[(IpAddr, u8, Vec<NextHop>)]) -> Result<FibWriter, FibError> {
        let epochs = Arc::new(Epochs::default());
        let (mut b4, mut b6) = (Lpm4Builder::new(), Lpm6Builder::new());
        let mut w = FibWriter {
            fib: Arc::new(Fib {
                lpm4: Lpm4Builder::new().build()?,
                lpm6: Lpm6Builder::new().build()?,
                slots: Slots::new(),
                epochs: epochs.clone(),
                version: AtomicU64::new(1),
                hops: AtomicU64::new(1),
                multipath: AtomicU64::new(0),
            }),
            w4: TrieWriter::default(),
            w6: TrieWriter::default(),
            rules4: vec![HashMap::default(); 33],
            rules6: vec![HashMap::default(); 129],
            counts: (0, 0),
            singles: HashMap::default(),
            ids: HashMap::default(),
            paths: Vec::new(),
            refs: Vec::new(),
            fresh: 0,
            free: Vec::new(),
            retired: Vec::new(),
            stats: FibStats::default(),
        };
        // Slots and the route list first (nobody reads yet), then the
        // tables in one build each.
        for (a, len, paths) in routes {
            let id = w.hop_for(*a, paths)?;
            let old = match *a {
                IpAddr::V4(x) if *len <= 32 => {
                    let net = u32::from(x) & mask4(*len);
                    b4.add(x, *len, id);
                    w.rules4[usize::from(*len)].insert(net, id)
                }
                IpAddr::V6(x) if *len <= 128 => {
                    let net = network6(u128::from(x), *len);
                    b6.add(x, *len, id);
                    w.rules6[usize::from(*len)].insert(net, id)
                }
                _ => return Err(FibError::Lpm(LpmError::PrefixLen(*len))),
            };
            if let Some(o) = old {
                w.unref(o);
            }
        }
        let (t4, w4) = b4.build_writable(|n| spare_groups(n, SPARE_GROUPS.0), &epochs)?;
        let (t6, w6) = b6.build_writable(|n| spare_groups(n, SPARE_GROUPS.1), &epochs)?;
        let first = Arc::get_mut(&mut w.fib).expect("not shared yet");
        let slots = std::mem::replace(
            &mut first.slots,
            Slots {
                meta: Box::new([]),
                v6: Box::new([]),
                members: Box::new([]),
            },
        );
        let multipath = first.multipath.load(Ordering::Relaxed);
        w.fib = Arc::new(Fib {
            lpm4: t4,
            lpm6: t6,
            slots,
            epochs,
            version: AtomicU64::new(1),
            hops: AtomicU64::new(1),
            multipath: AtomicU64::new(multipath),
        });
        w.w4 = w4;
        w.w6 = w6;
        w.counts = (
            w.rules4.iter().map(|m| m.len()).sum(),
            w.rules6.iter().map(|m| m.len()).sum(),
        );
        w.stats = FibStats::default();
        Ok(w)
    }

    /// The tables, for workers.
    pub fn fib(&self) -> &Arc<Fib> {
        &self.fib
    }

    /// What the writer did so far.
    pub fn stats(&self) -> FibStats {
        self.stats
    }

    /// Next-hop slots in use.
    pub fn hops(&self) -> usize {
        self.paths.iter().filter(|p| !p.is_empty()).count()
    }

    /// LPM groups in use (IPv4, IPv6) and their pools' sizes.
    pub fn groups(&self) -> ((usize, usize), (usize, usize)) {
        (
            (self.w4.groups(), self.fib.lpm4.capacity()),
            (self.w6.groups(), self.fib.lpm6.capacity()),
        )
    }

    fn take_slot(&mut self) -> Result<u32, FibError> {
        if self.free.is_empty() && !self.retired.is_empty() {
            self.reclaim();
        }
        // Before the slot is written: a worker that sees the new contents
        // through a route entered a round after this (the route's store
        // is later), so it sees the new version too.
        self.fib.hops.fetch_add(1, Ordering::AcqRel);
        match self.free.pop() {
            Some(i) => Ok(i),
            None if (self.fresh as usize) < HOP_SLOTS => {
                self.fresh += 1;
                self.paths.push(Vec::new());
                self.refs.push(0);
                Ok(self.fresh - 1)
            }
            None => Err(FibError::Hops),
        }
    }

    /// Reuses what readers have left behind (also done when needed).
    pub fn reclaim(&mut self) {
        let ep = self.fib.epochs.clone();
        self.w4.reclaim(&ep);
        self.w6.reclaim(&ep);
        if self.retired.is_empty() {
            return;
        }
        let oldest = ep.oldest_inside();
        let free = &mut self.free;
        self.retired.retain(|&(tag, i)| {
            if oldest.is_none_or(|o| tag < o) {
                free.push(i);
                false
            } else {
                true
            }
        });
    }

    /// The slot for one path, written and referenced once more.
    fn single_for(&mut self, h: NextHop) -> Result<u32, FibError> {
        if let Some(&i) = self.singles.get(&h) {
            self.refs[i as usize] += 1;
            return Ok(i);
        }
        let i = self.take_slot()?;
        let s = &self.fib.slots;
        let (kind, v4) = match h.via {
            None => (KIND_CONNECTED, 0),
            Some(IpAddr::V4(g)) => (KIND_VIA4, u32::from(g)),
            Some(IpAddr::V6(g)) => {
                let g = u128::from(g);
                s.v6[2 * i as usize].store((g >> 64) as u64, Ordering::Release);
                s.v6[2 * i as usize + 1].store(g as u64, Ordering::Release);
                (KIND_VIA6, 0)
            }
        };
        s.meta[i as usize].store(
            u64::from(h.port) | kind << 24 | u64::from(v4) << 32,
            Ordering::Release,
        );
        self.paths[i as usize] = vec![h];
        self.refs[i as usize] = 1;
        self.singles.insert(h, i);
        Ok(i)
    }

    /// The slot for a route to `dst` over `paths` (sorted, deduplicated),
    /// referenced once more.
    fn hop_for(&mut self, dst: IpAddr, paths: &[NextHop]) -> Result<u32, FibError> {
        let family_ok = paths
            .iter()
            .all(|h| h.via.is_none_or(|v| v.is_ipv4() == dst.is_ipv4()));
        if let ([h], true) = (paths, family_ok) {
            return self.single_for(*h);
        }
        let mut p = paths.to_vec();
        p.sort();
        p.dedup();
        if p.is_empty() || p.len() > MAX_PATHS || !family_ok {
            self.stats.failed += 1;
            return Err(FibError::Paths(p.len()));
        }
        if p.len() == 1 {
            return self.single_for(p[0]);
        }
        if let Some(&i) = self.ids.get(&p) {
            self.refs[i as usize] += 1;
            return Ok(i);
        }
        let mut members = Vec::with_capacity(p.len());
        for h in &p {
            match self.single_for(*h) {
                Ok(m) => members.push(m),
                Err(e) => {
                    for m in members {
                        self.unref(m);
                    }
                    return Err(e);
                }
            }
        }
        let i = match self.take_slot() {
            Ok(i) => i,
            Err(e) => {
                for m in members {
                    self.unref(m);
                }
                return Err(e);
            }
        };
        let s = &self.fib.slots;
        let mut words = [0u64; MAX_PATHS / 4];
        for (k, m) in members.iter().enumerate() {
            words[k / 4] |= u64::from(*m as u16) << ((k % 4) * 16);
        }
        for (k, v) in words.into_iter().enumerate() {
            s.members[i as usize * 4 + k].store(v, Ordering::Release);
        }
        s.meta[i as usize].store((p.len() as u64) << 16 | KIND_MULTI << 24, Ordering::Release);
        self.paths[i as usize] = p.clone();
        self.refs[i as usize] = 1;
        self.ids.insert(p, i);
        self.fib.multipath.fetch_add(1, Ordering::Relaxed);
        Ok(i)
    }

    /// Drops one reference to slot `i`; the last one retires it (and its
    /// members' references).
    fn unref(&mut self, i: u32) {
        let r = &mut self.refs[i as usize];
        *r -= 1;
        if *r > 0 {
            return;
        }
        let p = std::mem::take(&mut self.paths[i as usize]);
        if let [h] = p.as_slice() {
            self.singles.remove(h);
        } else {
            self.ids.remove(&p);
            self.fib.multipath.fetch_sub(1, Ordering::Relaxed);
            for h in p {
                if let Some(&m) = self.singles.get(&h) {
                    self.unref(m);
                }
            }
        }
        // Workers forget what they cached for the slot at their next
        // round (its route's removal is published after this): by the
        // time it is reused, none can hold its old next hop.
        self.fib.hops.fetch_add(1, Ordering::AcqRel);
        self.retired.push((self.fib.epochs.retire(), i));
    }

    fn changed(&self) {
        self.fib.version.fetch_add(1, Ordering::AcqRel);
        self.fib.lpm4.set_routes(self.counts.0);
        self.fib.lpm6.set_routes(self.counts.1);
    }

    /// Adds `addr/len` over `paths` (several: ECMP), or replaces the paths
    /// of the route to that prefix. Returns whether anything changed.
    pub fn add(&mut self, addr: IpAddr, len: u8, paths: &[NextHop]) -> Result<bool, FibError> {
        let id = self.hop_for(addr, paths)?;
        let ep = self.fib.epochs.clone();
        let r = match addr {
            IpAddr::V4(a) if len <= 32 => {
                let net = u32::from(a) & mask4(len);
                let old = self.rules4[usize::from(len)].get(&net).copied();
                if old == Some(id) {
                    self.unref(id);
                    return Ok(false);
                }
                self.fib
                    .lpm4
                    .insert(&mut self.w4, &ep, a, len, id)
                    .map(|()| {
                        self.rules4[usize::from(len)].insert(net, id);
                        self.counts.0 += usize::from(old.is_none());
                        old
                    })
            }
            IpAddr::V6(a) if len <= 128 => {
                let net = network6(u128::from(a), len);
                let old = self.rules6[usize::from(len)].get(&net).copied();
                if old == Some(id) {
                    self.unref(id);
                    return Ok(false);
                }
                self.fib
                    .lpm6
                    .insert(&mut self.w6, &ep, a, len, id)
                    .map(|()| {
                        self.rules6[usize::from(len)].insert(net, id);
                        self.counts.1 += usize::from(old.is_none());
                        old
                    })
            }
            _ => Err(LpmError::PrefixLen(len)),
        };
        match r {
            Ok(old) => {
                match old {
                    Some(o) => {
                        self.unref(o);
                        self.stats.replaced += 1;
                    }
                    None => self.stats.added += 1,
                }
                self.changed();
                Ok(true)
            }
            Err(e) => {
                self.unref(id);
                self.stats.failed += 1;
                Err(e.into())
            }
        }
    }

    /// Deletes the route to `addr/len`; returns whether there was one.
    pub fn del(&mut self, addr: IpAddr, len: u8) -> bool {
        let ep = self.fib.epochs.clone();
        let id = match addr {
            IpAddr::V4(a) if len <= 32 => {
                let net = u32::from(a) & mask4(len);
                let Some(id) = self.rules4[usize::from(len)].remove(&net) else {
                    return false;
                };
                let rep = (0..len).rev().find_map(|l| {
                    self.rules4[usize::from(l)]
                        .get(&(net & mask4(l)))
                        .map(|&h| (l, h))
                });
                self.fib.lpm4.remove(&mut self.w4, &ep, a, len, rep);
                self.counts.0 -= 1;
                id
            }
            IpAddr::V6(a) if len <= 128 => {
                let net = network6(u128::from(a), len);
                let Some(id) = self.rules6[usize::from(len)].remove(&net) else {
                    return false;
                };
                let rep = (0..len).rev().find_map(|l| {
                    self.rules6[usize::from(l)]
                        .get(&network6(net, l))
                        .map(|&h| (l, h))
                });
                self.fib.lpm6.remove(&mut self.w6, &ep, a, len, rep);
                self.counts.1 -= 1;
                id
            }
            _ => return false,
        };
        self.unref(id);
        self.stats.deleted += 1;
        self.changed();
        true
    }

    /// The paths of the route to exactly `addr/len`, if there is one.
    pub fn get(&self, addr: IpAddr, len: u8) -> Option<&[NextHop]> {
        let id = match addr {
            IpAddr::V4(a) => *self
                .rules4
                .get(usize::from(len))?
                .get(&(u32::from(a) & mask4(len)))?,
            IpAddr::V6(a) => *self
                .rules6
                .get(usize::from(len))?
                .get(&network6(u128::from(a), len))?,
        };
        Some(&self.paths[id as usize])
    }

    /// The longest-prefix route for `dst` (control path): its paths.
    pub fn lookup(&self, dst: IpAddr) -> Option<&[NextHop]> {
        // The writer frees nothing while it reads: no reader slot needed.
        let nh = match dst {
            IpAddr::V4(a) => self.fib.lpm4.lookup(u32::from(a))?,
            IpAddr::V6(a) => self.fib.lpm6.lookup(u128::from(a))?,
        };
        self.paths.get(nh as usize).map(Vec::as_slice)
    }

    /// Every route (prefix, length, paths), IPv4 first, shortest first.
    pub fn routes(&self) -> impl Iterator<Item = (IpAddr, u8, &[NextHop])> + '_ {
        let v4 = self.rules4.iter().enumerate().flat_map(move |(l, m)| {
            m.iter().map(move |(&a, &h)| {
                (
                    IpAddr::V4(Ipv4Addr::from(a)),
                    l as u8,
                    self.paths[h as usize].as_slice(),
                )
            })
        });
        let v6 = self.rules6.iter().enumerate().flat_map(move |(l, m)| {
            m.iter().map(move |(&a, &h)| {
                (
                    IpAddr::V6(Ipv6Addr::from(a)),
                    l as u8,
                    self.paths[h as usize].as_slice(),
                )
            })
        });
        v4.chain(v6)
    }
}

#[cfg(test)]
mod tests;
