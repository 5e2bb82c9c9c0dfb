//! Why the engine could not open.

use std::path::PathBuf;

use thiserror::Error;

use crate::RecoveryError;

/// Why the engine could not open.
#[derive(Debug, Error)]
pub enum EngineError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(
        "{path} was created with {found} shard(s) but {configured} are configured; \
         events are routed by shard, so a data dir keeps its shard count (use --shards {found}, or a new data dir)"
    )]
    ShardCountMismatch {
        path: PathBuf,
        found: u32,
        configured: u32,
    },
    #[error(
        "{path} belongs to node {found} but this node is configured as node {configured}; \
         a data dir holds one node's events (use --node-id {found}, or a new data dir)"
    )]
    NodeIdMismatch {
        path: PathBuf,
        found: u32,
        configured: u32,
    },
    #[error("{path} is not a ringfeed meta file of a known format: {reason}")]
    BadMeta { path: PathBuf, reason: String },
    #[error("shard {shard}: {source}")]
    Recovery {
        shard: u32,
        #[source]
        source: RecoveryError,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("shard {shard} executor: {reason}")]
    Executor { shard: u32, reason: String },
    /// Another process holds the data dir (see [`crate::lock`]).
    #[error(transparent)]
    Locked(#[from] crate::lock::LockError),
}
