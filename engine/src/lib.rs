//! ringfeed's storage engine: shards (rings of windows, stamping, flushing) and, under them, records, chunks, segments, recovery, look-ups
//! and retention for one shard's log, behind an I/O seam that has a glommio
//! O_DIRECT implementation and a fault-injecting in-memory one. No gRPC here.
//!
//! The on-disk format and its crash analysis are in `docs/format.md`.
//!
//! The surface: the types re-exported here, plus the modules a tool or a
//! test that reads logs directly needs (`chunk`, `record`, `segment`,
//! `generation`, `storage`, `clock`). Everything else (the shard runtime,
//! the ring, readers, producers' table, retention) is private.

#![deny(unsafe_code)]

pub mod chunk;
pub mod clock;
mod engine;
mod event;
mod executor;
pub mod generation;
mod latency;
pub mod lock;
mod log;
mod producer;
mod rate_limit;
/// The record format, shared with clients (`ringfeed-core`).
pub use ringfeed_core::record;
pub use ringfeed_core::{cluster_cursor, merge, ClusterCursor, FeedId};
mod raw;
pub mod repair;
mod retention;
mod ring;
pub mod segment;
mod shard;
#[cfg(feature = "sim")]
pub mod sim;
pub mod storage;
mod subscribe;
mod watermark;
mod window;

pub use engine::{
    holds_feed, restore, shard_dir, Engine, EngineConfig, EngineError, RestoredShard, ShardStatus,
    LOST_GENERATIONS,
};
pub use event::{AppendError, Durability, Limits, NewEvent, Position, Producer, Stored};
pub use generation::{CursorCheck, GenerationStart, Generations};
pub use latency::{LatencyHistogram, LatencySnapshot};
pub use log::{ChunkImage, ChunkLocation, Log, LogConfig, RecoveryReport};
pub use producer::ProducerTable;
pub use rate_limit::RateLimit;
pub use record::{Kind, ProducerStamp, Record, Signatures};
pub use retention::{RetentionOutcome, RetentionPolicy};
pub use ring::RingView;
pub use segment::error::{LogError, RecoveryError};
pub use shard::{Readers, ShardShared, ShardStats, Waiter};
pub use subscribe::{
    ColdChunk, ColdStore, Cursor, CursorError, Delivered, Filter, Ordering, Progress, RawChunk,
    Selector, Start, Step, SubscribeError, SubscribeRequest, Subscription, MAX_FILTER_PATH_BYTES,
};
pub use watermark::{WatermarkSnapshot, Watermarks};

/// Helpers for the crate's unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use crate::record::{Kind, Record, Signatures};

    /// A small create record.
    pub(crate) fn test_create(offset: u64, ts: i64) -> Record<'static> {
        Record {
            ts,
            offset,
            kind: Kind::Create,
            signatures: Signatures::new(&[]),
            directory: "/d",
            old_name: "",
            new_name: "f",
            new_parent: "",
            payload: b"payload",
            producer: None,
        }
    }
}
