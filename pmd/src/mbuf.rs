//! The native packet buffer ([`Mbuf`]) and its pool ([`Pool`]).
//!
//! A pool is one zeroed arena of fixed-size slots, allocated once. A slot is
//! a 64-byte header (like `rte_mbuf`'s first cache line) followed by
//! [`HEADROOM`] bytes of headroom and the data room. Free slots live in a
//! shared free list behind a mutex and, in front of it, in a per-thread cache
//! (like `rte_mempool`'s per-lcore cache): allocation and free touch only the
//! calling thread's cache, and the mutex is taken once per [`CACHE_SIZE`]
//! buffers to refill or flush it. A worker that receives and frees its own
//! buffers (null ports) never leaves its cache.
//!
//! Pools live for the rest of the process, as DPDK mempools usually do:
//! every `Mbuf` points at its pool, so the pool must outlive all buffers.
//! The arena's pages are committed only when a slot is first used.

use crate::batch::Batch;
use crate::PacketBuf;
use std::alloc::{alloc_zeroed, Layout};
use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Bytes of headroom in front of the packet data (as `RTE_PKTMBUF_HEADROOM`).
pub const HEADROOM: usize = 128;
/// Default data room after the headroom.
pub const DEFAULT_DATA_ROOM: usize = 2048;
/// The largest data room a pool can have (offsets and lengths are `u16`).
pub const MAX_DATA_ROOM: usize = u16::MAX as usize - HEADROOM;

/// The data room (after the headroom) for frames of an `mtu`-byte IP
/// packet with its Ethernet header and two VLAN tags: the default's up to
/// an MTU of 2,026, beyond it (jumbo frames) a multiple of 1 KiB.
pub fn data_room_for(mtu: usize) -> usize {
    let need = mtu + 14 + 8;
    if need <= DEFAULT_DATA_ROOM {
        DEFAULT_DATA_ROOM
    } else {
        need.div_ceil(1024) * 1024
    }
}
/// Buffers a thread keeps cached per pool before flushing to the shared list.
pub const CACHE_SIZE: usize = 256;
/// Bytes of the buffer header at the start of each slot.
pub const HDR_LEN: usize = 64;

/// The buffer header, at the start of each slot.
#[repr(C, align(64))]
struct Hdr {
    pool: &'static PoolInner,
    data_off: u16,
    data_len: u16,
    port: u16,
    queue: u16,
    rss: u32,
    _pad: u32,
    rx_tsc: u64,
    /// Backend-private word (the softnic stores the TX time here).
    aux: u64,
}

const _: () = assert!(std::mem::size_of::<Hdr>() == HDR_LEN);

struct PoolInner {
    id: usize,
    name: String,
    slots: usize,
    room: usize,
    /// The arena: first slot's address, bytes, bytes per slot.
    base: usize,
    bytes: usize,
    slot_size: usize,
    shared: Mutex<Vec<usize>>,
}

// SAFETY: the arena the free lists point into is owned by the pool for the
// life of the process (it is never freed). Slots are handed out with unique ownership (an `Mbuf`), and the
// free lists are guarded by the mutex or are thread-local.
unsafe impl Send for PoolInner {}
// SAFETY: see above; shared state is only the mutex-guarded free list.
unsafe impl Sync for PoolInner {}

/// Errors creating a pool.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The size is zero or too large.
    #[error("pool {name}: {n} buffers of {room} bytes is not a valid size")]
    Size {
        /// Pool name.
        name: String,
        /// Buffers asked for.
        n: usize,
        /// Data room asked for.
        room: usize,
    },
    /// The allocation failed.
    #[error("pool {name}: cannot allocate {bytes} bytes")]
    Alloc {
        /// Pool name.
        name: String,
        /// Bytes asked for.
        bytes: usize,
    },
}

/// A pool of packet buffers. Cheap to copy; lives for the process.
#[derive(Clone, Copy)]
pub struct Pool(&'static PoolInner);

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("name", &self.0.name)
            .field("slots", &self.0.slots)
            .finish()
    }
}

static NEXT_POOL_ID: AtomicUsize = AtomicUsize::new(0);

impl Pool {
    /// Creates a pool of `n` buffers with `data_room` bytes after the
    /// headroom.
    pub fn new(name: &str, n: usize, data_room: usize) -> Result<Pool, PoolError> {
        let bad = || PoolError::Size {
            name: name.to_string(),
            n,
            room: data_room,
        };
        if n == 0 || data_room == 0 || data_room > MAX_DATA_ROOM || n > u32::MAX as usize {
            return Err(bad());
        }
        let room = HEADROOM + data_room;
        let slot_size = (HDR_LEN + room).next_multiple_of(64);
        let bytes = slot_size.checked_mul(n).ok_or_else(bad)?;
        // 2 MiB alignment lets transparent huge pages back the arena.
        let layout = Layout::from_size_align(bytes, 2 << 20).map_err(|_| bad())?;
        // SAFETY: the layout has a non-zero size (n > 0, slot_size >= 64).
        let base = unsafe { alloc_zeroed(layout) };
        let base = NonNull::new(base).ok_or_else(|| PoolError::Alloc {
            name: name.to_string(),
            bytes,
        })?;
        // SAFETY: `base` is a fresh, zeroed allocation of `bytes` bytes that
        // nothing else references yet.
        crate::sys::advise_hugepages(unsafe {
            std::slice::from_raw_parts_mut(base.as_ptr(), bytes)
        });
        let addr = base.as_ptr() as usize;
        // Highest address first so that allocation starts at the bottom.
        let free: Vec<usize> = (0..n).rev().map(|i| addr + i * slot_size).collect();
        let inner = Box::leak(Box::new(PoolInner {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            name: name.to_string(),
            slots: n,
            room,
            base: addr,
            bytes,
            slot_size,
            shared: Mutex::new(free),
        }));
        Ok(Pool(inner))
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Total buffers.
    pub fn capacity(&self) -> usize {
        self.0.slots
    }

    /// The arena: its address, length in bytes, and bytes per slot (slots
    /// are contiguous from the address). An AF_XDP UMEM registers it.
    pub fn arena(&self) -> (usize, usize, usize) {
        (self.0.base, self.0.bytes, self.0.slot_size)
    }

    /// Whether `m` is one of this pool's buffers.
    #[inline(always)]
    pub fn owns(&self, m: &Mbuf) -> bool {
        std::ptr::eq(m.h().pool, self.0)
    }

    /// Buffers in the shared free list (not counting per-thread caches).
    pub fn available_shared(&self) -> usize {
        self.0.shared.lock().map(|v| v.len()).unwrap_or(0)
    }

    /// Buffers cached by the calling thread.
    pub fn cached_here(&self) -> usize {
        with_cache(self.0, |c| c.len()).unwrap_or(0)
    }

    /// Returns the calling thread's cached buffers to the shared list (call
    /// when a thread stops using the pool; thread exit does it too).
    pub fn flush_cache(&self) {
        with_cache(self.0, |c| flush(self.0, c, 0));
    }

    /// Allocates one buffer with an empty packet.
    pub fn alloc(&self) -> Option<Mbuf> {
        let p = self.0;
        let addr = with_cache(p, |c| {
            if c.is_empty() {
                refill(p, c, 1);
            }
            c.pop()
        })
        .unwrap_or_else(|| p.shared.lock().ok()?.pop())?;
        // SAFETY: addr came off a free list, so it is a slot of this pool
        // that no one else owns.
        Some(unsafe { Mbuf::init(p, addr) })
    }

    /// Allocates up to `n` buffers (bounded by `out.room()`), appends them to
    /// `out` and returns how many. Fewer than asked means the pool ran dry.
    pub fn alloc_bulk(&self, out: &mut Batch<Mbuf>, n: usize) -> usize {
        let p = self.0;
        let n = n.min(out.room());
        with_cache(p, |c| {
            if c.len() < n {
                refill(p, c, n);
            }
            let k = n.min(c.len());
            for _ in 0..k {
                let addr = c.pop().unwrap_or_default();
                // SAFETY: addr came off this thread's free list of pool p.
                let m = unsafe { Mbuf::init(p, addr) };
                // Cannot fail: k <= out.room().
                let _ = out.push(m);
            }
            k
        })
        .unwrap_or(0)
    }
}

/// Per-thread caches, indexed by pool id.
struct Caches(Vec<Option<(&'static PoolInner, Vec<usize>)>>);

impl Drop for Caches {
    fn drop(&mut self) {
        for (p, c) in self.0.iter_mut().flatten() {
            flush(p, c, 0);
        }
    }
}

thread_local! {
    static CACHES: RefCell<Caches> = const { RefCell::new(Caches(Vec::new())) };
}

/// Runs `f` on the calling thread's cache for pool `p`; `None` while the
/// thread is being torn down.
#[inline]
fn with_cache<R>(p: &'static PoolInner, f: impl FnOnce(&mut Vec<usize>) -> R) -> Option<R> {
    CACHES
        .try_with(|cs| {
            let mut cs = cs.borrow_mut();
            if cs.0.len() <= p.id {
                cs.0.resize_with(p.id + 1, || None);
            }
            let (_, c) = cs.0[p.id].get_or_insert_with(|| (p, Vec::with_capacity(3 * CACHE_SIZE)));
            f(c)
        })
        .ok()
}

/// Moves buffers from the shared list into cache `c` so that it holds at
/// least `want` (if the pool has them) plus a cache's worth.
#[cold]
fn refill(p: &PoolInner, c: &mut Vec<usize>, want: usize) {
    if let Ok(mut s) = p.shared.lock() {
        let take = (want + CACHE_SIZE).min(s.len());
        let at = s.len() - take;
        c.extend(s.drain(at..));
    }
}

/// Moves buffers from cache `c` to the shared list until `keep` remain.
#[cold]
fn flush(p: &PoolInner, c: &mut Vec<usize>, keep: usize) {
    if c.len() > keep {
        if let Ok(mut s) = p.shared.lock() {
            s.extend(c.drain(keep..));
        }
    }
}

#[inline]
fn release(p: &'static PoolInner, addr: usize) {
    let cached = with_cache(p, |c| {
        c.push(addr);
        if c.len() >= 2 * CACHE_SIZE {
            flush(p, c, CACHE_SIZE);
        }
    });
    if cached.is_none() {
        if let Ok(mut s) = p.shared.lock() {
            s.push(addr);
        }
    }
}

/// Frees many buffers with one access to the per-thread caches (what
/// `rte_pktmbuf_free_bulk` does); cheaper than dropping them one by one.
#[inline]
pub fn free_bulk(bufs: impl Iterator<Item = Mbuf>) {
    let mut bufs = bufs.peekable();
    let done = CACHES.try_with(|cs| {
        let mut cs = cs.borrow_mut();
        while let Some(m) = bufs.next() {
            let p = m.h().pool;
            let addr = m.hdr.as_ptr() as usize;
            std::mem::forget(m);
            if cs.0.len() <= p.id {
                cs.0.resize_with(p.id + 1, || None);
            }
            let (_, c) = cs.0[p.id].get_or_insert_with(|| (p, Vec::with_capacity(3 * CACHE_SIZE)));
            c.push(addr);
            // Same pool as the next buffer (the usual case): stay on this cache.
            while let Some(m) = bufs.next_if(|n| std::ptr::eq(n.h().pool, p)) {
                c.push(m.hdr.as_ptr() as usize);
                std::mem::forget(m);
            }
            if c.len() >= 2 * CACHE_SIZE {
                flush(p, c, CACHE_SIZE);
            }
        }
    });
    // Thread teardown: drop the rest one by one (they go to the shared list).
    if done.is_err() {
        bufs.for_each(drop);
    }
}

/// A native packet buffer: unique owner of one pool slot. Dropping it returns
/// the slot to the pool through the calling thread's cache.
pub struct Mbuf {
    hdr: NonNull<Hdr>,
}

// SAFETY: an Mbuf is the unique owner of its slot (like Box); moving it to
// another thread moves that ownership. The pool it points at is Sync.
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// Writes a fresh header into slot `addr` of pool `p`.
    ///
    /// # Safety
    /// `addr` must be a free slot of `p` that the caller now owns.
    #[inline(always)]
    unsafe fn init(p: &'static PoolInner, addr: usize) -> Mbuf {
        let hdr = addr as *mut Hdr;
        // SAFETY: per the contract, the slot is ours; it is 64-byte aligned
        // and at least HDR_LEN bytes long.
        unsafe {
            hdr.write(Hdr {
                pool: p,
                data_off: HEADROOM as u16,
                data_len: 0,
                port: 0,
                queue: 0,
                rss: 0,
                _pad: 0,
                rx_tsc: 0,
                aux: 0,
            });
            Mbuf {
                hdr: NonNull::new_unchecked(hdr),
            }
        }
    }

    /// Gives up the buffer without freeing it and returns its slot's
    /// address (for a device that takes ownership, like an AF_XDP fill or
    /// TX ring). [`Mbuf::from_slot`] takes it back.
    #[inline(always)]
    pub fn into_slot(self) -> usize {
        let addr = self.hdr.as_ptr() as usize;
        std::mem::forget(self);
        addr
    }

    /// Takes back a buffer given up with [`Mbuf::into_slot`].
    ///
    /// # Safety
    /// `addr` must have come from `into_slot` and not been taken back
    /// since, and nothing may write the slot's first [`HDR_LEN`] bytes in
    /// between.
    #[inline(always)]
    pub unsafe fn from_slot(addr: usize) -> Mbuf {
        // SAFETY: per the contract, a slot with a live header that the
        // caller owns again; slots are never at address 0.
        Mbuf {
            hdr: unsafe { NonNull::new_unchecked(addr as *mut Hdr) },
        }
    }

    /// Sets the packet to `len` bytes at `off` bytes into the room (what a
    /// device that wrote the frame itself reports). False if it does not
    /// fit.
    #[inline(always)]
    pub fn set_data(&mut self, off: usize, len: usize) -> bool {
        // No sum that could wrap: `off <= room` is checked first.
        let room = self.h().pool.room;
        if off > room || len > room - off {
            return false;
        }
        let h = self.h_mut();
        h.data_off = off as u16;
        h.data_len = len as u16;
        true
    }

    /// Bytes from the start of the slot to the packet data.
    #[inline(always)]
    pub fn data_offset_in_slot(&self) -> usize {
        HDR_LEN + usize::from(self.h().data_off)
    }

    #[inline(always)]
    fn h(&self) -> &Hdr {
        // SAFETY: hdr points at the initialised header of a slot we own.
        unsafe { self.hdr.as_ref() }
    }

    #[inline(always)]
    fn h_mut(&mut self) -> &mut Hdr {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { self.hdr.as_mut() }
    }

    #[inline(always)]
    fn room_ptr(&self) -> *mut u8 {
        // SAFETY: the room starts HDR_LEN bytes into the slot we own.
        unsafe { self.hdr.as_ptr().cast::<u8>().add(HDR_LEN) }
    }

    /// Starts loading the header's cache line and the first line of data
    /// at the usual offset (`HEADROOM`; a hint, the data may start
    /// elsewhere), without reading either: a burst's buffers handed over
    /// by another core are prefetched all at once before they are read,
    /// so that their cache-line transfers overlap.
    #[inline(always)]
    pub(crate) fn prefetch(&self) {
        let h = self.hdr.as_ptr().cast::<u8>();
        crate::sys::prefetch(h);
        crate::sys::prefetch(h.wrapping_add(HDR_LEN + HEADROOM));
    }

    /// Bytes of room (headroom + data room) in this buffer.
    pub fn room(&self) -> usize {
        self.h().pool.room
    }

    /// Sets the packet to `len` bytes starting after the default headroom,
    /// without touching the bytes (what `net_null` does). False if too long.
    #[inline(always)]
    pub fn reset_len(&mut self, len: usize) -> bool {
        let room = self.h().pool.room;
        if len > room - HEADROOM {
            return false;
        }
        let h = self.h_mut();
        h.data_off = HEADROOM as u16;
        h.data_len = len as u16;
        true
    }

    /// Replaces the packet with a copy of `bytes`. False (unchanged) if it
    /// does not fit.
    #[inline]
    pub fn copy_from(&mut self, bytes: &[u8]) -> bool {
        if !self.reset_len(bytes.len()) {
            return false;
        }
        self.data_mut().copy_from_slice(bytes);
        true
    }

    /// Sets the receive metadata (what a NIC writes into the descriptor).
    #[inline(always)]
    pub fn set_rx_meta(&mut self, port: u16, queue: u16, rx_tsc: u64, rss: u32) {
        let h = self.h_mut();
        h.port = port;
        h.queue = queue;
        h.rx_tsc = rx_tsc;
        h.rss = rss;
    }

    /// The backend-private word (softnic: TX timestamp).
    #[inline(always)]
    pub(crate) fn aux(&self) -> u64 {
        self.h().aux
    }

    /// Sets the backend-private word.
    #[inline(always)]
    pub(crate) fn set_aux(&mut self, v: u64) {
        self.h_mut().aux = v;
    }

    /// The pool this buffer belongs to.
    pub fn pool(&self) -> Pool {
        Pool(self.h().pool)
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        release(self.h().pool, self.hdr.as_ptr() as usize);
    }
}

impl std::fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mbuf")
            .field("len", &self.len())
            .field("port", &self.port())
            .field("queue", &self.queue())
            .finish()
    }
}

impl pipeline::fwd::Frame for Mbuf {
    #[inline(always)]
    fn prefetch(addr: *const u8) {
        crate::sys::prefetch(addr);
    }
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        self.data()
    }
    #[inline(always)]
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.data_mut()
    }
    fn set_len(&mut self, len: usize) -> bool {
        let room = self.h().pool.room;
        let h = self.h_mut();
        // data_off <= room is an invariant: the subtraction cannot wrap.
        if len > room - usize::from(h.data_off) {
            return false;
        }
        h.data_len = len as u16;
        true
    }
    fn cut_front(&mut self, n: usize) -> bool {
        PacketBuf::adj(self, n)
    }
    fn grow_front(&mut self, n: usize) -> bool {
        PacketBuf::prepend(self, n).is_some()
    }
}

impl PacketBuf for Mbuf {
    #[inline(always)]
    fn data(&self) -> &[u8] {
        let h = self.h();
        // SAFETY: data_off + data_len <= room is an invariant kept by every
        // method that changes them; the bytes belong to the slot we own.
        unsafe {
            std::slice::from_raw_parts(
                self.room_ptr().add(usize::from(h.data_off)),
                usize::from(h.data_len),
            )
        }
    }

    #[inline(always)]
    fn data_mut(&mut self) -> &mut [u8] {
        let (off, len) = (
            usize::from(self.h().data_off),
            usize::from(self.h().data_len),
        );
        // SAFETY: as in data(); &mut self makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.room_ptr().add(off), len) }
    }

    #[inline(always)]
    fn len(&self) -> usize {
        usize::from(self.h().data_len)
    }

    #[inline(always)]
    fn port(&self) -> u16 {
        self.h().port
    }

    #[inline(always)]
    fn queue(&self) -> u16 {
        self.h().queue
    }

    #[inline(always)]
    fn rx_tsc(&self) -> u64 {
        self.h().rx_tsc
    }

    #[inline(always)]
    fn rss_hash(&self) -> u32 {
        self.h().rss
    }

    fn prepend(&mut self, n: usize) -> Option<&mut [u8]> {
        let h = self.h_mut();
        if n > usize::from(h.data_off) {
            return None;
        }
        h.data_off -= n as u16;
        h.data_len += n as u16;
        Some(&mut self.data_mut()[..n])
    }

    fn append(&mut self, n: usize) -> Option<&mut [u8]> {
        let room = self.h().pool.room;
        let h = self.h_mut();
        let old = usize::from(h.data_len);
        // data_off + data_len <= room is an invariant: no wrap.
        if n > room - usize::from(h.data_off) - old {
            return None;
        }
        h.data_len += n as u16;
        Some(&mut self.data_mut()[old..])
    }

    fn adj(&mut self, n: usize) -> bool {
        let h = self.h_mut();
        if n > usize::from(h.data_len) {
            return false;
        }
        h.data_off += n as u16;
        h.data_len -= n as u16;
        true
    }

    fn trim(&mut self, n: usize) -> bool {
        let h = self.h_mut();
        if n > usize::from(h.data_len) {
            return false;
        }
        h.data_len -= n as u16;
        true
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_jumbo_mtu_gets_a_larger_room() {
        assert_eq!(data_room_for(1500), DEFAULT_DATA_ROOM);
        assert_eq!(data_room_for(2026), DEFAULT_DATA_ROOM);
        assert_eq!(data_room_for(2027), 3072);
        assert_eq!(data_room_for(9000), 9216);
        // A frame of the MTU with two tags fits, and the pool takes it.
        let p = Pool::new("jumbo", 4, data_room_for(9000)).unwrap();
        let mut m = p.alloc().unwrap();
        assert!(m.copy_from(&[7u8; 9022]));
        assert!(!m.copy_from(&[7u8; 9217]));
    }

    use super::*;

    #[test]
    fn slots_given_up_come_back_whole() {
        // The AF_XDP UMEM's shape: 2 KiB slots, contiguous from the base.
        let p = Pool::new("slots", 64, 2048 - HDR_LEN - HEADROOM).unwrap();
        let (base, bytes, slot) = p.arena();
        assert_eq!((slot, bytes), (2048, 64 * 2048));
        assert_eq!(base % 4096, 0);
        let mut m = p.alloc().unwrap();
        assert!(m.copy_from(b"frame"));
        assert!(p.owns(&m));
        let addr = m.into_slot();
        assert_eq!((addr - base) % slot, 0);
        // A device wrote 60 bytes 256 bytes into the slot.
        // SAFETY: given up just above; the test writes only the room.
        unsafe { std::ptr::write_bytes((addr + 256) as *mut u8, 0xab, 60) };
        // SAFETY: given up above, taken back once.
        let mut m = unsafe { Mbuf::from_slot(addr) };
        assert!(m.set_data(256 - HDR_LEN, 60));
        assert_eq!(m.data_offset_in_slot(), 256);
        assert_eq!(m.data(), &[0xab; 60][..]);
        assert!(!m.set_data(256 - HDR_LEN, 2048));
        let other = Pool::new("other", 1, 64).unwrap();
        assert!(!other.owns(&m));
        drop(m);
        // Nothing lost: all 64 can be allocated again.
        let all: Vec<Mbuf> = (0..64).map_while(|_| p.alloc()).collect();
        assert_eq!(all.len(), 64);
    }

    #[test]
    fn alloc_free_recycles_without_loss() {
        let p = Pool::new("t-recycle", 1000, 256).unwrap();
        let mut held = Vec::new();
        while let Some(m) = p.alloc() {
            held.push(m);
        }
        assert_eq!(held.len(), 1000, "every slot can be allocated");
        drop(held);
        p.flush_cache();
        assert_eq!(p.available_shared(), 1000, "every slot came back");
    }

    #[test]
    fn bulk_alloc_respects_room_and_pool() {
        let p = Pool::new("t-bulk", 40, 256).unwrap();
        let mut b = Batch::new(32);
        assert_eq!(p.alloc_bulk(&mut b, 100), 32);
        let mut b2 = Batch::new(32);
        assert_eq!(p.alloc_bulk(&mut b2, 32), 8, "pool ran dry");
        b.clear();
        b2.clear();
        p.flush_cache();
        assert_eq!(p.available_shared(), 40);
    }

    /// Lengths and offsets near `usize::MAX` are refused, not wrapped
    /// (a wrapped sum passed the old checks and gave slices past the slot).
    #[test]
    fn huge_lengths_are_refused_without_wrapping() {
        use pipeline::fwd::Frame;
        let pool = Pool::new("huge", 4, 256).unwrap();
        let mut m = pool.alloc().unwrap();
        assert!(m.copy_from(&[7; 60]));
        for n in [
            usize::MAX,
            usize::MAX - HEADROOM + 1,
            usize::MAX - 100,
            1 << 16,
        ] {
            assert!(!m.reset_len(n), "reset_len({n})");
            assert!(!m.set_data(HEADROOM, n), "set_data(HEADROOM, {n})");
            assert!(!m.set_data(n, 2), "set_data({n}, 2)");
            assert!(!Frame::set_len(&mut m, n), "set_len({n})");
            assert!(m.append(n).is_none(), "append({n})");
            assert!(m.prepend(n).is_none(), "prepend({n})");
            assert!(!m.adj(n) && !m.trim(n), "adj/trim({n})");
            assert_eq!(m.len(), 60, "unchanged after {n}");
        }
        // The largest that fits still does.
        assert!(m.set_data(0, m.room()));
        assert_eq!(m.len(), HEADROOM + 256);
        assert!(m.set_data(m.room(), 0));
        assert!(!m.set_data(m.room() + 1, 0));
        assert!(Pool::new("big", 1, MAX_DATA_ROOM + 1).is_err());
        assert!(Pool::new("wrap", 1, usize::MAX - 10).is_err());
        assert!(Pool::new("max", 1, MAX_DATA_ROOM).is_ok());
    }

    #[test]
    fn headroom_operations() {
        let p = Pool::new("t-head", 4, 64).unwrap();
        let mut m = p.alloc().unwrap();
        assert!(m.copy_from(&[1, 2, 3, 4]));
        assert_eq!(m.data(), &[1, 2, 3, 4]);
        m.prepend(2).unwrap().copy_from_slice(&[9, 9]);
        assert_eq!(m.data(), &[9, 9, 1, 2, 3, 4]);
        assert!(m.adj(3));
        assert_eq!(m.data(), &[2, 3, 4]);
        m.append(1).unwrap()[0] = 5;
        assert!(m.trim(2));
        assert_eq!(m.data(), &[2, 3]);
        assert!(!m.trim(3));
        assert!(m.prepend(HEADROOM + 10).is_none());
        assert!(m.append(64 + HEADROOM).is_none());
        assert!(!m.copy_from(&[0; 65 + HEADROOM]));
        m.set_rx_meta(3, 1, 77, 0xabcd);
        assert_eq!(
            (m.port(), m.queue(), m.rx_tsc(), m.rss_hash()),
            (3, 1, 77, 0xabcd)
        );
    }

    #[test]
    fn bulk_free_returns_everything() {
        let a = Pool::new("t-bulkfree-a", 700, 128).unwrap();
        let b = Pool::new("t-bulkfree-b", 700, 128).unwrap();
        let mut v = Vec::new();
        for i in 0..1000 {
            v.push(if i % 3 == 0 { a.alloc() } else { b.alloc() }.unwrap());
        }
        while let Some(m) = a.alloc() {
            v.push(m);
        }
        while let Some(m) = b.alloc() {
            v.push(m);
        }
        free_bulk(v.into_iter());
        a.flush_cache();
        b.flush_cache();
        assert_eq!(a.available_shared(), 700);
        assert_eq!(b.available_shared(), 700);
    }

    #[test]
    fn buffers_cross_threads() {
        let p = Pool::new("t-threads", 600, 128).unwrap();
        let mut v = Vec::new();
        for _ in 0..600 {
            v.push(p.alloc().unwrap());
        }
        std::thread::spawn(move || drop(v)).join().unwrap();
        // The other thread's cache was flushed at its exit.
        p.flush_cache();
        assert_eq!(p.available_shared(), 600);
    }
}
