//! An append whose caller has gone away (its future dropped: a cancelled
//! stream, a passed deadline) before its shard could take it is never applied
//! later (docs/design.md 2.11). Before, a caller that gave up while the
//! shard was back-pressured still had its events appended once room came:
//! events nobody was told about, which a retry would then duplicate.

use std::time::Duration;

use crate::common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::Durability;

/// Resolves after `after`, on a helper thread (the engine is runtime-agnostic).
async fn sleep(after: Duration) {
    let (tx, rx) = flume::bounded(1);
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let _ = tx.send(());
    });
    let _ = rx.recv_async().await;
}

#[test]
fn an_append_dropped_while_it_waits_for_room_is_never_applied() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new()];
    let engine = mem_engine(small_engine_config(1), &storages);
    stick_shard_0(&engine, &storages[0]);
    let before = engine.shard(0).watermarks.committed_next();

    // This one must wait for room; its caller gives up after 200 ms.
    let batch: Vec<_> = (0..4).map(|k| big_event(1000 + k)).collect();
    let gave_up = futures_lite::future::block_on(futures_lite::future::or(
        async { Some(engine.append(batch, Durability::Memory).await) },
        async {
            sleep(Duration::from_millis(200)).await;
            None
        },
    ));
    assert!(gave_up.is_none(), "the append did not wait: {gave_up:?}");

    storages[0].stall_syncs(false);
    futures_lite::future::block_on(engine.flush()).unwrap();
    // The shard has taken (and dropped) the abandoned command by the time a
    // later command is answered.
    let after = engine
        .append_blocking(vec![event("/d", 5000)], Durability::Memory)
        .unwrap();
    assert_eq!(
        after[0].offset, before,
        "the abandoned batch was applied after its caller left"
    );
    let abandoned = engine
        .shard(0)
        .stats()
        .abandoned
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(abandoned, 1);
    engine.shutdown().unwrap();
}
