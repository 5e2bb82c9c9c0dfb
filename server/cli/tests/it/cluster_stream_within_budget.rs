//! A cluster stream's merge counts against the response budget (issue 20):
//! with a budget far smaller than what piles up while a frozen peer holds
//! the merge, the stream stops pulling at the budget, goes on after
//! `peer_hold`, and still delivers every event exactly once, each
//! `(node, shard)` in order. (What this checks is that the budget never
//! stalls or loses anything; that memory stays under it is the budget's
//! accounting, not measured here.)

use std::time::{Duration, Instant};

use crate::cluster_nodes::*;
use crate::common::{assert_given_back, events_sent, final_status, until_stuck};
use crate::serve_binary::Server;
use ringfeed_proto::tonic::transport::Endpoint;
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::{v1, RingFeedClient};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_smaller_than_a_held_backlog_never_stalls_or_loses() {
    let _watchdog = ringfeed_testkit::arm();
    let ports = free_ports(2);
    let dirs = data_dirs(2, "cluster-budget-");
    // 16 KiB: about 130 queued events of this test.
    let config = config_file(
        dirs[0].path(),
        "peer_hold_ms = 1000\nresponse_budget_bytes = 16384\n",
    );
    let servers: Vec<Server> = (0..2)
        .map(|i| start_node(&ports, dirs[i].path(), i, 2, &["--config", &config]))
        .collect();
    for addr in &ports {
        wait_all_up(addr).await;
    }
    let (seen, reader) = follow_cluster(&ports[0]).await;
    append(&ports[1], 2, 0, 10, true).await;
    until(&seen, 10, Duration::from_secs(10), "node 2 first").await;

    servers[1].pause();
    // Far more than the budget covers, appended while node 2 holds the merge.
    for batch in 0..10 {
        append(&ports[0], 1, batch * 300, 300, true).await;
    }
    until(&seen, 3010, Duration::from_secs(20), "node 2 frozen").await;
    servers[1].resume();
    append(&ports[1], 2, 10, 10, true).await;
    append(&ports[0], 1, 3000, 10, true).await;
    until(&seen, 3030, Duration::from_secs(20), "after the thaw").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3030, "every event once, nothing more");
    assert_eq!(assert_exact(&seen, &[1, 2], 2), vec![3010, 20]);
    reader.abort();
    for server in servers {
        server.stop();
    }
}

/// A cluster subscriber that stops reading holds response budget (its
/// merge's and its queued responses'); past `stall_timeout` it gives it back
/// as a node stream does: its queue is dropped, its stream ends UNAVAILABLE
/// after what its transport already holds, and a reader waiting for budget
/// goes on. (A stalled cluster stream used to keep its budget for as long
/// as its connection lived, and every other reader waited with it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_cluster_subscriber_gives_its_budget_back() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let stall_timeout = Duration::from_secs(3);
    let config = config_file(
        dir.path(),
        "response_budget_bytes = 16384\nsubscriber_send_buffer_bytes = 8192\n\
         stall_timeout_secs = 3\n",
    );
    let data = dir.path().join("data");
    // A cluster of one (a cluster stream needs a node id, not peers), with
    // one shard: the merge never waits on a source it has events of, so it
    // pulls only what the budget covers.
    let server = Server::start_with(&data, 1, &["--node-id", "1", "--config", &config]);
    // ~0.5 MB counted against the budget: far more than it covers.
    const EVENTS: usize = 4_000;
    append(&server.addr, 1, 0, EVENTS, true).await;
    // A client that never reads, with an 8 KiB stream window: its transport
    // fills at once, then its queue (an event a response), then its merge
    // up to the budget. Once its queue is full it holds at least the queue's
    // 8 units and the one its sender holds for the next: more than the half
    // of this 16-unit budget a reader asks for, wherever the rest went.
    // (With a budget of 32 units, what it held beyond that depended on
    // when its connection wrote its frames: frames written after the
    // stream stopped gave units back that it never took again, and in about
    // one run in a hundred the reader below went on. Before each event in
    // the merge counted a whole unit, as its response does, it was one run
    // in six: the merge's cover ran out after a ninth of its events, and
    // the rest went out holding no budget.)
    let subscribed = Instant::now();
    let channel = Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .initial_stream_window_size(Some(8 << 10))
        .connect()
        .await
        .unwrap();
    let mut stalled = RingFeedClient::new(channel)
        .subscribe(v1::SubscribeRequest {
            client_name: "stalled".into(),
            start: Some(Start::Beginning(true)),
            scope: v1::Scope::Cluster as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let stuck_at = until_stuck(&server.addr, |s| s.client_name == "stalled").await;
    let stuck_after = subscribed.elapsed();
    // A node-scope reader of everything: each response waits for budget.
    let (seen, done) = read_all_within_budget(&server.addr, EVENTS).await;
    // The budget is given back `stall_timeout` after the stalled client's
    // transport last took a response, which is after `subscribed`: the
    // reader cannot have finished before. (A bound a slow machine only makes
    // easier to meet; tokio's timers never fire early. Before ring readers
    // counted against the budget, the reader finished in a few ms.)
    assert!(
        done >= subscribed + stall_timeout,
        "the reader finished {:?} after the stalled cluster client subscribed, before its \
         stall timeout of {stall_timeout:?} gave the budget back (stuck after {stuck_after:?} \
         at {stuck_at} events sent; {:?} sent now)",
        done - subscribed,
        events_sent(&server.addr, |s| s.client_name == "stalled").await
    );
    assert_eq!(seen, EVENTS);
    // The stalled client reads what its transport held, then UNAVAILABLE:
    // its place was given back; its cursor resumes it exactly.
    assert_given_back(&final_status(&mut stalled).await.1);
    server.stop();
}

/// A cluster stream's batches stop at `batch_max_bytes` (64 KiB by
/// default), as a node stream's do: what a response holds of the budget
/// until the transport takes the next. (They stopped only at 512 events:
/// 512 KiB of these.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_batch_stops_at_batch_max_bytes() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), 1, &["--node-id", "1"]);
    const EVENTS: usize = 2_000;
    let events: Vec<v1::Event> = (0..EVENTS)
        .map(|i| v1::Event {
            directory: "/big".into(),
            new_entry: Some(v1::Entry {
                name: format!("{i:04}{}", "x".repeat(1000)),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    for chunk in events.chunks(500) {
        client(&server.addr)
            .await
            .append(v1::AppendRequest {
                events: chunk.to_vec(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let mut stream = client(&server.addr)
        .await
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::Beginning(true)),
            scope: v1::Scope::Cluster as i32,
            batching: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let (mut seen, mut largest) = (0, 0);
    while seen < EVENTS {
        let response = tokio::time::timeout(Duration::from_secs(20), stream.message())
            .await
            .expect("stalled")
            .unwrap()
            .expect("a response");
        largest = largest.max(ringfeed_proto::prost::Message::encoded_len(&response));
        seen += events_of(response).len();
    }
    assert_eq!(seen, EVENTS);
    // Event bytes stop at 64 KiB (one event may cross it); each event adds
    // a few bytes of framing, the response its cursor.
    assert!(largest < (64 << 10) + 4096, "a response of {largest} bytes");
    assert!(largest > 32 << 10, "no batching at all: {largest} bytes");
    server.stop();
}

/// A cluster stream whose own responses hold the whole budget goes on once
/// the transport has written them, with no new event to wake it: it listens
/// for budget coming back. (It waited for news of events instead: a cluster
/// subscriber catching up on a quiet feed stood still after its first
/// budget's worth until the next append.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_stream_goes_on_when_its_own_responses_give_budget_back() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    // 4 KiB: four one-event responses hold all of it.
    let config = config_file(dir.path(), "response_budget_bytes = 4096\n");
    let server = Server::start_with(
        &dir.path().join("data"),
        1,
        &["--node-id", "1", "--config", &config],
    );
    const EVENTS: usize = 2_000;
    append(&server.addr, 1, 0, EVENTS, true).await;
    let mut stream = cluster_stream(&server.addr).await;
    let mut seen = 0;
    while seen < EVENTS {
        let response = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .unwrap_or_else(|_| panic!("the stream stood still after {seen} events"))
            .unwrap()
            .expect("a response");
        seen += events_of(response).len();
    }
    assert_eq!(seen, EVENTS);
    server.stop();
}
