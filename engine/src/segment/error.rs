//! Errors of the log: what went wrong at open (recovery) and at run time.

use std::io;

use thiserror::Error;

use crate::chunk::ChunkError;
use crate::record::RecordError;
use crate::segment::SegmentHeaderError;

/// Why a shard's log could not be opened. Nothing was served from it.
#[derive(Debug, Error)]
pub enum RecoveryError {
    /// A chunk failed to verify where synced data must be. The log is not
    /// opened, so nothing after it is silently dropped.
    #[error(
        "corruption in segment {segment} at byte {position}: {reason}; \
         later valid data exists ({evidence}), so this is not a torn tail. \
         `ringfeed repair --data-dir DIR` (the data dir named above) keeps every event \
         but the damaged chunk's; with --dry-run it only says what it would do"
    )]
    Corruption {
        segment: String,
        position: u64,
        reason: ChunkError,
        evidence: String,
    },
    #[error(
        "a repair of this shard was interrupted (its repair.next marker is here): run \
         `ringfeed repair` on the data dir again to finish it before serving"
    )]
    InterruptedRepair,
    #[error("segment {segment} has a bad header: {reason}")]
    BadSegmentHeader {
        segment: String,
        reason: SegmentHeaderError,
    },
    #[error("segment {segment} belongs to shard {found}, expected shard {expected}")]
    ShardMismatch {
        segment: String,
        expected: u32,
        found: u32,
    },
    #[error(
        "segment {segment} starts at offset {found} but the previous segment ends at {expected}: \
         records {expected}..{found} are missing"
    )]
    Gap {
        segment: String,
        expected: u64,
        found: u64,
    },
    #[error("I/O error during recovery of {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}

/// Why a log operation failed at run time.
#[derive(Debug, Error)]
pub enum LogError {
    #[error("I/O error while {op}: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// An earlier write or sync failed. The log acknowledges nothing more until
    /// reopened: after a failed fsync the page state is unknown, and retrying
    /// the fsync could report success for data that was lost.
    #[error("the log stopped after an I/O failure ({cause}); reopen it to recover")]
    Latched { cause: String },
    /// The disk had no room for the next segment (ENOSPC or EDQUOT while
    /// creating or allocating it). Nothing of the log was written and it is
    /// not latched: the same call succeeds once space is freed.
    #[error("the disk is full: {cause}")]
    NoSpace { cause: String },
    #[error("chunk of {len} bytes does not fit a segment of {segment_bytes} bytes with an unsynced bound of {max_unsynced} bytes")]
    ChunkTooLarge {
        len: usize,
        segment_bytes: u64,
        max_unsynced: u64,
    },
    #[error("chunk starts at offset {found} with stamp {found_ts}, but the log expects offset {expected} and a stamp above {last_ts:?}")]
    OutOfOrder {
        expected: u64,
        found: u64,
        last_ts: Option<i64>,
        found_ts: i64,
    },
    #[error("chunk has no records")]
    EmptyChunk,
    #[error("offset {offset} is not in the log (retained {retained_from}..{next})")]
    NotRetained {
        offset: u64,
        retained_from: u64,
        next: u64,
    },
    #[error("chunk at {segment}:{position} failed to verify on read: {reason}")]
    BadRead {
        segment: String,
        position: u64,
        reason: ChunkError,
    },
    #[error(transparent)]
    Record(#[from] RecordError),
}
