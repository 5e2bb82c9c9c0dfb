//! The engine: shards on their own glommio executors, reached from any thread.
//!
//! `Engine::open` checks `DATA/ringfeed.meta` (format version and shard
//! count), starts one executor per shard, and waits until every shard has
//! recovered its log. Appends are validated as a whole, routed to shards by a
//! hash of their directory (so one directory's events keep their order), sent
//! over flume channels, and answered on one-shot replies, so callers can be
//! plain threads or tokio tasks.

mod append;
mod config;
mod error;
mod meta;
mod restore;
mod sequences;

pub use restore::{holds_feed, restore, RestoredShard, LOST_GENERATIONS};

pub use config::EngineConfig;
pub use error::EngineError;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use glommio::ExecutorJoinHandle;

use crate::clock::{Clock, SystemClock};
use crate::event::{AppendError, Limits, Position};
use crate::executor;
use crate::log::RecoveryReport;
use crate::shard::{self, Command, Relay, RelayThread, ShardShared};
use crate::storage::{DmaStorage, Storage};
use crate::subscribe::{Delivered, SubscribeError, SubscribeRequest, Subscription};
use config::{shard_config, validate};
use meta::{check_meta, Meta};
use sequences::Sequences;

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
    /// Each idempotent producer's highest stored sequence and its event's
    /// position, as recovery found them at open.
    last_stored: std::collections::HashMap<u64, (u64, Position)>,
    /// The data dir's lock (`Engine::open`), dropped after the shards stop.
    lock: Option<crate::lock::DataDirLock>,
    /// The data dir's feed id (see `feed_id`).
    feed_id: u64,
}

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
            sync_dir(dir)?;
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
            last_stored: std::collections::HashMap::new(),
        };
        for (id, ready) in readies.into_iter().enumerate() {
            match ready.recv() {
                Ok(Ok((report, heads))) => {
                    engine.reports.push(report);
                    let mut sequences = engine.sequences.lock().expect("not poisoned");
                    for head in heads {
                        sequences.insert(head.producer_id, head.next_sequence);
                        let Some((offset, ts)) = head.last else {
                            continue;
                        };
                        let last = (
                            head.next_sequence - 1,
                            Position {
                                shard: id as u32,
                                offset,
                                ts,
                            },
                        );
                        engine
                            .last_stored
                            .entry(head.producer_id)
                            .and_modify(|known| {
                                if known.0 < last.0 {
                                    *known = last;
                                }
                            })
                            .or_insert(last);
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

    /// An idempotent producer's highest stored sequence and where that event
    /// is, as recovery found them when the engine opened (what it appended
    /// since is not reflected). A producer that resumes after a restart
    /// starts there: every event up to it is stored, on every shard it sent
    /// to only if it sent to one shard (shards recover independently).
    pub fn last_stored(&self, producer_id: u64) -> Option<(u64, Position)> {
        self.last_stored.get(&producer_id).copied()
    }

    /// The stored event at `offset` of `shard`, if it is committed and
    /// retained (`OutOfRange` below retention).
    pub fn read_at(&self, shard: u32, offset: u64) -> Result<Option<Delivered>, SubscribeError> {
        let mut reader = crate::subscribe::ShardReader::new(self.shard(shard).clone(), false);
        let Some(run) = reader.read(offset)? else {
            return Ok(None);
        };
        debug_assert_eq!(run.first_offset, offset);
        let corrupt = |source| SubscribeError::Record { shard, source };
        let (len, _, ts) = crate::record::peek_position(&run.bytes).map_err(corrupt)?;
        let record = run.bytes.slice(..len.min(run.bytes.len()));
        Ok(Some(Delivered::new(shard, offset, ts, record)))
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

/// Makes the names in directory `dir` durable (fsync of the directory).
pub(super) fn sync_dir(dir: &Path) -> Result<(), EngineError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| EngineError::Io {
            what: format!("syncing the directory {}", dir.display()),
            source,
        })
}

/// `DATA/shard-NNN`: where a shard's segments live.
pub fn shard_dir(data_dir: &Path, shard: u32) -> PathBuf {
    data_dir.join(format!("shard-{shard:03}"))
}
