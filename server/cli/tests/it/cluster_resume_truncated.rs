//! A cluster cursor that covers a peer's events a crash then destroyed
//! (issue 20 with the crash-safe cursors): node 2 takes memory appends it
//! never flushes (flush every 60 s), a cluster read on node 1 delivers them
//! and keeps its cursor; node 2 is SIGKILLed (the events are gone), restarts
//! (a new generation) and takes new appends at the same offsets. Resumed
//! from the old cursor with `resume_truncated`, a cluster stream delivers
//! node 2's new events, every one of them once: the offsets the cursor
//! covered now hold other events, and a position taken by offset alone
//! would skip them. Without `resume_truncated` the resume is refused.

use std::time::Duration;

use crate::cluster_nodes::*;
use ringfeed_proto::tonic;
use ringfeed_proto::v1::{self, subscribe_request::Start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_events_at_offsets_a_crash_freed_are_delivered() {
    let _watchdog = ringfeed_testkit::arm();
    let ports = free_ports(2);
    let dirs = data_dirs(2, "cluster-truncated-");
    let lazy = config_file(dirs[1].path(), "flush_interval_ms = 60000\n");
    let start = |i: usize| {
        let flags: &[&str] = if i == 1 { &["--config", &lazy] } else { &[] };
        start_node(&ports, dirs[i].path(), i, 1, flags)
    };
    let _node1 = start(0);
    let node2 = start(1);
    for addr in &ports {
        wait_all_up(addr).await;
    }
    append(&ports[0], 1, 0, 5, true).await;
    append(&ports[1], 2, 0, 10, false).await;
    // The cursor after all 15 events covers node 2's 10 unflushed ones.
    let cursor = cluster_cursor_after(&ports[0], 15).await;

    node2.kill();
    let node2 = start(1);
    wait_all_up(&ports[0]).await;
    // Node 2 starts again at offset 0 of a new generation: 4 new events.
    append(&ports[1], 2, 100, 4, true).await;

    let resumed = |resume_truncated: bool| v1::SubscribeRequest {
        start: Some(Start::Cursor(cursor.clone().into())),
        scope: v1::Scope::Cluster as i32,
        resume_truncated,
        ..Default::default()
    };
    let rest: Vec<Seen> = read_with_cursors(&ports[0], resumed(true), 4)
        .await
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    assert!(
        rest.iter().all(|e| e.1 == 2),
        "only node 2's new events: {rest:?}"
    );
    let offsets: Vec<u64> = rest.iter().map(|e| e.3).collect();
    assert_eq!(offsets, vec![0, 1, 2, 3], "each new event once, in order");
    // Nothing more.
    let more = tokio::time::timeout(
        Duration::from_millis(500),
        read_with_cursors(&ports[0], resumed(true), 5),
    )
    .await;
    assert!(more.is_err(), "a fifth event after the cursor");

    // Without resume_truncated the cursor is refused (the stream fails).
    let mut stream = client(&ports[0])
        .await
        .subscribe(resumed(false))
        .await
        .unwrap()
        .into_inner();
    let refused = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match stream.message().await {
                Ok(Some(r)) if events_of(r.clone()).is_empty() => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("an answer within 20 s");
    // With the peer's code and reason: as UNAVAILABLE ("following a peer:
    // the server ended the subscription") a client retried it forever.
    let refused = refused.expect_err("the truncated cursor is refused");
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(
        refused.message().starts_with("node 2 (")
            && refused.message().contains("truncated by a crash"),
        "{refused:?}"
    );
    drop(node2);
}

/// The cursor of a cluster read of `addr` from the beginning after `count` events.
async fn cluster_cursor_after(addr: &str, count: usize) -> Vec<u8> {
    let request = v1::SubscribeRequest {
        start: Some(Start::Beginning(true)),
        scope: v1::Scope::Cluster as i32,
        ..Default::default()
    };
    let read = read_with_cursors(addr, request, count).await;
    read.last().expect("events were read").1.clone()
}

/// The status a cluster read of `addr` with `request` ends with (it must end with one).
async fn refusal(addr: &str, request: v1::SubscribeRequest) -> tonic::Status {
    let mut stream = match client(addr).await.subscribe(request).await {
        Ok(stream) => stream.into_inner(),
        Err(status) => return status,
    };
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the stream ended without an error"),
                Err(status) => return status,
            }
        }
    })
    .await
    .expect("an answer within 20 s")
}

/// A cluster cursor whose part for node 2 was made by a data dir node 2 no
/// longer has (wiped and made anew: another feed, whose offsets mean other
/// events) is refused with INVALID_ARGUMENT naming the node, not resumed,
/// and not retried forever as UNAVAILABLE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_cursor_part_of_another_data_dir_is_refused() {
    let _watchdog = ringfeed_testkit::arm();
    let ports = free_ports(2);
    let dirs = data_dirs(2, "cluster-foreign-");
    let _node1 = start_node(&ports, dirs[0].path(), 0, 1, &[]);
    let node2 = start_node(&ports, dirs[1].path(), 1, 1, &[]);
    for addr in &ports {
        wait_all_up(addr).await;
    }
    append(&ports[0], 1, 0, 3, true).await;
    append(&ports[1], 2, 0, 3, true).await;
    let cursor = cluster_cursor_after(&ports[0], 6).await;

    node2.stop();
    let wiped = dirs[1].path();
    std::fs::remove_dir_all(wiped).unwrap();
    let _node2 = start_node(&ports, wiped, 1, 1, &[]);
    wait_all_up(&ports[0]).await;
    append(&ports[1], 2, 100, 3, true).await;

    let refused = refusal(
        &ports[0],
        v1::SubscribeRequest {
            start: Some(Start::Cursor(cursor.into())),
            scope: v1::Scope::Cluster as i32,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(
        refused.message().starts_with("node 2 (")
            && refused.message().contains("made by another data dir"),
        "{refused:?}"
    );
}

/// A peer's event that protobuf decoders read differently (issue 36's
/// poison: an unclosed group inside `new_entry.extended`) is not forwarded:
/// a cluster stream reaching it ends with DATA_LOSS naming the node, the
/// event and the field, as a node refuses such bytes from a producer. (It
/// was forwarded as the peer held it, and every strict reader of the
/// cluster stream failed there on every resume.) Node 2's data dir gets the
/// event from the engine itself, as a node of an older version stored it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_event_strict_decoders_refuse_is_not_forwarded() {
    let _watchdog = ringfeed_testkit::arm();
    let ports = free_ports(2);
    let dirs = data_dirs(2, "cluster-poison-");
    let poison: &[u8] = &[
        0x0a, 0x03, 0x2f, 0x66, 0x7a, 0x1a, 0x11, 0x0a, 0x02, 0x6f, 0x6b, 0x3b, 0x0b, 0x0a, 0x06,
        0x75, 0x73, 0x65, 0x72, 0x2e, 0x6b, 0x12, 0x01, 0x76,
    ];
    let engine = ringfeed_engine::Engine::open(ringfeed_engine::EngineConfig {
        data_dir: dirs[1].path().into(),
        shards: 1,
        ..Default::default()
    })
    .unwrap();
    engine
        .append_blocking(
            vec![ringfeed_engine::NewEvent {
                directory: "/fz".into(),
                old_name: String::new(),
                new_name: "ok".into(),
                new_parent: String::new(),
                signatures: Vec::new(),
                payload: poison.to_vec().into(),
            }],
            ringfeed_engine::Durability::Durable,
        )
        .unwrap();
    engine.shutdown().unwrap();
    let _nodes: Vec<_> = (0..2)
        .map(|i| start_node(&ports, dirs[i].path(), i, 1, &[]))
        .collect();
    for addr in &ports {
        wait_all_up(addr).await;
    }
    append(&ports[0], 1, 0, 3, true).await;
    // In chunk mode too: node 2's chunk holding it is not forwarded (the
    // event is on disk there: a stored chunk).
    for chunk_mode in [false, true] {
        let mut stream = client(&ports[0])
            .await
            .subscribe(v1::SubscribeRequest {
                start: Some(v1::subscribe_request::Start::Beginning(true)),
                scope: v1::Scope::Cluster as i32,
                chunk_mode,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let status = loop {
            match tokio::time::timeout(Duration::from_secs(20), stream.message())
                .await
                .expect("the cluster stream neither failed nor moved")
            {
                Ok(Some(response)) => {
                    if let Some(v1::subscribe_response::Item::Chunk(c)) = &response.item {
                        assert_ne!(c.node, 2, "node 2's poison was forwarded in a chunk");
                    }
                    assert!(
                        events_of(response).iter().all(|e| e.1 != 2),
                        "node 2's poison was forwarded"
                    )
                }
                Ok(None) => panic!("the cluster stream ended OK past the poison"),
                Err(status) => break status,
            }
        };
        assert_eq!(status.code(), tonic::Code::DataLoss, "{status:?}");
        for part in [
            "node 2",
            "shard 0 offset 0",
            "new_entry.extended",
            "wire type 3",
        ] {
            assert!(
                status.message().contains(part),
                "chunk mode {chunk_mode}: {part:?} in {status:?}"
            );
        }
    }
}
