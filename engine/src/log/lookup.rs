//! The log's read side: what it retains, where a chunk is (by offset or
//! stamp), and verified reads of a chunk.

use super::{ChunkLocation, Log};
use crate::segment::error::LogError;
use crate::segment::index::SegmentIndex;
use crate::storage::{Storage, StorageFile};

impl<S: Storage> Log<S> {
    /// The oldest retained record's offset and stamp; `None` when the log holds no record.
    pub fn retained(&self) -> Option<(u64, i64)> {
        self.segments
            .iter()
            .find_map(|s| s.index.first())
            .map(|c| (c.first_offset, c.first_ts))
    }

    /// Names of the segment files, oldest first; the last is being written.
    pub fn segment_names(&self) -> Vec<String> {
        self.segments.iter().map(|s| s.name.clone()).collect()
    }

    /// Every chunk of the log, in offset order.
    pub fn chunks(&self) -> impl Iterator<Item = ChunkLocation> + '_ {
        self.segments.iter().flat_map(|s| {
            s.index.chunks().iter().map(|&entry| ChunkLocation {
                segment: s.header.first_offset,
                entry,
            })
        })
    }

    /// The chunk holding `offset`.
    pub fn locate_offset(&self, offset: u64) -> Option<ChunkLocation> {
        let (segment, entry) = crate::segment::index::locate_offset(
            &self.segments,
            |s| s.header.first_offset,
            |s| &s.index,
            offset,
        )?;
        Some(ChunkLocation { segment, entry })
    }

    /// The first chunk holding a record stamped at or after `ts`.
    pub fn locate_ts(&self, ts: i64) -> Option<ChunkLocation> {
        let (segment, entry) = crate::segment::index::locate_ts(
            &self.segments,
            |s| s.header.first_offset,
            |s| &s.index,
            ts,
        )?;
        Some(ChunkLocation { segment, entry })
    }

    /// Each segment's first offset and chunk index, in offset order: what a
    /// shard publishes for its readers (`LogIndex::sync_from`).
    pub fn segment_indexes(&self) -> impl Iterator<Item = (u64, &SegmentIndex)> + '_ {
        self.segments
            .iter()
            .map(|s| (s.header.first_offset, &s.index))
    }

    /// Reads and verifies a chunk. The buffer starts at the chunk header.
    pub async fn read_chunk(
        &self,
        location: &ChunkLocation,
    ) -> Result<<S::File as StorageFile>::ReadBuf, LogError> {
        let segment = self
            .segments
            .iter()
            .find(|s| s.header.first_offset == location.segment)
            .ok_or(LogError::NotRetained {
                offset: location.entry.first_offset,
                retained_from: self.retained().map_or(self.next_offset, |r| r.0),
                next: self.next_offset,
            })?;
        let entry = &location.entry;
        let buf = segment
            .file
            .read_at(entry.position, entry.disk_len as usize)
            .await
            .map_err(|source| LogError::Io {
                op: "reading a chunk",
                source,
            })?;
        crate::chunk::verify(&buf).map_err(|reason| LogError::BadRead {
            segment: segment.name.clone(),
            position: entry.position,
            reason,
        })?;
        Ok(buf)
    }
}
