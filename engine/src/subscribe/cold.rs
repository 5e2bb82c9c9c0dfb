//! History below the local log, kept elsewhere: the server's object store
//! (issue 40). Segments that retention removed, or that a rebuilt node never
//! had, are still in a bucket; a reader whose offset is below the oldest
//! local one asks the shard's [`ColdStore`] for the chunk holding it.
//!
//! The store is asynchronous behind a synchronous face: [`ColdStore::chunk`]
//! answers from what it holds or starts fetching and says
//! [`ColdChunk::Pending`]; when the fetch is in, it wakes the shard's readers
//! ([`ShardShared::wake_readers`]), and the subscription reads again. What it
//! hands out is checked as a chunk read from disk is: its header's and body's
//! checksums, its shard and offsets.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use crate::chunk::ChunkHeader;
use crate::shard::ShardShared;

/// What a cold store answers for an offset.
pub enum ColdChunk {
    /// The verified chunk holding the offset: its header and its body.
    Ready { header: ChunkHeader, body: Bytes },
    /// Being fetched: the shard's readers are woken when it is in.
    Pending,
    /// The store does not hold it (below what it retains).
    NotHeld,
    /// It cannot be read: a chunk that fails its checks however often it is
    /// fetched. Never delivered.
    Failed(String),
    /// The store has not answered for long: the subscription ends, to be
    /// resumed from its cursor later.
    Unavailable(String),
}

/// History of a node's shards below their local logs.
pub trait ColdStore: Send + Sync {
    /// The offsets the store holds of `shard`, densely: `None` if none.
    fn held(&self, shard: u32) -> Option<Range<u64>>;

    /// The first offset of the first stored segment of `shard` with a record
    /// stamped at or after `since` (`None`: no stored record is).
    fn find_ts(&self, shard: u32, since: i64) -> Option<u64>;

    /// The chunk of `shard` holding `offset`.
    fn chunk(&self, shard: &Arc<ShardShared>, offset: u64) -> ColdChunk;
}
