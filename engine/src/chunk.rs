//! Chunks: a run of records with dense offsets, as written to disk in one
//! aligned write.
//!
//! A chunk is a 64-byte header, the records, and zero padding to the
//! O_DIRECT alignment. The header names the shard, the offsets and stamps it
//! holds, and the checksums of itself and of the body, so recovery can verify a
//! chunk without decoding its records. `synced_through` records how far the
//! segment was durable when the chunk was written: it is what lets recovery
//! tell a torn tail (crash residue) from corruption of synced data.

use thiserror::Error;

use crate::record::{self, read_u16, read_u32, read_u64, Record, RecordError};

/// Bytes of a chunk header.
pub const CHUNK_HEADER_LEN: usize = 64;

/// Largest chunk body the format allows.
pub const MAX_CHUNK_BODY: usize = 256 << 20;

const CHUNK_MAGIC: u32 = u32::from_le_bytes(*b"RFCK");
const CHUNK_VERSION: u16 = 1;
/// Flag: the chunk carries no records and marks a clean close; every byte
/// before it was durable when it was written.
pub const FLAG_SEAL: u16 = 1;

/// The decoded header of a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    pub flags: u16,
    pub shard: u32,
    pub record_count: u32,
    pub first_offset: u64,
    pub first_ts: i64,
    pub last_ts: i64,
    pub body_len: u32,
    pub body_crc: u32,
    /// Position in the segment below which every byte was durable when this
    /// chunk was written.
    pub synced_through: u64,
    /// The shard generation that wrote the chunk (see `crate::generation`);
    /// 0 in chunks written before generations existed.
    pub generation: u32,
}

impl ChunkHeader {
    /// The offset after this chunk's last record.
    pub fn end_offset(&self) -> u64 {
        self.first_offset + u64::from(self.record_count)
    }

    /// Bytes the chunk occupies on disk, padding included.
    pub fn disk_len(&self, alignment: usize) -> usize {
        align_up(CHUNK_HEADER_LEN + self.body_len as usize, alignment)
    }

    // An encoder: indexing a header array of its own is fine. The lints are
    // denied from `decode` on.
    pub fn encode(&self, out: &mut [u8; CHUNK_HEADER_LEN]) {
        out.fill(0);
        out[0..4].copy_from_slice(&CHUNK_MAGIC.to_le_bytes());
        out[4..6].copy_from_slice(&CHUNK_VERSION.to_le_bytes());
        out[6..8].copy_from_slice(&self.flags.to_le_bytes());
        out[8..12].copy_from_slice(&self.shard.to_le_bytes());
        out[12..16].copy_from_slice(&self.record_count.to_le_bytes());
        out[16..24].copy_from_slice(&self.first_offset.to_le_bytes());
        out[24..32].copy_from_slice(&self.first_ts.to_le_bytes());
        out[32..40].copy_from_slice(&self.last_ts.to_le_bytes());
        out[40..44].copy_from_slice(&self.body_len.to_le_bytes());
        out[44..48].copy_from_slice(&self.body_crc.to_le_bytes());
        out[48..56].copy_from_slice(&self.synced_through.to_le_bytes());
        out[56..60].copy_from_slice(&self.generation.to_le_bytes());
        let crc = crc32c::crc32c(&out[..60]);
        out[60..64].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decodes and verifies a header. Never panics on arbitrary bytes.
    // Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
    #[deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unreachable
    )]
    pub fn decode(buf: &[u8]) -> Result<ChunkHeader, ChunkError> {
        let truncated = || ChunkError::Truncated {
            needed: CHUNK_HEADER_LEN,
            available: buf.len(),
        };
        // From here on every read is inside the header's 64 bytes.
        let Some(head) = buf.first_chunk::<CHUNK_HEADER_LEN>() else {
            return Err(truncated());
        };
        let u16_at = |at| read_u16(head, at).ok_or_else(truncated);
        let u32_at = |at| read_u32(head, at).ok_or_else(truncated);
        let u64_at = |at| read_u64(head, at).ok_or_else(truncated);
        let magic = u32_at(0)?;
        if magic != CHUNK_MAGIC {
            return Err(ChunkError::BadMagic(magic));
        }
        let (covered, _) = head.split_first_chunk::<60>().ok_or_else(truncated)?;
        let stored = u32_at(60)?;
        let computed = crc32c::crc32c(covered);
        if stored != computed {
            return Err(ChunkError::HeaderChecksum { stored, computed });
        }
        let version = u16_at(4)?;
        if version != CHUNK_VERSION {
            return Err(ChunkError::UnknownVersion(version));
        }
        let header = ChunkHeader {
            flags: u16_at(6)?,
            shard: u32_at(8)?,
            record_count: u32_at(12)?,
            first_offset: u64_at(16)?,
            first_ts: u64_at(24)? as i64,
            last_ts: u64_at(32)? as i64,
            body_len: u32_at(40)?,
            body_crc: u32_at(44)?,
            synced_through: u64_at(48)?,
            generation: u32_at(56)?,
        };
        if header.body_len as usize > MAX_CHUNK_BODY
            || (header.record_count == 0) != (header.body_len == 0)
            || header
                .first_offset
                .checked_add(u64::from(header.record_count))
                .is_none()
        {
            return Err(ChunkError::Inconsistent("impossible lengths"));
        }
        Ok(header)
    }
}

/// Why a chunk failed to verify.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ChunkError {
    #[error("chunk needs {needed} bytes but only {available} are available")]
    Truncated { needed: usize, available: usize },
    #[error("no chunk magic (found {0:#010x})")]
    BadMagic(u32),
    #[error("chunk header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    HeaderChecksum { stored: u32, computed: u32 },
    #[error("unknown chunk format version {0}")]
    UnknownVersion(u16),
    #[error("chunk body checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BodyChecksum { stored: u32, computed: u32 },
    #[error("chunk header is inconsistent: {0}")]
    Inconsistent(&'static str),
    #[error("record {index} of the chunk: {source}")]
    Record { index: u32, source: RecordError },
    #[error("chunk is full")]
    Full,
}

/// Verifies a whole chunk (header, body checksum, and that the body holds
/// exactly `record_count` records with dense offsets and increasing stamps
/// inside the header's range). `buf` starts at the chunk header.
// Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
pub fn verify(buf: &[u8]) -> Result<ChunkHeader, ChunkError> {
    verify_each(buf, |_| {})
}

/// [`verify`], handing each record (its bytes, as walked for the check) to
/// `each` on the way: state rebuilt from records costs no second walk. A
/// chunk that fails may have shown `each` some of its records first.
// Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
pub fn verify_each(buf: &[u8], mut each: impl FnMut(&[u8])) -> Result<ChunkHeader, ChunkError> {
    let header = ChunkHeader::decode(buf)?;
    let body = body_of(buf, &header)?;
    let computed = crc32c::crc32c(body);
    if computed != header.body_crc {
        return Err(ChunkError::BodyChecksum {
            stored: header.body_crc,
            computed,
        });
    }
    let mut rest = body;
    let mut prev_ts = None;
    for index in 0..header.record_count {
        let (len, offset, ts) =
            record::peek_position(rest).map_err(|source| ChunkError::Record { index, source })?;
        // `decode` checked that the header's offsets do not overflow; checked
        // here as well, an overflow would be one more inconsistency.
        if Some(offset) != header.first_offset.checked_add(u64::from(index))
            || ts < header.first_ts
            || ts > header.last_ts
            || prev_ts.is_some_and(|p| ts <= p)
            || (index == 0 && ts != header.first_ts)
        {
            return Err(ChunkError::Inconsistent("record offsets or stamps"));
        }
        prev_ts = Some(ts);
        // `peek_position` checked that `rest` holds the record's `len` bytes.
        let (record, after) = rest.split_at_checked(len).ok_or(ChunkError::Record {
            index,
            source: RecordError::Truncated {
                needed: len,
                available: rest.len(),
            },
        })?;
        each(record);
        rest = after;
    }
    if !rest.is_empty() || prev_ts.is_some_and(|p| p != header.last_ts) {
        return Err(ChunkError::Inconsistent("records do not fill the body"));
    }
    Ok(header)
}

/// The record bytes of a chunk whose header is `header`; `buf` starts at the header.
// Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
pub fn body_of<'a>(buf: &'a [u8], header: &ChunkHeader) -> Result<&'a [u8], ChunkError> {
    let body_len = header.body_len as usize;
    let body = buf
        .get(CHUNK_HEADER_LEN..)
        .and_then(|after_header| after_header.get(..body_len));
    body.ok_or(ChunkError::Truncated {
        // Saturating: a 32-bit usize cannot count past it anyway.
        needed: CHUNK_HEADER_LEN.saturating_add(body_len),
        available: buf.len(),
    })
}

/// Iterates the records of a verified chunk body.
// Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
pub fn records(body: &[u8]) -> impl Iterator<Item = Result<Record<'_>, RecordError>> {
    let mut rest = body;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let next = Record::decode(rest).and_then(|(rec, used)| {
            // `decode` read `used` bytes of `rest`, so they are there.
            let after = rest.get(used..).ok_or(RecordError::Truncated {
                needed: used,
                available: rest.len(),
            })?;
            Ok((rec, after))
        });
        match next {
            Ok((rec, after)) => {
                rest = after;
                Some(Ok(rec))
            }
            Err(e) => {
                rest = &[];
                Some(Err(e))
            }
        }
    })
}

// The builder and the framing below are encoders: they index buffers they
// sized themselves, so the lints are not denied there.

/// Frames records into a caller's buffer as one chunk: header space first,
/// records appended in place, header and padding written by [`ChunkBuilder::finish`].
pub struct ChunkBuilder<B> {
    buf: B,
    shard: u32,
    generation: u32,
    len: usize,
    count: u32,
    first_offset: u64,
    first_ts: i64,
    last_ts: i64,
}

impl<B: AsMut<[u8]> + AsRef<[u8]>> ChunkBuilder<B> {
    /// Starts a chunk whose first record will have offset `first_offset`.
    pub fn new(buf: B, shard: u32, first_offset: u64) -> Self {
        ChunkBuilder {
            buf,
            shard,
            generation: 0,
            len: CHUNK_HEADER_LEN,
            count: 0,
            first_offset,
            first_ts: 0,
            last_ts: 0,
        }
    }

    /// Marks the chunk as written by shard generation `generation`.
    pub fn with_generation(mut self, generation: u32) -> Self {
        self.generation = generation;
        self
    }

    pub fn record_count(&self) -> u32 {
        self.count
    }

    pub fn first_offset(&self) -> u64 {
        self.first_offset
    }

    pub fn first_ts(&self) -> Option<i64> {
        (self.count > 0).then_some(self.first_ts)
    }

    /// The offset the next pushed record must carry.
    pub fn next_offset(&self) -> u64 {
        self.first_offset + u64::from(self.count)
    }

    pub fn last_ts(&self) -> Option<i64> {
        (self.count > 0).then_some(self.last_ts)
    }

    /// Bytes used so far, header included, padding excluded.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Appends a record. Its offset must be [`ChunkBuilder::next_offset`] and
    /// its stamp above the previous record's. Returns `ChunkError::Full` when
    /// the buffer cannot hold it (the chunk is unchanged).
    pub fn push(&mut self, rec: &Record<'_>) -> Result<(), ChunkError> {
        if rec.offset != self.next_offset() || self.last_ts().is_some_and(|t| rec.ts <= t) {
            return Err(ChunkError::Inconsistent(
                "pushed record breaks offset or stamp order",
            ));
        }
        let room = self
            .buf
            .as_ref()
            .len()
            .min(CHUNK_HEADER_LEN + MAX_CHUNK_BODY);
        if self.len + rec.encoded_len() > room {
            rec.validate().map_err(|source| ChunkError::Record {
                index: self.count,
                source,
            })?;
            return Err(ChunkError::Full);
        }
        let n = rec
            .encode_into(&mut self.buf.as_mut()[self.len..room])
            .map_err(|source| ChunkError::Record {
                index: self.count,
                source,
            })?;
        if self.count == 0 {
            self.first_ts = rec.ts;
        }
        self.last_ts = rec.ts;
        self.count += 1;
        self.len += n;
        Ok(())
    }

    /// Writes the header (with `synced_through`) and zero padding up to
    /// `alignment`. Returns the buffer and the chunk's length on disk.
    /// The buffer must have room for the padding: allocate it aligned.
    pub fn finish(mut self, synced_through: u64, alignment: usize) -> (B, ChunkHeader, usize) {
        let describe = ChunkDescription {
            shard: self.shard,
            generation: self.generation,
            first_offset: self.first_offset,
            record_count: self.count,
            first_ts: self.first_ts,
            last_ts: self.last_ts,
            body_len: self.len - CHUNK_HEADER_LEN,
        };
        let (header, disk_len) = describe.frame(self.buf.as_mut(), synced_through, alignment);
        (self.buf, header, disk_len)
    }
}

/// What a chunk holds, before it is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkDescription {
    pub shard: u32,
    pub generation: u32,
    pub first_offset: u64,
    pub record_count: u32,
    pub first_ts: i64,
    pub last_ts: i64,
    pub body_len: usize,
}

impl ChunkDescription {
    /// Frames a chunk in place: `out` holds the body at `CHUNK_HEADER_LEN..`;
    /// writes the header (checksums included) and zero padding up to
    /// `alignment`. Returns the header and the chunk's length on disk.
    pub fn frame(
        &self,
        out: &mut [u8],
        synced_through: u64,
        alignment: usize,
    ) -> (ChunkHeader, usize) {
        let end = CHUNK_HEADER_LEN + self.body_len;
        let header = ChunkHeader {
            flags: 0,
            shard: self.shard,
            record_count: self.record_count,
            first_offset: self.first_offset,
            first_ts: self.first_ts,
            last_ts: self.last_ts,
            body_len: self.body_len as u32,
            body_crc: crc32c::crc32c(&out[CHUNK_HEADER_LEN..end]),
            synced_through,
            generation: self.generation,
        };
        let mut h = [0u8; CHUNK_HEADER_LEN];
        header.encode(&mut h);
        out[..CHUNK_HEADER_LEN].copy_from_slice(&h);
        let disk_len = align_up(end, alignment);
        out[end..disk_len].fill(0);
        (header, disk_len)
    }
}

pub fn align_up(value: usize, alignment: usize) -> usize {
    value.div_ceil(alignment) * alignment
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(offset: u64, ts: i64) -> Record<'static> {
        crate::testing::test_create(offset, ts)
    }

    #[test]
    fn build_and_verify() {
        let mut b = ChunkBuilder::new(vec![0u8; 4096], 3, 10);
        for i in 0..5 {
            b.push(&rec(10 + i, 100 + i as i64)).unwrap();
        }
        assert!(b.push(&rec(99, 1000)).is_err(), "offset gap accepted");
        let (buf, header, disk_len) = b.finish(4096, 512);
        assert_eq!(disk_len, 512);
        assert_eq!(verify(&buf).unwrap(), header);
        assert_eq!(
            (header.first_ts, header.last_ts, header.end_offset()),
            (100, 104, 15)
        );
        let offsets: Vec<u64> = records(body_of(&buf, &header).unwrap())
            .map(|r| r.unwrap().offset)
            .collect();
        assert_eq!(offsets, vec![10, 11, 12, 13, 14]);
    }

    #[test]
    fn full_chunk_is_left_unchanged() {
        let mut b = ChunkBuilder::new(vec![0u8; 128], 0, 0);
        b.push(&rec(0, 1)).unwrap();
        let len = b.len();
        assert_eq!(b.push(&rec(1, 2)), Err(ChunkError::Full));
        assert_eq!((b.len(), b.record_count()), (len, 1));
    }
}
