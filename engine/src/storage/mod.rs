//! The I/O seam: every byte the engine stores goes through these two traits.
//!
//! [`Storage`] is one directory (a shard's segment directory); [`StorageFile`]
//! is a file in it. The production implementation is [`DmaStorage`] (glommio,
//! O_DIRECT, io_uring); [`MemStorage`] keeps files in memory and injects
//! faults: failed writes and syncs, torn writes, power loss that drops every
//! unsynced byte and every unsynced directory change, and flipped bits.
//! Engine code is generic over the seam and carries no test-only branches.
//!
//! Contract: a write or a directory change is durable only after the file's
//! `sync` (data) or the storage's `sync_dir` (names) has returned.

#![allow(async_fn_in_trait)] // the futures are driven on one glommio core: no Send bound wanted

use std::io;
use std::ops::Deref;
use std::sync::Arc;

use bytes::Bytes;

mod dma;
mod mapped;
mod memory;

pub use dma::{DmaFileHandle, DmaStorage};
pub use mapped::MappedDir;
pub use memory::{block_on, Faults, MemFile, MemStorage};

/// Read access to a directory's files from any thread, without the shard:
/// subscriptions read segments through it.
///
/// Contract: callers read only byte ranges the shard has made durable (below
/// its flushed watermark). Those ranges are never written again, so a view
/// taken while the shard keeps writing further on stays valid.
pub trait ReadFiles: Send + Sync {
    /// Names of the files in the directory, in no particular order.
    fn list(&self) -> io::Result<Vec<String>>;
    /// The file's bytes as they are now (a read-only mapping for files on disk).
    fn map(&self, name: &str) -> io::Result<Bytes>;
}

/// A directory of files.
pub trait Storage {
    type File: StorageFile;

    /// Names of the files in the directory, in no particular order.
    async fn list(&self) -> io::Result<Vec<String>>;
    /// Creates a new, empty file; fails if the name exists.
    async fn create(&self, name: &str) -> io::Result<Self::File>;
    /// Opens an existing file for reading and writing.
    async fn open(&self, name: &str) -> io::Result<Self::File>;
    async fn remove(&self, name: &str) -> io::Result<()>;
    async fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Makes creations, removals and renames durable.
    async fn sync_dir(&self) -> io::Result<()>;
    /// A reader of this directory for other threads.
    fn reader(&self) -> Arc<dyn ReadFiles>;
}

/// A file written with aligned, direct writes.
#[allow(clippy::len_without_is_empty)] // a file's length, not a collection's
pub trait StorageFile {
    /// A buffer suitable for [`StorageFile::write_at`] (aligned for direct I/O).
    type Buf: AsRef<[u8]> + AsMut<[u8]>;
    type ReadBuf: Deref<Target = [u8]>;

    /// Position, length and buffer alignment that writes must respect.
    fn alignment(&self) -> usize;
    /// A buffer of at least `len` bytes. Its contents are unspecified.
    fn alloc(&self, len: usize) -> Self::Buf;
    /// Writes the first `len` bytes of `buf` at `pos`; both aligned.
    async fn write_at(&self, buf: Self::Buf, len: usize, pos: u64) -> io::Result<()>;
    /// Reads up to `len` bytes at `pos`; shorter only at the end of the file.
    async fn read_at(&self, pos: u64, len: usize) -> io::Result<Self::ReadBuf>;
    /// fdatasync: makes completed writes and the file's length durable.
    async fn sync(&self) -> io::Result<()>;
    async fn set_len(&self, len: u64) -> io::Result<()>;
    /// Reserves space up to `len` bytes (fallocate); the new range reads as zeros.
    async fn allocate(&self, len: u64) -> io::Result<()>;
    async fn len(&self) -> io::Result<u64>;
    /// How many bytes the log should write as zeros ahead of its end at a
    /// time, beside a small flush round, so later rounds overwrite written
    /// blocks instead of allocated ones (aligned; 0: it does not pay here).
    /// On a file system, a write into an allocated but never-written extent
    /// must also convert the extent, and the fdatasync after it must then
    /// commit that metadata through the journal; over written blocks the
    /// fdatasync only flushes data (see `DmaFileHandle`'s figures).
    fn zero_ahead(&self) -> usize {
        0
    }
}
