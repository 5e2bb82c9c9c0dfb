//! The data dir remembers its shard count and its node id: reopening with
//! another count or under another node's id is refused with a clear message. A clean shutdown flushes everything, and a
//! reopened engine continues offsets and stamps on every shard.

use crate::common::*;
use ringfeed_engine::{Durability, Engine, EngineConfig, EngineError, Limits};

fn config(dir: &std::path::Path, shards: u32) -> EngineConfig {
    EngineConfig {
        data_dir: dir.to_path_buf(),
        shards,
        window_bytes: 64 << 10,
        ring_bytes: 1 << 20,
        max_unflushed_bytes: 256 << 10,
        segment_bytes: 1 << 20,
        limits: Limits {
            max_event_bytes: 16 << 10,
            ..Limits::default()
        },
        ..EngineConfig::default()
    }
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("engine-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

fn node(dir: &std::path::Path, node_id: Option<u32>) -> EngineConfig {
    EngineConfig {
        node_id,
        ..config(dir, 1)
    }
}

#[test]
fn a_data_dir_keeps_its_node_id() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = scratch();
    // Made without an id (a single node), it takes the first id it is
    // opened under, once.
    let engine = Engine::open(node(dir.path(), None)).unwrap();
    assert_eq!(engine.node_id(), None);
    engine.shutdown().unwrap();
    let engine = Engine::open(node(dir.path(), Some(7))).unwrap();
    assert_eq!(engine.node_id(), Some(7));
    engine.shutdown().unwrap();
    // Opened without an id, it is the node it was recorded as.
    let engine = Engine::open(node(dir.path(), None)).unwrap();
    assert_eq!(engine.node_id(), Some(7), "recorded in the meta");
    engine.shutdown().unwrap();
    match Engine::open(node(dir.path(), Some(8))) {
        Err(
            e @ EngineError::NodeIdMismatch {
                found: 7,
                configured: 8,
                ..
            },
        ) => {
            let message = e.to_string();
            assert!(
                message.contains("node 7") && message.contains("--node-id 7"),
                "message: {message}"
            );
        }
        other => panic!("expected a node id mismatch, got {:?}", other.map(|_| ())),
    }
    let engine = Engine::open(node(dir.path(), Some(7))).expect("its own id still opens");
    assert_eq!(engine.node_id(), Some(7));
    engine.shutdown().unwrap();
    // A new data dir records its id from the start; 0 is no id.
    let fresh = scratch();
    let engine = Engine::open(node(fresh.path(), Some(3))).unwrap();
    engine.shutdown().unwrap();
    let meta = std::fs::read_to_string(fresh.path().join("ringfeed.meta")).unwrap();
    assert!(meta.contains("node=3"), "meta: {meta}");
    assert!(matches!(
        Engine::open(node(scratch().path(), Some(0))),
        Err(EngineError::Config(m)) if m.contains("node_id")
    ));
}

#[test]
fn another_shard_count_is_refused() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = scratch();
    Engine::open(config(dir.path(), 2))
        .unwrap()
        .shutdown()
        .unwrap();
    match Engine::open(config(dir.path(), 3)) {
        Err(
            e @ EngineError::ShardCountMismatch {
                found: 2,
                configured: 3,
                ..
            },
        ) => {
            let message = e.to_string();
            assert!(
                message.contains("2 shard(s)") && message.contains("--shards 2"),
                "message: {message}"
            );
        }
        other => panic!(
            "expected a shard count mismatch, got {:?}",
            other.map(|_| ())
        ),
    }
    Engine::open(config(dir.path(), 2)).expect("the original count still opens");
}

#[test]
fn shutdown_flushes_and_reopen_continues() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = scratch();
    let engine = Engine::open(config(dir.path(), 2)).unwrap();
    let mut last = [(0u64, 0i64); 2];
    for i in 0..500 {
        let p = engine
            .append_blocking(vec![event(&format!("/r/{}", i % 9), i)], Durability::Memory)
            .unwrap()[0];
        last[p.shard as usize] = (p.offset, p.ts);
    }
    engine.shutdown().unwrap();

    let engine = Engine::open(config(dir.path(), 2)).unwrap();
    for (shard, report) in engine.recovery_reports().iter().enumerate() {
        assert!(report.clean_close, "shard {shard} was closed cleanly");
        assert_eq!(
            report.next_offset,
            last[shard].0 + 1,
            "shard {shard} kept every memory-acked event"
        );
        let w = engine.shard(shard as u32).watermarks.snapshot();
        assert_eq!(
            (w.committed_next, w.flushed_next),
            (last[shard].0 + 1, last[shard].0 + 1)
        );
    }
    for i in 0..50 {
        let p = engine
            .append_blocking(
                vec![event(&format!("/r/{}", i % 9), 1000 + i)],
                Durability::Durable,
            )
            .unwrap()[0];
        let (offset, ts) = last[p.shard as usize];
        assert_eq!(p.offset, offset + 1, "offsets continue");
        assert!(p.ts > ts, "stamps continue");
        last[p.shard as usize] = (p.offset, p.ts);
    }
}

#[test]
fn invalid_batches_append_nothing() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = scratch();
    let engine = Engine::open(config(dir.path(), 1)).unwrap();
    let mut batch = vec![event("/ok", 1), event("/ok", 2)];
    batch.push(event("relative/path", 3));
    let err = engine
        .append_blocking(batch, Durability::Memory)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "event 2: directory \"relative/path\" is not absolute"
    );
    assert_eq!(
        engine.shard(0).watermarks.committed_next(),
        0,
        "nothing of the batch was appended"
    );
}

/// Every fresh data dir starts at generation 1 and offset 0, so a cursor of
/// one fits another's offsets and generations exactly: only the feed id the
/// data dir drew when it was made tells them apart.
#[test]
fn a_cursor_of_another_data_dir_is_refused() {
    use ringfeed_engine::{Cursor, CursorError, Start, SubscribeError, SubscribeRequest};
    let _watchdog = ringfeed_testkit::arm();
    let (a, b) = (scratch(), scratch());
    let mut cursors = Vec::new();
    for dir in [&a, &b] {
        let engine = Engine::open(config(dir.path(), 1)).unwrap();
        for i in 0..3 {
            engine
                .append_blocking(vec![event("/same", i)], Durability::Durable)
                .unwrap();
        }
        let sub = engine
            .subscribe(SubscribeRequest::from(Start::Beginning))
            .unwrap();
        assert_eq!(sub.cursor().feed(), engine.feed_id());
        assert_ne!(engine.feed_id(), 0);
        cursors.push((engine.feed_id(), sub.cursor()));
        engine.shutdown().unwrap();
    }
    let (feed_a, cursor_a) = cursors[0].clone();
    let (feed_b, _) = cursors[1].clone();
    assert_ne!(feed_a, feed_b, "each data dir draws its own id");

    // Reopened, a data dir keeps its id and takes its own cursors.
    let engine = Engine::open(config(a.path(), 1)).unwrap();
    assert_eq!(engine.feed_id(), feed_a, "recorded in the meta");
    engine
        .subscribe(SubscribeRequest::from(Start::Cursor(cursor_a.clone())))
        .unwrap();
    engine.shutdown().unwrap();

    // B refuses A's cursor although its offsets and generations fit B.
    let engine = Engine::open(config(b.path(), 1)).unwrap();
    match engine.subscribe(SubscribeRequest::from(Start::Cursor(cursor_a.clone()))) {
        Err(SubscribeError::Cursor(e @ CursorError::OtherFeed { .. })) => {
            let text = e.to_string();
            assert!(
                text.contains("another data dir") && text.contains(&format!("{feed_a:016x}")),
                "{text}"
            );
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("B resumed A's cursor"),
    }
    // A cursor that does not say its feed (version 2, as servers before
    // feed ids wrote) is still taken, checked as before.
    let old = Cursor::with_generations(
        cursor_a.offsets().to_vec(),
        cursor_a.generations().unwrap().to_vec(),
    );
    assert_eq!(old.feed(), 0);
    engine
        .subscribe(SubscribeRequest::from(Start::Cursor(old)))
        .unwrap();
    engine.shutdown().unwrap();
}

/// A data dir made before feed ids draws one at its next open, once.
#[test]
fn a_data_dir_made_before_feed_ids_draws_one_once() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = scratch();
    Engine::open(config(dir.path(), 1))
        .unwrap()
        .shutdown()
        .unwrap();
    let meta = dir.path().join("ringfeed.meta");
    let text = std::fs::read_to_string(&meta).unwrap();
    assert!(text.contains("\nfeed="), "{text}");
    let old: String = text
        .lines()
        .filter(|l| !l.starts_with("feed="))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&meta, &old).unwrap();
    let engine = Engine::open(config(dir.path(), 1)).unwrap();
    let id = engine.feed_id();
    assert_ne!(id, 0);
    engine.shutdown().unwrap();
    assert!(std::fs::read_to_string(&meta)
        .unwrap()
        .contains(&format!("feed={id:016x}")));
    let engine = Engine::open(config(dir.path(), 1)).unwrap();
    assert_eq!(engine.feed_id(), id, "drawn once");
    engine.shutdown().unwrap();
}
