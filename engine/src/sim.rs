//! Deterministic simulation of the shards under faults.
//!
//! One thread, one seed: [`run`] drives `shards` [`ShardCore`]s, the same
//! state machine the glommio shards run, over their logs on [`MemStorage`],
//! with idempotent and plain producers, durable and memory acks, appends
//! queued per shard and taken in order (waiting for room as the command loop
//! does), flush I/O one operation at a time (so appends land between a
//! round's write and its sync), and a fault plan: process crashes, power
//! loss that keeps an arbitrary subset of unsynced blocks, failed and torn
//! writes, failed and stalled syncs, clock steps both ways, producer retries
//! with the same producer id and sequence, callers that give up on queued
//! appends. After every step an oracle checks the invariants of docs/design.md
//! section 2 that the shards keep; after every restart it checks what
//! recovery kept against every acknowledgement given. The same seed replays
//! the same run: each run's [`SimOutcome::digest`] is a hash of everything
//! it saw. [`Sim`] lets a caller step the same shards with subscribers of
//! its own: the server's stream simulation (`ringfeed_server::sim`) checks
//! 2.10 through the server's real stream code that way.
//!
//! Each check's message starts with the number of the docs/design.md section 2
//! invariant it holds the shards to, and a comment beside it says why:
//! - 2.1 dense offsets, increasing stamps, at staging and after recovery;
//! - 2.2 flush before evict; unflushed bytes bounded;
//! - 2.3 durable acks only after the covering fdatasync, the flushed
//!   watermark likewise; acked events survive crashes and power loss;
//! - 2.4 the committed watermark covers exactly what one step staged;
//! - 2.5 merged deliveries in `(ts, source)` order (claims answered by the
//!   core's own rule);
//! - 2.6 each delivery is the next (selected) event of its shard; a cursor
//!   is exactly what was delivered (filtered: it passes only unselected
//!   events); after a restart it resumes only if nothing it covers was lost,
//!   else it is refused as truncated; a lost offset comes back only in
//!   another generation;
//! - 2.7 a cursor below the retained range is refused naming the oldest
//!   retained offset; from the beginning means from there; recovery never
//!   loses retained segments;
//! - 2.8 an append waits only because of unflushed bytes, never a reader,
//!   and subscribers that fall behind the ring read from disk (counted);
//! - 2.9 recovery keeps exactly a verified prefix of what was written;
//! - 2.10 (the engine's part) a subscription's error is final;
//! - 2.11 ring memory and the bytes queued for a shard stay within their
//!   budgets; an append whose caller is gone is not applied;
//! - 2.12 a retry stores nothing new, also after a restart, and gets its
//!   original positions;
//! - 2.13 (the core's part) a durable waiter always has a flush due or
//!   under way: the flusher never sleeps while someone waits on it.
//!
//! Six subscribers (merged, per shard, chunk mode, filtered, and two that
//! rarely read) poll, disconnect and resume; the run ends with faults
//! stopped and every subscriber caught up (liveness). The server's part of
//! 2.10 and the glommio runtime's part of 2.13 are checked elsewhere:
//! `ringfeed_server::sim` and `engine/tests/it/executor_never_parks_with_work.rs`.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use crate::event::{AppendError, Stored};
use crate::log::{Log, LogConfig, SyncTicket};
use crate::record::{Kind, ProducerStamp, Record, Signatures};
use crate::retention::RetentionPolicy;
use crate::segment::error::LogError;
use crate::shard::core::{chunk_images, Admit, CoreLimits, FlushIo, Judged, Replies, ShardCore};
use crate::shard::ShardShared;
use crate::storage::{block_on, Faults, MemFile, MemStorage};
use crate::subscribe::{
    Cursor, Filter, Ordering as SubOrdering, Start, Step, SubscribeError, SubscribeRequest,
    Subscription,
};

/// A kind of fault the simulator may inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// The process dies; everything written stays, synced or not.
    Crash,
    /// The machine loses power: each unsynced block keeps its new contents or
    /// its old ones, independently.
    PowerLoss,
    /// A write fails (EIO) and changes nothing.
    WriteError,
    /// A sync fails and makes nothing durable.
    SyncError,
    /// A write stores only a prefix, fails, and the disk stops answering.
    TornWrite,
    /// The wall clock jumps backwards or forwards.
    ClockStep,
    /// A producer sends an earlier batch again, same id and sequences.
    Retry,
    /// A shard's fdatasync takes a long time (up to hundreds of steps) to
    /// return, while appends, claims and subscribers go on.
    StalledSync,
    /// A caller gives up on an append still queued for its shard (a
    /// cancelled stream, a passed deadline).
    Cancel,
    /// A shard's disk fills for up to hundreds of steps: making the next
    /// segment fails with ENOSPC; appends must be refused, nothing taken
    /// lost, and the shard must go on by itself once space returns.
    DiskFull,
}

impl Fault {
    pub const ALL: [Fault; 10] = [
        Fault::Crash,
        Fault::PowerLoss,
        Fault::WriteError,
        Fault::SyncError,
        Fault::TornWrite,
        Fault::ClockStep,
        Fault::Retry,
        Fault::StalledSync,
        Fault::Cancel,
        Fault::DiskFull,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Crash => "crash",
            Fault::PowerLoss => "power-loss",
            Fault::WriteError => "write-error",
            Fault::SyncError => "sync-error",
            Fault::TornWrite => "torn-write",
            Fault::ClockStep => "clock-step",
            Fault::Retry => "retry",
            Fault::StalledSync => "stalled-sync",
            Fault::Cancel => "cancel",
            Fault::DiskFull => "disk-full",
        }
    }

    /// `all`, `none`, or a comma-separated list of names.
    pub fn parse_list(text: &str) -> Result<Vec<Fault>, String> {
        match text.trim() {
            "all" => return Ok(Fault::ALL.to_vec()),
            "none" | "" => return Ok(Vec::new()),
            _ => {}
        }
        let mut faults = Vec::new();
        for name in text.split(',').map(str::trim) {
            let fault = Fault::ALL
                .into_iter()
                .find(|f| f.name() == name)
                .ok_or_else(|| {
                    let names: Vec<_> = Fault::ALL.iter().map(|f| f.name()).collect();
                    format!(
                        "unknown fault {name:?}: expected all, none or a list of {}",
                        names.join(", ")
                    )
                })?;
            if !faults.contains(&fault) {
                faults.push(fault);
            }
        }
        faults.sort();
        Ok(faults)
    }
}

/// What to simulate.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub shards: u32,
    pub steps: u64,
    pub faults: Vec<Fault>,
}

/// What a run that held every invariant did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimOutcome {
    pub steps: u64,
    /// Events stored (acknowledged or not), over all lives of the shards.
    pub stored: u64,
    pub durable_acks: u64,
    pub duplicates: u64,
    pub restarts: u64,
    /// Events delivered to subscribers, each checked.
    pub delivered: u64,
    /// Times a subscriber was refused below the retained range and skipped.
    pub retention_skips: u64,
    /// Deliveries read from disk below the ring: the shard had evicted them
    /// without waiting for that subscriber (2.8).
    pub behind_ring: u64,
    /// Rounds written while the round before them was being synced.
    pub writes_beside_sync: u64,
    /// Appends refused because their shard's disk was full.
    pub disk_full_refusals: u64,
    /// Rounds handed back to the ring because the next segment did not fit.
    pub rounds_refused: u64,
    /// A hash of every step's outcome: the same seed gives the same digest.
    pub digest: u64,
}

/// A broken invariant.
#[derive(Clone, Debug)]
pub struct SimFailure {
    pub seed: u64,
    /// The step it broke at (0-based).
    pub step: u64,
    /// The invariant, as docs/design.md section 2 names it.
    pub invariant: &'static str,
    pub detail: String,
    /// Every step up to the failure, one line each.
    pub trace: Vec<String>,
}

impl std::fmt::Display for SimFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} step {}: {}: {}",
            self.seed, self.step, self.invariant, self.detail
        )
    }
}

/// Runs one seed.
pub fn run(seed: u64, config: &SimConfig) -> Result<SimOutcome, SimFailure> {
    let mut sim = Sim::new(seed, config);
    for step in 0..config.steps {
        sim.step(step)?;
    }
    // The last step: faults stop, and every subscriber must catch up.
    sim.quiesce(config.steps)?;
    Ok(sim.outcome())
}

/// One seed's simulated shards, stepped by a caller that adds subscribers
/// of its own over them (the server's stream simulation does). Every step
/// runs the shard oracle.
pub struct Sim {
    world: World,
    seed: u64,
}

impl Sim {
    pub fn new(seed: u64, config: &SimConfig) -> Sim {
        Sim {
            world: World::new(seed, config),
            seed,
        }
    }

    /// One random step (an append, a flush I/O, a tick, a fault, ...).
    pub fn step(&mut self, step: u64) -> Result<(), SimFailure> {
        self.world.step = step;
        let result = self.world.step();
        self.check(step, result)
    }

    /// Faults stop and everything is flushed; the simulator's own
    /// subscribers must catch up (liveness).
    pub fn quiesce(&mut self, step: u64) -> Result<(), SimFailure> {
        self.world.step = step;
        let result = self.world.quiesce();
        self.check(step, result)
    }

    /// After [`Sim::quiesce`]: one more round in which every shard takes its
    /// queue, flushes and answers claims (for the caller's subscribers).
    pub fn settle(&mut self, step: u64) -> Result<(), SimFailure> {
        let result = self.world.settle();
        self.check(step, result)
    }

    /// A check's outcome at `step`: a broken invariant (this simulation's or
    /// a caller's) becomes a failure of this seed, with the run's trace.
    pub fn check<T>(&mut self, step: u64, result: Result<T, Broken>) -> Result<T, SimFailure> {
        result.map_err(|(invariant, detail)| SimFailure {
            seed: self.seed,
            step,
            invariant,
            detail,
            trace: std::mem::take(&mut self.world.trace),
        })
    }

    /// The shards as readers see them now (new ones after every restart).
    pub fn shards(&self) -> Vec<Arc<ShardShared>> {
        self.world
            .nodes
            .iter()
            .map(|n| n.core.shared_arc())
            .collect()
    }

    /// Opens a subscription over the shards, as `Engine::subscribe` does.
    pub fn subscribe(&self, request: SubscribeRequest) -> Result<Subscription, SubscribeError> {
        Subscription::open(&self.shards(), 0, request)
    }

    /// Restarts so far: subscriptions opened before the last one read
    /// shards that are gone.
    pub fn restarts(&self) -> u64 {
        self.world.restarts
    }

    /// The event id and stamp stored at `shard:offset` (the payload of every
    /// simulated event is its id, little-endian), if any.
    pub fn event_at(&self, shard: u32, offset: u64) -> Option<(u64, i64)> {
        let e = self.world.model.get(shard as usize)?.get(&offset)?;
        Some((e.event, e.ts))
    }

    /// Adds a line to the trace a failure prints.
    pub fn note(&mut self, line: String) {
        self.world.note(line);
    }

    /// A random number from the run's generator: the caller's choices come
    /// from the seed too.
    pub fn below(&mut self, n: u64) -> u64 {
        self.world.rng.below(n)
    }

    pub fn outcome(&self) -> SimOutcome {
        let world = &self.world;
        SimOutcome {
            steps: world.step,
            stored: world.stored,
            durable_acks: world.durable_acks,
            duplicates: world.duplicates,
            restarts: world.restarts,
            delivered: world.delivered,
            retention_skips: world.retention_skips,
            behind_ring: world.behind_ring,
            writes_beside_sync: world.writes_beside_sync,
            disk_full_refusals: world.disk_full_refusals,
            rounds_refused: world.rounds_refused,
            digest: world.digest.finish(),
        }
    }
}

/// A broken invariant: its docs/design.md name and what was seen.
pub type Broken = (&'static str, String);

/// xorshift64*: small, fast, and the same on every machine.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// What the oracle knows of one stored event.
#[derive(Clone, Debug)]
struct Expect {
    event: u64,
    ts: i64,
    stamp: Option<ProducerStamp>,
    /// Its durable ack was given: it must survive anything.
    durable: bool,
    /// The generation that stored it.
    generation: u32,
}

/// Record bytes that may be queued for one shard (`max_queued_bytes`).
const QUEUE_BYTES: usize = 2 << 10;
/// Steps an append waits for room before it is refused (`append_timeout`).
const APPEND_TIMEOUT_STEPS: u64 = 200;

/// An append queued for its shard and not yet taken.
struct Queued {
    events: Vec<u64>,
    stamps: Vec<Option<ProducerStamp>>,
    records: Vec<u8>,
    durable: bool,
    retry: bool,
    arrived: u64,
    /// Its caller is gone.
    cancelled: bool,
}

/// One producer's batches, for retries.
struct Producer {
    id: u64,
    next_sequence: u64,
    /// (shard, first sequence, events) of recent batches.
    sent: Vec<(u32, u64, Vec<u64>)>,
}

struct Node {
    storage: MemStorage,
    log: Log<MemStorage>,
    core: ShardCore<u64>,
    /// The sync the core handed out, begun (it covers the writes before it)
    /// and not yet returned: the next round may be written meanwhile.
    sync: Option<RunningSync>,
}

/// A [`FlushIo::Sync`] under way: its ticket's fdatasync, polled once.
type RunningSync = std::pin::Pin<
    Box<dyn std::future::Future<Output = (SyncTicket<MemFile>, std::io::Result<()>)>>,
>;

/// A durable append waiting for its ack.
struct Pending {
    shard: u32,
    offsets: Vec<u64>,
    needed: u64,
}

/// A subscriber: merged or per shard, event or chunk mode, from the
/// beginning, with what it was delivered.
struct Sub {
    ordering: SubOrdering,
    chunk_mode: bool,
    /// Polls rarely: falls behind the ring and past retention.
    paused: bool,
    sub: Option<Subscription>,
    /// The cursor it resumes from when `sub` is closed.
    cursor: Option<Cursor>,
    /// Follows only `/sim/1` (the events whose id is 1 mod 3).
    filtered: bool,
    /// Per shard: where its next delivery may be; unfiltered, exactly there
    /// (deliveries are dense); filtered, at the first matching event from here.
    next: Vec<u64>,
    /// Per shard: what its cursor covers, offset -> event: what it was
    /// delivered and, filtered, the events it passed over.
    covered: Vec<BTreeMap<u64, u64>>,
    /// The last merged delivery's (ts, shard), within this engine's life.
    last_merged: Option<(i64, u32)>,
}

impl Sub {
    /// Whether its filter selects the event (see [`frame`]'s directories).
    fn wants(&self, event: u64) -> bool {
        !self.filtered || event % 3 == 1
    }
}

struct World {
    rng: Rng,
    faults: Vec<Fault>,
    shards: u32,
    log_config: Vec<LogConfig>,
    limits: CoreLimits,
    clock_ns: i64,
    storages: Vec<MemStorage>,
    nodes: Vec<Node>,
    /// Per shard: what each offset holds.
    model: Vec<BTreeMap<u64, Expect>>,
    pending: BTreeMap<u64, Pending>,
    /// Per shard: appends queued and not yet taken, in order.
    queues: Vec<std::collections::VecDeque<Queued>>,
    /// Per shard: steps its current fdatasync still takes to return.
    stalled: Vec<u64>,
    /// Per shard: steps its disk stays full.
    disk_full: Vec<u64>,
    subs: Vec<Sub>,
    delivered: u64,
    /// Deliveries read from below the ring (2.8: the shard had moved on).
    behind_ring: u64,
    writes_beside_sync: u64,
    disk_full_refusals: u64,
    rounds_refused: u64,
    /// Per shard: events below this were removed by retention.
    retained: Vec<u64>,
    retention_skips: u64,
    producers: Vec<Producer>,
    next_event: u64,
    next_ack: u64,
    step: u64,
    trace: Vec<String>,
    digest: std::collections::hash_map::DefaultHasher,
    stored: u64,
    durable_acks: u64,
    duplicates: u64,
    restarts: u64,
}

impl World {
    fn new(seed: u64, config: &SimConfig) -> World {
        let shards = config.shards.max(1);
        let log_config = (0..shards)
            .map(|shard| LogConfig {
                shard,
                segment_bytes: 64 << 10,
                max_unsynced_bytes: 8 << 10,
            })
            .collect();
        let mut world = World {
            rng: Rng::new(seed),
            faults: config.faults.clone(),
            shards,
            log_config,
            limits: CoreLimits {
                window_bytes: 4 << 10,
                ring_bytes: 32 << 10,
                max_unflushed_bytes: 16 << 10,
                round_bytes: 8 << 10,
            },
            clock_ns: 1_000_000_000,
            storages: (0..shards)
                .map(|shard| {
                    // Zeros written ahead beside small rounds (as on a file
                    // system, `StorageFile::zero_ahead`), their writes under
                    // the same faults, by seed and shard: none, 4 KiB beside
                    // rounds of 1 KiB or less, or 16 KiB beside rounds of
                    // 4 KiB or less.
                    let storage = MemStorage::new();
                    storage.set_zero_ahead(
                        [0, 4 << 10, 16 << 10][(seed as usize + shard as usize) % 3],
                    );
                    storage
                })
                .collect(),
            nodes: Vec::new(),
            model: (0..shards).map(|_| BTreeMap::new()).collect(),
            pending: BTreeMap::new(),
            queues: (0..shards).map(|_| Default::default()).collect(),
            stalled: vec![0; shards as usize],
            disk_full: vec![0; shards as usize],
            subs: [
                (SubOrdering::Merged, false, false, false),
                (SubOrdering::PerShard, false, false, false),
                (SubOrdering::Merged, true, false, false),
                (SubOrdering::PerShard, false, true, false),
                (SubOrdering::Merged, false, false, true),
                (SubOrdering::PerShard, false, true, true),
            ]
            .into_iter()
            .map(|(ordering, chunk_mode, paused, filtered)| Sub {
                ordering,
                chunk_mode,
                paused,
                filtered,
                sub: None,
                cursor: None,
                next: vec![0; shards as usize],
                covered: (0..shards).map(|_| BTreeMap::new()).collect(),
                last_merged: None,
            })
            .collect(),
            delivered: 0,
            behind_ring: 0,
            writes_beside_sync: 0,
            disk_full_refusals: 0,
            rounds_refused: 0,
            retained: vec![0; shards as usize],
            retention_skips: 0,
            producers: (1..=4)
                .map(|id| Producer {
                    id,
                    next_sequence: 0,
                    sent: Vec::new(),
                })
                .collect(),
            next_event: 1,
            next_ack: 1,
            step: 0,
            trace: Vec::new(),
            digest: Default::default(),
            stored: 0,
            durable_acks: 0,
            duplicates: 0,
            restarts: 0,
        };
        world.open_all().expect("an empty log opens");
        world
    }

    fn has(&self, fault: Fault) -> bool {
        self.faults.contains(&fault)
    }

    fn note(&mut self, line: String) {
        line.hash(&mut self.digest);
        self.trace.push(format!("{:>6} {line}", self.step));
    }

    /// Opens every shard's log (recovery) and a core over it.
    fn open_all(&mut self) -> Result<(), Broken> {
        let stamped_high = Arc::new(AtomicI64::new(0));
        self.nodes.clear();
        for shard in 0..self.shards {
            let storage = self.storages[shard as usize].clone();
            let opened = block_on(Log::open(
                storage.clone(),
                self.log_config[shard as usize].clone(),
            ));
            let (mut log, _report) = opened.map_err(|e| {
                (
                    "2.9 recovery opens what the shard wrote",
                    format!("shard {shard}: {e}"),
                )
            })?;
            let shared = Arc::new(ShardShared::new(shard, stamped_high.clone(), None));
            shared.attach(
                crate::storage::Storage::reader(&storage),
                log.generations().clone(),
            );
            let (core, _heads) = ShardCore::over_opened_log(shared, self.limits, &mut log);
            self.nodes.push(Node {
                storage,
                log,
                core,
                sync: None,
            });
        }
        Ok(())
    }

    fn step(&mut self) -> Result<(), Broken> {
        self.clock_ns += self.rng.below(2_000) as i64;
        for shard in 0..self.shards as usize {
            if self.disk_full[shard] > 0 {
                self.disk_full[shard] -= 1;
                if self.disk_full[shard] == 0 {
                    self.storages[shard].fill_disk(false);
                    self.note(format!("shard {shard}: space freed"));
                }
            }
        }
        let roll = self.rng.below(1000);
        match roll {
            0..=389 => self.append()?,
            390..=419 => {
                let shard = self.rng.below(u64::from(self.shards)) as usize;
                self.take(shard)?;
            }
            420..=769 => self.flush_io()?,
            770..=809 => self.tick(),
            810..=819 => {
                // Due now; the core runs it between flush rounds, as on the
                // real path (never between a round's write and its sync).
                let shard = self.rng.below(u64::from(self.shards)) as usize;
                self.nodes[shard].core.retention_due();
            }
            820..=939 => {
                let sub = self.rng.below(self.subs.len() as u64) as usize;
                let max = 1 + self.rng.below(32);
                if !self.subs[sub].paused || self.rng.chance(30) {
                    self.poll_sub(sub, max)?;
                }
            }
            940..=959 => {
                let sub = self.rng.below(self.subs.len() as u64) as usize;
                self.reconnect(sub)?;
            }
            _ => self.fault()?,
        }
        self.check_shards()
    }

    fn fault(&mut self) -> Result<(), Broken> {
        let shard = self.rng.below(u64::from(self.shards)) as usize;
        let kind = self.rng.below(10);
        let latched = self.nodes.iter().any(|n| n.core.is_latched());
        match kind {
            0 if self.has(Fault::Crash) || latched => self.restart(false)?,
            1 if self.has(Fault::PowerLoss) => self.restart(true)?,
            2 if self.has(Fault::WriteError) => {
                self.nodes[shard].storage.set_faults(Faults {
                    fail_write: Some(0),
                    ..Faults::default()
                });
                self.note(format!("arm write error shard {shard}"));
            }
            3 if self.has(Fault::SyncError) => {
                self.nodes[shard].storage.set_faults(Faults {
                    fail_sync: Some(0),
                    ..Faults::default()
                });
                self.note(format!("arm sync error shard {shard}"));
            }
            4 if self.has(Fault::TornWrite) => {
                let keep = 512 * (1 + self.rng.below(4) as usize);
                self.nodes[shard].storage.set_faults(Faults {
                    tear_write: Some((0, keep)),
                    ..Faults::default()
                });
                self.note(format!("arm torn write shard {shard} keeping {keep} bytes"));
            }
            7 if self.has(Fault::StalledSync) => {
                let steps = 1 + self.rng.below(300);
                self.stalled[shard] = steps;
                self.note(format!(
                    "shard {shard}: its next fdatasync takes {steps} steps"
                ));
            }
            8 if self.has(Fault::Cancel) => self.cancel(shard),
            9 if self.has(Fault::DiskFull) => {
                let steps = 1 + self.rng.below(300);
                self.disk_full[shard] = steps;
                self.storages[shard].fill_disk(true);
                self.note(format!("shard {shard}: the disk is full for {steps} steps"));
            }
            5 | 6 if self.has(Fault::ClockStep) => {
                let by = self.rng.below(2_000_000_000) as i64 - 1_000_000_000;
                self.clock_ns = (self.clock_ns + by).max(1);
                self.note(format!("clock step {by} ns"));
            }
            _ => {}
        }
        Ok(())
    }

    /// An append of 1–6 events to one shard: plain, idempotent, or (with
    /// [`Fault::Retry`]) a producer's earlier batch again.
    fn append(&mut self) -> Result<(), Broken> {
        let durable = self.rng.chance(400);
        let p = self.rng.below(self.producers.len() as u64 + 1) as usize;
        let retry = self.has(Fault::Retry)
            && p < self.producers.len()
            && !self.producers[p].sent.is_empty()
            && self.rng.chance(250);
        let (shard, stamps, events) = if retry {
            let sent = &self.producers[p].sent;
            let (shard, first, events) = sent[self.rng.below(sent.len() as u64) as usize].clone();
            let id = self.producers[p].id;
            (shard, stamps(id, first, events.len() as u64), events)
        } else {
            let shard = self.rng.below(u64::from(self.shards)) as u32;
            let count = 1 + self.rng.below(6);
            let events: Vec<u64> = (0..count).map(|i| self.next_event + i).collect();
            self.next_event += count;
            let stamps = if p < self.producers.len() {
                let producer = &mut self.producers[p];
                let first = producer.next_sequence;
                producer.next_sequence += count;
                producer.sent.push((shard, first, events.clone()));
                if producer.sent.len() > 16 {
                    producer.sent.remove(0);
                }
                stamps(producer.id, first, count)
            } else {
                vec![None; count as usize]
            };
            (shard, stamps, events)
        };
        let records = frame(&events, &stamps);
        // Queued for the shard as the engine does: refused when the queue is
        // over its budget (an empty queue takes any one batch).
        let shared = self.nodes[shard as usize].core.shared_arc();
        if let Err(e) = shared.reserve_queue(records.len(), QUEUE_BYTES) {
            self.note(format!("append shard {shard} {events:?}: {e}"));
            return Ok(());
        }
        // 2.11: the commands queued for a shard are bounded.
        let queued = shared.queued_bytes();
        if queued > QUEUE_BYTES.max(records.len()) {
            return Err((
                "2.11 the bytes queued for a shard stay within its queue budget",
                format!("shard {shard}: {queued} bytes queued, budget {QUEUE_BYTES}"),
            ));
        }
        self.queues[shard as usize].push_back(Queued {
            events,
            stamps,
            records,
            durable,
            retry,
            arrived: self.step,
            cancelled: false,
        });
        // Mostly taken at once; otherwise it waits for a later take, and a
        // caller may give up on it meanwhile.
        if self.rng.chance(700) {
            self.take(shard as usize)?;
        }
        Ok(())
    }

    /// The shard takes its queued appends in order, until one has to wait
    /// for room (it stays at the head, as the real command loop waits).
    fn take(&mut self, shard: usize) -> Result<(), Broken> {
        while let Some(head) = self.queues[shard].front() {
            let cancelled = head.cancelled;
            let idempotent = head.stamps[0].is_some();
            let node = &mut self.nodes[shard];
            let judged = match node.core.judge(&head.records, idempotent) {
                Ok(judged) => judged,
                Err(AppendError::StaleSequence { .. }) => {
                    let line = format!("append shard {shard} {:?}: stale", head.events);
                    self.dequeue(shard);
                    self.note(line);
                    continue;
                }
                Err(e) => return Err(("appends of valid records are judged", e.to_string())),
            };
            let unflushed_before = node.core.unflushed_bytes();
            match node.core.admit(&judged, cancelled) {
                Admit::Stage if cancelled => return Err((
                    "2.11 an append whose caller is gone before its shard takes it is not applied",
                    format!(
                        "shard {shard}: a cancelled append of {:?} was staged",
                        head.events
                    ),
                )),
                Admit::Stage => {
                    let command = self.dequeue(shard);
                    self.stage_command(shard as u32, command, &judged)?;
                }
                Admit::Abandoned if !cancelled => {
                    return Err((
                        "appends whose caller waits are taken",
                        format!("shard {shard}: {:?} abandoned", head.events),
                    ))
                }
                Admit::Abandoned => {
                    let command = self.dequeue(shard);
                    self.note(format!(
                        "append shard {shard} {:?}: cancelled, not applied",
                        command.events
                    ));
                }
                Admit::Refused(e) => {
                    if matches!(e, AppendError::DiskFull { .. }) {
                        self.disk_full_refusals += 1;
                    }
                    let command = self.dequeue(shard);
                    self.note(format!("append shard {shard} {:?}: {e}", command.events));
                }
                Admit::Wait { unflushed } => {
                    // 2.8: a shard waits only for its own flush, never for a
                    // reader: the refusal is explained by unflushed bytes alone.
                    let bound = self.limits.max_unflushed_bytes;
                    if unflushed != unflushed_before
                        || unflushed == 0
                        || unflushed + judged.new_bytes <= bound
                    {
                        return Err((
                            "2.8 a shard never waits for a subscriber: only unflushed bytes hold an append back",
                            format!(
                                "shard {shard}: told to wait with {unflushed} unflushed (was {unflushed_before}), {} new, bound {bound}",
                                judged.new_bytes
                            ),
                        ));
                    }
                    // The real shard waits up to append_timeout, then refuses.
                    if self.step - head.arrived > APPEND_TIMEOUT_STEPS {
                        let command = self.dequeue(shard);
                        self.note(format!(
                            "append shard {shard} {:?}: timed out waiting for room",
                            command.events
                        ));
                        continue;
                    }
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Takes the head of `shard`'s queue, giving its bytes back.
    fn dequeue(&mut self, shard: usize) -> Queued {
        let command = self.queues[shard]
            .pop_front()
            .expect("a head was looked at");
        self.nodes[shard]
            .core
            .shared()
            .release_queue(command.records.len());
        command
    }

    /// A caller gives up on one of the appends queued for a shard.
    fn cancel(&mut self, shard: usize) {
        let queue = &mut self.queues[shard];
        if queue.is_empty() {
            return;
        }
        let at = self.rng.below(queue.len() as u64) as usize;
        queue[at].cancelled = true;
        let events = queue[at].events.clone();
        self.note(format!("caller of append shard {shard} {events:?} gone"));
    }

    /// Stamps and publishes a taken append, checking what it staged.
    fn stage_command(
        &mut self,
        shard: u32,
        command: Queued,
        judged: &Judged,
    ) -> Result<(), Broken> {
        let Queued {
            events,
            stamps,
            records,
            durable,
            retry,
            ..
        } = command;
        let now = self.clock_ns;
        let node = &mut self.nodes[shard as usize];
        let committed_before = node.core.shared().watermarks.committed_next();
        let last_ts_before = node.core.last_ts();
        let staged = node
            .core
            .stage(&records, events.len(), judged, now)
            .map_err(|e| ("appends of valid records are staged", e.to_string()))?;
        let generation = node.log.generations().current();
        let shared = node.core.shared();
        let committed = shared.watermarks.committed_next();
        // Offsets are dense and stamps strictly increase, whatever the clock did.
        let mut expect_offset = committed_before;
        let mut prev_ts = last_ts_before;
        let mut new_offsets = Vec::new();
        for (i, stored) in staged.positions.iter().enumerate() {
            let Stored {
                position,
                duplicate,
            } = *stored;
            if duplicate {
                self.duplicates += 1;
                // A duplicate gets its original's position, and only if the
                // original is stored there.
                let original = self.model[shard as usize].get(&position.offset);
                let same = original.is_some_and(|o| o.event == events[i] && o.ts == position.ts);
                if !same {
                    return Err((
                        "2.12 a retry appends nothing and gets its original position",
                        format!(
                            "event {} answered as a duplicate at {}:{} which holds {:?}",
                            events[i], shard, position.offset, original
                        ),
                    ));
                }
                continue;
            }
            if let Some(stamp) = stamps[i] {
                // Within the retained range: the table is rebuilt at open from
                // the retained records, so after a restart a retry of an event
                // that retention already removed is new again (docs/appends.md,
                // "Idempotent producers"; the simulator found that edge).
                let retained = self.nodes[shard as usize]
                    .core
                    .shared()
                    .watermarks
                    .snapshot()
                    .retained_from;
                if let Some((offset, _)) = self.model[shard as usize]
                    .range(retained..)
                    .find(|(_, e)| e.stamp == Some(stamp))
                {
                    return Err((
                        "2.12 retries never duplicate: a producer's event is stored once",
                        format!(
                            "{stamp:?} stored again at {shard}:{} (already at {offset})",
                            position.offset
                        ),
                    ));
                }
            }
            if position.offset != expect_offset || position.ts <= prev_ts {
                return Err((
                    "2.1 offsets are dense and stamps strictly increase within a shard",
                    format!(
                        "staged at {shard}:{} ts {} after offset {} ts {prev_ts}",
                        position.offset,
                        position.ts,
                        expect_offset.wrapping_sub(1)
                    ),
                ));
            }
            expect_offset += 1;
            prev_ts = position.ts;
            new_offsets.push(position.offset);
            self.model[shard as usize].insert(
                position.offset,
                Expect {
                    event: events[i],
                    ts: position.ts,
                    stamp: stamps[i],
                    durable: false,
                    generation,
                },
            );
            self.stored += 1;
        }
        if expect_offset != committed {
            return Err((
                "2.4 the committed watermark covers exactly what was staged, in the same step",
                format!("committed {committed}, staged through {expect_offset}"),
            ));
        }
        let all: Vec<u64> = staged.positions.iter().map(|s| s.position.offset).collect();
        self.note(format!(
            "append shard {shard} events {events:?} {} -> {:?}{}",
            if durable { "durable" } else { "memory" },
            all,
            if retry { " (retry)" } else { "" }
        ));
        if durable {
            let ack = self.next_ack;
            self.next_ack += 1;
            self.pending.insert(
                ack,
                Pending {
                    shard,
                    offsets: all,
                    needed: staged.needed,
                },
            );
            if let Some(ack) = self.nodes[shard as usize]
                .core
                .wait_durable(staged.needed, ack)
            {
                self.durable_ack(ack)?;
            }
        }
        Ok(())
    }

    /// One flush I/O on a random shard: a round's write, or its sync.
    fn flush_io(&mut self) -> Result<(), Broken> {
        let shard = self.rng.below(u64::from(self.shards)) as usize;
        self.flush_io_on(shard).map(drop)
    }

    /// One flush I/O on `shard`, if its core has one to do: whether it had.
    /// A running sync may return now (unless stalled) or go on while the
    /// next round is written.
    fn flush_io_on(&mut self, shard: usize) -> Result<bool, Broken> {
        if self.nodes[shard].sync.is_some() {
            if self.stalled[shard] > 0 {
                // The fdatasync is under way and has not returned.
                self.stalled[shard] -= 1;
            } else if self.rng.chance(50) {
                return self.sync_returns(shard).map(|()| true);
            }
        }
        let node = &mut self.nodes[shard];
        let replies = match node.core.next_io() {
            FlushIo::Write(plan) => {
                let result = block_on(node.log.append_chunks(&chunk_images(&plan)));
                if node.sync.is_some() && result.is_ok() {
                    self.writes_beside_sync += 1;
                }
                if matches!(result, Err(LogError::NoSpace { .. })) {
                    self.rounds_refused += 1;
                }
                let line = format!(
                    "write shard {shard} {} chunk(s){}: {}",
                    plan.len(),
                    if node.sync.is_some() {
                        " beside a running sync"
                    } else {
                        ""
                    },
                    result
                        .as_ref()
                        .map_or_else(|e| e.to_string(), |_| "ok".into())
                );
                drop(plan);
                let replies = node.core.written(result, node.log.no_space());
                self.note(line);
                replies
            }
            FlushIo::Sync => match node.log.begin_sync() {
                Ok(ticket) => {
                    let mut sync: RunningSync = Box::pin(async move {
                        let result = ticket.run().await;
                        (ticket, result)
                    });
                    // Its first poll fixes what it covers.
                    let first = block_on(futures_lite::future::poll_once(&mut sync));
                    assert!(first.is_none(), "a sync returns at a later poll");
                    node.sync = Some(sync);
                    self.note(format!("sync shard {shard} begins"));
                    return Ok(true);
                }
                Err(e) => node.core.synced(Err(e), &node.log),
            },
            FlushIo::Retention => return self.retention(shard).map(|()| true),
            FlushIo::Prepare => {
                let result = block_on(node.log.prepare_next());
                let line = format!(
                    "shard {shard} makes its next segment: {}",
                    result
                        .as_ref()
                        .map_or_else(|e| e.to_string(), |_| "ok".into())
                );
                let replies = node.core.prepared(result);
                self.note(line);
                replies
            }
            FlushIo::Wait if node.sync.is_some() && self.stalled[shard] == 0 => {
                return self.sync_returns(shard).map(|()| true)
            }
            FlushIo::Wait | FlushIo::Stop => return Ok(false),
        };
        self.answer(replies).map(|()| true)
    }

    /// The running sync of `shard` returns.
    fn sync_returns(&mut self, shard: usize) -> Result<(), Broken> {
        let node = &mut self.nodes[shard];
        let sync = node.sync.take().expect("a sync runs");
        let (ticket, result) = block_on(sync);
        let flushed = node.log.finish_sync(ticket, result);
        let line = format!(
            "sync shard {shard}: {}",
            flushed
                .as_ref()
                .map_or_else(|e| e.to_string(), |n| format!("through {n}"))
        );
        let replies = node.core.synced(flushed, &node.log);
        self.note(line);
        self.answer(replies)
    }

    fn answer(&mut self, replies: Replies<u64>) -> Result<(), Broken> {
        for ack in replies.ok {
            self.durable_ack(ack)?;
        }
        for (ack, error) in replies.failed {
            self.pending.remove(&ack);
            self.note(format!("durable ack {ack} failed: {error}"));
        }
        Ok(())
    }

    fn durable_ack(&mut self, ack: u64) -> Result<(), Broken> {
        let pending = self
            .pending
            .remove(&ack)
            .expect("each ack is answered once");
        let node = &self.nodes[pending.shard as usize];
        let synced = node.log.synced_offset();
        // Durable acks only after the fdatasync that covers them returned.
        if synced < pending.needed {
            return Err((
                "2.3 a durable ack is given only after the fdatasync covering it returns",
                format!(
                    "ack {ack} of {}:{:?} needs offset {} synced, the log has synced below {synced}",
                    pending.shard, pending.offsets, pending.needed
                ),
            ));
        }
        let model = &mut self.model[pending.shard as usize];
        for offset in &pending.offsets {
            if let Some(e) = model.get_mut(offset) {
                e.durable = true;
            }
        }
        self.durable_acks += 1;
        self.note(format!("durable ack {ack}"));
        Ok(())
    }

    /// Every shard's watermarks and memory, after every step.
    fn check_shards(&self) -> Result<(), Broken> {
        for (shard, node) in self.nodes.iter().enumerate() {
            let w = &node.core.shared().watermarks;
            let (committed, flushed) = (w.committed_next(), w.flushed_next());
            // Readers never pass the committed watermark; the flushed one
            // never passes it either.
            if flushed > committed {
                return Err((
                    "2.4 flushed <= committed",
                    format!("shard {shard}: flushed {flushed} > committed {committed}"),
                ));
            }
            // The flushed watermark means durable.
            if flushed > node.log.synced_offset() {
                return Err((
                    "2.3 the flushed watermark moves only after the fdatasync covering it",
                    format!(
                        "shard {shard}: flushed {flushed}, synced below {}",
                        node.log.synced_offset()
                    ),
                ));
            }
            // Flush before evict: a window leaves memory only once on disk.
            let evicted = node.core.evicted_below();
            if evicted > flushed {
                return Err((
                    "2.2 flush before evict: a window leaves the ring only once durable",
                    format!("shard {shard}: ring evicted below {evicted}, flushed {flushed}"),
                ));
            }
            // No shard parks with work: a durable waiter always has a flush
            // round due or under way (the flusher would sleep otherwise).
            if node.core.parked_with_waiters() {
                return Err((
                    "2.13 no thread parks with work: a durable waiter always has a flush due or under way",
                    format!(
                        "shard {shard}: durable waiters, {} bytes unflushed, and no flush due",
                        node.core.unflushed_bytes()
                    ),
                ));
            }
            // Bounded memory.
            let bound = self.limits.ring_bytes + 2 * self.limits.window_bytes;
            if node.core.shared().ring_bytes() > bound {
                return Err((
                    "2.11 ring memory stays within ring_bytes",
                    format!(
                        "shard {shard}: {} bytes of windows, bound {bound}",
                        node.core.shared().ring_bytes()
                    ),
                ));
            }
            // Back-pressure: a batch is taken only with room for it (or
            // when nothing is unflushed); batches here are under 1 KiB.
            let unflushed = node.core.unflushed_bytes();
            if unflushed > self.limits.max_unflushed_bytes + 1024 {
                return Err((
                    "2.2 unflushed bytes stay within max_unflushed_bytes",
                    format!("shard {shard}: {unflushed} unflushed"),
                ));
            }
        }
        Ok(())
    }

    /// Every shard stops at once (a process crash, or power loss), recovers,
    /// and what recovery kept is checked against every ack given.
    fn restart(&mut self, power_loss: bool) -> Result<(), Broken> {
        let flushed: Vec<u64> = self
            .nodes
            .iter()
            .map(|n| n.core.shared().watermarks.flushed_next())
            .collect();
        let generations: Vec<u32> = self
            .nodes
            .iter()
            .map(|n| n.log.generations().current())
            .collect();
        for i in 0..self.subs.len() {
            let sub = &mut self.subs[i];
            // Merged order holds within an engine's life; across a restart
            // only per-shard order and exactness are promised.
            sub.last_merged = None;
            if let Some(open) = sub.sub.take() {
                let cursor = open.cursor();
                self.pass_over_to(i, &cursor)?;
                self.subs[i].cursor = Some(cursor);
            }
        }
        self.nodes.clear();
        self.pending.clear(); // never acknowledged: the process is gone
        for queue in &mut self.queues {
            queue.clear(); // never taken: the process is gone
        }
        self.stalled.iter_mut().for_each(|s| *s = 0);
        for storage in &self.storages {
            if power_loss {
                storage.power_loss_keeping(self.rng.next());
            } else {
                storage.process_crash();
            }
        }
        self.restarts += 1;
        self.note(format!(
            "{} (flushed {flushed:?})",
            if power_loss { "power loss" } else { "crash" }
        ));
        self.open_all()?;
        for shard in 0..self.shards as usize {
            let node = &self.nodes[shard];
            let kept = read_log(&node.log).map_err(|e| {
                (
                    "2.9 recovered chunks read back and verify",
                    format!("shard {shard}: {e}"),
                )
            })?;
            let next = node.log.next_offset();
            let gens = node.log.generations();
            // A new generation starts with every open.
            if gens.current() <= generations[shard] {
                return Err((
                    "2.6 every open starts a new generation",
                    format!(
                        "shard {shard}: generation {} after {}",
                        gens.current(),
                        generations[shard]
                    ),
                ));
            }
            let mut prev: Option<(u64, i64)> = None;
            let mut stamps = std::collections::BTreeSet::new();
            for &(offset, ts, _, stamp) in &kept {
                if prev.is_some_and(|(o, t)| offset != o + 1 || ts <= t) {
                    return Err((
                        "2.1 offsets are dense and stamps strictly increase within a shard",
                        format!("shard {shard}: recovered {offset} ts {ts} after {prev:?}"),
                    ));
                }
                prev = Some((offset, ts));
                if let Some(stamp) = stamp {
                    if !stamps.insert((stamp.producer_id, stamp.sequence)) {
                        return Err((
                            "2.12 retries never duplicate: a producer's event is stored once",
                            format!("shard {shard}: {stamp:?} recovered twice"),
                        ));
                    }
                }
            }
            let on_disk: BTreeMap<u64, (i64, u64)> = kept
                .iter()
                .map(|&(offset, ts, event, _)| (offset, (ts, event)))
                .collect();
            let retained = node.log.retained().map_or(next, |r| r.0);
            // Below the retained range, events were removed on purpose.
            for (&offset, expect) in self.model[shard].range(retained..) {
                let found = on_disk.get(&offset);
                let same = found == Some(&(expect.ts, expect.event));
                // Durable acks are never lost; nor is anything below the
                // flushed watermark (it means durable); after a process
                // crash, everything written stays.
                let must = expect.durable || offset < flushed[shard];
                if must && !same {
                    return Err((
                        "2.3 an acknowledged durable event is never lost",
                        format!(
                            "shard {shard} offset {offset}: expected event {} (ts {}, {}), recovered {found:?}",
                            expect.event,
                            expect.ts,
                            if expect.durable { "durably acked" } else { "flushed" }
                        ),
                    ));
                }
                if !same && found.is_some() {
                    return Err((
                        "2.9 recovery keeps exactly a prefix of what was written",
                        format!(
                            "shard {shard} offset {offset}: event {} became {found:?}",
                            expect.event
                        ),
                    ));
                }
                // Crash-safe cursors: an offset whose event was lost is
                // handed out again only under another generation.
                if !same && gens.of_offset(offset) == expect.generation {
                    return Err((
                        "2.6 an offset is never reused within a generation",
                        format!(
                            "shard {shard} offset {offset} (lost event {}) is in generation {} again",
                            expect.event, expect.generation
                        ),
                    ));
                }
            }
            if kept.len() as u64 != next - retained {
                return Err((
                    "2.9 recovery keeps exactly a prefix of what was written",
                    format!(
                        "shard {shard}: {} records read, retained {retained}..{next}",
                        kept.len()
                    ),
                ));
            }
            // Retention's removals may be undone by power loss (the
            // directory change was not synced), never extended.
            if retained > self.retained[shard] {
                return Err((
                    "2.7 recovery never loses retained segments",
                    format!(
                        "shard {shard}: retained from {retained}, was {}",
                        self.retained[shard]
                    ),
                ));
            }
            self.retained[shard] = retained;
        }
        // The model is now what the disk holds.
        for shard in 0..self.shards as usize {
            let next = self.nodes[shard].log.next_offset();
            self.model[shard].retain(|&offset, _| offset < next);
            for e in self.model[shard].values_mut() {
                // Recovered and synced by the open: it must survive from now on.
                e.durable = true;
            }
        }
        for i in 0..self.subs.len() {
            self.resume_after_restart(i)?;
        }
        Ok(())
    }

    /// The flush interval on a random shard, and every shard answers the
    /// claims merges asked of it (what the real shard's ticker does).
    fn tick(&mut self) {
        let shard = self.rng.below(u64::from(self.shards)) as usize;
        self.nodes[shard].core.flush_interval_passed();
        for node in &mut self.nodes {
            node.core.answer_claim(self.clock_ns);
            // The real shard's retry timer, about once a second.
            node.core.space_retry_due();
        }
        self.note(format!("tick shard {shard}"));
    }

    fn open_sub(&self, i: usize, resume_truncated: bool) -> Result<Subscription, SubscribeError> {
        let sub = &self.subs[i];
        let start = match &sub.cursor {
            Some(cursor) => Start::Cursor(cursor.clone()),
            None => Start::Beginning,
        };
        let shards: Vec<Arc<ShardShared>> =
            self.nodes.iter().map(|n| n.core.shared_arc()).collect();
        let request = SubscribeRequest {
            ordering: sub.ordering,
            filter: if sub.filtered {
                Filter::prefix("/sim/1")
            } else {
                Filter::default()
            },
            resume_truncated,
            ..SubscribeRequest::from(start)
        };
        Subscription::open(&shards, 0, request)
    }

    /// Up to `max` deliveries to subscriber `i`, each checked.
    fn poll_sub(&mut self, i: usize, max: u64) -> Result<(), Broken> {
        if self.subs[i].sub.is_none() {
            let opened = self
                .open_or_skip(i, false)?
                .map_err(|e| ("2.6 a cursor of this engine's life resumes", e.to_string()))?;
            self.subs[i].sub = Some(opened);
        }
        let mut got = 0;
        while got < max {
            let chunk_mode = self.subs[i].chunk_mode;
            let sub = self.subs[i].sub.as_mut().expect("opened above");
            if chunk_mode {
                match sub.poll_chunk(2048) {
                    Ok(Some(chunk)) => {
                        let mut at = 0;
                        for k in 0..chunk.count {
                            let bad = |e: crate::record::RecordError| {
                                ("chunks hold whole records", e.to_string())
                            };
                            let (len, offset, ts) =
                                crate::record::peek_position(&chunk.records[at..]).map_err(bad)?;
                            let header = crate::record::peek_header(&chunk.records[at..at + len])
                                .map_err(bad)?;
                            let payload = &chunk.records[at + header.payload_at..at + len];
                            if offset != chunk.first_offset + k {
                                return Err((
                                    "chunks are dense",
                                    format!(
                                        "offset {offset} at {k} of a chunk from {}",
                                        chunk.first_offset
                                    ),
                                ));
                            }
                            self.deliver(i, chunk.shard, offset, ts, payload, false)?;
                            at += len;
                        }
                        got += chunk.count;
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => return self.subscription_failed(i, e),
                }
            }
            let sub = self.subs[i].sub.as_mut().expect("opened above");
            match sub.poll() {
                Ok(Step::Event(event)) => {
                    let payload = event.payload();
                    let merged = self.subs[i].ordering == SubOrdering::Merged;
                    self.deliver(i, event.shard, event.offset, event.ts, &payload, merged)?;
                    got += 1;
                }
                Ok(Step::Pending) | Ok(Step::End) => break,
                Err(e) => return self.subscription_failed(i, e),
            }
        }
        if got > 0 {
            self.note(format!("subscriber {i} got {got}"));
        }
        Ok(())
    }

    fn deliver(
        &mut self,
        i: usize,
        shard: u32,
        offset: u64,
        ts: i64,
        payload: &[u8],
        merged: bool,
    ) -> Result<(), Broken> {
        let event = <[u8; 8]>::try_from(payload)
            .map(u64::from_le_bytes)
            .map_err(|_| {
                (
                    "subscribers see exactly the appended events",
                    format!("payload {payload:?}"),
                )
            })?;
        let s = shard as usize;
        // 2.6 (filtered): the events passed over are exactly those the
        // filter does not select.
        if self.subs[i].filtered && offset > self.subs[i].next[s] {
            self.pass_over(i, s, offset)?;
        }
        if offset < self.nodes[s].core.evicted_below() {
            // 2.8: read from disk, behind the ring the shard moved on from.
            self.behind_ring += 1;
        }
        let sub = &mut self.subs[i];
        // 2.6: resume is exact, never a skip, never a repeat.
        if offset != sub.next[s] {
            return Err((
                "2.6 resume is exact: a subscriber never skips and never repeats an event",
                format!(
                    "subscriber {i} got {shard}:{offset}, expected {shard}:{}",
                    sub.next[s]
                ),
            ));
        }
        // Exactly the events appended there (and only committed ones), and
        // only those the filter selects.
        let expect = self.model[s].get(&offset);
        if expect.is_none_or(|e| e.event != event || e.ts != ts || !sub.wants(e.event)) {
            return Err((
                "subscribers see exactly the appended events",
                format!(
                    "subscriber {i} got event {event} ts {ts} at {shard}:{offset}, the shard holds {expect:?}"
                ),
            ));
        }
        // 2.5: merged order is (ts, source), the same on every replay.
        if merged {
            if sub.last_merged.is_some_and(|last| (ts, shard) <= last) {
                return Err((
                    "2.5 a merged subscription delivers in (ts, source) order",
                    format!(
                        "subscriber {i} got ({ts}, shard {shard}) after {:?}",
                        sub.last_merged
                    ),
                ));
            }
            sub.last_merged = Some((ts, shard));
        }
        sub.next[s] += 1;
        sub.covered[s].insert(offset, event);
        self.delivered += 1;
        Ok(())
    }

    /// Moves filtered subscriber `i`'s next offset on shard `s` to `to`,
    /// over events the filter does not select: a filtered cursor passes
    /// those without delivering them (2.6: never a skip of a selected one).
    fn pass_over(&mut self, i: usize, s: usize, to: u64) -> Result<(), Broken> {
        let sub = &self.subs[i];
        let from = sub.next[s];
        if let Some((offset, e)) = self.model[s]
            .range(from..to)
            .find(|(_, e)| sub.wants(e.event))
        {
            return Err((
                "2.6 resume is exact: a filtered subscriber never skips a selected event",
                format!(
                    "subscriber {i} moved on shard {s} from {from} to {to} past selected event {} at {offset}",
                    e.event
                ),
            ));
        }
        let passed = self.model[s].range(from..to).map(|(&o, e)| (o, e.event));
        self.subs[i].covered[s].extend(passed);
        self.subs[i].next[s] = to;
        Ok(())
    }

    /// A filtered subscriber's positions, moved to its cursor (checked).
    fn pass_over_to(&mut self, i: usize, cursor: &Cursor) -> Result<(), Broken> {
        if !self.subs[i].filtered {
            return Ok(());
        }
        for s in 0..self.shards as usize {
            let to = cursor.offsets()[s];
            if to > self.subs[i].next[s] {
                self.pass_over(i, s, to)?;
            }
        }
        Ok(())
    }

    /// Subscriber `i` disconnects and resumes from its cursor at once.
    fn reconnect(&mut self, i: usize) -> Result<(), Broken> {
        let Some(open) = self.subs[i].sub.take() else {
            return Ok(());
        };
        let cursor = open.cursor();
        drop(open);
        self.pass_over_to(i, &cursor)?;
        // 2.6: the cursor is exactly what was delivered.
        if cursor.offsets() != self.subs[i].next.as_slice() {
            return Err((
                "2.6 a cursor records exactly what was delivered",
                format!(
                    "subscriber {i}: cursor {:?}, delivered up to {:?}",
                    cursor.offsets(),
                    self.subs[i].next
                ),
            ));
        }
        self.subs[i].cursor = Some(cursor);
        let reopened = self
            .open_or_skip(i, false)?
            .map_err(|e| ("2.6 a cursor of this engine's life resumes", e.to_string()))?;
        self.subs[i].sub = Some(reopened);
        self.note(format!("subscriber {i} reconnected"));
        Ok(())
    }

    /// After a restart (2.6): a subscriber's cursor resumes exactly if
    /// everything it was delivered survived, and is refused as truncated
    /// (never resumed silently) if the crash took some of it back.
    fn resume_after_restart(&mut self, i: usize) -> Result<(), Broken> {
        if self.subs[i].cursor.is_none() {
            return Ok(());
        }
        let lost: Vec<bool> = (0..self.shards as usize)
            .map(|s| {
                self.subs[i].covered[s].iter().any(|(offset, event)| {
                    self.model[s].get(offset).is_none_or(|e| e.event != *event)
                })
            })
            .collect();
        match self.open_or_skip(i, false)? {
            Ok(reopened) => {
                if let Some(s) = lost.iter().position(|&l| l) {
                    return Err((
                        "2.6 a cursor past events a crash took back is refused as truncated, never resumed",
                        format!("subscriber {i} resumed on shard {s} past lost events"),
                    ));
                }
                self.subs[i].sub = Some(reopened);
                self.note(format!("subscriber {i} resumed"));
            }
            Err(SubscribeError::Truncated {
                shard,
                surviving_end,
                ..
            }) => {
                if !lost[shard as usize] {
                    return Err((
                        "2.6 a cursor is refused as truncated only if events it covers were lost",
                        format!(
                            "subscriber {i}: shard {shard} truncated at {surviving_end}, nothing it saw was lost"
                        ),
                    ));
                }
                // The documented way on: resume each truncated shard from
                // its surviving end (explicitly), forgetting what was lost.
                let reopened = self.open_or_skip(i, true)?.map_err(|e| {
                    (
                        "2.6 a truncated cursor resumes from the surviving end when asked",
                        e.to_string(),
                    )
                })?;
                let cursor = reopened.cursor();
                let sub = &mut self.subs[i];
                for (s, (&next, &lost)) in cursor.offsets().iter().zip(&lost).enumerate() {
                    if next != sub.next[s] && !lost {
                        return Err((
                            "2.6 resuming a truncated cursor moves only the truncated shards",
                            format!("subscriber {i} shard {s}: {} became {next}", sub.next[s]),
                        ));
                    }
                    sub.next[s] = next;
                    sub.covered[s].retain(|&offset, _| offset < next);
                }
                sub.sub = Some(reopened);
                self.note(format!(
                    "subscriber {i} resumed after truncation on shard {shard}"
                ));
            }
            Err(e) => {
                return Err((
                    "2.6 a cursor resumes or is refused as truncated",
                    format!("subscriber {i}: {e}"),
                ))
            }
        }
        Ok(())
    }

    /// A retention pass the core asked for: whole old segments go.
    fn retention(&mut self, shard: usize) -> Result<(), Broken> {
        let policy = RetentionPolicy {
            max_age: None,
            max_bytes: Some(64 << 10),
        };
        let node = &mut self.nodes[shard];
        if node.core.is_latched() {
            return Ok(());
        }
        let Ok(outcome) = block_on(node.log.apply_retention(policy, self.clock_ns)) else {
            self.note(format!("retention shard {shard}: failed"));
            return Ok(());
        };
        node.core.retention_applied(&outcome, &node.log);
        let w = node.core.shared().watermarks.snapshot();
        // 2.7 / 2.3: retention removes whole segments that are durable, never
        // what a crash could still need to replay or a reader has not got on disk.
        if w.retained_from > w.flushed_next {
            return Err((
                "2.7 retention removes only durable, whole segments",
                format!(
                    "shard {shard}: retained from {}, flushed {}",
                    w.retained_from, w.flushed_next
                ),
            ));
        }
        self.retained[shard] = w.retained_from;
        self.note(format!(
            "retention shard {shard}: retained from {}",
            w.retained_from
        ));
        Ok(())
    }

    /// A subscription failed: only a cursor below the retained range may
    /// (2.7), answered with the oldest retained offset, never a silent skip;
    /// the subscriber then skips there explicitly, as a client would.
    fn subscription_failed(&mut self, i: usize, e: SubscribeError) -> Result<(), Broken> {
        let mut open = self.subs[i].sub.take().expect("it was polled");
        // 2.10: a subscription's error is final. Polled again, it fails
        // again; it never turns into a clean end or goes on past the error.
        match open.poll() {
            Err(again) if again == e => {}
            other => {
                return Err((
                    "2.10 a subscription's final error is never turned into a clean end",
                    format!(
                        "subscriber {i} failed with {e}, then polled: {}",
                        match other {
                            Ok(Step::Event(ev)) => format!("event {}:{}", ev.shard, ev.offset),
                            Ok(Step::Pending) => "pending".into(),
                            Ok(Step::End) => "end".into(),
                            Err(e) => e.to_string(),
                        }
                    ),
                ))
            }
        }
        let cursor = open.cursor();
        self.pass_over_to(i, &cursor)?;
        match e {
            SubscribeError::BelowRetention {
                shard,
                offset,
                retained_from,
                ..
            } if self.below_retention_holds(i, shard, offset, retained_from) => {
                self.skip_to(i, cursor, shard, retained_from);
                Ok(())
            }
            e => Err((
                "a live subscription fails only below retention",
                format!("subscriber {i}: {e}"),
            )),
        }
    }

    /// The BelowRetention error names what it should: this subscriber's next
    /// offset, below the shard's oldest retained one.
    fn below_retention_holds(&self, i: usize, shard: u32, offset: u64, retained_from: u64) -> bool {
        let s = shard as usize;
        let now = self.nodes[s]
            .core
            .shared()
            .watermarks
            .snapshot()
            .retained_from;
        offset == self.subs[i].next[s] && offset < retained_from && retained_from == now
    }

    /// The subscriber's cursor, with `shard` moved to `to` (an explicit skip).
    fn skip_to(&mut self, i: usize, cursor: Cursor, shard: u32, to: u64) {
        let s = shard as usize;
        let mut next = cursor.offsets().to_vec();
        let mut gens = cursor
            .generations()
            .map_or_else(|| vec![0; next.len()], <[u32]>::to_vec);
        next[s] = to;
        gens[s] = match to {
            0 => 0,
            to => self.nodes[s].log.generations().of_offset(to - 1),
        };
        let sub = &mut self.subs[i];
        sub.cursor = Some(Cursor::with_generations(next, gens));
        sub.next[s] = to;
        self.retention_skips += 1;
        self.note(format!(
            "subscriber {i} skipped shard {shard} to retained {to}"
        ));
    }

    /// Opens subscriber `i` from its cursor; a cursor below the retained
    /// range is refused (2.7) and then skipped forward explicitly.
    fn open_or_skip(
        &mut self,
        i: usize,
        resume_truncated: bool,
    ) -> Result<Result<Subscription, SubscribeError>, Broken> {
        for _ in 0..=self.shards {
            match self.open_sub(i, resume_truncated) {
                Err(SubscribeError::BelowRetention {
                    shard,
                    offset,
                    retained_from,
                    ..
                }) => {
                    if !self.below_retention_holds(i, shard, offset, retained_from) {
                        return Err((
                            "2.7 a cursor below the retained range is refused naming the oldest retained offset",
                            format!("subscriber {i}: shard {shard} offset {offset}, retained from {retained_from}"),
                        ));
                    }
                    let cursor = self.subs[i].cursor.clone().expect("a cursor was refused");
                    self.skip_to(i, cursor, shard, retained_from);
                }
                Ok(opened) if self.subs[i].cursor.is_none() => {
                    // From the beginning: at each shard's oldest retained event.
                    let from = opened.cursor();
                    for (s, node) in self.nodes.iter().enumerate() {
                        let retained = node.core.shared().watermarks.snapshot().retained_from;
                        if from.offsets()[s] != retained {
                            return Err((
                                "2.7 a subscription from the beginning starts at the oldest retained event",
                                format!("subscriber {i} shard {s}: starts at {}, retained from {retained}", from.offsets()[s]),
                            ));
                        }
                    }
                    self.subs[i].next = from.offsets().to_vec();
                    return Ok(Ok(opened));
                }
                other => return Ok(other),
            }
        }
        Err((
            "2.7 a cursor below retention is refused once per shard",
            format!("subscriber {i}"),
        ))
    }

    /// One round with faults stopped: a millisecond passes, and every shard
    /// takes its queue, flushes what it holds and answers claims.
    fn settle(&mut self) -> Result<(), Broken> {
        self.clock_ns += 1_000_000;
        for shard in 0..self.shards as usize {
            self.take(shard)?;
            self.nodes[shard].core.flush_interval_passed();
            self.nodes[shard].core.space_retry_due();
            while self.flush_io_on(shard)? {}
            self.nodes[shard].core.answer_claim(self.clock_ns);
        }
        self.check_shards()
    }

    /// Faults stop: the shards flush everything and answer claims, and every
    /// subscriber must then catch up with every committed event (liveness).
    fn quiesce(&mut self) -> Result<(), Broken> {
        for storage in &self.storages {
            storage.set_faults(Faults::default());
        }
        self.stalled.iter_mut().for_each(|s| *s = 0);
        for (shard, full) in self.disk_full.iter_mut().enumerate() {
            *full = 0;
            self.storages[shard].fill_disk(false);
        }
        if self.nodes.iter().any(|n| n.core.is_latched()) {
            self.restart(false)?;
        }
        for _round in 0..64 {
            self.settle()?;
            for i in 0..self.subs.len() {
                self.poll_sub(i, 1 << 20)?;
                // A filtered cursor passes unselected events it never delivers.
                if let Some(cursor) = self.subs[i].sub.as_ref().map(Subscription::cursor) {
                    self.pass_over_to(i, &cursor)?;
                }
            }
            let caught_up = self.subs.iter().all(|sub| {
                (0..self.shards as usize)
                    .all(|s| sub.next[s] == self.nodes[s].core.shared().watermarks.committed_next())
            });
            if caught_up && self.pending.is_empty() {
                return Ok(());
            }
        }
        let behind: Vec<_> = self.subs.iter().map(|s| s.next.clone()).collect();
        let committed: Vec<_> = self
            .nodes
            .iter()
            .map(|n| n.core.shared().watermarks.committed_next())
            .collect();
        Err((
            "liveness: once faults stop, every subscriber catches up and every durable wait is answered",
            format!(
                "subscribers at {behind:?}, committed {committed:?}, durable waits unanswered: {:?}",
                self.pending.values().map(|p| (p.shard, p.needed)).collect::<Vec<_>>()
            ),
        ))
    }
}

/// The stamps of `count` events of producer `id` from sequence `first`.
fn stamps(id: u64, first: u64, count: u64) -> Vec<Option<ProducerStamp>> {
    (first..first + count)
        .map(|sequence| {
            Some(ProducerStamp {
                producer_id: id,
                sequence,
            })
        })
        .collect()
}

/// Frames events (their ids as payloads) as the engine does for one shard.
fn frame(events: &[u64], stamps: &[Option<ProducerStamp>]) -> Vec<u8> {
    let mut out = Vec::new();
    for (event, stamp) in events.iter().zip(stamps) {
        let payload = event.to_le_bytes();
        let directory = format!("/sim/{}", event % 3);
        let record = Record {
            ts: 0,
            offset: 0,
            kind: Kind::Create,
            signatures: Signatures::new(&[]),
            directory: &directory,
            old_name: "",
            new_name: "entry",
            new_parent: "",
            payload: &payload,
            producer: *stamp,
        };
        let at = out.len();
        out.resize(at + record.encoded_len(), 0);
        record
            .encode_into(&mut out[at..])
            .expect("the simulator's records are valid");
    }
    out
}

/// Every record of a log as (offset, ts, event id, producer stamp).
type Kept = Vec<(u64, i64, u64, Option<ProducerStamp>)>;

fn read_log(log: &Log<MemStorage>) -> Result<Kept, String> {
    let mut kept = Vec::new();
    for location in log.chunks().collect::<Vec<_>>() {
        let buf = block_on(log.read_chunk(&location)).map_err(|e| e.to_string())?;
        let header = crate::chunk::ChunkHeader::decode(&buf).map_err(|e| e.to_string())?;
        let body = crate::chunk::body_of(&buf, &header).map_err(|e| e.to_string())?;
        for record in crate::chunk::records(body) {
            let record = record.map_err(|e| e.to_string())?;
            let event = u64::from_le_bytes(
                record
                    .payload
                    .try_into()
                    .map_err(|_| "a payload that is not an event id".to_string())?,
            );
            kept.push((record.offset, record.ts, event, record.producer));
        }
    }
    Ok(kept)
}
