//! `Engine::run_on_shard`: a closure runs on the named shard's own thread,
//! inside its executor, where it can spawn tasks that append to the engine
//! (the local shard without crossing threads) and are answered.

use std::sync::Arc;

use crate::common::*;
use ringfeed_engine::{Durability, Engine, EngineConfig};

#[test]
fn a_closure_runs_on_its_shard_and_its_tasks_append() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::Builder::new()
        .prefix("run-on-shard-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let engine = Arc::new(
        Engine::open(EngineConfig {
            data_dir: dir.path().to_path_buf(),
            ..small_engine_config(2)
        })
        .expect("the engine opens"),
    );
    let (tx, rx) = flume::unbounded();
    for shard in 0..2 {
        let (engine, tx) = (engine.clone(), tx.clone());
        engine
            .clone()
            .run_on_shard(shard, move || {
                let thread = std::thread::current().name().map(str::to_owned);
                glommio::spawn_local(async move {
                    let directory = format!("/on/{shard}");
                    let appended = engine
                        .append(vec![event(&directory, 0)], Durability::Memory)
                        .await;
                    // The engine's last reference must not go on a shard.
                    let routed = engine.shard_for(&directory);
                    drop(engine);
                    tx.send((shard, thread, routed, appended)).unwrap();
                })
                .detach();
            })
            .expect("the shard runs it");
    }
    drop(tx);
    let mut answers: Vec<_> = rx.iter().collect();
    answers.sort_by_key(|a| a.0);
    assert_eq!(answers.len(), 2, "both closures' tasks answered");
    for (shard, thread, routed, appended) in answers {
        // glommio names the thread `NAME-EXECUTOR_ID`.
        let thread = thread.unwrap_or_default();
        assert!(
            thread.starts_with(&format!("ringfeed-shard-{shard}-")),
            "shard {shard}'s closure ran on its thread, not on {thread:?}"
        );
        let positions = appended.expect("a task on a shard appends");
        assert_eq!(positions.len(), 1);
        assert_eq!(positions[0].shard, routed, "routed by its directory");
    }
    let engine = Arc::try_unwrap(engine).unwrap_or_else(|_| panic!("the tasks let go"));
    engine.shutdown().expect("the engine closes");
}
