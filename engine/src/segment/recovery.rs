//! Recovery of one segment: keep exactly its valid prefix.
//!
//! The scan walks chunks from the header block, verifying header and body
//! checksums and that offsets continue densely with increasing stamps. At the
//! first chunk that fails (or the first zero block) it decides between two
//! stories, using the `synced_through` every chunk header carries:
//!
//! * **torn tail**: no valid chunk beyond it claims that this position was
//!   already durable. What lies here was never synced, so never acknowledged as
//!   durable: the segment ends here and the residue is zeroed by the caller.
//! * **corruption**: a valid chunk further on was written after this position
//!   had been synced (or the whole segment was synced before its successor was
//!   created). Synced data is damaged; the scan fails with a typed error naming
//!   the segment and position instead of dropping what follows.
//!
//! Residue can only lie within `max_unsynced_bytes` of the last sync point (the
//! writer's bound, recorded in the segment header), so the scan past a bad
//! chunk reads at most that far.

use crate::chunk::{self, ChunkError, ChunkHeader, CHUNK_HEADER_LEN, FLAG_SEAL};
use crate::record::{self, ProducerStamp};
use crate::segment::error::RecoveryError;
use crate::segment::index::{ChunkEntry, SegmentIndex};
use crate::segment::{SegmentHeader, SEGMENT_HEADER_BLOCK};
use crate::storage::StorageFile;

/// Bytes read at a time while scanning.
const READ_BLOCK: usize = 4 << 20;

/// What the scan of one segment found.
#[derive(Debug)]
pub struct ScannedSegment {
    pub header: SegmentHeader,
    pub index: SegmentIndex,
    /// Where the next chunk goes: the end of the valid prefix.
    pub write_pos: u64,
    /// Every byte below this was durable when some valid chunk was written.
    pub known_synced: u64,
    pub next_offset: u64,
    pub last_ts: Option<i64>,
    /// The valid prefix ends with a seal chunk: the log was closed cleanly.
    pub clean_close: bool,
    pub torn: Option<TornTail>,
}

/// An invalid tail that recovery cut off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    pub position: u64,
    pub reason: ChunkError,
    /// Valid chunks found in the unsynced residue and discarded with it.
    pub residue_chunks: u32,
    /// End of the last non-zero block of the residue: `[position, dirty_end)` must be zeroed.
    pub dirty_end: u64,
}

/// Reads a segment file in large blocks, and verifies chunks in it.
pub(crate) struct Reader<'f, F: StorageFile> {
    file: &'f F,
    what: &'f str,
    file_len: u64,
    buf: Option<F::ReadBuf>,
    buf_pos: u64,
}

impl<'f, F: StorageFile> Reader<'f, F> {
    /// A reader of `file` (`what` names it in errors) of `file_len` bytes.
    pub(crate) fn new(file: &'f F, what: &'f str, file_len: u64) -> Reader<'f, F> {
        Reader {
            file,
            what,
            file_len,
            buf: None,
            buf_pos: 0,
        }
    }

    /// Up to `len` bytes at `pos`; fewer only at the end of the file.
    pub(crate) async fn get(&mut self, pos: u64, len: usize) -> Result<&[u8], RecoveryError> {
        let end = (pos + len as u64).min(self.file_len.max(pos));
        let covered = self
            .buf
            .as_ref()
            .is_some_and(|b| self.buf_pos <= pos && self.buf_pos + b.len() as u64 >= end);
        if !covered {
            let want = len
                .max(READ_BLOCK)
                .min((self.file_len.saturating_sub(pos)) as usize);
            let buf = self
                .file
                .read_at(pos, want)
                .await
                .map_err(|source| RecoveryError::Io {
                    what: format!("{} (read at {pos})", self.what),
                    source,
                })?;
            self.buf = Some(buf);
            self.buf_pos = pos;
        }
        let buf = self.buf.as_deref().unwrap_or(&[]);
        let start = ((pos - self.buf_pos) as usize).min(buf.len());
        let stop = ((end - self.buf_pos) as usize).min(buf.len()).max(start);
        Ok(&buf[start..stop])
    }

    /// The verified chunk at `pos`, with its length on disk. The producer
    /// stamps of its records, as `(stamp, offset, ts)`, replace `stamps`.
    pub(crate) async fn chunk(
        &mut self,
        pos: u64,
        shard: u32,
        alignment: usize,
        stamps: &mut Vec<(ProducerStamp, u64, i64)>,
    ) -> Result<Result<(ChunkHeader, usize), ChunkError>, RecoveryError> {
        stamps.clear();
        let header = match ChunkHeader::decode(self.get(pos, CHUNK_HEADER_LEN).await?) {
            Ok(h) => h,
            Err(e) => return Ok(Err(e)),
        };
        if header.shard != shard {
            return Ok(Err(ChunkError::Inconsistent("chunk of another shard")));
        }
        let disk_len = header.disk_len(alignment);
        let bytes = self.get(pos, disk_len).await?;
        let verified = chunk::verify_each(bytes, |record| {
            if !record::has_producer_stamp(record) {
                return; // the common case: one byte read
            }
            if let Ok(h) = record::peek_header(record) {
                stamps.extend(h.producer.map(|stamp| (stamp, h.offset, h.ts)));
            }
        });
        Ok(verified.map(|h| (h, disk_len)))
    }
}

/// Scans a segment whose header is `header`. `fully_synced` says the segment
/// was completely durable before its successor was created, so any bad chunk
/// in it is corruption. `visit` sees the producer stamps of every chunk kept
/// (verified, in order), as `(stamp, offset, ts)`, gathered in the walk that
/// verifies its records: the producer table is rebuilt with no extra I/O and
/// no second pass.
pub async fn scan_segment<F: StorageFile>(
    file: &F,
    name: &str,
    header: SegmentHeader,
    fully_synced: bool,
    mut visit: impl FnMut(&[(ProducerStamp, u64, i64)]),
) -> Result<ScannedSegment, RecoveryError> {
    let file_len = file.len().await.map_err(|source| RecoveryError::Io {
        what: format!("{name} (length)"),
        source,
    })?;
    let alignment = header.alignment as usize;
    let mut reader = Reader {
        file,
        what: name,
        file_len,
        buf: None,
        buf_pos: 0,
    };
    let mut scanned = ScannedSegment {
        header,
        index: SegmentIndex::default(),
        write_pos: SEGMENT_HEADER_BLOCK as u64,
        known_synced: SEGMENT_HEADER_BLOCK as u64,
        next_offset: header.first_offset,
        last_ts: None,
        clean_close: false,
        torn: None,
    };
    let mut stamps = Vec::new();
    loop {
        let pos = scanned.write_pos;
        if pos >= file_len {
            return Ok(scanned);
        }
        let reason = match reader
            .chunk(pos, header.shard, alignment, &mut stamps)
            .await?
        {
            Ok((h, disk_len))
                if h.first_offset == scanned.next_offset
                    && (h.record_count == 0 || scanned.last_ts.is_none_or(|t| h.first_ts > t)) =>
            {
                scanned.clean_close = h.flags & FLAG_SEAL != 0;
                scanned.known_synced = scanned.known_synced.max(h.synced_through);
                if h.record_count > 0 {
                    if !stamps.is_empty() {
                        visit(&stamps);
                    }
                    scanned.index.push(ChunkEntry::new(&h, pos, disk_len));
                    scanned.next_offset = h.end_offset();
                    scanned.last_ts = Some(h.last_ts);
                }
                scanned.write_pos = pos + disk_len as u64;
                continue;
            }
            Ok(_) => ChunkError::Inconsistent("chunk out of sequence"),
            Err(e) => e,
        };
        let first_block_zero = reader.get(pos, alignment).await?.iter().all(|&b| b == 0);
        // No short-cut after a seal: chunks written after a clean close can
        // be torn too, and their residue must be found and zeroed.
        let residue = scan_residue(&mut reader, &scanned, pos, fully_synced).await?;
        if fully_synced && (!first_block_zero || residue.dirty_end > pos) {
            // Synced in full, so nothing past the valid prefix can be crash
            // residue: a zero block followed by data is a lost write.
            return Err(RecoveryError::Corruption {
                segment: name.to_string(),
                position: pos,
                reason: if first_block_zero {
                    ChunkError::Inconsistent("a zeroed block followed by data (a lost write)")
                } else {
                    reason
                },
                evidence: "the segment was synced in full before its successor was created".into(),
            });
        }
        if let Some(evidence) = residue.evidence {
            return Err(RecoveryError::Corruption {
                segment: name.to_string(),
                position: pos,
                reason,
                evidence,
            });
        }
        if residue.dirty_end > pos {
            scanned.torn = Some(TornTail {
                position: pos,
                reason,
                residue_chunks: residue.valid_chunks,
                dirty_end: residue.dirty_end,
            });
        }
        return Ok(scanned);
    }
}

struct Residue {
    valid_chunks: u32,
    dirty_end: u64,
    /// Set when a valid chunk proves that `pos` had been synced.
    evidence: Option<String>,
}

/// Looks at `[pos, pos + max_unsynced_bytes + alignment)` for valid chunks and non-zero blocks.
async fn scan_residue<F: StorageFile>(
    reader: &mut Reader<'_, F>,
    scanned: &ScannedSegment,
    pos: u64,
    fully_synced: bool,
) -> Result<Residue, RecoveryError> {
    let header = &scanned.header;
    let alignment = header.alignment as usize;
    // The bound comes from the segment header: a file's word, checksummed but
    // not otherwise limited, so its sum saturates (the file ends first).
    let limit = pos
        .saturating_add(header.max_unsynced_bytes)
        .saturating_add(alignment as u64)
        .min(reader.file_len);
    let mut residue = Residue {
        valid_chunks: 0,
        dirty_end: pos,
        evidence: None,
    };
    let mut q = pos;
    let mut stamps = Vec::new(); // residue is never replayed: its stamps are dropped
    while q < limit {
        if q > pos {
            let chunk = reader
                .chunk(q, header.shard, alignment, &mut stamps)
                .await?;
            if let Ok((h, disk_len)) = chunk {
                let end = q + disk_len as u64;
                if fully_synced || h.synced_through > pos {
                    let (a, b) = (h.first_offset, h.end_offset());
                    residue.evidence = Some(if fully_synced {
                        format!("a valid chunk at byte {q} (offsets {a}..{b}) follows it, in a segment synced in full")
                    } else {
                        format!(
                            "a valid chunk at byte {q} (offsets {a}..{b}) was written after byte {} had been synced",
                            h.synced_through
                        )
                    });
                    return Ok(residue);
                }
                residue.valid_chunks += 1;
                residue.dirty_end = end;
                q = end;
                continue;
            }
        }
        let block = reader.get(q, alignment).await?;
        if block.iter().any(|&b| b != 0) {
            residue.dirty_end = q + alignment as u64;
        }
        q += alignment as u64;
    }
    Ok(residue)
}
