//! The generated server, serving raw types over a real tonic transport, talks
//! to the generated client: appended events are stored as the producer's bytes
//! (unary and streaming append), and a subscription streaming those bytes
//! verbatim decodes on the client as the original events, in order, once,
//! whether the server's codec encodes a response or is handed its frame.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use ringfeed_proto::tonic::{self, Request, Response, Status, Streaming};
use ringfeed_proto::v1;
use ringfeed_proto::v1::{
    subscribe_response::Item, AppendRequest, AppendResponse, ChunkModeEnd, Durability, Entry,
    Event, EventBatch, EventMessage, Heartbeat, ListSubscribersRequest, ListSubscribersResponse,
    Position, StatusRequest, StatusResponse, SubscribeRequest, SubscribeResponse,
};
use ringfeed_proto::{
    RawAppendRequest, RawEventBatch, RawEventMessage, RawItem, RawSubscribeResponse, RingFeed,
    RingFeedClient, RingFeedServer,
};
use tokio_stream::{Stream, StreamExt};

/// Stored event payloads, in append order; the offset is the index.
#[derive(Clone, Default)]
struct Store {
    events: Arc<Mutex<Vec<Bytes>>>,
}

impl Store {
    fn append(&self, request: RawAppendRequest) -> AppendResponse {
        let mut events = self.events.lock().expect("lock");
        let positions = request
            .events
            .into_iter()
            .map(|payload| {
                let offset = events.len() as u64;
                events.push(payload);
                Position {
                    shard: 0,
                    offset,
                    ts_ns: 1000 + offset as i64,
                }
            })
            .collect();
        AppendResponse {
            positions,
            failure: None,
            duplicates: 0,
        }
    }
}

fn cursor(offset: u64) -> Bytes {
    Bytes::from(offset.to_le_bytes().to_vec())
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl RingFeed for Store {
    async fn append(
        &self,
        request: Request<RawAppendRequest>,
    ) -> Result<Response<AppendResponse>, Status> {
        Ok(Response::new(self.append(request.into_inner())))
    }

    type AppendStreamStream = BoxStream<AppendResponse>;

    // tonic::Status is the size it is; the trait fixes the error type.
    #[allow(clippy::result_large_err)]
    async fn append_stream(
        &self,
        request: Request<Streaming<RawAppendRequest>>,
    ) -> Result<Response<Self::AppendStreamStream>, Status> {
        let store = self.clone();
        let responses = request
            .into_inner()
            .map(move |batch| batch.map(|batch| store.append(batch)));
        Ok(Response::new(Box::pin(responses)))
    }

    type SubscribeStream = BoxStream<RawSubscribeResponse>;

    async fn subscribe(
        &self,
        _request: Request<SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        // First event alone, the rest as one batch, then control items;
        // the batch and the marker as gRPC frames, which the server's codec
        // hands over as they are, each right after a response it encoded.
        let stored = self.events.lock().expect("lock").clone();
        let message = |offset: usize| {
            RawEventMessage::new(
                1000 + offset as i64,
                0,
                offset as u64,
                stored[offset].clone(),
            )
        };
        let last = stored.len() as u64 - 1;
        let items = vec![
            RawSubscribeResponse::new(cursor(1), RawItem::Event(message(0))),
            RawSubscribeResponse::Framed(
                RawSubscribeResponse::new(
                    cursor(last + 1),
                    RawItem::Batch(RawEventBatch {
                        events: (1..stored.len()).map(message).collect(),
                    }),
                )
                .into_frame(()),
            ),
            RawSubscribeResponse::new(
                Bytes::new(),
                RawItem::Heartbeat(Heartbeat {
                    merged_watermark_ns: 1000 + last as i64,
                    ..Default::default()
                }),
            ),
            RawSubscribeResponse::encoded(Bytes::new(), RawItem::ChunkModeEnd(ChunkModeEnd {})),
        ];
        Ok(Response::new(Box::pin(tokio_stream::iter(
            items.into_iter().map(Ok),
        ))))
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

fn event(i: u64) -> Event {
    Event {
        directory: format!("/dir/{i}"),
        old_entry: (i % 2 == 1).then(|| Entry {
            name: format!("old{i}"),
            size: i,
            ..Default::default()
        }),
        new_entry: Some(Entry {
            name: format!("f{i}"),
            size: i * 10,
            mtime_ns: i as i64,
            extended: [("k".to_string(), Bytes::from(vec![i as u8]))]
                .into_iter()
                .collect(),
            ..Default::default()
        }),
        new_parent_path: String::new(),
        signatures: vec![i as i32],
        seaweedfs: None,
    }
}

async fn run(addr: SocketAddr, store: Store) {
    let mut client = RingFeedClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    let events: Vec<Event> = (0..4).map(event).collect();

    let unary = client
        .append(AppendRequest {
            events: events[..2].to_vec(),
            durability: Durability::Memory as i32,
            ..Default::default()
        })
        .await
        .expect("append")
        .into_inner();
    assert_eq!(
        unary.positions.iter().map(|p| p.offset).collect::<Vec<_>>(),
        [0, 1]
    );

    let batches = tokio_stream::iter(events.clone().into_iter().skip(2).map(|e| AppendRequest {
        events: vec![e],
        durability: Durability::Durable as i32,
        ..Default::default()
    }));
    let acks: Vec<AppendResponse> = client
        .append_stream(batches)
        .await
        .expect("append_stream")
        .into_inner()
        .map(|r| r.expect("ack"))
        .collect()
        .await;
    assert_eq!(
        acks.iter()
            .flat_map(|a| a.positions.iter().map(|p| p.offset))
            .collect::<Vec<_>>(),
        [2, 3]
    );

    // The server holds each event exactly as the client encoded it.
    let stored = store.events.lock().expect("lock").clone();
    let encoded: Vec<Bytes> = events
        .iter()
        .map(|e| Bytes::from(e.encode_to_vec()))
        .collect();
    assert_eq!(stored, encoded);

    let mut stream = client
        .subscribe(SubscribeRequest::default())
        .await
        .expect("subscribe")
        .into_inner();
    let mut received = Vec::new();
    while let Some(response) = stream.message().await.expect("stream") {
        received.push(response);
    }
    let delivered = |offset: usize| EventMessage {
        node: 0,
        ts_ns: 1000 + offset as i64,
        shard: 0,
        offset: offset as u64,
        event: Some(events[offset].clone()),
    };
    let expected = vec![
        SubscribeResponse {
            cursor: cursor(1),
            item: Some(Item::Event(delivered(0))),
        },
        SubscribeResponse {
            cursor: cursor(4),
            item: Some(Item::Batch(EventBatch {
                events: (1..4).map(delivered).collect(),
            })),
        },
        SubscribeResponse {
            cursor: Bytes::new(),
            item: Some(Item::Heartbeat(Heartbeat {
                merged_watermark_ns: 1003,
                ..Default::default()
            })),
        },
        SubscribeResponse {
            cursor: Bytes::new(),
            item: Some(Item::ChunkModeEnd(ChunkModeEnd {})),
        },
    ];
    assert_eq!(received, expected);
}

#[tokio::test]
async fn generated_client_decodes_raw_server_stream() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let store = Store::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RingFeedServer::new(store.clone()))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                async {
                    let _ = stopped.await;
                },
            ),
    );

    tokio::time::timeout(Duration::from_secs(20), run(addr, store))
        .await
        .expect("test timed out");

    stop.send(()).expect("server gone");
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("server did not stop")
        .expect("server task")
        .expect("server error");
}
