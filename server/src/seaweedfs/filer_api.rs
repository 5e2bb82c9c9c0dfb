//! SeaweedFS's filer gRPC API (`filer_pb.SeaweedFiler`, 4.48's field
//! numbers) on `serve --filer-listen`, for SeaweedFS's own clients: the
//! metadata feed (`SubscribeMetadata`, `SubscribeLocalMetadata`),
//! `GetFilerConfiguration`, `KvGet`/`KvPut` (kept durably here: where
//! `filer.backup` keeps its offset), and the reads of the tree and of
//! volumes its clients make beside the feed (`ListEntries`,
//! `LookupDirectoryEntry`, `LookupVolume`), forwarded to the first followed
//! filer whose stream is open. Every other RPC is answered UNIMPLEMENTED,
//! saying that ringfeed serves the metadata feed only.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringfeed_engine::clock::now_ns;
use ringfeed_engine::{Delivered, Engine, Start, Step, SubscribeRequest, MAX_FILTER_PATH_BYTES};
use ringfeed_proto::bytes::BytesMut;
use ringfeed_proto::filer_pb;
use ringfeed_proto::filer_pb::seaweed_filer_server::SeaweedFiler;
use ringfeed_proto::prost::Message as _;
use ringfeed_proto::raw::RawFilerResponse;
use ringfeed_proto::tonic::codegen::http;
use ringfeed_proto::tonic::{self, Request, Response, Status};
use ringfeed_proto::v1;
use tokio::sync::{watch, OwnedSemaphorePermit};

use crate::sender::{budget_bytes, trim, Admission, Outbox, Place, Streams};

use super::cache::PreparedCache;
use super::follow::MAX_CLOCK_AHEAD;
use super::merge::Merge;
use super::rounds::{self, Round, Rounds, Shape};
use super::view::{append_batch, Prepared};
use super::FilerProgress;

/// A source not heard from for this long is not waited for (a live filer
/// heartbeats every 5 s): its events go out late instead.
const HOLD: Duration = Duration::from_secs(8);
/// How often a waiting stream looks at the sources' watermarks again.
const TICK: Duration = Duration::from_millis(20);
/// A caught-up subscriber that asked for idle heartbeats gets one this often.
const IDLE_HEARTBEAT: Duration = Duration::from_secs(5);
/// After this many events filtered out in a row, an empty notification with
/// the time tells the subscriber how far it is (as a filer does).
const MAX_UNSYNCED_EVENTS: u64 = 1000;
/// The most events a stream holds read and not yet given out (beyond it,
/// reading waits for the merge: a source held back by another holds at most
/// this many of the others' events).
const MAX_QUEUED: usize = 1024;
/// Events read from the feed per round before what is ready is sent: a
/// stream catching up holds about this many, plus what its queue holds.
const READ_CHUNK: usize = 64;
/// The most events in one batched response.
const BATCH: usize = 64;
/// Items a stream queues for the transport: with the rounds above, what
/// a stream holds is bounded by events, not by the log it catches up on.
const STREAM_QUEUE: usize = 2;
/// An item handed to the transport holds the responses of about this many
/// bytes, as gRPC frames back to back: one write for many small messages.
const ITEM_BYTES: usize = 32 * 1024;

/// The shared state of the filer API.
pub struct FilerApi {
    engine: Arc<Engine>,
    filers: Vec<Arc<FilerProgress>>,
    /// This server's signature on the events it sends.
    signature: i32,
    /// Each followed filer's source number in the view, by its address as given.
    sources: HashMap<String, usize>,
    /// Events as the streams send them, prepared once for all.
    cache: PreparedCache,
    /// Rounds of responses, shared by the streams of one request.
    rounds: Rounds,
    /// The native streams' response budget, backlog places and limits.
    streams: Arc<Streams>,
    /// The native streams' registry: a stream's filter counts against its
    /// filter budget.
    registry: Arc<crate::registry::Registry>,
    /// The followed filers' configuration, for `GetFilerConfiguration`.
    upstream: Mutex<Option<filer_pb::GetFilerConfigurationResponse>>,
    /// `KvGet`/`KvPut`.
    kv: super::kv::Kv,
    /// A client of each followed filer (in `filers` order), for the reads
    /// forwarded to them.
    forward_to:
        Vec<Option<filer_pb::seaweed_filer_client::SeaweedFilerClient<tonic::transport::Channel>>>,
    /// Streams by client id: the epoch of the one open, and how to end it.
    clients: Mutex<HashMap<i32, (i32, watch::Sender<bool>)>>,
    stop: watch::Receiver<bool>,
}

impl FilerApi {
    /// `signature`: stable for this data dir (from its feed id), never 0.
    pub fn new(
        engine: Arc<Engine>,
        filers: Vec<Arc<FilerProgress>>,
        signature: i32,
        kv: super::kv::Kv,
        streams: Arc<Streams>,
        registry: Arc<crate::registry::Registry>,
        stop: watch::Receiver<bool>,
    ) -> Arc<FilerApi> {
        let forward_to = filers
            .iter()
            .map(|f| {
                let endpoint =
                    tonic::transport::Endpoint::from_shared(format!("http://{}", f.filer.grpc));
                endpoint.ok().map(|e| {
                    filer_pb::seaweed_filer_client::SeaweedFilerClient::new(
                        e.connect_timeout(Duration::from_secs(5)).connect_lazy(),
                    )
                })
            })
            .collect();
        let sources = filers
            .iter()
            .enumerate()
            .map(|(i, f)| (f.filer.given.clone(), i))
            .collect();
        Arc::new(FilerApi {
            engine,
            sources,
            cache: PreparedCache::default(),
            rounds: Rounds::default(),
            streams,
            registry,
            kv,
            forward_to,
            filers,
            signature: if signature == 0 { 1 } else { signature },
            upstream: Mutex::new(None),
            clients: Mutex::new(HashMap::new()),
            stop,
        })
    }

    /// Registers a stream of `client_id` at `epoch`: a higher epoch replaces
    /// the one open (which ends), the same or a lower one is refused.
    fn register(&self, client_id: i32, epoch: i32) -> Result<watch::Receiver<bool>, Status> {
        let (replace, replaced) = watch::channel(false);
        if client_id == 0 {
            return Ok(replaced);
        }
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((open, _)) = clients.get(&client_id) {
            if *open >= epoch {
                return Err(Status::unknown(format!(
                    "duplicated subscription detected for client id {client_id}"
                )));
            }
        }
        if let Some((_, previous)) = clients.insert(client_id, (epoch, replace)) {
            let _ = previous.send(true);
        }
        Ok(replaced)
    }

    fn unregister(&self, client_id: i32, epoch: i32) {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if clients
            .get(&client_id)
            .is_some_and(|(open, _)| *open == epoch)
        {
            clients.remove(&client_id);
        }
    }

    /// Starts a stream for `request` from `who` (its client's name and
    /// address, for the log).
    fn subscribe(
        self: &Arc<Self>,
        request: filer_pb::SubscribeMetadataRequest,
        who: String,
    ) -> Result<SubscribeStream, Status> {
        let bytes = request.path_prefix.len()
            + [&request.path_prefixes, &request.directories]
                .into_iter()
                .flatten()
                .map(String::len)
                .sum::<usize>();
        if bytes > MAX_FILTER_PATH_BYTES {
            return Err(Status::invalid_argument(format!(
                "path_prefix, path_prefixes and directories total {bytes} bytes, more than \
                 the {MAX_FILTER_PATH_BYTES} a subscription may hold"
            )));
        }
        // The filter counts against filter_budget_bytes beside the native
        // streams' (the matcher, and the request's paths the stream keeps).
        let shape = Shape::of(&request);
        let held = self.registry.hold_filter(shape.memory_bytes() + bytes)?;
        let replaced = self.register(request.client_id, request.client_epoch)?;
        let (outbox, responses) = Outbox::with_capacity(STREAM_QUEUE);
        let outbox = Arc::new(outbox);
        let (id, epoch) = (request.client_id, request.client_epoch);
        let mut streaming = tokio::spawn({
            let (api, outbox) = (self.clone(), outbox.clone());
            async move { api.stream(request, shape, replaced, &outbox).await }
        });
        let api = self.clone();
        tokio::spawn(async move {
            let stalls = outbox.stalls();
            let stall_timeout = api.streams.limits.stall_timeout;
            // A stream that ends without a status would read as a clean end
            // (a SeaweedFS client then stops following for good): a failure,
            // a panic included, ends it with one. A client that stopped
            // reading gives its queue and budget back after stall_timeout,
            // as a native stream's does, and reconnects from its last ts_ns.
            let ended = tokio::select! {
                biased;
                joined = &mut streaming => match joined {
                    Ok(ended) => ended,
                    Err(e) => Err(Status::internal(format!("the stream's task failed: {e}"))),
                },
                _ = outbox.closed() => Ok(()),
                stalled = stalls.stalled(stall_timeout) => {
                    Err(stalls.give_back(stalled, &who, &api.streams.metrics))
                }
            };
            streaming.abort();
            drop(held);
            api.unregister(id, epoch);
            if let Err(status) = ended {
                outbox.fail(status);
            }
        });
        Ok(responses)
    }

    /// One subscription: reads ringfeed's feed from where the request's
    /// `since_ns` can first be found, merges the sources, filters, sends.
    /// Ends OK only past `until_ns`; shutdown and a replacing stream end it
    /// UNAVAILABLE (a SeaweedFS client stops following for good on OK).
    async fn stream(
        &self,
        request: filer_pb::SubscribeMetadataRequest,
        shape: Arc<Shape>,
        mut replaced: watch::Receiver<bool>,
        outbox: &Outbox<RawFilerResponse>,
    ) -> Result<(), Status> {
        let since = request.since_ns.max(0);
        let until = (request.until_ns > 0).then_some(request.until_ns);
        // Every filer event after filer time T is stamped after
        // T - MAX_CLOCK_AHEAD (the follower holds back events of a filer
        // whose clock runs further ahead); ringfeed's own events are stamped
        // in its time.
        let start = match since.saturating_sub(MAX_CLOCK_AHEAD.as_nanos() as i64 + 1) {
            at if at <= 0 => Start::Beginning,
            at => Start::SinceNs(at),
        };
        let mut feed = self
            .engine
            .subscribe(SubscribeRequest::from(start))
            .map_err(|e| Status::internal(format!("reading the feed: {e}")))?;
        let matcher = shape.matcher();
        // Sources: each followed filer, then ringfeed's own events, then the
        // events of filers no longer followed (nothing to wait for).
        let own = self.filers.len();
        let unfollowed = own + 1;
        let mut merge = Merge::new(own + 2, since, HOLD.as_nanos() as i64, now_ns());
        merge.advance(unfollowed, i64::MAX, now_ns());
        // Per filer: (ringfeed time, the filer's complete watermark then).
        // A watermark counts once the feed has been read past the time it
        // was taken: its events were stored before.
        let mut taken: Vec<std::collections::VecDeque<(i64, i64)>> = vec![Default::default(); own];
        let mut last_complete = vec![i64::MIN; own];
        let mut filtered = 0u64;
        let mut sent_at = now_ns();
        let mut claimed_at = 0;
        let mut stop = self.stop.clone();
        let mut place: Option<Place> = None;
        // Woken when a followed filer's stored watermark moves (none
        // followed: never).
        let completed = self
            .filers
            .first()
            .map_or_else(Arc::default, |f| f.completed().clone());
        loop {
            // Enabled before any watermark is read: a filer moving on after
            // this wakes the wait below.
            let moved = completed.notified();
            let mut moved = std::pin::pin!(moved);
            moved.as_mut().enable();
            if *stop.borrow() || *replaced.borrow() {
                return Err(Status::unavailable(if *replaced.borrow() {
                    "replaced by a stream of the same client id with a higher epoch"
                } else {
                    "the server is shutting down: subscribe again"
                }));
            }
            // Read what the feed has, a round at a time: below the ring
            // (from segment files) only with one of the backlog readers'
            // places, as a native stream.
            if !feed.reads_backlog() {
                place = None;
            } else if place.is_none() {
                place = Some(self.streams.admission.place().await);
            }
            // Where a round can be shared from: nothing held in the merge.
            let start = (merge.queued() == 0).then(|| rounds::Start {
                shape: shape.clone(),
                offsets: feed.offsets().collect(),
                filtered,
            });
            // What another stream of this request sent from here already.
            if let Some(start) = &start {
                if let Some(round) = self.rounds.get(start) {
                    let skipped = feed
                        .skip_to(&round.to)
                        .map_err(|e| Status::unavailable(format!("reading the feed: {e}")))?;
                    if skipped {
                        for item in &round.items {
                            let permit = self.streams.admission.bytes(item.len()).await;
                            let item = RawFilerResponse::Frames(item.clone());
                            if outbox.send(item, Some(permit)).await.is_err() {
                                return Ok(());
                            }
                            self.streams.metrics.shared_response_reused();
                        }
                        filtered = round.filtered;
                        if !round.items.is_empty() {
                            sent_at = now_ns();
                        }
                        tokio::task::yield_now().await;
                        continue;
                    }
                }
            }
            // Else this round is kept for the others, if it also ends (below)
            // with nothing held in the merge.
            let kept_from = start;
            let mut read = 0;
            while read < READ_CHUNK {
                if merge.queued() >= MAX_QUEUED {
                    break;
                }
                let step = feed
                    .poll()
                    .map_err(|e| Status::unavailable(format!("reading the feed: {e}")))?;
                let Step::Event(delivered) = step else { break };
                read += 1;
                let event = self.prepared(&delivered)?;
                if event.ts_ns > since {
                    merge.push(event.source, event);
                }
            }
            // A full round (not the feed's end, not the merge's bound): the
            // feed may well have more, and nothing would wake this stream
            // for it (no news comes for a backlog already there).
            let more = read == READ_CHUNK && merge.queued() < MAX_QUEUED;
            let now = now_ns();
            let read_through = feed.watermark();
            merge.advance(own, read_through, now);
            for (i, filer) in self.filers.iter().enumerate() {
                let taken = &mut taken[i];
                let complete = filer.complete_ts_ns();
                if complete > last_complete[i] {
                    last_complete[i] = complete;
                    taken.push_back((now, complete));
                }
                while taken.front().is_some_and(|(at, _)| *at <= read_through) {
                    let (_, complete) = taken.pop_front().unwrap_or_default();
                    merge.advance(i, complete, now);
                }
            }
            let mut out = Outgoing::new(request.client_supports_batching);
            if kept_from.is_some() && read > 0 {
                out.keep();
            }
            let mut sent = false;
            let mut at_until = false;
            // The responses' bytes are taken from the response budget before
            // they are built, and held until the transport has written them.
            if merge.ready(now) {
                out.reserve(&self.streams.admission).await;
            }
            while let Some((event, _late)) = merge.pop(now) {
                if until.is_some_and(|u| event.ts_ns > u) {
                    at_until = true;
                    break;
                }
                if matcher.wants(&event.route, &event.signatures) {
                    out.event(event);
                    filtered = 0;
                } else {
                    filtered += 1;
                    if filtered > MAX_UNSYNCED_EVENTS {
                        out.marker(event.ts_ns);
                        filtered = 0;
                    }
                }
                if out.full() {
                    sent = true;
                    if !out.send(outbox).await {
                        return Ok(());
                    }
                    out.reserve(&self.streams.admission).await;
                }
            }
            sent |= !out.is_empty();
            if !out.send(outbox).await {
                return Ok(());
            }
            if let (Some(start), Some(items)) = (kept_from, out.kept.take()) {
                if merge.queued() == 0 && !at_until {
                    let built = items.len();
                    let round = Round {
                        items,
                        to: feed.progress(),
                        filtered,
                    };
                    if self.rounds.put(start, round) {
                        for _ in 0..built {
                            self.streams.metrics.shared_response_built();
                        }
                    }
                }
            }
            if sent {
                sent_at = now;
            } else if request.client_supports_idle_heartbeat
                && now - sent_at >= IDLE_HEARTBEAT.as_nanos() as i64
                && merge.queued() == 0
            {
                sent_at = now;
                let heartbeat = filer_pb::SubscribeMetadataResponse {
                    ts_ns: now,
                    ..Default::default()
                };
                if outbox
                    .send(RawFilerResponse::Fields(Box::new(heartbeat)), None)
                    .await
                    .is_err()
                {
                    return Ok(());
                }
            }
            if let Some(until) = until {
                if merge.passed(until, now) {
                    return Ok(());
                }
            }
            // An idle shard's stamps pass only when it is asked to claim
            // them: asked (at most once a tick) while something waits on a
            // watermark, so an idle view with nothing pending wakes no shard.
            let waiting =
                merge.queued() > 0 || until.is_some() || taken.iter().any(|t| !t.is_empty());
            if more {
                // The feed has more already: the next round at once.
                tokio::task::yield_now().await;
                continue;
            }
            if waiting && now - claimed_at >= TICK.as_nanos() as i64 {
                feed.request_claims(now);
                claimed_at = now;
            }
            // Waiting on a watermark (asked to claim, a hold to run out):
            // looked at again each tick. Else only what can change it wakes
            // the stream: the feed, a filer moving on, the heartbeat's time.
            let wake = if waiting {
                TICK
            } else if request.client_supports_idle_heartbeat {
                Duration::from_nanos(
                    (sent_at + IDLE_HEARTBEAT.as_nanos() as i64 - now).max(0) as u64
                )
            } else {
                Duration::from_secs(3600)
            };
            tokio::select! {
                _ = tokio::time::sleep(wake) => {}
                _ = feed.changed() => {}
                _ = moved.as_mut() => {}
                _ = stop.changed() => {}
                _ = replaced.changed() => {}
            }
        }
    }
}

impl FilerApi {
    /// The event `delivered` as the view sends it: prepared by the first
    /// stream that reads it, shared by the others.
    fn prepared(&self, delivered: &Delivered) -> Result<Arc<Prepared>, Status> {
        let key = (delivered.shard, delivered.offset, delivered.ts);
        self.cache.get_or_prepare(key, || {
            let event = v1::Event::decode(delivered.payload())
                .map_err(|e| Status::internal(format!("a stored event does not decode: {e}")))?;
            // Each followed filer, then ringfeed's own events, then the
            // events of filers no longer followed.
            let source = match &event.seaweedfs {
                Some(s) => {
                    (self.sources.get(s.filer.as_str()).copied()).unwrap_or(self.filers.len() + 1)
                }
                None => self.filers.len(),
            };
            Prepared::new(&event, delivered.ts, source, self.signature).map_err(Status::internal)
        })
    }
}

/// A stream's next responses, as gRPC frames back to back: each event's
/// prepared frame as it is, or, to a client that asked for batching, up to
/// `BATCH` events in one response (the first event's fields, the others in
/// `events`).
struct Outgoing {
    batching: bool,
    frames: BytesMut,
    batch: Vec<Arc<Prepared>>,
    /// The bytes of `batch`'s frames.
    batched: usize,
    /// The response budget taken for them.
    permit: Option<OwnedSemaphorePermit>,
    /// What was sent, kept for the streams of the same request
    /// ([`Rounds`]), if asked.
    kept: Option<Vec<ringfeed_proto::bytes::Bytes>>,
}

impl Outgoing {
    fn new(batching: bool) -> Outgoing {
        Outgoing {
            batching,
            frames: BytesMut::new(),
            batch: Vec::new(),
            batched: 0,
            permit: None,
            kept: None,
        }
    }

    /// Keeps what is sent from now on.
    fn keep(&mut self) {
        self.kept = Some(Vec::new());
    }

    fn event(&mut self, event: Arc<Prepared>) {
        if !self.batching {
            self.frames.extend_from_slice(&event.frame);
            return;
        }
        self.batched += event.frame.len();
        self.batch.push(event);
        if self.batch.len() == BATCH {
            self.close_batch();
        }
    }

    /// The empty notification that tells a subscriber whose events were
    /// all filtered out how far the feed is (never batched).
    fn marker(&mut self, ts_ns: i64) {
        self.close_batch();
        let marker = filer_pb::SubscribeMetadataResponse {
            event_notification: Some(filer_pb::EventNotification::default()),
            ts_ns,
            ..Default::default()
        };
        self.frames
            .extend_from_slice(&RawFilerResponse::frame(&marker));
    }

    fn close_batch(&mut self) {
        append_batch(&mut self.frames, &self.batch);
        self.batch.clear();
        self.batched = 0;
    }

    /// Whether the responses gathered fill what was reserved for them (or
    /// `ITEM_BYTES`): an event crossing the line still goes with them, so a
    /// reservation is exceeded by at most one event, as a native batch is.
    fn full(&self) -> bool {
        let limit = self
            .permit
            .as_ref()
            .map_or(ITEM_BYTES, |p| budget_bytes(p.num_permits()))
            .min(ITEM_BYTES);
        self.frames.len() + self.batched >= limit
    }

    /// Takes the budget for the next `ITEM_BYTES` (at most half the budget:
    /// [`Admission::bytes`]), waiting in turn with every other stream.
    async fn reserve(&mut self, admission: &Admission) {
        if self.permit.is_none() {
            self.permit = Some(admission.bytes(ITEM_BYTES).await);
        }
    }

    fn is_empty(&self) -> bool {
        self.frames.is_empty() && self.batch.is_empty()
    }

    /// Hands what is gathered to the transport; `false` once the client is
    /// gone.
    async fn send(&mut self, outbox: &Outbox<RawFilerResponse>) -> bool {
        self.close_batch();
        let permit = self.permit.take();
        if self.frames.is_empty() {
            return true;
        }
        let frames = self.frames.split().freeze();
        if let Some(kept) = &mut self.kept {
            kept.push(frames.clone());
        }
        let permit = permit.map(|p| trim(p, frames.len()));
        outbox
            .send(RawFilerResponse::Frames(frames), permit)
            .await
            .is_ok()
    }
}

type SubscribeStream = crate::sender::Responses<RawFilerResponse>;

/// A subscriber as the log names it: its client name and address.
fn who(request: &Request<filer_pb::SubscribeMetadataRequest>) -> String {
    let peer = request
        .remote_addr()
        .map_or_else(|| "an unknown address".to_owned(), |a| a.to_string());
    format!("{:?} at {peer}", request.get_ref().client_name)
}

/// The service on the filer listener.
#[derive(Clone)]
pub struct FilerService(pub Arc<FilerApi>);

#[tonic::async_trait]
impl SeaweedFiler for FilerService {
    async fn subscribe_metadata(
        &self,
        request: Request<filer_pb::SubscribeMetadataRequest>,
    ) -> Result<Response<SubscribeStream>, Status> {
        let who = who(&request);
        Ok(Response::new(self.0.subscribe(request.into_inner(), who)?))
    }

    /// The same feed: ringfeed has no other filers' events to leave out.
    async fn subscribe_local_metadata(
        &self,
        request: Request<filer_pb::SubscribeMetadataRequest>,
    ) -> Result<Response<SubscribeStream>, Status> {
        let who = who(&request);
        Ok(Response::new(self.0.subscribe(request.into_inner(), who)?))
    }

    async fn kv_get(
        &self,
        request: Request<filer_pb::KvGetRequest>,
    ) -> Result<Response<filer_pb::KvGetResponse>, Status> {
        // A missing key is an empty value, as a filer answers it.
        let value = self.0.kv.get(&request.into_inner().key).unwrap_or_default();
        Ok(Response::new(filer_pb::KvGetResponse {
            value: value.into(),
            error: String::new(),
        }))
    }

    async fn kv_put(
        &self,
        request: Request<filer_pb::KvPutRequest>,
    ) -> Result<Response<filer_pb::KvPutResponse>, Status> {
        let request = request.into_inner();
        // As a filer: an error in the answer, not in the status.
        let error = match self.0.kv.put(&request.key, &request.value) {
            Ok(()) => String::new(),
            Err(e) => format!("ringfeed: {e}"),
        };
        Ok(Response::new(filer_pb::KvPutResponse { error }))
    }

    async fn list_entries(
        &self,
        request: Request<filer_pb::ListEntriesRequest>,
    ) -> Result<Response<tonic::codegen::BoxStream<filer_pb::ListEntriesResponse>>, Status> {
        let listed = self.0.forward()?.list_entries(request.into_inner()).await?;
        Ok(Response::new(Box::pin(listed.into_inner())))
    }

    async fn lookup_directory_entry(
        &self,
        request: Request<filer_pb::LookupDirectoryEntryRequest>,
    ) -> Result<Response<filer_pb::LookupDirectoryEntryResponse>, Status> {
        // With no filer to ask, nothing is found, said as a filer says it:
        // SeaweedFS clients match the message of `filer_pb.ErrNotFound`.
        let Ok(mut forward) = self.0.forward() else {
            return Err(Status::unknown(NOT_FOUND));
        };
        forward.lookup_directory_entry(request.into_inner()).await
    }

    async fn lookup_volume(
        &self,
        request: Request<filer_pb::LookupVolumeRequest>,
    ) -> Result<Response<filer_pb::LookupVolumeResponse>, Status> {
        self.0.forward()?.lookup_volume(request.into_inner()).await
    }

    async fn get_filer_configuration(
        &self,
        _request: Request<filer_pb::GetFilerConfigurationRequest>,
    ) -> Result<Response<filer_pb::GetFilerConfigurationResponse>, Status> {
        let mut configuration = self.0.upstream_configuration().await;
        configuration.signature = self.0.signature;
        configuration.version = format!(
            "ringfeed {} (the metadata feed of the SeaweedFS filer API)",
            env!("CARGO_PKG_VERSION")
        );
        Ok(Response::new(configuration))
    }
}

impl FilerApi {
    /// The filer reads are forwarded to; FAILED_PRECONDITION when none is followed.
    fn forward(
        &self,
    ) -> Result<filer_pb::seaweed_filer_client::SeaweedFilerClient<tonic::transport::Channel>, Status>
    {
        // The first followed filer whose stream is open (filers of one
        // cluster share their store), else the first.
        let open = self
            .filers
            .iter()
            .position(|f| f.is_connected())
            .unwrap_or(0);
        self.forward_to.get(open).cloned().flatten().ok_or_else(|| {
            Status::failed_precondition(
                "ringfeed follows no filer (serve --follow-filer) to forward this read to",
            )
        })
    }

    /// The first followed filer's configuration (masters, replication, ...),
    /// asked once; empty when none answers.
    async fn upstream_configuration(&self) -> filer_pb::GetFilerConfigurationResponse {
        if let Some(known) = self
            .upstream
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return known;
        }
        for filer in &self.filers {
            let asked = async {
                let mut client = filer_pb::seaweed_filer_client::SeaweedFilerClient::connect(
                    format!("http://{}", filer.filer.grpc),
                )
                .await
                .ok()?;
                client
                    .get_filer_configuration(filer_pb::GetFilerConfigurationRequest::default())
                    .await
                    .ok()
                    .map(|r| r.into_inner())
            };
            if let Ok(Some(configuration)) =
                tokio::time::timeout(Duration::from_secs(5), asked).await
            {
                *self.upstream.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(configuration.clone());
                return configuration;
            }
        }
        filer_pb::GetFilerConfigurationResponse::default()
    }
}

/// SeaweedFS's `filer_pb.ErrNotFound`, which its clients match by message.
const NOT_FOUND: &str = "filer: no entry is found in filer store";

/// The RPCs ringfeed answers; every other path is UNIMPLEMENTED.
const SERVED: &[&str] = &[
    "/filer_pb.SeaweedFiler/SubscribeMetadata",
    "/filer_pb.SeaweedFiler/SubscribeLocalMetadata",
    "/filer_pb.SeaweedFiler/GetFilerConfiguration",
    "/filer_pb.SeaweedFiler/KvGet",
    "/filer_pb.SeaweedFiler/KvPut",
    "/filer_pb.SeaweedFiler/ListEntries",
    "/filer_pb.SeaweedFiler/LookupDirectoryEntry",
    "/filer_pb.SeaweedFiler/LookupVolume",
];

/// Answers UNIMPLEMENTED, saying why, for the filer API's RPCs ringfeed does
/// not serve; passes the others to the service.
#[derive(Clone)]
pub struct OnlyTheFeed<S>(pub S);

impl<S> tonic::server::NamedService for OnlyTheFeed<S>
where
    S: tonic::server::NamedService,
{
    const NAME: &'static str = S::NAME;
}

impl<S, B> tonic::codegen::Service<http::Request<B>> for OnlyTheFeed<S>
where
    S: tonic::codegen::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if SERVED.contains(&request.uri().path()) {
            return Box::pin(self.0.call(request));
        }
        let method = request
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_owned();
        let status = Status::unimplemented(format!(
            "{method}: ringfeed serves the SeaweedFS metadata feed only (SubscribeMetadata, \
             SubscribeLocalMetadata, GetFilerConfiguration, KvGet, KvPut, and ListEntries, \
             LookupDirectoryEntry, LookupVolume forwarded to the filer it follows); point this \
             client at a filer"
        ));
        Box::pin(async move { Ok(status.into_http()) })
    }
}
