//! A global allocator that backs large allocations with transparent huge
//! pages, as DPDK backs its tables with hugepages: the route tables, the
//! classifier's bit vectors and the conntrack tables are tens of MiB read
//! at random, and with 4 KiB pages most of those reads also miss the TLB.
//!
//! Allocations of [`HUGE_MIN`] bytes or more are aligned to 2 MiB and
//! advised `MADV_HUGEPAGE` (the kernel's THP mode `madvise`, Debian's
//! default, then backs them with huge pages when it can); smaller ones go
//! to the system allocator unchanged. Install it in a binary with
//! `#[global_allocator] static A: pmd::alloc::HugeAlloc = pmd::alloc::HugeAlloc;`.

use std::alloc::{GlobalAlloc, Layout, System};

/// Size from which allocations get huge pages.
pub const HUGE_MIN: usize = 4 << 20;
const HUGE_ALIGN: usize = 2 << 20;

/// The allocator (see the module notes).
pub struct HugeAlloc;

fn huge(l: Layout) -> Option<Layout> {
    if l.size() < HUGE_MIN {
        return None;
    }
    Layout::from_size_align(l.size(), l.align().max(HUGE_ALIGN)).ok()
}

// SAFETY: every method forwards to `System` with either the caller's layout
// or, for large sizes, the same size with a larger alignment chosen by the
// pure function `huge`, so `dealloc` and `realloc` always pass `System` the
// layout the block was allocated with. `madvise` only changes how the
// kernel backs pages of a block we just allocated.
unsafe impl GlobalAlloc for HugeAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        match huge(l) {
            // SAFETY: the caller's non-zero layout, as GlobalAlloc requires.
            None => unsafe { System.alloc(l) },
            Some(h) => {
                // SAFETY: `h` is the caller's size (non-zero) with a larger
                // power-of-two alignment.
                let p = unsafe { System.alloc(h) };
                if !p.is_null() {
                    // SAFETY: advice on the `h.size()` bytes just allocated,
                    // which nothing else references yet.
                    unsafe { libc::madvise(p.cast(), h.size(), libc::MADV_HUGEPAGE) };
                }
                p
            }
        }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        match huge(l) {
            // SAFETY: as in `alloc`.
            None => unsafe { System.alloc_zeroed(l) },
            Some(h) => {
                // SAFETY: as in `alloc`.
                let p = unsafe { System.alloc_zeroed(h) };
                if !p.is_null() {
                    // SAFETY: as in `alloc`; the advice keeps the zeroes.
                    unsafe { libc::madvise(p.cast(), h.size(), libc::MADV_HUGEPAGE) };
                }
                p
            }
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `alloc`/`alloc_zeroed` with layout `l`,
        // which passed `System` exactly `huge(l).unwrap_or(l)`.
        unsafe { System.dealloc(p, huge(l).unwrap_or(l)) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        let Ok(nl) = Layout::from_size_align(new_size, l.align()) else {
            return std::ptr::null_mut();
        };
        if huge(l).is_none() && huge(nl).is_none() {
            // SAFETY: both layouts are the caller's own (small), so `System`
            // allocated `p` with `l` and may resize it in place.
            return unsafe { System.realloc(p, l, new_size) };
        }
        // SAFETY: `nl` is non-zero (GlobalAlloc::realloc's contract).
        let q = unsafe { self.alloc(nl) };
        if !q.is_null() {
            // SAFETY: `p` holds `l.size()` bytes and `q` at least `new_size`,
            // two distinct blocks; `p` is freed with the layout it was
            // allocated with.
            unsafe {
                std::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
                self.dealloc(p, l);
            }
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_are_aligned_and_usable() {
        let a = HugeAlloc;
        for size in [64, HUGE_MIN - 1, HUGE_MIN, 3 * HUGE_MIN + 5] {
            let l = Layout::from_size_align(size, 8).unwrap();
            // SAFETY: the layout is non-zero; the block is written within
            // its size, grown with realloc, and freed with its layout.
            unsafe {
                let p = a.alloc_zeroed(l);
                assert!(!p.is_null());
                if size >= HUGE_MIN {
                    assert_eq!(p as usize % HUGE_ALIGN, 0);
                }
                assert_eq!(*p.add(size - 1), 0);
                *p.add(size - 1) = 7;
                let q = a.realloc(p, l, size * 2);
                assert_eq!(*q.add(size - 1), 7);
                a.dealloc(q, Layout::from_size_align(size * 2, 8).unwrap());
            }
        }
    }
}
