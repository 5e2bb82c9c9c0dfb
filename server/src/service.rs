//! The gRPC service: appends go to the engine's shards, subscriptions run as
//! tokio tasks over engine subscriptions, status reads the shards' watermarks.
//!
//! Stored events are the producer's `Event` encoding, verbatim: the server
//! decodes a request's events once to validate them and to read the header
//! fields filters need, and sends stored bytes back out without decoding
//! (see `ringfeed_proto::raw`).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringfeed_engine::{
    AppendError, Cursor, Delivered, Durability, Engine, Filter, NewEvent, Ordering, RateLimit,
    Start, Step, SubscribeError, SubscribeRequest, Subscription,
};
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::prost::Message;
use ringfeed_proto::tonic::{self, Request, Response, Status, Streaming};
use ringfeed_proto::{
    v1, RawAppendRequest, RawEventBatch, RawEventMessage, RawItem, RawSubscribeResponse, RingFeed,
};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

use crate::metrics::ServerMetrics;

/// Most events and bytes one batch response carries.
const BATCH_EVENTS: usize = 512;
const BATCH_BYTES: usize = 1 << 20;
/// Responses queued per subscriber before the sender waits on the client.
const SUBSCRIBER_QUEUE: usize = 16;
/// Default and smallest heartbeat interval.
const HEARTBEAT_DEFAULT: Duration = Duration::from_secs(1);
const HEARTBEAT_MIN: Duration = Duration::from_millis(10);
/// A send that has waited this long on a client that reads nothing is reported.
const STALLED_AFTER: Duration = Duration::from_secs(10);
/// Stalled-subscriber warnings of every stream share one limit.
static STALLED_WARNINGS: RateLimit = RateLimit::new(Duration::from_secs(10));

/// The ringfeed service over one engine. Clones share the engine and registry.
#[derive(Clone)]
pub struct Service {
    engine: Arc<Engine>,
    registry: Arc<Registry>,
    shutdown: watch::Receiver<bool>,
    metrics: Arc<ServerMetrics>,
}

/// Connected subscription streams.
#[derive(Default)]
struct Registry {
    next_id: AtomicU64,
    streams: Mutex<HashMap<u64, v1::SubscriberInfo>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, v1::SubscriberInfo>> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Removes a stream from the registry when its task ends, however it ends.
struct Registered {
    registry: Arc<Registry>,
    id: u64,
    metrics: Arc<ServerMetrics>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
        self.metrics.subscriber_disconnected();
    }
}

impl Registered {
    /// Tells the operator a client has stopped reading, what that costs and
    /// what to do, at most once per 10 s over all streams.
    fn warn_stalled(&self, waited: Duration) {
        let Some(suppressed) = STALLED_WARNINGS.check() else {
            return;
        };
        let (name, peer) = self
            .registry
            .lock()
            .get(&self.id)
            .map(|i| (i.client_name.clone(), i.peer.clone()))
            .unwrap_or_default();
        tracing::warn!(
            suppressed,
            "subscriber {name:?} at {peer} has read nothing for {} s; it holds a task and up to \
             {SUBSCRIBER_QUEUE} queued responses (at most {} MiB), never the shards; it will stay \
             connected and catch up from disk if it reads again: check or restart that client \
             (`ringfeed status` lists subscribers)",
            waited.as_secs(),
            SUBSCRIBER_QUEUE * BATCH_BYTES >> 20
        );
    }
}

impl Service {
    /// `shutdown` turning true ends every subscription stream (UNAVAILABLE).
    pub fn new(
        engine: Arc<Engine>,
        shutdown: watch::Receiver<bool>,
        metrics: Arc<ServerMetrics>,
    ) -> Service {
        Service {
            engine,
            registry: Arc::new(Registry::default()),
            shutdown,
            metrics,
        }
    }

    pub fn metrics(&self) -> &Arc<ServerMetrics> {
        &self.metrics
    }

    /// The largest lag among connected subscribers as of each one's last
    /// response; 0 with none connected.
    pub fn max_lag_seconds(&self) -> f64 {
        self.registry
            .lock()
            .values()
            .map(|s| s.lag_seconds)
            .fold(0.0, f64::max)
    }

    async fn append_batch(&self, request: RawAppendRequest) -> Result<v1::AppendResponse, Status> {
        let durability = match v1::Durability::try_from(request.durability) {
            Ok(v1::Durability::Durable) => Durability::Durable,
            Ok(_) => Durability::Memory,
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "durability: unknown value {}",
                    request.durability
                )))
            }
        };
        let events = request
            .events
            .into_iter()
            .enumerate()
            .map(|(i, bytes)| new_event(i, bytes))
            .collect::<Result<Vec<_>, Status>>()?;
        let positions = self
            .engine
            .append(events, durability)
            .await
            .map_err(append_status)?;
        Ok(v1::AppendResponse {
            positions: positions
                .into_iter()
                .map(|p| v1::Position {
                    shard: p.shard,
                    offset: p.offset,
                    ts_ns: p.ts,
                })
                .collect(),
        })
    }
}

/// Decodes one stored-to-be event to validate it and read its header fields.
fn new_event(index: usize, bytes: Bytes) -> Result<NewEvent, Status> {
    let event = v1::Event::decode(bytes.clone()).map_err(|e| {
        Status::invalid_argument(format!("events[{index}]: not a valid Event: {e}"))
    })?;
    Ok(NewEvent {
        directory: event.directory,
        old_name: event.old_entry.map(|e| e.name).unwrap_or_default(),
        new_name: event.new_entry.map(|e| e.name).unwrap_or_default(),
        new_parent: event.new_parent_path,
        signatures: event.signatures,
        payload: bytes.to_vec(),
    })
}

/// The engine's field names in the protocol's terms.
fn proto_field(field: &str) -> &str {
    match field {
        "old_name" => "old_entry.name",
        "new_name" => "new_entry.name",
        "new_parent" => "new_parent_path",
        other => other,
    }
}

fn append_status(e: AppendError) -> Status {
    match &e {
        AppendError::Invalid {
            index,
            field,
            reason,
        } => Status::invalid_argument(format!("events[{index}].{}: {reason}", proto_field(field))),
        AppendError::Frame(_) | AppendError::BatchTooLarge { .. } => {
            Status::invalid_argument(e.to_string())
        }
        AppendError::ResourceExhausted { .. } => Status::resource_exhausted(e.to_string()),
        AppendError::Latched { .. } | AppendError::ShutDown => Status::unavailable(e.to_string()),
    }
}

fn subscribe_status(e: SubscribeError) -> Status {
    match &e {
        SubscribeError::Cursor(_) | SubscribeError::Filter(_) => {
            Status::invalid_argument(e.to_string())
        }
        SubscribeError::BelowRetention { .. } => Status::out_of_range(e.to_string()),
        SubscribeError::Corrupt { .. }
        | SubscribeError::Io { .. }
        | SubscribeError::Record { .. } => Status::data_loss(e.to_string()),
    }
}

/// The engine request for a protocol request; INVALID_ARGUMENT names the field.
fn engine_request(r: &v1::SubscribeRequest) -> Result<SubscribeRequest, Status> {
    let start = match &r.start {
        None | Some(v1::subscribe_request::Start::Now(_)) => Start::Now,
        Some(v1::subscribe_request::Start::Beginning(_)) => Start::Beginning,
        Some(v1::subscribe_request::Start::SinceNs(ns)) => Start::SinceNs(*ns),
        Some(v1::subscribe_request::Start::Cursor(bytes)) => Start::Cursor(
            Cursor::from_bytes(bytes)
                .map_err(|e| Status::invalid_argument(format!("cursor: {e}")))?,
        ),
    };
    let ordering = match v1::Ordering::try_from(r.ordering) {
        Ok(v1::Ordering::PerShard) => Ordering::PerShard,
        Ok(_) => Ordering::Merged,
        Err(_) => {
            return Err(Status::invalid_argument(format!(
                "ordering: unknown value {}",
                r.ordering
            )))
        }
    };
    let mut prefixes = Vec::new();
    if !r.path_prefix.is_empty() {
        prefixes.push(r.path_prefix.clone());
    }
    prefixes.extend(r.path_prefixes.iter().cloned());
    Ok(SubscribeRequest {
        start,
        filter: Filter {
            prefixes,
            directories: r.directories.clone(),
            exclude_prefixes: r.exclude_prefixes.clone(),
            signature: (r.signature != 0).then_some(r.signature),
        },
        until_ns: (r.until_ns != 0).then_some(r.until_ns),
        ordering,
    })
}

fn raw_event(d: &Delivered) -> RawEventMessage {
    RawEventMessage::new(d.ts, d.shard, d.offset, d.payload())
}

type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl RingFeed for Service {
    async fn append(
        &self,
        request: Request<RawAppendRequest>,
    ) -> Result<Response<v1::AppendResponse>, Status> {
        self.append_batch(request.into_inner())
            .await
            .map(Response::new)
    }

    type AppendStreamStream = ResponseStream<v1::AppendResponse>;

    async fn append_stream(
        &self,
        request: Request<Streaming<RawAppendRequest>>,
    ) -> Result<Response<Self::AppendStreamStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE);
        let service = self.clone();
        let mut shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    next = inbound.next() => next,
                    _ = shutdown.changed() => {
                        let _ = tx.send(Err(Status::unavailable("the server is shutting down"))).await;
                        return;
                    }
                };
                let result = match next {
                    None => return,
                    Some(Err(status)) => Err(status),
                    Some(Ok(batch)) => service.append_batch(batch).await,
                };
                let failed = result.is_err();
                if tx.send(result).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    type SubscribeStream = ResponseStream<RawSubscribeResponse>;

    async fn subscribe(
        &self,
        request: Request<v1::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let peer = request
            .remote_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let r = request.into_inner();
        let subscription = self.engine.subscribe(engine_request(&r)?).map_err(|e| {
            self.metrics.subscribe_failed(&e);
            subscribe_status(e)
        })?;
        let id = self.registry.next_id.fetch_add(1, AtomicOrdering::Relaxed);
        self.registry.lock().insert(
            id,
            v1::SubscriberInfo {
                client_name: r.client_name.clone(),
                client_id: r.client_id,
                client_epoch: r.client_epoch,
                peer,
                path_prefix: r.path_prefix.clone(),
                path_prefixes: r.path_prefixes.clone(),
                directories: r.directories.clone(),
                exclude_prefixes: r.exclude_prefixes.clone(),
                cursor: subscription.cursor().to_bytes().into(),
                mode: if r.batching {
                    "events, batched"
                } else {
                    "events"
                }
                .into(),
                connected_since_ns: now_ns(),
                signature: r.signature,
                ordering: r.ordering,
                ..Default::default()
            },
        );
        self.metrics.subscriber_connected();
        let registered = Registered {
            registry: self.registry.clone(),
            id,
            metrics: self.metrics.clone(),
        };
        let heartbeat = r.heartbeats.then(|| {
            match r.heartbeat_interval_ms {
                0 => HEARTBEAT_DEFAULT,
                ms => Duration::from_millis(u64::from(ms)),
            }
            .max(HEARTBEAT_MIN)
        });
        let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE);
        tokio::spawn(run_subscriber(
            self.engine.clone(),
            subscription,
            r.batching,
            heartbeat,
            tx,
            self.shutdown.clone(),
            registered,
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn status(
        &self,
        _request: Request<v1::StatusRequest>,
    ) -> Result<Response<v1::StatusResponse>, Status> {
        let shards = (0..self.engine.shard_count())
            .map(|id| {
                let shard = self.engine.shard(id);
                let w = shard.watermarks.snapshot();
                let segment_count = shard.files().list().map_or(0, |names| {
                    names
                        .iter()
                        .filter(|n| ringfeed_engine::segment::parse_segment_name(n).is_some())
                        .count()
                }) as u32;
                v1::ShardStatus {
                    shard: id,
                    committed_next: w.committed_next,
                    committed_ts_ns: w.committed_ts,
                    claimed_ts_ns: w.claimed_ts,
                    flushed_next: w.flushed_next,
                    flushed_ts_ns: w.flushed_ts,
                    evicted_below: w.evicted_below,
                    retained_from: w.retained_from,
                    ring_bytes: shard.ring_bytes() as u64,
                    unflushed_bytes: shard.unflushed_bytes() as u64,
                    segment_count,
                    latched: shard.latched().unwrap_or_default(),
                }
            })
            .collect();
        Ok(Response::new(v1::StatusResponse {
            shards,
            subscribers: self.registry.lock().len() as u64,
            now_ns: now_ns(),
            version: env!("CARGO_PKG_VERSION").into(),
        }))
    }

    async fn list_subscribers(
        &self,
        _request: Request<v1::ListSubscribersRequest>,
    ) -> Result<Response<v1::ListSubscribersResponse>, Status> {
        let mut subscribers: Vec<v1::SubscriberInfo> =
            self.registry.lock().values().cloned().collect();
        subscribers.sort_by_key(|s| s.connected_since_ns);
        Ok(Response::new(v1::ListSubscribersResponse { subscribers }))
    }
}

/// Feeds one subscription stream until it ends, fails, the client goes away
/// or the server shuts down. The bounded channel is the backpressure: when the
/// client reads slowly, this task waits and the engine subscription simply
/// stays where it is.
async fn run_subscriber(
    engine: Arc<Engine>,
    mut sub: Subscription,
    batching: bool,
    heartbeat: Option<Duration>,
    tx: mpsc::Sender<Result<RawSubscribeResponse, Status>>,
    mut shutdown: watch::Receiver<bool>,
    registered: Registered,
) {
    let mut sent = 0u64;
    loop {
        let quiet = async {
            match heartbeat {
                Some(every) => tokio::time::sleep(every).await,
                None => std::future::pending().await,
            }
        };
        let next = tokio::select! {
            next = sub.next() => next,
            _ = quiet => {
                let beat = heartbeat_message(&engine, &sub);
                if tx.send(Ok(beat)).await.is_err() {
                    return;
                }
                registered.metrics.heartbeat_sent();
                continue;
            }
            _ = shutdown.changed() => {
                let _ = tx.send(Err(Status::unavailable("the server is shutting down"))).await;
                return;
            }
            _ = tx.closed() => return,
        };
        let first = match next {
            Ok(Some(event)) => event,
            Ok(None) => return, // until_ns reached: the stream ends OK
            Err(e) => {
                registered.metrics.subscribe_failed(&e);
                let _ = tx.send(Err(subscribe_status(e))).await;
                return;
            }
        };
        let mut events = vec![raw_event(&first)];
        let mut failure = None;
        if batching {
            // Whatever else is ready now joins the batch; at the live edge
            // nothing is, so live events go one by one.
            let mut bytes = first.record_bytes().len();
            while events.len() < BATCH_EVENTS && bytes < BATCH_BYTES {
                match sub.poll() {
                    Ok(Step::Event(d)) => {
                        bytes += d.record_bytes().len();
                        events.push(raw_event(&d));
                    }
                    Ok(_) => break,
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        let count = events.len();
        sent += count as u64;
        let lag = ((now_ns() - sub.watermark()).max(0) as f64 / 1e9).min(1e9);
        let cursor: Bytes = sub.cursor().to_bytes().into();
        let item = if events.len() == 1 {
            RawItem::Event(events.pop().expect("one event"))
        } else {
            RawItem::Batch(RawEventBatch { events })
        };
        if let Some(info) = registered.registry.lock().get_mut(&registered.id) {
            info.cursor = cursor.clone();
            info.events_sent = sent;
            info.lag_seconds = lag;
        }
        let response = RawSubscribeResponse {
            cursor,
            item: Some(item),
        };
        let bytes = response.encoded_len();
        if send_watched(&tx, response, &registered).await.is_err() {
            return;
        }
        registered.metrics.events_sent(count, bytes, lag);
        if let Some(e) = failure {
            registered.metrics.subscribe_failed(&e);
            let _ = tx.send(Err(subscribe_status(e))).await;
            return;
        }
    }
}

/// Sends one response; if the client has read nothing for [`STALLED_AFTER`]
/// meanwhile, says so and goes on waiting.
async fn send_watched(
    tx: &mpsc::Sender<Result<RawSubscribeResponse, Status>>,
    response: RawSubscribeResponse,
    registered: &Registered,
) -> Result<(), mpsc::error::SendError<Result<RawSubscribeResponse, Status>>> {
    let mut send = std::pin::pin!(tx.send(Ok(response)));
    tokio::select! {
        // Biased: a send with room completes before any timer is armed.
        biased;
        sent = &mut send => return sent,
        _ = tokio::time::sleep(STALLED_AFTER) => {}
    }
    registered.warn_stalled(STALLED_AFTER);
    send.await
}

fn heartbeat_message(engine: &Engine, sub: &Subscription) -> RawSubscribeResponse {
    let shards = (0..engine.shard_count())
        .map(|id| {
            let w = engine.shard(id).watermarks.snapshot();
            v1::ShardWatermark {
                shard: id,
                committed_next: w.committed_next,
                claimed_ts_ns: w.claimed_ts,
                flushed_next: w.flushed_next,
                flushed_ts_ns: w.flushed_ts,
            }
        })
        .collect();
    RawSubscribeResponse {
        cursor: sub.cursor().to_bytes().into(),
        item: Some(RawItem::Heartbeat(v1::Heartbeat {
            merged_watermark_ns: sub.watermark(),
            shards,
        })),
    }
}

/// Wall-clock ns since the Unix epoch: the clock the shards stamp with.
fn now_ns() -> i64 {
    ringfeed_engine::clock::Clock::now_ns(&ringfeed_engine::clock::SystemClock)
}
