//! Read-copy-update for tables one control thread changes in place while
//! workers read them: readers announce when they are inside the tables
//! (between [`Reader::enter`] and [`Reader::leave`], one poll round), and
//! the writer reuses what it unlinked only once every reader that could
//! still see it has left (epoch-based reclamation, as `rte_rcu_qsbr` and
//! the Linux kernel's RCU do; here the reader side is one store and one
//! fence per round, and nothing on the reader side ever waits).
//!
//! How it works: a global epoch counter; each reader has a slot on its own
//! cache line holding the epoch it entered in (0 while outside). When the
//! writer retires something it unlinked, it tags it with the epoch before
//! advancing the counter; the item may be reused when no reader slot holds
//! an epoch at or below the tag. A reader that entered after the advance
//! sees the table without the item (it loaded the advanced epoch, which
//! the writer published after unlinking).
//!
//! A leaf: it imports nothing from the crate.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

/// Slots readers can hold at once; readers past that share one counter
/// that holds back every reclamation while it is non-zero (correct, never
/// fast: a deployment has a reader per worker).
const SLOTS: usize = 128;
/// A slot nobody holds.
const FREE: u64 = u64::MAX;
/// A held slot whose reader is outside.
const OUTSIDE: u64 = 0;

#[repr(align(64))]
struct Slot(AtomicU64);

/// The epochs of one set of tables (shared by the writer and the readers).
pub struct Epochs {
    global: AtomicU64,
    slots: Box<[Slot]>,
    /// Readers inside without a slot.
    overflow: AtomicU64,
}

impl Default for Epochs {
    fn default() -> Self {
        Epochs {
            global: AtomicU64::new(1),
            slots: (0..SLOTS).map(|_| Slot(AtomicU64::new(FREE))).collect(),
            overflow: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for Epochs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epochs")
            .field("epoch", &self.global.load(Ordering::Relaxed))
            .field("readers", &self.readers())
            .finish()
    }
}

impl Epochs {
    /// A reader of these tables (control path: takes a slot).
    pub fn reader(self: &Arc<Self>) -> Reader {
        let slot = self.slots.iter().position(|s| {
            s.0.compare_exchange(FREE, OUTSIDE, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        Reader {
            epochs: self.clone(),
            slot,
            inside: false,
        }
    }

    /// Readers holding a slot.
    pub fn readers(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.0.load(Ordering::Relaxed) != FREE)
            .count()
    }

    /// Writer: call after unlinking something; returns the tag to keep
    /// with it until [`Epochs::passed`] says it may be reused.
    pub fn retire(&self) -> u64 {
        self.global.fetch_add(1, Ordering::AcqRel)
    }

    /// Writer: whether every reader that could have seen something retired
    /// with `tag` has left.
    pub fn passed(&self, tag: u64) -> bool {
        self.oldest_inside().is_none_or(|e| e > tag)
    }

    /// The oldest epoch a reader is inside now, if any (the writer reuses
    /// nothing retired at or after it).
    pub fn oldest_inside(&self) -> Option<u64> {
        // Pairs with the reader's fence in `enter`: either this scan sees
        // the reader's slot, or the reader sees the table without what was
        // unlinked before the caller's `retire`.
        fence(Ordering::SeqCst);
        if self.overflow.load(Ordering::Acquire) > 0 {
            return Some(0);
        }
        self.slots
            .iter()
            .map(|s| s.0.load(Ordering::Acquire))
            .filter(|&e| e != FREE && e != OUTSIDE)
            .min()
    }
}

/// One reader's hold on the tables: clone one per thread (a clone takes
/// its own slot).
pub struct Reader {
    epochs: Arc<Epochs>,
    slot: Option<usize>,
    inside: bool,
}

impl Clone for Reader {
    fn clone(&self) -> Self {
        self.epochs.reader()
    }
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("slot", &self.slot)
            .field("inside", &self.inside)
            .finish()
    }
}

impl Reader {
    /// Enters the tables (idempotent): what the reader sees from here on
    /// stays valid until [`Reader::leave`].
    #[inline]
    pub fn enter(&mut self) {
        if self.inside {
            return;
        }
        self.inside = true;
        let e = self.epochs.global.load(Ordering::Acquire);
        match self.slot {
            Some(i) => self.epochs.slots[i].0.store(e, Ordering::Relaxed),
            None => {
                self.epochs.overflow.fetch_add(1, Ordering::Relaxed);
            }
        }
        // The announcement is visible before any table load that follows
        // (a store-load barrier; pairs with the writer's in
        // `oldest_inside`).
        fence(Ordering::SeqCst);
    }

    /// Leaves the tables: nothing read since [`Reader::enter`] is used
    /// after this.
    #[inline]
    pub fn leave(&mut self) {
        if !self.inside {
            return;
        }
        self.inside = false;
        match self.slot {
            Some(i) => self.epochs.slots[i].0.store(OUTSIDE, Ordering::Release),
            None => {
                self.epochs.overflow.fetch_sub(1, Ordering::Release);
            }
        }
    }

    /// Whether the reader is inside.
    pub fn inside(&self) -> bool {
        self.inside
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.leave();
        if let Some(i) = self.slot {
            self.epochs.slots[i].0.store(FREE, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retired_items_wait_for_readers_inside() {
        let ep = Arc::new(Epochs::default());
        let mut a = ep.reader();
        let mut b = a.clone();
        assert_eq!(ep.readers(), 2);
        let t0 = ep.retire();
        assert!(ep.passed(t0), "nobody inside: reusable at once");
        a.enter();
        let t1 = ep.retire();
        assert!(!ep.passed(t1), "a entered before the retire");
        b.enter(); // after the retire: sees the table without the item
        a.leave();
        assert!(ep.passed(t1), "only b is inside, and it entered later");
        let t2 = ep.retire();
        assert!(!ep.passed(t2));
        b.leave();
        assert!(ep.passed(t2));
        drop(b);
        assert_eq!(ep.readers(), 1);
    }

    #[test]
    fn readers_past_the_slots_hold_everything_back() {
        let ep = Arc::new(Epochs::default());
        let mut held: Vec<Reader> = (0..SLOTS).map(|_| ep.reader()).collect();
        let mut extra = ep.reader();
        assert_eq!(ep.readers(), SLOTS);
        extra.enter();
        let t = ep.retire();
        assert!(!ep.passed(t));
        extra.leave();
        assert!(ep.passed(t));
        held[0].enter();
        assert!(!ep.passed(ep.retire()));
        held.clear();
        assert_eq!(ep.readers(), 0);
    }
}
