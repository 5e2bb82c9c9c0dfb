//! The client library: [`Follower`] follows the feed through disconnects.
//! It depends on the protocol crate and `ringfeed-core` (cursors, filters,
//! the record format) only: using it never builds the storage engine.
//!
//! It subscribes, hands out events one at a time, and keeps a checkpoint: the
//! cursor just after the last event it handed out, exact even inside a batch
//! or a chunk. After any retryable failure it reconnects with gRPC-standard
//! backoff (1 s, x1.6, 20% jitter, capped), a higher `client_epoch` (so the
//! server drops the old stream at once if it still holds it) and the
//! checkpoint as its start: nothing is skipped and nothing is repeated. In
//! chunk mode it checks and decodes the raw records and applies the
//! subscription's filters and `until_ns` itself. Errors that a retry cannot
//! fix (OUT_OF_RANGE, INVALID_ARGUMENT, superseded, FAILED_PRECONDITION for
//! a cursor a crash truncated, ...) are returned; a truncated cursor is never
//! retried, and [`Truncation::of`] reads where its feed survived.
//!
//! Why the checkpoint inside a response is exact: a response's events are in
//! offset order per shard and hold every matching event of that stretch, and
//! its cursor is where the server's shard readers stand after it. Before an
//! event at `(shard, offset)` is handed out, that shard's checkpoint is the
//! event's offset (no matching event of the shard lies between the previous
//! position and it); after, `offset + 1`; once the response is used up, the
//! response's cursor.
#![forbid(unsafe_code)]

use std::time::Duration;

use ringfeed_core::record::{peek_header, peek_position};
use ringfeed_core::{Cursor, Filter};
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::prost::Message;
use ringfeed_proto::tonic::codec::Streaming;
use ringfeed_proto::tonic::codegen::http::uri::PathAndQuery;
use ringfeed_proto::tonic::transport::{Channel, Endpoint};
use ringfeed_proto::tonic::{self, Code, Status};
use ringfeed_proto::v1::{self, subscribe_request::Start, SubscribeRequest};

mod cursor_file;
mod json;
mod response;
pub mod tls;
mod view;

pub use cursor_file::{cursor_text, parse_cursor_text, CursorFile, CURSOR_TEXT};
pub use json::{write_event_json, write_event_parts_json};
use response::{Events, Item, RawResponseCodec, Response};
pub use view::{EntryParts, EntryView, EventParts, EventView};

use ringfeed_proto::wire::START_CURSOR_METADATA;
pub use ringfeed_proto::wire::SUPERSEDED;

/// Largest response the follower accepts (a chunk is at most a window).
const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// Reconnect delays: gRPC's connection-backoff defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Backoff {
    pub initial: Duration,
    pub multiplier: f64,
    /// Each delay is randomised by +/- this fraction.
    pub jitter: f64,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_secs(1),
            multiplier: 1.6,
            jitter: 0.2,
            max: Duration::from_secs(120),
        }
    }
}

impl Backoff {
    /// The delay before reconnect attempt `attempt` (0-based), with jitter
    /// drawn from `random` in [0, 1).
    pub fn delay(&self, attempt: u32, random: f64) -> Duration {
        let base = self.initial.as_secs_f64() * self.multiplier.powi(attempt as i32);
        let base = base.min(self.max.as_secs_f64());
        let jittered = base * (1.0 + self.jitter * (2.0 * random - 1.0));
        Duration::from_secs_f64(jittered.max(0.0))
    }
}

/// What [`Follower::next_step`] found.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Event(FollowedEvent),
    /// No event at hand, and every matching event stamped at or below this
    /// (ns) has been handed out.
    Watermark(i64),
    /// `until_ns` was reached.
    End,
}

/// One event as the follower hands it out.
#[derive(Clone, Debug, PartialEq)]
pub struct FollowedEvent {
    pub ts_ns: i64,
    pub shard: u32,
    pub offset: u64,
    /// The node that took it (cluster scope; 0 otherwise).
    pub node: u32,
    /// The producer's encoded `Event`, byte for byte.
    pub event: Bytes,
}

impl FollowedEvent {
    /// The event's fields, read in place when asked (no allocation).
    pub fn view(&self) -> EventView<'_> {
        EventView::new(&self.event)
    }

    /// The event as a message (allocates its strings and entries).
    pub fn decode(&self) -> Result<v1::Event, ringfeed_proto::prost::DecodeError> {
        v1::Event::decode(self.event.clone())
    }
}

/// Why following stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The server refused the subscription or ended it for a reason a
    /// reconnect cannot fix: OUT_OF_RANGE (below retention), INVALID_ARGUMENT,
    /// ALREADY_EXISTS or CANCELLED (another stream of this client replaced
    /// this one), DATA_LOSS, ...
    #[error("the server ended the subscription")]
    Refused(#[source] Status),
    /// A chunk failed its checks: the bytes received are not what was stored.
    #[error("corrupt chunk from the server: {0}")]
    Corrupt(String),
    /// The server address is not a valid URI.
    #[error("server address {0:?}: {1}")]
    Address(String, String),
}

/// What a FAILED_PRECONDITION "truncated by a crash" status says, read from
/// its metadata (see `TRUNCATION_METADATA`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncation {
    pub shard: u32,
    /// The cursor's generation for the shard.
    pub generation: u32,
    /// Where that generation's surviving events end (exclusive): the offset
    /// a resumed subscriber continues at.
    pub surviving_end: u64,
    /// The cursor's offset: `next - surviving_end` events it covered are gone.
    pub next: u64,
}

pub use ringfeed_proto::wire::TRUNCATION_METADATA;

impl Truncation {
    /// The truncation a status reports, if it reports one.
    pub fn of(status: &Status) -> Option<Truncation> {
        if status.code() != Code::FailedPrecondition {
            return None;
        }
        let text = status.metadata().get(TRUNCATION_METADATA)?.to_str().ok()?;
        let field = |name: &str| {
            text.split(' ')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse::<u64>().ok())
        };
        Some(Truncation {
            shard: u32::try_from(field("shard")?).ok()?,
            generation: u32::try_from(field("generation")?).ok()?,
            surviving_end: field("surviving_end")?,
            next: field("next")?,
        })
    }

    /// The metadata value that [`Truncation::of`] reads.
    pub fn metadata_value(&self) -> String {
        format!(
            "shard={} generation={} surviving_end={} next={}",
            self.shard, self.generation, self.surviving_end, self.next
        )
    }
}

/// A token sent as `authorization: Bearer TOKEN` with every request, for a
/// server started with --token-file (none: nothing is sent). Also a tonic
/// interceptor, for clients made with `with_interceptor`.
#[derive(Clone, Debug, Default)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl Bearer {
    /// `None` when `token` is not a valid header value (printable ASCII only).
    pub fn new(token: Option<&str>) -> Option<Bearer> {
        match token {
            None => Some(Bearer(None)),
            Some(t) => format!("Bearer {t}").parse().ok().map(|v| Bearer(Some(v))),
        }
    }

    /// Adds the token, if any, to `request`.
    pub fn apply<T>(&self, request: &mut tonic::Request<T>) {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        self.apply(&mut request);
        Ok(request)
    }
}

/// The endpoint a follower connects to (`server` as given, for errors).
fn endpoint(server: &str, uri: String) -> Result<Endpoint, FollowError> {
    Ok(Endpoint::from_shared(uri)
        .map_err(|e| FollowError::Address(server.to_owned(), e.to_string()))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(10)))
}

/// Counters of what a follower went through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FollowStats {
    pub reconnects: u64,
    pub events: u64,
    pub chunks: u64,
    pub batches: u64,
    pub heartbeats: u64,
}

/// Follows the feed per `request` (its start, filters, chunk mode, ...)
/// from `server` ("host:port" or a URI).
pub struct Follower {
    endpoint: Endpoint,
    server: String,
    request: SubscribeRequest,
    backoff: Backoff,
    filter: Filter,
    stream: Option<Streaming<Bytes>>,
    /// What is left of the current response, walked as events are handed out.
    pending: Pending,
    /// The next event to hand out, found ahead so [`Follower::has_buffered`]
    /// is exact (a chunk's remaining records may all be filtered out).
    ahead: Option<FollowedEvent>,
    /// Next offset per shard (with the server's generations): the
    /// checkpoint, once known.
    checkpoint: Option<Cursor>,
    /// The cursor of the response `pending` came from.
    response_cursor: Option<Cursor>,
    /// Cluster scope: cursors are cluster cursors, kept as the server sent
    /// them (one event per response, so a response's cursor is exact after
    /// its event); `checkpoint` and `response_cursor` stay `None`.
    cluster: Option<ClusterPoint>,
    watermark_ns: i64,
    failures: u32,
    ended: bool,
    in_chunks: bool,
    seed: u64,
    /// Sent with every subscription request.
    bearer: Bearer,
    /// Where [`Follower::save_cursor`] keeps the checkpoint.
    cursor_file: Option<CursorFile>,
    /// Told when the connection is lost and when it is back.
    on_connection: Option<Box<dyn FnMut(Connection<'_>) + Send>>,
    pub stats: FollowStats,
}

/// A change of a follower's connection, once per outage (see
/// [`Follower::on_connection`]).
#[derive(Debug)]
pub enum Connection<'a> {
    /// The stream or the server was lost (first failure of an outage);
    /// the follower retries after `retry_in`, then with backoff.
    Lost {
        error: &'a Status,
        retry_in: Duration,
    },
    /// A stream is open again after `attempts` failed tries; it resumes
    /// right after `cursor` (its bytes, as `--cursor` takes them; empty if
    /// no event was handed out yet: the request's own start).
    Back { attempts: u32, cursor: &'a [u8] },
}

/// A cluster follower's checkpoint and its current response's cursor.
#[derive(Debug, Default)]
struct ClusterPoint {
    checkpoint: Option<Bytes>,
    response: Option<Bytes>,
}

/// The unread part of a response.
#[derive(Clone, Debug, Default)]
enum Pending {
    #[default]
    Empty,
    Events(Events),
    Chunk(ChunkRecords),
}

/// A chunk's records, checked when it arrived, filtered as they are walked.
#[derive(Clone, Debug)]
struct ChunkRecords {
    shard: u32,
    records: Bytes,
    /// Where the unread records start.
    at: usize,
}

impl Pending {
    /// The next event of the response (for a chunk: the next record that
    /// matches `filter` and `until`), or `None` when it is used up.
    fn next_event(
        &mut self,
        filter: &Filter,
        until: i64,
    ) -> Result<Option<FollowedEvent>, FollowError> {
        match self {
            Pending::Empty => Ok(None),
            Pending::Events(events) => events
                .next_event()
                .map_err(|e| FollowError::Corrupt(format!("an event message: {e}"))),
            Pending::Chunk(records) => records.next_match(filter, until),
        }
    }
}

impl ChunkRecords {
    /// The next record that matches `filter` and `until` (0: none), as an event.
    fn next_match(
        &mut self,
        filter: &Filter,
        until: i64,
    ) -> Result<Option<FollowedEvent>, FollowError> {
        while self.at < self.records.len() {
            let at = self.at;
            let h = peek_header(&self.records[at..]).map_err(|e| {
                FollowError::Corrupt(format!("shard {} record at byte {at}: {e}", self.shard))
            })?;
            self.at += h.len;
            if filter.matches(&h) && (until == 0 || h.ts <= until) {
                return Ok(Some(FollowedEvent {
                    ts_ns: h.ts,
                    shard: self.shard,
                    offset: h.offset,
                    node: 0,
                    event: self.records.slice(at + h.payload_at..at + h.len),
                }));
            }
        }
        Ok(None)
    }
}

impl Follower {
    /// A follower; it connects on the first [`Follower::next`]. In node
    /// scope it asks for batches (`request.batching` is set: the server packs
    /// the events at hand into one response, while catching up and live, at
    /// no cost in latency); [`Follower::one_event_per_response`] asks for
    /// one event per response instead. Every event is the same either way,
    /// and so is every cursor of an unfiltered follower (a filtered one's
    /// cursors may reach further past events the filter skipped; each
    /// resumes exactly). A non-zero
    /// `request.client_id` makes it a named client whose every reconnect
    /// supersedes its previous stream; its epoch starts at `client_epoch`, or
    /// at the clock's microseconds when that is 0, so a restarted process
    /// also supersedes.
    pub fn new(
        server: &str,
        mut request: SubscribeRequest,
        backoff: Backoff,
    ) -> Result<Follower, FollowError> {
        let uri = if server.contains("://") {
            server.to_owned()
        } else {
            format!("http://{server}")
        };
        let endpoint = endpoint(server, uri)?;
        let mut prefixes = Vec::new();
        if !request.path_prefix.is_empty() {
            prefixes.push(request.path_prefix.clone());
        }
        prefixes.extend(request.path_prefixes.iter().cloned());
        let filter = Filter {
            prefixes,
            directories: request.directories.clone(),
            exclude_prefixes: request.exclude_prefixes.clone(),
            signature: (request.signature != 0).then_some(request.signature),
        }
        .normalized()
        .map_err(|e| FollowError::Refused(Status::invalid_argument(e.to_string())))?;
        let now_us = (ringfeed_core::now_ns() / 1000).max(1) as u64;
        if request.client_epoch == 0 {
            request.client_epoch = now_us;
        }
        let cluster = (request.scope == v1::Scope::Cluster as i32).then(|| ClusterPoint {
            checkpoint: match &request.start {
                Some(Start::Cursor(bytes)) => Some(bytes.clone()),
                _ => None,
            },
            response: None,
        });
        if cluster.is_some() && (request.batching || request.chunk_mode) {
            return Err(FollowError::Refused(Status::invalid_argument(
                "a cluster follower reads one event per response: no batching or chunk mode",
            )));
        }
        // Batches by default: one event per response cost a tail 8 times
        // its time catching up (0.91 s against 0.12 s for 200k events).
        request.batching = cluster.is_none();
        let checkpoint = match &request.start {
            _ if cluster.is_some() => None,
            Some(Start::Cursor(bytes)) => Some(
                Cursor::from_bytes(bytes)
                    .map_err(|e| FollowError::Refused(Status::invalid_argument(e.to_string())))?,
            ),
            _ => None,
        };
        Ok(Follower {
            endpoint,
            server: server.to_owned(),
            request,
            backoff,
            filter,
            stream: None,
            pending: Pending::Empty,
            ahead: None,
            response_cursor: None,
            cluster,
            checkpoint,
            watermark_ns: 0,
            failures: 0,
            ended: false,
            in_chunks: false,
            seed: now_us | 1,
            bearer: Bearer::default(),
            cursor_file: None,
            on_connection: None,
            stats: FollowStats::default(),
        })
    }

    /// Resumes from the cursor saved in `file` when it exists (the request's
    /// own start when it does not: a first start), and keeps `file` for
    /// [`Follower::save_cursor`]. A file that exists and holds no cursor is
    /// refused, as a bad `--cursor` is.
    pub fn with_cursor_file(mut self, file: CursorFile) -> Result<Follower, FollowError> {
        let refused = |e: &dyn std::fmt::Display| {
            FollowError::Refused(Status::invalid_argument(format!(
                "cursor file {}: {e}",
                file.path().display()
            )))
        };
        if let Some(bytes) = file.load().map_err(|e| refused(&e))? {
            let bytes = Bytes::from(bytes);
            match &mut self.cluster {
                Some(point) => point.checkpoint = Some(bytes.clone()),
                None => {
                    self.checkpoint = Some(Cursor::from_bytes(&bytes).map_err(|e| refused(&e))?)
                }
            }
            self.request.start = Some(Start::Cursor(bytes));
        }
        self.cursor_file = Some(file);
        Ok(self)
    }

    /// Calls `observe` when the connection is lost (once per outage, before
    /// the first retry) and when a stream is open again: how `ringfeed
    /// tail` says so on stderr. Reconnecting itself needs nothing from it.
    pub fn on_connection(
        mut self,
        observe: impl FnMut(Connection<'_>) + Send + 'static,
    ) -> Follower {
        self.on_connection = Some(Box::new(observe));
        self
    }

    /// Saves the checkpoint (right after the last event handed out) in the
    /// file given to [`Follower::with_cursor_file`], replacing it
    /// atomically; call it once the events handed out so far are processed.
    /// Nothing to do without a file or before the first event.
    pub fn save_cursor(&self) -> std::io::Result<()> {
        let Some(file) = &self.cursor_file else {
            return Ok(());
        };
        let mut bytes = Vec::new();
        self.checkpoint_bytes(&mut bytes);
        if bytes.is_empty() {
            return Ok(());
        }
        file.save(&bytes)
    }

    /// Asks for one event per response (in node scope a follower asks for
    /// batches unless told this): only the responses differ, never the
    /// events handed out (see [`Follower::new`] for cursors).
    pub fn one_event_per_response(mut self) -> Follower {
        self.request.batching = false;
        self
    }

    /// Connects over TLS with `tls` (to `https://` when the server was
    /// given as `host:port`).
    pub fn with_tls(
        mut self,
        tls: tonic::transport::ClientTlsConfig,
    ) -> Result<Follower, FollowError> {
        if self.server.starts_with("http://") {
            // It would connect in plaintext and send the token in clear.
            return Err(FollowError::Address(
                self.server.clone(),
                "an http:// address with TLS: use https:// or no scheme".into(),
            ));
        }
        let uri = if self.server.contains("://") {
            self.server.clone()
        } else {
            format!("https://{}", self.server)
        };
        self.endpoint = endpoint(&self.server, uri)?
            .tls_config(tls)
            .map_err(|e| FollowError::Address(self.server.clone(), e.to_string()))?;
        Ok(self)
    }

    /// Sends `token` (`authorization: Bearer TOKEN`) with every
    /// subscription request, for a server started with --token-file.
    pub fn with_token(self, token: Option<&str>) -> Result<Follower, FollowError> {
        let bearer = Bearer::new(token).ok_or_else(|| {
            FollowError::Refused(Status::invalid_argument(
                "the token is not a valid header value (printable ASCII only)",
            ))
        })?;
        Ok(self.with_bearer(bearer))
    }

    /// [`Follower::with_token`] with the token made already.
    pub fn with_bearer(mut self, bearer: Bearer) -> Follower {
        self.bearer = bearer;
        self
    }

    /// The checkpoint: resuming from it continues right after the last event
    /// [`Follower::next`] returned. `None` before the first response.
    pub fn cursor(&self) -> Option<Cursor> {
        self.checkpoint.clone()
    }

    /// The checkpoint's bytes (a cluster cursor in cluster scope) into
    /// `out`, as `--cursor` and `Start::Cursor` take them; nothing before
    /// the first response.
    pub fn checkpoint_bytes(&self, out: &mut Vec<u8>) {
        match &self.cluster {
            Some(point) => out.extend_from_slice(point.checkpoint.as_deref().unwrap_or_default()),
            None => {
                if let Some(checkpoint) = &self.checkpoint {
                    checkpoint.write_bytes(out);
                }
            }
        }
    }

    /// [`Follower::cursor`] without a copy.
    pub fn checkpoint(&self) -> Option<&Cursor> {
        self.checkpoint.as_ref()
    }

    /// Every matching event stamped at or below this has been handed out
    /// (from heartbeats and events; 0 = unknown).
    pub fn watermark_ns(&self) -> i64 {
        self.watermark_ns
    }

    /// Whether an event was received and not handed out yet: then
    /// [`Follower::next`] returns it without waiting.
    pub fn has_buffered(&self) -> bool {
        self.ahead.is_some()
    }

    /// The epoch the current (or next) stream uses.
    pub fn epoch(&self) -> u64 {
        self.request.client_epoch
    }

    /// The next event; `Ok(None)` once `until_ns` is reached.
    pub async fn next(&mut self) -> Result<Option<FollowedEvent>, FollowError> {
        loop {
            if let Some(event) = self.ahead.take() {
                self.hand_out(&event);
                self.look_ahead()?;
                return Ok(Some(event));
            }
            if self.ended {
                return Ok(None);
            }
            self.receive().await?;
        }
    }

    /// The next event, or, when a response (a heartbeat) raised the
    /// watermark and no event is at hand, the new watermark: every matching
    /// event stamped at or below it has been handed out, so a merge of
    /// several feeds may go past it even while this one is quiet.
    /// `Ok(Step::End)` once `until_ns` is reached.
    pub async fn next_step(&mut self) -> Result<Step, FollowError> {
        loop {
            if let Some(event) = self.ahead.take() {
                self.hand_out(&event);
                self.look_ahead()?;
                return Ok(Step::Event(event));
            }
            if self.ended {
                return Ok(Step::End);
            }
            let before = self.watermark_ns;
            self.receive().await?;
            if self.ahead.is_none() && self.watermark_ns > before {
                return Ok(Step::Watermark(self.watermark_ns));
            }
        }
    }

    /// Batch at a time: waits for the next event, then hands out with it every
    /// event already received, into `out` (cleared first; reuse it and
    /// nothing is allocated). `Ok(false)` once `until_ns` is reached. The
    /// checkpoint is then just after the last event in `out`.
    pub async fn next_batch(&mut self, out: &mut Vec<FollowedEvent>) -> Result<bool, FollowError> {
        out.clear();
        let Some(first) = self.next().await? else {
            return Ok(false);
        };
        out.push(first);
        while let Some(event) = self.ahead.take() {
            self.hand_out(&event);
            self.look_ahead()?;
            out.push(event);
        }
        Ok(true)
    }

    /// Waits for the next response (connecting or reconnecting first if
    /// needed) and takes it.
    async fn receive(&mut self) -> Result<(), FollowError> {
        let result = match self.stream.as_mut() {
            Some(stream) => stream.message().await,
            None => match self.connect().await {
                Ok(()) => {
                    if self.failures > 0 {
                        let mut cursor = Vec::new();
                        self.checkpoint_bytes(&mut cursor);
                        let attempts = self.failures;
                        if let Some(observe) = self.on_connection.as_mut() {
                            observe(Connection::Back {
                                attempts,
                                cursor: &cursor,
                            });
                        }
                    }
                    return Ok(());
                }
                Err(status) => Err(status),
            },
        };
        match result {
            Ok(Some(response)) => {
                self.failures = 0;
                self.take(response)
            }
            // The server ends a stream OK only once until_ns is reached;
            // an OK end without it is a cut stream: resume.
            Ok(None) if self.request.until_ns != 0 => {
                self.ended = true;
                Ok(())
            }
            Ok(None) => {
                let status =
                    Status::unavailable("the stream ended without an error before any until_ns");
                self.failed(status).await
            }
            Err(status) => self.failed(status).await,
        }
    }

    async fn connect(&mut self) -> Result<(), Status> {
        let channel: Channel = self
            .endpoint
            .connect()
            .await
            .map_err(|e| Status::unavailable(format!("connecting to {}: {e}", self.server)))?;
        let mut request = self.request.clone();
        if let Some(cursor) = &self.checkpoint {
            request.start = Some(Start::Cursor(cursor.to_bytes().into()));
        }
        if let Some(cursor) = self.cluster.as_ref().and_then(|c| c.checkpoint.clone()) {
            request.start = Some(Start::Cursor(cursor));
        }
        let mut grpc =
            tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES);
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(format!("connecting to {}: {e}", self.server)))?;
        let path = PathAndQuery::from_static("/ringfeed.v1.RingFeed/Subscribe");
        let mut request = tonic::Request::new(request);
        self.bearer.apply(&mut request);
        let response = grpc
            .server_streaming(request, path, RawResponseCodec)
            .await?;
        // Where the stream starts: the checkpoint until the first response
        // moves it, so a cut before any response resumes exactly too.
        let start = || {
            let start = response.metadata().get_bin(START_CURSOR_METADATA);
            start.and_then(|v| v.to_bytes().ok())
        };
        match self.cluster.as_mut() {
            Some(point) if point.checkpoint.is_none() => point.checkpoint = start(),
            Some(_) => {}
            None if self.checkpoint.is_none() => {
                self.checkpoint = start().and_then(|b| Cursor::from_bytes(&b).ok());
            }
            None => {}
        }
        self.stream = Some(response.into_inner());
        self.in_chunks = self.request.chunk_mode;
        Ok(())
    }

    /// Backs off and prepares a reconnect after `status`, or gives up.
    async fn failed(&mut self, status: Status) -> Result<(), FollowError> {
        self.stream = None;
        if !retryable(&status) {
            return Err(FollowError::Refused(status));
        }
        let random = self.random();
        let delay = self.backoff.delay(self.failures, random);
        if self.failures == 0 {
            if let Some(observe) = self.on_connection.as_mut() {
                observe(Connection::Lost {
                    error: &status,
                    retry_in: delay,
                });
            }
        }
        self.failures = self.failures.saturating_add(1);
        self.stats.reconnects += 1;
        self.request.client_epoch += 1;
        tokio::time::sleep(delay).await;
        Ok(())
    }

    /// Takes a response: its events become the pending ones, its cursor
    /// the checkpoint once they are handed out.
    fn take(&mut self, message: Bytes) -> Result<(), FollowError> {
        let response = Response::parse(message)
            .map_err(|e| FollowError::Corrupt(format!("a response does not decode: {e}")))?;
        let cluster_cursor = (self.cluster.is_some() && !response.cursor.is_empty())
            .then(|| response.cursor.clone());
        let cursor = (!response.cursor.is_empty() && self.cluster.is_none())
            .then(|| Cursor::from_bytes(&response.cursor))
            .transpose()
            .map_err(|e| FollowError::Corrupt(format!("cursor: {e}")))?;
        self.pending = match response.item {
            Item::Events(events) => {
                if events.batch() {
                    self.stats.batches += 1;
                }
                Pending::Events(events)
            }
            Item::Chunk(chunk) => {
                self.stats.chunks += 1;
                Pending::Chunk(self.check_chunk(chunk)?)
            }
            Item::Heartbeat(h) => {
                self.stats.heartbeats += 1;
                self.watermark_ns = self.watermark_ns.max(h.merged_watermark_ns);
                Pending::Empty
            }
            Item::ChunkModeEnd => {
                self.in_chunks = false;
                Pending::Empty
            }
            Item::Nothing => Pending::Empty,
        };
        self.ahead = self.next_pending()?;
        if let (Some(point), Some(cursor)) = (self.cluster.as_mut(), cluster_cursor) {
            match self.ahead {
                None => point.checkpoint = Some(cursor),
                Some(_) => point.response = Some(cursor),
            }
            return Ok(());
        }
        let Some(cursor) = cursor else {
            return Ok(());
        };
        if self.ahead.is_none() {
            self.reached(cursor);
            return Ok(());
        }
        self.checkpoint = Some(self.checkpoint_before(&cursor));
        self.response_cursor = Some(cursor);
        Ok(())
    }

    /// The checkpoint while a response's events are handed out: the
    /// response's cursor (whose generations hold for every offset at or below
    /// its own, see ringfeed_engine::generation, whose rules the server
    /// applies) with each shard's offset moved back to where the previous
    /// checkpoint had it. Only filtered-out events lie between that and the
    /// shard's first pending event. Without a previous checkpoint, each
    /// shard's first pending event is looked for.
    fn checkpoint_before(&self, cursor: &Cursor) -> Cursor {
        let mut before = cursor.clone();
        match &self.checkpoint {
            Some(previous) if previous.shards() == cursor.shards() => {
                for shard in 0..cursor.shards() as u32 {
                    let next = previous.next_offset(shard);
                    // Back where the previous checkpoint was: its generation
                    // too, so a cursor inside a batch is the one a response
                    // of its own would have carried.
                    if next <= cursor.next_offset(shard) {
                        before.set_shard(shard, next, previous.generation(shard));
                    }
                }
            }
            _ => {
                let mut seen = vec![false; cursor.shards()];
                let mut rest = self.pending.clone();
                let mut event = self.ahead.clone();
                while let Some(e) = event {
                    if let Some(seen) = seen.get_mut(e.shard as usize) {
                        if !*seen {
                            *seen = true;
                            // At offset 0 it covers none of the shard's
                            // events: generation 0, as a server writes it.
                            before.set_shard(e.shard, e.offset, (e.offset == 0).then_some(0));
                        }
                    }
                    // The events were walked once already: they decode.
                    event = rest
                        .next_event(&self.filter, self.request.until_ns)
                        .ok()
                        .flatten();
                }
            }
        }
        before
    }

    /// The next event of the current response, or `None` when it is used up.
    fn next_pending(&mut self) -> Result<Option<FollowedEvent>, FollowError> {
        self.pending.next_event(&self.filter, self.request.until_ns)
    }

    /// Finds the event after the one just handed out; when the response is
    /// used up, its cursor becomes the checkpoint.
    fn look_ahead(&mut self) -> Result<(), FollowError> {
        self.ahead = self.next_pending()?;
        if self.ahead.is_none() {
            self.pending = Pending::Empty;
            if let Some(point) = self.cluster.as_mut() {
                if let Some(cursor) = point.response.take() {
                    point.checkpoint = Some(cursor);
                }
            }
            if let Some(cursor) = self.response_cursor.take() {
                self.reached(cursor);
            }
        }
        Ok(())
    }

    /// Every event before `cursor` was handed out.
    fn reached(&mut self, cursor: Cursor) {
        self.checkpoint = Some(cursor);
        // resume_truncated was for the cursor the follower started
        // from; a later crash's truncation must be reported again.
        self.request.resume_truncated = false;
    }

    fn hand_out(&mut self, event: &FollowedEvent) {
        self.stats.events += 1;
        self.watermark_ns = self.watermark_ns.max(event.ts_ns - 1);
        if let Some(checkpoint) = self.checkpoint.as_mut() {
            // Past this event the response's generation holds; the
            // checkpoint may still carry the previous response's.
            let generation = self
                .response_cursor
                .as_ref()
                .and_then(|c| c.generation(event.shard));
            checkpoint.set_shard(event.shard, event.offset + 1, generation);
        }
    }

    /// Checks a chunk (checksum, offsets dense from `first_offset`, the
    /// announced count) before any of its records is handed out.
    fn check_chunk(&self, chunk: v1::ChunkMessage) -> Result<ChunkRecords, FollowError> {
        if !self.in_chunks {
            return Err(FollowError::Corrupt(
                "a chunk after the end of chunk mode".into(),
            ));
        }
        let records = chunk.records;
        if crc32c::crc32c(&records) != chunk.crc32c {
            return Err(FollowError::Corrupt(format!(
                "shard {} chunk at offset {}: checksum mismatch",
                chunk.shard, chunk.first_offset
            )));
        }
        let mut at = 0;
        let mut expected = chunk.first_offset;
        while at < records.len() {
            let (len, offset, _) = peek_position(&records[at..]).map_err(|e| {
                FollowError::Corrupt(format!("shard {} record {expected}: {e}", chunk.shard))
            })?;
            if offset != expected {
                return Err(FollowError::Corrupt(format!(
                    "shard {}: expected offset {expected}, found {offset}",
                    chunk.shard
                )));
            }
            at += len;
            expected += 1;
        }
        if expected - chunk.first_offset != u64::from(chunk.record_count) {
            return Err(FollowError::Corrupt(format!(
                "shard {} chunk at offset {}: {} records, {} announced",
                chunk.shard,
                chunk.first_offset,
                expected - chunk.first_offset,
                chunk.record_count
            )));
        }
        Ok(ChunkRecords {
            shard: chunk.shard,
            records,
            at: 0,
        })
    }

    /// A xorshift draw in [0, 1) for jitter.
    fn random(&mut self) -> f64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        (self.seed >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Whether a reconnect can fix what `status` reports. CANCELLED is final
/// only when the server says this stream was superseded: a reset connection
/// also surfaces as CANCELLED.
fn retryable(status: &Status) -> bool {
    match status.code() {
        Code::Cancelled => ringfeed_proto::wire::superseded_by(status).is_none(),
        Code::Unavailable
        | Code::Unknown
        | Code::Internal
        | Code::Aborted
        | Code::DeadlineExceeded
        | Code::ResourceExhausted => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_by_the_multiplier_within_jitter_and_is_capped() {
        let b = Backoff::default();
        assert_eq!(b.delay(0, 0.5), Duration::from_secs(1));
        let second = b.delay(1, 0.5).as_secs_f64();
        assert!((second - 1.6).abs() < 1e-9, "{second}");
        assert!((b.delay(0, 0.0).as_secs_f64() - 0.8).abs() < 1e-9);
        assert!(b.delay(0, 0.999_999).as_secs_f64() < 1.2 + 1e-6);
        assert_eq!(b.delay(60, 0.5), Duration::from_secs(120));
    }

    #[test]
    fn only_transient_codes_are_retried() {
        assert!(retryable(&Status::unavailable("restart")));
        for code in [
            Code::OutOfRange,
            Code::InvalidArgument,
            Code::AlreadyExists,
            Code::DataLoss,
        ] {
            assert!(!retryable(&Status::new(code, "x")), "{code:?}");
        }
        assert!(!retryable(&Status::cancelled(format!(
            "{SUPERSEDED} by epoch 9"
        ))));
        assert!(!retryable(&ringfeed_proto::wire::superseded_status(9)));
        assert!(retryable(&Status::cancelled("connection reset")));
    }
}
