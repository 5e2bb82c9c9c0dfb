//! Deterministic simulation of subscription streams: the server's side of
//! docs/design.md 2.10, with 2.5, 2.6 and 2.7 as a client sees them.
//!
//! One thread, one seed: the engine's simulated shards
//! ([`ringfeed_engine::sim::Sim`], with its own oracle) take appends,
//! flushes, claims, retention and faults, while clients follow them through
//! the server's real stream code ([`Streams::start`]: the sender task, its
//! bounded response queue, and the final status after it) on a
//! current-thread tokio runtime whose clock moves only when the simulation
//! moves it. Clients read fast, one response a step, or not at all; they
//! disconnect and resume from the last cursor they received; they ask for
//! batches, chunks, heartbeats or an end time. The simulation supersedes
//! streams (a newer epoch of the same client) and shuts the server down.
//!
//! The oracle reads exactly what a client reads. Every event is the next of
//! its shard and the one stored there (2.6); merged streams deliver in
//! `(ts, shard)` order (2.5); each response's cursor is exactly what was
//! delivered up to it (2.6); a heartbeat's watermark is below every event
//! delivered after it, and heartbeats and markers are items of their own
//! (2.10); a stream that failed ends with its error after everything queued
//! before it (superseded: CANCELLED naming the new epoch; shut down:
//! UNAVAILABLE; below retention: OUT_OF_RANGE naming the shard, 2.7), and a
//! stream ends clean only once its `until_ns` is reached with every event up
//! to it delivered (2.10: a final error is never turned into a clean end).
//! At the end, with faults stopped, every client catches up within a bounded
//! number of rounds (liveness).
//!
//! One seed in three runs a crowd ([`Crowd::of_seed`]): 30 clients sharing a
//! response budget of two responses, far below what they would hold at
//! once. The budget bounds how many responses exist, never whether a
//! stream finishes: with a stream keeping its last response's budget while
//! it waited for the next one's, every such seed stood still (issue 41).

mod clients;
mod oracle;
mod world;

use std::collections::hash_map::DefaultHasher;
use std::sync::Arc;

use ringfeed_engine::sim::{Fault, Sim, SimConfig, SimFailure};
use ringfeed_engine::{Cursor, Ordering};
use ringfeed_proto::tonic::Code;
use tokio::sync::watch;

use crate::registry::Registry;
use crate::sender::{Responses, Streams};

pub use clients::Crowd;

/// The engine faults a stream simulation runs with: everything but the
/// restarts and the I/O failures that lead to them (a restart ends every
/// stream with the process; the shard simulation covers resuming after one).
pub fn stream_faults(faults: &[Fault]) -> Vec<Fault> {
    faults
        .iter()
        .copied()
        .filter(|f| {
            matches!(
                f,
                Fault::ClockStep | Fault::Retry | Fault::StalledSync | Fault::Cancel
            )
        })
        .collect()
}

/// Rounds after the faults stop in which every stream must catch up.
const QUIESCE_ROUNDS: usize = 64;

/// What a run that held every invariant did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamOutcome {
    /// Streams opened.
    pub streams: u64,
    /// Events clients received, each checked.
    pub events: u64,
    pub heartbeats: u64,
    /// Streams that ended with their final error, by code.
    pub cancelled: u64,
    pub unavailable: u64,
    pub out_of_range: u64,
    /// Streams that ended clean at their `until_ns`.
    pub clean_ends: u64,
    /// Responses queued from another stream's encoding (encode once for all).
    pub shared_responses: u64,
    /// A hash of everything clients received: the same seed, the same digest.
    pub digest: u64,
}

/// Runs the stream simulation of one seed over `config.shards` simulated
/// shards for `config.steps` steps (only the faults [`stream_faults`] keeps).
pub fn run(seed: u64, config: &SimConfig) -> Result<StreamOutcome, SimFailure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds");
    let config = SimConfig {
        faults: stream_faults(&config.faults),
        ..config.clone()
    };
    runtime.block_on(async {
        let mut world = World::new(seed, &config);
        let crowd = Crowd::of_seed(seed);
        world.sim.note(format!(
            "{} clients share a response budget of {} bytes",
            crowd.clients, crowd.response_budget_bytes
        ));
        for step in 0..config.steps {
            world.sim.step(step)?;
            let result = world.step().await;
            world.sim.check(step, result)?;
        }
        world.sim.quiesce(config.steps)?;
        for _round in 0..QUIESCE_ROUNDS {
            world.sim.settle(config.steps)?;
            let result = world.quiesce_round().await;
            if world.sim.check(config.steps, result)? {
                return Ok(world.outcome());
            }
        }
        let result = world.stuck();
        world.sim.check(config.steps, result)?;
        Ok(world.outcome())
    })
}

/// One stream as its client reads it.
struct ClientStream {
    /// Its client's id.
    client: u64,
    responses: Responses,
    ordering: Ordering,
    chunk_mode: bool,
    until_ns: Option<i64>,
    /// Per shard: the offset of the next event.
    next: Vec<u64>,
    /// The last cursor received.
    cursor: Cursor,
    last_merged: Option<(i64, u32)>,
    /// The highest heartbeat watermark received.
    heartbeat_mark: i64,
    /// Chunk mode: the marker that ends the chunks was received.
    chunks_ended: bool,
    /// Final errors this stream may end with besides OUT_OF_RANGE, each with
    /// the epoch that superseded it (CANCELLED) or 0.
    may_fail: Vec<(Code, u64)>,
    /// The final error was received: only the end may follow.
    failed: bool,
}

struct Client {
    id: u64,
    epoch: u64,
    ordering: Ordering,
    chunk_mode: bool,
    batching: bool,
    heartbeat: bool,
    /// Responses read per step: 0 (stalled), 1, or all.
    pace: u64,
    /// Reads one response in 30 steps, whatever its pace.
    paused: bool,
    stream: Option<ClientStream>,
    /// Where it resumes: the last cursor it received (none yet: the beginning).
    cursor: Option<Cursor>,
    /// It ended clean at its until_ns: it does not reconnect.
    finished: bool,
}

struct World {
    sim: Sim,
    streams: Streams,
    registry: Arc<Registry>,
    shutdown: watch::Sender<bool>,
    clients: Vec<Client>,
    /// Streams whose client moved on (superseded, shut down), still read to
    /// their end: each must end with its final error.
    draining: Vec<ClientStream>,
    digest: DefaultHasher,
    outcome: StreamOutcome,
}
