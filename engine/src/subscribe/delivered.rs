//! What a subscription hands out: delivered events, raw chunks for
//! chunk-mode catch-up, and the outcome of a poll.

use bytes::Bytes;

#[cfg(doc)]
use super::Subscription;
use crate::record::{self, Record, RecordError, RecordHeader};

/// One delivered event: its position and its stored record (shared, not copied).
#[derive(Clone, Debug)]
pub struct Delivered {
    pub shard: u32,
    pub offset: u64,
    pub ts: i64,
    pub(super) record: Bytes,
}

impl Delivered {
    pub(crate) fn new(shard: u32, offset: u64, ts: i64, record: Bytes) -> Delivered {
        Delivered {
            shard,
            offset,
            ts,
            record,
        }
    }

    /// The whole stored record.
    pub fn record_bytes(&self) -> &Bytes {
        &self.record
    }

    /// The producer's encoded event, as appended.
    pub fn payload(&self) -> Bytes {
        self.record.slice(self.header().payload_at..)
    }

    /// The record's header fields (paths, kind, signatures).
    pub fn header(&self) -> RecordHeader<'_> {
        record::peek_header(&self.record).expect("delivered records were parsed once already")
    }

    /// The record, decoded and checksum-verified.
    pub fn record(&self) -> Result<Record<'_>, RecordError> {
        Record::decode(&self.record).map(|(r, _)| r)
    }
}

/// Stored records of one shard, verbatim and unfiltered, for chunk-mode
/// catch-up ([`Subscription::poll_chunk`]).
#[derive(Clone, Debug)]
pub struct RawChunk {
    pub shard: u32,
    /// Offset of the first record; the others follow densely.
    pub first_offset: u64,
    /// Number of records (at least one).
    pub count: u64,
    /// Stamps of the first and the last record.
    pub first_ts: i64,
    pub last_ts: i64,
    /// The records back to back in the stored record format (a view of a
    /// window or a segment mapping, not a copy).
    pub records: Bytes,
    /// CRC-32C of `records` when it is known without reading them again:
    /// they are a whole stored chunk's body, whose checksum the read just
    /// verified. [`RawChunk::crc32c`] computes it otherwise.
    pub records_crc: Option<u32>,
}

impl RawChunk {
    /// CRC-32C of the records: the stored chunk's when they are its whole
    /// body, computed otherwise.
    pub fn crc32c(&self) -> u32 {
        self.records_crc
            .unwrap_or_else(|| crc32c::crc32c(&self.records))
    }
}

/// What [`Subscription::poll`] found.
#[derive(Debug)]
pub enum Step {
    Event(Delivered),
    /// Nothing to deliver yet.
    Pending,
    /// `until_ns` was reached: the subscription is complete.
    End,
}
