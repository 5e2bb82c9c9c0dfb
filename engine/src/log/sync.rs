//! Durability: syncs of the active segment (whole, or begun and finished
//! around a run that goes without the log), and the sealed close.

use super::Log;
use crate::chunk::{ChunkHeader, CHUNK_HEADER_LEN, FLAG_SEAL};
use crate::segment::error::LogError;
use crate::storage::{Storage, StorageFile};

use std::rc::Rc;

/// A sync of the active segment begun with [`Log::begin_sync`]: it covers
/// every write completed before it began. It runs without the log
/// ([`SyncTicket::run`]), so the log can write its next round meanwhile, and
/// its outcome goes back through [`Log::finish_sync`].
pub struct SyncTicket<F> {
    file: Rc<F>,
    /// The segment synced, by its first offset.
    segment: u64,
    /// Bytes of the segment written when the sync began.
    pos: u64,
    /// Offset of the first record not written when the sync began.
    offset: u64,
}

impl<F: StorageFile> SyncTicket<F> {
    /// The fdatasync.
    pub async fn run(&self) -> std::io::Result<()> {
        self.file.sync().await
    }
}

impl<S: Storage> Log<S> {
    /// fdatasync of the active segment. Returns the offset below which every
    /// record is durable.
    pub async fn sync(&mut self) -> Result<u64, LogError> {
        if self.write_pos <= self.synced_pos {
            // Nothing written since the last completed sync.
            self.check_latched()?;
            return Ok(self.synced_offset);
        }
        let ticket = self.begin_sync()?;
        let result = ticket.run().await;
        self.finish_sync(ticket, result)
    }

    /// Begins a sync of what has been written so far; run it with
    /// [`SyncTicket::run`] and hand its outcome to [`Log::finish_sync`].
    /// Writes may go on meanwhile: they are not covered by it, and the bound
    /// on bytes written past a sync still counts from the last completed one.
    pub fn begin_sync(&self) -> Result<SyncTicket<S::File>, LogError> {
        self.check_latched()?;
        let active = self.active();
        Ok(SyncTicket {
            file: active.file.clone(),
            segment: active.header.first_offset,
            pos: self.write_pos,
            offset: self.next_offset,
        })
    }

    /// A sync begun with [`Log::begin_sync`] returned: on success every record
    /// written before it began is durable; returns the offset below which
    /// every record is. A failure latches the log; so does one that came
    /// first (a write that failed while the sync ran).
    pub fn finish_sync(
        &mut self,
        ticket: SyncTicket<S::File>,
        result: std::io::Result<()>,
    ) -> Result<u64, LogError> {
        self.check_latched()?;
        if let Err(source) = result {
            return Err(self.latch("syncing", source));
        }
        if ticket.segment == self.active().header.first_offset {
            self.synced_pos = self.synced_pos.max(ticket.pos);
        }
        // Otherwise the log rotated meanwhile, and rotating synced that
        // segment in full: nothing of the active one is covered.
        self.synced_offset = self.synced_offset.max(ticket.offset);
        Ok(self.synced_offset)
    }

    /// Syncs, then writes and syncs a seal chunk marking a clean close, so a
    /// later open treats damage to the tail as corruption rather than a torn write.
    pub async fn close(mut self) -> Result<(), LogError> {
        self.sync().await?;
        let active = self.active();
        let alignment = active.header.alignment as usize;
        if self.write_pos + alignment as u64 <= active.header.segment_bytes {
            let seal = ChunkHeader {
                flags: FLAG_SEAL,
                shard: self.config.shard,
                record_count: 0,
                first_offset: self.next_offset,
                first_ts: 0,
                last_ts: 0,
                body_len: 0,
                body_crc: crc32c::crc32c(&[]),
                synced_through: self.write_pos,
                generation: self.generations.current(),
            };
            let mut buf = active.file.alloc(alignment);
            let mut header = [0u8; CHUNK_HEADER_LEN];
            seal.encode(&mut header);
            buf.as_mut()[..alignment].fill(0);
            buf.as_mut()[..CHUNK_HEADER_LEN].copy_from_slice(&header);
            let pos = self.write_pos;
            if let Err(source) = active.file.write_at(buf, alignment, pos).await {
                return Err(self.latch("writing the seal", source));
            }
            self.write_pos += alignment as u64;
            if let Err(source) = self.active().file.sync().await {
                return Err(self.latch("syncing the seal", source));
            }
        }
        Ok(())
    }
}
