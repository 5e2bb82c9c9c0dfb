//! Per-shard watermarks, written by the shard and readable from any thread.
//!
//! Offsets are stored as "next" offsets (one past the last record covered), so
//! an empty shard needs no sentinel. Each is monotonic. The shard stores a
//! watermark before it notifies anyone waiting on it (store before notify), so
//! a woken waiter always sees the value that woke it.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Live watermarks of one shard.
#[derive(Debug, Default)]
pub struct Watermarks {
    committed_next: AtomicU64,
    committed_ts: AtomicI64,
    claimed_ts: AtomicI64,
    flushed_next: AtomicU64,
    flushed_ts: AtomicI64,
    evicted_below: AtomicU64,
    retained_from: AtomicU64,
    /// Every future stamp will be above this.
    fence: AtomicI64,
    /// The highest stamp a merge waits for this shard to claim; 0 if none.
    claim_wanted: AtomicI64,
}

/// A consistent-enough copy of the watermarks for reporting. Each field is
/// read atomically; fields read later may be newer than fields read earlier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatermarkSnapshot {
    /// One past the last visible offset.
    pub committed_next: u64,
    /// Stamp of the last visible record (0 if none yet).
    pub committed_ts: i64,
    /// No future stamp will be at or below this.
    pub claimed_ts: i64,
    /// One past the last durable offset.
    pub flushed_next: u64,
    pub flushed_ts: i64,
    /// The ring holds no offset below this.
    pub evicted_below: u64,
    /// Oldest offset still on disk.
    pub retained_from: u64,
}

impl Watermarks {
    pub fn snapshot(&self) -> WatermarkSnapshot {
        WatermarkSnapshot {
            committed_next: self.committed_next.load(Ordering::Acquire),
            committed_ts: self.committed_ts.load(Ordering::Acquire),
            claimed_ts: self.claimed_ts.load(Ordering::Acquire),
            flushed_next: self.flushed_next.load(Ordering::Acquire),
            flushed_ts: self.flushed_ts.load(Ordering::Acquire),
            evicted_below: self.evicted_below.load(Ordering::Acquire),
            retained_from: self.retained_from.load(Ordering::Acquire),
        }
    }

    pub fn committed_next(&self) -> u64 {
        self.committed_next.load(Ordering::Acquire)
    }

    pub fn flushed_next(&self) -> u64 {
        self.flushed_next.load(Ordering::Acquire)
    }

    pub fn evicted_below(&self) -> u64 {
        self.evicted_below.load(Ordering::Acquire)
    }

    pub fn claimed_ts(&self) -> i64 {
        self.claimed_ts.load(Ordering::Acquire)
    }

    /// Records that a merge needs this shard to claim at least `ts`. Returns
    /// whether no request was pending: only then does the shard need a
    /// wake-up, which [`crate::ShardShared::request_claim`] gives it. A merge
    /// blocked on a quiet shard asks on every poll, so a request already
    /// covered is a read, not a write to a shared cache line.
    pub(crate) fn request_claim(&self, ts: i64) -> bool {
        if self.claim_wanted.load(Ordering::Acquire) >= ts {
            return false;
        }
        self.claim_wanted.fetch_max(ts, Ordering::AcqRel) == 0
    }

    /// The highest stamp a merge waits for this shard to claim; 0 if none.
    pub(crate) fn claim_wanted(&self) -> i64 {
        self.claim_wanted.load(Ordering::Acquire)
    }

    /// Marks a request for `wanted` answered, unless a higher one came meanwhile.
    pub(crate) fn claim_answered(&self, wanted: i64) {
        let _ = self
            .claim_wanted
            .compare_exchange(wanted, 0, Ordering::AcqRel, Ordering::Acquire);
    }

    pub(crate) fn fence(&self) -> i64 {
        self.fence.load(Ordering::Acquire)
    }

    /// Publishes a committed batch: everything up to `next` is visible and
    /// no later stamp will be at or below `ts`.
    pub(crate) fn publish_committed(&self, next: u64, ts: i64) {
        // Only the shard's own thread publishes, so these loads are exact.
        // Offsets only grow and stamps with them (docs/design.md 2.1).
        debug_assert!(
            next >= self.committed_next(),
            "2.1: the committed watermark went back from {} to {next}",
            self.committed_next()
        );
        debug_assert!(
            ts >= self.committed_ts.load(Ordering::Acquire),
            "2.1: the committed stamp went back to {ts}"
        );
        self.committed_ts.store(ts, Ordering::Release);
        self.committed_next.store(next, Ordering::Release);
        self.claimed_ts.fetch_max(ts, Ordering::AcqRel);
    }

    /// Claims that no future stamp will be at or below `ts`, and fences later stamps above it.
    pub(crate) fn claim(&self, ts: i64) {
        self.fence.fetch_max(ts, Ordering::AcqRel);
        self.claimed_ts.fetch_max(ts, Ordering::AcqRel);
    }

    pub(crate) fn publish_flushed(&self, next: u64, ts: i64) {
        // Durable is never ahead of visible, and never goes back (2.3).
        debug_assert!(
            next >= self.flushed_next(),
            "2.3: the flushed watermark went back from {} to {next}",
            self.flushed_next()
        );
        debug_assert!(
            next <= self.committed_next(),
            "2.3: flushed through {next}, past the committed {}",
            self.committed_next()
        );
        self.flushed_ts.store(ts, Ordering::Release);
        self.flushed_next.store(next, Ordering::Release);
    }

    pub(crate) fn publish_evicted(&self, below: u64) {
        // Flush before evict (2.2): the ring lets go only of what the
        // published flushed watermark covers.
        debug_assert!(
            below <= self.flushed_next(),
            "2.2: evicted below {below}, past the flushed {}",
            self.flushed_next()
        );
        self.evicted_below.fetch_max(below, Ordering::AcqRel);
    }

    pub(crate) fn publish_retained(&self, from: u64) {
        self.retained_from.store(from, Ordering::Release);
    }
}
