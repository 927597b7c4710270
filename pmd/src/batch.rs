//! A fixed-capacity burst of packets, reused from burst to burst.

use arrayvec::ArrayVec;

/// Largest burst any queue handles (DPDK's `RTE_MAX_BURST`-style bound).
pub const MAX_BURST: usize = 512;

/// A burst of packets: inline storage for [`MAX_BURST`] buffers, filled up to
/// a configured burst size. Never reallocates; create one per queue or port
/// at start-up and reuse it.
pub struct Batch<B> {
    bufs: ArrayVec<B, MAX_BURST>,
    burst: usize,
}

impl<B> Batch<B> {
    /// An empty batch holding at most `burst` packets (clamped to 1..=512).
    pub fn new(burst: usize) -> Self {
        Batch {
            bufs: ArrayVec::new(),
            burst: burst.clamp(1, MAX_BURST),
        }
    }

    /// Changes the burst size (clamped to 1..=512); packets already in the
    /// batch stay.
    #[inline]
    pub fn set_burst(&mut self, burst: usize) {
        self.burst = burst.clamp(1, MAX_BURST);
    }

    /// The configured burst size.
    #[inline]
    pub fn burst(&self) -> usize {
        self.burst
    }

    /// Packets in the batch.
    #[inline]
    pub fn len(&self) -> usize {
        self.bufs.len()
    }

    /// True when empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.bufs.is_empty()
    }

    /// True when it holds a whole burst.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.bufs.len() >= self.burst
    }

    /// Packets that can still be added before the burst is full.
    #[inline]
    pub fn room(&self) -> usize {
        self.burst.saturating_sub(self.bufs.len())
    }

    /// Adds a packet; gives it back when the batch is full.
    #[inline]
    pub fn push(&mut self, b: B) -> Result<(), B> {
        if self.is_full() {
            return Err(b);
        }
        // Cannot fail: burst <= MAX_BURST.
        self.bufs.try_push(b).map_err(|e| e.element())
    }

    /// Removes the last packet.
    #[inline]
    pub fn pop(&mut self) -> Option<B> {
        self.bufs.pop()
    }

    /// The packets.
    #[inline]
    pub fn as_slice(&self) -> &[B] {
        &self.bufs
    }

    /// The packets, mutable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [B] {
        &mut self.bufs
    }

    /// Iterates over the packets.
    #[inline]
    pub fn iter(&self) -> std::slice::Iter<'_, B> {
        self.bufs.iter()
    }

    /// Iterates mutably over the packets.
    #[inline]
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, B> {
        self.bufs.iter_mut()
    }

    /// Removes and yields the first `n` packets (all if `n >= len`); the rest
    /// move to the front.
    #[inline]
    pub fn drain_front(&mut self, n: usize) -> arrayvec::Drain<'_, B, MAX_BURST> {
        let n = n.min(self.bufs.len());
        self.bufs.drain(..n)
    }

    /// Keeps the packets `keep` says yes to (in order), dropping the rest.
    pub fn retain(&mut self, keep: impl FnMut(&mut B) -> bool) {
        self.bufs.retain(keep);
    }

    /// Removes and yields every packet.
    #[inline]
    pub fn drain(&mut self) -> arrayvec::Drain<'_, B, MAX_BURST> {
        self.bufs.drain(..)
    }

    /// Drops every packet (returning buffers to their pools).
    #[inline]
    pub fn clear(&mut self) {
        self.bufs.clear();
    }

    /// Where the next packet goes (for a driver filling the batch in place).
    #[inline]
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    pub(crate) fn spare_ptr(&mut self) -> *mut B {
        // SAFETY: `len <= MAX_BURST`, so the pointer is within (or one past)
        // the inline storage.
        unsafe { self.bufs.as_mut_ptr().add(self.bufs.len()) }
    }

    /// Marks `n` more packets as present.
    ///
    /// # Safety
    ///
    /// The `n` slots after the current length must hold initialised values
    /// (written through [`Batch::spare_ptr`]), and `len + n` must not exceed
    /// the burst.
    #[inline]
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    pub(crate) unsafe fn grow(&mut self, n: usize) {
        let len = self.bufs.len();
        debug_assert!(len + n <= self.burst);
        // SAFETY: the caller initialised the slots and stays in capacity.
        unsafe { self.bufs.set_len(len + n) };
    }

    /// Removes the first `n` packets without dropping them (the driver now
    /// owns them); the rest move to the front.
    #[inline]
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    pub(crate) fn forget_front(&mut self, n: usize) {
        let len = self.bufs.len();
        let n = n.min(len);
        if n == len {
            // SAFETY: shortening to zero without dropping: the values are
            // forgotten, as documented.
            unsafe { self.bufs.set_len(0) };
            return;
        }
        let p = self.bufs.as_mut_ptr();
        // SAFETY: moves the `len - n` initialised values after the first `n`
        // to the front (regions may overlap: `copy`), then shortens the
        // vector so that the moved-from slots are not dropped twice and the
        // first `n` values are not dropped at all.
        unsafe {
            std::ptr::copy(p.add(n), p, len - n);
            self.bufs.set_len(len - n);
        }
    }
}

impl<B> std::fmt::Debug for Batch<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("len", &self.len())
            .field("burst", &self.burst)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_bounds_and_drain() {
        let mut b = Batch::new(3);
        assert_eq!(b.room(), 3);
        for i in 0..3 {
            b.push(i).unwrap();
        }
        assert_eq!(b.push(9), Err(9));
        assert!(b.is_full());
        let first: Vec<_> = b.drain_front(2).collect();
        assert_eq!(first, vec![0, 1]);
        assert_eq!(b.as_slice(), &[2]);
        assert_eq!(Batch::<u8>::new(0).burst(), 1);
        assert_eq!(Batch::<u8>::new(10_000).burst(), MAX_BURST);
    }

    /// In-place filling and forgetting keep every value accounted for: none
    /// dropped twice, the forgotten ones not dropped at all.
    #[test]
    fn grow_and_forget_front() {
        use std::rc::Rc;
        let token = Rc::new(());
        let mut b: Batch<Rc<()>> = Batch::new(8);
        b.push(token.clone()).unwrap();
        let p = b.spare_ptr();
        // SAFETY: three slots after the current one, within the burst.
        unsafe {
            for i in 0..3 {
                p.add(i).write(token.clone());
            }
            b.grow(3);
        }
        assert_eq!((b.len(), Rc::strong_count(&token)), (4, 5));
        let forgotten: Vec<*const ()> = b.as_slice()[..2].iter().map(Rc::as_ptr).collect();
        b.forget_front(2);
        assert_eq!(b.len(), 2);
        b.clear();
        // Two dropped by clear, two forgotten (leaked on purpose here).
        assert_eq!(Rc::strong_count(&token), 3);
        assert_eq!(forgotten.len(), 2);
    }
}
