//! `AppendStream` keeps its contract when requests arrive faster than they
//! are appended (the server then appends several queued requests as one
//! engine batch): one response per request, in request order, each with one
//! position per event of its own request; every acknowledged event is in the
//! feed exactly once, in request order per shard; and a refused request ends
//! the stream with its error after the requests before it were acknowledged,
//! with nothing of it or of the requests after it appended.

use std::time::Duration;

use crate::common::*;
use ringfeed_proto::tonic::Code;
use ringfeed_proto::v1;
use ringfeed_proto::v1::subscribe_request::Start;

fn numbered(i: usize, events: usize) -> v1::AppendRequest {
    request(
        (0..events)
            .map(|e| create(&format!("/s/d{}", (i + e) % 7), &format!("r{i}e{e}")))
            .collect(),
        i % 5 == 4, // some durable, most memory: a batch is never mixed up
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_get_one_response_each_in_order() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dma_engine(dir.path(), 2)).await;
    let mut client = server.client().await;
    // 600 requests of 1-3 events, all sent before reading any response.
    let requests: Vec<v1::AppendRequest> = (0..600).map(|i| numbered(i, 1 + i % 3)).collect();
    let total: usize = requests.iter().map(|r| r.events.len()).sum();
    let mut responses = client
        .append_stream(tokio_stream::iter(requests.clone()))
        .await
        .unwrap()
        .into_inner();
    let mut positions = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        let response = tokio::time::timeout(Duration::from_secs(20), responses.message())
            .await
            .expect("stalled")
            .unwrap()
            .unwrap_or_else(|| panic!("the stream ended after {i} responses"));
        assert_eq!(response.positions.len(), r.events.len(), "response {i}");
        positions.extend(response.positions);
    }
    assert!(
        responses.message().await.unwrap().is_none(),
        "an extra response"
    );

    // Every acknowledged event is in the feed once, at its acknowledged
    // position, and per shard in request order.
    let mut stream = client
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::Beginning(true)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let got = read_events(&mut stream, total, &mut Vec::new()).await;
    assert_eq!(got.len(), total);
    let sent: Vec<&v1::Event> = requests.iter().flat_map(|r| &r.events).collect();
    for (event, p) in sent.iter().zip(&positions) {
        let found: Vec<_> = got
            .iter()
            .filter(|(_, shard, offset, _)| *shard == p.shard && *offset == p.offset)
            .collect();
        assert_eq!(found.len(), 1, "position {p:?}");
        assert_eq!(&found[0].3, *event, "the event at {p:?}");
        assert_eq!(found[0].0, p.ts_ns);
    }
    for shard in 0..2 {
        let offsets: Vec<u64> = positions
            .iter()
            .filter(|p| p.shard == shard)
            .map(|p| p.offset)
            .collect();
        assert!(
            offsets.windows(2).all(|w| w[1] == w[0] + 1),
            "shard {shard} order"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_ends_the_stream_after_the_ones_before_it() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dma_engine(dir.path(), 2)).await;
    let mut client = server.client().await;
    let bad_at = 150;
    let mut requests: Vec<v1::AppendRequest> = (0..300).map(|i| numbered(i, 2)).collect();
    requests[bad_at].events[1].directory = "relative/path".into();
    let before: usize = requests[..bad_at].iter().map(|r| r.events.len()).sum();
    let mut responses = client
        .append_stream(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let mut acked = 0;
    let status = loop {
        match tokio::time::timeout(Duration::from_secs(20), responses.message())
            .await
            .expect("stalled")
        {
            Ok(Some(r)) => {
                assert_eq!(r.positions.len(), 2);
                acked += 1;
            }
            Ok(None) => panic!("the stream ended without the bad request's error"),
            Err(status) => break status,
        }
    };
    assert_eq!(
        acked, bad_at,
        "every request before the bad one is acknowledged"
    );
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("directory"), "{status:?}");
    // Nothing of the bad request or after it was appended.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(committed(&mut client).await, before as u64);
    server.stop().await;
}
