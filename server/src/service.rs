//! The gRPC service: appends go to the engine's shards, subscriptions run as
//! tokio tasks over engine subscriptions, status reads the shards' watermarks.
//!
//! Stored events are the producer's `Event` encoding, verbatim: the server
//! decodes a request's events once to validate them and to read the header
//! fields filters need, and sends stored bytes back out without decoding
//! (see `ringfeed_proto::raw`).

use std::pin::Pin;
use std::sync::Arc;

use ringfeed_engine::{
    AppendError, Cursor, Durability, Engine, Filter, NewEvent, Ordering, Producer, Start,
    SubscribeRequest,
};
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::prost::Message;
use ringfeed_proto::tonic::metadata::MetadataValue;
use ringfeed_proto::tonic::{self, Request, Response, Status, Streaming};
use ringfeed_proto::{strict, v1, RawAppendRequest, RawSubscribeResponse, RingFeed};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

use ringfeed_engine::clock::now_ns;

use crate::auth::Grant;
use crate::board::StatusBoard;
use crate::membership::Membership;
use crate::metrics::ServerMetrics;
use crate::registry::Registry;
use crate::sender::{Admission, StreamOptions, Streams, SubscriberLimits};
use crate::shared::Groups;
use crate::status::{append_status, subscribe_status};

pub use ringfeed_proto::wire::START_CURSOR_METADATA;

/// Responses queued per append stream before it waits on the client.
const APPEND_QUEUE: usize = 16;
/// Most events of queued `AppendStream` requests appended as one engine
/// batch: enough to turn a pipelined single-event producer's requests into
/// one trip to each shard, small enough to keep each ack prompt.
/// (A group over the engine's configured batch limits is refused whole and
/// its requests appended one by one: correct, only slower.)
const STREAM_GROUP_EVENTS: usize = 1024;
const STREAM_GROUP_BYTES: usize = 1 << 20;
/// The ringfeed service over one engine. Clones share the engine and registry.
#[derive(Clone)]
pub struct Service {
    engine: Arc<Engine>,
    registry: Arc<Registry>,
    streams: Arc<Streams>,
    shutdown: watch::Receiver<bool>,
    metrics: Arc<ServerMetrics>,
    /// This node and its peers (`ListNodes`).
    membership: Arc<Membership>,
    /// The tokens requests must carry (none: an open server).
    auth: Arc<crate::auth::Auth>,
    /// What `Status` and `ListSubscribers` answer with.
    board: Arc<StatusBoard>,
}

impl Service {
    /// `shutdown` turning true ends every subscription stream (UNAVAILABLE).
    pub fn new(
        engine: Arc<Engine>,
        shutdown: watch::Receiver<bool>,
        metrics: Arc<ServerMetrics>,
    ) -> Service {
        Service::with_limits(engine, shutdown, SubscriberLimits::default(), metrics)
    }

    /// A service whose subscription streams are paced and admitted per `limits`.
    pub fn with_limits(
        engine: Arc<Engine>,
        shutdown: watch::Receiver<bool>,
        limits: SubscriberLimits,
        metrics: Arc<ServerMetrics>,
    ) -> Service {
        let limits = Arc::new(limits);
        let streams = Arc::new(Streams {
            shards: engine.shards().into(),
            limits: limits.clone(),
            admission: Arc::new(Admission::new(&limits, metrics.clone())),
            metrics: metrics.clone(),
            groups: Groups::default(),
        });
        let registry = Arc::new(Registry::with_filter_budget(limits.filter_budget_bytes));
        Service {
            membership: Membership::new(engine.node_id().unwrap_or(0), String::new(), Vec::new()),
            auth: Arc::default(),
            board: Arc::new(StatusBoard::new(
                engine.clone(),
                registry.clone(),
                String::new(),
            )),
            engine,
            registry,
            streams,
            shutdown,
            metrics,
        }
    }

    pub fn metrics(&self) -> &Arc<ServerMetrics> {
        &self.metrics
    }

    /// What every subscription stream's sender shares (the response budget,
    /// the backlog places, the limits): the SeaweedFS filer API's streams
    /// are held to them too.
    pub(crate) fn streams(&self) -> &Arc<Streams> {
        &self.streams
    }

    /// Answers `ListNodes` from `membership` (a node without peers answers
    /// with itself alone, its address unknown).
    pub fn with_membership(self, membership: Arc<Membership>) -> Service {
        Service { membership, ..self }
    }

    /// Requests must carry one of `auth`'s tokens (when it has any).
    pub fn with_auth(self, auth: Arc<crate::auth::Auth>) -> Service {
        Service { auth, ..self }
    }

    /// The connected subscribers.
    pub fn subscribers(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// `Status` names `data_dir` as the server's data directory.
    pub fn with_data_dir(self, data_dir: String) -> Service {
        let board = Arc::new(StatusBoard::new(
            self.engine.clone(),
            self.registry.clone(),
            data_dir,
        ));
        Service { board, ..self }
    }

    /// What `Status` answers with (the status page and metrics read it too).
    pub fn board(&self) -> &Arc<StatusBoard> {
        &self.board
    }

    async fn append_batch(
        &self,
        request: RawAppendRequest,
        grant: Option<&Grant>,
    ) -> Result<v1::AppendResponse, Status> {
        let (durability, producer, events) = decode_request(request, grant)?;
        self.append_decoded(events, durability, producer).await
    }

    async fn append_decoded(
        &self,
        events: Vec<NewEvent>,
        durability: Durability,
        producer: Option<Producer>,
    ) -> Result<v1::AppendResponse, Status> {
        let stored = self
            .engine
            .append_idempotent(events, durability, producer)
            .await
            .map_err(append_status)?;
        Ok(acknowledged(stored))
    }

    /// Appends requests of one `AppendStream` that were queued together as
    /// one engine batch (one trip to each shard instead of one per request),
    /// and answers each with its own positions, in order.
    ///
    /// If the batch is refused for its content (an invalid event, a batch
    /// over the limits), nothing of it was appended (the engine validates
    /// and frames before it sends anything), and the requests are appended
    /// one by one instead, so the refusal names the request and event at
    /// fault and the requests before it stay appended, as without grouping.
    async fn append_group(
        &self,
        group: Vec<RawAppendRequest>,
        grant: Option<&Grant>,
    ) -> Vec<Result<v1::AppendResponse, Status>> {
        let decoded: Result<Vec<Decoded>, Status> = group
            .iter()
            .cloned()
            .map(|r| decode_request(r, grant))
            .collect();
        let merged = decoded.ok().filter(|d| mergeable(d));
        if let Some(decoded) = merged {
            let (durability, producer) = (decoded[0].0, decoded[0].1);
            let counts: Vec<usize> = decoded.iter().map(|(_, _, e)| e.len()).collect();
            let events: Vec<NewEvent> = decoded.into_iter().flat_map(|(_, _, e)| e).collect();
            match self
                .engine
                .append_partial(events, durability, producer)
                .await
            {
                Ok((positions, failure)) => return group_answers(&counts, positions, failure),
                Err(
                    AppendError::Invalid { .. }
                    | AppendError::Frame(_)
                    | AppendError::BatchTooLarge { .. },
                ) => {}
                // Not about the content, and nothing was sent to a shard: the
                // first request gets the error, which ends the stream.
                Err(e) => return vec![Err(append_status(e))],
            }
        }
        let mut results = Vec::with_capacity(group.len());
        for request in group {
            let result = self.append_batch(request, grant).await;
            let failed = result.is_err();
            results.push(result);
            if failed {
                break;
            }
        }
        results
    }
}

/// A request decoded: its durability, producer and events.
type Decoded = (Durability, Option<Producer>, Vec<NewEvent>);

/// Requests that can be appended as one engine batch: the same durability,
/// and either no producer on any, or one producer whose sequences continue
/// from each request to the next (so the batch's numbers are the requests').
fn mergeable(decoded: &[Decoded]) -> bool {
    let (durability, producer) = (decoded[0].0, decoded[0].1);
    let mut next = producer.map(|p| p.first_sequence);
    decoded.iter().all(|(d, p, events)| {
        let continues = match (p, next) {
            (None, None) => true,
            (Some(p), Some(n)) => Some(p.id) == producer.map(|q| q.id) && p.first_sequence == n,
            _ => false,
        };
        next = next.and_then(|n| n.checked_add(events.len() as u64));
        *d == durability && continues
    })
}

/// The answer to a request stored in full.
fn acknowledged(stored: Vec<ringfeed_engine::Stored>) -> v1::AppendResponse {
    v1::AppendResponse {
        duplicates: stored.iter().filter(|s| s.duplicate).count() as u32,
        positions: stored.into_iter().map(|s| position(s.position)).collect(),
        failure: None,
    }
}

fn position(p: ringfeed_engine::Position) -> v1::Position {
    v1::Position {
        shard: p.shard,
        offset: p.offset,
        ts_ns: p.ts,
    }
}

/// One answer per request of a group appended as one engine batch (`counts`
/// events each, in order). After a shard failed, a request stored in full is
/// still acknowledged, one that was not gets a response with `failure` (what
/// of it was stored), and the stream then ends with the failure's status:
/// no request is left unanswered while parts of it are stored.
fn group_answers(
    counts: &[usize],
    positions: Vec<Option<ringfeed_engine::Stored>>,
    failure: Option<AppendError>,
) -> Vec<Result<v1::AppendResponse, Status>> {
    let status = failure.map(append_status);
    let mut positions = positions.into_iter();
    let mut answers: Vec<Result<v1::AppendResponse, Status>> = counts
        .iter()
        .map(|&n| {
            let mine: Vec<_> = positions.by_ref().take(n).collect();
            if mine.iter().all(Option::is_some) {
                return Ok(acknowledged(mine.into_iter().flatten().collect()));
            }
            let status = status
                .as_ref()
                .expect("an event without a position means a failure");
            let (stored_indexes, stored) = mine
                .into_iter()
                .enumerate()
                .filter_map(|(i, p)| p.map(|p| (i as u32, position(p.position))))
                .unzip();
            Ok(v1::AppendResponse {
                positions: Vec::new(),
                duplicates: 0,
                failure: Some(v1::AppendFailure {
                    code: status.code() as i32,
                    message: status.message().to_owned(),
                    stored_indexes,
                    stored,
                }),
            })
        })
        .collect();
    if let Some(status) = status {
        answers.push(Err(status));
    }
    answers
}

/// The durability, producer and events of one append request, each event
/// decoded; with a token's `grant`, the request is refused whole
/// (PERMISSION_DENIED naming the path) if an event touches a path outside
/// the grant's append prefixes.
fn decode_request(request: RawAppendRequest, grant: Option<&Grant>) -> Result<Decoded, Status> {
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
    let producer = match (request.producer_id, request.first_sequence) {
        (0, 0) => None,
        (0, _) => {
            return Err(Status::invalid_argument(
                "first_sequence is set but producer_id is 0 (no producer): set both or neither",
            ))
        }
        (id, first_sequence) => Some(Producer { id, first_sequence }),
    };
    let events = request
        .events
        .into_iter()
        .enumerate()
        .map(|(i, bytes)| new_event(i, bytes))
        .collect::<Result<Vec<_>, Status>>()?;
    if let Some(grant) = grant {
        for e in &events {
            let paths =
                crate::auth::event_paths(&e.directory, &e.old_name, &e.new_name, &e.new_parent);
            grant.check_append(paths.iter().map(String::as_str))?;
        }
    }
    Ok((durability, producer, events))
}

/// Checks one stored-to-be event and reads its header fields. Its bytes are
/// stored and sent to every subscriber as they are, so they must be an
/// `Event` every conformant decoder reads alike ([`strict`]), not only one
/// prost reads.
fn new_event(index: usize, bytes: Bytes) -> Result<NewEvent, Status> {
    strict::check_event(&bytes).map_err(|refusal| {
        let at = match refusal.field.as_str() {
            "" => String::new(),
            field => format!(".{field}"),
        };
        Status::invalid_argument(format!("events[{index}]{at}: {}", refusal.reason))
    })?;
    let event = v1::Event::decode(bytes.clone()).map_err(|e| {
        Status::invalid_argument(format!("events[{index}]: not a valid Event: {e}"))
    })?;
    if event.seaweedfs.is_some() {
        return Err(Status::invalid_argument(format!(
            "events[{index}].seaweedfs: is set by ringfeed when it ingests a SeaweedFS filer's \
             events (serve --follow-filer), never by an append"
        )));
    }
    Ok(NewEvent {
        directory: event.directory,
        old_name: event.old_entry.map(|e| e.name).unwrap_or_default(),
        new_name: event.new_entry.map(|e| e.name).unwrap_or_default(),
        new_parent: event.new_parent_path,
        signatures: event.signatures,
        payload: bytes,
    })
}

/// The engine's start for a protocol request's; INVALID_ARGUMENT for a bad
/// cursor.
fn engine_start(r: &v1::SubscribeRequest) -> Result<Start, Status> {
    Ok(match &r.start {
        None | Some(v1::subscribe_request::Start::Now(_)) => Start::Now,
        Some(v1::subscribe_request::Start::Beginning(_)) => Start::Beginning,
        Some(v1::subscribe_request::Start::SinceNs(ns)) => Start::SinceNs(*ns),
        Some(v1::subscribe_request::Start::Cursor(bytes)) => Start::Cursor(
            Cursor::from_bytes(bytes)
                .map_err(|e| Status::invalid_argument(format!("cursor: {e}")))?,
        ),
    })
}

/// The engine request for a protocol request, from its start and its filter
/// (each checked once, by the caller); INVALID_ARGUMENT names a bad field.
fn engine_request(
    r: &v1::SubscribeRequest,
    start: Start,
    filter: Filter,
) -> Result<SubscribeRequest, Status> {
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
    Ok(SubscribeRequest {
        start,
        filter,
        until_ns: (r.until_ns != 0).then_some(r.until_ns),
        ordering,
        durable_only: r.durable_only,
        resume_truncated: r.resume_truncated,
    })
}

/// The request's filter, checked (INVALID_ARGUMENT names the field, or the
/// filter's size past `MAX_FILTER_PATH_BYTES`).
fn engine_filter(r: &v1::SubscribeRequest) -> Result<Filter, Status> {
    ringfeed_client::request_filter(r).map_err(|e| subscribe_status(e.into()))
}

type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl RingFeed for Service {
    async fn append(
        &self,
        request: Request<RawAppendRequest>,
    ) -> Result<Response<v1::AppendResponse>, Status> {
        let grant = self.auth.grant(request.metadata())?;
        self.append_batch(request.into_inner(), grant.as_deref())
            .await
            .map(Response::new)
    }

    type AppendStreamStream = ResponseStream<v1::AppendResponse>;

    async fn append_stream(
        &self,
        request: Request<Streaming<RawAppendRequest>>,
    ) -> Result<Response<Self::AppendStreamStream>, Status> {
        let grant = self.auth.grant(request.metadata())?;
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(APPEND_QUEUE);
        let service = self.clone();
        let mut shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            // The request read ahead that did not fit the last group.
            let mut carried: Option<Option<Result<RawAppendRequest, Status>>> = None;
            loop {
                let next = match carried.take() {
                    Some(next) => next,
                    None => tokio::select! {
                        next = inbound.next() => next,
                        _ = shutdown.changed() => {
                            let _ = tx.send(Err(Status::unavailable("the server is shutting down"))).await;
                            return;
                        }
                    },
                };
                let first = match next {
                    None => return,
                    Some(Err(status)) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                    Some(Ok(batch)) => batch,
                };
                // Group the requests already received behind it (never
                // waiting for more), of the same durability, up to a cap.
                let size = |r: &RawAppendRequest| r.events.iter().map(Bytes::len).sum::<usize>();
                let (mut events, mut bytes) = (first.events.len(), size(&first));
                let durability = first.durability;
                let mut group = vec![first];
                while events < STREAM_GROUP_EVENTS && bytes < STREAM_GROUP_BYTES {
                    match futures_lite::future::poll_once(inbound.next()).await {
                        None => break,
                        Some(Some(Ok(batch))) if batch.durability == durability => {
                            events += batch.events.len();
                            bytes += size(&batch);
                            group.push(batch);
                        }
                        Some(other) => {
                            carried = Some(other);
                            break;
                        }
                    }
                }
                // Even one request goes the group's way: if it spans shards
                // and one fails, its answer says what of it was stored.
                let results = service.append_group(group, grant.as_deref()).await;
                for result in results {
                    let failed = result.is_err();
                    if tx.send(result).await.is_err() || failed {
                        return;
                    }
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
        let grant = self.auth.grant(request.metadata())?;
        let scope = crate::auth::Auth::read_scope(grant.as_deref())?;
        let owner = grant.map(|g| g.id.clone()).unwrap_or_default();
        let peer = request
            .remote_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let mut r = request.into_inner();
        if let Some(scope) = &scope {
            // Its filter within the token's scope. Chunks would carry records
            // outside it: a scoped stream catches up in events instead.
            scope.narrow(&mut r)?;
            r.chunk_mode = false;
        }
        // What its filter will hold, counted before anything is built for it.
        let filter = engine_filter(&r)?;
        let filter_bytes = crate::registry::filter_bytes(&filter);
        let cluster = r.scope == v1::Scope::Cluster as i32;
        if cluster && matches!(r.start, Some(v1::subscribe_request::Start::Now(_)) | None) {
            // A cluster stream's `now` is taken before the stream is listed,
            // so an append made after it shows in ListSubscribers is after
            // its start.
            r.start = Some(v1::subscribe_request::Start::SinceNs(now_ns()));
        }
        // Lists the stream (superseding an older epoch of its client).
        let register = |cursor: Vec<u8>, lag_events: u64| {
            let (registered, superseded) = self
                .registry
                .register(
                    v1::SubscriberInfo {
                        client_name: r.client_name.clone(),
                        client_id: r.client_id,
                        client_epoch: r.client_epoch,
                        peer: peer.clone(),
                        path_prefix: r.path_prefix.clone(),
                        path_prefixes: r.path_prefixes.clone(),
                        directories: r.directories.clone(),
                        exclude_prefixes: r.exclude_prefixes.clone(),
                        cursor: cursor.into(),
                        lag_events,
                        mode: "starting".into(),
                        connected_since_ns: now_ns(),
                        signature: r.signature,
                        ordering: r.ordering,
                        ..Default::default()
                    },
                    &owner,
                    filter_bytes,
                )
                .inspect_err(|_| self.metrics.subscriber_refused())?;
            if superseded.is_some() {
                self.metrics.subscriber_superseded();
            }
            Ok::<_, Status>(registered)
        };
        let (responses, start) = if cluster {
            // The filter and order from the request; the start is the
            // cluster cursor's part for this node (cluster::start).
            let local = engine_request(&r, Start::Now, filter)?;
            let listed_cursor = match &r.start {
                Some(v1::subscribe_request::Start::Cursor(c)) => c.to_vec(),
                _ => Vec::new(),
            };
            crate::cluster::start(
                &self.engine,
                &self.membership,
                &r,
                local,
                &self.streams.limits,
                self.streams.admission.clone(),
                register(listed_cursor, 0)?,
                self.shutdown.clone(),
                scope,
            )?
        } else {
            let subscription = self
                .engine
                .subscribe(engine_request(&r, engine_start(&r)?, filter)?)
                .map_err(|e| {
                    self.metrics.subscribe_failed(&e);
                    subscribe_status(e)
                })?;
            let start = subscription.cursor().to_bytes();
            let registered = register(start.clone(), subscription.lag_events())?;
            let options = StreamOptions {
                batching: r.batching,
                heartbeat: crate::sender::heartbeat_interval(&r),
                chunk_mode: r.chunk_mode,
                scope,
            };
            let responses =
                self.streams
                    .start(subscription, options, registered, self.shutdown.clone());
            (responses, start)
        };
        // Where the stream starts, so a client cut off before its first
        // response resumes exactly.
        let mut response = Response::new(responses as Self::SubscribeStream);
        response
            .metadata_mut()
            .insert_bin(START_CURSOR_METADATA, MetadataValue::from_bytes(&start));
        Ok(response)
    }

    async fn status(
        &self,
        request: Request<v1::StatusRequest>,
    ) -> Result<Response<v1::StatusResponse>, Status> {
        self.auth.admin(request.metadata(), "status")?;
        Ok(Response::new(self.board.status(request.get_ref())))
    }

    async fn list_subscribers(
        &self,
        request: Request<v1::ListSubscribersRequest>,
    ) -> Result<Response<v1::ListSubscribersResponse>, Status> {
        self.auth.admin(request.metadata(), "listing subscribers")?;
        Ok(Response::new(v1::ListSubscribersResponse {
            subscribers: self.board.subscribers(),
        }))
    }

    async fn list_nodes(
        &self,
        request: Request<v1::ListNodesRequest>,
    ) -> Result<Response<v1::ListNodesResponse>, Status> {
        self.auth.admin(request.metadata(), "listing nodes")?;
        Ok(Response::new(v1::ListNodesResponse {
            nodes: self.membership.nodes(self.engine.shard_count()),
        }))
    }
}
