//! Reads from the object store (issue 40): a real server with small
//! segments, local retention keeping two a shard, and `--object-store
//! file:///DIR`, so most of the feed is only in the bucket.
//!
//! - From the beginning, every event arrives exactly once, offsets dense
//!   from 0 in every shard, the first ones read from the bucket; the same
//!   in chunk mode, with a filter, from a time and from a cursor taken
//!   inside the bucket's part.
//! - A segment object with a flipped byte is refused (fetched again, then
//!   the stream ends with DATA_LOSS), never delivered.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::cluster_nodes::{client, config_file};
use crate::common::per_shard;
use crate::object_store_upload::{
    fill, manifest, manifest_of, serve, shard_dir, until_uploaded, until_uploaded_of, SHARDS, SMALL,
};
use ringfeed_engine::segment::sealed::sealed_files;
use ringfeed_proto::v1::{self, subscribe_request::Start};
use ringfeed_server::client::FollowedEvent;

const ROUNDS: usize = 16;

/// Waits until local retention removed each shard's first segment (the
/// store holds it).
async fn until_first_segments_removed(data: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let oldest: Vec<u64> = (0..SHARDS)
            .map(|s| {
                sealed_files(&shard_dir(data, s))
                    .unwrap()
                    .first()
                    .map_or(0, |f| f.first_offset)
            })
            .collect();
        if oldest.iter().all(|&o| o > 0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "retention removed no first segment within {within:?}: {oldest:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A server (small segments, local retention keeping two a shard, `more`
/// config) over a fresh data dir with a fresh `file://` store, filled with
/// `rounds` × 500 events until the store holds every sealed segment and
/// local retention removed each shard's first; the time after the appends.
struct Filled {
    data: tempfile::TempDir,
    store: tempfile::TempDir,
    server: crate::serve_binary::Server,
    until: i64,
}

async fn filled(rounds: usize, more: &str) -> Filled {
    let data = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let store = tempfile::tempdir().unwrap();
    let config = config_file(data.path(), &format!("{SMALL}{more}"));
    let url = format!("file://{}", store.path().display());
    let server = serve(data.path(), &config, &url, &[]);
    fill(&server.addr, rounds).await;
    let until = ringfeed_engine::clock::now_ns();
    until_uploaded(data.path(), store.path(), Duration::from_secs(20)).await;
    until_first_segments_removed(data.path(), Duration::from_secs(20)).await;
    Filled {
        data,
        store,
        server,
        until,
    }
}

fn request(start: Start, until_ns: i64, chunk_mode: bool) -> v1::SubscribeRequest {
    v1::SubscribeRequest {
        start: Some(start),
        until_ns,
        chunk_mode,
        batching: true,
        ..Default::default()
    }
}

/// Everything `request` delivers, to its `until_ns`.
async fn follow_all(addr: &str, request: v1::SubscribeRequest) -> Vec<FollowedEvent> {
    follow(addr, request, usize::MAX).await.0
}

async fn follow(
    addr: &str,
    request: v1::SubscribeRequest,
    most: usize,
) -> (Vec<FollowedEvent>, ringfeed_server::client::Follower) {
    crate::common::follow(addr, request, most, Duration::from_secs(30)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_below_the_local_log_read_the_bucket_exactly_once() {
    let _watchdog = ringfeed_testkit::arm();
    let Filled {
        data: _data,
        store: _store,
        server,
        until,
    } = filled(ROUNDS, "").await;
    let total = ROUNDS * 500;

    // From the beginning: everything, once, dense from offset 0.
    let all = follow_all(&server.addr, request(Start::Beginning(true), until, false)).await;
    assert_eq!(all.len(), total, "every event from the beginning");
    let shards = per_shard(&all);
    for (shard, events) in &shards {
        for (i, (offset, ..)) in events.iter().enumerate() {
            assert_eq!(*offset, i as u64, "shard {shard}: dense from 0, each once");
        }
    }
    let status = client(&server.addr)
        .await
        .status(v1::StatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    let reads = status.object_store.expect("object store status");
    assert!(
        reads.bytes_fetched > 0 && reads.cache_misses > 0,
        "the bucket was read: {reads:?}"
    );

    let shown = std::process::Command::new(env!("CARGO_BIN_EXE_ringfeed"))
        .args(["status", "--server", &server.addr])
        .output()
        .unwrap();
    let shown = String::from_utf8(shown.stdout).unwrap();
    assert!(
        shown.contains("in the store: shard 0 0..")
            && shown.contains("read for subscribers below the local log: ")
            && !shown.contains("log: 0 bytes fetched"),
        "{shown}"
    );

    // Chunk mode: the same events per shard.
    let chunked = follow_all(&server.addr, request(Start::Beginning(true), until, true)).await;
    assert_eq!(per_shard(&chunked), shards, "chunk mode delivers the same");

    // A filter: exactly the matching ones.
    let mut filtered_request = request(Start::Beginning(true), until, false);
    filtered_request.path_prefixes = vec!["/n1/d3".into()];
    let (filtered, _) = follow(&server.addr, filtered_request, usize::MAX).await;
    let expected: Vec<_> = all
        .iter()
        .filter(|e| e.decode().unwrap().directory.starts_with("/n1/d3"))
        .map(|e| (e.shard, e.offset))
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(
        filtered
            .iter()
            .map(|e| (e.shard, e.offset))
            .collect::<Vec<_>>(),
        expected,
        "a filter below the local log"
    );

    // From a time inside the bucket's part: exactly the events stamped at
    // or after it.
    let since = all[total / 10].ts_ns;
    let from_time = follow_all(&server.addr, request(Start::SinceNs(since), until, false)).await;
    let expected: Vec<_> = all
        .iter()
        .filter(|e| e.ts_ns >= since)
        .map(|e| (e.shard, e.offset))
        .collect();
    assert_eq!(
        from_time
            .iter()
            .map(|e| (e.shard, e.offset))
            .collect::<Vec<_>>(),
        expected,
        "from a time below the local log"
    );
    let chunked_from_time =
        follow_all(&server.addr, request(Start::SinceNs(since), until, true)).await;
    assert!(
        chunked_from_time.iter().all(|e| e.ts_ns >= since),
        "chunk mode from a time ships nothing before it"
    );
    assert_eq!(per_shard(&chunked_from_time), per_shard(&from_time));

    // From a cursor taken inside the bucket's part: exactly the rest.
    let (head, follower) = follow(
        &server.addr,
        request(Start::Beginning(true), until, false),
        700,
    )
    .await;
    let mut cursor = Vec::new();
    follower.checkpoint_bytes(&mut cursor);
    drop(follower);
    let rest = follow_all(
        &server.addr,
        request(Start::Cursor(cursor.into()), until, false),
    )
    .await;
    let mut joined: Vec<_> = head
        .iter()
        .chain(&rest)
        .map(|e| (e.shard, e.offset))
        .collect();
    assert_eq!(joined.len(), total, "the cursor resumes exactly");
    joined.sort();
    joined.dedup();
    assert_eq!(joined.len(), total, "nothing twice");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_object_is_refused_never_delivered() {
    let _watchdog = ringfeed_testkit::arm();
    let Filled {
        data: _data,
        store,
        server,
        until,
    } = filled(10, "").await;

    // A byte of the first record of shard 0's first segment flipped.
    let (name, ..) = manifest(store.path(), 0).unwrap().remove(0);
    let path = store.path().join("node-0/shard-000").join(&name);
    let mut object = std::fs::read(&path).unwrap();
    object[4096 + 64 + 40] ^= 0x01;
    std::fs::write(&path, &object).unwrap();

    let mut stream = client(&server.addr)
        .await
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::Beginning(true)),
            until_ns: until,
            ordering: v1::Ordering::PerShard as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let deadline = Instant::now() + Duration::from_secs(30);
    let failure = loop {
        match tokio::time::timeout_at(deadline.into(), stream.message())
            .await
            .expect("the stream ends within 30 s")
        {
            Ok(Some(response)) => {
                for e in crate::cluster_nodes::events_of(response) {
                    assert_ne!(e.2, 0, "an event of the corrupt segment was delivered");
                }
            }
            Ok(None) => panic!("the stream ended OK over a corrupt object"),
            Err(status) => break status,
        }
    };
    assert_eq!(
        failure.code(),
        ringfeed_proto::tonic::Code::DataLoss,
        "{failure}"
    );
    assert!(failure.message().contains("refused 3 times"), "{failure}");
    let status = client(&server.addr)
        .await
        .status(v1::StatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    let reads = status.object_store.expect("object store status");
    assert!(reads.read_errors >= 3, "{reads:?}");
    server.stop();
}

/// A dead disk: the data dir is gone, the node restarts on an empty one
/// with the same node id and store. Its history comes back from the store:
/// from the beginning every uploaded event once; a cursor taken before
/// resumes exactly; one that covered events never uploaded is refused as
/// truncated; new events continue the offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_rebuilt_from_the_store_serves_its_history() {
    let _watchdog = ringfeed_testkit::arm();
    let lost = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let store = tempfile::tempdir().unwrap();
    let config = config_file(lost.path(), SMALL);
    let url = format!("file://{}", store.path().display());
    let server = serve(lost.path(), &config, &url, &["--node-id", "3"]);
    fill(&server.addr, 8).await;
    until_uploaded_of(lost.path(), store.path(), 3, Duration::from_secs(20)).await;
    let uploaded_below: Vec<u64> = (0..SHARDS)
        .map(|s| manifest_of(store.path(), 3, s).map_or(0, |m| m.last().map_or(0, |l| l.2)))
        .collect();
    // Events the store never gets: in the open segments when the disk dies.
    crate::cluster_nodes::append(&server.addr, 1, 90_000, 300, true).await;
    let until = ringfeed_engine::clock::now_ns();
    let before = follow_all(&server.addr, request(Start::Beginning(true), until, false)).await;
    let (head, early) = follow(
        &server.addr,
        request(Start::Beginning(true), until, false),
        500,
    )
    .await;
    let (early_cursor, late_cursor) = {
        let (_, late) = follow(
            &server.addr,
            request(Start::Beginning(true), until, false),
            usize::MAX,
        )
        .await;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        early.checkpoint_bytes(&mut a);
        late.checkpoint_bytes(&mut b);
        (a, b)
    };
    server.stop();
    drop(lost);

    let empty = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let config = config_file(empty.path(), SMALL);
    let server = serve(empty.path(), &config, &url, &["--node-id", "3"]);
    let now = ringfeed_engine::clock::now_ns();
    let restored = follow_all(&server.addr, request(Start::Beginning(true), now, false)).await;
    let expected: Vec<_> = before
        .iter()
        .filter(|e| e.offset < uploaded_below[e.shard as usize])
        .map(|e| (e.shard, e.offset, e.event.to_vec()))
        .collect();
    assert!(expected.len() >= 2000, "{} uploaded", expected.len());
    assert_eq!(
        restored
            .iter()
            .map(|e| (e.shard, e.offset, e.event.to_vec()))
            .collect::<Vec<_>>(),
        expected,
        "from the beginning: every uploaded event, once, nothing else"
    );

    // A cursor inside the uploaded history resumes exactly.
    let rest = follow_all(
        &server.addr,
        request(Start::Cursor(early_cursor.into()), now, false),
    )
    .await;
    let mut joined: Vec<_> = head
        .iter()
        .chain(&rest)
        .map(|e| (e.shard, e.offset))
        .collect();
    joined.sort();
    let mut all: Vec<_> = expected.iter().map(|e| (e.0, e.1)).collect();
    all.sort();
    assert_eq!(joined, all, "the early cursor resumes exactly");

    // One that covered events the store never got is refused as truncated.
    let refused = client(&server.addr)
        .await
        .subscribe(request(Start::Cursor(late_cursor.into()), 0, false))
        .await
        .map(|_| ())
        .expect_err("a cursor past the stored history is refused at once");
    assert_eq!(
        refused.code(),
        ringfeed_proto::tonic::Code::FailedPrecondition,
        "{refused}"
    );
    assert!(refused.message().contains("truncated"), "{refused}");

    // New events continue the offsets, after the stored history.
    crate::cluster_nodes::append(&server.addr, 2, 0, 200, true).await;
    let now = ringfeed_engine::clock::now_ns();
    let after = follow_all(&server.addr, request(Start::Beginning(true), now, false)).await;
    assert_eq!(after.len(), expected.len() + 200);
    for (shard, events) in per_shard(&after) {
        for (i, (offset, ..)) in events.iter().enumerate() {
            assert_eq!(
                *offset, i as u64,
                "shard {shard}: dense from 0 across the rebuild"
            );
        }
    }
    server.stop();
}

/// Bucket retention: the store keeps a shard's newest segments within
/// `object_store_retention_max_bytes`; from the beginning a subscriber
/// starts at the oldest the store still holds, and a cursor below it is
/// refused with OUT_OF_RANGE naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_retention_moves_the_oldest_offset() {
    let _watchdog = ringfeed_testkit::arm();
    let Filled {
        data: _data,
        store,
        server,
        until,
    } = filled(ROUNDS, "object_store_retention_max_bytes = 200000\n").await;
    // Until the store's manifests start past offset 0 and its objects went.
    let deadline = Instant::now() + Duration::from_secs(20);
    let oldest: Vec<u64> = loop {
        let firsts: Vec<u64> = (0..SHARDS)
            .map(|s| manifest(store.path(), s).unwrap()[0].1)
            .collect();
        if firsts.iter().all(|&f| f > 0) {
            break firsts;
        }
        assert!(
            Instant::now() < deadline,
            "bucket retention removed nothing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for shard in 0..SHARDS {
        let kept = manifest(store.path(), shard).unwrap();
        let bytes: u64 = kept.iter().map(|s| s.3).sum();
        assert!(
            kept.len() == 1 || bytes <= 200_000,
            "shard {shard}: {bytes} bytes kept"
        );
        let dir = store.path().join(format!("node-0/shard-{shard:03}"));
        let first = ringfeed_engine::segment::segment_name(0);
        assert!(!dir.join(&first).exists(), "shard {shard}: {first} deleted");
    }

    let events = follow_all(&server.addr, request(Start::Beginning(true), until, false)).await;
    for (shard, events) in per_shard(&events) {
        let from = oldest[shard as usize];
        assert!(
            events[0].0 >= from,
            "shard {shard} starts at the store's oldest ({from}), not at {}",
            events[0].0
        );
        for (i, (offset, ..)) in events.iter().enumerate() {
            assert_eq!(*offset, events[0].0 + i as u64, "shard {shard}: dense");
        }
    }
    let zero = ringfeed_engine::Cursor::new(vec![0, 1]);
    let mut bytes = Vec::new();
    zero.write_bytes(&mut bytes);
    let refused = client(&server.addr)
        .await
        .subscribe(request(Start::Cursor(bytes.into()), until, false))
        .await
        .map(|_| ())
        .expect_err("below the store's oldest");
    assert_eq!(
        refused.code(),
        ringfeed_proto::tonic::Code::OutOfRange,
        "{refused}"
    );
    server.stop();
}
