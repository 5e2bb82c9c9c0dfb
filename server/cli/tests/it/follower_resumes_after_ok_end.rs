//! The client library never takes the end of a stream for success unless it
//! asked for an end (issue 15): a stream that ends with status OK before any
//! `until_ns` is a cut stream (a final status that could not be queued, a
//! proxy), and the follower resumes from its checkpoint, neither stopping for
//! good nor skipping or repeating an event. With `until_ns` set, an OK end is
//! the requested end.
//!
//! Before the fix, `Follower::next` returned `Ok(None)` ("until reached") at
//! any OK end, and a follower without `until_ns` stopped after the first cut.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringfeed_engine::Cursor;
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::prost::Message;
use ringfeed_proto::tonic::{self, Request, Response, Status, Streaming};
use ringfeed_proto::v1;
use ringfeed_proto::v1::{
    subscribe_request::Start, AppendResponse, Entry, Event, ListSubscribersRequest,
    ListSubscribersResponse, StatusRequest, StatusResponse, SubscribeRequest,
};
use ringfeed_proto::{
    RawAppendRequest, RawEventMessage, RawItem, RawSubscribeResponse, RingFeed, RingFeedServer,
};
use ringfeed_server::client::{Backoff, Follower};
use tokio_stream::Stream;

/// Events in the feed (one shard, offsets 0..TOTAL); each stream sends at
/// most `PER_STREAM` of them and then ends with status OK.
const TOTAL: u64 = 7;
const PER_STREAM: u64 = 3;

#[derive(Clone, Default)]
struct CuttingServer {
    calls: Arc<AtomicUsize>,
    /// Where each stream started, as the request's cursor said.
    starts: Arc<Mutex<Vec<u64>>>,
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn event(offset: u64) -> RawSubscribeResponse {
    let event = Event {
        directory: "/cut".into(),
        new_entry: Some(Entry {
            name: format!("f{offset}"),
            ..Default::default()
        }),
        ..Default::default()
    };
    RawSubscribeResponse::new(
        Bytes::from(Cursor::new(vec![offset + 1]).to_bytes()),
        RawItem::Event(RawEventMessage::new(
            1_000 + offset as i64,
            0,
            offset,
            Bytes::from(event.encode_to_vec()),
        )),
    )
}

#[tonic::async_trait]
impl RingFeed for CuttingServer {
    async fn append(
        &self,
        _request: Request<RawAppendRequest>,
    ) -> Result<Response<AppendResponse>, Status> {
        Err(Status::unimplemented("append"))
    }

    type AppendStreamStream = BoxStream<AppendResponse>;

    async fn append_stream(
        &self,
        _request: Request<Streaming<RawAppendRequest>>,
    ) -> Result<Response<Self::AppendStreamStream>, Status> {
        Err(Status::unimplemented("append_stream"))
    }

    type SubscribeStream = BoxStream<RawSubscribeResponse>;

    async fn subscribe(
        &self,
        request: Request<SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let start = match request.into_inner().start {
            Some(Start::Cursor(bytes)) => Cursor::from_bytes(&bytes)
                .map_err(|e| Status::invalid_argument(e.to_string()))?
                .next_offset(0),
            _ => 0,
        };
        self.starts.lock().unwrap().push(start);
        let end = (start + PER_STREAM).min(TOTAL);
        let sent = tokio_stream::iter((start..end).map(|o| Ok(event(o))));
        // Past the last event the stream stays open (a live tail, quiet).
        let stream: BoxStream<RawSubscribeResponse> = if end == TOTAL {
            Box::pin(tokio_stream::StreamExt::chain(
                sent,
                tokio_stream::pending(),
            ))
        } else {
            Box::pin(sent) // ends with status OK
        };
        Ok(Response::new(stream))
    }

    async fn status(
        &self,
        _request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        Err(Status::unimplemented("status"))
    }

    async fn list_subscribers(
        &self,
        _request: Request<ListSubscribersRequest>,
    ) -> Result<Response<ListSubscribersResponse>, Status> {
        Err(Status::unimplemented("list_subscribers"))
    }

    async fn list_nodes(
        &self,
        _request: Request<v1::ListNodesRequest>,
    ) -> Result<Response<v1::ListNodesResponse>, Status> {
        Err(Status::unimplemented("list_nodes"))
    }
}

async fn serve(server: CuttingServer) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RingFeedServer::new(server))
            .serve_with_incoming(incoming),
    );
    addr
}

fn fast_backoff() -> Backoff {
    Backoff {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(50),
        ..Backoff::default()
    }
}

fn request(until_ns: i64) -> SubscribeRequest {
    SubscribeRequest {
        start: Some(Start::Beginning(true)),
        until_ns,
        ..Default::default()
    }
}

#[tokio::test]
async fn an_ok_end_without_until_is_resumed_from_the_checkpoint() {
    let _watchdog = ringfeed_testkit::arm();
    let server = CuttingServer::default();
    let addr = serve(server.clone()).await;
    let mut follower = Follower::new(&addr, request(0), fast_backoff()).unwrap();
    let mut offsets = Vec::new();
    while offsets.len() < TOTAL as usize {
        let next = tokio::time::timeout(Duration::from_secs(20), follower.next())
            .await
            .expect("the follower keeps delivering")
            .expect("no error");
        let event = next.expect("an OK end without until_ns is not the end");
        offsets.push(event.offset);
    }
    assert_eq!(
        offsets,
        (0..TOTAL).collect::<Vec<_>>(),
        "no skip, no repeat"
    );
    assert_eq!(*server.starts.lock().unwrap(), vec![0, 3, 6]);
}

#[tokio::test]
async fn an_ok_end_with_until_is_the_end() {
    let _watchdog = ringfeed_testkit::arm();
    let server = CuttingServer::default();
    let addr = serve(server.clone()).await;
    // The server here ends the stream after 3 events, as a real one does
    // once until_ns is reached.
    let mut follower = Follower::new(&addr, request(1_002), fast_backoff()).unwrap();
    let mut offsets = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(20), follower.next())
        .await
        .expect("no hang")
        .expect("no error")
    {
        offsets.push(event.offset);
    }
    assert_eq!(offsets, vec![0, 1, 2]);
    assert_eq!(
        server.calls.load(Ordering::SeqCst),
        1,
        "no reconnect after the end"
    );
}
