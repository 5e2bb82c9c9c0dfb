//! A stream's final error is never turned into a clean end (DESIGN.md
//! invariant 10). The sender used to queue the final status behind the
//! stream's responses and drop it if no room came within 1 s: a subscriber
//! that had stopped reading at that moment then saw its stream end with OK
//! once it read on, which the client library took for "until reached", and
//! stopped for good. Here a subscriber stops reading with its queue full, is
//! superseded, and still gets CANCELLED after everything queued before it.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ringfeed_proto::tonic::Code;
use ringfeed_proto::v1;
use ringfeed_proto::v1::subscribe_request::Start;

const WAIT: Duration = Duration::from_secs(20);

/// events_sent of the subscriber with `epoch`, if it is registered.
async fn sent(server: &TestServer, epoch: u64) -> Option<u64> {
    let list = server
        .client()
        .await
        .list_subscribers(v1::ListSubscribersRequest {})
        .await
        .unwrap()
        .into_inner();
    list.subscribers
        .iter()
        .find(|s| s.client_id == 7 && s.client_epoch == epoch)
        .map(|s| s.events_sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stopped_reading_still_gets_its_final_error() {
    let _watchdog = ringfeed_watchdog::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dma_engine(dir.path(), 1)).await;
    let mut client = server.client().await;
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
        ..Default::default()
    };
    let mut old = server
        .client()
        .await
        .subscribe(subscribe(1))
        .await
        .unwrap()
        .into_inner();
    assert!(old.message().await.unwrap().is_some());
    // Stop reading until the server can queue nothing more for it.
    let start = Instant::now();
    let mut last = None;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = sent(&server, 1).await;
        if now.is_some() && now == last {
            break;
        }
        assert!(
            start.elapsed() < WAIT,
            "the old stream never filled its queue"
        );
        last = now;
    }
    assert!(
        last.unwrap() < 10_000,
        "the queue filled before the backlog was sent"
    );

    // Superseded while its queue is full; wait until its sender is gone (it
    // used to give up on queueing the status after 1 s, then go).
    let _new = server
        .client()
        .await
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::Now(true)),
            ..subscribe(2)
        })
        .await
        .unwrap();
    let start = Instant::now();
    while sent(&server, 1).await.is_some() {
        assert!(
            start.elapsed() < WAIT,
            "the superseded stream stayed registered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Reading on: what was queued, then the error, never a clean end.
    let mut events = 1;
    let end = loop {
        match tokio::time::timeout(WAIT, old.message())
            .await
            .expect("stalled")
        {
            Ok(Some(_)) => events += 1,
            Ok(None) => break None,
            Err(status) => break Some(status),
        }
    };
    let status = end.unwrap_or_else(|| panic!("the stream ended OK after {events} event(s)"));
    assert_eq!(status.code(), Code::Cancelled, "{status:?}");
    assert_eq!(
        ringfeed_proto::wire::superseded_by(&status),
        Some(2),
        "the typed supersession detail names the epoch that replaced it: {status:?}"
    );
    assert!(events < 10_000, "{events} events before the end");
    server.stop().await;
}
