//! The client library: [`Follower`] follows the feed through disconnects.
//! It depends on the protocol crate and `ringfeed-core` (cursors, filters,
//! the record format) only: using it never builds the storage engine.
//!
//! It subscribes, hands out events one at a time, and keeps a checkpoint: the
//! cursor just after the last event it handed out, exact even inside a batch
//! or a chunk. After any retryable failure it reconnects with gRPC-standard
//! backoff (1 s, x1.6, 20% jitter, capped), a higher `client_epoch` (so the
//! server drops the old stream at once if it still holds it) and the
//! checkpoint as its start: nothing is skipped and nothing is repeated. In
//! chunk mode it checks and decodes the raw records and applies the
//! subscription's filters and `until_ns` itself. Errors that a retry cannot
//! fix (OUT_OF_RANGE, INVALID_ARGUMENT, superseded, FAILED_PRECONDITION for
//! a cursor a crash truncated, ...) are returned; a truncated cursor is never
//! retried, and [`Truncation::of`] reads where its feed survived.
//!
//! Why the checkpoint inside a response is exact: a response's events are in
//! offset order per shard and hold every matching event of that stretch, and
//! its cursor is where the server's shard readers stand after it. Before an
//! event at `(shard, offset)` is handed out, that shard's checkpoint is the
//! event's offset (no matching event of the shard lies between the previous
//! position and it); after, `offset + 1`; once the response is used up, the
//! response's cursor.
#![forbid(unsafe_code)]

mod backoff;
mod bearer;
mod cursor_file;
mod error;
mod event;
mod follower;
mod json;
mod response;
pub mod tls;
mod truncation;
mod view;

pub use backoff::Backoff;
pub use bearer::Bearer;
pub use cursor_file::{cursor_text, parse_cursor_text, push_cursor_text, CursorFile, CURSOR_TEXT};
pub use error::FollowError;
pub use event::{FollowedEvent, Step};
pub use follower::{request_filter, Connection, FollowStats, Follower};
pub use json::{push_int, write_event_json, write_event_parts_json};
pub use truncation::{Truncation, TRUNCATION_METADATA};
pub use view::{EntryParts, EntryView, EventParts, EventView};

pub use ringfeed_proto::wire::SUPERSEDED;
