//! What the engine and a client of ringfeed both need to agree on, with no
//! I/O and no executor: the record format (a client in chunk mode walks
//! record headers), cursors (the resume token a client keeps), subscription
//! filters (a client applies them to chunks) and the path rules both sides
//! check. `ringfeed-engine` re-exports all of it; the client library
//! (`ringfeed-client`) depends on this crate alone, so it never builds the
//! storage engine.

#![deny(unsafe_code)]

pub mod cluster_cursor;
pub mod cursor;
pub mod filter;
pub mod merge;
pub mod path;
pub mod record;

pub use cluster_cursor::ClusterCursor;
pub use cursor::{Cursor, CursorError, FeedId};

/// Wall-clock ns since the Unix epoch (0 before it): the clock shards stamp
/// events with, and the one every "now" of ringfeed means.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}
pub use filter::{Filter, FilterError};
pub use record::{Kind, ProducerStamp, Record, RecordError, RecordHeader, Signatures};
