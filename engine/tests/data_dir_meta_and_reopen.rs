//! The data dir remembers its shard count and its node id: reopening with
//! another count or under another node's id is refused with a clear message. A clean shutdown flushes everything, and a
//! reopened engine continues offsets and stamps on every shard.

mod common;

use common::*;
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
    let _watchdog = ringfeed_watchdog::arm();
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
    let _watchdog = ringfeed_watchdog::arm();
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
    let _watchdog = ringfeed_watchdog::arm();
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
    let _watchdog = ringfeed_watchdog::arm();
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
