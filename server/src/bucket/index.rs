//! A segment's chunk index in the bucket (`NNN.idx` beside `NNN.seg`):
//! where each chunk holding records starts in the segment object, so a
//! reader fetches the chunks it needs by range, not the whole segment.
//!
//! Layout, little-endian: `RFCI`, version (u32), count (u32), then `count`
//! entries of 48 bytes (first offset u64, record count u32, generation u32,
//! first stamp i64, last stamp i64, position u64, bytes on disk u32, zero
//! u32), then the CRC-32C of everything before it (u32). The manifest names
//! its length and checksum too; what is read back is checked against the
//! segment it describes before it is used.

use ringfeed_engine::chunk::CHUNK_HEADER_LEN;
use ringfeed_engine::segment::index::ChunkEntry;
use ringfeed_engine::segment::SEGMENT_HEADER_BLOCK;

use super::ManifestSegment;

const MAGIC: &[u8; 4] = b"RFCI";
const VERSION: u32 = 1;
const HEAD: usize = 12;
const ENTRY: usize = 48;

/// The index object's name for the segment object `segment`.
pub fn index_name(segment: &str) -> String {
    let stem = segment.strip_suffix(".seg").unwrap_or(segment);
    format!("{stem}.idx")
}

pub fn encode(chunks: &[ChunkEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEAD + chunks.len() * ENTRY + 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
    for c in chunks {
        out.extend_from_slice(&c.first_offset.to_le_bytes());
        out.extend_from_slice(&c.record_count.to_le_bytes());
        out.extend_from_slice(&c.generation.to_le_bytes());
        out.extend_from_slice(&c.first_ts.to_le_bytes());
        out.extend_from_slice(&c.last_ts.to_le_bytes());
        out.extend_from_slice(&c.position.to_le_bytes());
        out.extend_from_slice(&c.disk_len.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The chunk index of `segment` from the bytes of its index object: its
/// framing and checksum, then every entry against the segment (offsets
/// dense from its first to its next, stamps rising, positions rising and
/// inside its bytes).
// Bytes from a bucket: hostile until checked.
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
pub fn decode(bytes: &[u8], segment: &ManifestSegment) -> Result<Vec<ChunkEntry>, String> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
    };
    if bytes.get(..4) != Some(MAGIC.as_slice()) {
        return Err("not a chunk index".into());
    }
    if u32_at(4) != Some(VERSION) {
        return Err(format!("chunk index version {:?}", u32_at(4)));
    }
    let count = u32_at(8).ok_or("truncated")? as usize;
    let end = count
        .checked_mul(ENTRY)
        .and_then(|n| n.checked_add(HEAD))
        .ok_or("too many entries")?;
    if bytes.len() != end + 4 {
        return Err(format!(
            "{} bytes, {} for {count} entries",
            bytes.len(),
            end + 4
        ));
    }
    let body = bytes.get(..end).ok_or("truncated")?;
    if u32_at(end) != Some(crc32c::crc32c(body)) {
        return Err("checksum mismatch".into());
    }
    let mut chunks = Vec::with_capacity(count);
    let mut next = segment.first_offset;
    let mut last_ts = None;
    let mut past = SEGMENT_HEADER_BLOCK as u64;
    for i in 0..count {
        let at = HEAD + i * ENTRY;
        let field = |o: usize| u64_at(at + o).ok_or("truncated");
        let c = ChunkEntry {
            first_offset: field(0)?,
            record_count: u32_at(at + 8).ok_or("truncated")?,
            generation: u32_at(at + 12).ok_or("truncated")?,
            first_ts: field(16)? as i64,
            last_ts: field(24)? as i64,
            position: field(32)?,
            disk_len: u32_at(at + 40).ok_or("truncated")?,
        };
        let ok = c.first_offset == next
            && c.record_count > 0
            && c.first_ts <= c.last_ts
            && last_ts.is_none_or(|t| c.first_ts > t)
            && c.position >= past
            && c.disk_len as usize > CHUNK_HEADER_LEN
            && c.position + u64::from(c.disk_len) <= segment.bytes;
        if !ok {
            return Err(format!("entry {i} does not follow on ({c:?})"));
        }
        next = c.end_offset();
        last_ts = Some(c.last_ts);
        past = c.position + u64::from(c.disk_len);
        chunks.push(c);
    }
    if next != segment.next_offset {
        return Err(format!(
            "its chunks end at offset {next}, the segment at {}",
            segment.next_offset
        ));
    }
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(first: u64, count: u32, ts: i64, position: u64) -> ChunkEntry {
        ChunkEntry {
            first_offset: first,
            record_count: count,
            first_ts: ts,
            last_ts: ts + i64::from(count) - 1,
            position,
            disk_len: 4096,
            generation: 1,
        }
    }

    #[test]
    fn an_index_reads_back_and_every_byte_is_checked() {
        let chunks = vec![entry(10, 5, 100, 4096), entry(15, 3, 200, 8192)];
        let mut segment = ManifestSegment {
            name: ringfeed_engine::segment::segment_name(10),
            first_offset: 10,
            next_offset: 18,
            first_ts_ns: 100,
            last_ts_ns: 202,
            bytes: 12288,
            crc32c: 0,
            min_generation: 1,
            max_generation: 1,
            index_bytes: 0,
            index_crc32c: 0,
        };
        let bytes = encode(&chunks);
        assert_eq!(decode(&bytes, &segment), Ok(chunks.clone()));
        assert_eq!(index_name(&segment.name), "00000000000000000010.idx");
        // Any flipped byte is refused (framing, checksum or an entry's check).
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(decode(&bad, &segment).is_err(), "byte {at}");
        }
        assert!(decode(&bytes[..bytes.len() - 1], &segment).is_err());
        segment.next_offset = 19;
        assert!(decode(&bytes, &segment)
            .unwrap_err()
            .contains("end at offset 18"));
        segment.next_offset = 18;
        segment.bytes = 12287;
        assert!(decode(&bytes, &segment).is_err());
    }
}
