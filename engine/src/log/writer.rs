//! The log's writer: chunks built here or framed elsewhere, appended at the
//! end of the active segment, with room made (rotation, syncs) and zeros
//! written ahead as the medium needs.

use super::{ChunkImage, Log};
use crate::chunk::{align_up, ChunkBuilder, ChunkDescription, CHUNK_HEADER_LEN};
use crate::segment::error::LogError;
use crate::segment::index::ChunkEntry;
use crate::segment::SEGMENT_HEADER_BLOCK;
use crate::storage::{Storage, StorageFile};

impl<S: Storage> Log<S> {
    /// Starts a chunk for the next records, in a buffer of `capacity` bytes
    /// (rounded up to the alignment) suitable for a direct write.
    pub fn chunk_builder(&self, capacity: usize) -> ChunkBuilder<<S::File as StorageFile>::Buf> {
        let active = self.active();
        let capacity = align_up(
            capacity.max(CHUNK_HEADER_LEN),
            active.header.alignment as usize,
        );
        ChunkBuilder::new(
            active.file.alloc(capacity),
            self.config.shard,
            self.next_offset,
        )
        .with_generation(self.generations.current())
    }

    /// Writes a chunk. It is durable once a later [`Log::sync`] returns.
    pub async fn append(
        &mut self,
        chunk: ChunkBuilder<<S::File as StorageFile>::Buf>,
    ) -> Result<ChunkEntry, LogError> {
        self.check_latched()?;
        let (Some(first_ts), false) = (chunk.first_ts(), chunk.is_empty()) else {
            return Err(LogError::EmptyChunk);
        };
        if chunk.first_offset() != self.next_offset || self.last_ts.is_some_and(|t| first_ts <= t) {
            return Err(LogError::OutOfOrder {
                expected: self.next_offset,
                found: chunk.first_offset(),
                last_ts: self.last_ts,
                found_ts: first_ts,
            });
        }
        self.make_room(chunk.len()).await?;
        let active = self
            .segments
            .last_mut()
            .expect("the log always has a segment");
        let (buf, header, len) = chunk.finish(self.synced_pos, active.header.alignment as usize);
        let position = self.write_pos;
        self.write_at_end(buf, len, "writing a chunk").await?;
        let entry = ChunkEntry::new(&header, position, len);
        let active = self
            .segments
            .last_mut()
            .expect("the log always has a segment");
        active.index.push(entry);
        self.write_pos += len as u64;
        self.next_offset = header.end_offset();
        self.last_ts = Some(header.last_ts);
        Ok(entry)
    }

    /// Writes chunks whose records were framed elsewhere (a shard's windows),
    /// as few aligned writes as the segment and the unsynced bound allow:
    /// group commit. Durable once a later [`Log::sync`] returns.
    pub async fn append_chunks(&mut self, chunks: &[ChunkImage<'_>]) -> Result<(), LogError> {
        self.check_latched()?;
        let mut expected = self.next_offset;
        let mut last_ts = self.last_ts;
        for c in chunks {
            let d = &c.description;
            if d.record_count == 0 {
                return Err(LogError::EmptyChunk);
            }
            assert_eq!(
                d.body_len,
                c.body.len(),
                "a chunk image's description matches its body"
            );
            if d.first_offset != expected || last_ts.is_some_and(|t| d.first_ts <= t) {
                return Err(LogError::OutOfOrder {
                    expected,
                    found: d.first_offset,
                    last_ts,
                    found_ts: d.first_ts,
                });
            }
            expected = d.first_offset + u64::from(d.record_count);
            last_ts = Some(d.last_ts);
        }
        self.prepare_for(chunks).await?;
        let mut i = 0;
        while i < chunks.len() {
            let made_room = self
                .make_room(CHUNK_HEADER_LEN + chunks[i].body.len())
                .await;
            let mut total = match made_room {
                // Part of the round is written: refusing the rest is not
                // "nothing was written". Only a round larger than a segment
                // rotates twice and gets here.
                Err(LogError::NoSpace { cause }) if i > 0 => {
                    let source = std::io::Error::new(std::io::ErrorKind::StorageFull, cause);
                    return Err(self.latch("creating a segment", source));
                }
                made_room => made_room?,
            };
            let header = self.active().header;
            let bound = header
                .max_unsynced_bytes
                .min(self.config.max_unsynced_bytes);
            let alignment = header.alignment as usize;
            let mut end = i + 1;
            while let Some(next) = chunks.get(end) {
                let len = align_up(CHUNK_HEADER_LEN + next.body.len(), alignment) as u64;
                let stop = self.write_pos + total + len;
                if stop > header.segment_bytes || stop - self.synced_pos > bound {
                    break;
                }
                total += len;
                end += 1;
            }
            let (position, synced_through, shard) =
                (self.write_pos, self.synced_pos, self.config.shard);
            let generation = self.generations.current();
            let active = self
                .segments
                .last_mut()
                .expect("the log always has a segment");
            let mut buf = active.file.alloc(total as usize);
            let mut at = 0;
            let mut entries = Vec::with_capacity(end - i);
            for c in &chunks[i..end] {
                let out = &mut buf.as_mut()[at..];
                out[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + c.body.len()].copy_from_slice(c.body);
                let description = ChunkDescription {
                    shard,
                    generation,
                    ..c.description
                };
                let (h, len) = description.frame(out, synced_through, alignment);
                entries.push(ChunkEntry::new(&h, position + at as u64, len));
                at += len;
            }
            self.write_at_end(buf, total as usize, "writing chunks")
                .await?;
            let active = self
                .segments
                .last_mut()
                .expect("the log always has a segment");
            for entry in entries {
                active.index.push(entry);
                self.next_offset = entry.end_offset();
                self.last_ts = Some(entry.last_ts);
            }
            self.write_pos += total;
            i = end;
        }
        Ok(())
    }

    /// Writes the first `len` bytes of `buf` at the end of the active segment
    /// (`write_pos`, which the caller then moves), and beside them, when the
    /// medium asks for it ([`StorageFile::zero_ahead`]), zeros ahead of them;
    /// latches on failure (`what` says which write).
    async fn write_at_end(
        &mut self,
        buf: <S::File as StorageFile>::Buf,
        len: usize,
        what: &'static str,
    ) -> Result<(), LogError> {
        let position = self.write_pos;
        let round = position..position + len as u64;
        let active = self.active();
        let zeros = zeros_ahead(
            active.file.zero_ahead() as u64,
            self.zeroed_to,
            round.clone(),
            active.header.segment_bytes,
        );
        let write = active.file.write_at(buf, len, position);
        let written = match zeros.clone() {
            // Beside the round, so it waits for the longer of the two
            // writes, not for both in turn.
            Some(ahead) => {
                let zeros_len = (ahead.end - ahead.start) as usize;
                let mut zeros = active.file.alloc(zeros_len);
                zeros.as_mut()[..zeros_len].fill(0);
                let ahead = active.file.write_at(zeros, zeros_len, ahead.start);
                let (round, ahead) = futures_lite::future::zip(write, ahead).await;
                round.and(ahead)
            }
            None => write.await,
        };
        if let Err(source) = written {
            return Err(self.latch(what, source));
        }
        self.zeroed_to = zeros.map_or(round.end, |z| z.end).max(self.zeroed_to);
        Ok(())
    }

    /// Rotates and syncs as needed so a chunk of `framed_len` bytes (header and
    /// body) can be written next; returns its length on disk.
    async fn make_room(&mut self, framed_len: usize) -> Result<u64, LogError> {
        let header = self.active().header;
        let disk_len = align_up(framed_len, header.alignment as usize) as u64;
        let bound = header
            .max_unsynced_bytes
            .min(self.config.max_unsynced_bytes);
        if disk_len > bound || disk_len + SEGMENT_HEADER_BLOCK as u64 > self.config.segment_bytes {
            return Err(LogError::ChunkTooLarge {
                len: disk_len as usize,
                segment_bytes: self.config.segment_bytes,
                max_unsynced: bound,
            });
        }
        if self.write_pos + disk_len > self.active().header.segment_bytes {
            self.rotate().await?;
        }
        if self.write_pos + disk_len - self.synced_pos > bound {
            self.sync().await?;
        }
        Ok(disk_len)
    }
}

/// The range to write zeros over beside a round written at `round`, every
/// byte below `zeroed` being written already: the next `step` bytes past
/// both, within the segment, when the round is small (a quarter of `step` or
/// less: a larger one spreads its own extent conversion over enough bytes)
/// and fewer than half of `step` written bytes are left past its end.
fn zeros_ahead(
    step: u64,
    zeroed: u64,
    round: std::ops::Range<u64>,
    segment_bytes: u64,
) -> Option<std::ops::Range<u64>> {
    let from = zeroed.max(round.end);
    if step == 0 || round.end - round.start > step / 4 || from - round.end >= step / 2 {
        return None;
    }
    let to = (from + step).min(segment_bytes);
    (from < to).then_some(from..to)
}

#[cfg(test)]
mod zeros_ahead_tests {
    use super::zeros_ahead;

    const STEP: u64 = 256 << 10;
    const SEGMENT: u64 = 1 << 20;

    #[test]
    fn a_small_round_near_the_written_end_zeros_the_next_step() {
        assert_eq!(
            zeros_ahead(STEP, 4096, 4096..8192, SEGMENT),
            Some(8192..8192 + STEP)
        );
        // Written bytes left ahead, but fewer than half a step: from there on.
        let zeroed = 8192 + STEP / 2 - 4096;
        assert_eq!(
            zeros_ahead(STEP, zeroed, 4096..8192, SEGMENT),
            Some(zeroed..zeroed + STEP)
        );
    }

    #[test]
    fn nothing_while_half_a_step_is_written_ahead() {
        assert_eq!(
            zeros_ahead(STEP, 8192 + STEP / 2, 4096..8192, SEGMENT),
            None
        );
    }

    #[test]
    fn nothing_beside_a_large_round_or_when_the_medium_does_not_need_it() {
        assert_eq!(
            zeros_ahead(STEP, 4096, 4096..4096 + STEP / 4 + 4096, SEGMENT),
            None
        );
        assert_eq!(zeros_ahead(0, 4096, 4096..8192, SEGMENT), None);
    }

    #[test]
    fn never_past_the_segment() {
        let end = SEGMENT - 4096;
        assert_eq!(
            zeros_ahead(STEP, end, end - 4096..end, SEGMENT),
            Some(end..SEGMENT)
        );
        assert_eq!(
            zeros_ahead(STEP, SEGMENT, SEGMENT - 4096..SEGMENT, SEGMENT),
            None
        );
    }
}
