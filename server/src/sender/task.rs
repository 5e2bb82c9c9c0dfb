//! The sender task: feeds one subscription stream from its engine
//! subscription (chunks, batches, shared live responses, heartbeats) into
//! its outbox, and shows where it stands in ListSubscribers.

use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::Duration;

use ringfeed_engine::clock::now_ns;
use ringfeed_engine::{Delivered, RateLimit, ShardShared, Step, SubscribeError, Subscription};
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::prost::Message;
use ringfeed_proto::tonic::{Code, Status};
use ringfeed_proto::{v1, RawEventBatch, RawItem, RawSubscribeResponse};
use tokio::sync::{watch, OwnedSemaphorePermit};

use super::admission::{trim, Admission, Place};
use super::encode::{chunk_message, heartbeat_item, shown};
use super::outbox::Outbox;
use super::{StreamOptions, SubscriberLimits};
use crate::metrics::ServerMetrics;
use crate::registry::{Idle, Registered};
use crate::shared::{Group, Shared};

/// A client that has read nothing for this long gets a warning in the log.
const STALLED_AFTER: Duration = Duration::from_secs(10);
static STALLED_WARNINGS: RateLimit = RateLimit::new(Duration::from_secs(10));

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

pub(super) struct Sender {
    pub(super) shards: Arc<[Arc<ShardShared>]>,
    pub(super) limits: Arc<SubscriberLimits>,
    pub(super) admission: Arc<Admission>,
    pub(super) outbox: Outbox,
    pub(super) registered: Registered,
    /// The streams this one shares live responses with.
    pub(super) group: Option<Arc<Group>>,
    /// Events queued so far (shown by ListSubscribers).
    pub(super) sent: AtomicU64,
    pub(super) metrics: Connected,
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
                let who = self.registered.update(|i| format!("{:?} at {}", i.client_name, i.peer));
                Err(Stop::Failed(stalls.give_back(stalled, &who, &self.metrics.0)))
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
                let Some(chunk) = sub.next_chunk(self.limits.chunk_max_bytes).await? else {
                    break;
                };
                let permit = trim(permit, chunk.records.len());
                let item = RawItem::Chunk(chunk_message(chunk, 0));
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
            RawItem::Chunk(c) => {
                self.metrics.0.chunk_sent();
                u64::from(c.record_count)
            }
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
