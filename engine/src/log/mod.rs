//! A shard's on-disk log: its segments, the chunk index over them, and the
//! one writer that appends chunks, syncs and rotates.
//!
//! Invariants kept here: offsets are dense and stamps strictly increase across
//! every chunk of every segment; no more than the segment's
//! `max_unsynced_bytes` are ever written past the last completed sync (so
//! recovery knows how far residue can reach); a segment is synced in full
//! before its successor is created; and after any failed write or sync the log
//! latches and acknowledges nothing more until reopened. A full disk found
//! while making the next segment's file is not such a failure: nothing was
//! written, so the log refuses the round ([`LogError::NoSpace`]) and takes
//! it when space returns.

mod lookup;
mod recovery;
mod segments;
mod sync;
mod writer;

pub use recovery::RecoveryReport;
pub use sync::SyncTicket;

use crate::chunk::ChunkDescription;
use crate::generation::Generations;
use crate::producer::ProducerTable;
use crate::segment::error::LogError;
use crate::segment::index::{ChunkEntry, SegmentIndex};
use crate::segment::SegmentHeader;
use crate::storage::Storage;
use segments::Spare;

use std::rc::Rc;

/// How a shard's log is laid out on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    pub shard: u32,
    /// Size each new segment is preallocated to.
    pub segment_bytes: u64,
    /// Most bytes written past the last completed sync; the writer syncs
    /// before exceeding it. Also the largest chunk. Bounds recovery's scan.
    pub max_unsynced_bytes: u64,
}

impl LogConfig {
    pub fn new(shard: u32) -> LogConfig {
        LogConfig {
            shard,
            segment_bytes: 256 << 20,
            max_unsynced_bytes: 32 << 20,
        }
    }
}

/// A chunk to write whose records are framed elsewhere. The shard field of
/// the description is ignored: the log writes its own.
#[derive(Clone, Copy, Debug)]
pub struct ChunkImage<'a> {
    pub description: ChunkDescription,
    /// The records, back to back.
    pub body: &'a [u8],
}

/// A chunk's place in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkLocation {
    /// First offset of the segment holding the chunk (its name).
    pub segment: u64,
    pub entry: ChunkEntry,
}

pub(crate) struct Segment<F> {
    pub(crate) name: String,
    pub(crate) header: SegmentHeader,
    pub(crate) index: SegmentIndex,
    /// Shared with a [`SyncTicket`] while a sync of it runs.
    pub(crate) file: Rc<F>,
}

/// One shard's log. The last segment is the one being written.
pub struct Log<S: Storage> {
    pub(crate) storage: S,
    config: LogConfig,
    pub(crate) segments: Vec<Segment<S::File>>,
    write_pos: u64,
    synced_pos: u64,
    /// Every byte of the active segment below this has been written (chunks,
    /// or zeros written ahead). Only ever raised, and only by this log's own
    /// writes: after an open it is 0 until the first write, so it may lag
    /// `write_pos`, which bounds it from below where it is used.
    zeroed_to: u64,
    next_offset: u64,
    synced_offset: u64,
    last_ts: Option<i64>,
    latched: Option<String>,
    /// The next segment's file, made ahead of need ([`Log::prepare_next`]).
    spare: Option<Spare<S::File>>,
    /// Why the next segment's file could not be made, while it cannot: the
    /// disk is full.
    no_space: Option<String>,
    generations: Generations,
    producers: ProducerTable,
}

/// What an interrupted repair leaves in a shard's directory: the shard does
/// not open until `ringfeed repair` has run again (`crate::repair`).
pub const REPAIR_MARKER: &str = "repair.next";

impl<S: Storage> Log<S> {
    /// The shard's generation history; the last entry is the one writing now.
    pub fn generations(&self) -> &Generations {
        &self.generations
    }

    /// The offset the next record will get.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Every record below this offset is durable.
    pub fn synced_offset(&self) -> u64 {
        self.synced_offset
    }

    /// The stamp of the last record written.
    pub fn last_ts(&self) -> Option<i64> {
        self.last_ts
    }

    /// The error that latched the log, if one did.
    pub fn latched(&self) -> Option<&str> {
        self.latched.as_deref()
    }

    fn active(&self) -> &Segment<S::File> {
        self.segments.last().expect("the log always has a segment")
    }

    fn check_latched(&self) -> Result<(), LogError> {
        match &self.latched {
            Some(cause) => Err(LogError::Latched {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    fn latch(&mut self, op: &'static str, source: std::io::Error) -> LogError {
        self.latched = Some(format!("{op}: {source}"));
        LogError::Io { op, source }
    }
}
