//! What other threads see of a shard ([`ShardShared`]): its watermarks,
//! ring view, readers, queue and memory figures, files, generation history
//! and chunk index; and its counters ([`ShardStats`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use event_listener::Event;

use super::wake::{Readers, Relay};
use crate::event::AppendError;
use crate::generation::Generations;
use crate::latency::LatencyHistogram;
use crate::log::Log;
use crate::ring::{Ring, RingView};
use crate::segment::index::{ChunkEntry, LogIndex};
use crate::storage::{ReadFiles, Storage};
use crate::subscribe::ColdStore;
use crate::watermark::Watermarks;

/// What other threads see of a shard.
pub struct ShardShared {
    pub id: u32,
    pub watermarks: Watermarks,
    pub ring: Arc<RingView>,
    /// What subscriptions wait on: announced once per append batch, flush,
    /// answered claim and latch, and woken by the engine's relay (`wake`), so
    /// the shard's cost does not grow with the number of subscribers.
    pub readers: Readers,
    relay: Option<Arc<Relay>>,
    /// Notified once per completed flush, after the flushed watermark is
    /// stored: the shard's own appends waiting for room.
    pub(crate) flushed: Event,
    pub(super) latched: Mutex<Option<String>>,
    /// Why the shard refuses appends for want of disk space, while it does.
    no_space: Mutex<Option<String>>,
    ring_bytes: AtomicUsize,
    unflushed_bytes: AtomicUsize,
    /// Record bytes of appends sent to the shard and not yet taken by it
    /// (reserved by the engine before it sends, given back by the shard).
    queued_bytes: AtomicUsize,
    pub(super) stats: ShardStats,
    /// The shard's segment directory, for readers on other threads. Set before
    /// the shard reports ready.
    files: std::sync::OnceLock<Arc<dyn ReadFiles>>,
    /// Notified by [`ShardShared::request_claim`]; the shard's ticker waits on it.
    pub(super) claim_requested: Event,
    /// The generation history, set when the log opened (before ready).
    generations: std::sync::OnceLock<Generations>,
    /// The log's chunk index as readers may use it: every chunk below the
    /// flushed watermark is in it (extended before that watermark moves).
    chunk_index: std::sync::RwLock<LogIndex>,
    /// The highest stamp any shard of the engine has made visible (shared by
    /// all of them): a claim up to it never pushes stamps past what the feed
    /// already holds, so a quiet shard can answer a merge at once even when
    /// the wall clock is behind the other shards' stamps.
    pub(super) stamped_high: Arc<std::sync::atomic::AtomicI64>,
    /// Every offset below this is in the object store (the server's
    /// uploader raises it): with `RetentionPolicy::keep_until_uploaded`,
    /// retention removes no segment holding an offset at or above it.
    uploaded_below: std::sync::atomic::AtomicU64,
    /// Where readers find history below the local log (the server's object
    /// store), if anywhere.
    cold: std::sync::OnceLock<Arc<dyn ColdStore>>,
}

/// Counters of a shard's work, for metrics and benchmarks. Relaxed atomics,
/// written by the shard's own core only: the append path pays an uncontended
/// add per batch, never a lock.
#[derive(Debug, Default)]
pub struct ShardStats {
    /// Events stamped and made visible.
    pub appended: std::sync::atomic::AtomicU64,
    /// Framed record bytes of those events.
    pub appended_bytes: std::sync::atomic::AtomicU64,
    /// Time the command loop spent in the non-yielding stamp-and-publish step, in nanoseconds.
    pub append_ns: std::sync::atomic::AtomicU64,
    /// Completed retention passes. One that completes after a flush returned
    /// saw everything that flush made durable.
    pub retention_passes: std::sync::atomic::AtomicU64,
    /// Completed flush rounds (write + fdatasync).
    pub rounds: std::sync::atomic::AtomicU64,
    /// Record bytes made durable.
    pub bytes: std::sync::atomic::AtomicU64,
    /// Sum of the flush rounds' durations (first write to the sync that made
    /// them durable), in nanoseconds. Rounds overlap (the next one writes
    /// while the last one syncs), so it can exceed the time that passed.
    pub busy_ns: std::sync::atomic::AtomicU64,
    /// Each flush round: its chunk writes and the fdatasync after them.
    pub flush_latency: LatencyHistogram,
    /// The fdatasync that ends each flush round, alone.
    pub fsync_latency: LatencyHistogram,
    /// Failed writes and syncs. Each one latches the shard, so this is 0 or 1
    /// until the engine is reopened.
    pub io_errors: std::sync::atomic::AtomicU64,
    /// Appends not applied because their caller had gone before the shard
    /// could take them (cancelled, deadline passed).
    pub abandoned: std::sync::atomic::AtomicU64,
    /// Events of idempotent producers that the shard held already (a
    /// retry): answered with their original positions, not stored again.
    pub duplicates: std::sync::atomic::AtomicU64,
}

impl ShardShared {
    pub fn stats(&self) -> &ShardStats {
        &self.stats
    }

    /// Window memory the ring holds now.
    pub fn ring_bytes(&self) -> usize {
        self.ring_bytes.load(Ordering::Relaxed)
    }

    /// Record bytes committed but not yet durable.
    pub fn unflushed_bytes(&self) -> usize {
        self.unflushed_bytes.load(Ordering::Relaxed)
    }

    /// Record bytes of appends queued for the shard and not yet taken.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes.load(Ordering::Acquire)
    }

    /// Reserves queue room for `bytes`; refused when others are queued and
    /// the total would pass `limit` (an empty queue takes any one batch).
    pub(crate) fn reserve_queue(&self, bytes: usize, limit: usize) -> Result<(), AppendError> {
        let before = self.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
        if before == 0 || before + bytes <= limit {
            return Ok(());
        }
        self.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
        Err(AppendError::QueueFull {
            shard: self.id,
            queued: before,
            limit,
        })
    }

    /// Gives back what [`ShardShared::reserve_queue`] took.
    pub(crate) fn release_queue(&self, bytes: usize) {
        self.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
    }

    pub(super) fn publish_memory(&self, ring: &Ring) {
        self.ring_bytes
            .store(ring.capacity_bytes(), Ordering::Relaxed);
        self.unflushed_bytes
            .store(ring.unflushed_bytes(), Ordering::Relaxed);
    }

    /// A shard's shared state; `relay` wakes its readers (`None`: the shard
    /// wakes them itself, as in the single-threaded simulator).
    pub(crate) fn new(
        id: u32,
        stamped_high: Arc<std::sync::atomic::AtomicI64>,
        relay: Option<Arc<Relay>>,
    ) -> ShardShared {
        ShardShared {
            id,
            watermarks: Watermarks::default(),
            ring: Arc::new(RingView::default()),
            readers: Readers::default(),
            relay,
            flushed: Event::new(),
            latched: Mutex::new(None),
            no_space: Mutex::new(None),
            ring_bytes: AtomicUsize::new(0),
            unflushed_bytes: AtomicUsize::new(0),
            queued_bytes: AtomicUsize::new(0),
            stats: ShardStats::default(),
            files: std::sync::OnceLock::new(),
            claim_requested: Event::new(),
            generations: std::sync::OnceLock::new(),
            chunk_index: std::sync::RwLock::new(LogIndex::default()),
            stamped_high,
            uploaded_below: std::sync::atomic::AtomicU64::new(0),
            cold: std::sync::OnceLock::new(),
        }
    }

    /// Every offset below this is in the object store (0 until the server's
    /// uploader says otherwise).
    pub fn uploaded_below(&self) -> u64 {
        self.uploaded_below.load(Ordering::Acquire)
    }

    /// The object store now holds every offset below `next` (never lowers).
    pub fn set_uploaded_below(&self, next: u64) {
        self.uploaded_below.fetch_max(next, Ordering::AcqRel);
    }

    /// Where readers find history below the local log, if anywhere.
    pub fn cold(&self) -> Option<&Arc<dyn ColdStore>> {
        self.cold.get()
    }

    /// Gives readers `store` for history below the local log; once (a
    /// second store is ignored).
    pub fn set_cold(&self, store: Arc<dyn ColdStore>) {
        let _ = self.cold.set(store);
    }

    /// Wakes every subscription waiting on this shard (a cold store's fetch
    /// is in), from any thread.
    pub fn wake_readers(&self) {
        self.readers.wake_all();
    }

    /// The durable chunk holding `offset`, with its segment's first offset.
    pub fn locate_offset(&self, offset: u64) -> Option<(u64, ChunkEntry)> {
        self.chunk_index
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .find_offset(offset)
    }

    /// The bytes the segment starting at `first` holds (up to the end of
    /// its last chunk), if the readers' index holds it.
    pub fn segment_bytes(&self, first: u64) -> Option<u64> {
        self.chunk_index
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .segment_end(first)
    }

    /// The first durable chunk holding a record stamped at or after `ts`.
    pub fn locate_ts(&self, ts: i64) -> Option<(u64, ChunkEntry)> {
        self.chunk_index
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .find_ts(ts)
    }

    /// Brings the readers' chunk index up to the log's (new chunks, a new
    /// segment, segments retention removed).
    pub(super) fn publish_index<S: Storage>(&self, log: &Log<S>) {
        self.chunk_index
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .sync_from(log.segment_indexes());
    }

    /// Tells waiting subscriptions the shard has news (after storing it): O(1).
    pub(crate) fn announce(&self) {
        self.readers.announce(self.relay.as_deref());
    }

    /// Gives readers the shard's files and generation history; called once,
    /// when its log has opened and before the shard reports ready.
    pub(crate) fn attach(&self, files: Arc<dyn ReadFiles>, generations: Generations) {
        let _ = self.files.set(files);
        let _ = self.generations.set(generations);
    }

    /// Asks the shard to claim "no future stamp at or below `ts`", so a merge
    /// waiting on this quiet shard can proceed. The shard claims its clock's
    /// now as soon as it is between commands, and again when its clock reaches
    /// `ts` if now was below it. Wakes the shard only when no request is
    /// already pending.
    pub fn request_claim(&self, ts: i64) {
        if self.watermarks.request_claim(ts) {
            self.claim_requested.notify(usize::MAX);
        }
    }

    /// Read access to the shard's segment files.
    pub fn files(&self) -> &Arc<dyn ReadFiles> {
        self.files
            .get()
            .expect("set when the shard opened, before the engine returned")
    }

    /// The shard's generation history; its last entry is the generation
    /// running now (see [`crate::generation`]).
    pub fn generations(&self) -> &Generations {
        self.generations
            .get()
            .expect("set when the shard opened, before the engine returned")
    }

    /// The I/O failure that stopped the shard, if one did.
    pub fn latched(&self) -> Option<String> {
        self.latched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Why the shard refuses appends for want of disk space, while it does
    /// (it takes them again by itself once the next segment fits).
    pub fn no_space(&self) -> Option<String> {
        self.no_space
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn set_no_space(&self, cause: Option<String>) {
        *self.no_space.lock().unwrap_or_else(|e| e.into_inner()) = cause;
    }
}
