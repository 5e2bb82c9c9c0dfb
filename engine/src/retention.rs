//! Retention: delete whole oldest segments by age and by total size.
//!
//! Only whole segments go, oldest first, and never the segment being written,
//! so the retained log is always a contiguous offset range ending at the head.
//! A segment is older than `max_age` when its newest record is.

use std::time::Duration;

use crate::log::Log;
use crate::segment::error::LogError;
use crate::storage::Storage;

/// What to keep. `None` means no limit of that kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    pub max_age: Option<Duration>,
    /// Bound on the preallocated size of all segments together.
    pub max_bytes: Option<u64>,
    /// Keep every segment an object store does not hold yet: only segments
    /// wholly below the shard's uploaded offset
    /// ([`crate::shard::ShardShared::uploaded_below`]) may go.
    pub keep_until_uploaded: bool,
}

/// What a retention pass removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    pub removed: Vec<String>,
    pub bytes_freed: u64,
    /// Oldest retained record (offset, stamp) after the pass.
    pub retained: Option<(u64, i64)>,
}

impl<S: Storage> Log<S> {
    /// Deletes old segments as `policy` says, judging age against `now_ns`;
    /// never one holding an offset at or above `keep_from` (what an object
    /// store does not hold yet; `u64::MAX` for no such bound).
    pub async fn apply_retention(
        &mut self,
        policy: RetentionPolicy,
        now_ns: i64,
        keep_from: u64,
    ) -> Result<RetentionOutcome, LogError> {
        let mut outcome = RetentionOutcome::default();
        let mut total: u64 = self.segments.iter().map(|s| s.header.segment_bytes).sum();
        let cutoff = policy
            .max_age
            .map(|age| now_ns.saturating_sub(age.as_nanos().min(i64::MAX as u128) as i64));
        while self.segments.len() > 1 {
            let oldest = &self.segments[0];
            let too_old = cutoff.is_some_and(|c| oldest.index.last().is_none_or(|l| l.last_ts < c));
            let too_big = policy.max_bytes.is_some_and(|max| total > max);
            // Its end: where the next segment starts.
            let uploaded = self.segments[1].header.first_offset <= keep_from;
            if !(too_old || too_big) || !uploaded {
                break;
            }
            self.storage
                .remove(&oldest.name)
                .await
                .map_err(|source| LogError::Io {
                    op: "removing a segment",
                    source,
                })?;
            let oldest = self.segments.remove(0);
            total -= oldest.header.segment_bytes;
            outcome.bytes_freed += oldest.header.segment_bytes;
            outcome.removed.push(oldest.name);
        }
        if !outcome.removed.is_empty() {
            self.storage
                .sync_dir()
                .await
                .map_err(|source| LogError::Io {
                    op: "syncing the segment directory",
                    source,
                })?;
        }
        outcome.retained = self.retained();
        Ok(outcome)
    }
}
