//! The engine: shards on their own glommio executors, reached from any thread.
//!
//! `Engine::open` checks `DATA/ringfeed.meta` (format version and shard
//! count), starts one executor per shard, and waits until every shard has
//! recovered its log. Appends are validated as a whole, routed to shards by a
//! hash of their directory (so one directory's events keep their order), sent
//! over flume channels, and answered on one-shot replies, so callers can be
//! plain threads or tokio tasks.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use glommio::ExecutorJoinHandle;
use thiserror::Error;

use crate::clock::{Clock, SystemClock};
use crate::event::{
    validate_batch, AppendError, Durability, Limits, NewEvent, Position, Producer, Stored,
};
use crate::executor;
use crate::log::{LogConfig, RecoveryReport};
use crate::record::ProducerStamp;
use crate::retention::RetentionPolicy;
use crate::segment::FORMAT_VERSION;
use crate::shard::{self, AppendCommand, Command, Relay, RelayThread, ShardConfig, ShardShared};
use crate::storage::{DmaStorage, Storage};
use crate::subscribe::{SubscribeError, SubscribeRequest, Subscription};
use crate::RecoveryError;

/// Everything the engine needs to open. `Default` gives the production defaults.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    /// This node's id in a cluster (at least 1). `Engine::open` records it in
    /// the data dir's meta the first time and refuses a data dir recorded
    /// under another id (its events belong to that node's sources). `None`
    /// takes whatever the meta records (nothing, for a single node).
    pub node_id: Option<u32>,
    pub shards: u32,
    /// Pin shard `i` to `cpus[i % cpus.len()]`; `None` leaves shards unbound.
    pub cpus: Option<Vec<usize>>,
    /// Capacity of one in-memory window (and the largest chunk a window becomes).
    pub window_bytes: usize,
    /// Window memory per shard; flushed windows beyond it are evicted.
    pub ring_bytes: usize,
    /// Record bytes per shard not yet durable; appends wait past it.
    pub max_unflushed_bytes: usize,
    /// Record bytes of appends queued for one shard and not yet taken by it;
    /// past it an append is refused at once with `QueueFull` (nothing of it
    /// appended). A queue holding nothing takes any one batch.
    pub max_queued_bytes: usize,
    /// Longest a memory-acknowledged event stays unflushed while the shard is idle.
    pub flush_interval: Duration,
    /// How long an append waits on a full flush queue before failing with
    /// `ResourceExhausted`, counted from its arrival at the engine (time
    /// queued behind other commands of its shard counts).
    pub append_timeout: Duration,
    pub segment_bytes: u64,
    pub retention: RetentionPolicy,
    pub retention_interval: Duration,
    pub limits: Limits,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            data_dir: PathBuf::from("./ringfeed-data"),
            node_id: None,
            shards: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            cpus: None,
            window_bytes: 1 << 20,
            ring_bytes: 64 << 20,
            max_unflushed_bytes: 16 << 20,
            max_queued_bytes: 64 << 20,
            flush_interval: Duration::from_millis(10),
            append_timeout: Duration::from_secs(5),
            segment_bytes: 256 << 20,
            retention: RetentionPolicy::default(),
            retention_interval: Duration::from_secs(60),
            limits: Limits::default(),
        }
    }
}

/// One shard's state, as [`Engine::status`] reports it.
#[derive(Clone, Debug)]
pub struct ShardStatus {
    pub shard: u32,
    pub watermarks: crate::watermark::WatermarkSnapshot,
    /// Window memory held in the ring.
    pub ring_bytes: usize,
    /// Record bytes not yet durable.
    pub unflushed_bytes: usize,
    /// Record bytes of appends queued for the shard and not yet taken.
    pub queued_bytes: usize,
    /// Segment files in the shard's directory.
    pub segments: usize,
    /// Why the shard stopped acknowledging, if it did (an I/O failure).
    pub latched: Option<String>,
    /// Why the shard refuses appends for want of disk space, while it does.
    pub no_space: Option<String>,
}

/// Why the engine could not open.
#[derive(Debug, Error)]
pub enum EngineError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(
        "{path} was created with {found} shard(s) but {configured} are configured; \
         events are routed by shard, so a data dir keeps its shard count (use --shards {found}, or a new data dir)"
    )]
    ShardCountMismatch {
        path: PathBuf,
        found: u32,
        configured: u32,
    },
    #[error(
        "{path} belongs to node {found} but this node is configured as node {configured}; \
         a data dir holds one node's events (use --node-id {found}, or a new data dir)"
    )]
    NodeIdMismatch {
        path: PathBuf,
        found: u32,
        configured: u32,
    },
    #[error("{path} is not a ringfeed meta file of a known format: {reason}")]
    BadMeta { path: PathBuf, reason: String },
    #[error("shard {shard}: {source}")]
    Recovery {
        shard: u32,
        #[source]
        source: RecoveryError,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("shard {shard} executor: {reason}")]
    Executor { shard: u32, reason: String },
    /// Another process holds the data dir (see [`crate::lock`]).
    #[error(transparent)]
    Locked(#[from] crate::lock::LockError),
}

struct ShardHandle {
    commands: Option<flume::Sender<Command>>,
    shared: Arc<ShardShared>,
    thread: Option<ExecutorJoinHandle<()>>,
}

/// A running engine. Dropping it shuts the shards down cleanly (flush, sync, close).
pub struct Engine {
    /// This node's id, if it has one (see [`EngineConfig::node_id`]).
    node_id: Option<u32>,
    shards: Vec<ShardHandle>,
    /// Wakes subscribers for the shards; stopped after them.
    relay: Option<RelayThread>,
    limits: Limits,
    max_queued_bytes: usize,
    reports: Vec<RecoveryReport>,
    sequences: std::sync::Mutex<Sequences>,
    /// The data dir's lock (`Engine::open`), dropped after the shards stop.
    lock: Option<crate::lock::DataDirLock>,
    /// The data dir's feed id (see `feed_id`).
    feed_id: u64,
}

/// Each idempotent producer's next sequence across shards: a batch starting
/// above it is a gap and refused. Shards decide new/duplicate per event
/// (`crate::producer`); this only sees the batch's first number, so it is
/// advanced when a batch is sent, and a batch that then fails on a shard is
/// retried below it. Rebuilt at open from the shards' tables; bounded like
/// them (the least recently used producer is forgotten, and a forgotten or
/// unknown producer may start at any sequence).
struct Sequences {
    next: lru::LruCache<u64, u64>,
}

impl Sequences {
    fn new(capacity: usize) -> Sequences {
        let capacity = std::num::NonZeroUsize::new(capacity).unwrap_or(std::num::NonZeroUsize::MIN);
        Sequences {
            next: lru::LruCache::new(capacity),
        }
    }

    /// Admits a batch of `count` events, or says where the producer must resume.
    fn admit(&mut self, producer: Producer, count: u64) -> Result<(), AppendError> {
        let end = producer.first_sequence + count;
        if let Some(next) = self.next.get_mut(&producer.id) {
            if producer.first_sequence > *next {
                return Err(AppendError::SequenceGap {
                    producer_id: producer.id,
                    expected: *next,
                    first: producer.first_sequence,
                });
            }
            *next = (*next).max(end);
            return Ok(());
        }
        self.insert(producer.id, end);
        Ok(())
    }

    fn insert(&mut self, id: u64, next: u64) {
        let entry = self.next.get_or_insert_mut(id, || 0);
        *entry = (*entry).max(next);
    }
}

const META_FILE: &str = "ringfeed.meta";

impl Engine {
    /// Opens the data dir with O_DIRECT storage, one `shard-NNN` directory per shard.
    pub fn open(config: EngineConfig) -> Result<Engine, EngineError> {
        validate(&config)?;
        std::fs::create_dir_all(&config.data_dir).map_err(|source| EngineError::Io {
            what: format!("creating {}", config.data_dir.display()),
            source,
        })?;
        // Before anything in the data dir is read: one process per data dir.
        let lock = crate::lock::DataDirLock::take(&config.data_dir)?;
        let Meta { node_id, feed_id } =
            check_meta(&config.data_dir, config.shards, config.node_id)?;
        // Create the shard directories here, where a failure can be reported,
        // and make their names durable before anything is acknowledged in them.
        for shard in 0..config.shards {
            let dir = shard_dir(&config.data_dir, shard);
            std::fs::create_dir_all(&dir).map_err(|source| EngineError::Io {
                what: format!("creating {}", dir.display()),
                source,
            })?;
        }
        let parent = config
            .data_dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty());
        for dir in parent.into_iter().chain([config.data_dir.as_path()]) {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|source| EngineError::Io {
                    what: format!("syncing the directory {}", dir.display()),
                    source,
                })?;
        }
        let dir = config.data_dir.clone();
        let config = EngineConfig { node_id, ..config };
        let mut engine = Engine::open_with(config, Arc::new(SystemClock), move |shard| {
            DmaStorage::open(shard_dir(&dir, shard))
                .expect("the shard directories were just created")
        })?;
        engine.lock = Some(lock);
        engine.feed_id = feed_id;
        Ok(engine)
    }

    /// Opens with a storage per shard made by `storage` (on the shard's thread)
    /// and a given clock. No meta file is involved: the node id is the
    /// configured one.
    pub fn open_with<S, F>(
        config: EngineConfig,
        clock: Arc<dyn Clock>,
        storage: F,
    ) -> Result<Engine, EngineError>
    where
        S: Storage + 'static,
        F: Fn(u32) -> S + Send + Clone + 'static,
    {
        validate(&config)?;
        let mut shards = Vec::new();
        let mut readies = Vec::new();
        let stamped_high = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let relay = Arc::new(Relay::default());
        for id in 0..config.shards {
            let shared = Arc::new(ShardShared::new(
                id,
                stamped_high.clone(),
                Some(relay.clone()),
            ));
            let (tx, rx) = flume::unbounded();
            let (ready_tx, ready_rx) = flume::bounded(1);
            let shard_config = shard_config(&config, id);
            let placement = executor::placement(config.cpus.as_deref(), id);
            let (make, shared2, clock2) = (storage.clone(), shared.clone(), clock.clone());
            let thread = executor::spawn_shard(id, placement, move || async move {
                shard::run(make(id), shard_config, shared2, clock2, rx, ready_tx).await;
            })
            .map_err(|reason| EngineError::Executor { shard: id, reason })?;
            shards.push(ShardHandle {
                commands: Some(tx),
                shared,
                thread: Some(thread),
            });
            readies.push(ready_rx);
        }
        let readers = shards.iter().map(|s| s.shared.clone()).collect();
        let relay = RelayThread::start(relay, readers).map_err(|e| EngineError::Executor {
            shard: 0,
            reason: format!("starting the subscriber wake relay thread: {e}"),
        })?;
        let mut engine = Engine {
            node_id: config.node_id,
            relay: Some(relay),
            shards,
            limits: config.limits,
            max_queued_bytes: config.max_queued_bytes,
            reports: Vec::new(),
            sequences: std::sync::Mutex::new(Sequences::new(
                crate::producer::MAX_PRODUCERS * config.shards as usize,
            )),
            lock: None,
            feed_id: 0,
        };
        for (id, ready) in readies.into_iter().enumerate() {
            match ready.recv() {
                Ok(Ok((report, heads))) => {
                    engine.reports.push(report);
                    let mut sequences = engine.sequences.lock().expect("not poisoned");
                    for (producer, next) in heads {
                        sequences.insert(producer, next);
                    }
                }
                Ok(Err(source)) => {
                    return Err(EngineError::Recovery {
                        shard: id as u32,
                        source,
                    })
                }
                Err(_) => {
                    return Err(EngineError::Executor {
                        shard: id as u32,
                        reason: "stopped while opening".into(),
                    })
                }
            }
        }
        Ok(engine)
    }

    pub fn shard_count(&self) -> u32 {
        self.shards.len() as u32
    }

    /// This node's id: configured, or recorded in the data dir's meta.
    pub fn node_id(&self) -> Option<u32> {
        self.node_id
    }

    /// The id the data dir drew when it was made (recorded in its meta and
    /// carried in every cursor, so a cursor of another data dir is refused);
    /// 0 for an engine opened without a data dir (`open_with`).
    pub fn feed_id(&self) -> u64 {
        self.feed_id
    }

    /// What recovery found in each shard's log at open.
    pub fn recovery_reports(&self) -> &[RecoveryReport] {
        &self.reports
    }

    /// A shard's watermarks, ring view and wake-up events.
    pub fn shard(&self, id: u32) -> &Arc<ShardShared> {
        &self.shards[id as usize].shared
    }

    /// What each shard holds and how far it is, now: for status pages and
    /// tools, so they need not know the shard's files or their names.
    pub fn status(&self) -> Vec<ShardStatus> {
        self.shards
            .iter()
            .map(|s| {
                let shard = &s.shared;
                ShardStatus {
                    shard: shard.id,
                    watermarks: shard.watermarks.snapshot(),
                    ring_bytes: shard.ring_bytes(),
                    unflushed_bytes: shard.unflushed_bytes(),
                    queued_bytes: shard.queued_bytes(),
                    segments: shard.files().list().map_or(0, |names| {
                        names
                            .iter()
                            .filter(|n| crate::segment::parse_segment_name(n).is_some())
                            .count()
                    }),
                    latched: shard.latched(),
                    no_space: shard.no_space(),
                }
            })
            .collect()
    }

    /// Opens a subscription over every shard (see [`Subscription`]).
    pub fn subscribe(&self, request: SubscribeRequest) -> Result<Subscription, SubscribeError> {
        Subscription::open(&self.shards(), self.feed_id, request)
    }

    /// What readers see of every shard, in id order.
    pub fn shards(&self) -> Vec<Arc<ShardShared>> {
        self.shards.iter().map(|s| s.shared.clone()).collect()
    }

    /// The shard a directory's events go to. Stable across restarts.
    pub fn shard_for(&self, directory: &str) -> u32 {
        crc32c::crc32c(directory.as_bytes()) % self.shard_count()
    }

    /// Appends a batch. All of it is validated first; an invalid batch appends
    /// nothing. Returns each event's position, in the batch's order.
    ///
    /// A batch spanning several shards is appended per shard: if one shard
    /// fails (back-pressure, I/O failure), events routed to others may still
    /// have been appended.
    ///
    /// Dropping the returned future (a cancelled call, a passed deadline)
    /// before a shard takes its part means that part is not applied: a shard
    /// checks that its caller still waits in the same step that stages the
    /// events (`ShardStats::abandoned` counts the ones dropped).
    pub async fn append(
        &self,
        events: Vec<NewEvent>,
        durability: Durability,
    ) -> Result<Vec<Position>, AppendError> {
        let stored = self.append_idempotent(events, durability, None).await?;
        Ok(stored.into_iter().map(|s| s.position).collect())
    }

    /// [`Engine::append`] for an idempotent producer (`None`: an ordinary
    /// append). Events stored before by the same producer and sequence are
    /// not appended again; they come back with their original position and
    /// `duplicate` set. A batch starting past the producer's next sequence
    /// is refused whole (`SequenceGap`); a shard holding a later sequence of
    /// the producer than one it is sent and does not remember refuses its
    /// part (`StaleSequence`).
    pub async fn append_idempotent(
        &self,
        events: Vec<NewEvent>,
        durability: Durability,
        producer: Option<Producer>,
    ) -> Result<Vec<Stored>, AppendError> {
        let (stored, failure) = self.append_partial(events, durability, producer).await?;
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(stored
            .into_iter()
            .map(|p| p.expect("every event was answered"))
            .collect())
    }

    /// [`Engine::append_idempotent`], saying what was stored when a shard
    /// fails: each event's outcome if its shard appended (and, for
    /// `Durable`, acknowledged) it, and the first shard's error. `Err` means
    /// nothing was sent to any shard (the batch was refused whole).
    pub async fn append_partial(
        &self,
        events: Vec<NewEvent>,
        durability: Durability,
        producer: Option<Producer>,
    ) -> Result<(Vec<Option<Stored>>, Option<AppendError>), AppendError> {
        let arrived = std::time::Instant::now();
        validate_batch(&events, &self.limits)?;
        let count = events.len();
        if let Some(p) = producer {
            if p.id == 0 {
                return Err(AppendError::Invalid {
                    index: 0,
                    field: "producer_id",
                    reason: "is 0, which means \"no producer\"".into(),
                });
            }
            if p.first_sequence.checked_add(count as u64).is_none() {
                return Err(AppendError::Invalid {
                    index: 0,
                    field: "first_sequence",
                    reason: format!("{} leaves no room for {count} events", p.first_sequence),
                });
            }
        }
        let stamp = |index: usize| {
            producer.map(|p| ProducerStamp {
                producer_id: p.id,
                sequence: p.first_sequence + index as u64,
            })
        };
        let stamp_len = if producer.is_some() {
            crate::record::PRODUCER_STAMP_LEN
        } else {
            0
        };
        // Route, then frame each shard's records here, on the caller's thread,
        // so the shard's core only copies and stamps them.
        let routes: Vec<usize> = events
            .iter()
            .map(|e| self.shard_for(&e.directory) as usize)
            .collect();
        // Sized up front: a large batch framed into a growing Vec left a trail
        // of freed half-size buffers (fragmentation that kept peak RSS high
        // under an append flood).
        let mut sizes = vec![(0usize, 0usize); self.shards.len()];
        for (event, &shard) in events.iter().zip(&routes) {
            sizes[shard].0 += 1;
            sizes[shard].1 += event.record_len() + stamp_len;
        }
        let mut parts: Vec<(Vec<usize>, Vec<u8>)> = sizes
            .iter()
            .map(|&(count, bytes)| (Vec::with_capacity(count), Vec::with_capacity(bytes)))
            .collect();
        for (index, (event, &shard)) in events.iter().zip(&routes).enumerate() {
            let (indexes, records) = &mut parts[shard];
            let mut record = event.record(0, 0);
            record.producer = stamp(index);
            // The shard stamps it, and checksums it then.
            record.frame_unstamped(records)?;
            indexes.push(index);
        }
        drop(events);
        // Reserve queue room on every shard first: a batch is refused whole
        // or sent whole, and the commands queued for a shard stay bounded.
        for (shard, (indexes, records)) in parts.iter().enumerate() {
            if indexes.is_empty() {
                continue;
            }
            let reserved = self.shards[shard]
                .shared
                .reserve_queue(records.len(), self.max_queued_bytes);
            if let Err(e) = reserved {
                self.release_queued(parts[..shard].iter().map(|(_, r)| r.len()).enumerate());
                return Err(e);
            }
        }
        // An idempotent producer's batch is admitted (its first sequence
        // checked against the producer's next) and sent to every shard under
        // one lock, so two batches of one producer reach every shard in the
        // order they were admitted.
        let (pending, mut failure) = match producer {
            Some(p) => {
                let mut sequences = self.sequences.lock().expect("not poisoned");
                if let Err(e) = sequences.admit(p, count as u64) {
                    drop(sequences);
                    self.release_queued(parts.iter().map(|(_, r)| r.len()).enumerate());
                    return Err(e);
                }
                self.send_parts(parts, durability, arrived, true)?
            }
            None => self.send_parts(parts, durability, arrived, false)?,
        };
        let mut positions = vec![None; count];
        for (indexes, answer) in pending {
            match answer
                .recv_async()
                .await
                .unwrap_or(Err(AppendError::ShutDown))
            {
                Ok(got) => {
                    for (index, position) in indexes.into_iter().zip(got) {
                        positions[index] = Some(position);
                    }
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        Ok((positions, failure))
    }

    /// Sends each shard its part. `Err` if nothing could be sent; otherwise
    /// the parts sent (their batch indexes and where the answer comes) and
    /// the error that stopped the rest, if any. Never waits.
    #[allow(clippy::type_complexity)]
    fn send_parts(
        &self,
        parts: Vec<(Vec<usize>, Vec<u8>)>,
        durability: Durability,
        arrived: std::time::Instant,
        idempotent: bool,
    ) -> Result<
        (
            Vec<(
                Vec<usize>,
                flume::Receiver<Result<Vec<Stored>, AppendError>>,
            )>,
            Option<AppendError>,
        ),
        AppendError,
    > {
        let mut pending = Vec::new();
        let mut failure = None;
        let mut parts = parts.into_iter().enumerate();
        for (shard, (indexes, records)) in parts.by_ref() {
            if indexes.is_empty() {
                continue;
            }
            let (reply, answer) = flume::bounded(1);
            let len = records.len();
            let sent = self.send(
                shard,
                Command::Append(AppendCommand {
                    records,
                    count: indexes.len(),
                    durability,
                    arrived,
                    idempotent,
                    reply,
                }),
            );
            if let Err(e) = sent {
                // Not sent: give back its room (the shard is gone anyway).
                self.shards[shard].shared.release_queue(len);
                if pending.is_empty() {
                    self.release_queued(parts.map(|(s, (_, r))| (s, r.len())));
                    return Err(e); // nothing was sent anywhere
                }
                failure = Some(e);
                break;
            }
            pending.push((indexes, answer));
        }
        // Parts never sent (the engine shut down meanwhile) give back their room.
        self.release_queued(parts.map(|(s, (_, r))| (s, r.len())));
        Ok((pending, failure))
    }

    /// Gives back queue room reserved for parts that were never sent, as
    /// `(shard, record bytes)` (an empty part reserved nothing: 0 bytes).
    fn release_queued(&self, parts: impl Iterator<Item = (usize, usize)>) {
        for (shard, bytes) in parts {
            self.shards[shard].shared.release_queue(bytes);
        }
    }

    /// [`Engine::append`] for callers that are not async.
    pub fn append_blocking(
        &self,
        events: Vec<NewEvent>,
        durability: Durability,
    ) -> Result<Vec<Position>, AppendError> {
        futures_lite::future::block_on(self.append(events, durability))
    }

    /// Makes everything committed so far durable, on every shard.
    pub async fn flush(&self) -> Result<(), AppendError> {
        let mut answers = Vec::new();
        for shard in 0..self.shards.len() {
            let (reply, answer) = flume::bounded(1);
            self.send(shard, Command::Flush { reply })?;
            answers.push(answer);
        }
        for answer in answers {
            answer
                .recv_async()
                .await
                .map_err(|_| AppendError::ShutDown)??;
        }
        Ok(())
    }

    /// Runs `start` on shard `shard`'s thread, inside its glommio executor,
    /// between two commands: it may `glommio::spawn_local` tasks, which run
    /// beside the shard's own until the shard stops (their futures are then
    /// dropped). A task there reaches its own shard without crossing threads.
    /// `start` must not block, and nothing running there may drop the last
    /// `Arc` of this engine (that would join the shard's thread from itself).
    /// `ShutDown` if the shard has stopped; panics if there is no such shard.
    pub fn run_on_shard(
        &self,
        shard: u32,
        start: impl FnOnce() + Send + 'static,
    ) -> Result<(), AppendError> {
        assert!(shard < self.shard_count(), "no shard {shard}");
        self.send(shard as usize, Command::Run(Box::new(start)))
    }

    fn send(&self, shard: usize, command: Command) -> Result<(), AppendError> {
        let tx = self.shards[shard]
            .commands
            .as_ref()
            .ok_or(AppendError::ShutDown)?;
        tx.send(command).map_err(|_| AppendError::ShutDown)
    }

    /// Stops every shard after it has flushed, synced and closed its log.
    pub fn shutdown(mut self) -> Result<(), EngineError> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), EngineError> {
        for shard in &mut self.shards {
            shard.commands.take();
        }
        let mut result = Ok(());
        for (id, shard) in self.shards.iter_mut().enumerate() {
            if let Some(thread) = shard.thread.take() {
                if let Err(e) = thread.join() {
                    result = Err(EngineError::Executor {
                        shard: id as u32,
                        reason: e.to_string(),
                    });
                }
            }
        }
        self.relay.take();
        result
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// `DATA/shard-NNN`: where a shard's segments live.
pub fn shard_dir(data_dir: &Path, shard: u32) -> PathBuf {
    data_dir.join(format!("shard-{shard:03}"))
}

fn shard_config(config: &EngineConfig, shard: u32) -> ShardConfig {
    ShardConfig {
        log: LogConfig {
            shard,
            segment_bytes: config.segment_bytes,
            // A flush round writes at most this much before syncing.
            max_unsynced_bytes: (config.max_unflushed_bytes as u64)
                .max(config.window_bytes as u64 * 4)
                .max(4 << 20),
        },
        window_bytes: config.window_bytes,
        ring_bytes: config.ring_bytes,
        max_unflushed_bytes: config.max_unflushed_bytes,
        flush_interval: config.flush_interval,
        append_timeout: config.append_timeout,
        retention: config.retention,
        retention_interval: config.retention_interval,
    }
}

fn validate(config: &EngineConfig) -> Result<(), EngineError> {
    let bad = |m: String| Err(EngineError::Config(m));
    if config.shards == 0 || config.shards > 1024 {
        return bad(format!("shards must be 1..=1024, not {}", config.shards));
    }
    if config.window_bytes < 4096 || config.window_bytes > 64 << 20 {
        return bad(format!(
            "window_bytes must be 4 KiB..=64 MiB, not {}",
            config.window_bytes
        ));
    }
    if config.limits.max_event_bytes > config.window_bytes / 4 {
        return bad(format!(
            "max_event_bytes ({}) must be at most a quarter of window_bytes ({}), so sealed windows stay at least 3/4 full",
            config.limits.max_event_bytes, config.window_bytes
        ));
    }
    // Unflushed windows are at least 3/4 full, so they occupy at most 4/3 of the
    // unflushed bytes, plus the active window and one being opened.
    let needed = config.max_unflushed_bytes / 3 * 4 + 2 * config.window_bytes;
    if config.ring_bytes < needed {
        return bad(format!(
            "ring_bytes ({}) must be at least 4/3 of max_unflushed_bytes plus two windows ({needed}), \
             or unflushed windows could not all stay in the ring",
            config.ring_bytes
        ));
    }
    if config.max_unflushed_bytes < config.limits.max_event_bytes {
        return bad("max_unflushed_bytes must hold at least one largest event".into());
    }
    if config.segment_bytes < (config.window_bytes as u64) * 4 + 8192 {
        return bad(format!(
            "segment_bytes ({}) must hold at least four windows",
            config.segment_bytes
        ));
    }
    if config.flush_interval.is_zero() {
        return bad("flush_interval must be positive".into());
    }
    if config.node_id == Some(0) {
        return bad("node_id must be at least 1 (0 is no node id)".into());
    }
    Ok(())
}

/// The lines of `DATA/ringfeed.meta` as read, before they are checked.
#[derive(Debug, Default, PartialEq, Eq)]
struct MetaLines {
    version: Option<u16>,
    shards: Option<u32>,
    node: Option<u32>,
    feed: Option<u64>,
}

impl MetaLines {
    /// Reads `key=value` lines; unknown lines are skipped. A `node=` or
    /// `feed=` line that is not a number (a nonzero hex one for the feed)
    /// is refused, naming the line.
    fn parse(text: &str) -> Result<MetaLines, &'static str> {
        let mut lines = MetaLines::default();
        for line in text.lines() {
            match line.split_once('=') {
                Some(("format", v)) => lines.version = v.trim().parse::<u16>().ok(),
                Some(("shards", v)) => lines.shards = v.trim().parse::<u32>().ok(),
                Some(("node", v)) => {
                    lines.node = Some(v.trim().parse::<u32>().map_err(|_| "bad node= line")?)
                }
                Some(("feed", v)) => {
                    lines.feed = Some(
                        u64::from_str_radix(v.trim(), 16)
                            .ok()
                            .filter(|&id| id != 0)
                            .ok_or("bad feed= line")?,
                    )
                }
                _ => {}
            }
        }
        Ok(lines)
    }
}

/// What `DATA/ringfeed.meta` says of the data dir beyond its format.
struct Meta {
    node_id: Option<u32>,
    feed_id: u64,
}

/// Creates `DATA/ringfeed.meta` on first open; afterwards refuses a different
/// shard count, format version or node id. Returns the node id (the
/// configured one, else the recorded one) and the feed id. A meta without a
/// node id (a data dir made before node ids, or by a node without one) takes
/// the configured id, once; a meta without a feed id (made before feed ids)
/// draws one, once.
fn check_meta(data_dir: &Path, shards: u32, node_id: Option<u32>) -> Result<Meta, EngineError> {
    let path = data_dir.join(META_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let bad = |reason: &str| EngineError::BadMeta {
                path: path.clone(),
                reason: reason.into(),
            };
            let MetaLines {
                version,
                shards: found,
                node: recorded,
                feed,
            } = MetaLines::parse(&text).map_err(&bad)?;
            let version = version.ok_or_else(|| bad("no format= line"))?;
            if version != FORMAT_VERSION {
                return Err(bad(&format!(
                    "format {version}, this build reads format {FORMAT_VERSION}"
                )));
            }
            let found = found.ok_or_else(|| bad("no shards= line"))?;
            if found != shards {
                return Err(EngineError::ShardCountMismatch {
                    path,
                    found,
                    configured: shards,
                });
            }
            let node_id = match (recorded, node_id) {
                (Some(found), Some(configured)) if found != configured => {
                    return Err(EngineError::NodeIdMismatch {
                        path,
                        found,
                        configured,
                    })
                }
                (recorded, configured) => configured.or(recorded),
            };
            let feed_id = match feed {
                Some(id) => id,
                None => new_feed_id(&path)?,
            };
            if feed.is_none() || node_id != recorded {
                write_meta(data_dir, shards, node_id, feed_id)?;
            }
            Ok(Meta { node_id, feed_id })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let feed_id = new_feed_id(&path)?;
            write_meta(data_dir, shards, node_id, feed_id)?;
            Ok(Meta { node_id, feed_id })
        }
        Err(source) => Err(EngineError::Io {
            what: format!("reading {}", path.display()),
            source,
        }),
    }
}

/// A new data dir's feed id: 64 random bits from the kernel, never 0 (0 is
/// "no id" in a cursor).
fn new_feed_id(meta: &Path) -> Result<u64, EngineError> {
    let mut bytes = [0u8; 8];
    loop {
        use std::io::Read;
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .map_err(|source| EngineError::Io {
                what: format!("drawing a feed id for {}", meta.display()),
                source,
            })?;
        let id = u64::from_le_bytes(bytes);
        if id != 0 {
            return Ok(id);
        }
    }
}

/// Writes `DATA/ringfeed.meta` durably (a synced temporary file renamed over
/// it, then the directory synced).
fn write_meta(
    data_dir: &Path,
    shards: u32,
    node_id: Option<u32>,
    feed_id: u64,
) -> Result<(), EngineError> {
    let path = data_dir.join(META_FILE);
    let io = |what: &str| {
        let what = format!("{what} {}", path.display());
        move |source| EngineError::Io { what, source }
    };
    let temp = data_dir.join(format!("{META_FILE}.tmp"));
    let mut text = format!(
        "# ringfeed data dir; do not edit\nformat={FORMAT_VERSION}\nshards={shards}\nfeed={}\n",
        ringfeed_core::FeedId(feed_id)
    );
    if let Some(node) = node_id {
        text.push_str(&format!("node={node}\n"));
    }
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&temp).map_err(io("writing"))?;
        f.write_all(text.as_bytes()).map_err(io("writing"))?;
        f.sync_all().map_err(io("syncing"))?;
    }
    std::fs::rename(&temp, &path).map_err(io("renaming"))?;
    std::fs::File::open(data_dir)
        .and_then(|d| d.sync_all())
        .map_err(io("syncing the directory of"))?;
    Ok(())
}

/// Edits of valid encodings shared by the fuzzing tests.
#[cfg(test)]
use ringfeed_testkit::mutation;

#[cfg(test)]
mod tests {
    proptest::proptest! {
        /// The meta file is read from disk (issue 36): a valid one with
        /// bytes set, flipped, inserted or cut, and arbitrary text, parse to
        /// lines or a refusal, never a panic.
        #[test]
        fn any_meta_text_parses_or_is_refused(
            edits in super::mutation::edits(),
            text in ".{0,200}",
        ) {
            let mut bytes = b"# ringfeed data dir; do not edit\nformat=1\nshards=2\nfeed=00ab12cd34ef5678\nnode=3\n".to_vec();
            super::mutation::apply(&mut bytes, &edits);
            for text in [String::from_utf8_lossy(&bytes).into_owned(), text] {
                let _ = super::MetaLines::parse(&text);
            }
        }
    }

    #[test]
    fn the_meta_lines_are_read() {
        let lines =
            super::MetaLines::parse("format=1\nshards=2\nnode=3\nfeed=ab\nother=x\n").unwrap();
        assert_eq!(
            lines,
            super::MetaLines {
                version: Some(1),
                shards: Some(2),
                node: Some(3),
                feed: Some(0xab)
            }
        );
        assert_eq!(super::MetaLines::parse("feed=0\n"), Err("bad feed= line"));
        assert_eq!(super::MetaLines::parse("node=x\n"), Err("bad node= line"));
    }

    use super::*;

    #[test]
    fn the_defaults_are_a_valid_configuration() {
        validate(&EngineConfig::default()).unwrap();
    }

    #[test]
    fn a_ring_too_small_for_the_unflushed_bound_is_refused() {
        let config = EngineConfig {
            ring_bytes: 8 << 20,
            ..EngineConfig::default()
        };
        assert!(
            matches!(validate(&config), Err(EngineError::Config(m)) if m.contains("ring_bytes"))
        );
    }
}
