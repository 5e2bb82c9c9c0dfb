//! Liveness under load: several producer threads append to two O_DIRECT
//! shards, memory and durable acks mixed, with a small unflushed bound so
//! back-pressure engages all the time. Every append must be answered (the
//! test fails, rather than hangs, if one is not answered within a minute), and
//! afterwards every acknowledged event is in the logs exactly once, in order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use ringfeed_engine::{Durability, Engine, EngineConfig, Limits, Position};

#[test]
fn every_append_is_answered_and_kept() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::Builder::new()
        .prefix("live-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let config = EngineConfig {
        data_dir: dir.path().to_path_buf(),
        shards: 2,
        window_bytes: 64 << 10,
        ring_bytes: 2 << 20,
        max_unflushed_bytes: 256 << 10,
        segment_bytes: 1 << 20,
        append_timeout: Duration::from_secs(30),
        limits: Limits {
            max_event_bytes: 16 << 10,
            ..Limits::default()
        },
        ..EngineConfig::default()
    };
    let engine = Arc::new(Engine::open(config.clone()).unwrap());
    let (tx, rx) = flume::unbounded::<(u64, Position)>();
    let producers: Vec<_> = (0..4u64)
        .map(|p| {
            let (engine, tx) = (engine.clone(), tx.clone());
            std::thread::spawn(move || {
                for round in 0..150u64 {
                    let ids: Vec<u64> = (0..1 + (round % 40))
                        .map(|k| p * 1_000_000 + round * 100 + k)
                        .collect();
                    let batch = ids
                        .iter()
                        .map(|&id| event(&format!("/live/{}", id % 13), id))
                        .collect();
                    let durability = if round % 3 == 0 {
                        Durability::Durable
                    } else {
                        Durability::Memory
                    };
                    let positions = engine.append_blocking(batch, durability).expect("append");
                    for (id, position) in ids.into_iter().zip(positions) {
                        tx.send((id, position)).unwrap();
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let mut acked = BTreeMap::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok((id, position)) => {
                assert!(
                    acked
                        .insert((position.shard, position.offset), (id, position.ts))
                        .is_none(),
                    "position given twice"
                );
            }
            Err(flume::RecvTimeoutError::Disconnected) => break,
            Err(flume::RecvTimeoutError::Timeout) => {
                panic!("no append answered for a minute: the engine stalled")
            }
        }
    }
    for p in producers {
        p.join().unwrap();
    }
    Arc::try_unwrap(engine)
        .ok()
        .expect("producers are done")
        .shutdown()
        .unwrap();

    // Every acknowledged event is stored at its position, with its stamp and
    // payload, and nothing else is stored.
    let logs = read_dma_logs(dir.path(), 2);
    let stored: usize = logs.iter().map(Vec::len).sum();
    assert_eq!(
        stored,
        acked.len(),
        "every stored event was acknowledged, and only those"
    );
    for (&(shard, offset), &(id, ts)) in &acked {
        let r = &logs[shard as usize][offset as usize];
        assert_eq!(
            (r.0, r.1, r.2.as_slice()),
            (offset, ts, format!("payload-{id}").as_bytes()),
            "{shard}:{offset}"
        );
    }
}
