//! One subscription stream's sender: reads the engine subscription, packs
//! responses and hands them to the gRPC stream through a small bounded queue.
//!
//! - Reading and sending overlap: this task fills the queue while the
//!   transport frames and writes earlier responses. The queue holds at most
//!   `queue_responses` responses, each at most a batch or a chunk, as views of
//!   ring windows or segment mappings (never copies); the HTTP/2 stream's flow
//!   control is the backpressure, and a stalled client costs its share of the
//!   response budget (below) until `stall_timeout`, then gives it back.
//! - Batching (when the client allows batches): a response carries every
//!   event its subscription has ready at once, up to `batch_max_events` and
//!   `batch_max_bytes`: a subscriber behind the feed gets full batches, one at
//!   the live edge gets what arrived since its last response (usually one
//!   event, sent as a single `Event`). Waiting for more never happens, so
//!   batching adds no latency, and under fan-out load each subscriber's wake-up
//!   carries all it missed in one response instead of one per event (it used to
//!   batch only when more than `batch_min_ready` events or `batch_behind` of
//!   stamps behind, and sent ready events one by one otherwise: 1,000 live
//!   subscribers then oscillated around 64 events of lag). Heartbeats and
//!   markers are never batched (they are separate response items).
//! - Chunk mode: sealed runs of stored records go out verbatim until the
//!   reader reaches the live edge, then a `ChunkModeEnd` marker, then events.
//! - Admission: while a subscription reads below the ring (segment files), it
//!   holds one of `backlog_readers` places. Every response of every
//!   subscription (ring readers too) holds its bytes from one shared
//!   `response_budget_bytes` from before it is built until the transport
//!   has written it: the queue hands the transport each response as a gRPC
//!   frame (its one copy: the server's codec does not copy it again) that
//!   holds the response's budget until its last byte is dropped
//!   (`Queue::poll_next`, `Leases`). Peak memory is bounded by the budget,
//!   not by subscribers x queue depth. A backlog reader reserves before
//!   reading (reading allocates); a ring reader reserves once its next event
//!   is at hand (a view costs nothing), so an idle live subscriber holds no
//!   budget. A cancelled or superseded stream drops what it holds or waits
//!   for.
//! - Liveness: what a stream holds comes back by its transport writing (or
//!   the stream's end, or the stall give-back), never by its sender building
//!   more, so a sender waiting for budget never waits on itself; the budget
//!   is a FIFO semaphore, so every waiter is served in turn, one response at
//!   a time, whatever the number of subscribers (docs/response-budget.md).

use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use ringfeed_engine::{
    Delivered, RateLimit, RawChunk, ShardShared, Step, SubscribeError, Subscription,
};
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::prost::Message;
use ringfeed_proto::tonic::{Code, Status};
use ringfeed_proto::{v1, RawEventBatch, RawEventMessage, RawItem, RawSubscribeResponse};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio_stream::{Stream, StreamExt};

use crate::metrics::ServerMetrics;
use crate::registry::{Idle, Registered};
use crate::shared::{Group, Groups, Shared};
use ringfeed_engine::clock::now_ns;

/// How subscription streams are paced, batched and admitted.
#[derive(Clone, Debug, PartialEq)]
pub struct SubscriberLimits {
    /// Most events and bytes of one batch response.
    pub batch_max_events: usize,
    pub batch_max_bytes: usize,
    /// Responses queued per subscriber ahead of the gRPC stream.
    pub queue_responses: usize,
    /// Bytes of responses built and not yet taken past by the transport
    /// (queued, or encoded in tonic's and hyper's buffers), all subscribers
    /// together.
    pub response_budget_bytes: usize,
    /// Subscribers that may read backlog at the same time; others wait.
    pub backlog_readers: usize,
    /// Most record bytes of one chunk response (at least one record).
    pub chunk_max_bytes: usize,
    /// Bytes each stream may hold encoded in the HTTP/2 layer and not yet
    /// written to its connection (hyper's per-stream send buffer).
    pub send_buffer_bytes: usize,
    /// A subscriber that has taken nothing for this long gives its place back:
    /// its queued responses and their budget are dropped and its stream
    /// ends with UNAVAILABLE (after what its transport already holds); its
    /// client resumes from its cursor, exactly.
    pub stall_timeout: Duration,
    /// HTTP/2 keepalive: a connection silent this long gets a ping, and
    /// is closed if the answer takes longer than `keepalive_timeout`.
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
}

impl Default for SubscriberLimits {
    fn default() -> Self {
        SubscriberLimits {
            batch_max_events: 512,
            batch_max_bytes: 64 << 10,
            queue_responses: 8,
            response_budget_bytes: 128 << 20,
            backlog_readers: 64,
            chunk_max_bytes: 64 << 10,
            send_buffer_bytes: 64 << 10,
            stall_timeout: Duration::from_secs(60),
            keepalive_interval: Duration::from_secs(20),
            keepalive_timeout: Duration::from_secs(10),
        }
    }
}

/// Default and smallest heartbeat interval.
const HEARTBEAT_DEFAULT: Duration = Duration::from_secs(1);
const HEARTBEAT_MIN: Duration = Duration::from_millis(10);

/// How often a subscription asked for heartbeats gets one while quiet.
pub(crate) fn heartbeat_interval(r: &ringfeed_proto::v1::SubscribeRequest) -> Option<Duration> {
    r.heartbeats.then(|| {
        match r.heartbeat_interval_ms {
            0 => HEARTBEAT_DEFAULT,
            ms => Duration::from_millis(u64::from(ms)),
        }
        .max(HEARTBEAT_MIN)
    })
}

/// A client that has read nothing for this long gets a warning in the log.
const STALLED_AFTER: Duration = Duration::from_secs(10);
static STALLED_WARNINGS: RateLimit = RateLimit::new(Duration::from_secs(10));

/// Budget units are KiB, so a u32 permit count covers any budget.
const UNIT: usize = 1024;

/// The budget units that cover `bytes`: whole units, so a part of the
/// budget held for each of many small things counts more than their sum.
pub(crate) fn budget_units(bytes: usize) -> usize {
    bytes.div_ceil(UNIT)
}

/// The shared admission state of backlog readers.
pub(crate) struct Admission {
    readers: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    budget_units: usize,
    /// Counts streams waiting for a place or for bytes, and holding a place.
    metrics: Arc<ServerMetrics>,
}

impl Admission {
    pub fn new(limits: &SubscriberLimits, metrics: Arc<ServerMetrics>) -> Admission {
        let budget_units = budget_units(limits.response_budget_bytes).max(1);
        Admission {
            readers: Arc::new(Semaphore::new(limits.backlog_readers.max(1))),
            bytes: Arc::new(Semaphore::new(budget_units)),
            budget_units,
            metrics,
        }
    }

    /// Waits for a backlog reader's place.
    async fn place(self: &Arc<Self>) -> Place {
        let _waiting = Waiting::new(&self.metrics);
        let permit = self
            .readers
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        self.metrics.backlog_reader_admitted();
        Place {
            _permit: permit,
            admission: self.clone(),
        }
    }

    /// `bytes` of the budget if they are spare: free now, and half the
    /// budget still free after them (what a cache may take without ever
    /// making a stream wait).
    fn try_spare(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let units = budget_units(bytes).clamp(1, self.budget_units);
        if self.bytes.available_permits() < units + self.budget_units / 2 {
            return None;
        }
        self.bytes.clone().try_acquire_many_owned(units as u32).ok()
    }

    /// Grows `held` to `want` units of the budget if that many are free
    /// now (never waits); false if not. For what a stream holds outside its
    /// response queue (a cluster stream's merge).
    pub(crate) fn try_cover(&self, held: &mut Option<OwnedSemaphorePermit>, want: usize) -> bool {
        let have = held.as_ref().map_or(0, |p| p.num_permits());
        if want <= have {
            return true;
        }
        let Ok(more) = self
            .bytes
            .clone()
            .try_acquire_many_owned((want - have) as u32)
        else {
            return false;
        };
        match held {
            Some(permit) => permit.merge(more),
            None => *held = Some(more),
        }
        true
    }

    /// Budget units free now.
    pub(crate) fn free_units(&self) -> usize {
        self.bytes.available_permits()
    }

    /// Returns once a unit of the budget is free (and leaves it free), in
    /// turn with the readers waiting for budget.
    pub(crate) async fn unit_freed(&self) {
        let _unit = self.bytes.acquire().await;
    }

    /// Splits `want` units off `held` (all of it if it holds fewer), for a
    /// response to hold until the transport has written it: what a cluster
    /// stream's merge held for the events it sends.
    pub(crate) fn carve(
        held: &mut Option<OwnedSemaphorePermit>,
        want: usize,
    ) -> Option<OwnedSemaphorePermit> {
        let permit = held.as_mut()?;
        if permit.num_permits() <= want {
            return held.take();
        }
        permit.split(want)
    }

    /// The server's metrics (a cluster stream counts its give-backs there).
    pub(crate) fn metrics(&self) -> &ServerMetrics {
        &self.metrics
    }

    /// Gives back what `held` holds beyond `want` units.
    pub(crate) fn trim(held: &mut Option<OwnedSemaphorePermit>, want: usize) {
        if let Some(permit) = held {
            let have = permit.num_permits();
            if have > want {
                drop(permit.split(have - want));
            }
        }
    }

    /// Waits until `bytes` (at most half the budget) are free to read.
    ///
    /// At most half: the encodings groups keep for live streams
    /// (`Shared`) hold up to half the budget and are never waited for, so a
    /// reservation of more could wait on them for ever. (It was once there
    /// also because a stream kept its last response's budget while its
    /// sender waited: with `response_budget_bytes` below `batch_max_bytes`
    /// every stream stalled after its first response, found by
    /// `server/cli/tests/it/cluster_stream_within_budget.rs`.)
    async fn bytes(&self, bytes: usize) -> OwnedSemaphorePermit {
        let most = (self.budget_units / 2).max(1);
        let units = budget_units(bytes).clamp(1, most) as u32;
        let _waiting = Waiting::new(&self.metrics);
        self.bytes
            .clone()
            .acquire_many_owned(units)
            .await
            .expect("the semaphore is never closed")
    }
}

/// A backlog reader's place; given back when dropped.
struct Place {
    _permit: OwnedSemaphorePermit,
    admission: Arc<Admission>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.admission.metrics.backlog_reader_finished();
    }
}

/// Counts a waiter for as long as it waits.
struct Waiting<'a>(&'a ServerMetrics);

impl<'a> Waiting<'a> {
    fn new(metrics: &'a ServerMetrics) -> Waiting<'a> {
        metrics.backlog_reader_waiting();
        Waiting(metrics)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.backlog_reader_stopped_waiting();
    }
}

/// Counts a connected stream for as long as its sender lives.
pub(crate) struct Connected(Arc<ServerMetrics>);

impl Connected {
    pub fn new(metrics: Arc<ServerMetrics>) -> Connected {
        metrics.subscriber_connected();
        Connected(metrics)
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.subscriber_disconnected();
    }
}

/// A queued response and the budget it holds until the transport has
/// written it. Boxed: tokio's channel allocates 32 slots at once whatever
/// its capacity, and a slot of the response itself (with the error it once
/// carried) cost every stream 6 KiB (heap profile of 5,000 subscribers).
pub(crate) type Queued = Box<(RawSubscribeResponse, Option<OwnedSemaphorePermit>)>;

/// What the client asked for, besides the engine request.
pub(crate) struct StreamOptions {
    pub batching: bool,
    pub heartbeat: Option<Duration>,
    pub chunk_mode: bool,
    /// A token's read scope: events are shown as it shows them (renames
    /// across its edge rewritten); such a stream shares no responses.
    pub scope: Option<crate::auth::ReadScope>,
}

/// What every subscription stream's sender shares.
pub(crate) struct Streams {
    /// The engine's shards, in id order (heartbeats and pacing read their
    /// watermarks).
    pub shards: Arc<[Arc<ShardShared>]>,
    pub limits: Arc<SubscriberLimits>,
    pub admission: Arc<Admission>,
    pub metrics: Arc<ServerMetrics>,
    /// Streams that share live responses (encode once for all).
    pub groups: Groups,
}

/// What a subscriber reads: its queued responses, then the final error if
/// the stream failed (docs/design.md 2.10).
pub(crate) type Responses =
    std::pin::Pin<Box<dyn Stream<Item = Result<RawSubscribeResponse, Status>> + Send>>;

impl Streams {
    /// Starts a stream's sender on the current tokio runtime and returns what
    /// its client reads. The stream ends when the subscription does (OK),
    /// fails, is superseded, the server shuts down, or the client goes away.
    pub fn start(
        &self,
        sub: Subscription,
        options: StreamOptions,
        registered: Registered,
        shutdown: watch::Receiver<bool>,
    ) -> Responses {
        let (outbox, responses) = Outbox::new(&self.limits);
        let sender = Sender {
            group: match options.scope {
                None => self.groups.join(&sub, options.batching),
                Some(_) => None,
            },
            shards: self.shards.clone(),
            limits: self.limits.clone(),
            admission: self.admission.clone(),
            outbox,
            registered,
            sent: Default::default(),
            metrics: Connected::new(self.metrics.clone()),
        };
        tokio::spawn(sender.run(sub, options, shutdown));
        responses
    }
}

/// The sending side of a stream's responses: its queue, and its final
/// error on a channel of its own. Node and cluster streams both send
/// through one.
pub(crate) struct Outbox {
    tx: mpsc::Sender<Queued>,
    /// The receiving side of `tx`, to give back what a stalled client holds.
    /// Weak: the transport owns the queue, and its dropping it (the client
    /// went away) is what `tx.closed()` reports.
    queue: std::sync::Weak<Queue>,
    /// The stream's final error, delivered after everything queued on `tx`.
    /// A channel of its own (used once) always has room, so a client that
    /// stopped reading can never turn the error into a clean end.
    final_status: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<Status>>>,
}

impl Outbox {
    /// An outbox queueing up to `limits.queue_responses` responses, and what
    /// the client reads from it: the queued responses, then the final error
    /// if the stream failed.
    pub(crate) fn new(limits: &SubscriberLimits) -> (Outbox, Responses) {
        let (tx, rx) = mpsc::channel(limits.queue_responses.max(1));
        // A oneshot: an mpsc channel of one allocates 32 slots of Status
        // (5.8 KiB a stream).
        let (final_status, final_rx) = tokio::sync::oneshot::channel();
        let queue = Arc::new(Queue(std::sync::Mutex::new(QueueState {
            rx,
            leases: Default::default(),
            last_pull: tokio::time::Instant::now(),
        })));
        let outbox = Outbox {
            tx,
            queue: Arc::downgrade(&queue),
            final_status: std::sync::Mutex::new(Some(final_status)),
        };
        // Never sent (the outbox dropped): no final error, the stream ends.
        let final_status =
            futures_lite::stream::once_future(final_rx).filter_map(|status| status.ok().map(Err));
        let responses =
            futures_lite::stream::poll_fn(move |cx| queue.poll_next(cx)).chain(final_status);
        (outbox, Box::pin(responses))
    }

    /// Queues `response` with the budget it holds until the transport takes
    /// the next, waiting while the queue is full; `Err` once the client is
    /// gone.
    pub(crate) async fn send(
        &self,
        response: RawSubscribeResponse,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<(), Gone> {
        self.tx
            .send(Box::new((response, permit)))
            .await
            .map_err(|_| Gone)
    }

    /// Completes when the client has gone away.
    pub(crate) async fn closed(&self) {
        self.tx.closed().await
    }

    /// Ends the stream with `status` after everything queued. Never waits,
    /// never through the (possibly full) response queue: a status that
    /// could not be queued was once dropped, and the stream then ended OK,
    /// which a client takes for "until reached".
    pub(crate) fn fail(&self, status: Status) {
        let sender = self
            .final_status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(sender) = sender {
            let _ = sender.send(status);
        }
    }

    /// Watches for a client that stopped reading (see [`Stalls`]).
    pub(crate) fn stalls(&self) -> Stalls {
        Stalls {
            queue: self.queue.clone(),
        }
    }
}

/// Watches a stream's queue for a client that stopped reading, and gives
/// back what it holds.
pub(crate) struct Stalls {
    queue: std::sync::Weak<Queue>,
}

impl Stalls {
    /// Completes once responses have waited `timeout` with the transport
    /// taking none: the client stopped reading. Checked four times per
    /// timeout; never completes once the client is gone.
    ///
    /// Counted from the later of the transport's last take and the first
    /// check that found responses waiting: after a quiet spell longer than
    /// `timeout`, a response queued just before a check is not a stall.
    pub(crate) async fn stalled(&self, timeout: Duration) -> Duration {
        let mut waiting_since = None;
        loop {
            tokio::time::sleep((timeout / 4).max(Duration::from_millis(10))).await;
            let Some(since_pull) = self.queue.upgrade().and_then(|q| q.stalled_for()) else {
                waiting_since = None;
                continue;
            };
            let seen = *waiting_since.get_or_insert_with(tokio::time::Instant::now);
            let stalled = since_pull.min(seen.elapsed());
            if stalled >= timeout {
                return stalled;
            }
        }
    }

    /// The client took nothing for `stalled`: its queued responses and
    /// their budget are dropped, and the stream is to end with the
    /// UNAVAILABLE returned (after what the transport already holds), which
    /// the client library takes for "resume from the cursor".
    pub(crate) fn give_back(
        &self,
        stalled: Duration,
        registered: &Registered,
        metrics: &ServerMetrics,
    ) -> Status {
        if let Some(queue) = self.queue.upgrade() {
            queue.give_back();
        }
        metrics.stalled_given_back();
        let (name, peer) = registered.update(|i| (i.client_name.clone(), i.peer.clone()));
        tracing::warn!(
            "subscriber {name:?} at {peer} read nothing for {} s (stall_timeout_secs): its queued \
             responses and their budget were given back and its stream ends with UNAVAILABLE; \
             its client resumes from its cursor when it reads again",
            stalled.as_secs()
        );
        Status::unavailable(format!(
            "this subscriber read nothing for {} s: its place was given back; resume from the \
             last cursor received",
            stalled.as_secs()
        ))
    }
}

/// The client went away.
#[derive(Debug)]
pub(crate) struct Gone;

/// A stream's queued responses, shared by its sender (which may give them
/// back) and the transport (which takes them).
struct Queue(std::sync::Mutex<QueueState>);

struct QueueState {
    rx: mpsc::Receiver<Queued>,
    /// The budget of the responses the transport has taken and not yet
    /// written.
    leases: Arc<Leases>,
    /// When the transport last took a response.
    last_pull: tokio::time::Instant,
}

impl Queue {
    fn state(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next response for the transport, as a gRPC frame that holds the
    /// response's budget until the transport drops it: written to the
    /// socket, or the stream gone. The transport's copy is the frame (the
    /// server's codec does not copy it again), so the budget counts it
    /// exactly, and it comes back without any other response being built.
    ///
    /// (It used to come back when the transport took the stream's next
    /// response, which the sender needed budget to build: once every
    /// permit was held so, nobody could build, and a storm of 5,000
    /// subscribers stood still at 2,048 streams, issue 41.)
    fn poll_next(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<RawSubscribeResponse, Status>>> {
        let mut state = self.state();
        let (response, permit) = match std::task::ready!(state.rx.poll_recv(cx)) {
            Some(queued) => *queued,
            None => return Poll::Ready(None),
        };
        state.last_pull = tokio::time::Instant::now();
        let frame = match permit {
            Some(permit) => response.into_frame(Leases::lease(&state.leases, permit)),
            None => response.into_frame(()),
        };
        Poll::Ready(Some(Ok(RawSubscribeResponse::Framed(frame))))
    }

    /// How long responses have waited with the transport taking none, if
    /// any wait (an idle live subscriber, with nothing queued, is not stalled).
    fn stalled_for(&self) -> Option<Duration> {
        let state = self.state();
        (!state.rx.is_empty()).then(|| state.last_pull.elapsed())
    }

    /// Drops everything queued, and the budget of what the transport holds
    /// (its frames stay until written or dropped, no longer counted); the
    /// transport then finds the queue ended.
    fn give_back(&self) {
        let mut state = self.state();
        state.rx.close();
        while state.rx.try_recv().is_ok() {}
        state.leases.revoke();
    }
}

/// The budget of a stream's frames that the transport holds: each frame's
/// part comes back when the frame is dropped, or all of it when the stream
/// is given back (its client stopped reading: HTTP/2 may hold its frames
/// for as long as the connection lives).
#[derive(Default)]
struct Leases(std::sync::Mutex<Option<OwnedSemaphorePermit>>);

/// One frame's part of its stream's [`Leases`].
struct Lease {
    leases: Arc<Leases>,
    units: usize,
}

impl Leases {
    fn lease(leases: &Arc<Leases>, permit: OwnedSemaphorePermit) -> Lease {
        let units = permit.num_permits();
        let mut held = leases.held();
        match held.as_mut() {
            Some(all) => all.merge(permit),
            None => *held = Some(permit),
        }
        Lease {
            leases: leases.clone(),
            units,
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Option<OwnedSemaphorePermit>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives back the budget of every frame (the stream is over).
    fn revoke(&self) {
        drop(self.held().take());
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut held = self.leases.held();
        // Nothing after `revoke`.
        if let Some(all) = held.as_mut() {
            if all.num_permits() <= self.units {
                *held = None;
            } else {
                drop(all.split(self.units));
            }
        }
    }
}

struct Sender {
    shards: Arc<[Arc<ShardShared>]>,
    limits: Arc<SubscriberLimits>,
    admission: Arc<Admission>,
    outbox: Outbox,
    registered: Registered,
    /// The streams this one shares live responses with.
    group: Option<Arc<Group>>,
    /// Events queued so far (shown by ListSubscribers).
    sent: AtomicU64,
    metrics: Connected,
}

/// Why a stream stopped before its end.
enum Stop {
    /// The client went away: nothing more to send.
    Gone,
    Failed(Status),
}

impl From<SubscribeError> for Stop {
    fn from(e: SubscribeError) -> Self {
        Stop::Failed(crate::status::subscribe_status(e))
    }
}

impl Sender {
    /// Feeds the stream until the subscription ends, fails, the client goes
    /// away, a newer epoch supersedes it, or the server shuts down.
    pub async fn run(
        self,
        sub: Subscription,
        options: StreamOptions,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let stalls = self.outbox.stalls();
        // Biased (polled in this order): the same run every time, which the
        // stream simulation's replays rely on.
        let outcome = tokio::select! {
            biased;
            outcome = self.feed(sub, &options) => outcome,
            superseded = self.registered.superseded() => {
                Err(Stop::Failed(ringfeed_proto::wire::superseded_status(superseded.0)))
            }
            _ = shutdown.changed() => Err(Stop::Failed(Status::unavailable("the server is shutting down"))),
            _ = self.outbox.closed() => Err(Stop::Gone),
            stalled = stalls.stalled(self.limits.stall_timeout) => {
                Err(Stop::Failed(stalls.give_back(stalled, &self.registered, &self.metrics.0)))
            }
        };
        // The feed (with any backlog place or bytes it held) is gone by now.
        if let Err(Stop::Failed(status)) = outcome {
            if status.code() == Code::OutOfRange {
                self.metrics.0.out_of_range();
            }
            self.outbox.fail(status);
        }
    }

    async fn feed(&self, mut sub: Subscription, options: &StreamOptions) -> Result<(), Stop> {
        let mut place = None;
        if options.chunk_mode {
            loop {
                let admitted = self
                    .admit(&sub, &mut place, self.limits.chunk_max_bytes)
                    .await;
                let permit = self.reserved(admitted, self.limits.chunk_max_bytes).await;
                let Some(chunk) = sub.poll_chunk(self.limits.chunk_max_bytes)? else {
                    break;
                };
                let permit = trim(permit, chunk.records.len());
                let item = RawItem::Chunk(chunk_message(chunk));
                self.send(&sub, item, Some(permit), "chunks").await?;
            }
            let marker = RawItem::ChunkModeEnd(v1::ChunkModeEnd {});
            self.send(&sub, marker, None, "chunks").await?;
        }
        // Where the subscription stood before its next response.
        let mut from = Vec::with_capacity(self.shards.len());
        loop {
            let admitted = self
                .admit(&sub, &mut place, self.limits.batch_max_bytes)
                .await;
            from.clear();
            from.extend(sub.offsets());
            let first = match self.next_event(&mut sub, options.heartbeat).await? {
                Some(first) => first,
                None => return Ok(()), // until_ns reached: the stream ends OK
            };
            // A ring reader reserves now that it has an event: a view costs
            // nothing until sent, and a live subscriber waiting for events
            // holds no budget.
            let permit = self.reserved(admitted, self.limits.batch_max_bytes).await;
            // A live reader in company: another stream may have built this
            // response already, and one built here may serve the others.
            let sharing = (place.is_none())
                .then_some(self.group.as_ref())
                .flatten()
                .filter(|g| g.has_company());
            if let Some(shared) = sharing.and_then(|g| g.find(&from)) {
                // Its events include `first`: ours is dropped, not sent twice.
                if sub.skip_to(&shared.to)? {
                    let used = shared.response.encoded_len();
                    self.metrics.0.shared_response_reused();
                    self.queue(
                        &sub,
                        shared.response.clone(),
                        shared.cursor.clone(),
                        shared.events,
                        Some(trim(permit, used)),
                        "live",
                    )
                    .await?;
                    continue;
                }
            }
            let mut events = Vec::new();
            shown(&first, options, &mut events);
            let mut bytes = first.record_bytes().len();
            let mut failure = None;
            // Whether the response ends at the live edge (nothing more was
            // ready); a single-event response counts as one.
            let mut at_edge = !options.batching;
            if options.batching {
                while events.len() < self.limits.batch_max_events
                    && bytes < self.limits.batch_max_bytes
                {
                    match sub.poll() {
                        Ok(Step::Event(d)) => {
                            bytes += d.record_bytes().len();
                            shown(&d, options, &mut events);
                        }
                        Ok(_) => {
                            at_edge = true;
                            break;
                        }
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
            }
            let item = match events.len() {
                // Nothing the read scope shows (a narrowed filter never
                // delivers such an event; this is the last guard).
                0 => {
                    if let Some(e) = failure {
                        return Err(e.into());
                    }
                    continue;
                }
                1 => RawItem::Event(events.pop().expect("one event")),
                _ => RawItem::Batch(RawEventBatch { events }),
            };
            let mode = if place.is_some() { "backlog" } else { "live" };
            // Only responses at the live edge are shared: a catching-up
            // stream's full batches are rarely taken by another (see
            // shared.rs).
            match sharing.filter(|_| at_edge) {
                Some(group) => self.share(&sub, group, &from, item, permit).await?,
                None => {
                    self.send(&sub, item, Some(trim(permit, bytes)), mode)
                        .await?
                }
            }
            if let Some(e) = failure {
                return Err(e.into());
            }
        }
    }

    /// Takes or gives back a backlog place as the subscription moves below or
    /// into the ring, and while below reserves `bytes` for the next response
    /// (before reading it: reading below the ring allocates).
    async fn admit(
        &self,
        sub: &Subscription,
        place: &mut Option<Place>,
        bytes: usize,
    ) -> Option<OwnedSemaphorePermit> {
        if !sub.reads_backlog() {
            *place = None;
            return None;
        }
        if place.is_none() {
            let cursor = sub.cursor().to_bytes().into();
            let sent = self.sent.load(AtomicOrdering::Relaxed);
            show(
                &self.registered,
                sub,
                &cursor,
                "waiting for admission",
                sent,
            );
            *place = Some(self.admission.place().await);
        }
        Some(self.admission.bytes(bytes).await)
    }

    /// The response's budget: what `admit` reserved (a backlog reader, before
    /// reading), else `bytes` reserved now.
    async fn reserved(
        &self,
        admitted: Option<OwnedSemaphorePermit>,
        bytes: usize,
    ) -> OwnedSemaphorePermit {
        match admitted {
            Some(permit) => permit,
            None => self.admission.bytes(bytes).await,
        }
    }

    /// The next event, sending heartbeats while none comes.
    async fn next_event(
        &self,
        sub: &mut Subscription,
        heartbeat: Option<Duration>,
    ) -> Result<Option<Delivered>, Stop> {
        // Events committed past where it stands: what is at hand, without
        // listening for more (none committed: nothing is, no poll).
        let mut behind = sub.lag_events();
        if behind > 0 {
            match sub.poll()? {
                Step::Event(event) => return Ok(Some(event)),
                Step::End => return Ok(None),
                Step::Pending => behind = sub.lag_events(),
            }
        }
        // The stream waits. With nothing committed past where it stands it
        // is listed caught up while it waits (see `Registered::idle`: it
        // shows itself only when it sends, so its shown position may trail
        // what its filter skipped). Waiting with events committed but not
        // deliverable yet (durable-only, a merge held by a shard's claim),
        // it shows where it stands and is listed behind.
        let mut idle = (behind == 0).then(|| self.registered.idle());
        if idle.is_none() {
            show_position(&self.registered, sub);
        }
        let before: u64 = sub.offsets().sum();
        let next = self.wait_for_event(sub, heartbeat, &mut idle).await;
        if idle.is_some() && sub.offsets().sum::<u64>() > before + 1 {
            // The filter skipped events during the wait: where it stands
            // now, before it counts as waiting no more, so they never show
            // as lag. (Past one event, the event it waited for, there is
            // nothing new to show: no lock.)
            show_position(&self.registered, sub);
        }
        next
    }

    /// Waits for the next event, sending heartbeats while none comes; the
    /// stream is not `idle` while a heartbeat is being queued (a client
    /// that stopped reading holds the queue, and the stream falls behind).
    async fn wait_for_event<'s>(
        &'s self,
        sub: &mut Subscription,
        heartbeat: Option<Duration>,
        idle: &mut Option<Idle<'s>>,
    ) -> Result<Option<Delivered>, Stop> {
        let Some(every) = heartbeat else {
            return Ok(sub.next().await?);
        };
        // Shortly before each heartbeat, idle shards are asked to claim up
        // to now; their answers wake `next`, whose poll folds them into the
        // watermark, so the heartbeat's watermark is fresh (within `lead`),
        // not the previous heartbeat's time: a merge of several feeds (a
        // cluster stream) is held by a quiet one for at most about one
        // interval, not two.
        let lead = (every / 5).min(Duration::from_millis(10));
        let mut quiet_since = tokio::time::Instant::now();
        let mut asked = false;
        loop {
            tokio::select! {
                biased;
                next = sub.next() => return Ok(next?),
                _ = tokio::time::sleep_until(quiet_since + every - lead), if !asked => {
                    sub.request_claims(now_ns());
                    asked = true;
                }
                _ = tokio::time::sleep_until(quiet_since + every) => {
                    let was_idle = idle.take().is_some();
                    let beat = heartbeat_item(&self.shards, sub);
                    self.send(sub, beat, None, "live").await?;
                    if was_idle && sub.lag_events() == 0 {
                        *idle = Some(self.registered.idle());
                    }
                    quiet_since = tokio::time::Instant::now();
                    asked = false;
                }
            }
        }
    }

    /// Encodes `item` once, keeps it in `group` for the streams behind (if
    /// the budget has room for it) and queues it.
    async fn share(
        &self,
        sub: &Subscription,
        group: &Group,
        from: &[u64],
        item: RawItem,
        permit: OwnedSemaphorePermit,
    ) -> Result<(), Stop> {
        let events = match &item {
            RawItem::Batch(b) => b.events.len() as u64,
            _ => 1,
        };
        let cursor: Bytes = sub.cursor().to_bytes().into();
        let response = RawSubscribeResponse::encoded(cursor.clone(), item);
        let used = response.encoded_len();
        if let Some(budget) = self.admission.try_spare(used) {
            let shared = Shared::new(
                from,
                sub.progress(),
                response.clone(),
                cursor.clone(),
                events,
                budget,
            );
            group.keep(Arc::new(shared));
            self.metrics.0.shared_response_built();
        }
        let permit = Some(trim(permit, used));
        self.queue(sub, response, cursor, events, permit, "live")
            .await
    }

    /// Queues `item` with the subscription's cursor after it.
    async fn send(
        &self,
        sub: &Subscription,
        item: RawItem,
        permit: Option<OwnedSemaphorePermit>,
        mode: &'static str,
    ) -> Result<(), Stop> {
        let events = match &item {
            RawItem::Event(_) => 1,
            RawItem::Batch(b) => b.events.len() as u64,
            RawItem::Chunk(c) => u64::from(c.record_count),
            RawItem::Heartbeat(_) => {
                self.metrics.0.heartbeat_sent();
                0
            }
            RawItem::ChunkModeEnd(_) => 0,
        };
        let cursor: Bytes = sub.cursor().to_bytes().into();
        let response = RawSubscribeResponse::new(cursor.clone(), item);
        self.queue(sub, response, cursor, events, permit, mode)
            .await
    }

    /// Queues `response`, which carries `events` and positions the client at
    /// `cursor` (waiting while the queue is full), and shows the new
    /// position in ListSubscribers.
    async fn queue(
        &self,
        sub: &Subscription,
        response: RawSubscribeResponse,
        cursor: Bytes,
        events: u64,
        permit: Option<OwnedSemaphorePermit>,
        mode: &'static str,
    ) -> Result<(), Stop> {
        let bytes = response.encoded_len();
        let lag = ((now_ns() - sub.watermark()).max(0) as f64 / 1e9).min(1e9);
        let mut send = std::pin::pin!(self.outbox.send(response, permit));
        let sent = tokio::select! {
            // Biased: a send with room completes before any timer is armed.
            biased;
            sent = &mut send => sent,
            _ = tokio::time::sleep(STALLED_AFTER) => {
                self.warn_stalled();
                send.await
            }
        };
        sent.map_err(|_| Stop::Gone)?;
        // Counted and shown once queued: a response waiting for room, and
        // dropped if the stream ends meanwhile, was shown as sent before.
        let sent = self.sent.fetch_add(events, AtomicOrdering::Relaxed) + events;
        show(&self.registered, sub, &cursor, mode, sent);
        if events > 0 {
            self.metrics.0.events_sent(events as usize, bytes, lag);
        }
        Ok(())
    }

    /// Tells the operator a client has stopped reading, what that costs and
    /// what to do, at most once per 10 s over all streams.
    fn warn_stalled(&self) {
        let Some(suppressed) = STALLED_WARNINGS.check() else {
            return;
        };
        let (name, peer) = self
            .registered
            .update(|i| (i.client_name.clone(), i.peer.clone()));
        tracing::warn!(
            suppressed,
            "subscriber {name:?} at {peer} has read nothing for {} s; it holds a task and up to \
             {} queued responses (views of stored records, at most {} KiB each, counted against \
             the response budget), never the shards; if it reads again within {} s \
             (stall_timeout_secs) it catches up, else its place is given back and its stream \
             ends UNAVAILABLE: check or restart that client (`ringfeed subscribers` lists them)",
            STALLED_AFTER.as_secs(),
            self.limits.queue_responses,
            self.limits.batch_max_bytes.max(self.limits.chunk_max_bytes) >> 10,
            self.limits.stall_timeout.as_secs()
        );
    }
}

/// Gives back the part of a byte reservation a response did not use.
fn trim(mut permit: OwnedSemaphorePermit, used: usize) -> OwnedSemaphorePermit {
    let keep = budget_units(used).max(1);
    if permit.num_permits() > keep {
        drop(permit.split(permit.num_permits() - keep));
    }
    permit
}

/// Shows where the stream stands now (its position and lag), leaving its
/// cursor as its last response set it: nothing allocated.
fn show_position(registered: &Registered, sub: &Subscription) {
    let lag_events = sub.lag_events();
    let now = now_ns();
    let lag_seconds = ((now - sub.watermark()).max(0) as f64 / 1e9).min(1e9);
    registered.show_at(now, sub.offsets(), |info| {
        info.lag_events = lag_events;
        info.lag_seconds = lag_seconds;
    });
}

/// Refreshes what ListSubscribers shows for this stream.
fn show(
    registered: &Registered,
    sub: &Subscription,
    cursor: &Bytes,
    mode: &'static str,
    sent: u64,
) {
    let lag_events = sub.lag_events();
    let now = now_ns();
    let lag_seconds = ((now - sub.watermark()).max(0) as f64 / 1e9).min(1e9);
    registered.show_at(now, sub.offsets(), |info| {
        info.cursor = cursor.clone();
        info.lag_events = lag_events;
        info.lag_seconds = lag_seconds;
        info.events_sent = sent;
        if info.mode != mode {
            info.mode = mode.into();
        }
    });
}

fn raw_event(d: &Delivered) -> RawEventMessage {
    RawEventMessage::new(d.ts, d.shard, d.offset, d.payload())
}

/// Adds `d` to `events` as the stream's read scope, if any, shows it.
fn shown(d: &Delivered, options: &StreamOptions, events: &mut Vec<RawEventMessage>) {
    let Some(scope) = &options.scope else {
        events.push(raw_event(d));
        return;
    };
    let payload = d.payload();
    match scope.show_record(&d.header(), &payload) {
        crate::auth::Shown::Same => events.push(raw_event(d)),
        crate::auth::Shown::Rewritten(bytes) => {
            events.push(RawEventMessage::new(d.ts, d.shard, d.offset, bytes))
        }
        crate::auth::Shown::Hidden => {}
    }
}

fn chunk_message(chunk: RawChunk) -> v1::ChunkMessage {
    v1::ChunkMessage {
        shard: chunk.shard,
        first_offset: chunk.first_offset,
        record_count: chunk.count as u32,
        crc32c: crc32c::crc32c(&chunk.records),
        records: chunk.records,
        first_ts_ns: chunk.first_ts,
        last_ts_ns: chunk.last_ts,
    }
}

fn heartbeat_item(shards: &[Arc<ShardShared>], sub: &Subscription) -> RawItem {
    let shards = shards
        .iter()
        .map(|shard| {
            let w = shard.watermarks.snapshot();
            v1::ShardWatermark {
                shard: shard.id,
                committed_next: w.committed_next,
                claimed_ts_ns: w.claimed_ts,
                flushed_next: w.flushed_next,
                flushed_ts_ns: w.flushed_ts,
            }
        })
        .collect();
    RawItem::Heartbeat(v1::Heartbeat {
        merged_watermark_ns: sub.watermark(),
        shards,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heartbeat() -> RawSubscribeResponse {
        RawSubscribeResponse::new(Bytes::new(), RawItem::Heartbeat(v1::Heartbeat::default()))
    }

    /// A budget of 8 units and an outbox with two responses queued, of 3
    /// and 4 units.
    async fn two_queued() -> (Arc<Semaphore>, Outbox, Responses) {
        let budget = Arc::new(Semaphore::new(8));
        let (outbox, responses) = Outbox::new(&SubscriberLimits::default());
        for n in [3, 4] {
            let permit = budget.clone().try_acquire_many_owned(n).unwrap();
            outbox.send(heartbeat(), Some(permit)).await.unwrap();
        }
        (budget, outbox, responses)
    }

    /// A response's budget lasts exactly as long as the frame the transport
    /// took, whatever else happens on its stream: not waiting for the next
    /// response to be built (a sender waiting for budget must never wait on
    /// what its own stream holds, issue 41), and every part of a frame
    /// (HTTP/2 splits them) keeps it.
    #[tokio::test]
    async fn a_response_holds_its_budget_until_its_frame_is_dropped() {
        // The outbox lives on: the stream is open, nothing more queued.
        let (budget, _outbox, mut responses) = two_queued().await;
        let frame = |r: Option<Result<RawSubscribeResponse, Status>>| match r {
            Some(Ok(RawSubscribeResponse::Framed(frame))) => frame,
            other => panic!("not a frame: {other:?}"),
        };
        let first = frame(responses.next().await);
        let part = first.slice(2..);
        drop(first);
        let second = frame(responses.next().await);
        assert_eq!(budget.available_permits(), 1, "both held while taken");
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(responses.as_mut().poll_next(&mut cx).is_pending());
        assert_eq!(
            budget.available_permits(),
            1,
            "an empty poll changes nothing"
        );
        drop(second);
        assert_eq!(
            budget.available_permits(),
            5,
            "the second's back when dropped"
        );
        drop(part);
        assert_eq!(
            budget.available_permits(),
            8,
            "the first's with its last part"
        );
    }

    /// A stream given back (its client stopped reading) gives back what its
    /// transport holds too: HTTP/2 may keep those frames for as long as the
    /// connection lives.
    #[tokio::test]
    async fn a_stream_given_back_gives_back_its_frames_budget() {
        let (budget, outbox, mut responses) = two_queued().await;
        let taken = responses.next().await;
        assert_eq!(budget.available_permits(), 1);
        outbox.stalls().queue.upgrade().unwrap().give_back();
        assert_eq!(budget.available_permits(), 8);
        drop(taken);
        assert_eq!(budget.available_permits(), 8, "given back once");
    }

    /// A stall is counted from when responses started waiting, not from the
    /// transport's last take: a client quiet for longer than the timeout
    /// that is sent a response is not given back before it could take it.
    #[tokio::test(start_paused = true)]
    async fn a_quiet_spell_is_not_a_stall() {
        let timeout = Duration::from_secs(4);
        let (outbox, mut responses) = Outbox::new(&SubscriberLimits::default());
        let stalls = outbox.stalls();
        let stalled = tokio::spawn(async move { stalls.stalled(timeout).await });
        // Quiet for 10 timeouts: nothing queued, nothing taken.
        tokio::time::sleep(timeout * 10).await;
        outbox.send(heartbeat(), None).await.unwrap();
        // It counts from the first check that saw it waiting (within a
        // quarter timeout), so not before `timeout` from now.
        tokio::time::sleep(timeout - Duration::from_millis(1)).await;
        assert!(!stalled.is_finished(), "given back after a quiet spell");
        // Taken: no stall. Then one left untaken is, within 1.25 timeouts.
        assert!(responses.next().await.is_some());
        outbox.send(heartbeat(), None).await.unwrap();
        let since = tokio::time::Instant::now();
        let stall = stalled.await.unwrap();
        assert!(stall >= timeout, "{stall:?}");
        assert!(
            since.elapsed() <= timeout + timeout / 4,
            "{:?}",
            since.elapsed()
        );
    }
}
