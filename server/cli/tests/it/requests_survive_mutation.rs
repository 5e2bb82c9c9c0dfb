//! The requests the server accepts, under property-based fuzzing: valid
//! `Append`, `AppendStream`, `Subscribe`, `Status` and `ListSubscribers`
//! requests, encoded with prost and mutated (bytes flipped, set, inserted,
//! cut, appended) in the message, in one event inside it (the request
//! re-encoded around it, so the edit reaches the event decoder and the
//! engine's validation), in a subscription's cursor (re-checksummed, so the
//! edit reaches the checks behind the CRC) or in the gRPC framing; and
//! requests built from arbitrary field values. Each goes through the server's
//! stack in process: the append budget, the generated router and tonic's
//! codec, the service's handlers, an engine on in-memory storage.
//!
//! No input panics, and every refusal is typed. Bytes that are not a request
//! are refused before any handler runs, by tonic's framing or by the server
//! codec's decoding (INVALID_ARGUMENT, where tonic's own codec says
//! INTERNAL); everything after that is refused with one of the codes the
//! handler maps its errors to (see `APPEND_CODES`, `SUBSCRIBE_CODES`), never
//! INTERNAL or UNKNOWN.
//! CI runs proptest's default cases; long mode: `PROPTEST_CASES=200000
//! cargo test --release -p ringfeed-cli --test it requests_survive_mutation`.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http_body_util::BodyExt;
use proptest::collection::vec;
use proptest::prelude::*;
use ringfeed_engine::clock::SystemClock;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{Cursor, Engine, EngineConfig, Limits, RetentionPolicy};
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::prost::Message;
use ringfeed_proto::tonic::body::Body;
use ringfeed_proto::tonic::codegen::{http, Service as _};
use ringfeed_proto::tonic::metadata::MetadataMap;
use ringfeed_proto::tonic::{Code, Status};
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::wire::START_CURSOR_METADATA;
use ringfeed_proto::{v1, RawAppendRequest, RingFeedServer};
use ringfeed_server::Service;
use ringfeed_server::{AppendBudget, Budgeted};
use tokio::sync::watch;

use ringfeed_testkit::mutation::{apply, edits, Edit};

/// What the append handlers refuse with: an invalid event or batch, a
/// request over the batch limit at its length prefix (INVALID_ARGUMENT), a
/// producer's sequence gap (FAILED_PRECONDITION), a full append budget or
/// engine queue (RESOURCE_EXHAUSTED).
const APPEND_CODES: &[Code] = &[
    Code::InvalidArgument,
    Code::FailedPrecondition,
    Code::ResourceExhausted,
];

/// What `Subscribe` refuses with: a bad cursor, filter or enum
/// (INVALID_ARGUMENT), a cursor or time below retention (OUT_OF_RANGE), a
/// cursor truncated by a crash (FAILED_PRECONDITION), a client identity
/// connected with an equal or higher epoch (ALREADY_EXISTS).
const SUBSCRIBE_CODES: &[Code] = &[
    Code::InvalidArgument,
    Code::OutOfRange,
    Code::FailedPrecondition,
    Code::AlreadyExists,
];

/// Whether the bytes were refused before a handler ran: tonic's framing
/// and size limit, and the server codec's protobuf decoding (INVALID_ARGUMENT:
/// the client sent them wrong; tonic's own codec said INTERNAL, which tells a
/// client the server is broken).
fn from_tonic_codec(status: &Status) -> bool {
    let m = status.message();
    match status.code() {
        Code::InvalidArgument => m.starts_with("the request is not a valid message: "),
        Code::Internal => {
            m.starts_with("protocol error: received message with")
                || m == "Unexpected EOF decoding stream."
                || m == "Missing request message."
        }
        Code::OutOfRange => m.starts_with("Error, decoded message length too large"),
        _ => false,
    }
}

// ---- the server under test ----

struct Harness {
    rt: tokio::runtime::Runtime,
    server: Budgeted<RingFeedServer<Service>>,
    _stop: watch::Sender<bool>,
}

/// Panics anywhere in the process: a handler's, a spawned stream task's
/// (which tokio would otherwise swallow), an engine thread's.
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            report(info);
        }));
        let limits = Limits {
            max_event_bytes: 16 << 10,
            max_batch_events: 1000,
            max_batch_bytes: 1 << 20,
            ..Limits::default()
        };
        let config = EngineConfig {
            data_dir: "unused".into(),
            shards: 2,
            window_bytes: 64 << 10,
            ring_bytes: 1 << 20,
            max_unflushed_bytes: 256 << 10,
            flush_interval: Duration::from_millis(1),
            append_timeout: Duration::from_secs(2),
            segment_bytes: 1 << 20,
            // Bounds the memory of long runs; cursors and times fall below
            // retention (OUT_OF_RANGE) as they do in production.
            retention: RetentionPolicy {
                max_age: None,
                max_bytes: Some(4 << 20),
                ..Default::default()
            },
            retention_interval: Duration::from_millis(200),
            limits,
            ..EngineConfig::default()
        };
        let storages = [MemStorage::new(), MemStorage::new()];
        let engine = Engine::open_with(config, Arc::new(SystemClock), move |s| {
            storages[s as usize].clone()
        })
        .expect("an in-memory engine");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let (stop, stop_rx) = watch::channel(false);
        // As `ringfeed serve` builds it (main.rs).
        let max_message = limits.max_batch_bytes + (1 << 20);
        let service = Service::new(Arc::new(engine), stop_rx, Default::default());
        let ringfeed = RingFeedServer::new(service)
            .max_decoding_message_size(max_message)
            .max_encoding_message_size(max_message);
        let budget = AppendBudget::with_max_message(16 << 20, Duration::from_secs(2), max_message);
        Harness {
            rt,
            server: Budgeted::new(ringfeed, budget),
            _stop: stop,
        }
    })
}

/// A cursor this server makes now (a subscription's start), to mutate: one
/// made long ago would be below retention and refused before the checks
/// behind it.
fn start_cursor() -> Result<Vec<u8>, TestCaseError> {
    let now = v1::SubscribeRequest {
        start: Some(Start::Now(true)),
        ..Default::default()
    };
    let reply = run("Subscribe", frame(&[now.encode_to_vec()]))?;
    MetadataMap::from_headers(reply.headers)
        .get_bin(START_CURSOR_METADATA)
        .and_then(|v| v.to_bytes().ok())
        .map(|v| v.to_vec())
        .ok_or_else(|| TestCaseError::fail("Subscribe: no start cursor"))
}

/// What the server answered: its response messages and final status
/// (`None`: a `Subscribe` stream that started, left open and then dropped).
struct Reply {
    headers: http::HeaderMap,
    messages: Vec<Bytes>,
    status: Option<Status>,
}

/// One call through the server's stack, `wire` (gRPC frames) as the body.
async fn call(server: &Budgeted<RingFeedServer<Service>>, method: &str, wire: Vec<u8>) -> Reply {
    let body = http_body_util::Full::new(Bytes::from(wire))
        .map_err(|e: Infallible| -> Status { match e {} });
    let request = http::Request::builder()
        .method(http::Method::POST)
        .uri(format!("/ringfeed.v1.RingFeed/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Body::new(body))
        .expect("a request");
    let mut server = server.clone();
    std::future::poll_fn(|cx| server.poll_ready(cx))
        .await
        .unwrap_or_else(|e| match e {});
    let response = server.call(request).await.unwrap_or_else(|e| match e {});
    let (parts, body) = response.into_parts();
    // A refusal before any response: a trailers-only answer.
    if let Some(status) = Status::from_header_map(&parts.headers) {
        return Reply {
            headers: parts.headers,
            messages: Vec::new(),
            status: Some(status),
        };
    }
    if method == "Subscribe" {
        // Dropping the body ends the stream (its sender sees the queue closed).
        return Reply {
            headers: parts.headers,
            messages: Vec::new(),
            status: None,
        };
    }
    let (messages, status) = match body.collect().await {
        Ok(collected) => {
            let status = collected.trailers().and_then(Status::from_header_map);
            (unframe(collected.to_bytes()), status)
        }
        Err(status) => (Vec::new(), Some(status)),
    };
    Reply {
        headers: parts.headers,
        messages,
        status,
    }
}

/// Runs `method` with `wire` as its body; fails on a panic anywhere meanwhile
/// or on no answer within a bound.
fn run(method: &str, wire: Vec<u8>) -> Result<Reply, TestCaseError> {
    let h = harness();
    let panics = PANICS.load(Ordering::SeqCst);
    let reply = h.rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), call(&h.server, method, wire)).await
    });
    prop_assert_eq!(
        PANICS.load(Ordering::SeqCst),
        panics,
        "a panic while serving {} (its message is above)",
        method
    );
    reply.map_err(|_| TestCaseError::fail(format!("{method}: no answer within 30 s")))
}

/// gRPC frames (uncompressed) around `messages`.
fn frame(messages: &[Vec<u8>]) -> Vec<u8> {
    let mut wire = Vec::new();
    for m in messages {
        wire.push(0);
        wire.extend_from_slice(&(m.len() as u32).to_be_bytes());
        wire.extend_from_slice(m);
    }
    wire
}

/// The messages of the server's own (well-formed) frames.
fn unframe(mut data: Bytes) -> Vec<Bytes> {
    let mut messages = Vec::new();
    while data.len() >= 5 {
        let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
        let _ = data.split_to(5);
        messages.push(data.split_to(len.min(data.len())));
    }
    messages
}

// ---- what an answer may be ----

/// How far a request got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reached {
    /// tonic refused its bytes.
    Undecodable,
    /// A handler accepted it.
    Accepted,
    /// A handler refused it.
    Refused,
}

fn refusal(status: &Status, codes: &[Code]) -> Result<Reached, TestCaseError> {
    if from_tonic_codec(status) {
        return Ok(Reached::Undecodable);
    }
    prop_assert!(
        codes.contains(&status.code()),
        "refused with {:?} (allowed: {:?}): {}",
        status.code(),
        codes,
        status.message()
    );
    Ok(Reached::Refused)
}

/// A unary `Append`: one response with a position per event, or a refusal.
fn check_append(reply: &Reply, events: Option<usize>) -> Result<Reached, TestCaseError> {
    let Some(status) = &reply.status else {
        return Err(TestCaseError::fail("Append: no grpc-status"));
    };
    if status.code() != Code::Ok {
        prop_assert!(
            reply.messages.is_empty(),
            "Append: a response and {status:?}"
        );
        return refusal(status, APPEND_CODES);
    }
    prop_assert_eq!(
        reply.messages.len(),
        1,
        "Append: OK with no single response"
    );
    let response = v1::AppendResponse::decode(reply.messages[0].clone()).map_err(|e| {
        TestCaseError::fail(format!("Append: a response that does not decode: {e}"))
    })?;
    prop_assert!(response.failure.is_none(), "Append: {:?}", response.failure);
    if let Some(events) = events {
        prop_assert_eq!(
            response.positions.len(),
            events,
            "Append: a position per event"
        );
    }
    Ok(Reached::Accepted)
}

/// An `AppendStream` of `requests` requests: an answer to each in order, or
/// answers to the first ones and a refusal. A request of a group appended
/// together that was not stored in full is answered with a `failure` (what
/// of it was stored) carrying the refusal's code, and the refusal follows.
fn check_append_stream(reply: &Reply, requests: Option<usize>) -> Result<Reached, TestCaseError> {
    let Some(status) = &reply.status else {
        return Err(TestCaseError::fail("AppendStream: no grpc-status"));
    };
    let mut failed = false;
    for message in &reply.messages {
        let response = v1::AppendResponse::decode(message.clone()).map_err(|e| {
            TestCaseError::fail(format!(
                "AppendStream: a response that does not decode: {e}"
            ))
        })?;
        if let Some(failure) = response.failure {
            prop_assert_eq!(
                failure.code,
                status.code() as i32,
                "AppendStream: a failed request, then {:?}",
                status
            );
            failed = true;
        }
    }
    if status.code() == Code::Ok {
        if let Some(requests) = requests {
            prop_assert_eq!(
                reply.messages.len(),
                requests,
                "AppendStream: an answer per request"
            );
        }
        return Ok(Reached::Accepted);
    }
    if let Some(requests) = requests {
        prop_assert!(
            reply.messages.len() < requests || failed,
            "AppendStream: answered all, then {status:?}"
        );
    }
    refusal(status, APPEND_CODES)
}

/// `Subscribe`: a stream that starts with its start cursor, or a refusal.
fn check_subscribe(reply: &Reply) -> Result<Reached, TestCaseError> {
    match &reply.status {
        None => {
            prop_assert!(
                reply.headers.contains_key(START_CURSOR_METADATA),
                "Subscribe: started without its start cursor"
            );
            Ok(Reached::Accepted)
        }
        Some(status) => refusal(status, SUBSCRIBE_CODES),
    }
}

/// `Status` and `ListSubscribers`: an answer, whatever fields the request had.
fn check_unary<M: Message + Default>(
    method: &str,
    reply: &Reply,
) -> Result<Reached, TestCaseError> {
    let Some(status) = &reply.status else {
        return Err(TestCaseError::fail(format!("{method}: no grpc-status")));
    };
    if status.code() != Code::Ok {
        return refusal(status, &[]);
    }
    prop_assert_eq!(
        reply.messages.len(),
        1,
        "{}: OK with no single response",
        method
    );
    prop_assert!(
        M::decode(reply.messages[0].clone()).is_ok(),
        "{}: a bad response",
        method
    );
    Ok(Reached::Accepted)
}

// ---- edits (as engine/tests/decoders_survive_mutation.rs, plus insertions) ----

/// Re-checksums a cursor (its last 4 bytes are the CRC of what precedes them).
fn rechecksum_cursor(bytes: &mut [u8]) {
    if bytes.len() < 4 {
        return;
    }
    let body = bytes.len() - 4;
    let crc = crc32c::crc32c(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
}

/// Where an edit lands.
#[derive(Clone, Debug)]
enum Target {
    /// The encoded request.
    Message,
    /// One event's encoding (`n % events`), inside a well-formed request.
    Event(usize),
    /// A subscription's cursor, inside a well-formed request; re-checksummed or not.
    Cursor { recrc: bool },
    /// The gRPC frame: length prefix and message.
    Frame,
}

fn append_target() -> impl Strategy<Value = Target> {
    prop_oneof![
        2 => Just(Target::Message),
        3 => any::<usize>().prop_map(Target::Event),
        1 => Just(Target::Frame),
    ]
}

fn subscribe_target() -> impl Strategy<Value = Target> {
    prop_oneof![
        2 => Just(Target::Message),
        2 => any::<bool>().prop_map(|recrc| Target::Cursor { recrc }),
        1 => Just(Target::Frame),
    ]
}

// ---- valid requests ----

const DIRS: &[&str] = &["/", "/a", "/a/b", "/data/x y", "/é/ü"];

/// A valid event: create, update, delete or rename by `i % 4`.
fn event(i: u64) -> v1::Event {
    let entry = |name: String| v1::Entry {
        name,
        is_directory: i.is_multiple_of(5),
        size: i,
        mtime_ns: i as i64,
        mode: 0o644,
        attributes: vec![i as u8; (i % 50) as usize].into(),
        extended: [("user.k".to_string(), Bytes::from(vec![i as u8; 3]))].into(),
    };
    let name = format!("f{i}");
    let (old, new, parent) = match i % 4 {
        0 => (None, Some(entry(name)), ""),
        1 => (Some(entry(name.clone())), Some(entry(name)), ""),
        2 => (Some(entry(name)), None, ""),
        _ => (
            Some(entry(name.clone())),
            Some(entry(format!("{name}.moved"))),
            "/b",
        ),
    };
    v1::Event {
        directory: DIRS[i as usize % DIRS.len()].into(),
        old_entry: old,
        new_entry: new,
        new_parent_path: parent.into(),
        signatures: if i.is_multiple_of(3) {
            vec![7, -1]
        } else {
            vec![]
        },
        seaweedfs: None,
    }
}

/// A valid request of `n` events; with a producer, one of its own.
fn append_request(i: u64, n: usize, durable: bool, producer: bool) -> RawAppendRequest {
    v1::AppendRequest {
        events: (0..n as u64).map(|k| event(i + k)).collect(),
        durability: if durable {
            v1::Durability::Durable
        } else {
            v1::Durability::Memory
        } as i32,
        producer_id: if producer { 1 + i } else { 0 },
        first_sequence: if producer { i } else { 0 },
    }
    .into()
}

/// The request's encoding with `edits` applied where `target` says.
fn mutated_append(request: RawAppendRequest, target: &Target, e: &[Edit]) -> Vec<u8> {
    let mut request = request;
    match target {
        Target::Event(k) if !request.events.is_empty() => {
            let k = k % request.events.len();
            let mut bytes = request.events[k].to_vec();
            apply(&mut bytes, e);
            request.events[k] = bytes.into();
            request.encode_to_vec()
        }
        _ => {
            let mut bytes = request.encode_to_vec();
            apply(&mut bytes, e);
            bytes
        }
    }
}

/// The events of a request as its handler will see them, if it decodes.
fn events_of(message: &[u8]) -> Option<usize> {
    RawAppendRequest::decode(message)
        .ok()
        .map(|r| r.events.len())
}

/// A valid subscription; `start` picks now, the beginning, a time or `cursor`.
fn subscribe_request(i: u64, start: u8, cursor: &[u8]) -> v1::SubscribeRequest {
    v1::SubscribeRequest {
        client_name: format!("client-{}", i % 4),
        client_id: if i.is_multiple_of(3) { 0 } else { i % 5 },
        client_epoch: i,
        path_prefix: if i.is_multiple_of(2) {
            "/a".into()
        } else {
            String::new()
        },
        path_prefixes: vec!["/data/".into(), "/é".into()],
        directories: vec!["/".into()],
        exclude_prefixes: if i % 3 == 1 {
            vec!["/a/b".into()]
        } else {
            vec![]
        },
        signature: (i % 4) as i32,
        start: Some(match start % 4 {
            0 => Start::Now(true),
            1 => Start::Beginning(true),
            2 => Start::SinceNs(1_000 * i as i64),
            _ => Start::Cursor(cursor.to_vec().into()),
        }),
        until_ns: if i.is_multiple_of(5) { 1 } else { 0 },
        ordering: (i % 3) as i32,
        batching: i.is_multiple_of(2),
        heartbeats: i.is_multiple_of(3),
        heartbeat_interval_ms: (i % 7) as u32 * 10,
        chunk_mode: i % 4 == 1,
        durable_only: i % 5 == 2,
        resume_truncated: i % 6 == 3,
        // 0 = this node, 1 = the cluster (refused without peers), 2 = unknown.
        scope: (i % 3) as i32,
    }
}

fn mutated_subscribe(request: v1::SubscribeRequest, target: &Target, e: &[Edit]) -> Vec<u8> {
    let mut request = request;
    match (target, &mut request.start) {
        (Target::Cursor { recrc }, Some(Start::Cursor(cursor))) => {
            let mut bytes = cursor.to_vec();
            apply(&mut bytes, e);
            if *recrc {
                rechecksum_cursor(&mut bytes);
            }
            *cursor = bytes.into();
            request.encode_to_vec()
        }
        _ => {
            let mut bytes = request.encode_to_vec();
            apply(&mut bytes, e);
            bytes
        }
    }
}

/// The gRPC body for `message`: mutated framing for `Target::Frame`.
fn wire(message: Vec<u8>, target: &Target, e: &[Edit]) -> Vec<u8> {
    let mut wire = frame(&[message]);
    if matches!(target, Target::Frame) {
        apply(&mut wire, e);
    }
    wire
}

// ---- arbitrary field values ----

fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(i64::MAX as u64 + 1),
        any::<u64>()
    ]
}

fn edge_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0),
        Just(-1),
        Just(i64::MIN),
        Just(i64::MAX),
        any::<i64>()
    ]
}

fn edge_i32() -> impl Strategy<Value = i32> {
    prop_oneof![
        Just(0),
        Just(-1),
        Just(i32::MIN),
        Just(i32::MAX),
        0..4,
        any::<i32>()
    ]
}

/// Up to 100,000 characters: over every path limit.
fn huge() -> impl Strategy<Value = String> {
    (1usize..100_000, any::<char>()).prop_map(|(n, c)| std::iter::repeat_n(c, n).collect())
}

/// Paths a request may well carry (a trailing '/' only a filter accepts).
fn plain_path() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/".to_string()),
        "(/[a-zé ]{1,4}){1,3}",
        "(/[a-z]{1,3}){1,3}/",
    ]
}

/// Mostly plain paths, so a request gets past its paths to its other fields.
fn some_path() -> impl Strategy<Value = String> {
    prop_oneof![3 => plain_path(), 1 => weird_path()]
}

fn some_name() -> impl Strategy<Value = String> {
    prop_oneof![3 => "[a-zé]{1,8}", 1 => weird_name()]
}

/// Paths from awkward pieces: empty, `.`, `..`, NUL, a BOM, non-ASCII,
/// doubled or trailing separators, relative; any string; a huge one.
fn weird_path() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        Just(""),
        Just("."),
        Just(".."),
        Just("a"),
        Just("é"),
        Just("\0"),
        Just("\u{feff}"),
        Just("/"),
        Just(" ")
    ];
    prop_oneof![
        6 => (any::<bool>(), vec(part, 0..6), any::<bool>()).prop_map(|(absolute, parts, trailing)| {
            let mut path = if absolute { "/".to_string() } else { String::new() };
            path.push_str(&parts.join("/"));
            if trailing {
                path.push('/');
            }
            path
        }),
        3 => any::<String>(),
        1 => huge().prop_map(|s| format!("/{s}")),
    ]
}

fn weird_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(".".to_string()),
        Just("..".to_string()),
        Just("a/b".to_string()),
        Just("a\0".to_string()),
        "[a-z]{1,8}",
        any::<String>(),
        huge(),
    ]
}

fn arb_entry() -> impl Strategy<Value = v1::Entry> {
    (
        some_name(),
        any::<bool>(),
        edge_u64(),
        edge_i64(),
        any::<u32>(),
        prop_oneof![4 => vec(any::<u8>(), 0..64), 1 => vec(any::<u8>(), 0..20_000)],
        vec((weird_name(), vec(any::<u8>(), 0..16)), 0..3),
    )
        .prop_map(
            |(name, is_directory, size, mtime_ns, mode, attributes, extended)| v1::Entry {
                name,
                is_directory,
                size,
                mtime_ns,
                mode,
                attributes: attributes.into(),
                extended: extended.into_iter().map(|(k, v)| (k, v.into())).collect(),
            },
        )
}

fn arb_event() -> impl Strategy<Value = v1::Event> {
    (
        some_path(),
        proptest::option::of(arb_entry()),
        proptest::option::of(arb_entry()),
        prop_oneof![2 => Just(String::new()), 1 => some_path()],
        prop_oneof![6 => vec(edge_i32(), 0..8), 1 => vec(edge_i32(), 250..300)],
    )
        .prop_map(
            |(directory, old_entry, new_entry, new_parent_path, signatures)| v1::Event {
                directory,
                old_entry,
                new_entry,
                new_parent_path,
                signatures,
                seaweedfs: None,
            },
        )
}

/// An event with a string field that is not UTF-8 (0xFF first): the
/// directory, the new parent, or an entry's name.
fn non_utf8_event() -> impl Strategy<Value = Vec<u8>> {
    (0u8..4, vec(any::<u8>(), 0..40)).prop_map(|(field, raw)| {
        let mut text = vec![0xFF];
        text.extend(raw);
        let string = |tag: u8| {
            let mut out = vec![tag, text.len() as u8];
            out.extend_from_slice(&text);
            out
        };
        match field {
            0 => string(0x0A), // directory
            1 => string(0x22), // new_parent_path
            _ => {
                let entry = string(0x0A); // Entry.name
                let mut out = vec![if field == 2 { 0x12 } else { 0x1A }, entry.len() as u8];
                out.extend(entry);
                out
            }
        }
    })
}

fn arb_event_bytes() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        12 => arb_event().prop_map(|e| e.encode_to_vec().into()),
        1 => vec(any::<u8>(), 0..300).prop_map(Bytes::from),
        1 => non_utf8_event().prop_map(Bytes::from),
    ]
}

fn arb_append() -> impl Strategy<Value = RawAppendRequest> {
    let producer = prop_oneof![
        3 => Just((0, 0)),
        2 => (edge_u64(), edge_u64()),
        1 => (Just(0), edge_u64()),
    ];
    (
        vec(arb_event_bytes(), 0..6),
        prop_oneof![6 => 0..3, 1 => edge_i32()],
        producer,
    )
        .prop_map(
            |(events, durability, (producer_id, first_sequence))| RawAppendRequest {
                events,
                durability,
                producer_id,
                first_sequence,
            },
        )
}

/// Random bytes, or a well-formed cursor of any shard count (mostly the
/// server's 2), offsets and generations (with or without them).
fn arb_cursor() -> impl Strategy<Value = Vec<u8>> {
    let offset = || prop_oneof![0u64..10, edge_u64()];
    let shard = (offset(), prop_oneof![0u32..3, any::<u32>()]);
    let with_generations = prop_oneof![3 => vec(shard.clone(), 2..3), 1 => vec(shard, 0..5)]
        .prop_map(|shards| {
            let (next, generations) = shards.into_iter().unzip();
            Cursor::with_generations(next, generations).to_bytes()
        });
    let without = prop_oneof![3 => vec(offset(), 2..3), 1 => vec(offset(), 0..5)]
        .prop_map(|next| Cursor::new(next).to_bytes());
    prop_oneof![
        1 => vec(any::<u8>(), 0..200),
        3 => with_generations,
        1 => without,
    ]
}

fn arb_start() -> impl Strategy<Value = Option<Start>> {
    prop_oneof![
        Just(None),
        any::<bool>().prop_map(|b| Some(Start::Now(b))),
        any::<bool>().prop_map(|b| Some(Start::Beginning(b))),
        edge_i64().prop_map(|ns| Some(Start::SinceNs(ns))),
        arb_cursor().prop_map(|c| Some(Start::Cursor(c.into()))),
    ]
}

fn arb_subscribe() -> impl Strategy<Value = v1::SubscribeRequest> {
    let who = (
        prop_oneof![Just(String::new()), weird_name()],
        prop_oneof![Just(0), 1u64..4, edge_u64()],
        edge_u64(),
    );
    let filter = (
        prop_oneof![Just(String::new()), some_path()],
        vec(some_path(), 0..3),
        vec(some_path(), 0..3),
        vec(some_path(), 0..3),
        edge_i32(),
    );
    let how = (
        arb_start(),
        edge_i64(),
        prop_oneof![6 => 0..3, 1 => edge_i32()],
        any::<[bool; 6]>(),
        prop_oneof![Just(0), 1u32..100, any::<u32>()],
    );
    (who, filter, how).prop_map(
        |(
            (client_name, client_id, client_epoch),
            (path_prefix, path_prefixes, directories, exclude_prefixes, signature),
            (start, until_ns, ordering, flags, heartbeat_interval_ms),
        )| {
            let [batching, heartbeats, chunk_mode, durable_only, resume_truncated, cluster] = flags;
            v1::SubscribeRequest {
                client_name,
                client_id,
                client_epoch,
                path_prefix,
                path_prefixes,
                directories,
                exclude_prefixes,
                signature,
                start,
                until_ns,
                ordering,
                batching,
                heartbeats,
                heartbeat_interval_ms,
                chunk_mode,
                durable_only,
                resume_truncated,
                scope: i32::from(cluster),
            }
        },
    )
}

// ---- the properties ----

proptest! {
    #[test]
    fn a_mutated_append_is_answered_or_refused_with_a_typed_status(
        i in 0u64..1000, n in 1usize..6, durable in any::<bool>(), producer in any::<bool>(),
        target in append_target(), e in edits(),
    ) {
        let message = mutated_append(append_request(i, n, durable, producer), &target, &e);
        let events = (!matches!(target, Target::Frame)).then(|| events_of(&message)).flatten();
        let reply = run("Append", wire(message, &target, &e))?;
        check_append(&reply, events)?;
    }

    #[test]
    fn a_mutated_append_stream_is_answered_or_refused_with_a_typed_status(
        requests in vec((0u64..1000, 1usize..4, any::<bool>()), 1..4),
        which in any::<usize>(), target in append_target(), e in edits(),
    ) {
        let which = which % requests.len();
        let messages: Vec<Vec<u8>> = requests
            .iter()
            .enumerate()
            .map(|(k, &(i, n, producer))| {
                let request = append_request(i, n, false, producer);
                if k == which {
                    mutated_append(request, &target, &e)
                } else {
                    request.encode_to_vec()
                }
            })
            .collect();
        let mut body = frame(&messages);
        let mut count = Some(messages.len());
        if matches!(target, Target::Frame) {
            apply(&mut body, &e);
            count = None;
        }
        let reply = run("AppendStream", body)?;
        check_append_stream(&reply, count)?;
    }

    #[test]
    fn a_mutated_subscribe_is_started_or_refused_with_a_typed_status(
        i in 0u64..1000, start in any::<u8>(), target in subscribe_target(), e in edits(),
    ) {
        // A cursor target needs a cursor start.
        let start = if matches!(target, Target::Cursor { .. }) { 3 } else { start };
        let cursor = if start % 4 == 3 { start_cursor()? } else { Vec::new() };
        let request = subscribe_request(i, start, &cursor);
        let reply = run("Subscribe", wire(mutated_subscribe(request, &target, &e), &target, &e))?;
        check_subscribe(&reply)?;
    }

    #[test]
    fn mutated_status_and_list_requests_are_answered_or_refused(
        frame_edit in any::<bool>(), e in edits(),
    ) {
        // Both requests are empty messages: any bytes are unknown fields.
        let target = if frame_edit { Target::Frame } else { Target::Message };
        let mut message = Vec::new();
        if !frame_edit {
            apply(&mut message, &e);
        }
        let status = run("Status", wire(message.clone(), &target, &e))?;
        check_unary::<v1::StatusResponse>("Status", &status)?;
        let list = run("ListSubscribers", wire(message, &target, &e))?;
        check_unary::<v1::ListSubscribersResponse>("ListSubscribers", &list)?;
    }

    #[test]
    fn an_arbitrary_append_is_answered_or_refused_with_a_typed_status(request in arb_append()) {
        let events = request.events.len();
        let reply = run("Append", frame(&[request.encode_to_vec()]))?;
        check_append(&reply, Some(events))?;
    }

    #[test]
    fn an_arbitrary_append_stream_is_answered_or_refused_with_a_typed_status(
        requests in vec(arb_append(), 1..4),
    ) {
        let messages: Vec<Vec<u8>> = requests.iter().map(Message::encode_to_vec).collect();
        let reply = run("AppendStream", frame(&messages))?;
        check_append_stream(&reply, Some(messages.len()))?;
    }

    #[test]
    fn an_arbitrary_subscribe_is_started_or_refused_with_a_typed_status(request in arb_subscribe()) {
        let reply = run("Subscribe", frame(&[request.encode_to_vec()]))?;
        check_subscribe(&reply)?;
    }
}

/// How many requests got how far.
#[derive(Debug, Default)]
struct Tally {
    undecodable: usize,
    accepted: usize,
    refused: usize,
}

impl Tally {
    fn add(&mut self, reached: Reached) {
        match reached {
            Reached::Undecodable => self.undecodable += 1,
            Reached::Accepted => self.accepted += 1,
            Reached::Refused => self.refused += 1,
        }
    }
}

/// Sends every single-byte edit of `clean` to `method`; asserts most decode,
/// and that the handler accepts some and refuses some.
fn sweep(
    method: &str,
    clean: Vec<u8>,
    check: impl Fn(&[u8], &Reply) -> Result<Reached, TestCaseError>,
) {
    let mut tally = Tally::default();
    for i in 0..clean.len() {
        let mut message = clean.clone();
        message[i] ^= 0x5A;
        let reply = run(method, frame(&[message.clone()])).unwrap();
        tally.add(check(&message, &reply).unwrap());
    }
    eprintln!("{method}: {} single-byte edits: {tally:?}", clean.len());
    assert!(
        tally.accepted > 0
            && tally.refused > 0
            && 2 * (tally.accepted + tally.refused) > clean.len(),
        "{method}: {tally:?}"
    );
}

/// The mutations reach the handlers, not only tonic's decoder: every
/// single-byte edit of a valid request is sent, and most must decode, some
/// be accepted and some refused by the handler (a bad path, a bad cursor),
/// or the properties above would mostly exercise prost.
#[test]
fn mutations_reach_the_handlers() {
    let append = append_request(1, 3, false, false).encode_to_vec();
    sweep("Append", append, |message, reply| {
        check_append(reply, events_of(message))
    });
    let subscribe = subscribe_request(3, 3, &start_cursor().unwrap()).encode_to_vec();
    sweep("Subscribe", subscribe, |_, reply| check_subscribe(reply));
}
