//! Segments: preallocated files of chunks, named by their first offset.
//!
//! A segment starts with a header block ([`SEGMENT_HEADER_BLOCK`] bytes: magic,
//! format version, shard, alignment, first offset, creation time, size,
//! unsynced-write bound, crc32c), then chunks back to back. A new segment is
//! made under a temporary name, preallocated, given its header, synced, and
//! only then renamed into place, so a `.seg` file always has a durable header.

use thiserror::Error;

use crate::record::{read_u16, read_u32, read_u64};

pub mod error;
pub mod index;
pub mod recovery;
pub mod sealed;

/// Bytes reserved for the segment header; the first chunk starts here.
pub const SEGMENT_HEADER_BLOCK: usize = 4096;
/// Bytes of the header that carry data (the rest of the block is zero).
const SEGMENT_HEADER_LEN: usize = 64;
const SEGMENT_MAGIC: u32 = u32::from_le_bytes(*b"RFSG");
/// On-disk format version, shared by segment and chunk layouts.
pub const FORMAT_VERSION: u16 = 1;
/// Suffix of a finished segment file.
pub const SEGMENT_SUFFIX: &str = ".seg";
/// Suffix of a segment still being created; never holds acknowledged data.
pub const TEMP_SUFFIX: &str = ".seg.tmp";

/// The decoded header block of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub shard: u32,
    /// Alignment of every chunk position and length in this segment.
    pub alignment: u32,
    pub first_offset: u64,
    pub created_ns: i64,
    /// Preallocated size of the file.
    pub segment_bytes: u64,
    /// The writer never had more than this many bytes written past the last
    /// completed sync; recovery scans this far past a bad chunk for residue.
    pub max_unsynced_bytes: u64,
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SegmentHeaderError {
    #[error("segment header is shorter than {SEGMENT_HEADER_LEN} bytes")]
    Truncated,
    #[error("no segment magic")]
    BadMagic,
    #[error("segment header checksum mismatch")]
    Checksum,
    #[error("unknown segment format version {0}")]
    UnknownVersion(u16),
    #[error("segment header is inconsistent: {0}")]
    Inconsistent(&'static str),
}

impl SegmentHeader {
    // An encoder: `out` is a block its caller sized, so it may index. The
    // lints are denied on `decode`.

    /// Writes the whole header block (zero-filled past the header) into `out`.
    pub fn encode(&self, out: &mut [u8]) {
        let block = &mut out[..SEGMENT_HEADER_BLOCK];
        block.fill(0);
        block[0..4].copy_from_slice(&SEGMENT_MAGIC.to_le_bytes());
        block[4..6].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        block[8..12].copy_from_slice(&self.shard.to_le_bytes());
        block[12..16].copy_from_slice(&self.alignment.to_le_bytes());
        block[16..24].copy_from_slice(&self.first_offset.to_le_bytes());
        block[24..32].copy_from_slice(&self.created_ns.to_le_bytes());
        block[32..40].copy_from_slice(&self.segment_bytes.to_le_bytes());
        block[40..48].copy_from_slice(&self.max_unsynced_bytes.to_le_bytes());
        let crc = crc32c::crc32c(&block[..60]);
        block[60..64].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decodes and verifies a segment's first block, as read from its file.
    // Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
    #[deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unreachable
    )]
    pub fn decode(buf: &[u8]) -> Result<SegmentHeader, SegmentHeaderError> {
        // From here on every read is inside the header's 64 bytes.
        let Some(head) = buf.first_chunk::<SEGMENT_HEADER_LEN>() else {
            return Err(SegmentHeaderError::Truncated);
        };
        let truncated = || SegmentHeaderError::Truncated;
        let u16_at = |at| read_u16(head, at).ok_or_else(truncated);
        let u32_at = |at| read_u32(head, at).ok_or_else(truncated);
        let u64_at = |at| read_u64(head, at).ok_or_else(truncated);
        if u32_at(0)? != SEGMENT_MAGIC {
            return Err(SegmentHeaderError::BadMagic);
        }
        let (covered, _) = head.split_first_chunk::<60>().ok_or_else(truncated)?;
        if u32_at(60)? != crc32c::crc32c(covered) {
            return Err(SegmentHeaderError::Checksum);
        }
        let version = u16_at(4)?;
        if version != FORMAT_VERSION {
            return Err(SegmentHeaderError::UnknownVersion(version));
        }
        let header = SegmentHeader {
            shard: u32_at(8)?,
            alignment: u32_at(12)?,
            first_offset: u64_at(16)?,
            created_ns: u64_at(24)? as i64,
            segment_bytes: u64_at(32)?,
            max_unsynced_bytes: u64_at(40)?,
        };
        let a = header.alignment as usize;
        if a == 0 || !a.is_power_of_two() || a > SEGMENT_HEADER_BLOCK {
            return Err(SegmentHeaderError::Inconsistent("alignment"));
        }
        if header.segment_bytes <= SEGMENT_HEADER_BLOCK as u64 || header.max_unsynced_bytes == 0 {
            return Err(SegmentHeaderError::Inconsistent("sizes"));
        }
        Ok(header)
    }
}

/// The file name of the segment whose first offset is `first_offset`.
pub fn segment_name(first_offset: u64) -> String {
    format!("{first_offset:020}{SEGMENT_SUFFIX}")
}

/// The first offset encoded in a segment file name, if it is one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(segment_name(42), "00000000000000000042.seg");
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_name("00000000000000000042.seg.tmp"), None);
        assert_eq!(parse_segment_name("42.seg"), None);
    }

    #[test]
    fn header_round_trip_and_damage() {
        let h = SegmentHeader {
            shard: 2,
            alignment: 512,
            first_offset: 77,
            created_ns: 5,
            segment_bytes: 1 << 20,
            max_unsynced_bytes: 1 << 16,
        };
        let mut block = vec![0u8; SEGMENT_HEADER_BLOCK];
        h.encode(&mut block);
        assert_eq!(SegmentHeader::decode(&block), Ok(h));
        for byte in 0..SEGMENT_HEADER_LEN {
            let mut bad = block.clone();
            bad[byte] ^= 0x10;
            assert!(
                SegmentHeader::decode(&bad).is_err(),
                "damage at {byte} unnoticed"
            );
        }
    }
}
