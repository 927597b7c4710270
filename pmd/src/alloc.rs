//! A global allocator that backs large allocations with transparent huge
//! pages, as DPDK backs its tables with hugepages: the route tables, the
//! classifier's bit vectors and the conntrack tables are tens of MiB read
//! at random, and with 4 KiB pages most of those reads also miss the TLB.
//!
//! Allocations of [`HUGE_MIN`] bytes or more are mapped directly
//! (anonymous `mmap`), aligned to 2 MiB and advised `MADV_HUGEPAGE` before
//! anything touches them (the kernel's THP mode `madvise`, Debian's
//! default, then backs them with huge pages as they are first written);
//! smaller ones go to the system allocator unchanged. A zeroed large
//! allocation costs nothing until it is written: the mapping is zero.
//! (Going through `malloc` instead, as this allocator once did, lost the
//! huge pages: `System.alloc_zeroed` with a 2 MiB alignment is
//! `posix_memalign` plus a `memset`, which faulted in every page as 4 KiB
//! before the advice came, so a 64 MiB route table was read through
//! 16,384 TLB entries' worth of small pages; measured, a full-table
//! router at 486 cycles/packet that way against 350 with huge pages.)
//! Install it in a binary with
//! `#[global_allocator] static A: pmd::alloc::HugeAlloc = pmd::alloc::HugeAlloc;`.

use std::alloc::{GlobalAlloc, Layout, System};

/// Size from which allocations get huge pages.
pub const HUGE_MIN: usize = 4 << 20;
const HUGE_ALIGN: usize = 2 << 20;

/// The allocator (see the module notes).
pub struct HugeAlloc;

/// Bytes mapped for a large layout (whole huge pages), or `None` for a
/// small one. Alignments above 2 MiB are not served from mappings.
fn huge(l: Layout) -> Option<usize> {
    if l.size() < HUGE_MIN || l.align() > HUGE_ALIGN {
        return None;
    }
    l.size().checked_next_multiple_of(HUGE_ALIGN)
}

/// Maps `len` bytes (a multiple of 2 MiB) at a 2 MiB boundary, advised
/// `MADV_HUGEPAGE`; null when the kernel refuses.
fn map_huge(len: usize) -> *mut u8 {
    let Some(over) = len.checked_add(HUGE_ALIGN) else {
        return std::ptr::null_mut();
    };
    // SAFETY: a fresh private anonymous mapping; no existing memory is
    // named or changed.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            over,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    let start = p as usize;
    let aligned = start.next_multiple_of(HUGE_ALIGN);
    let (head, tail) = (aligned - start, HUGE_ALIGN - (aligned - start));
    // SAFETY: the head and tail are the parts of the mapping just made
    // that lie outside [aligned, aligned + len); nothing references them.
    // Advice on the kept part, which nothing has touched yet.
    unsafe {
        if head > 0 {
            libc::munmap(p, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
        libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    aligned as *mut u8
}

// SAFETY: small layouts (and alignments above 2 MiB) go to `System`
// unchanged; large ones are whole private mappings made by `map_huge` with
// at least the layout's size and alignment, unmapped by `dealloc` with the
// same length (a pure function of the layout, `huge`), so every block is
// freed by the allocator that made it.
unsafe impl GlobalAlloc for HugeAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        match huge(l) {
            // SAFETY: the caller's non-zero layout, as GlobalAlloc requires.
            None => unsafe { System.alloc(l) },
            Some(len) => map_huge(len),
        }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        match huge(l) {
            // SAFETY: as in `alloc`.
            None => unsafe { System.alloc_zeroed(l) },
            // A fresh anonymous mapping reads as zeroes.
            Some(len) => map_huge(len),
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        match huge(l) {
            // SAFETY: `p` came from `System` with layout `l`.
            None => unsafe { System.dealloc(p, l) },
            // SAFETY: `p` is a mapping of exactly `len` bytes made by
            // `map_huge` for this layout, no longer used by the caller.
            Some(len) => unsafe {
                libc::munmap(p.cast(), len);
            },
        }
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
        if huge(l).is_some() && huge(l) == huge(nl) {
            // The mapping already holds `new_size` bytes.
            return p;
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
    use std::sync::Mutex;

    /// The tests' large blocks, one test at a time: two adjacent mappings
    /// with the same advice may be merged into one by the kernel.
    static ONE: Mutex<()> = Mutex::new(());

    #[test]
    fn large_blocks_are_aligned_and_usable() {
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
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

    /// The resident bytes of the mapping that starts at `p`, from
    /// /proc/self/smaps.
    fn resident(p: *mut u8) -> Option<usize> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut lines = smaps.lines().skip_while(|l| {
            let range = l.split_whitespace().next().and_then(|r| r.split_once('-'));
            let Some((a, b)) = range else { return true };
            let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            else {
                return true;
            };
            !(a..b).contains(&(p as usize))
        });
        lines.next()?;
        let rss = lines.find(|l| l.starts_with("Rss:"))?;
        let kb: usize = rss.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }

    /// A large zeroed block is a fresh mapping of its own: nothing is
    /// resident until written (the route tables' spare groups cost address
    /// space only), and writing faults in only what is written.
    #[test]
    fn large_zeroed_blocks_are_not_resident_until_written() {
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let a = HugeAlloc;
        let l = Layout::from_size_align(64 << 20, 4).unwrap();
        // SAFETY: a non-zero layout; writes within the block; freed with
        // its layout.
        unsafe {
            let p = a.alloc_zeroed(l);
            assert!(!p.is_null());
            assert_eq!(resident(p), Some(0));
            *p.add(5 << 20) = 1;
            let r = resident(p).unwrap();
            assert!((4096..=HUGE_ALIGN).contains(&r), "{r}");
            a.dealloc(p, l);
        }
    }
}
