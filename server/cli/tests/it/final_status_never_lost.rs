//! A stream's final error is never turned into a clean end (docs/design.md
//! 2.10). The sender used to queue the final status behind the
//! stream's responses and drop it if no room came within 1 s: a subscriber
//! that had stopped reading at that moment then saw its stream end with OK
//! once it read on, which the client library took for "until reached", and
//! stopped for good. Here a subscriber stops reading with its queue full, is
//! superseded, and still gets CANCELLED after everything queued before it;
//! for a node stream and for a cluster stream (which dropped the status
//! whenever its queue was full).

use std::time::{Duration, Instant};

use crate::common::*;
use ringfeed_proto::tonic::Code;
use ringfeed_proto::v1;
use ringfeed_proto::v1::subscribe_request::Start;

const WAIT: Duration = Duration::from_secs(20);

/// events_sent of the subscriber with `epoch`, if it is registered.
async fn sent(addr: &str, epoch: u64) -> Option<u64> {
    events_sent(addr, |s| s.client_id == 7 && s.client_epoch == epoch).await
}

async fn connect(
    addr: &str,
) -> ringfeed_proto::RingFeedClient<ringfeed_proto::tonic::transport::Channel> {
    ringfeed_proto::RingFeedClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stopped_reading_still_gets_its_final_error() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dma_engine(dir.path(), 1)).await;
    stalls_then_is_superseded(&server.addr.to_string(), v1::Scope::Node).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_subscriber_that_stopped_reading_still_gets_its_final_error() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    // A cluster of one: a cluster stream needs a node id, not peers.
    let server = crate::serve_binary::Server::start_with(dir.path(), 1, &["--node-id", "1"]);
    stalls_then_is_superseded(&server.addr, v1::Scope::Cluster).await;
    server.stop();
}

/// Appends 10,000 events of ~1 KB to `addr`; a subscriber of `scope` reads
/// one and stops reading until its queue is full; a newer epoch of its
/// client supersedes it; reading on, it must get what was queued and then
/// CANCELLED naming the newer epoch, never a clean end.
async fn stalls_then_is_superseded(addr: &str, scope: v1::Scope) {
    let mut client = connect(addr).await;
    let name = "n".repeat(1000);
    for batch in 0..20 {
        let events = (0..500)
            .map(|i| create("/a", &format!("{name}{batch}-{i}")))
            .collect();
        client.append(request(events, false)).await.unwrap();
    }
    let subscribe = |epoch| v1::SubscribeRequest {
        client_name: "stalled".into(),
        client_id: 7,
        client_epoch: epoch,
        start: Some(Start::Beginning(true)),
        scope: scope as i32,
        ..Default::default()
    };
    let mut old = connect(addr)
        .await
        .subscribe(subscribe(1))
        .await
        .unwrap()
        .into_inner();
    let first = old.message().await.unwrap().expect("a first response");
    let mut received = events_in(&first);
    // Stop reading until the server can queue nothing more for it.
    let stuck_at = until_stuck(addr, |s| s.client_id == 7 && s.client_epoch == 1).await;
    assert!(
        stuck_at < 10_000,
        "the queue filled before the backlog was sent"
    );

    // Superseded while its queue is full; wait until its sender is gone (it
    // used to give up on queueing the status after 1 s, then go).
    let _new = connect(addr)
        .await
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::Now(true)),
            ..subscribe(2)
        })
        .await
        .unwrap();
    let start = Instant::now();
    while sent(addr, 1).await.is_some() {
        assert!(
            start.elapsed() < WAIT,
            "the superseded stream stayed registered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Reading on: every event queued before it, then the error, never a
    // clean end.
    let status = loop {
        match tokio::time::timeout(WAIT, old.message())
            .await
            .expect("the stream stalled before its end")
        {
            Ok(Some(response)) => received += events_in(&response),
            Ok(None) => panic!("the stream ended OK after {received} events"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::Cancelled, "{status:?}");
    assert_eq!(
        received, stuck_at,
        "the events queued before the final error ({stuck_at}) all come before it"
    );
    assert_eq!(
        ringfeed_proto::wire::superseded_by(&status),
        Some(2),
        "the typed supersession detail names the epoch that replaced it: {status:?}"
    );
}

/// The events a response carries.
fn events_in(response: &v1::SubscribeResponse) -> u64 {
    use v1::subscribe_response::Item;
    match &response.item {
        Some(Item::Event(_)) => 1,
        Some(Item::Batch(batch)) => batch.events.len() as u64,
        _ => 0,
    }
}
