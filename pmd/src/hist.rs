//! Latency histograms handed from a data-plane thread to the management
//! thread without blocking or allocating on the data-plane side.
//!
//! The writer records into its active histogram. At each publish it takes an
//! empty spare from the reader (`try_recv`), swaps, and sends the full one
//! back (`try_send` on a bounded channel that always has room, since only two
//! histograms circulate). If no spare is available it keeps recording into
//! the active one, so nothing is lost, only published later. Values are TSC
//! cycles; the reader converts to nanoseconds for display.

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use hdrhistogram::Histogram;

/// Highest value tracked (cycles): about 100 s at 3 GHz; larger values are
/// clamped to it.
pub const HIST_MAX: u64 = 300_000_000_000;
const SIGFIG: u8 = 3;

fn new_hist() -> Histogram<u64> {
    // Cannot fail: 1 <= HIST_MAX and SIGFIG <= 5.
    Histogram::new_with_bounds(1, HIST_MAX, SIGFIG).expect("valid histogram bounds")
}

/// The data-plane side.
pub struct HistWriter {
    active: Histogram<u64>,
    full: Sender<Histogram<u64>>,
    empty: Receiver<Histogram<u64>>,
}

/// The management side: merges what writers publish.
pub struct HistReader {
    full: Receiver<Histogram<u64>>,
    empty: Sender<Histogram<u64>>,
    /// Merged since the last [`HistReader::reset_period`].
    pub period: Histogram<u64>,
    /// Merged over the whole run.
    pub total: Histogram<u64>,
}

/// A connected writer/reader pair (allocates; call at start-up).
pub fn hist_pair() -> (HistWriter, HistReader) {
    let (full_tx, full_rx) = bounded(2);
    let (empty_tx, empty_rx) = bounded(2);
    // Cannot fail: fresh channel with capacity 2.
    let _ = empty_tx.try_send(new_hist());
    (
        HistWriter {
            active: new_hist(),
            full: full_tx,
            empty: empty_rx,
        },
        HistReader {
            full: full_rx,
            empty: empty_tx,
            period: new_hist(),
            total: new_hist(),
        },
    )
}

impl HistWriter {
    /// Records one value (cycles).
    #[inline(always)]
    pub fn record(&mut self, v: u64) {
        self.active.saturating_record(v);
    }

    /// Records `n` occurrences of one value (cycles).
    #[inline(always)]
    pub fn record_n(&mut self, v: u64, n: u64) {
        // Cannot fail: the value is clamped into range.
        let _ = self.active.record_n(v.clamp(1, HIST_MAX), n);
    }

    /// Hands the recorded values to the reader if a spare is available.
    /// Never blocks and never allocates.
    pub fn publish(&mut self) {
        if self.active.is_empty() {
            return;
        }
        if let Ok(mut spare) = self.empty.try_recv() {
            std::mem::swap(&mut self.active, &mut spare);
            if let Err(TrySendError::Full(h) | TrySendError::Disconnected(h)) =
                self.full.try_send(spare)
            {
                // Reader gone or (impossibly) full: keep the values.
                let _ = self.active.add(&h);
            }
        }
    }

    /// Ends writing and hands over what was not yet published. Cannot
    /// fail while the reader exists: at most two histograms circulate and
    /// the channel holds two.
    pub fn close(self) {
        if !self.active.is_empty() {
            let _ = self.full.try_send(self.active);
        }
    }
}

impl HistReader {
    /// Merges everything published so far and returns the spares.
    pub fn collect(&mut self) {
        while let Ok(mut h) = self.full.try_recv() {
            self.absorb(&h);
            h.reset();
            let _ = self.empty.try_send(h);
        }
    }

    /// Merges a histogram.
    pub fn absorb(&mut self, h: &Histogram<u64>) {
        // Same bounds, so these cannot fail.
        let _ = self.period.add(h);
        let _ = self.total.add(h);
    }

    /// Starts a new period.
    pub fn reset_period(&mut self) {
        self.period.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handoff_loses_nothing() {
        let (mut w, mut r) = hist_pair();
        for i in 1..=1000 {
            w.record(i);
            if i % 100 == 0 {
                w.publish();
                if i % 300 == 0 {
                    r.collect();
                }
            }
        }
        w.record_n(5, 10);
        w.close();
        r.collect();
        assert_eq!(r.total.len(), 1010);
        assert_eq!(r.total.max(), 1000);
    }
}
