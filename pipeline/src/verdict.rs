//! Per-packet outcomes and the reasons a packet is dropped.

/// Why a packet was dropped. Every drop in the data plane is counted by one
/// of these reasons, per stage and per core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DropReason {
    /// The frame is shorter than the headers the stage needs to read.
    Truncated = 0,
    /// A header field is invalid (bad version, bad header length, bad length).
    Malformed = 1,
}

impl DropReason {
    /// Number of reasons (array size for per-reason counters).
    pub const COUNT: usize = 2;
    /// Every reason, in counter order.
    pub const ALL: [DropReason; Self::COUNT] = [DropReason::Truncated, DropReason::Malformed];

    /// Short name used in stats output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::Malformed => "malformed",
        }
    }
}

/// What happens to one packet after a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Transmit on this port (index into the appliance's port table).
    Forward(u16),
    /// Drop, counted under this reason.
    Drop(DropReason),
}
