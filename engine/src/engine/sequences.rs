//! Idempotent producers' next sequences across shards, where a batch
//! starting past its producer's next is refused as a gap.

use crate::event::{AppendError, Producer};

/// Each idempotent producer's next sequence across shards: a batch starting
/// above it is a gap and refused. Shards decide new/duplicate per event
/// (`crate::producer`); this only sees the batch's first number, so it is
/// advanced when a batch is sent, and a batch that then fails on a shard is
/// retried below it. Rebuilt at open from the shards' tables; bounded like
/// them (the least recently used producer is forgotten, and a forgotten or
/// unknown producer may start at any sequence).
pub(super) struct Sequences {
    next: lru::LruCache<u64, u64>,
}

impl Sequences {
    pub(super) fn new(capacity: usize) -> Sequences {
        let capacity = std::num::NonZeroUsize::new(capacity).unwrap_or(std::num::NonZeroUsize::MIN);
        Sequences {
            next: lru::LruCache::new(capacity),
        }
    }

    /// Admits a batch of `count` events, or says where the producer must resume.
    pub(super) fn admit(&mut self, producer: Producer, count: u64) -> Result<(), AppendError> {
        let end = producer.first_sequence + count;
        if let Some(next) = self.next.get_mut(&producer.id) {
            if producer.first_sequence > *next {
                return Err(AppendError::SequenceGap {
                    producer_id: producer.id,
                    expected: *next,
                    first: producer.first_sequence,
                });
            }
            *next = (*next).max(end);
            return Ok(());
        }
        self.insert(producer.id, end);
        Ok(())
    }

    pub(super) fn insert(&mut self, id: u64, next: u64) {
        let entry = self.next.get_or_insert_mut(id, || 0);
        *entry = (*entry).max(next);
    }
}
