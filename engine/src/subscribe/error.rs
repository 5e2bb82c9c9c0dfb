//! Why a subscription could not start or continue.

use thiserror::Error;

use super::{CursorError, FilterError};
use crate::record::RecordError;

/// Why a subscription could not start or continue.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SubscribeError {
    #[error(transparent)]
    Cursor(#[from] CursorError),
    #[error("invalid filter: {0}")]
    Filter(#[from] FilterError),
    #[error(
        "shard {shard}: offset {offset} is older than the oldest retained event \
         (offset {retained_from}{}); resubscribe from there or from a time",
        retained_ts.map(|ts| format!(", stamped {ts} ns")).unwrap_or_default()
    )]
    BelowRetention {
        shard: u32,
        offset: u64,
        retained_from: u64,
        retained_ts: Option<i64>,
    },
    #[error(
        "shard {shard}: the feed was truncated by a crash: generation {generation} kept offsets \
         below {surviving_end}{}, but the cursor is at offset {next}, so this subscriber's cursor \
         passed {lost} event(s) that no longer exist (offsets {surviving_end}..{next}; it saw those \
         its filters matched, and new events may since have taken those offsets). Resume from the surviving end explicitly (resume_truncated; \
         `ringfeed tail --resume-truncated`), or from a time",
        if *surviving_end == 0 { String::new() } else { format!(" (the last surviving is {})", surviving_end - 1) },
        lost = next - surviving_end
    )]
    Truncated {
        shard: u32,
        /// The cursor's generation for this shard.
        generation: u32,
        /// Where that generation's surviving events end (exclusive).
        surviving_end: u64,
        /// The cursor's next offset for this shard.
        next: u64,
    },
    #[error("shard {shard}: segment {segment} at byte {position}: {reason}")]
    Corrupt {
        shard: u32,
        segment: String,
        position: u64,
        reason: String,
    },
    #[error("shard {shard}: reading segments: {reason}")]
    Io { shard: u32, reason: String },
    #[error(
        "shard {shard}: the object store holding its events below the local log cannot be \
         read ({reason}); resume from the cursor once it is back"
    )]
    ColdUnavailable { shard: u32, reason: String },
    #[error(
        "shard {shard} stopped after an I/O failure ({cause}): its events from offset \
         {durable_end} on are not durable and may never be, so a durable-only subscription \
         cannot continue past them until the server is restarted (then resume from the cursor)"
    )]
    Latched {
        shard: u32,
        cause: String,
        /// The shard's flushed watermark: everything below it was delivered
        /// (or is deliverable), nothing at or past it can be.
        durable_end: u64,
    },
    #[error("shard {shard}: a stored record does not decode: {source}")]
    Record {
        shard: u32,
        #[source]
        source: RecordError,
    },
}
