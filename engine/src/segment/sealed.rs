//! Sealed segments as files, for what ships them elsewhere (the server's
//! object-store uploader), on any thread: which of a shard's segments are
//! sealed, and reading one chunk by chunk, each verified, up to its last.
//!
//! A shard writes only its newest segment. Before it creates the next one it
//! syncs the current one in full (`Log::rotate`), so every segment but the
//! newest is sealed and durable: its bytes never change again, and
//! retention removes it only once told it may.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::chunk::{ChunkHeader, CHUNK_HEADER_LEN};
use crate::segment::index::ChunkEntry;
use crate::segment::{parse_segment_name, SegmentHeader, SEGMENT_HEADER_BLOCK};

/// Most bytes [`read_sealed`] reads and hands out at once: what an upload
/// holds of a segment is a few of these, however large its chunks (a chunk
/// is up to a flush round, 16 MiB by default).
pub const PIECE_BYTES: usize = 1 << 20;

/// A sealed segment's file: its name and the offsets it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedFile {
    pub name: String,
    pub first_offset: u64,
    /// Where its successor starts: it holds `first_offset..next_offset`.
    pub next_offset: u64,
}

/// What reading a sealed segment found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedSegment {
    pub header: SegmentHeader,
    /// Bytes from the file's start to the end of its last chunk: what
    /// [`read_sealed`] handed out.
    pub bytes: u64,
    /// CRC-32C of those bytes.
    pub crc32c: u32,
    /// Stamps of its first and last records (none if it holds none).
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
    /// The lowest and highest generation of its chunks.
    pub generations: Option<(u32, u32)>,
    /// Its chunks that hold records, in order: where a reader of the
    /// uploaded object finds each (the bucket's chunk index).
    pub chunks: Vec<ChunkEntry>,
}

/// The sealed segments of the shard directory `dir`, oldest first: every
/// segment but the newest.
pub fn sealed_files(dir: &Path) -> io::Result<Vec<SealedFile>> {
    let mut starts: Vec<(u64, String)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(first) = parse_segment_name(name) {
            starts.push((first, name.to_owned()));
        }
    }
    starts.sort();
    Ok(starts
        .windows(2)
        .map(|pair| SealedFile {
            name: pair[0].1.clone(),
            first_offset: pair[0].0,
            next_offset: pair[1].0,
        })
        .collect())
}

fn invalid(path: &Path, what: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {what}", path.display()),
    )
}

/// Reads the sealed segment `file` of directory `dir`, handing `each` its
/// bytes in order, in pieces of at most [`PIECE_BYTES`]: the header block,
/// then every chunk as it is on disk (padding included), up to the end of
/// the last one. Every chunk is checked: its header (own checksum, offsets
/// following on from the previous chunk, stamps rising, its shard) before
/// any of it is handed out, its body's checksum as the pieces go by; and
/// the last must end where the successor starts. A segment that does not
/// read so is an error, and what `each` got of it is to be thrown away (a
/// piece goes out before its chunk's body checksum is known: so memory
/// stays a piece, not a chunk). The reading is [`read_sealed_in`]'s.
pub fn read_sealed(
    dir: &Path,
    file: &SealedFile,
    each: impl FnMut(Vec<u8>) -> io::Result<()>,
) -> io::Result<SealedSegment> {
    read_sealed_in(dir, file, PIECE_BYTES, each)
}

/// [`read_sealed`] in pieces of at most `piece_bytes` (at least 1).
// Bytes from disk: hostile until checked.
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
pub fn read_sealed_in(
    dir: &Path,
    file: &SealedFile,
    piece_bytes: usize,
    mut each: impl FnMut(Vec<u8>) -> io::Result<()>,
) -> io::Result<SealedSegment> {
    let piece_bytes = piece_bytes.max(1);
    let path = dir.join(&file.name);
    let f = File::open(&path)?;
    let len = f.metadata()?.len();
    let mut block = vec![0u8; SEGMENT_HEADER_BLOCK];
    f.read_exact_at(&mut block, 0)?;
    let header = SegmentHeader::decode(&block)
        .map_err(|e| invalid(&path, format!("segment header: {e}")))?;
    if header.first_offset != file.first_offset {
        return Err(invalid(
            &path,
            format!("its header says offset {}", header.first_offset),
        ));
    }
    let alignment = header.alignment as usize;
    let mut crc = crc32c::crc32c(&block);
    for piece in block.chunks(piece_bytes) {
        each(piece.to_vec())?;
    }
    let mut found = SealedSegment {
        header,
        bytes: SEGMENT_HEADER_BLOCK as u64,
        crc32c: 0,
        first_ts: None,
        last_ts: None,
        generations: None,
        chunks: Vec::new(),
    };
    let mut next = file.first_offset;
    let mut pos = SEGMENT_HEADER_BLOCK as u64;
    let mut head = [0u8; CHUNK_HEADER_LEN];
    while pos + CHUNK_HEADER_LEN as u64 <= len {
        f.read_exact_at(&mut head, pos)?;
        if head.iter().all(|&b| b == 0) {
            break;
        }
        let h = ChunkHeader::decode(&head)
            .map_err(|e| invalid(&path, format!("chunk at byte {pos}: {e}")))?;
        let disk_len = h.disk_len(alignment);
        if pos + disk_len as u64 > len {
            return Err(invalid(
                &path,
                format!("chunk at byte {pos} runs past the file"),
            ));
        }
        let in_order = h.first_offset == next
            && h.shard == header.shard
            && (h.record_count == 0 || found.last_ts.is_none_or(|t| h.first_ts > t));
        if !in_order {
            return Err(invalid(
                &path,
                format!(
                    "chunk at byte {pos} (shard {}, offset {}) does not follow offset {next}",
                    h.shard, h.first_offset
                ),
            ));
        }
        if h.record_count > 0 {
            found.first_ts.get_or_insert(h.first_ts);
            found.last_ts = Some(h.last_ts);
            found.chunks.push(ChunkEntry::new(&h, pos, disk_len));
            found.generations = Some(match found.generations {
                None => (h.generation, h.generation),
                Some((low, high)) => (low.min(h.generation), high.max(h.generation)),
            });
        }
        next = h.end_offset();
        let body_end = CHUNK_HEADER_LEN + h.body_len as usize;
        let mut body_crc = 0;
        let mut at = 0;
        while at < disk_len {
            let n = (disk_len - at).min(piece_bytes);
            let mut piece = vec![0u8; n];
            f.read_exact_at(&mut piece, pos + at as u64)?;
            let (lo, hi) = (at.max(CHUNK_HEADER_LEN), (at + n).min(body_end));
            if let Some(body) = piece.get(lo.saturating_sub(at)..hi.saturating_sub(at)) {
                body_crc = crc32c::crc32c_append(body_crc, body);
            }
            crc = crc32c::crc32c_append(crc, &piece);
            each(piece)?;
            at += n;
        }
        if body_crc != h.body_crc {
            return Err(invalid(
                &path,
                format!(
                    "chunk at byte {pos}: body checksum {body_crc:08x}, its header says {:08x}",
                    h.body_crc
                ),
            ));
        }
        pos += disk_len as u64;
    }
    if next != file.next_offset {
        return Err(invalid(
            &path,
            format!(
                "ends at offset {next}, but its successor starts at {}",
                file.next_offset
            ),
        ));
    }
    found.bytes = pos;
    found.crc32c = crc;
    Ok(found)
}
