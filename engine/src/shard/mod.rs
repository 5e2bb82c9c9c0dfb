//! A shard: one core's ring, flush queue and log, run on its own glommio executor.
//!
//! Three tasks share the shard's state on its core. The command loop stamps
//! and frames each append batch into the ring and publishes the committed
//! watermark in one non-yielding step, then announces it to readers once (the
//! engine's wake relay wakes them, see [`wake`]). The flusher
//! writes unflushed window suffixes as chunks (group commit), syncs, stores the
//! flushed watermark, and only then wakes durable-ack and flush waiters. The
//! ticker asks for a flush every flush interval, makes claims for idle merges
//! and runs retention. After a failed write or sync the shard latches: it
//! acknowledges nothing more until the engine is reopened.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicUsize, Ordering};

use event_listener::Event;

pub(crate) mod core;
pub(crate) mod wake;

use self::core::{chunk_images, Admit, CoreLimits, FlushIo, Judged, Replies, ShardCore};
pub use self::wake::{Readers, Waiter};
pub(crate) use self::wake::{Relay, RelayThread};
use crate::clock::Clock;
use crate::event::{AppendError, Durability, Stored};
use crate::generation::Generations;
use crate::latency::LatencyHistogram;
use crate::log::{Log, LogConfig, RecoveryReport, SyncTicket};
use crate::rate_limit::RateLimit;
use crate::retention::RetentionPolicy;
use crate::ring::{Ring, RingView};
use crate::segment::index::{ChunkEntry, LogIndex};
use crate::storage::{ReadFiles, Storage};
use crate::watermark::Watermarks;
use crate::RecoveryError;

pub(crate) type Reply<T> = flume::Sender<T>;

/// An fdatasync slower than this is worth a warning: a healthy SSD syncs in
/// well under a millisecond, and durable acks wait for it.
const SLOW_FSYNC: Duration = Duration::from_millis(100);
/// Slow-fsync warnings of every shard share one limit.
static SLOW_FSYNC_WARNINGS: RateLimit = RateLimit::new(Duration::from_secs(10));

pub(crate) enum Command {
    Append(AppendCommand),
    /// Flush everything committed so far; reply when it is durable.
    Flush {
        reply: Reply<Result<(), AppendError>>,
    },
    /// Run on the shard's thread, inside its executor (see
    /// [`crate::Engine::run_on_shard`]).
    Run(Box<dyn FnOnce() + Send>),
}

/// One shard's part of an append.
pub(crate) struct AppendCommand {
    /// Records framed by the caller, back to back, not yet stamped.
    pub records: Vec<u8>,
    pub count: usize,
    pub durability: Durability,
    /// When the append reached the engine: `append_timeout` counts from here.
    pub arrived: Instant,
    /// The records carry producer stamps: each is checked against the
    /// shard's producer table (see `crate::producer`).
    pub idempotent: bool,
    /// The caller waits on this; once it is gone (its future dropped: a
    /// cancelled stream, a passed deadline) the append is not applied.
    pub reply: Reply<Result<Vec<Stored>, AppendError>>,
}

/// Settings of one shard.
#[derive(Clone, Debug)]
pub(crate) struct ShardConfig {
    pub log: LogConfig,
    pub window_bytes: usize,
    pub ring_bytes: usize,
    pub max_unflushed_bytes: usize,
    pub flush_interval: Duration,
    pub append_timeout: Duration,
    pub retention: RetentionPolicy,
    pub retention_interval: Duration,
}

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
    latched: Mutex<Option<String>>,
    /// Why the shard refuses appends for want of disk space, while it does.
    no_space: Mutex<Option<String>>,
    ring_bytes: AtomicUsize,
    unflushed_bytes: AtomicUsize,
    /// Record bytes of appends sent to the shard and not yet taken by it
    /// (reserved by the engine before it sends, given back by the shard).
    queued_bytes: AtomicUsize,
    stats: ShardStats,
    /// The shard's segment directory, for readers on other threads. Set before
    /// the shard reports ready.
    files: std::sync::OnceLock<Arc<dyn ReadFiles>>,
    /// Notified by [`ShardShared::request_claim`]; the shard's ticker waits on it.
    claim_requested: Event,
    /// The generation history, set when the log opened (before ready).
    generations: std::sync::OnceLock<Generations>,
    /// The log's chunk index as readers may use it: every chunk below the
    /// flushed watermark is in it (extended before that watermark moves).
    chunk_index: std::sync::RwLock<LogIndex>,
    /// The highest stamp any shard of the engine has made visible (shared by
    /// all of them): a claim up to it never pushes stamps past what the feed
    /// already holds, so a quiet shard can answer a merge at once even when
    /// the wall clock is behind the other shards' stamps.
    stamped_high: Arc<std::sync::atomic::AtomicI64>,
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

    fn publish_memory(&self, ring: &Ring) {
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
        }
    }

    /// The durable chunk holding `offset`, with its segment's first offset.
    pub fn locate_offset(&self, offset: u64) -> Option<(u64, ChunkEntry)> {
        self.chunk_index
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .find_offset(offset)
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
    fn publish_index<S: Storage>(&self, log: &Log<S>) {
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

/// What a durable waiter is answered with on the real path.
enum DurableReply {
    Append(Reply<Result<Vec<Stored>, AppendError>>, Vec<Stored>),
    Flush(Reply<Result<(), AppendError>>),
}

impl DurableReply {
    fn send_ok(self) {
        // A caller that gave up waiting is not an error for the shard.
        match self {
            DurableReply::Append(reply, positions) => drop(reply.send(Ok(positions))),
            DurableReply::Flush(reply) => drop(reply.send(Ok(()))),
        }
    }

    fn send_err(self, error: AppendError) {
        match self {
            DurableReply::Append(reply, _) => drop(reply.send(Err(error))),
            DurableReply::Flush(reply) => drop(reply.send(Err(error))),
        }
    }
}

fn answer(replies: Replies<DurableReply>) {
    for reply in replies.ok {
        reply.send_ok();
    }
    for (reply, error) in replies.failed {
        reply.send_err(error);
    }
}

/// Opens the shard's log and runs the shard until its command channel closes;
/// then flushes, syncs and closes the log. `ready` gets the recovery outcome.
pub(crate) async fn run<S: Storage + 'static>(
    storage: S,
    config: ShardConfig,
    shared: Arc<ShardShared>,
    clock: Arc<dyn Clock>,
    commands: flume::Receiver<Command>,
    ready: flume::Sender<Result<(RecoveryReport, Vec<(u64, u64)>), RecoveryError>>,
) {
    let files = storage.reader();
    let (mut log, report) = match Log::open(storage, config.log.clone()).await {
        Ok(opened) => opened,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    shared.attach(files, log.generations().clone());
    let (core, heads) = ShardCore::over_opened_log(shared.clone(), core_limits(&config), &mut log);
    let _ = ready.send(Ok((report, heads)));

    let core = Rc::new(Driver {
        config,
        core: RefCell::new(core),
        clock,
        wake_flusher: Event::new(),
        wake_ticker: Event::new(),
    });
    let flusher = glommio::spawn_local(flusher(log, core.clone()));
    let ticker = glommio::spawn_local(ticker(core.clone()));
    let driver = &*core;

    // Nothing here polls: a command wakes this task through flume's waker (a
    // foreign wake-up from the caller's thread). Before the glommio patch
    // (engine/vendor/PATCHES.md) such a wake-up could be slept through, and a
    // 10 ms timer here plus a signal every 50 ms papered over it.
    while let Ok(command) = commands.recv_async().await {
        match command {
            Command::Append(append) => {
                let len = append.records.len();
                driver.append(append).await;
                shared.release_queue(len);
                // glommio reaps I/O completions only when a task queue runs dry or
                // its preempt timer fires; a busy command queue would otherwise
                // hold the flusher's finished writes back for the whole timer.
                glommio::yield_if_needed().await;
            }
            Command::Flush { reply } => driver.flush(reply),
            Command::Run(start) => start(),
        }
    }
    driver.core.borrow_mut().close();
    driver.wake_flusher.notify(usize::MAX);
    let _ = ticker.cancel().await;
    flusher.await;
}

fn core_limits(config: &ShardConfig) -> CoreLimits {
    CoreLimits {
        window_bytes: config.window_bytes,
        ring_bytes: config.ring_bytes,
        max_unflushed_bytes: config.max_unflushed_bytes,
        round_bytes: config.log.max_unsynced_bytes as usize,
    }
}

/// The glommio side of a shard: its [`ShardCore`], the clock, and the events
/// its three tasks (command loop, flusher, ticker) wake each other with. The
/// core is borrowed only between awaits.
struct Driver {
    config: ShardConfig,
    core: RefCell<ShardCore<DurableReply>>,
    clock: Arc<dyn Clock>,
    wake_flusher: Event,
    wake_ticker: Event,
}

impl Driver {
    fn flush(&self, reply: Reply<Result<(), AppendError>>) {
        let mut core = self.core.borrow_mut();
        if let Some(e) = core.latched_error() {
            let _ = reply.send(Err(e));
            return;
        }
        let needed = core.shared().watermarks.committed_next();
        if let Some(now) = core.wait_durable(needed, DurableReply::Flush(reply)) {
            now.send_ok();
            return;
        }
        drop(core);
        self.wake_flusher.notify(usize::MAX);
    }

    async fn append(&self, command: AppendCommand) {
        let AppendCommand {
            records,
            count,
            durability,
            arrived,
            idempotent,
            reply,
        } = command;
        // Idempotent producers: every event is judged before any waits or is
        // staged, so a stale one refuses this shard's part whole, and a retry
        // of events already stored is answered without waiting for room it
        // does not need. (The table cannot change before this append is
        // staged: the command loop takes one append at a time.)
        let judged = match self.core.borrow().judge(&records, idempotent) {
            Ok(judged) => judged,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        if !self.wait_for_room(&judged, arrived, &reply).await {
            return;
        }

        // Stamp, frame and publish in one step that never yields.
        let step = Instant::now();
        let mut core = self.core.borrow_mut();
        let staged = match core.stage(&records, count, &judged, self.clock.now_ns()) {
            Ok(staged) => staged,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let shared = core.shared();
        shared
            .stats
            .append_ns
            .fetch_add(step.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let mut wake_flusher = staged.wake_flusher;
        match durability {
            Durability::Memory => drop(reply.send(Ok(staged.positions))),
            Durability::Durable => {
                let waiting = DurableReply::Append(reply, staged.positions);
                match core.wait_durable(staged.needed, waiting) {
                    Some(now) => now.send_ok(),
                    None => wake_flusher = true,
                }
            }
        }
        drop(core);
        if wake_flusher {
            self.wake_flusher.notify(usize::MAX);
        }
        if staged.first_unflushed {
            // The first unflushed bytes since the last flush: the ticker starts
            // the flush interval's clock.
            self.wake_ticker.notify(usize::MAX);
        }
    }

    /// Back-pressure: waits while `bytes` more would push unflushed bytes past
    /// the bound, at most `append_timeout` since the append arrived (not since
    /// this shard took it: time queued behind other commands counts). False
    /// when the append is not to be applied (answered, or its caller gone).
    async fn wait_for_room(
        &self,
        judged: &Judged,
        arrived: Instant,
        reply: &Reply<Result<Vec<Stored>, AppendError>>,
    ) -> bool {
        let config = &self.config;
        loop {
            let listener = self.core.borrow().shared().flushed.listen();
            {
                let mut core = self.core.borrow_mut();
                // The caller's presence is read in the same non-yielding step
                // that stages the batch (when there is room).
                let unflushed = match core.admit(judged, reply.is_disconnected()) {
                    Admit::Stage => return true,
                    Admit::Abandoned => return false,
                    Admit::Refused(e) => {
                        let _ = reply.send(Err(e));
                        return false;
                    }
                    Admit::Wait { unflushed } => unflushed,
                };
                let waited = arrived.elapsed();
                if waited >= config.append_timeout {
                    let _ = reply.send(Err(AppendError::ResourceExhausted {
                        shard: core.shared().id,
                        unflushed,
                        limit: config.max_unflushed_bytes,
                        waited,
                    }));
                    return false;
                }
            }
            self.wake_flusher.notify(usize::MAX);
            let remaining = config.append_timeout.saturating_sub(arrived.elapsed());
            futures_lite::future::or(listener, glommio::timer::sleep(remaining)).await;
        }
    }
}

/// How often a shard whose disk is full tries again to make its next
/// segment: how long after space is freed appends are taken again.
const SPACE_RETRY: Duration = Duration::from_secs(1);

/// Does the core's flush I/O: writes a round's chunks, syncs, applies
/// retention, and hands each completion back; sleeps while the core has
/// nothing to do. A sync runs as a task of its own beside the flusher, so the
/// next round's write goes on while the disk syncs the last one.
async fn flusher<S: Storage + 'static>(mut log: Log<S>, driver: Rc<Driver>) {
    let Driver {
        config,
        core,
        wake_flusher: wake,
        ..
    } = &*driver;
    let shared = core.borrow().shared_arc();
    // Rounds written and not yet covered by a running sync, then those the
    // running sync covers: (started, bytes), for their figures once durable.
    let mut written: Vec<(Instant, u64)> = Vec::new();
    let mut syncing: Option<(Vec<(Instant, u64)>, SyncTask<S>)> = None;
    loop {
        let listener = wake.listen();
        if let Some((_, task)) = &mut syncing {
            if let Some(done) = futures_lite::future::poll_once(task).await {
                let (rounds, _) = syncing.take().expect("checked");
                synced(&shared, core, &mut log, rounds, done);
            }
        }
        let next = core.borrow_mut().next_io();
        match next {
            FlushIo::Write(plan) => {
                let started = Instant::now();
                let bytes = plan.iter().map(|r| (r.to - r.from) as u64).sum();
                let result = log.append_chunks(&chunk_images(&plan)).await;
                drop(plan);
                let failed = result.is_err();
                answer(core.borrow_mut().written(result, log.no_space()));
                if failed {
                    end_round(&shared, started, bytes);
                } else {
                    written.push((started, bytes));
                }
            }
            FlushIo::Sync => {
                let rounds = std::mem::take(&mut written);
                match log.begin_sync() {
                    Ok(ticket) => {
                        let task = glommio::spawn_local(async move {
                            let started = Instant::now();
                            let result = ticket.run().await;
                            (ticket, result, started.elapsed())
                        });
                        syncing = Some((rounds, task));
                    }
                    Err(e) => {
                        let replies = core.borrow_mut().synced(Err(e), &log);
                        answer(replies);
                    }
                }
            }
            FlushIo::Retention => {
                let now = crate::clock::now_ns();
                if let Ok(outcome) = log.apply_retention(config.retention, now).await {
                    core.borrow_mut().retention_applied(&outcome, &log);
                }
                shared
                    .stats
                    .retention_passes
                    .fetch_add(1, Ordering::Relaxed);
            }
            FlushIo::Prepare => {
                let result = log.prepare_next().await;
                answer(core.borrow_mut().prepared(result));
            }
            FlushIo::Wait => match syncing.take() {
                None => listener.await,
                Some((rounds, mut task)) => {
                    // Whichever comes first: the sync returns, or work to start.
                    let done = futures_lite::future::or(async { Some((&mut task).await) }, async {
                        listener.await;
                        None
                    })
                    .await;
                    match done {
                        Some(done) => synced(&shared, core, &mut log, rounds, done),
                        None => syncing = Some((rounds, task)),
                    }
                }
            },
            FlushIo::Stop => break,
        }
    }
    if !core.borrow().is_latched() {
        let _ = log.close().await;
    }
    // Anyone still waiting is told the shard is gone.
    let replies = core.borrow_mut().shut_down();
    answer(replies);
}

/// A sync running beside the flusher ([`Log::begin_sync`]).
type SyncTask<S> = glommio::Task<SyncDone<S>>;
/// A sync's ticket, outcome and duration.
type SyncDone<S> = (
    SyncTicket<<S as Storage>::File>,
    std::io::Result<()>,
    Duration,
);

/// The running sync returned: its figures, then the log's and the core's
/// account of it, and the durable waiters it satisfies answered.
fn synced<S: Storage>(
    shared: &ShardShared,
    core: &RefCell<ShardCore<DurableReply>>,
    log: &mut Log<S>,
    rounds: Vec<(Instant, u64)>,
    (ticket, result, fsync): SyncDone<S>,
) {
    shared.stats.fsync_latency.record(fsync);
    if fsync >= SLOW_FSYNC {
        warn_slow_fsync(shared.id, fsync);
    }
    for (started, bytes) in rounds {
        end_round(shared, started, bytes);
    }
    let flushed = log.finish_sync(ticket, result);
    let replies = core.borrow_mut().synced(flushed, log);
    answer(replies);
}

/// A flush round's figures, once it has ended (synced, or failed).
fn end_round(shared: &ShardShared, started: Instant, bytes: u64) {
    let stats = &shared.stats;
    stats.flush_latency.record(started.elapsed());
    stats.rounds.fetch_add(1, Ordering::Relaxed);
    stats.bytes.fetch_add(bytes, Ordering::Relaxed);
    stats
        .busy_ns
        .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// Tells the operator the disk is slow and what to look at, at most once per
/// 10 s over all shards.
fn warn_slow_fsync(shard: u32, took: Duration) {
    if let Some(suppressed) = SLOW_FSYNC_WARNINGS.check() {
        tracing::warn!(
            shard,
            fsync_ms = took.as_millis() as u64,
            suppressed,
            "disk is slow: fdatasync on shard {shard} took {} ms, and durable acks wait for it; \
             check the disk's load and health (iostat -x, dmesg), that the data dir is on a \
             local SSD rather than a network or shared volume, and `ringfeed tune calibrate`",
            took.as_millis()
        );
    }
}

/// Flushes memory-acknowledged events a flush interval after they became
/// unflushed, answers claim requests of merges waiting on this shard, and runs
/// retention. It sleeps with a timer only while one of those is due later, so
/// an idle shard is never woken.
async fn ticker(driver: Rc<Driver>) {
    let Driver {
        config,
        core,
        clock,
        wake_flusher,
        wake_ticker: wake,
    } = &*driver;
    let shared = core.borrow().shared_arc();
    /// Longest wait for the clock to reach a requested claim: bounds how late
    /// a claim comes if the clock is stepped while the shard waits.
    const MAX_CLAIM_WAIT: Duration = Duration::from_secs(1);
    /// Shortest: a clock that does not move (a test's manual clock) must not
    /// turn the wait into a spin.
    const MIN_CLAIM_WAIT: Duration = Duration::from_micros(50);
    let retains = config.retention.max_age.is_some() || config.retention.max_bytes.is_some();
    let mut next_retention = Instant::now() + config.retention_interval;
    let mut flush_due: Option<Instant> = None;
    // Set while a requested claim is above this shard's clock: claim again then.
    let mut claim_retry: Option<Instant> = None;
    // While the disk is full: when the flusher tries the next segment again.
    let mut space_retry: Option<Instant> = None;
    loop {
        // Listen before looking, so a wake-up between the look and the wait is kept.
        let local = wake.listen();
        let remote = shared.claim_requested.listen();
        let now = Instant::now();
        if core.borrow().unflushed_bytes() == 0 {
            flush_due = None;
        } else if flush_due.is_none() {
            flush_due = Some(now + config.flush_interval);
        }
        let claim_due = match shared.watermarks.claim_wanted() {
            0 => {
                claim_retry = None;
                None
            }
            _ => Some(claim_retry.unwrap_or(now)),
        };
        if core.borrow().no_space().is_none() {
            space_retry = None;
        } else if space_retry.is_none() {
            space_retry = Some(now + SPACE_RETRY);
        }
        let deadline = [
            flush_due,
            retains.then_some(next_retention),
            claim_due,
            space_retry,
        ]
        .into_iter()
        .flatten()
        .min();
        if deadline.is_none_or(|at| at > now) {
            let woken = futures_lite::future::or(local, remote);
            match deadline {
                Some(at) => {
                    let timer = async { glommio::timer::sleep(at - now).await };
                    futures_lite::future::or(woken, timer).await
                }
                None => woken.await,
            }
        }
        let now = Instant::now();
        let mut st = core.borrow_mut();
        let mut wake_flush = false;
        if flush_due.is_some_and(|due| due <= now) {
            flush_due = None;
            wake_flush = st.flush_interval_passed();
        }
        // Between commands on this core: see `ShardCore::answer_claim`.
        let wanted = shared.watermarks.claim_wanted();
        let claimed = wanted != 0 && claim_retry.is_none_or(|at| at <= now);
        if claimed {
            claim_retry = st.answer_claim(clock.now_ns()).map(|short| {
                let behind = Duration::from_nanos(short as u64);
                now + behind.clamp(MIN_CLAIM_WAIT, MAX_CLAIM_WAIT)
            });
        }
        if space_retry.is_some_and(|at| at <= now) {
            space_retry = None;
            wake_flush |= st.space_retry_due();
        }
        if retains && next_retention <= now {
            next_retention = now + config.retention_interval;
            st.retention_due();
            wake_flush = true;
        }
        drop(st);
        if wake_flush {
            wake_flusher.notify(usize::MAX);
        }
    }
}
