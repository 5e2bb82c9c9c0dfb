//! Following one filer: a `SubscribeLocalMetadata` stream (batching and idle
//! heartbeats on, prefix `/`), each event checked, kept as the filer sent it
//! and appended durably to the filer's shard before the next is read.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_lite::FutureExt as _;
use ringfeed_engine::{AppendError, Durability, Engine, NewEvent, Producer, RateLimit};
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::prost::Message as _;
use ringfeed_proto::tonic;
use ringfeed_proto::tonic::codegen::http;
use ringfeed_proto::{filer_pb, strict, v1};
use tokio::sync::watch;

use super::log_files;
use super::FilerAddress;

/// Where following a filer starts, and what to do when its log no longer
/// reaches back there.
#[derive(Clone, Copy, Debug, Default)]
pub struct FollowFrom {
    /// Where a filer never followed before starts (0: the oldest its log keeps).
    pub since_ns: i64,
    /// Go on past a gap in the filer's log (`--follow-skip-gap`).
    pub skip_gap: bool,
}

/// The filer's `SubscribeMetadataResponse` with each `event_notification`
/// kept as the bytes received (field numbers of `filer_pb`; `log_file_refs`,
/// never asked for, is skipped as unknown).
#[derive(Clone, PartialEq, prost::Message)]
struct Received {
    #[prost(string, tag = "1")]
    directory: String,
    #[prost(bytes = "bytes", optional, tag = "2")]
    event_notification: Option<Bytes>,
    #[prost(int64, tag = "3")]
    ts_ns: i64,
    #[prost(message, repeated, tag = "4")]
    events: Vec<Received>,
    #[prost(int64, tag = "6")]
    flushed_ts_ns: i64,
}

/// The most events appended in one durable batch (the filer sends up to
/// 1,000 per response while catching up).
const MAX_BATCH_EVENTS: usize = 4096;
const MAX_BATCH_BYTES: usize = 8 << 20;

/// What a filer answers a subscription whose client id it holds a stream of
/// with an epoch at least as high (`weed/server/filer_grpc_server_sub_meta.go`).
const DUPLICATED: &str = "duplicated local subscription detected";
/// Times in a row a subscription is tried again with a higher epoch, at once.
const MAX_REPLACES: u32 = 8;

/// How far a filer's clock may run ahead of this server's before its events
/// are held back (see `Session::not_before_filer_time`).
pub const MAX_CLOCK_AHEAD: Duration = Duration::from_secs(10);

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a stream may stay silent before it is given up as stalled. A
/// SeaweedFS 4.48 filer sends an idle heartbeat every 5 s to a client that
/// asks for them (ringfeed does), so this is three missed: a filer frozen
/// (SIGSTOP, a hung host) whose kernel still holds the connection open.
const STALLED: Duration = Duration::from_secs(15);

fn stalled() -> String {
    format!(
        "the filer sent nothing for {} s (it heartbeats every 5 s): stalled or frozen",
        STALLED.as_secs()
    )
}

/// What is known of one followed filer, for status and metrics.
#[derive(Debug)]
pub struct FilerProgress {
    pub filer: FilerAddress,
    connected: AtomicBool,
    /// The filer timestamp of the last event stored (0: none yet).
    stored_ts_ns: AtomicI64,
    /// The latest filer time the filer said it had sent everything up to
    /// (an event's or a heartbeat's `ts_ns`).
    seen_ts_ns: AtomicI64,
    /// The filer's own flush watermark, from its flush reports.
    flushed_ts_ns: AtomicI64,
    /// The filer time through which every event it sent is stored (its
    /// events' and heartbeats' `ts_ns`, moved only after the append): the
    /// watermark the SeaweedFS view merges filers by.
    complete_ts_ns: AtomicI64,
    /// Woken when `complete_ts_ns` moves (shared by every followed filer:
    /// the SeaweedFS view waits on it).
    completed: Arc<tokio::sync::Notify>,
    events: AtomicU64,
    reconnects: AtomicU64,
    /// Why the last stream ended, if it ended with an error.
    error: Mutex<Option<String>>,
    /// Events the filer sent that were refused (not stored), and why the
    /// last one was.
    refused: AtomicU64,
    last_refused: Mutex<Option<String>>,
    /// Whether it is not followed because its log no longer reaches back
    /// to the last event stored from it.
    log_gap: AtomicBool,
    /// Such gaps gone past (`--follow-skip-gap`).
    gaps_skipped: AtomicU64,
    /// The warning a failing stream logs, at most once per 10 s.
    warnings: RateLimit,
}

/// A reading of [`FilerProgress`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilerReading {
    pub filer: String,
    pub connected: bool,
    pub stored_ts_ns: i64,
    pub seen_ts_ns: i64,
    pub flushed_ts_ns: i64,
    pub events: u64,
    pub reconnects: u64,
    pub error: Option<String>,
    pub refused: u64,
    pub last_refused: Option<String>,
    pub log_gap: bool,
    pub gaps_skipped: u64,
}

impl FilerProgress {
    /// `completed`: woken when what is stored from the filer moves on.
    pub fn new(filer: FilerAddress, completed: Arc<tokio::sync::Notify>) -> Arc<FilerProgress> {
        Arc::new(FilerProgress {
            filer,
            completed,
            connected: AtomicBool::new(false),
            stored_ts_ns: AtomicI64::new(0),
            seen_ts_ns: AtomicI64::new(0),
            flushed_ts_ns: AtomicI64::new(0),
            complete_ts_ns: AtomicI64::new(0),
            events: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            error: Mutex::new(None),
            refused: AtomicU64::new(0),
            last_refused: Mutex::new(None),
            log_gap: AtomicBool::new(false),
            gaps_skipped: AtomicU64::new(0),
            warnings: RateLimit::new(Duration::from_secs(10)),
        })
    }

    /// Whether its stream is open now.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    pub fn read(&self) -> FilerReading {
        FilerReading {
            filer: self.filer.given.clone(),
            connected: self.connected.load(Ordering::Relaxed),
            stored_ts_ns: self.stored_ts_ns.load(Ordering::Relaxed),
            seen_ts_ns: self.seen_ts_ns.load(Ordering::Relaxed),
            flushed_ts_ns: self.flushed_ts_ns.load(Ordering::Relaxed),
            events: self.events.load(Ordering::Relaxed),
            reconnects: self.reconnects.load(Ordering::Relaxed),
            error: self.error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            refused: self.refused.load(Ordering::Relaxed),
            last_refused: self
                .last_refused
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            log_gap: self.log_gap.load(Ordering::Relaxed),
            gaps_skipped: self.gaps_skipped.load(Ordering::Relaxed),
        }
    }

    fn failed(&self, error: String) {
        if let Some(suppressed) = self.warnings.check() {
            tracing::warn!(filer = %self.filer, suppressed, "following the filer: {error}");
        }
        *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(error);
    }

    /// Counts an event the filer sent that is not stored; `why` ends the
    /// stream too (through [`FilerProgress::failed`]).
    fn refuse(&self, why: String) -> String {
        self.refused.fetch_add(1, Ordering::Relaxed);
        *self.last_refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
        why
    }

    /// See [`FilerProgress::complete_ts_ns`](Self).
    pub fn complete_ts_ns(&self) -> i64 {
        self.complete_ts_ns.load(Ordering::Acquire)
    }

    /// Woken when any followed filer's `complete_ts_ns` moves.
    pub fn completed(&self) -> &Arc<tokio::sync::Notify> {
        &self.completed
    }

    fn complete_through(&self, ts_ns: i64) {
        if self.complete_ts_ns.fetch_max(ts_ns, Ordering::Release) < ts_ns {
            self.completed.notify_waiters();
        }
    }

    fn seen(&self, ts_ns: i64) {
        self.seen_ts_ns.fetch_max(ts_ns, Ordering::Relaxed);
    }
}

/// How far out of time order a filer's own log may be. A filer stamps an
/// event (`time.Now()`) before it takes its log buffer's lock to add it, so
/// concurrent writes land in its log slightly out of `ts_ns` order (seen:
/// 11 µs apart, under the bench's 4 concurrent creators). Within this
/// window an event at or before the newest stored is taken unless it is
/// one already stored; older than it, it is refused.
pub const REORDER: Duration = Duration::from_secs(2);

fn reorder_ns() -> i64 {
    REORDER.as_nanos() as i64
}

/// Where a filer's events continue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Position {
    next_sequence: u64,
    /// The newest `ts_ns` stored from the filer (0: none yet).
    last_ts: i64,
    /// Every `ts_ns` stored within [`REORDER`] of `last_ts`: the filer,
    /// asked again from `last_ts` - REORDER, sends these again.
    recent: std::collections::BTreeSet<i64>,
    /// Where a filer never followed starts (`--follow-since`).
    start_ns: i64,
}

impl Position {
    /// The `since_ns` to ask the filer for.
    fn since_ns(&self) -> i64 {
        if self.next_sequence == 0 {
            self.start_ns
        } else {
            (self.last_ts - reorder_ns()).max(0)
        }
    }

    fn stored(&mut self, ts_ns: i64) {
        self.recent.insert(ts_ns);
        self.last_ts = self.last_ts.max(ts_ns);
        let floor = self.last_ts - reorder_ns();
        self.recent = self.recent.split_off(&floor);
    }
}

/// Where the engine's copy of the filer ends, as recovery found it: after
/// its last stored event, with the times of those stored within
/// [`REORDER`] of the newest (read back from the feed); or `start_ns` for a
/// filer never followed.
async fn resume(engine: &Engine, filer: &FilerAddress, start_ns: i64) -> Result<Position, String> {
    let Some((sequence, at)) = engine.last_stored(filer.producer_id()) else {
        return Ok(Position {
            start_ns,
            ..Position::default()
        });
    };
    let stored = engine
        .read_at(at.shard, at.offset)
        .map_err(|e| format!("reading the last event stored from {filer}: {e}"))?
        .ok_or_else(|| {
            format!(
                "the last event stored from {filer} (shard {}, offset {}) is gone",
                at.shard, at.offset
            )
        })?;
    let last = filer_ts(filer, &stored)?;
    // The newest is at most REORDER after the last (older is refused), so
    // every event within REORDER of it has ts_ns >= last - REORDER, and was
    // stamped no earlier than MAX_CLOCK_AHEAD before that.
    let from = last - reorder_ns() - MAX_CLOCK_AHEAD.as_nanos() as i64 - 1;
    let mut request =
        ringfeed_engine::SubscribeRequest::from(ringfeed_engine::Start::SinceNs(from.max(0)));
    request.ordering = ringfeed_engine::Ordering::PerShard;
    let mut feed = engine
        .subscribe(request)
        .map_err(|e| format!("reading back what was stored from {filer}: {e}"))?;
    let mut position = Position {
        next_sequence: sequence + 1,
        start_ns,
        ..Position::default()
    };
    loop {
        let delivered = feed
            .next()
            .await
            .map_err(|e| format!("reading back what was stored from {filer}: {e}"))?
            .ok_or_else(|| format!("the feed ended before the last event stored from {filer}"))?;
        let event = v1::Event::decode(delivered.payload())
            .map_err(|e| format!("an event stored from {filer} does not decode: {e}"))?;
        if let Some(stored) = event.seaweedfs.filter(|s| s.filer == filer.given) {
            position.stored(stored.ts_ns);
        }
        if (delivered.shard, delivered.offset) == (at.shard, at.offset) {
            return Ok(position);
        }
    }
}

/// The filer's `ts_ns` of an event stored from it.
fn filer_ts(filer: &FilerAddress, stored: &ringfeed_engine::Delivered) -> Result<i64, String> {
    let event = v1::Event::decode(stored.payload())
        .map_err(|e| format!("an event stored from {filer} does not decode: {e}"))?;
    event
        .seaweedfs
        .map(|s| s.ts_ns)
        .ok_or_else(|| format!("an event stored as {filer}'s is not a SeaweedFS event"))
}

/// Follows `filer` into `engine` until `stop` turns true: reconnects with
/// jittered backoff, resuming after the last stored event.
pub async fn follow(
    engine: Arc<Engine>,
    progress: Arc<FilerProgress>,
    from: FollowFrom,
    mut stop: watch::Receiver<bool>,
) {
    let filer = progress.filer.clone();
    let shard = (filer.producer_id() % u64::from(engine.shard_count())) as u32;
    let mut position = match resume(&engine, &filer, from.since_ns).await {
        Ok(position) => position,
        Err(e) => {
            // Nothing is appended for this filer until an operator looks:
            // resuming from a guess could store events twice or skip some.
            progress.failed(format!("not following: {e}"));
            return;
        }
    };
    let through = if position.next_sequence == 0 {
        position.start_ns
    } else {
        position.last_ts
    };
    progress.stored_ts_ns.store(through, Ordering::Relaxed);
    progress.complete_through(through - reorder_ns());
    // Above any epoch an earlier run of this server used (seconds since
    // 2020), so the filer replaces a stream of ours it still holds instead of
    // refusing this one as a duplicate.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut epoch = now.saturating_sub(1_577_836_800).clamp(1, i32::MAX as u64) as i32;
    let backoff = ringfeed_client::Backoff {
        initial: Duration::from_millis(200),
        multiplier: 2.0,
        jitter: 0.3,
        max: Duration::from_secs(10),
    };
    let mut attempt = 0;
    let mut replaced = 0;
    // The newest stored `ts_ns` the filer's log was last found to reach back to.
    let mut reaches = None;
    loop {
        let session = Session {
            engine: &engine,
            progress: &progress,
            shard,
            epoch,
            skip_gap: from.skip_gap,
        };
        let ended = session
            .run(&mut position, &mut attempt, &mut reaches)
            .or(async {
                let _ = stop.wait_for(|stopped| *stopped).await;
                Ok(())
            });
        let ended = ended.await;
        progress.connected.store(false, Ordering::Relaxed);
        if *stop.borrow() {
            return;
        }
        progress.reconnects.fetch_add(1, Ordering::Relaxed);
        epoch = epoch.saturating_add(1);
        match ended {
            Ok(()) => progress.failed("the filer ended the stream".into()),
            // The filer still holds a stream of ours with this epoch or a
            // higher one (an earlier run of this server, killed within the
            // same second, that the filer has not noticed is gone): a
            // higher epoch replaces it. Not a fault; at once, a few times.
            Err(e) if e.contains(DUPLICATED) && replaced < MAX_REPLACES => {
                tracing::debug!(filer = %progress.filer, epoch, "{e}: again with a higher epoch");
                replaced += 1;
                continue;
            }
            Err(e) => progress.failed(e),
        }
        replaced = 0;
        let delay = backoff.delay(attempt, random_unit());
        attempt = attempt.saturating_add(1);
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}

fn random_unit() -> f64 {
    let mut bytes = [0u8; 4];
    let _ = getrandom::getrandom(&mut bytes);
    f64::from(u32::from_le_bytes(bytes)) / (f64::from(u32::MAX) + 1.0)
}

struct Session<'a> {
    engine: &'a Engine,
    progress: &'a FilerProgress,
    shard: u32,
    epoch: i32,
    skip_gap: bool,
}

impl Session<'_> {
    /// One stream: returns when it ends (Ok: the filer ended it cleanly).
    /// `attempt` (the backoff's) starts over once events are stored.
    async fn run(
        &self,
        position: &mut Position,
        attempt: &mut u32,
        reaches: &mut Option<i64>,
    ) -> Result<(), String> {
        let filer = &self.progress.filer;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", filer.grpc))
            .map_err(|e| format!("{}: {e}", filer.grpc))?
            .connect_timeout(CONNECT_TIMEOUT)
            .connect()
            .await
            .map_err(|e| format!("connecting to {}: {e}", filer.grpc))?;
        if position.next_sequence > 0 && *reaches != Some(position.last_ts) {
            self.check_log_reaches(position, channel.clone()).await?;
            *reaches = Some(position.last_ts);
        }
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready()
            .await
            .map_err(|e| format!("connecting to {}: {e}", filer.grpc))?;
        let request = filer_pb::SubscribeMetadataRequest {
            client_name: "ringfeed".into(),
            path_prefix: "/".into(),
            since_ns: position.since_ns(),
            // Stable for this filer: the filer keys its subscribers by it.
            client_id: (filer.producer_id() >> 33) as i32,
            client_epoch: self.epoch,
            client_supports_batching: true,
            client_supports_idle_heartbeat: true,
            ..Default::default()
        };
        let path =
            http::uri::PathAndQuery::from_static("/filer_pb.SeaweedFiler/SubscribeLocalMetadata");
        let codec =
            tonic::codec::ProstCodec::<filer_pb::SubscribeMetadataRequest, Received>::default();
        let opened = grpc.server_streaming(tonic::Request::new(request), path, codec);
        let mut stream = tokio::time::timeout(STALLED, opened)
            .await
            .map_err(|_| stalled())?
            .map_err(|s| format!("SubscribeLocalMetadata: {}", s.message()))?
            .into_inner();
        self.progress.connected.store(true, Ordering::Relaxed);
        let mut batch = Batch::default();
        loop {
            let first = tokio::time::timeout(STALLED, stream.message()).await;
            let mut ended = match first.map_err(|_| stalled())? {
                Ok(Some(received)) => batch.take(filer, received, position, self.progress),
                Ok(None) => return Ok(()),
                Err(s) => Err(format!("the stream failed: {}", s.message())),
            };
            // What else has arrived goes in the same durable batch.
            while ended.is_ok()
                && batch.events.len() < MAX_BATCH_EVENTS
                && batch.bytes < MAX_BATCH_BYTES
            {
                match futures_lite::future::poll_once(stream.message()).await {
                    None => break,
                    Some(Ok(Some(received))) => {
                        ended = batch.take(filer, received, position, self.progress);
                    }
                    Some(Ok(None)) => {
                        ended = Err("the filer ended the stream".into());
                    }
                    Some(Err(s)) => ended = Err(format!("the stream failed: {}", s.message())),
                }
            }
            // Whatever ended the stream, what arrived before it is stored.
            let heard = std::mem::take(&mut batch.heard_ts);
            let appended = self.append(&mut batch, position).await?;
            // An event up to REORDER older than what was heard may still
            // come: complete only that far back.
            self.progress.complete_through(heard - reorder_ns());
            if appended {
                // Progress: the next failure starts the backoff over.
                *attempt = 0;
                *self
                    .progress
                    .error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = None;
            }
            ended?;
        }
    }

    /// Whether the filer's log still reaches back to the last event stored
    /// from it: a filer asked for events after a time older than its oldest
    /// log file answers from that file on, so the events between would be
    /// skipped without a word. Found, that is an error (the filer is not
    /// followed) unless `skip_gap`: then a warning and a count.
    async fn check_log_reaches(
        &self,
        position: &Position,
        channel: tonic::transport::Channel,
    ) -> Result<(), String> {
        let oldest = tokio::time::timeout(STALLED, log_files::oldest(channel))
            .await
            .map_err(|_| stalled())?
            .map_err(|e| format!("finding where the filer's log begins: {e}"))?;
        let Some(oldest) = oldest.filter(|o| o.starts_ns > position.last_ts) else {
            self.progress.log_gap.store(false, Ordering::Relaxed);
            return Ok(());
        };
        let why = format!(
            "the filer's log now begins at {} ({}), after the last event stored from it ({}): \
             whatever it logged between them is gone from it (its log was pruned)",
            log_files::format_ns(oldest.starts_ns),
            oldest.path,
            log_files::format_ns(position.last_ts),
        );
        if !self.skip_gap {
            self.progress.log_gap.store(true, Ordering::Relaxed);
            return Err(format!(
                "{why}; not following it: restart with --follow-skip-gap to go on without them"
            ));
        }
        self.progress.log_gap.store(false, Ordering::Relaxed);
        self.progress.gaps_skipped.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(filer = %self.progress.filer, "{why}; going on without them (--follow-skip-gap)");
        Ok(())
    }

    /// Waits until this server's clock is at most [`MAX_CLOCK_AHEAD`] behind
    /// filer time `ts_ns`, so every event of a filer is stamped at or after
    /// its `ts_ns` - MAX_CLOCK_AHEAD: the SeaweedFS view finds the events
    /// after a filer time T from ringfeed time T - MAX_CLOCK_AHEAD on. A
    /// filer whose clock runs further ahead has its events stored late, and
    /// says so.
    async fn not_before_filer_time(&self, ts_ns: i64) {
        let ahead = ts_ns.saturating_sub(ringfeed_engine::clock::now_ns());
        let wait = ahead - MAX_CLOCK_AHEAD.as_nanos() as i64;
        if wait > 0 {
            if let Some(suppressed) = self.progress.warnings.check() {
                tracing::warn!(
                    filer = %self.progress.filer,
                    suppressed,
                    "the filer's clock is {:.1} s ahead of this server's: its events are stored \
                     {:.1} s late (fix the clocks: NTP)",
                    ahead as f64 / 1e9,
                    wait as f64 / 1e9
                );
            }
            tokio::time::sleep(Duration::from_nanos(wait as u64)).await;
        }
    }

    /// Appends the batch durably to the filer's shard and moves the position
    /// past it; on failure nothing moves (a retry of the same sequences is
    /// answered, not stored again).
    async fn append(&self, batch: &mut Batch, position: &mut Position) -> Result<bool, String> {
        if batch.events.is_empty() {
            return Ok(false);
        }
        let events = std::mem::take(&mut batch.events);
        let times = std::mem::take(&mut batch.times);
        let newest = std::mem::take(&mut batch.newest);
        let count = events.len() as u64;
        batch.bytes = 0;
        self.not_before_filer_time(newest).await;
        let producer = Producer {
            id: self.progress.filer.producer_id(),
            first_sequence: position.next_sequence,
        };
        match self
            .engine
            .append_to_shard(self.shard, events, Durability::Durable, Some(producer))
            .await
        {
            Ok(_) => {
                position.next_sequence += count;
                for ts in times {
                    position.stored(ts);
                }
                self.progress
                    .stored_ts_ns
                    .store(position.last_ts, Ordering::Relaxed);
                self.progress.events.fetch_add(count, Ordering::Relaxed);
                Ok(true)
            }
            Err(AppendError::Invalid {
                index,
                field,
                reason,
            }) => Err(self.progress.refuse(format!(
                "an event the filer sent cannot be stored (event {index} of a batch, {field}: \
                 {reason}); nothing after it is stored until it can be"
            ))),
            Err(e) => Err(format!("storing the filer's events: {e}")),
        }
    }
}

/// Events received and checked, not yet appended.
#[derive(Default)]
struct Batch {
    events: Vec<NewEvent>,
    /// Each event's filer `ts_ns`.
    times: Vec<i64>,
    /// The newest of `times` (0: none).
    newest: i64,
    bytes: usize,
    /// The latest filer time taken (events and heartbeats).
    heard_ts: i64,
}

impl Batch {
    /// The filer said it has sent everything through `ts_ns`.
    fn heard(&mut self, progress: &FilerProgress, ts_ns: i64) {
        progress.seen(ts_ns);
        self.heard_ts = self.heard_ts.max(ts_ns);
    }

    /// Takes one response (and the events batched in it). An event already
    /// stored or taken (the filer sends again what follows `since_ns`, which
    /// is [`REORDER`] before the newest stored) is skipped; one more than
    /// REORDER before the newest is refused: the filer's log went back
    /// further than a filer's own disorder explains.
    fn take(
        &mut self,
        filer: &FilerAddress,
        received: Received,
        position: &Position,
        progress: &FilerProgress,
    ) -> Result<(), String> {
        if received.flushed_ts_ns > 0 {
            progress
                .flushed_ts_ns
                .fetch_max(received.flushed_ts_ns, Ordering::Relaxed);
        }
        let mut responses = vec![received];
        let tail = std::mem::take(&mut responses[0].events);
        responses.extend(tail);
        for r in responses {
            let Some(raw) = r.event_notification else {
                // A heartbeat (the filer's time) or a flush report.
                self.heard(progress, r.ts_ns);
                continue;
            };
            // Only an event at or before the newest can be one already
            // stored or taken: in a log in time order, none is looked up.
            let newest = self.newest.max(position.last_ts);
            if r.ts_ns <= newest
                && (position.recent.contains(&r.ts_ns) || self.times.contains(&r.ts_ns))
            {
                // Stored already (a filer's timestamps are unique along its
                // log, so the same time is the same event): sent again.
                self.heard(progress, r.ts_ns);
                continue;
            }
            if position.next_sequence + (self.times.len() as u64) > 0
                && r.ts_ns <= newest - reorder_ns()
            {
                return Err(progress.refuse(format!(
                    "the filer sent an event at ts_ns {} after one at {newest}: its log went back \
                     more than {} s; nothing of it is stored",
                    r.ts_ns,
                    REORDER.as_secs()
                )));
            }
            let Some(event) =
                stored_event(filer, r.directory, r.ts_ns, raw).map_err(|e| progress.refuse(e))?
            else {
                // The marker a filer sends after many events its filter
                // skipped (an empty notification): progress, not an event.
                self.heard(progress, r.ts_ns);
                continue;
            };
            self.heard(progress, r.ts_ns);
            self.bytes += event.payload.len();
            self.times.push(r.ts_ns);
            self.newest = self.newest.max(r.ts_ns);
            self.events.push(event);
        }
        Ok(())
    }
}

/// The event to store for one the filer sent: `None` for the empty marker.
/// The notification's bytes are kept as received once they pass the strict
/// check (every decoder reads them alike, docs/design.md 2.15).
fn stored_event(
    filer: &FilerAddress,
    directory: String,
    ts_ns: i64,
    raw: Bytes,
) -> Result<Option<NewEvent>, String> {
    let refuse = |why: String| format!("the event at ts_ns {ts_ns} in {directory:?}: {why}");
    strict::check("filer_pb.EventNotification", &raw)
        .map_err(|r| refuse(format!("event_notification: {r}")))?;
    let n = filer_pb::EventNotification::decode(raw.clone())
        .map_err(|e| refuse(format!("event_notification: {e}")))?;
    if n.old_entry.is_none() && n.new_entry.is_none() {
        return Ok(None);
    }
    let entry = |e: &filer_pb::Entry| {
        let attributes = e.attributes.clone().unwrap_or_default();
        v1::Entry {
            name: e.name.clone(),
            is_directory: e.is_directory,
            size: attributes.file_size,
            mtime_ns: attributes.mtime.saturating_mul(1_000_000_000),
            mode: attributes.file_mode,
            ..Default::default()
        }
    };
    // SeaweedFS names the new entry's directory on every create and update;
    // ringfeed only when the entry left `directory`.
    let new_parent = match &n.new_entry {
        Some(_) if n.new_parent_path != directory => n.new_parent_path.clone(),
        _ => String::new(),
    };
    let event = v1::Event {
        directory: directory.clone(),
        old_entry: n.old_entry.as_ref().map(entry),
        new_entry: n.new_entry.as_ref().map(entry),
        new_parent_path: new_parent.clone(),
        signatures: n.signatures.clone(),
        seaweedfs: Some(v1::SeaweedfsEvent {
            filer: filer.given.clone(),
            ts_ns,
            event_notification: raw,
        }),
    };
    Ok(Some(NewEvent {
        payload: event.encode_to_vec().into(),
        old_name: event.old_entry.map(|e| e.name).unwrap_or_default(),
        new_name: event.new_entry.map(|e| e.name).unwrap_or_default(),
        new_parent,
        signatures: event.signatures,
        directory,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(ts_ns: i64, name: &str) -> Received {
        let notification = filer_pb::EventNotification {
            new_entry: Some(filer_pb::Entry {
                name: name.into(),
                ..Default::default()
            }),
            new_parent_path: "/d".into(),
            ..Default::default()
        };
        Received {
            directory: "/d".into(),
            event_notification: Some(notification.encode_to_vec().into()),
            ts_ns,
            events: Vec::new(),
            flushed_ts_ns: 0,
        }
    }

    /// A filer's log slightly out of time order (concurrent writes) is
    /// taken whole; what it sends again is skipped; a step back past the
    /// window is refused.
    #[test]
    fn a_filer_log_out_of_order_within_the_window_is_taken_once() {
        let filer = FilerAddress::parse("127.0.0.1:8888").unwrap();
        let progress = FilerProgress::new(filer.clone(), Arc::default());
        let second = 1_000_000_000;
        let mut position = Position::default();
        let mut batch = Batch::default();
        for (ts, name) in [
            (10 * second, "a"),
            (10 * second - 11_000, "b"),
            (11 * second, "c"),
        ] {
            batch
                .take(&filer, event(ts, name), &position, &progress)
                .unwrap();
        }
        assert_eq!(
            batch.times,
            vec![10 * second, 10 * second - 11_000, 11 * second]
        );
        for ts in std::mem::take(&mut batch.times) {
            position.stored(ts);
        }
        position.next_sequence = 3;
        batch.events.clear();
        // Asked again from 2 s before the newest: all three come back.
        assert_eq!(position.since_ns(), 9 * second);
        for (ts, name) in [
            (10 * second, "a"),
            (10 * second - 11_000, "b"),
            (11 * second, "c"),
        ] {
            batch
                .take(&filer, event(ts, name), &position, &progress)
                .unwrap();
        }
        assert!(batch.times.is_empty(), "nothing taken twice");
        batch
            .take(&filer, event(12 * second, "d"), &position, &progress)
            .unwrap();
        let refused = batch
            .take(&filer, event(9 * second, "old"), &position, &progress)
            .unwrap_err();
        assert!(refused.contains("went back more than 2 s"), "{refused}");
        assert_eq!(batch.times, vec![12 * second]);
        // The window forgets what is older than it.
        position.stored(12 * second);
        assert_eq!(position.recent.first(), Some(&(10 * second)));
    }
}
