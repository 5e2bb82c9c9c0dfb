//! Through the generated client against a real server on 127.0.0.1: appends
//! with both durabilities; subscriptions from the beginning, since_ns, a
//! cursor and now; backlog then live exactly once; until_ns ends the stream;
//! status follows appends and flushes; events come back as the producer's
//! `Event`s, byte for byte.

use crate::common::*;
use ringfeed_proto::v1;
use ringfeed_proto::v1::subscribe_request::Start;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_then_subscribe_every_way() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let server = TestServer::start(dma_engine(dir.path(), 2)).await;
    let mut client = server.client().await;

    let mut appended = Vec::new();
    for round in 0..40u64 {
        let events: Vec<v1::Event> = (0..25)
            .map(|i| {
                let mut e = create(&format!("/g{}", (round + i) % 6), &format!("f{round}-{i}"));
                e.signatures = vec![round as i32];
                e.new_entry
                    .as_mut()
                    .unwrap()
                    .extended
                    .insert("k".into(), vec![1, 2, 3].into());
                e
            })
            .collect();
        let response = client
            .append(request(events.clone(), round % 2 == 0))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(response.positions.len(), events.len());
        for (p, e) in response.positions.into_iter().zip(events) {
            appended.push((p.ts_ns, p.shard, p.offset, e));
        }
    }
    appended.sort_by_key(|a| (a.0, a.1, a.2));
    assert_eq!(committed(&mut client).await, appended.len() as u64);

    let subscribe = |start: Start, until_ns: i64| v1::SubscribeRequest {
        start: Some(start),
        until_ns,
        batching: true,
        ..Default::default()
    };
    // From the beginning, bounded: the whole stream, then the end.
    let last_ts = appended.last().unwrap().0;
    let mut stream = client
        .subscribe(subscribe(Start::Beginning(true), last_ts))
        .await
        .unwrap()
        .into_inner();
    let mut cursor = Vec::new();
    let got = read_events(&mut stream, usize::MAX, &mut cursor).await;
    assert_eq!(got, appended, "from the beginning until the last stamp");

    // since_ns at an event's own stamp starts at that event.
    let k = appended.len() / 3;
    let mut stream = client
        .subscribe(subscribe(Start::SinceNs(appended[k].0), last_ts))
        .await
        .unwrap()
        .into_inner();
    let got = read_events(&mut stream, usize::MAX, &mut Vec::new()).await;
    assert_eq!(got, appended[k..], "since_ns");

    // Cut after 100 events; the cursor resumes exactly after them.
    let mut stream = client
        .subscribe(subscribe(Start::Beginning(true), 0))
        .await
        .unwrap()
        .into_inner();
    let mut cursor = Vec::new();
    let mut head = Vec::new();
    while head.len() < 100 {
        let more = read_events(&mut stream, 1, &mut cursor).await;
        head.extend(more);
    }
    drop(stream);
    let mut stream = client
        .subscribe(subscribe(Start::Cursor(cursor.clone().into()), last_ts))
        .await
        .unwrap()
        .into_inner();
    let tail = read_events(&mut stream, usize::MAX, &mut Vec::new()).await;
    head.extend(tail);
    assert_eq!(head, appended, "cursor resume is exact");

    // Backlog then live: a subscriber from the cursor of the end, and one from now.
    let end = cursor_at_end(&mut client).await;
    let mut from_end = client
        .subscribe(subscribe(Start::Cursor(end), 0))
        .await
        .unwrap()
        .into_inner();
    let mut from_now = client
        .subscribe(subscribe(Start::Now(true), 0))
        .await
        .unwrap()
        .into_inner();
    // No wait needed before the live appends: the server takes "now" (the
    // shards' next offsets) before it answers the call, and the call above
    // returned with that answer.
    let mut live = Vec::new();
    for i in 0..30 {
        let e = create("/live", &format!("l{i}"));
        let p = client
            .append(request(vec![e.clone()], i % 2 == 1))
            .await
            .unwrap()
            .into_inner();
        live.push((
            p.positions[0].ts_ns,
            p.positions[0].shard,
            p.positions[0].offset,
            e,
        ));
    }
    live.sort_by_key(|a| (a.0, a.1, a.2));
    assert_eq!(
        read_events(&mut from_end, live.len(), &mut Vec::new()).await,
        live
    );
    assert_eq!(
        read_events(&mut from_now, live.len(), &mut Vec::new()).await,
        live
    );

    // Status follows flushes: durable appends are flushed before they are acknowledged.
    let status = client
        .status(v1::StatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    let flushed: u64 = status.shards.iter().map(|s| s.flushed_next).sum();
    let committed: u64 = status.shards.iter().map(|s| s.committed_next).sum();
    assert_eq!(committed, (appended.len() + live.len()) as u64);
    assert!(
        flushed >= committed - 1,
        "the last append was durable: {flushed} of {committed}"
    );
    // Two live streams stay open (a dropped one leaves the count shortly after).
    let mut subscribers = status.subscribers;
    for _ in 0..100 {
        if subscribers == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        subscribers = client
            .status(v1::StatusRequest::default())
            .await
            .unwrap()
            .into_inner()
            .subscribers;
    }
    assert_eq!(subscribers, 2, "two live streams are open");
    server.stop().await;
}

/// A cursor at the current end of every shard (from a "now" subscription's first heartbeat).
async fn cursor_at_end(
    client: &mut ringfeed_proto::RingFeedClient<ringfeed_proto::tonic::transport::Channel>,
) -> ringfeed_proto::bytes::Bytes {
    let mut stream = client
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::Now(true)),
            heartbeats: true,
            heartbeat_interval_ms: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    loop {
        let r = stream.message().await.unwrap().unwrap();
        if !r.cursor.is_empty() {
            return r.cursor;
        }
    }
}
