//! One shard's reader: hands out runs of records from a given offset, from the
//! ring when the ring still holds that offset and from segment files below it.
//!
//! Ring and disk hand over at exact offsets. The shard publishes `flushed`
//! before it evicts a window, so an offset missing from the ring is always on
//! disk; disk reads never go past the flushed watermark, so they never look at
//! a chunk that is still being written. A reader that falls behind the ring
//! while reading simply continues from disk. What it hands out is a `Bytes`
//! view of a window or of a segment mapping: no record is copied.

use std::sync::Arc;

use bytes::Bytes;

use crate::chunk::{self, ChunkHeader, CHUNK_HEADER_LEN};
use crate::record;
use crate::segment::{segment_name, SegmentHeader};
use crate::shard::ShardShared;
use crate::window::Window;

use super::cold::ColdChunk;

use super::SubscribeError;

/// Records back to back, starting with the record at `first_offset`.
pub(crate) struct Run {
    pub bytes: Bytes,
    pub first_offset: u64,
    /// No record will ever follow these in the same source: the run is a
    /// segment chunk's body or the rest of a sealed window. An unsealed run is
    /// the open window's committed prefix: the live edge.
    pub sealed: bool,
    /// The run is a whole segment chunk's body, from its first record, and
    /// this is the chunk's verified header: its count, stamps and body
    /// checksum describe exactly these bytes, so chunk mode ships them
    /// without walking or checksumming them again.
    pub whole: Option<ChunkHeader>,
}

/// Where the reader left off, so the next read continues without searching.
enum Hint {
    None,
    /// The last run ended at byte `end` of this window.
    Window {
        window: Arc<Window>,
        end: usize,
    },
    /// The run was the body of the chunk at `pos`; the next chunk follows it.
    Chunk {
        segment: MappedSegment,
        pos: usize,
        header: ChunkHeader,
    },
}

#[derive(Clone)]
struct MappedSegment {
    first_offset: u64,
    bytes: Bytes,
    alignment: usize,
}

pub(crate) struct ShardReader {
    shard: Arc<ShardShared>,
    /// Hand out only durable records (below the flushed watermark).
    durable_only: bool,
    hint: Hint,
}

/// A view of `len` committed bytes of a window that keeps the window alive.
struct WindowPrefix {
    window: Arc<Window>,
    len: usize,
}

impl AsRef<[u8]> for WindowPrefix {
    fn as_ref(&self) -> &[u8] {
        &self.window.committed()[..self.len]
    }
}

impl ShardReader {
    pub fn new(shard: Arc<ShardShared>, durable_only: bool) -> ShardReader {
        ShardReader {
            shard,
            durable_only,
            hint: Hint::None,
        }
    }

    pub fn shard(&self) -> &Arc<ShardShared> {
        &self.shard
    }

    /// Whether reading `next` goes to the segment files (the ring evicted it).
    pub fn below_ring(&self, next: u64) -> bool {
        next < self.shard.watermarks.evicted_below()
    }

    /// The records from `next` on that are available now (at least one), or
    /// `None` if `next` is not committed yet.
    ///
    /// Contract: `next` is either where the caller starts, or the offset just
    /// past the last run handed out (every record of a run is consumed before
    /// the next read); the reader then continues without searching.
    pub fn read(&mut self, next: u64) -> Result<Option<Run>, SubscribeError> {
        let limit = if self.durable_only {
            self.shard.watermarks.flushed_next()
        } else {
            self.shard.watermarks.committed_next()
        };
        if next >= limit {
            // Durable-only, waiting on a flush that a latched shard will
            // never make: say so instead of waiting silently forever (the
            // latch notifies `flushed`, which wakes the subscription).
            if self.durable_only && next < self.shard.watermarks.committed_next() {
                if let Some(cause) = self.shard.latched() {
                    return Err(SubscribeError::Latched {
                        shard: self.shard.id,
                        cause,
                        durable_end: limit,
                    });
                }
            }
            return Ok(None);
        }
        if let Some(run) = self.read_ring(next, limit) {
            return Ok(Some(run));
        }
        let w = &self.shard.watermarks;
        // Not in the ring: evicted, hence flushed (flushed is published first).
        let retained = w.snapshot().retained_from;
        if next < retained {
            return self.read_cold(next);
        }
        if next >= w.flushed_next() {
            // Cannot happen while the shard publishes flushed before evicting;
            // if it ever did, waiting for the next flush is still correct.
            return Ok(None);
        }
        match self.read_disk(next) {
            // Retention removed its segment since `retained` was read: it
            // only removes what the cold store holds, when there is one.
            Err(SubscribeError::BelowRetention { .. }) if self.shard.cold().is_some() => {
                self.read_cold(next)
            }
            read => read.map(Some),
        }
    }

    /// Records from `next`, below the local log, from the shard's cold store
    /// (`None` while it fetches them: the shard's readers are woken then).
    fn read_cold(&mut self, next: u64) -> Result<Option<Run>, SubscribeError> {
        let Some(cold) = self.shard.cold().cloned() else {
            return Err(self.below_retention(next));
        };
        self.hint = Hint::None;
        let corrupt = |reason: String| SubscribeError::Corrupt {
            shard: self.shard.id,
            segment: "in the object store".into(),
            position: next,
            reason,
        };
        match cold.chunk(&self.shard, next) {
            ColdChunk::Ready { header, body } => {
                if !(header.first_offset..header.end_offset()).contains(&next) {
                    return Err(corrupt(format!(
                        "the chunk handed out for offset {next} holds {}..{}",
                        header.first_offset,
                        header.end_offset()
                    )));
                }
                let start = position_in(&body, header.first_offset, next)
                    .ok_or_else(|| corrupt(format!("offset {next} not found in its chunk")))?;
                Ok(Some(Run {
                    bytes: body.slice(start..),
                    first_offset: next,
                    sealed: true,
                    whole: (start == 0).then_some(header),
                }))
            }
            ColdChunk::Pending => Ok(None),
            ColdChunk::NotHeld => Err(self.below_retention(next)),
            ColdChunk::Failed(reason) => Err(corrupt(reason)),
            ColdChunk::Unavailable(reason) => Err(SubscribeError::ColdUnavailable {
                shard: self.shard.id,
                reason,
            }),
        }
    }

    /// Whether `next` is below the local log (read from the cold store).
    pub fn below_local(&self, next: u64) -> bool {
        next < self.shard.watermarks.snapshot().retained_from
    }

    /// The oldest offset this reader can read: the local log's oldest, or
    /// the cold store's when what it holds reaches the local log.
    pub fn oldest(&self) -> u64 {
        let local = self.shard.watermarks.snapshot().retained_from;
        match self.shard.cold().and_then(|c| c.held(self.shard.id)) {
            Some(held) if held.start < local && held.end >= local => held.start,
            _ => local,
        }
    }

    /// Records from `next` in the ring, none at or past `limit`.
    fn read_ring(&mut self, next: u64, limit: u64) -> Option<Run> {
        // Continue in the window of the last run (the caller consumed all of it).
        let (window, start) = match &self.hint {
            Hint::Window { window, end } if follows(window, *end, next) => {
                if *end < window.committed().len() {
                    (window.clone(), *end)
                } else if !window.is_sealed() {
                    return None; // nothing new yet (a later window implies this one is sealed)
                } else {
                    let later = self.shard.ring.window_for(next)?;
                    if Arc::ptr_eq(&later, window) {
                        return None; // the next window is not in the view yet
                    }
                    let start = position_in(later.committed(), later.first_offset(), next)?;
                    (later, start)
                }
            }
            _ => {
                let window = self.shard.ring.window_for(next)?;
                let start = position_in(window.committed(), window.first_offset(), next)?;
                (window, start)
            }
        };
        // Sealed first, then the length: a window sealed before its length
        // is read has its final length.
        let sealed = window.is_sealed();
        let len = window.committed().len();
        if start >= len {
            return None; // `next` is committed but not in this view yet: retry on wake-up
        }
        // Never past `limit` (the committed, or with durable_only the flushed,
        // watermark that let this read start): a batch's records become
        // readable as it fills and seals windows, before the committed
        // watermark covers the batch. Cut at the first record at or past it
        // (a walk over this run's records, which the caller consumes next
        // anyway), unless a later window already holds `limit - 1`, so all of
        // this one is below it.
        let may_pass = self.durable_only
            || !sealed
            || self
                .shard
                .ring
                .window_for(limit - 1)
                .is_none_or(|w| Arc::ptr_eq(&w, &window));
        let cut = if may_pass {
            position_in(&window.committed()[start..len], next, limit)
                .map(|at| start + at)
                .filter(|&at| at < len)
        } else {
            None
        };
        let end = cut.unwrap_or(len);
        let bytes = Bytes::from_owner(WindowPrefix {
            window: window.clone(),
            len: end,
        })
        .slice(start..);
        self.hint = Hint::Window { window, end };
        Some(Run {
            bytes,
            first_offset: next,
            sealed: sealed && cut.is_none(),
            whole: None,
        })
    }

    fn read_disk(&mut self, next: u64) -> Result<Run, SubscribeError> {
        // After a chunk the next one follows it; anywhere else the shard's
        // published chunk index says where `next` is (a binary search).
        let (mut segment, mut pos) = match &self.hint {
            Hint::Chunk {
                segment,
                pos,
                header,
            } if header.end_offset() == next => {
                (segment.clone(), pos + header.disk_len(segment.alignment))
            }
            _ => self.locate(next)?,
        };
        let mut looked_up = false;
        loop {
            match chunk_at(&segment, pos) {
                // A seal (no records) or, past a hint, nothing of `next` yet.
                Some(header) if header.end_offset() <= next => {
                    pos += header.disk_len(segment.alignment);
                }
                Some(header) if header.first_offset <= next => {
                    let disk_len = header.disk_len(segment.alignment);
                    let image = segment.bytes.slice(pos..pos + disk_len);
                    chunk::verify(&image).map_err(|reason| SubscribeError::Corrupt {
                        shard: self.shard.id,
                        segment: segment_name(segment.first_offset),
                        position: pos as u64,
                        reason: reason.to_string(),
                    })?;
                    let body =
                        image.slice(CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + header.body_len as usize);
                    let start = position_in(&body, header.first_offset, next).ok_or_else(|| {
                        SubscribeError::Corrupt {
                            shard: self.shard.id,
                            segment: segment_name(segment.first_offset),
                            position: pos as u64,
                            reason: format!("offset {next} not found in its chunk"),
                        }
                    })?;
                    self.hint = Hint::Chunk {
                        segment,
                        pos,
                        header,
                    };
                    return Ok(Run {
                        bytes: body.slice(start..),
                        first_offset: next,
                        sealed: true,
                        whole: (start == 0).then_some(header),
                    });
                }
                Some(header) => {
                    return Err(SubscribeError::Corrupt {
                        shard: self.shard.id,
                        segment: segment_name(segment.first_offset),
                        position: pos as u64,
                        reason: format!(
                            "chunk starts at offset {} past the wanted {next}",
                            header.first_offset
                        ),
                    })
                }
                // The end of the chunks as mapped: `next` is in a later
                // segment, or (an in-memory image) in bytes written after the
                // mapping was taken. The index says which, once.
                None if !looked_up => {
                    looked_up = true;
                    (segment, pos) = self.locate(next)?;
                }
                None => {
                    return Err(SubscribeError::Corrupt {
                        shard: self.shard.id,
                        segment: segment_name(segment.first_offset),
                        position: pos as u64,
                        reason: format!("no chunk holds durable offset {next}"),
                    })
                }
            }
        }
    }

    /// The segment and byte position of the durable chunk holding `next`,
    /// from the shard's chunk index (no directory listing, no walk).
    fn locate(&mut self, next: u64) -> Result<(MappedSegment, usize), SubscribeError> {
        let Some((first, entry)) = self.shard.locate_offset(next) else {
            if next < self.shard.watermarks.snapshot().retained_from {
                return Err(self.below_retention(next));
            }
            return Err(SubscribeError::Corrupt {
                shard: self.shard.id,
                segment: String::new(),
                position: 0,
                reason: format!("the chunk index holds no chunk for durable offset {next}"),
            });
        };
        Ok((self.map_segment(first, next)?, entry.position as usize))
    }

    /// Maps the segment starting at `first` (for a read of `offset`).
    fn map_segment(&mut self, first: u64, offset: u64) -> Result<MappedSegment, SubscribeError> {
        match self.shard.files().map(&segment_name(first)) {
            Ok(bytes) => {
                let header =
                    SegmentHeader::decode(&bytes).map_err(|e| SubscribeError::Corrupt {
                        shard: self.shard.id,
                        segment: segment_name(first),
                        position: 0,
                        reason: e.to_string(),
                    })?;
                Ok(MappedSegment {
                    first_offset: first,
                    bytes,
                    alignment: header.alignment as usize,
                })
            }
            // Removed by retention since the index was read.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(self.below_retention(offset)),
            Err(e) => Err(SubscribeError::Io {
                shard: self.shard.id,
                reason: e.to_string(),
            }),
        }
    }

    /// The typed error for an offset older than anything retained, naming the
    /// oldest retained position.
    pub fn below_retention(&mut self, offset: u64) -> SubscribeError {
        let (retained_from, retained_ts) = self.oldest_retained();
        SubscribeError::BelowRetention {
            shard: self.shard.id,
            offset,
            retained_from,
            retained_ts,
        }
    }

    /// The oldest retained offset (in the cold store if it holds older
    /// ones) and, when it is on the local disk, its stamp.
    pub fn oldest_retained(&mut self) -> (u64, Option<i64>) {
        let from = self.oldest();
        let ts = self
            .shard
            .locate_offset(from)
            .map(|(_, chunk)| chunk.first_ts);
        (from, ts)
    }

    /// The first offset stamped at or after `since`: the committed next offset
    /// if every committed record is older.
    ///
    /// Below the local log, in the cold store, it is the first offset of the
    /// first stored segment holding such a record: the lane skips the
    /// records before `since` there (stamps rise with offsets, so that is
    /// the same start).
    pub fn find_ts(&mut self, since: i64) -> Result<u64, SubscribeError> {
        let oldest = self.oldest();
        if let Some(cold) = self.shard.cold() {
            match cold.find_ts(self.shard.id, since) {
                Some(offset) if offset < self.shard.watermarks.snapshot().retained_from => {
                    return Ok(offset.max(oldest));
                }
                _ => {}
            }
        }
        loop {
            let committed = self.shard.watermarks.committed_next();
            let flushed = self.shard.watermarks.flushed_next();
            if let Some(offset) = self.find_ts_on_disk(since, flushed)? {
                return Ok(offset);
            }
            match self.find_ts_in_ring(since, flushed, committed) {
                Some(found) => return Ok(found.unwrap_or(committed)),
                None => continue, // the ring moved past `flushed` meanwhile: look again
            }
        }
    }

    /// The first durable offset stamped at or after `since`: a binary search
    /// of the chunk index, then a walk of one chunk's records.
    fn find_ts_on_disk(&mut self, since: i64, flushed: u64) -> Result<Option<u64>, SubscribeError> {
        let retained = self.shard.watermarks.snapshot().retained_from;
        if retained >= flushed {
            return Ok(None);
        }
        let Some((_, entry)) = self.shard.locate_ts(since) else {
            return Ok(None);
        };
        if entry.first_offset >= flushed {
            return Ok(None);
        }
        let run = self.read_disk(entry.first_offset.max(retained))?;
        Ok(first_at_or_after(&run.bytes, since))
    }

    /// `Some(Some(offset))`: found; `Some(None)`: no record in `[from, committed)`
    /// is at or after `since`; `None`: the ring no longer holds `from`.
    fn find_ts_in_ring(&self, since: i64, from: u64, committed: u64) -> Option<Option<u64>> {
        let windows = self.shard.ring.windows();
        if from < committed && windows.first().is_none_or(|w| w.first_offset() > from) {
            return None;
        }
        for (i, window) in windows.iter().enumerate() {
            // Skip a window when the next one already starts before `since`.
            let next_first_ts = windows
                .get(i + 1)
                .and_then(|w| record::peek_position(w.committed()).ok())
                .map(|(_, _, ts)| ts);
            if next_first_ts.is_some_and(|ts| ts < since) {
                continue;
            }
            let mut rest = window.committed();
            while let Ok((len, offset, ts)) = record::peek_position(rest) {
                if offset >= committed {
                    return Some(None);
                }
                if offset >= from && ts >= since {
                    return Some(Some(offset));
                }
                rest = &rest[len..];
            }
        }
        Some(None)
    }
}

/// The valid chunk header at `pos`, if there is one.
fn chunk_at(segment: &MappedSegment, pos: usize) -> Option<ChunkHeader> {
    let header = ChunkHeader::decode(segment.bytes.get(pos..)?).ok()?;
    (pos + header.disk_len(segment.alignment) <= segment.bytes.len()).then_some(header)
}

/// Byte position of the record with `offset` in `records` (whose first record is `first`).
fn position_in(records: &[u8], first: u64, offset: u64) -> Option<usize> {
    let mut at = 0;
    let mut current = first;
    while current < offset {
        at += record::peek_len(&records[at..]).ok()?;
        current += 1;
    }
    Some(at)
}

/// Whether the record at byte `end` of `window`, if it is there yet, is `next`
/// (a cheap check of the read contract; past the committed bytes it holds by contract).
fn follows(window: &Window, end: usize, next: u64) -> bool {
    match record::peek_position(&window.committed()[end..]) {
        Ok((_, offset, _)) => offset == next,
        Err(_) => next > window.first_offset() || end == 0,
    }
}

fn first_at_or_after(records: &[u8], since: i64) -> Option<u64> {
    let mut rest = records;
    while let Ok((len, offset, ts)) = record::peek_position(rest) {
        if ts >= since {
            return Some(offset);
        }
        rest = &rest[len..];
    }
    None
}
