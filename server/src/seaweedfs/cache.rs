//! The view's events prepared once for all its streams: a stream that reads
//! an event another stream read recently takes its prepared form (paths
//! joined, response encoded) instead of decoding and encoding it again, so
//! K subscribers reading the same stretch of the feed cost one decode and
//! one encode per event, not K.
//!
//! Direct-mapped by position: an event's slot is fixed by its shard and
//! offset, and a newer event in the slot replaces it. Subscribers reading
//! near each other (a storm's catch-up, the live edge) share; one far
//! behind misses and prepares its own, as every stream did before the cache.
//! Only events of at most `MAX_CACHED_BYTES` prepared are kept (a larger one
//! is prepared by each stream that reads it), so the memory is bounded:
//! `SLOTS` x `MAX_CACHED_BYTES` (32 MiB).

use std::sync::Arc;

use super::slots::Slots;
use super::view::Prepared;

/// Slots: about 10 MiB of prepared events at a few hundred bytes each.
const SLOTS: usize = 16_384;
/// The largest prepared event kept (its frame and its paths).
const MAX_CACHED_BYTES: usize = 2 << 10;

/// An event's position: its shard, its offset, and its stamp (a guard: the
/// same position holds the same event for the server's life).
type Key = (u32, u64, i64);

pub struct PreparedCache {
    slots: Slots<Key, Prepared>,
}

impl Default for PreparedCache {
    fn default() -> Self {
        PreparedCache {
            slots: Slots::new(SLOTS),
        }
    }
}

impl PreparedCache {
    /// The prepared event at `key`, prepared by `prepare` when no stream
    /// has it. `prepare` runs outside the slot's lock.
    pub fn get_or_prepare<E>(
        &self,
        key: Key,
        prepare: impl FnOnce() -> Result<Prepared, E>,
    ) -> Result<Arc<Prepared>, E> {
        let slot = slot_of(key);
        if let Some(prepared) = self.slots.get(slot, &key) {
            return Ok(prepared);
        }
        let prepared = Arc::new(prepare()?);
        if prepared.size() <= MAX_CACHED_BYTES {
            self.slots.put(slot, key, prepared.clone());
        }
        Ok(prepared)
    }
}

/// Consecutive offsets of a shard take consecutive slots; shards are spread
/// apart.
fn slot_of((shard, offset, _): Key) -> usize {
    (offset.wrapping_add(u64::from(shard).wrapping_mul(0x9E37_79B9)) % SLOTS as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringfeed_proto::v1;

    fn prepared(name: &str, ts: i64) -> Result<Prepared, String> {
        let event = v1::Event {
            directory: "/d".into(),
            new_entry: Some(v1::Entry {
                name: name.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        Prepared::new(&event, ts, 0, 9)
    }

    #[test]
    fn an_event_is_prepared_once_while_its_slot_holds_it() {
        let cache = PreparedCache::default();
        let mut prepares = 0;
        for _ in 0..3 {
            cache
                .get_or_prepare((0, 7, 70), || {
                    prepares += 1;
                    prepared("a", 70)
                })
                .unwrap();
        }
        assert_eq!(prepares, 1);
        // Another event in the same slot replaces it; a different stamp at
        // the same position is not taken for it.
        let other = (0, 7 + SLOTS as u64, 71);
        assert_eq!(slot_of(other), slot_of((0, 7, 70)));
        let b = cache.get_or_prepare(other, || prepared("b", 71)).unwrap();
        assert_eq!(b.ts_ns, 71);
        let a = cache
            .get_or_prepare((0, 7, 70), || prepared("a", 70))
            .unwrap();
        assert_eq!(a.ts_ns, 70);
        let c = cache
            .get_or_prepare((0, 7, 72), || prepared("c", 72))
            .unwrap();
        assert_eq!(c.ts_ns, 72);
        // A large event is prepared each time.
        let large = "x".repeat(MAX_CACHED_BYTES);
        let mut prepares = 0;
        for _ in 0..2 {
            cache
                .get_or_prepare((2, 1, 5), || {
                    prepares += 1;
                    prepared(&large, 5)
                })
                .unwrap();
        }
        assert_eq!(prepares, 2);
        // A failure to prepare is returned, not cached.
        assert!(cache
            .get_or_prepare((1, 1, 1), || Err::<Prepared, _>("bad"))
            .is_err());
        let d = cache
            .get_or_prepare((1, 1, 1), || prepared("d", 1))
            .unwrap();
        assert_eq!(d.ts_ns, 1);
    }
}
