//! The chunk index of one segment, rebuilt at open from chunk headers.
//!
//! Entries are in offset order and, because stamps strictly increase with
//! offset, in stamp order too: both look-ups are binary searches.

use crate::chunk::ChunkHeader;

/// Where one chunk lives and what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkEntry {
    pub first_offset: u64,
    pub record_count: u32,
    pub first_ts: i64,
    pub last_ts: i64,
    /// Byte position of the chunk header in the segment file.
    pub position: u64,
    /// Bytes on disk, padding included.
    pub disk_len: u32,
    /// The shard generation that wrote the chunk.
    pub generation: u32,
}

impl ChunkEntry {
    pub fn new(header: &ChunkHeader, position: u64, disk_len: usize) -> ChunkEntry {
        ChunkEntry {
            first_offset: header.first_offset,
            record_count: header.record_count,
            first_ts: header.first_ts,
            last_ts: header.last_ts,
            position,
            disk_len: disk_len as u32,
            generation: header.generation,
        }
    }

    pub fn end_offset(&self) -> u64 {
        self.first_offset + u64::from(self.record_count)
    }
}

/// Index of the chunks holding records, in offset order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentIndex {
    chunks: Vec<ChunkEntry>,
}

impl SegmentIndex {
    pub fn push(&mut self, entry: ChunkEntry) {
        debug_assert!(self
            .chunks
            .last()
            .is_none_or(|l| l.end_offset() == entry.first_offset));
        self.chunks.push(entry);
    }

    pub fn chunks(&self) -> &[ChunkEntry] {
        &self.chunks
    }

    pub fn first(&self) -> Option<&ChunkEntry> {
        self.chunks.first()
    }

    pub fn last(&self) -> Option<&ChunkEntry> {
        self.chunks.last()
    }

    /// The chunk holding `offset`, if this segment has it.
    pub fn find_offset(&self, offset: u64) -> Option<&ChunkEntry> {
        let i = self.chunks.partition_point(|c| c.end_offset() <= offset);
        self.chunks.get(i).filter(|c| c.first_offset <= offset)
    }

    /// The first chunk holding a record with a stamp at or after `ts`.
    pub fn find_ts(&self, ts: i64) -> Option<&ChunkEntry> {
        let i = self.chunks.partition_point(|c| c.last_ts < ts);
        self.chunks.get(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(first_offset: u64, count: u32, first_ts: i64, last_ts: i64) -> ChunkEntry {
        ChunkEntry {
            generation: 0,
            first_offset,
            record_count: count,
            first_ts,
            last_ts,
            position: 0,
            disk_len: 512,
        }
    }

    #[test]
    fn lookups() {
        let mut idx = SegmentIndex::default();
        idx.push(entry(10, 5, 100, 140));
        idx.push(entry(15, 5, 150, 190));
        assert_eq!(idx.find_offset(9), None);
        assert_eq!(idx.find_offset(10).unwrap().first_offset, 10);
        assert_eq!(idx.find_offset(14).unwrap().first_offset, 10);
        assert_eq!(idx.find_offset(15).unwrap().first_offset, 15);
        assert_eq!(idx.find_offset(20), None);
        assert_eq!(idx.find_ts(0).unwrap().first_offset, 10);
        assert_eq!(idx.find_ts(141).unwrap().first_offset, 15);
        assert_eq!(idx.find_ts(190).unwrap().first_offset, 15);
        assert_eq!(idx.find_ts(191), None);
    }
}
