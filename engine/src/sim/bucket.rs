//! The object store as the simulator sees it (issue 40): a faulty cold
//! store under the shards. Sealed segments are "uploaded" now and then,
//! each walked and verified as the server's uploader does; some uploads are
//! lost before their manifest names them (nothing trusts them, retention
//! keeps their segments). Readers below the local log ask it for chunks:
//! a fetch answers `Pending` a random number of times first (slow), some
//! fail and start over, and cached chunks are dropped at random. The
//! oracle then checks the shards' invariants as before, plus: with the
//! store, nothing retention removed is ever out of range.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::rng::Rng;
use crate::chunk::{self, ChunkHeader, CHUNK_HEADER_LEN};
use crate::shard::ShardShared;
use crate::subscribe::{ColdChunk, ColdStore};

/// One segment the manifest names: its chunks holding records.
struct Stored {
    next_offset: u64,
    last_ts: i64,
    chunks: Vec<(ChunkHeader, Bytes)>,
}

struct Inner {
    rng: Rng,
    /// Per shard, by first offset: what the manifests name.
    shards: Vec<BTreeMap<u64, Stored>>,
    /// Chunks fetched, by (shard, first offset).
    cached: HashMap<(u32, u64), usize>,
    /// Fetches under way: asks left before they land.
    fetching: BTreeMap<(u32, u64), u64>,
    fetches: u64,
    failures: u64,
    /// Faults stopped: fetches land when asked, none fails, the cache keeps.
    calm: bool,
}

pub(super) struct SimBucket(Mutex<Inner>);

impl SimBucket {
    pub(super) fn new(seed: u64, shards: u32) -> Arc<SimBucket> {
        Arc::new(SimBucket(Mutex::new(Inner {
            rng: Rng::new(seed ^ 0x00B0_C4E7),
            shards: (0..shards).map(|_| BTreeMap::new()).collect(),
            cached: HashMap::new(),
            fetching: BTreeMap::new(),
            fetches: 0,
            failures: 0,
            calm: false,
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where `shard`'s stored history ends (0: nothing stored).
    pub(super) fn uploaded_below(&self, shard: u32) -> u64 {
        self.lock().shards[shard as usize]
            .last_key_value()
            .map_or(0, |(_, s)| s.next_offset)
    }

    /// Faults stop (the run's end): every fetch lands when next asked.
    pub(super) fn calm(&self) {
        let mut inner = self.lock();
        inner.calm = true;
        inner.fetching.clear();
    }

    /// Fetches that landed, and fetches that failed and started over.
    pub(super) fn counts(&self) -> (u64, u64) {
        let inner = self.lock();
        (inner.fetches, inner.failures)
    }

    /// Names the sealed segment `image` (its file's bytes) of `shard`,
    /// holding `first..next`, after walking and verifying its chunks as
    /// the uploader does. `Err` says why it is not a sealed segment.
    pub(super) fn upload(
        &self,
        shard: u32,
        first: u64,
        next: u64,
        image: &[u8],
    ) -> Result<(), String> {
        let header = crate::segment::SegmentHeader::decode(image).map_err(|e| e.to_string())?;
        let alignment = header.alignment as usize;
        let mut pos = crate::segment::SEGMENT_HEADER_BLOCK;
        let mut at = first;
        let mut chunks = Vec::new();
        let mut last_ts = 0;
        while at < next {
            let rest = image.get(pos..).ok_or("the segment ends early")?;
            let h = chunk::verify(rest).map_err(|e| format!("chunk at byte {pos}: {e}"))?;
            if h.first_offset != at || h.shard != shard {
                return Err(format!("chunk at byte {pos} does not follow offset {at}"));
            }
            if h.record_count > 0 {
                let body = &rest[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + h.body_len as usize];
                chunks.push((h, Bytes::copy_from_slice(body)));
                last_ts = h.last_ts;
            }
            at = h.end_offset();
            pos += h.disk_len(alignment);
        }
        if at != next {
            return Err(format!("its chunks end at {at}, not {next}"));
        }
        let mut inner = self.lock();
        let named = &mut inner.shards[shard as usize];
        let below = named.last_key_value().map_or(0, |(_, s)| s.next_offset);
        if first != below {
            return Err(format!(
                "segment {first} does not follow the stored {below}"
            ));
        }
        named.insert(
            first,
            Stored {
                next_offset: next,
                last_ts,
                chunks,
            },
        );
        Ok(())
    }
}

impl ColdStore for SimBucket {
    fn held(&self, shard: u32) -> Option<Range<u64>> {
        let inner = self.lock();
        let named = inner.shards.get(shard as usize)?;
        let first = *named.first_key_value()?.0;
        Some(first..named.last_key_value()?.1.next_offset)
    }

    fn find_ts(&self, shard: u32, since: i64) -> Option<u64> {
        let inner = self.lock();
        inner
            .shards
            .get(shard as usize)?
            .iter()
            .find(|(_, s)| !s.chunks.is_empty() && s.last_ts >= since)
            .map(|(first, _)| *first)
    }

    fn chunk(&self, shard: &Arc<ShardShared>, offset: u64) -> ColdChunk {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let id = shard.id;
        let Some((_, segment)) = inner.shards[id as usize].range(..=offset).next_back() else {
            return ColdChunk::NotHeld;
        };
        if offset >= segment.next_offset {
            return ColdChunk::NotHeld;
        }
        let at = segment
            .chunks
            .partition_point(|(h, _)| h.end_offset() <= offset);
        let Some((header, body)) = segment.chunks.get(at) else {
            return ColdChunk::Failed(format!("no stored chunk holds offset {offset}"));
        };
        let key = (id, header.first_offset);
        // The cache drops chunks now and then.
        if !inner.calm && inner.rng.chance(50) {
            inner.cached.clear();
        }
        if inner.cached.contains_key(&key) {
            return ColdChunk::Ready {
                header: *header,
                body: body.clone(),
            };
        }
        let left = match inner.fetching.get(&key) {
            _ if inner.calm => 0,
            None => inner.rng.below(8),
            Some(&left) => left,
        };
        if left == 0 {
            inner.fetching.remove(&key);
            inner.cached.insert(key, at);
            inner.fetches += 1;
            return ColdChunk::Ready {
                header: *header,
                body: body.clone(),
            };
        }
        // A fetch fails now and then (the store down, a refused checksum)
        // and starts over.
        let left = if inner.rng.chance(100) {
            inner.failures += 1;
            1 + inner.rng.below(8)
        } else {
            left - 1
        };
        inner.fetching.insert(key, left);
        ColdChunk::Pending
    }
}
