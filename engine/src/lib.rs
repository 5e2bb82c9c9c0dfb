//! ringfeed's storage engine: records, chunks, segments, recovery, look-ups
//! and retention for one shard's log, behind an I/O seam that has a glommio
//! O_DIRECT implementation and a fault-injecting in-memory one. No gRPC here.
//!
//! The on-disk format and its crash analysis are in `docs/format.md`.

#![deny(unsafe_code)]

pub mod chunk;
pub mod error;
pub mod log;
pub mod record;
pub mod retention;
pub mod segment;
mod shared_buf;
pub mod storage;
pub mod window;

pub use error::{LogError, RecoveryError};
pub use log::{ChunkImage, ChunkLocation, Log, LogConfig, RecoveryReport};
pub use record::{Kind, Record, Signatures};
pub use retention::{RetentionOutcome, RetentionPolicy};
