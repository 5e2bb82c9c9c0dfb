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

mod bucket;
mod config;
mod faults;
mod flush;
mod oracle;
mod outcome;
mod rng;
mod subscribers;
mod workload;
mod world;

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::sync::Arc;

use crate::log::{Log, LogConfig, SyncTicket};
use crate::record::ProducerStamp;
#[cfg(doc)]
use crate::shard::core::FlushIo;
use crate::shard::core::{CoreLimits, ShardCore};
use crate::shard::ShardShared;
use crate::storage::{MemFile, MemStorage};
use crate::subscribe::{
    Cursor, Ordering as SubOrdering, SubscribeError, SubscribeRequest, Subscription,
};

pub use config::{Fault, SimConfig};
pub use outcome::{Broken, SimFailure, SimOutcome};
use rng::Rng;

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
            bucket_fetches: world.bucket.as_ref().map_or(0, |b| b.counts().0),
            bucket_fetch_failures: world.bucket.as_ref().map_or(0, |b| b.counts().1),
            uploads_lost: world.uploads_lost,
            digest: world.digest.finish(),
        }
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
    /// The object store, in seeds that have one.
    bucket: Option<Arc<bucket::SimBucket>>,
    /// Uploads lost before their manifest named them.
    uploads_lost: u64,
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
