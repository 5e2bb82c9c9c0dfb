//! A shard: one core's ring, flush queue and log, run on its own glommio executor.
//!
//! Three tasks share the shard's state on its core. The command loop stamps
//! and frames each append batch into the ring and publishes the committed
//! watermark in one non-yielding step, then wakes readers once. The flusher
//! writes unflushed window suffixes as chunks (group commit), syncs, stores the
//! flushed watermark, and only then wakes durable-ack and flush waiters. The
//! ticker asks for a flush every flush interval, makes claims for idle merges
//! and runs retention. After a failed write or sync the shard latches: it
//! acknowledges nothing more until the engine is reopened.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicUsize, Ordering};

use event_listener::Event;

use crate::clock::Clock;
use crate::event::{AppendError, Durability, Position, Stored};
use crate::generation::Generations;
use crate::latency::LatencyHistogram;
use crate::log::{ChunkImage, Log, LogConfig, RecoveryReport};
use crate::producer::{ProducerTable, Seen};
use crate::rate_limit::RateLimit;
use crate::record;
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
    /// Notified once per append batch, after the committed watermark is stored.
    pub appended: Event,
    /// Notified once per completed flush, after the flushed watermark is stored.
    pub flushed: Event,
    latched: Mutex<Option<String>>,
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
    /// Time spent writing and syncing, in nanoseconds.
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

    pub(crate) fn new(id: u32, stamped_high: Arc<std::sync::atomic::AtomicI64>) -> ShardShared {
        ShardShared {
            id,
            watermarks: Watermarks::default(),
            ring: Arc::new(RingView::default()),
            appended: Event::new(),
            flushed: Event::new(),
            latched: Mutex::new(None),
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
}

struct DurableWaiter {
    /// Acknowledge once `flushed_next >= needed`.
    needed: u64,
    reply: DurableReply,
}

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

/// Shard state, shared by its tasks on its one core. Never borrowed across an `.await`.
struct State {
    ring: Ring,
    last_ts: i64,
    producers: ProducerTable,
    waiters: VecDeque<DurableWaiter>,
    latched: Option<String>,
    flush_wanted: bool,
    retention_due: bool,
    closing: bool,
}

impl State {
    fn latched_error(&self, shard: u32) -> Option<AppendError> {
        self.latched.as_ref().map(|cause| AppendError::Latched {
            shard,
            cause: cause.clone(),
        })
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
    let _ = shared.files.set(storage.reader());
    let (mut log, report) = match Log::open(storage, config.log.clone()).await {
        Ok(opened) => opened,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = shared.generations.set(log.generations().clone());
    let next = log.next_offset();
    let last_ts = log.last_ts().unwrap_or(0);
    let w = &shared.watermarks;
    shared.stamped_high.fetch_max(last_ts, Ordering::AcqRel);
    w.publish_committed(next, last_ts);
    w.claim(last_ts);
    shared.publish_index(&log);
    w.publish_flushed(next, last_ts);
    w.publish_evicted(next);
    w.publish_retained(log.retained().map_or(next, |r| r.0));
    let producers = log.take_producers();
    let heads = producers.heads().collect();
    let state = Rc::new(RefCell::new(State {
        ring: Ring::new(
            config.window_bytes,
            config.ring_bytes,
            next,
            shared.ring.clone(),
        ),
        last_ts,
        producers,
        waiters: VecDeque::new(),
        latched: None,
        flush_wanted: false,
        retention_due: false,
        closing: false,
    }));
    let _ = ready.send(Ok((report, heads)));

    let core = Rc::new(Core {
        config,
        shared,
        state,
        clock,
        wake_flusher: Event::new(),
        wake_ticker: Event::new(),
    });
    let flusher = glommio::spawn_local(flusher(log, core.clone()));
    let ticker = glommio::spawn_local(ticker(core.clone()));
    let commands_loop = &*core;

    // Nothing here polls: a command wakes this task through flume's waker (a
    // foreign wake-up from the caller's thread). Before the glommio patch
    // (engine/vendor/PATCHES.md) such a wake-up could be slept through, and a
    // 10 ms timer here plus a signal every 50 ms papered over it.
    while let Ok(command) = commands.recv_async().await {
        match command {
            Command::Append(append) => {
                let len = append.records.len();
                commands_loop.append(append).await;
                commands_loop.shared.release_queue(len);
                // glommio reaps I/O completions only when a task queue runs dry or
                // its preempt timer fires; a busy command queue would otherwise
                // hold the flusher's finished writes back for the whole timer.
                glommio::yield_if_needed().await;
            }
            Command::Flush { reply } => commands_loop.flush(reply),
        }
    }
    commands_loop.state.borrow_mut().closing = true;
    commands_loop.wake_flusher.notify(usize::MAX);
    let _ = ticker.cancel().await;
    flusher.await;
}

/// What the shard's three tasks (command loop, flusher, ticker) share on its
/// core: settings, state, the clock and the events that wake each other.
struct Core {
    config: ShardConfig,
    shared: Arc<ShardShared>,
    state: Rc<RefCell<State>>,
    clock: Arc<dyn Clock>,
    wake_flusher: Event,
    wake_ticker: Event,
}

/// An append's records judged against the producer table before anything
/// waits or is staged.
struct Judged {
    /// Per record, in order, for an idempotent append; empty otherwise.
    seen: Vec<(crate::record::ProducerStamp, Seen)>,
    /// Bytes of the records that will be staged (duplicates are not).
    new_bytes: usize,
    duplicates: usize,
}

impl Core {
    fn flush(&self, reply: Reply<Result<(), AppendError>>) {
        let shared = &self.shared;
        let mut st = self.state.borrow_mut();
        if let Some(e) = st.latched_error(shared.id) {
            let _ = reply.send(Err(e));
            return;
        }
        let needed = shared.watermarks.committed_next();
        if needed <= shared.watermarks.flushed_next() {
            let _ = reply.send(Ok(()));
            return;
        }
        st.waiters.push_back(DurableWaiter {
            needed,
            reply: DurableReply::Flush(reply),
        });
        st.flush_wanted = true;
        drop(st);
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
        let (config, shared) = (&self.config, &*self.shared);
        // Idempotent producers: every event is judged before any waits or is
        // staged, so a stale one refuses this shard's part whole, and a retry
        // of events already stored is answered without waiting for room it
        // does not need. (The table cannot change before this append is
        // staged: the command loop takes one append at a time.)
        let judged = if idempotent {
            match judge(&self.state.borrow().producers, shared.id, &records) {
                Ok(judged) => judged,
                Err(e) => {
                    let _ = reply.send(Err(e));
                    return;
                }
            }
        } else {
            Judged {
                seen: Vec::new(),
                new_bytes: records.len(),
                duplicates: 0,
            }
        };
        if !self.wait_for_room(judged.new_bytes, arrived, &reply).await {
            return;
        }

        // Stamp, frame and publish in one step that never yields: no event is ever
        // stamped but invisible, and stamps strictly increase with offsets.
        let step = Instant::now();
        let mut st = self.state.borrow_mut();
        let was_flushed = st.ring.unflushed_bytes() == 0;
        let mut positions = Vec::with_capacity(count);
        let mut staged = 0usize;
        let mut duplicates_end = 0;
        // One clock read per batch: stamps within it are consecutive nanoseconds.
        let now = self.clock.now_ns().max(shared.watermarks.fence() + 1);
        let mut at = 0;
        while at < records.len() {
            let Ok(len) = record::peek_len(&records[at..]) else {
                // The engine framed these records itself; refuse rather than panic.
                let _ = reply.send(Err(AppendError::Invalid {
                    index: positions.len(),
                    field: "event",
                    reason: "malformed framing".into(),
                }));
                return;
            };
            let record = &records[at..at + len];
            at += len;
            let seen = judged.seen.get(positions.len()).copied();
            if let Some((_, Seen::Duplicate { offset, ts })) = seen {
                duplicates_end = duplicates_end.max(offset + 1);
                positions.push(Stored {
                    position: Position {
                        shard: shared.id,
                        offset,
                        ts,
                    },
                    duplicate: true,
                });
                continue;
            }
            let ts = now.max(st.last_ts + 1);
            let offset = st.ring.stage(record, ts);
            st.last_ts = ts;
            if let Some((stamp, _)) = seen {
                st.producers.record(stamp, offset, ts);
            }
            staged += len;
            positions.push(Stored {
                position: Position {
                    shard: shared.id,
                    offset,
                    ts,
                },
                duplicate: false,
            });
        }
        // Before the batch is visible: a merge that sees it may ask other shards
        // to claim its stamp, and they claim up to this at once.
        shared.stamped_high.fetch_max(st.last_ts, Ordering::AcqRel);
        st.ring.publish();
        let next = st.ring.next_offset();
        shared.watermarks.publish_committed(next, st.last_ts);
        shared.publish_memory(&st.ring);
        let stats = &shared.stats;
        stats.appended.fetch_add(
            (positions.len() - judged.duplicates) as u64,
            Ordering::Relaxed,
        );
        stats
            .duplicates
            .fetch_add(judged.duplicates as u64, Ordering::Relaxed);
        stats
            .appended_bytes
            .fetch_add(staged as u64, Ordering::Relaxed);
        stats
            .append_ns
            .fetch_add(step.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let window_full = st.ring.unflushed_bytes() >= config.window_bytes;
        // A duplicate is acknowledged as durable only once its original is.
        let needed = if staged > 0 { next } else { duplicates_end };
        match durability {
            Durability::Memory => drop(reply.send(Ok(positions))),
            Durability::Durable if needed <= shared.watermarks.flushed_next() => {
                drop(reply.send(Ok(positions)))
            }
            Durability::Durable => {
                st.waiters.push_back(DurableWaiter {
                    needed,
                    reply: DurableReply::Append(reply, positions),
                });
                st.flush_wanted = true;
            }
        }
        let wake = st.flush_wanted || window_full;
        drop(st);
        shared.appended.notify(usize::MAX);
        if wake {
            self.wake_flusher.notify(usize::MAX);
        }
        if was_flushed {
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
        bytes: usize,
        arrived: Instant,
        reply: &Reply<Result<Vec<Stored>, AppendError>>,
    ) -> bool {
        let (config, shared) = (&self.config, &*self.shared);
        loop {
            let listener = shared.flushed.listen();
            {
                let mut st = self.state.borrow_mut();
                // Checked in the same non-yielding step that stages the batch
                // (when there is room): an append whose caller is gone is never
                // applied later.
                if reply.is_disconnected() {
                    shared.stats.abandoned.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
                if let Some(e) = st.latched_error(shared.id) {
                    let _ = reply.send(Err(e));
                    return false;
                }
                let unflushed = st.ring.unflushed_bytes();
                if bytes == 0 || unflushed == 0 || unflushed + bytes <= config.max_unflushed_bytes {
                    return true;
                }
                let waited = arrived.elapsed();
                if waited >= config.append_timeout {
                    let _ = reply.send(Err(AppendError::ResourceExhausted {
                        shard: shared.id,
                        unflushed,
                        limit: config.max_unflushed_bytes,
                        waited,
                    }));
                    return false;
                }
                st.flush_wanted = true;
            }
            self.wake_flusher.notify(usize::MAX);
            let remaining = config.append_timeout.saturating_sub(arrived.elapsed());
            futures_lite::future::or(listener, glommio::timer::sleep(remaining)).await;
        }
    }
}

/// Judges each record of an idempotent producer's append against the table:
/// its stamp and whether it is new or a duplicate. A stale one refuses the
/// whole part (see `crate::producer`).
fn judge(producers: &ProducerTable, shard: u32, records: &[u8]) -> Result<Judged, AppendError> {
    let mut judged = Judged {
        seen: Vec::new(),
        new_bytes: 0,
        duplicates: 0,
    };
    let mut at = 0;
    while at < records.len() {
        let index = judged.seen.len();
        let header = record::peek_header(&records[at..]).map_err(|_| AppendError::Invalid {
            index,
            field: "event",
            reason: "malformed framing".into(),
        })?;
        let Some(stamp) = header.producer else {
            return Err(AppendError::Invalid {
                index,
                field: "event",
                reason: "framed without its producer stamp".into(),
            });
        };
        match producers.check(stamp) {
            Seen::Stale { last } => {
                return Err(AppendError::StaleSequence {
                    producer_id: stamp.producer_id,
                    sequence: stamp.sequence,
                    shard,
                    last,
                })
            }
            seen @ Seen::Duplicate { .. } => {
                judged.duplicates += 1;
                judged.seen.push((stamp, seen));
            }
            seen => {
                judged.new_bytes += header.len;
                judged.seen.push((stamp, seen));
            }
        }
        at += header.len;
    }
    Ok(judged)
}

async fn flusher<S: Storage>(mut log: Log<S>, core: Rc<Core>) {
    let Core {
        config,
        shared,
        state,
        wake_flusher: wake,
        ..
    } = &*core;
    // Most bytes one round writes before syncing (the log splits further if needed).
    let round_bytes = config.log.max_unsynced_bytes as usize;
    loop {
        let listener = wake.listen();
        let (plan, retention) = {
            let mut st = state.borrow_mut();
            let pending = st.ring.unflushed_bytes();
            let want =
                pending > 0 && (st.flush_wanted || st.closing || pending >= config.window_bytes);
            if st.latched.is_some() || (!want && !st.retention_due) {
                if st.closing {
                    break;
                }
                drop(st);
                listener.await;
                continue;
            }
            st.flush_wanted = false;
            let retention = std::mem::take(&mut st.retention_due);
            (
                if want {
                    st.ring.flush_plan(shared.id, round_bytes)
                } else {
                    Vec::new()
                },
                retention,
            )
        };
        if !plan.is_empty() {
            let images: Vec<ChunkImage<'_>> = plan
                .iter()
                .map(|r| ChunkImage {
                    description: r.description,
                    body: r.body(),
                })
                .collect();
            let started = Instant::now();
            let result = match log.append_chunks(&images).await {
                Ok(()) => {
                    let syncing = Instant::now();
                    let synced = log.sync().await;
                    let fsync = syncing.elapsed();
                    shared.stats.fsync_latency.record(fsync);
                    if fsync >= SLOW_FSYNC {
                        warn_slow_fsync(shared.id, fsync);
                    }
                    synced
                }
                Err(e) => Err(e),
            };
            let stats = &shared.stats;
            stats.flush_latency.record(started.elapsed());
            stats.rounds.fetch_add(1, Ordering::Relaxed);
            stats.bytes.fetch_add(
                plan.iter().map(|r| (r.to - r.from) as u64).sum(),
                Ordering::Relaxed,
            );
            stats
                .busy_ns
                .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            drop(images);
            let mut st = state.borrow_mut();
            match result {
                Ok(flushed_next) => {
                    st.ring.mark_flushed(&plan);
                    let w = &shared.watermarks;
                    // Index, then flushed, then evicted: a reader that finds an
                    // offset gone from the ring must find it covered by the
                    // flushed watermark, and its chunk in the index.
                    shared.publish_index(&log);
                    w.publish_flushed(flushed_next, log.last_ts().unwrap_or(0));
                    let evicted = st.ring.evict();
                    w.publish_evicted(evicted);
                    shared.publish_memory(&st.ring);
                    while st.waiters.front().is_some_and(|f| f.needed <= flushed_next) {
                        st.waiters.pop_front().expect("checked").reply.send_ok();
                    }
                }
                Err(e) => {
                    shared.stats.io_errors.fetch_add(1, Ordering::Relaxed);
                    let cause = e.to_string();
                    tracing::error!(
                        shard = shared.id,
                        %cause,
                        "shard {} stopped on an I/O error: it acknowledges nothing more until the \
                         server restarts; check the disk (dmesg, SMART) before restarting",
                        shared.id
                    );
                    *shared.latched.lock().unwrap_or_else(|p| p.into_inner()) = Some(cause.clone());
                    st.latched = Some(cause.clone());
                    for waiter in st.waiters.drain(..) {
                        waiter.reply.send_err(AppendError::Latched {
                            shard: shared.id,
                            cause: cause.clone(),
                        });
                    }
                }
            }
            drop(st);
            shared.flushed.notify(usize::MAX);
        }
        if retention {
            let now = crate::clock::now_ns();
            if let Ok(outcome) = log.apply_retention(config.retention, now).await {
                let next = shared.watermarks.committed_next();
                shared
                    .watermarks
                    .publish_retained(outcome.retained.map_or(next, |r| r.0));
                shared.publish_index(&log);
            }
            shared
                .stats
                .retention_passes
                .fetch_add(1, Ordering::Relaxed);
        }
    }
    let latched = state.borrow().latched.is_some();
    if !latched {
        let _ = log.close().await;
    }
    // Anyone still waiting is told the shard is gone.
    let waiters: Vec<_> = state.borrow_mut().waiters.drain(..).collect();
    for waiter in waiters {
        waiter.reply.send_err(AppendError::ShutDown);
    }
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
async fn ticker(core: Rc<Core>) {
    let Core {
        config,
        shared,
        state,
        clock,
        wake_flusher,
        wake_ticker: wake,
    } = &*core;
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
    loop {
        // Listen before looking, so a wake-up between the look and the wait is kept.
        let local = wake.listen();
        let remote = shared.claim_requested.listen();
        let now = Instant::now();
        if state.borrow().ring.unflushed_bytes() == 0 {
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
        let deadline = [flush_due, retains.then_some(next_retention), claim_due]
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
        let mut st = state.borrow_mut();
        let mut wake_flush = false;
        if flush_due.is_some_and(|due| due <= now) {
            flush_due = None;
            if st.ring.unflushed_bytes() > 0 {
                st.flush_wanted = true;
                wake_flush = true;
            }
        }
        // Runs between commands on this core, so no stamp is in progress: every
        // stamp at or below the claim is already visible, and later ones are
        // fenced above it.
        let wanted = shared.watermarks.claim_wanted();
        let claimed = wanted != 0 && claim_retry.is_none_or(|at| at <= now);
        if claimed {
            // A wanted stamp that some shard already made visible is claimed
            // at once, whatever the wall clock says (a clock stepped back must
            // not stall merges for the length of the step); beyond that (an
            // `until_ns` ahead of every stamp), the clock has to get there.
            let reached = wanted.min(shared.stamped_high.load(Ordering::Acquire));
            let ts = clock.now_ns().max(st.last_ts).max(reached);
            shared.watermarks.claim(ts);
            if ts >= wanted {
                shared.watermarks.claim_answered(wanted);
                claim_retry = None;
            } else {
                let behind = Duration::from_nanos((wanted - ts) as u64);
                claim_retry = Some(now + behind.clamp(MIN_CLAIM_WAIT, MAX_CLAIM_WAIT));
            }
        }
        if retains && next_retention <= now {
            next_retention = now + config.retention_interval;
            st.retention_due = true;
            wake_flush = true;
        }
        drop(st);
        if claimed {
            // Merges waiting on this shard's claim wait on `appended`.
            shared.appended.notify(usize::MAX);
        }
        if wake_flush {
            wake_flusher.notify(usize::MAX);
        }
    }
}
