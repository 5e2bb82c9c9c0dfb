//! The chunk index: per segment, rebuilt at open from chunk headers and
//! extended as chunks are written; over a whole log, the segments in offset
//! order. The log keeps one for its writer; each shard publishes a copy for
//! its readers on other threads ([`LogIndex`], in `ShardShared`), extended
//! before the flushed watermark moves, so a reader finds every durable chunk
//! without listing or walking the segment directory.
//!
//! Entries are in offset order and, because stamps strictly increase with
//! offset, in stamp order too: every look-up, by offset or by stamp, in a
//! segment or across a log, is a binary search. [`locate_offset`] and
//! [`locate_ts`] are the one implementation of "the chunk holding offset N"
//! and "the first chunk with an event at or after T" (the log's look-ups and
//! the readers' both use them).

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

/// The chunk holding `offset` among `segments` (in offset order; `first`
/// gives a segment's first offset, `index` its chunks), with the segment's
/// first offset.
pub fn locate_offset<S>(
    segments: &[S],
    first: impl Fn(&S) -> u64,
    index: impl Fn(&S) -> &SegmentIndex,
    offset: u64,
) -> Option<(u64, ChunkEntry)> {
    let i = segments.partition_point(|s| first(s) <= offset);
    let segment = segments.get(i.checked_sub(1)?)?;
    index(segment)
        .find_offset(offset)
        .map(|&entry| (first(segment), entry))
}

/// The first chunk among `segments` holding a record stamped at or after
/// `ts`, with its segment's first offset.
pub fn locate_ts<S>(
    segments: &[S],
    first: impl Fn(&S) -> u64,
    index: impl Fn(&S) -> &SegmentIndex,
    ts: i64,
) -> Option<(u64, ChunkEntry)> {
    // Empty segments sort as "before": only the active segment can be empty,
    // and it is last, so the predicate stays monotone.
    let i = segments.partition_point(|s| index(s).last().is_none_or(|c| c.last_ts < ts));
    let segment = segments.get(i)?;
    index(segment)
        .find_ts(ts)
        .map(|&entry| (first(segment), entry))
}

/// The chunk index of a whole log: `(segment first offset, its chunks)` in
/// offset order. What a shard publishes for its readers.
#[derive(Clone, Debug, Default)]
pub struct LogIndex {
    segments: Vec<(u64, SegmentIndex)>,
}

impl LogIndex {
    pub fn find_offset(&self, offset: u64) -> Option<(u64, ChunkEntry)> {
        locate_offset(&self.segments, |s| s.0, |s| &s.1, offset)
    }

    pub fn find_ts(&self, ts: i64) -> Option<(u64, ChunkEntry)> {
        locate_ts(&self.segments, |s| s.0, |s| &s.1, ts)
    }

    /// Where the chunks of the segment starting at `first` end (the bytes
    /// it holds, its header block included), if the index holds it.
    pub fn segment_end(&self, first: u64) -> Option<u64> {
        let at = self.segments.binary_search_by_key(&first, |s| s.0).ok()?;
        let (_, chunks) = &self.segments[at];
        Some(
            chunks
                .last()
                .map_or(crate::segment::SEGMENT_HEADER_BLOCK as u64, |c| {
                    c.position + u64::from(c.disk_len)
                }),
        )
    }

    /// Segments held (for tests and status).
    pub fn segments(&self) -> usize {
        self.segments.len()
    }

    /// Makes this index hold what `source` (a log's segments, in order)
    /// holds, copying only what it lacks: segments are only ever added at
    /// the end (rotation) and removed at the front (retention), and chunks
    /// only appended to a segment.
    pub fn sync_from<'a>(&mut self, source: impl Iterator<Item = (u64, &'a SegmentIndex)>) {
        let mut kept = 0;
        let mut source = source.peekable();
        if let Some(&(first, _)) = source.peek() {
            // Retention removed the segments before `first`.
            let gone = self.segments.partition_point(|s| s.0 < first);
            self.segments.drain(..gone);
        }
        for (first, chunks) in source {
            match self.segments.get_mut(kept) {
                Some((have, mine)) if *have == first => {
                    for &entry in &chunks.chunks()[mine.chunks().len()..] {
                        mine.push(entry);
                    }
                }
                _ => {
                    self.segments.truncate(kept);
                    self.segments.push((first, chunks.clone()));
                }
            }
            kept += 1;
        }
        self.segments.truncate(kept);
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

    #[test]
    fn a_log_index_follows_rotation_and_retention_and_finds_across_segments() {
        let seg = |chunks: &[ChunkEntry]| {
            let mut idx = SegmentIndex::default();
            for &c in chunks {
                idx.push(c);
            }
            idx
        };
        let (a, b) = (entry(0, 10, 100, 109), entry(10, 10, 110, 119));
        let (c, d) = (entry(20, 10, 120, 129), entry(30, 10, 130, 139));
        let mut published = LogIndex::default();
        let first = [(0, seg(&[a, b]))];
        published.sync_from(first.iter().map(|(f, s)| (*f, s)));
        assert_eq!(published.find_offset(15), Some((0, b)));
        // The segment grew, a new one began.
        let grown = [(0, seg(&[a, b, c])), (30, seg(&[d]))];
        published.sync_from(grown.iter().map(|(f, s)| (*f, s)));
        assert_eq!(published.find_offset(25), Some((0, c)));
        assert_eq!(published.find_offset(35), Some((30, d)));
        assert_eq!(published.find_ts(125), Some((0, c)));
        assert_eq!(published.find_ts(131), Some((30, d)));
        assert_eq!(published.find_ts(140), None);
        // Retention removed the first segment.
        let retained = [(30, seg(&[d]))];
        published.sync_from(retained.iter().map(|(f, s)| (*f, s)));
        assert_eq!(published.segments(), 1);
        assert_eq!(published.find_offset(5), None);
        assert_eq!(published.find_ts(0), Some((30, d)));
    }
}
