//! Subscribers at scale, through the protocol: client identities and epochs,
//! chunk mode against event mode, adaptive batching and heartbeats, a stalled
//! subscriber, admission control for backlog readers, and the response
//! budget that ring readers share too.

use std::time::{Duration, Instant};

use crate::common::{assert_given_back, create, dma_engine, final_status, request, TestServer};
use ringfeed_engine::Cursor;
use ringfeed_proto::prost::Message;
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::tonic::{Code, Streaming};
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::v1::subscribe_response::Item;
use ringfeed_proto::{v1, RingFeedClient};
use ringfeed_server::client::{Backoff, FollowedEvent, Follower};
use ringfeed_server::SubscriberLimits;

const WAIT: Duration = Duration::from_secs(60);

/// Appends `count` events of about `size` bytes in batches of `batch`;
/// returns the last event's stamp.
async fn append(
    client: &mut RingFeedClient<Channel>,
    count: usize,
    size: usize,
    batch: usize,
) -> i64 {
    let mut last = 0;
    let mut i = 0;
    while i < count {
        let n = batch.min(count - i);
        let events = (i..i + n)
            .map(|k| {
                let mut e = create(&format!("/d{}", k % 7), &format!("f{k}"));
                e.new_entry.as_mut().unwrap().attributes = vec![b'x'; size].into();
                e
            })
            .collect();
        let acks = client
            .append(request(events, false))
            .await
            .unwrap()
            .into_inner();
        last = acks
            .positions
            .iter()
            .map(|p| p.ts_ns)
            .max()
            .unwrap()
            .max(last);
        i += n;
    }
    last
}

/// A named subscriber's batched request from the beginning to `until`.
fn from_beginning_until(name: &str, until: i64) -> v1::SubscribeRequest {
    v1::SubscribeRequest {
        client_name: name.into(),
        start: Some(Start::Beginning(true)),
        until_ns: until,
        batching: true,
        ..Default::default()
    }
}

/// Follows `request` to its end (it must have `until_ns`).
async fn follow_all(
    addr: impl AsRef<str>,
    request: v1::SubscribeRequest,
) -> (Vec<FollowedEvent>, Follower) {
    crate::common::follow(addr.as_ref(), request, usize::MAX, WAIT).await
}

async fn next_item(
    stream: &mut Streaming<v1::SubscribeResponse>,
) -> Result<Option<v1::SubscribeResponse>, ringfeed_proto::tonic::Status> {
    tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("stream stalled")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_epoch_supersedes_at_once_an_equal_or_lower_one_is_refused() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dma_engine(dir.path(), 2)).await;
    let named = |epoch| v1::SubscribeRequest {
        client_name: "mount-a".into(),
        client_id: 7,
        client_epoch: epoch,
        start: Some(Start::Now(true)),
        ..Default::default()
    };
    let mut first = server
        .client()
        .await
        .subscribe(named(5))
        .await
        .unwrap()
        .into_inner();
    // Two anonymous clients with the same name are never superseded.
    let anonymous = v1::SubscribeRequest {
        client_name: "mount-a".into(),
        start: Some(Start::Now(true)),
        ..Default::default()
    };
    let mut anon1 = server
        .client()
        .await
        .subscribe(anonymous.clone())
        .await
        .unwrap()
        .into_inner();
    let mut anon2 = server
        .client()
        .await
        .subscribe(anonymous)
        .await
        .unwrap()
        .into_inner();

    for epoch in [5, 4] {
        let refused = server
            .client()
            .await
            .subscribe(named(epoch))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::AlreadyExists, "{refused:?}");
        assert!(
            refused.message().contains("epoch 5"),
            "{}",
            refused.message()
        );
    }

    let mut client = server.client().await;
    let started = Instant::now();
    let mut second = client.subscribe(named(6)).await.unwrap().into_inner();
    let ended = next_item(&mut first).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(ended.code(), Code::Cancelled, "{ended:?}");
    assert!(
        ended.message().contains("client_epoch 6"),
        "{}",
        ended.message()
    );
    // How long it took is a figure, not a check: a higher epoch ends the old
    // stream when it arrives, with no timer in between.
    eprintln!("superseding took {took:?}");

    // The new stream and both anonymous ones still deliver.
    let mut producer = server.client().await;
    append(&mut producer, 1, 10, 1).await;
    for stream in [&mut second, &mut anon1, &mut anon2] {
        let item = next_item(stream).await.unwrap().unwrap().item;
        assert!(matches!(item, Some(Item::Event(_))), "{item:?}");
    }
    let listed = client
        .list_subscribers(v1::ListSubscribersRequest {})
        .await
        .unwrap()
        .into_inner()
        .subscribers;
    let mut epochs: Vec<_> = listed
        .iter()
        .map(|s| (s.client_id, s.client_epoch))
        .collect();
    epochs.sort();
    assert_eq!(epochs, vec![(0, 0), (0, 0), (7, 6)]);
    drop((second, anon1, anon2));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_off_before_its_first_event_misses_nothing() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dma_engine(dir.path(), 2)).await;
    let request = v1::SubscribeRequest {
        start: Some(Start::Now(true)),
        ..Default::default()
    };
    let mut follower =
        Follower::new(&server.addr.to_string(), request, Backoff::default()).unwrap();
    // Connected and waiting at "now"; nothing delivered yet.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), follower.next())
            .await
            .is_err()
    );
    assert!(
        follower.cursor().is_some(),
        "no start cursor from the server"
    );
    // The server goes away; events are appended while the follower is cut
    // off. (They used to be appended while the restart was still stopping the
    // server: once claims were answered at once instead of on a 10 ms tick,
    // the old stream sometimes delivered them before it ended.)
    let server = {
        let (addr, engine) = (server.addr, server.engine.clone());
        server.stop().await;
        let events = (0..3)
            .map(|i| ringfeed_engine::NewEvent {
                directory: "/gap".into(),
                new_name: format!("f{i}"),
                payload: create("/gap", &format!("f{i}")).encode_to_vec().into(),
                ..Default::default()
            })
            .collect();
        engine
            .append(events, ringfeed_engine::Durability::Memory)
            .await
            .unwrap();
        TestServer::resume(addr, engine).await
    };
    let mut names = Vec::new();
    for _ in 0..3 {
        let e = tokio::time::timeout(WAIT, follower.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        names.push(e.decode().unwrap().new_entry.unwrap().name);
    }
    assert_eq!(names, ["f0", "f1", "f2"]);
    assert!(follower.stats.reconnects >= 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_mode_delivers_what_event_mode_delivers() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    // 4 MiB of ring against ~12 MB of events: the start is on disk, the end
    // in sealed windows and the open one.
    let server = TestServer::start(dma_engine(dir.path(), 2)).await;
    let mut client = server.client().await;
    let until = append(&mut client, 24_000, 450, 500).await;
    let addr = server.addr.to_string();
    crate::common::assert_starts_on_disk(&mut client).await;

    let starts = [
        Start::Beginning(true),
        // Mid-chunk on both shards: the first chunk of each goes out as a suffix.
        Start::Cursor(Cursor::new(vec![1_234, 4_321]).to_bytes().into()),
    ];
    let filters: [(&str, Vec<String>); 3] = [
        ("", vec![]),
        ("/d3", vec![]),
        ("", vec!["/d1".to_string(), "/d5".to_string()]),
    ];
    for start in starts {
        for (prefix, excludes) in &filters {
            let base = v1::SubscribeRequest {
                path_prefix: prefix.to_string(),
                exclude_prefixes: excludes.clone(),
                start: Some(start.clone()),
                until_ns: until,
                batching: true,
                ..Default::default()
            };
            let (events, _) = follow_all(&addr, base.clone()).await;
            let chunked = v1::SubscribeRequest {
                chunk_mode: true,
                ..base
            };
            let (chunks, follower) = follow_all(&addr, chunked).await;
            assert!(
                follower.stats.chunks > 0,
                "no chunks for {start:?} {prefix:?}"
            );
            assert!(!events.is_empty());
            assert_eq!(
                events.len(),
                chunks.len(),
                "{start:?} {prefix:?} {excludes:?}"
            );
            assert!(
                crate::common::per_shard(&events) == crate::common::per_shard(&chunks),
                "chunk mode differs from event mode for {start:?} {prefix:?} {excludes:?}"
            );
        }
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_when_behind_single_events_when_live_heartbeats_on_their_own() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dma_engine(dir.path(), 2)).await;
    let mut producer = server.client().await;
    append(&mut producer, 5_000, 100, 1_000).await;
    let mut stream = server
        .client()
        .await
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::Beginning(true)),
            batching: true,
            heartbeats: true,
            heartbeat_interval_ms: 20,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let (mut events, mut batches) = (0, 0);
    while events < 5_000 {
        match next_item(&mut stream).await.unwrap().unwrap().item {
            Some(Item::Event(_)) => events += 1,
            Some(Item::Batch(b)) => {
                batches += 1;
                events += b.events.len();
            }
            _ => {}
        }
    }
    assert_eq!(events, 5_000);
    assert!(batches > 0, "a subscriber 5000 events behind got no batch");

    let mut heartbeats = 0;
    for _ in 0..20 {
        append(&mut producer, 1, 100, 1).await;
        loop {
            match next_item(&mut stream).await.unwrap().unwrap().item {
                Some(Item::Event(_)) => break,
                Some(Item::Heartbeat(_)) => heartbeats += 1,
                other => panic!("a live event came as {other:?}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(heartbeats > 0, "no heartbeats on a quiet live stream");
    drop(stream);
    server.stop().await;
}

/// The offsets a stream's ListSubscribers entry says it has read, summed.
async fn position(client: &mut RingFeedClient<Channel>, name: &str) -> Option<(u64, String)> {
    let listed = client
        .list_subscribers(v1::ListSubscribersRequest {})
        .await
        .unwrap()
        .into_inner()
        .subscribers;
    listed.into_iter().find(|s| s.client_name == name).map(|s| {
        let read = if s.cursor.is_empty() {
            0
        } else {
            Cursor::from_bytes(&s.cursor)
                .unwrap()
                .offsets()
                .iter()
                .sum()
        };
        (read, s.mode)
    })
}

/// A subscriber that never reads holds a bounded queue, and a reader of
/// everything finishes while it stays open and unread: it waits on no one.
/// (How long the reader took is printed, a figure, not a check.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_subscriber_holds_a_bounded_queue_and_blocks_no_one() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dma_engine(dir.path(), 2)).await;
    let mut producer = server.client().await;
    let until = append(&mut producer, 40_000, 1_000, 500).await;
    // Opened and never read.
    let stalled = server
        .client()
        .await
        .subscribe(v1::SubscribeRequest {
            client_name: "stalled".into(),
            start: Some(Start::Beginning(true)),
            batching: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let started = Instant::now();
    let (events, _) = follow_all(
        &server.addr.to_string(),
        v1::SubscribeRequest {
            start: Some(Start::Beginning(true)),
            until_ns: until,
            batching: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(events.len(), 40_000);
    eprintln!("the reading subscriber took {:?}", started.elapsed());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (read, mode) = position(&mut producer, "stalled").await.expect("listed");
    // Queue (8 x 64 KiB) plus what HTTP/2 buffers (a few MiB) is at most
    // about 5,000 one-KiB events; reading ahead without bound would be 40,000.
    assert!(
        read <= 10_000,
        "a stalled subscriber was read {read} events ahead ({mode})"
    );
    drop(stalled);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlog_readers_wait_for_admission_and_cancelling_releases_places() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let limits = SubscriberLimits {
        backlog_readers: 1,
        response_budget_bytes: 64 << 10,
        batch_max_bytes: 16 << 10,
        ..SubscriberLimits::default()
    };
    let server = TestServer::start_with(dma_engine(dir.path(), 2), limits).await;
    let mut producer = server.client().await;
    let until = append(&mut producer, 16_000, 1_000, 500).await;
    let from_beginning = |name: &str| from_beginning_until(name, until);
    // `holder` takes the only place and stalls in the backlog.
    let holder = server
        .client()
        .await
        .subscribe(from_beginning("holder"))
        .await
        .unwrap()
        .into_inner();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let addr = server.addr.to_string();
    let waiter = tokio::spawn(follow_all(addr, from_beginning("waiter")));
    let quitter = server
        .client()
        .await
        .subscribe(from_beginning("quitter"))
        .await
        .unwrap()
        .into_inner();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (read, mode) = position(&mut producer, "waiter").await.expect("listed");
    assert_eq!((read, mode.as_str()), (0, "waiting for admission"));
    assert_eq!(
        position(&mut producer, "quitter").await.unwrap().1,
        "waiting for admission"
    );

    drop(quitter); // cancelled while waiting: gone at once
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(position(&mut producer, "quitter").await.is_none());
    assert_eq!(position(&mut producer, "waiter").await.unwrap().0, 0);

    drop(holder); // releases its place: the waiter reads everything
    let (events, _) = tokio::time::timeout(WAIT, waiter).await.unwrap().unwrap();
    assert_eq!(events.len(), 16_000);
    let mut seen: Vec<_> = events.iter().map(|e| (e.shard, e.offset)).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 16_000, "duplicates");
    server.stop().await;
}

/// Ring readers' responses hold the response budget too (issue 19), so a
/// client that stops reading holds budget; past `stall_timeout` it gives its
/// place back: its queued responses are dropped, its stream ends UNAVAILABLE
/// after what its transport already holds, and others proceed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_ring_reader_holds_budget_until_its_stall_timeout_then_gives_it_back() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let stall_timeout = Duration::from_secs(3);
    let limits = SubscriberLimits {
        response_budget_bytes: 32 << 10,
        batch_max_bytes: 8 << 10,
        send_buffer_bytes: 8 << 10,
        stall_timeout,
        ..SubscriberLimits::default()
    };
    let server = TestServer::start_with(dma_engine(dir.path(), 2), limits).await;
    let mut producer = server.client().await;
    // About 1 MB: well inside the ring, so every reader here is a ring reader.
    let until = append(&mut producer, 4_000, 200, 500).await;
    let from_beginning = move |name: &str| from_beginning_until(name, until);
    // A client that never reads, with an 8 KiB stream window: its transport
    // fills at once and its queued responses keep the whole budget.
    let channel =
        ringfeed_proto::tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
            .unwrap()
            .initial_stream_window_size(Some(8 << 10))
            .connect()
            .await
            .unwrap();
    // Nothing was read for it before this moment (the last status that said
    // so was asked after it).
    let mut nothing_read_at = Instant::now();
    let mut stalled = RingFeedClient::new(channel)
        .subscribe(from_beginning("stalled"))
        .await
        .unwrap()
        .into_inner();
    let deadline = Instant::now() + WAIT;
    loop {
        let asked = Instant::now();
        if position(&mut producer, "stalled")
            .await
            .is_some_and(|(read, _)| read > 0)
        {
            break;
        }
        nothing_read_at = asked;
        assert!(
            Instant::now() < deadline,
            "the stalled client never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reader = tokio::spawn({
        let addr = server.addr.to_string();
        async move {
            let followed = follow_all(addr, from_beginning("reader")).await;
            (followed, Instant::now())
        }
    });
    let ((events, _), done) = reader.await.unwrap();
    // The budget is given back `stall_timeout` after the stalled client's
    // transport last took a response, which came after its first read, so
    // after `nothing_read_at`: the reader cannot have finished before. (A
    // bound a slow machine only makes easier to meet; tokio's timers never
    // fire early. Before ring readers counted against the budget, the reader
    // finished in a few ms.)
    assert!(
        done >= nothing_read_at + stall_timeout,
        "the reader finished {:?} after the stalled client's first read, before its stall \
         timeout of {stall_timeout:?} gave the budget back",
        done - nothing_read_at
    );
    assert_eq!(
        events.len(),
        4_000,
        "the reader got everything once the stalled client gave up"
    );
    // The stalled client reads what its transport held, then UNAVAILABLE:
    // its place was given back, and its cursor resumes it exactly.
    assert_given_back(&final_status(&mut stalled).await.1);
    server.stop().await;
}
