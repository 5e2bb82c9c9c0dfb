//! The engine's one module with `unsafe` (the crate denies it everywhere
//! else), each use with its safety argument next to it:
//!
//! - [`SharedBuf`]: a fixed-capacity, page-aligned byte buffer with a single
//!   writer and any number of lock-free readers on other threads (a ring
//!   window). The writer appends bytes past the committed length and then
//!   publishes a new committed length with `Release`; readers load it with
//!   `Acquire` and read only the committed prefix. Committed bytes are never
//!   written again, so a reader can never observe a torn record.
//! - [`map_segment`]: a read-only memory mapping of a segment file, sound
//!   because of what the shard promises about the bytes readers look at.
#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::fs::File;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use memmap2::Mmap;

/// Maps a segment file read-only.
///
/// Readers may look only at chunks below their shard's flushed watermark (the
/// [`crate::storage::ReadFiles`] contract).
pub(crate) fn map_segment(file: &File) -> std::io::Result<Mmap> {
    // SAFETY: a mapping is unsound only if the bytes a reader looks at change
    // underneath it or vanish. Segment files are preallocated and never
    // truncated while the engine runs (retention unlinks whole files; an
    // unlinked file stays mapped until unmapped). Readers look only at
    // chunks below the shard's flushed watermark (the `ReadFiles`
    // contract), and a chunk is written once, with one write, before that
    // watermark covers it; the shard writes only past it afterwards. The
    // kernel keeps the mapping coherent with those O_DIRECT writes
    // (docs/design.md section 9: checked over 1,000 write+fdatasync cycles).
    unsafe { Mmap::map(file) }
}

/// Memory alignment of the buffer (page size: fine for O_DIRECT copies too).
const ALIGN: usize = 4096;

/// Bytes shared between one writer ([`SharedBufWriter`]) and many readers.
pub struct SharedBuf {
    ptr: NonNull<u8>,
    capacity: usize,
    committed: AtomicUsize,
}

// SAFETY: the buffer owns its allocation. Bytes below `committed` are
// immutable once published (the writer only writes at or past `committed`,
// and only through the unique `SharedBufWriter`); readers access only that
// prefix after an Acquire load that pairs with the writer's Release store.
// So sharing `&SharedBuf` across threads never creates a data race.
unsafe impl Send for SharedBuf {}
// SAFETY: as above.
unsafe impl Sync for SharedBuf {}

impl SharedBuf {
    /// A zeroed buffer of `capacity` bytes and its unique writer.
    pub fn new(capacity: usize) -> (Arc<SharedBuf>, SharedBufWriter) {
        let capacity = capacity.max(1);
        let layout =
            Layout::from_size_align(capacity, ALIGN).expect("window capacity fits a layout");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        let buf = Arc::new(SharedBuf {
            ptr,
            capacity,
            committed: AtomicUsize::new(0),
        });
        (buf.clone(), SharedBufWriter { buf })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The published prefix. Never changes once returned.
    pub fn committed(&self) -> &[u8] {
        let len = self.committed.load(Ordering::Acquire);
        // SAFETY: `len <= capacity` (the writer checks before publishing), and
        // bytes below a published length are never written again (see the
        // Send/Sync argument); the Acquire load makes the writer's writes to
        // them visible here.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), len) }
    }
}

impl Drop for SharedBuf {
    fn drop(&mut self) {
        let layout =
            Layout::from_size_align(self.capacity, ALIGN).expect("layout was valid at allocation");
        // SAFETY: allocated in `new` with this very layout; this is the last reference.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
    }
}

/// The unique writer of a [`SharedBuf`]. Not `Clone`: there is one per buffer.
pub struct SharedBufWriter {
    buf: Arc<SharedBuf>,
}

impl SharedBufWriter {
    /// The not-yet-published tail, `[committed, capacity)`, to write into.
    pub fn spare(&mut self) -> &mut [u8] {
        // Relaxed suffices: only this writer ever stores `committed`.
        let len = self.buf.committed.load(Ordering::Relaxed);
        // SAFETY: readers never touch bytes at or past `committed`, and `&mut
        // self` on the unique writer excludes any other mutable slice, so this
        // is the only reference to `[len, capacity)`.
        unsafe {
            std::slice::from_raw_parts_mut(self.buf.ptr.as_ptr().add(len), self.buf.capacity - len)
        }
    }

    /// Bytes not yet published.
    pub fn spare_len(&self) -> usize {
        self.buf.capacity - self.buf.committed.load(Ordering::Relaxed)
    }

    /// Publishes the first `additional` bytes of [`SharedBufWriter::spare`].
    pub fn publish(&mut self, additional: usize) {
        let len = self.buf.committed.load(Ordering::Relaxed);
        assert!(
            additional <= self.buf.capacity - len,
            "publish past the capacity"
        );
        self.buf
            .committed
            .store(len + additional, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_only_published_bytes() {
        let (buf, mut w) = SharedBuf::new(16);
        assert!(buf.committed().is_empty());
        w.spare()[..3].copy_from_slice(b"abc");
        assert!(
            buf.committed().is_empty(),
            "unpublished bytes are invisible"
        );
        w.publish(3);
        assert_eq!(buf.committed(), b"abc");
        w.spare()[..2].copy_from_slice(b"de");
        w.publish(2);
        assert_eq!(buf.committed(), b"abcde");
        assert_eq!(w.spare().len(), 11);
    }

    #[test]
    #[should_panic(expected = "publish past the capacity")]
    fn cannot_publish_past_capacity() {
        let (_buf, mut w) = SharedBuf::new(4);
        w.publish(5);
    }
}
