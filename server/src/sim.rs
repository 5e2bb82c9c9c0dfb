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

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use ringfeed_engine::sim::{Broken, Fault, Sim, SimConfig, SimFailure};
use ringfeed_engine::{
    record, Cursor, Ordering, Start, SubscribeError, SubscribeRequest, Subscription,
};
use ringfeed_proto::tonic::{Code, Status};
use ringfeed_proto::{v1, RawItem, RawSubscribeResponse};
use tokio::sync::watch;

use crate::metrics::ServerMetrics;
use crate::registry::{Registered, Registry};
use crate::sender::{Admission, Responses, StreamOptions, Streams, SubscriberLimits};
use crate::shared::Groups;

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

/// How many clients follow the shards, and the response budget their
/// streams share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crowd {
    pub clients: usize,
    pub response_budget_bytes: usize,
}

impl Crowd {
    /// The crowd seed `seed` runs: one seed in three (`seed % 3 == 0`) 30
    /// clients on a budget of two responses; the others 6 clients on 16.
    pub fn of_seed(seed: u64) -> Crowd {
        match seed % 3 {
            0 => Crowd {
                clients: 30,
                response_budget_bytes: 2 * BATCH_MAX_BYTES,
            },
            _ => Crowd {
                clients: 6,
                response_budget_bytes: 16 * BATCH_MAX_BYTES,
            },
        }
    }
}

/// The simulated streams' largest batch (and twice their largest chunk).
const BATCH_MAX_BYTES: usize = 4 << 10;

/// Each client's pattern, by `client index % 6`: ordering, chunk mode,
/// batching, heartbeats. The sixth is paused: it reads one response now
/// and then, so it falls behind the ring and past retention.
const PATTERNS: [(Ordering, bool, bool, bool); 6] = [
    (Ordering::Merged, false, false, true),
    (Ordering::Merged, false, true, false),
    (Ordering::PerShard, false, true, true),
    (Ordering::Merged, true, false, true),
    (Ordering::PerShard, true, true, false),
    (Ordering::Merged, false, true, true),
];

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

impl World {
    fn new(seed: u64, config: &SimConfig) -> World {
        let sim = Sim::new(seed, config);
        let crowd = Crowd::of_seed(seed);
        let limits = SubscriberLimits {
            batch_max_events: 16,
            batch_max_bytes: BATCH_MAX_BYTES,
            queue_responses: 4,
            response_budget_bytes: crowd.response_budget_bytes,
            backlog_readers: 2,
            chunk_max_bytes: BATCH_MAX_BYTES / 2,
            send_buffer_bytes: 4 << 10,
            ..SubscriberLimits::default()
        };
        let metrics = Arc::new(ServerMetrics::default());
        let streams = Streams {
            shards: sim.shards().into(),
            admission: Arc::new(Admission::new(&limits, metrics.clone())),
            limits: Arc::new(limits),
            metrics,
            groups: Groups::default(),
        };
        let clients = (0..crowd.clients)
            .map(|i| {
                let (ordering, chunk_mode, batching, heartbeat) = PATTERNS[i % PATTERNS.len()];
                Client {
                    paused: i % PATTERNS.len() == 5,
                    id: i as u64 + 1,
                    epoch: 0,
                    ordering,
                    chunk_mode,
                    batching,
                    heartbeat,
                    pace: u64::MAX,
                    stream: None,
                    cursor: None,
                    finished: false,
                }
            })
            .collect();
        World {
            sim,
            streams,
            registry: Arc::new(Registry::default()),
            shutdown: watch::channel(false).0,
            clients,
            draining: Vec::new(),
            digest: DefaultHasher::new(),
            outcome: StreamOutcome::default(),
        }
    }

    fn outcome(&self) -> StreamOutcome {
        StreamOutcome {
            digest: self.digest.finish(),
            shared_responses: self.streams.metrics.shared_responses_reused(),
            ..self.outcome.clone()
        }
    }

    async fn step(&mut self) -> Result<(), Broken> {
        if self.sim.restarts() > 0 {
            return Err((
                "the stream simulation runs without restarts",
                "a restart happened: its faults are filtered by stream_faults".into(),
            ));
        }
        let c = self.sim.below(self.clients.len() as u64) as usize;
        let paused = self.clients[c].paused;
        match self.sim.below(1000) {
            // The paused client keeps its stream, so it meets retention.
            _ if paused => {}
            // A disconnect: the client drops its stream; it resumes later.
            0..=29 if self.clients[c].stream.take().is_some() => {
                self.sim.note(format!("client {c} disconnects"));
            }
            30..=79 => {
                let pace = match self.sim.below(3) {
                    0 => 0,
                    1 => 1,
                    _ => u64::MAX,
                };
                self.clients[c].pace = pace;
                self.sim.note(format!("client {c} reads {pace} per step"));
            }
            80..=89 => self.supersede(c)?,
            90 if self.sim.below(4) == 0 => self.shut_down(),
            _ => {}
        }
        // Clients without a stream come back now and then.
        for c in 0..self.clients.len() {
            let client = &self.clients[c];
            if client.stream.is_none() && !client.finished && self.sim.below(20) == 0 {
                self.connect(c)?;
            }
        }
        self.run_for(Duration::from_millis(1)).await;
        for c in 0..self.clients.len() {
            let pace = match self.clients[c].paused {
                true => u64::from(self.sim.below(30) == 0),
                false => self.clients[c].pace,
            };
            self.read_client(c, pace)?;
        }
        self.read_draining()?;
        Ok(())
    }

    /// Lets the sender tasks run, then moves the runtime's clock by `by`
    /// (heartbeat timers fire as it passes them).
    async fn run_for(&mut self, by: Duration) {
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
        tokio::time::advance(by).await;
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }

    /// Opens client `c`'s stream from its cursor (a new epoch), skipping a
    /// shard below retention forward explicitly, as a client told so would.
    fn connect(&mut self, c: usize) -> Result<(), Broken> {
        let shards = self.sim.shards();
        let sub = loop {
            let client = &self.clients[c];
            let until_ns = (!client.chunk_mode && self.sim.below(4) == 0).then(|| {
                let newest = shards
                    .iter()
                    .map(|s| s.watermarks.snapshot().committed_ts)
                    .max()
                    .unwrap_or(0);
                newest + self.sim.below(50_000_000) as i64
            });
            let client = &self.clients[c];
            let request = SubscribeRequest {
                ordering: client.ordering,
                until_ns,
                ..SubscribeRequest::from(match &client.cursor {
                    Some(cursor) => Start::Cursor(cursor.clone()),
                    None => Start::Beginning,
                })
            };
            match self.sim.subscribe(request) {
                Ok(sub) => break (sub, until_ns),
                Err(SubscribeError::BelowRetention {
                    shard,
                    offset,
                    retained_from,
                    ..
                }) => {
                    let Some(mut cursor) = client.cursor.clone() else {
                        return Err((
                            "2.7 a subscription from the beginning starts at the oldest retained event",
                            format!("client {c}: refused below retention on shard {shard}"),
                        ));
                    };
                    if cursor.next_offset(shard) != offset || offset >= retained_from {
                        return Err((
                            "2.7 a cursor below the retained range is refused naming the oldest retained offset",
                            format!("client {c}: shard {shard} offset {offset}, retained from {retained_from}"),
                        ));
                    }
                    cursor = skip_to(&shards, cursor, shard, retained_from);
                    self.clients[c].cursor = Some(cursor);
                    self.sim.note(format!(
                        "client {c} skips shard {shard} to retained {retained_from}"
                    ));
                }
                Err(e) => {
                    return Err((
                        "2.6 a cursor a client received resumes",
                        format!("client {c}: {e}"),
                    ))
                }
            }
        };
        let (sub, until_ns) = sub;
        let client = &mut self.clients[c];
        client.epoch += 1;
        let registered = self.register(c)?;
        let stream = self.start(c, sub, until_ns, registered);
        self.clients[c].stream = Some(stream);
        self.outcome.streams += 1;
        self.sim
            .note(format!("client {c} connects (until {until_ns:?})"));
        Ok(())
    }

    fn register(&mut self, c: usize) -> Result<Registered, Broken> {
        let client = &self.clients[c];
        let info = v1::SubscriberInfo {
            client_name: "sim".into(),
            client_id: client.id,
            client_epoch: client.epoch,
            ..Default::default()
        };
        let (registered, superseded) = self.registry.register(info, "").map_err(|s| {
            (
                "a client's next epoch registers",
                format!("client {c}: {}", s.message()),
            )
        })?;
        if superseded.is_some() {
            // A stream of this client still registered (its sender has not
            // yet seen it go): it may now end superseded.
            let epoch = self.clients[c].epoch;
            let id = self.clients[c].id;
            for stream in self.draining.iter_mut().filter(|s| s.client == id) {
                if !stream.may_fail.contains(&(Code::Cancelled, epoch)) {
                    stream.may_fail.push((Code::Cancelled, epoch));
                }
            }
        }
        Ok(registered)
    }

    fn start(
        &self,
        c: usize,
        sub: Subscription,
        until_ns: Option<i64>,
        registered: Registered,
    ) -> ClientStream {
        let client = &self.clients[c];
        let cursor = sub.cursor();
        let options = StreamOptions {
            batching: client.batching,
            heartbeat: client.heartbeat.then_some(Duration::from_millis(10)),
            chunk_mode: client.chunk_mode,
            scope: None,
        };
        let responses = self
            .streams
            .start(sub, options, registered, self.shutdown.subscribe());
        ClientStream {
            client: client.id,
            responses,
            ordering: client.ordering,
            chunk_mode: client.chunk_mode,
            until_ns,
            next: cursor.offsets().to_vec(),
            cursor,
            last_merged: None,
            heartbeat_mark: i64::MIN,
            chunks_ended: false,
            may_fail: Vec::new(),
            failed: false,
        }
    }

    /// A newer epoch of client `c` connects while its stream is open: the
    /// old stream must end CANCELLED naming the new epoch, after what it
    /// had queued.
    fn supersede(&mut self, c: usize) -> Result<(), Broken> {
        let Some(mut old) = self.clients[c].stream.take() else {
            return Ok(());
        };
        let epoch = self.clients[c].epoch + 1;
        old.may_fail.push((Code::Cancelled, epoch));
        self.clients[c].cursor = Some(old.cursor.clone());
        self.draining.push(old);
        self.sim
            .note(format!("client {c} superseded by epoch {epoch}"));
        self.connect(c)
    }

    /// The server shuts down: every stream must end UNAVAILABLE after what
    /// it had queued; a new server life starts (clients reconnect).
    fn shut_down(&mut self) {
        let _ = self.shutdown.send(true);
        for stream in &mut self.draining {
            stream.may_fail.push((Code::Unavailable, 0));
        }
        for client in &mut self.clients {
            if let Some(mut stream) = client.stream.take() {
                stream.may_fail.push((Code::Unavailable, 0));
                client.cursor = Some(stream.cursor.clone());
                self.draining.push(stream);
            }
        }
        self.shutdown = watch::channel(false).0;
        self.sim.note("server shuts down".into());
    }

    /// Client `c` reads up to `max` responses of its stream, each checked.
    fn read_client(&mut self, c: usize, max: u64) -> Result<(), Broken> {
        let Some(mut stream) = self.clients[c].stream.take() else {
            return Ok(());
        };
        let ended = self.read(&mut stream, max, &format!("client {c}"))?;
        self.clients[c].cursor = Some(stream.cursor.clone());
        match ended {
            Some(End::Clean) => self.clients[c].finished = true,
            Some(End::Failed) => {}
            None => self.clients[c].stream = Some(stream),
        }
        Ok(())
    }

    fn read_draining(&mut self) -> Result<(), Broken> {
        let mut draining = std::mem::take(&mut self.draining);
        let mut kept = Vec::new();
        for (i, mut stream) in draining.drain(..).enumerate() {
            if self
                .read(&mut stream, u64::MAX, &format!("draining stream {i}"))?
                .is_none()
            {
                kept.push(stream);
            }
        }
        kept.append(&mut self.draining);
        self.draining = kept;
        Ok(())
    }

    /// Reads up to `max` responses: `Some` once the stream has ended.
    fn read(&mut self, s: &mut ClientStream, max: u64, who: &str) -> Result<Option<End>, Broken> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut read = 0;
        while read < max {
            match s.responses.as_mut().poll_next(&mut cx) {
                Poll::Pending => return Ok(None),
                Poll::Ready(Some(Ok(response))) => {
                    if s.failed {
                        return Err((
                            "2.10 a stream's final error is its last item",
                            format!("{who}: a response after the final error"),
                        ));
                    }
                    self.response(s, response, who)?;
                    read += 1;
                }
                Poll::Ready(Some(Err(status))) => {
                    if s.failed {
                        return Err((
                            "2.10 a stream's final error is its last item",
                            format!("{who}: a second final error {status}"),
                        ));
                    }
                    self.final_error(s, &status, who)?;
                    self.sim.note(format!(
                        "{who} stream fails: {:?} {}",
                        status.code(),
                        status.message()
                    ));
                    s.failed = true;
                    read += 1;
                }
                Poll::Ready(None) if s.failed => return Ok(Some(End::Failed)),
                Poll::Ready(None) => {
                    self.sim.note(format!("{who} stream ends clean"));
                    self.clean_end(s, who)?;
                    return Ok(Some(End::Clean));
                }
            }
        }
        Ok(None)
    }

    /// A response: its item checked, then its cursor.
    fn response(
        &mut self,
        s: &mut ClientStream,
        response: RawSubscribeResponse,
        who: &str,
    ) -> Result<(), Broken> {
        let response = response
            .into_fields()
            .map_err(|e| ("responses decode", format!("{who}: {e}")))?;
        let Some(item) = response.item else {
            return Err(("every response carries an item", who.to_string()));
        };
        match item {
            RawItem::Event(e) => {
                let payload = e.event.unwrap_or_default();
                self.event(s, (e.shard, e.offset, e.ts_ns), &payload, who, true)?;
            }
            RawItem::Batch(batch) => {
                if batch.events.is_empty() {
                    return Err(("a batch carries events", format!("{who}: an empty batch")));
                }
                for e in batch.events {
                    let payload = e.event.unwrap_or_default();
                    self.event(s, (e.shard, e.offset, e.ts_ns), &payload, who, true)?;
                }
            }
            RawItem::Chunk(chunk) => self.chunk(s, &chunk, who)?,
            RawItem::Heartbeat(beat) => {
                // 2.10: a control message of its own, and truthful: every
                // event delivered after it is stamped above its watermark.
                s.heartbeat_mark = s.heartbeat_mark.max(beat.merged_watermark_ns);
                self.outcome.heartbeats += 1;
            }
            RawItem::ChunkModeEnd(_) => {
                if !s.chunk_mode || s.chunks_ended {
                    return Err((
                        "2.10 the chunk-mode marker comes once, in chunk mode",
                        who.to_string(),
                    ));
                }
                s.chunks_ended = true;
            }
        }
        // 2.6: each response's cursor is exactly what was delivered up to it.
        let cursor = Cursor::from_bytes(&response.cursor)
            .map_err(|e| ("responses carry a valid cursor", format!("{who}: {e}")))?;
        if cursor.offsets() != s.next.as_slice() {
            return Err((
                "2.6 a response's cursor is exactly what was delivered up to it",
                format!(
                    "{who}: cursor {:?}, delivered up to {:?}",
                    cursor.offsets(),
                    s.next
                ),
            ));
        }
        s.cursor = cursor;
        Ok(())
    }

    fn chunk(
        &mut self,
        s: &mut ClientStream,
        chunk: &v1::ChunkMessage,
        who: &str,
    ) -> Result<(), Broken> {
        if !s.chunk_mode || s.chunks_ended {
            return Err((
                "2.10 chunks come only in chunk mode, before its marker",
                who.to_string(),
            ));
        }
        if crc32c::crc32c(&chunk.records) != chunk.crc32c {
            return Err(("a chunk's checksum covers its records", who.to_string()));
        }
        let bad = |e: record::RecordError| ("chunks hold whole records", format!("{who}: {e}"));
        let mut at = 0;
        for k in 0..u64::from(chunk.record_count) {
            let rest = chunk.records.get(at..).unwrap_or_default();
            let (len, offset, ts) = record::peek_position(rest).map_err(bad)?;
            let header = record::peek_header(rest).map_err(bad)?;
            let payload = rest.get(header.payload_at..len).unwrap_or_default();
            if offset != chunk.first_offset + k {
                return Err((
                    "chunks are dense",
                    format!(
                        "{who}: offset {offset} at {k} of a chunk from {}",
                        chunk.first_offset
                    ),
                ));
            }
            // Chunks go out by run, not merged event by event.
            self.event(s, (chunk.shard, offset, ts), payload, who, false)?;
            at += len;
        }
        if at != chunk.records.len() {
            return Err(("a chunk holds exactly its records", who.to_string()));
        }
        Ok(())
    }

    /// One delivered event at `(shard, offset, ts)`; `in_order` when it
    /// came as an event rather than inside a chunk (chunks go out by run).
    fn event(
        &mut self,
        s: &mut ClientStream,
        (shard, offset, ts): (u32, u64, i64),
        payload: &[u8],
        who: &str,
        in_order: bool,
    ) -> Result<(), Broken> {
        let sh = shard as usize;
        if sh >= s.next.len() {
            return Err((
                "events name a shard of the engine",
                format!("{who}: shard {shard}"),
            ));
        }
        // 2.6: exactly the next event of its shard, never a skip or a repeat.
        if offset != s.next[sh] {
            return Err((
                "2.6 resume is exact: a stream never skips and never repeats an event",
                format!(
                    "{who}: got {shard}:{offset}, expected {shard}:{}",
                    s.next[sh]
                ),
            ));
        }
        let event = <[u8; 8]>::try_from(payload).map(u64::from_le_bytes).ok();
        let stored = self.sim.event_at(shard, offset);
        if event.is_none() || stored != event.map(|e| (e, ts)) {
            return Err((
                "streams carry exactly the appended events",
                format!("{who}: got {event:?} ts {ts} at {shard}:{offset}, stored {stored:?}"),
            ));
        }
        if ts <= s.heartbeat_mark {
            return Err((
                "2.10 a heartbeat's watermark is below every event delivered after it",
                format!(
                    "{who}: {shard}:{offset} ts {ts} after a heartbeat at {}",
                    s.heartbeat_mark
                ),
            ));
        }
        // 2.5: merged order is (ts, shard), the same on every replay.
        if in_order && s.ordering == Ordering::Merged {
            if s.last_merged.is_some_and(|last| (ts, shard) <= last) {
                return Err((
                    "2.5 a merged subscription delivers in (ts, source) order",
                    format!("{who}: ({ts}, shard {shard}) after {:?}", s.last_merged),
                ));
            }
            s.last_merged = Some((ts, shard));
        }
        s.next[sh] += 1;
        (shard, offset, ts).hash(&mut self.digest);
        self.outcome.events += 1;
        Ok(())
    }

    /// The stream's final error: one it was given cause for.
    fn final_error(&mut self, s: &ClientStream, status: &Status, who: &str) -> Result<(), Broken> {
        status.code().hash(&mut self.digest);
        if status.code() == Code::OutOfRange {
            // 2.7: only a stream whose next event retention removed.
            let shards = self.sim.shards();
            let below = shards
                .iter()
                .enumerate()
                .any(|(i, shard)| s.next[i] < shard.watermarks.snapshot().retained_from);
            if !below {
                return Err((
                    "2.7 a stream fails OUT_OF_RANGE only below the retained range",
                    format!("{who}: {status} at {:?}", s.next),
                ));
            }
            self.outcome.out_of_range += 1;
            return Ok(());
        }
        // Superseded: CANCELLED naming one of the epochs that replaced it
        // (a stream may be superseded again before its sender sees the first).
        let superseded_by = ringfeed_proto::wire::superseded_by(status);
        let expected = s.may_fail.iter().any(|&(code, epoch)| {
            code == status.code() && (code != Code::Cancelled || superseded_by == Some(epoch))
        });
        if !expected {
            return Err((
                "2.10 a stream fails only with an error it was given cause for",
                format!("{who}: {status}, causes {:?}", s.may_fail),
            ));
        }
        match status.code() {
            Code::Cancelled => self.outcome.cancelled += 1,
            _ => self.outcome.unavailable += 1,
        }
        Ok(())
    }

    /// A clean end: only at until_ns, with every event up to it delivered.
    fn clean_end(&mut self, s: &ClientStream, who: &str) -> Result<(), Broken> {
        let Some(until) = s.until_ns else {
            return Err((
                "2.10 a stream's final error is never turned into a clean end",
                format!(
                    "{who} ended clean without an until_ns (causes to fail: {:?}, at {:?})",
                    s.may_fail, s.next
                ),
            ));
        };
        for (shard, &next) in s.next.iter().enumerate() {
            if let Some((_, ts)) = self.sim.event_at(shard as u32, next) {
                if ts <= until {
                    return Err((
                        "2.10 a stream ends clean only once every event up to until_ns is delivered",
                        format!("{who}: ended before {shard}:{next} ts {ts}, until {until}"),
                    ));
                }
            }
        }
        self.outcome.clean_ends += 1;
        Ok(())
    }

    /// Faults have stopped and the shards are flushed: every client reads
    /// everything; each stream catches up with every shard (liveness).
    async fn quiesce_round(&mut self) -> Result<bool, Broken> {
        for client in &mut self.clients {
            client.pace = u64::MAX;
            client.paused = false;
        }
        {
            for c in 0..self.clients.len() {
                if self.clients[c].stream.is_none() && !self.clients[c].finished {
                    self.connect(c)?;
                }
            }
            self.run_for(Duration::from_millis(1)).await;
            // Fast clients: read, let the senders refill, until nothing comes.
            loop {
                let before = self.outcome.clone();
                for c in 0..self.clients.len() {
                    self.read_client(c, u64::MAX)?;
                }
                self.read_draining()?;
                if self.outcome == before {
                    break;
                }
                for _ in 0..8 {
                    tokio::task::yield_now().await;
                }
            }
            let shards = self.sim.shards();
            let committed: Vec<u64> = shards
                .iter()
                .map(|s| s.watermarks.committed_next())
                .collect();
            let caught_up = self.clients.iter().all(|client| {
                client.finished || client.stream.as_ref().is_some_and(|s| s.next == committed)
            });
            Ok(caught_up && self.draining.is_empty())
        }
    }

    /// Still behind after every quiesce round.
    fn stuck(&self) -> Result<(), Broken> {
        let at: Vec<_> = self
            .clients
            .iter()
            .map(|c| {
                let stream = c.stream.as_ref().map(|s| {
                    format!(
                        "at {:?} until {:?} may fail {:?}",
                        s.next, s.until_ns, s.may_fail
                    )
                });
                format!(
                    "client {}: {}",
                    c.id - 1,
                    stream.unwrap_or_else(|| format!("no stream (finished: {})", c.finished))
                )
            })
            .collect();
        let committed: Vec<u64> = self
            .sim
            .shards()
            .iter()
            .map(|s| s.watermarks.committed_next())
            .collect();
        Err((
            "liveness: once faults stop, every stream catches up and every ended stream ends",
            format!(
                "committed {committed:?}; {}; {} stream(s) still draining",
                at.join("; "),
                self.draining.len()
            ),
        ))
    }
}

enum End {
    Clean,
    Failed,
}

/// `cursor` with `shard` moved to `to` (an explicit skip past retention).
fn skip_to(
    shards: &[Arc<ringfeed_engine::ShardShared>],
    cursor: Cursor,
    shard: u32,
    to: u64,
) -> Cursor {
    let mut next = cursor.offsets().to_vec();
    let mut gens = cursor
        .generations()
        .map_or_else(|| vec![0; next.len()], <[u32]>::to_vec);
    let s = shard as usize;
    next[s] = to;
    gens[s] = match to {
        0 => 0,
        to => shards[s].generations().of_offset(to - 1),
    };
    Cursor::with_generations(next, gens)
}
