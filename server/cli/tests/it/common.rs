//! An in-process server on 127.0.0.1 (port 0) over a given engine, and
//! helpers to drive it through the generated client.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ringfeed_engine::Engine;
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::{v1, RingFeedClient, RingFeedServer};
use ringfeed_server::Service;
use ringfeed_server::SubscriberLimits;
use tokio::sync::watch;

pub struct TestServer {
    pub addr: SocketAddr,
    pub engine: Arc<Engine>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    pub async fn start(engine: Engine) -> TestServer {
        TestServer::start_with(engine, SubscriberLimits::default()).await
    }

    /// A server whose subscription streams are paced and admitted per `limits`.
    pub async fn start_with(engine: Engine, limits: SubscriberLimits) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        TestServer::serve(Arc::new(engine), listener, limits)
    }

    /// Stops serving and serves the same engine again on the same address.
    pub async fn restart(self) -> TestServer {
        let (addr, engine) = (self.addr, self.engine.clone());
        self.stop().await;
        TestServer::resume(addr, engine).await
    }

    /// Serves `engine` on `addr` again, after [`TestServer::stop`].
    pub async fn resume(addr: SocketAddr, engine: Arc<Engine>) -> TestServer {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        TestServer::serve(engine, listener, SubscriberLimits::default())
    }

    fn serve(
        engine: Arc<Engine>,
        listener: tokio::net::TcpListener,
        limits: SubscriberLimits,
    ) -> TestServer {
        let addr = listener.local_addr().unwrap();
        let (stop, stop_rx) = watch::channel(false);
        let mut transport = ringfeed_server::transport(&limits);
        let service =
            Service::with_limits(engine.clone(), stop_rx.clone(), limits, Default::default());
        let mut stopping = stop_rx;
        let task = tokio::spawn(async move {
            transport
                .add_service(RingFeedServer::new(service))
                .serve_with_incoming_shutdown(ringfeed_server::incoming(listener), async move {
                    let _ = stopping.wait_for(|s| *s).await;
                })
                .await
                .unwrap();
        });
        TestServer {
            addr,
            engine,
            stop,
            task,
        }
    }

    pub async fn client(&self) -> RingFeedClient<Channel> {
        RingFeedClient::connect(format!("http://{}", self.addr))
            .await
            .unwrap()
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }
}

pub fn create(dir: &str, name: &str) -> v1::Event {
    v1::Event {
        directory: dir.into(),
        new_entry: Some(v1::Entry {
            name: name.into(),
            size: 42,
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn request(events: Vec<v1::Event>, durable: bool) -> v1::AppendRequest {
    v1::AppendRequest {
        events,
        durability: if durable {
            v1::Durability::Durable as i32
        } else {
            v1::Durability::Memory as i32
        },
        ..Default::default()
    }
}

/// Total committed events over all shards.
pub async fn committed(client: &mut RingFeedClient<Channel>) -> u64 {
    let status = client
        .status(v1::StatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    status.shards.iter().map(|s| s.committed_next).sum()
}

/// Asserts that every shard's feed starts on disk (evicted from the ring),
/// so a read from the beginning reads segments first.
pub async fn assert_starts_on_disk(client: &mut RingFeedClient<Channel>) {
    let status = client
        .status(v1::StatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(
        status.shards.iter().all(|s| s.evicted_below > 0),
        "a shard's feed is not on disk only at its start: {status:?}"
    );
}

/// (ts, shard, offset, event) of one delivered event.
pub type Got = (i64, u32, u64, v1::Event);

/// Reads `count` events (or to the end of the stream), failing after 20 s.
pub async fn read_events(
    stream: &mut ringfeed_proto::tonic::Streaming<v1::SubscribeResponse>,
    count: usize,
    cursor: &mut Vec<u8>,
) -> Vec<Got> {
    let mut got = Vec::new();
    while got.len() < count {
        let next = tokio::time::timeout(Duration::from_secs(20), stream.message())
            .await
            .expect("stream stalled")
            .expect("stream ok");
        let Some(response) = next else { break };
        if !response.cursor.is_empty() {
            *cursor = response.cursor.to_vec();
        }
        match response.item {
            Some(v1::subscribe_response::Item::Event(e)) => {
                got.push((e.ts_ns, e.shard, e.offset, e.event.unwrap()))
            }
            Some(v1::subscribe_response::Item::Batch(b)) => {
                for e in b.events {
                    got.push((e.ts_ns, e.shard, e.offset, e.event.unwrap()))
                }
            }
            _ => {}
        }
    }
    got
}

pub fn dma_engine(dir: &std::path::Path, shards: u32) -> Engine {
    Engine::open(ringfeed_engine::EngineConfig {
        data_dir: dir.to_path_buf(),
        shards,
        ring_bytes: 4 << 20,
        window_bytes: 256 << 10,
        max_unflushed_bytes: 1 << 20,
        segment_bytes: 4 << 20,
        limits: ringfeed_engine::Limits {
            max_event_bytes: 64 << 10,
            ..ringfeed_engine::Limits::default()
        },
        ..ringfeed_engine::EngineConfig::default()
    })
    .unwrap()
}

/// The subscriber listed on `addr` that `which` picks: its events sent.
pub async fn events_sent(addr: &str, which: impl Fn(&v1::SubscriberInfo) -> bool) -> Option<u64> {
    let list = RingFeedClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
        .list_subscribers(v1::ListSubscribersRequest {})
        .await
        .unwrap()
        .into_inner();
    list.subscribers
        .iter()
        .find(|s| which(s))
        .map(|s| s.events_sent)
}

/// Reads the rest of `stream` to its final error: how many responses came
/// before it, and the error. Fails if the stream ends OK (a stream with an
/// error to give never does) or waits 20 s for a response.
pub async fn final_status(
    stream: &mut ringfeed_proto::tonic::Streaming<v1::SubscribeResponse>,
) -> (usize, ringfeed_proto::tonic::Status) {
    let mut responses = 0;
    loop {
        match tokio::time::timeout(Duration::from_secs(20), stream.message())
            .await
            .expect("the stream stalled before its end")
        {
            Ok(Some(_)) => responses += 1,
            Ok(None) => panic!("the stream ended OK after {responses} response(s)"),
            Err(status) => return (responses, status),
        }
    }
}

/// `status` is the end of a stream whose client stopped reading for
/// `stall_timeout`: UNAVAILABLE, its place given back.
pub fn assert_given_back(status: &ringfeed_proto::tonic::Status) {
    assert_eq!(
        status.code(),
        ringfeed_proto::tonic::Code::Unavailable,
        "{status:?}"
    );
    assert!(
        status.message().contains("place was given back"),
        "{status:?}"
    );
}

/// Waits until the subscriber `which` picks on `addr` has been sent events
/// and is sent no more over 200 ms (its client stopped reading and its
/// queue is full): its events sent. Fails after 20 s.
pub async fn until_stuck(addr: &str, which: impl Fn(&v1::SubscriberInfo) -> bool) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut last = None;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = events_sent(addr, &which).await;
        if let Some(sent) = now.filter(|&n| n > 0 && now == last) {
            return sent;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the subscriber never filled its queue (events sent: {now:?})"
        );
        last = now;
    }
}

/// A request message's bytes, sent as they are.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verbatim(Vec<u8>);

impl ringfeed_proto::prost::Message for Verbatim {
    fn encode_raw(&self, buf: &mut impl ringfeed_proto::bytes::BufMut) {
        buf.put_slice(&self.0);
    }

    fn merge_field(
        &mut self,
        _: u32,
        _: ringfeed_proto::prost::encoding::WireType,
        _: &mut impl ringfeed_proto::bytes::Buf,
        _: ringfeed_proto::prost::encoding::DecodeContext,
    ) -> Result<(), ringfeed_proto::prost::DecodeError> {
        unreachable!("only sent")
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// A unary Append whose request message is `body`, byte for byte.
pub async fn append_raw(
    addr: &str,
    body: Vec<u8>,
) -> Result<v1::AppendResponse, ringfeed_proto::tonic::Status> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    append_raw_on(channel, body).await
}

/// [`append_raw`] on a channel already connected.
pub async fn append_raw_on(
    channel: Channel,
    body: Vec<u8>,
) -> Result<v1::AppendResponse, ringfeed_proto::tonic::Status> {
    let mut grpc = ringfeed_proto::tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let codec = ringfeed_proto::tonic::codec::ProstCodec::<Verbatim, v1::AppendResponse>::default();
    grpc.unary(
        ringfeed_proto::tonic::Request::new(Verbatim(body)),
        "/ringfeed.v1.RingFeed/Append".parse().unwrap(),
        codec,
    )
    .await
    .map(ringfeed_proto::tonic::Response::into_inner)
}

/// Up to `most` events of a `Follower` of `addr` following `request` (all
/// of them, to `until_ns`, with `usize::MAX`), and the follower; fails
/// after `within`.
pub async fn follow(
    addr: &str,
    request: v1::SubscribeRequest,
    most: usize,
    within: Duration,
) -> (
    Vec<ringfeed_server::client::FollowedEvent>,
    ringfeed_server::client::Follower,
) {
    use ringfeed_server::client::{Backoff, Follower};
    let mut follower = Follower::new(addr, request, Backoff::default()).unwrap();
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + within;
    while got.len() < most {
        let next = tokio::time::timeout_at(deadline.into(), follower.next())
            .await
            .unwrap_or_else(|_| panic!("{addr}: {} events, then nothing for {within:?}", got.len()))
            .unwrap_or_else(|e| panic!("{addr}: {e}"));
        match next {
            Some(e) => got.push(e),
            None => break,
        }
    }
    (got, follower)
}

/// Per shard, its events in order as (offset, stamp, event bytes).
pub fn per_shard(
    events: &[ringfeed_server::client::FollowedEvent],
) -> std::collections::BTreeMap<u32, Vec<(u64, i64, Vec<u8>)>> {
    let mut shards: std::collections::BTreeMap<u32, Vec<_>> = Default::default();
    for e in events {
        shards
            .entry(e.shard)
            .or_default()
            .push((e.offset, e.ts_ns, e.event.to_vec()));
    }
    shards
}
