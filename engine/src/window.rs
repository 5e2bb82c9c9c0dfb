//! Windows: fixed-capacity, append-only buffers of records, shared zero-copy.
//!
//! The shard frames records into its active window through the unique
//! [`WindowWriter`] and publishes them with one Release store per batch;
//! readers on any thread hold an `Arc<Window>` and read the committed prefix
//! without locks or copies. A sealed window takes no more records and is
//! immutable. Window bytes are exactly a chunk body: records back to back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::chunk;
use crate::raw::{SharedBuf, SharedBufWriter};
use crate::record::{self, Record, RecordError};

/// A window as readers see it.
pub struct Window {
    first_offset: u64,
    buf: Arc<SharedBuf>,
    sealed: AtomicBool,
}

impl Window {
    /// Offset of the window's first record.
    pub fn first_offset(&self) -> u64 {
        self.first_offset
    }

    /// The committed records, back to back. Never changes once returned.
    pub fn committed(&self) -> &[u8] {
        self.buf.committed()
    }

    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// True once the window takes no more records.
    pub fn is_sealed(&self) -> bool {
        self.sealed.load(Ordering::Acquire)
    }

    /// Iterates the committed records (each checksum verified).
    pub fn records(&self) -> impl Iterator<Item = Result<Record<'_>, RecordError>> {
        chunk::records(self.committed())
    }
}

/// The shard's handle on its active window: the only writer.
pub struct WindowWriter {
    window: Arc<Window>,
    writer: SharedBufWriter,
    /// Bytes framed but not yet published (the current batch).
    staged: usize,
}

impl WindowWriter {
    pub fn new(capacity: usize, first_offset: u64) -> WindowWriter {
        let (buf, writer) = SharedBuf::new(capacity);
        let window = Arc::new(Window {
            first_offset,
            buf,
            sealed: AtomicBool::new(false),
        });
        WindowWriter {
            window,
            writer,
            staged: 0,
        }
    }

    pub fn window(&self) -> &Arc<Window> {
        &self.window
    }

    /// Bytes left for records.
    pub fn remaining(&self) -> usize {
        self.writer.spare_len() - self.staged
    }

    /// Copies an encoded record after the staged ones and gives it its offset
    /// and stamp. Readers see it only after [`WindowWriter::publish`]. The
    /// caller checks [`WindowWriter::remaining`] first.
    pub fn stage_encoded(&mut self, encoded: &[u8], offset: u64, ts: i64) {
        let at = self.staged;
        let slot = &mut self.writer.spare()[at..at + encoded.len()];
        slot.copy_from_slice(encoded);
        record::restamp(slot, offset, ts);
        self.staged += encoded.len();
    }

    /// Makes every staged record visible to readers at once.
    pub fn publish(&mut self) {
        self.writer.publish(self.staged);
        self.staged = 0;
    }

    /// Publishes what is staged and seals the window; returns it.
    pub fn seal(mut self) -> Arc<Window> {
        self.publish();
        self.window.sealed.store(true, Ordering::Release);
        self.window
    }
}
