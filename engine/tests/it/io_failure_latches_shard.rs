//! A failed write or sync latches the shard: the failing durable append is
//! refused, and so is every later append, durable or not, until reopened. A
//! durable-only subscriber waiting on events the latched shard will never
//! flush gets a typed error instead of waiting silently forever.

use crate::common::*;
use ringfeed_engine::storage::{Faults, MemStorage};
use std::time::Duration;

use ringfeed_engine::{AppendError, Durability, Start, Step, SubscribeError, SubscribeRequest};

fn latches_after(faults: Faults) {
    let storage = MemStorage::new();
    let engine = mem_engine(small_engine_config(1), std::slice::from_ref(&storage));
    engine
        .append_blocking(vec![event("/a", 0)], Durability::Durable)
        .unwrap();
    storage.set_faults(faults);
    let failed = engine.append_blocking(vec![event("/a", 1)], Durability::Durable);
    assert!(
        matches!(failed, Err(AppendError::Latched { shard: 0, .. })),
        "got {failed:?}"
    );
    assert!(engine.shard(0).latched().is_some());
    for durability in [Durability::Memory, Durability::Durable] {
        let later = engine.append_blocking(vec![event("/a", 2)], durability);
        assert!(
            matches!(later, Err(AppendError::Latched { .. })),
            "{durability:?} append after the failure: {later:?}"
        );
    }
    drop(engine);
    storage.process_crash();
    let engine = mem_engine(small_engine_config(1), std::slice::from_ref(&storage));
    engine
        .append_blocking(vec![event("/a", 3)], Durability::Durable)
        .expect("a reopened engine works");
}

#[test]
fn failed_write_latches() {
    let _watchdog = ringfeed_testkit::arm();
    latches_after(Faults {
        fail_write: Some(0),
        ..Faults::default()
    });
}

#[test]
fn failed_sync_latches() {
    let _watchdog = ringfeed_testkit::arm();
    latches_after(Faults {
        fail_sync: Some(0),
        ..Faults::default()
    });
}

#[test]
fn a_durable_only_subscriber_is_told_when_a_latch_stops_the_flushes() {
    let _watchdog = ringfeed_testkit::arm();
    let storage = MemStorage::new();
    let config = ringfeed_engine::EngineConfig {
        flush_interval: Duration::from_secs(3600),
        ..small_engine_config(1)
    };
    let engine = mem_engine(config, std::slice::from_ref(&storage));
    engine
        .append_blocking(vec![event("/a", 0)], Durability::Durable)
        .unwrap();
    let mut durable = engine
        .subscribe(SubscribeRequest {
            durable_only: true,
            ..SubscribeRequest::from(Start::Beginning)
        })
        .unwrap();
    assert!(matches!(
        durable.next_blocking(Duration::from_secs(5)).unwrap(),
        Step::Event(_)
    ));
    // Memory-acked, unflushed: the durable-only subscriber waits for a flush.
    engine
        .append_blocking(vec![event("/a", 1)], Durability::Memory)
        .unwrap();
    assert!(matches!(
        durable.next_blocking(Duration::from_millis(50)).unwrap(),
        Step::Pending
    ));
    storage.set_faults(Faults {
        fail_write: Some(0),
        ..Faults::default()
    });
    let failed = engine.append_blocking(vec![event("/a", 2)], Durability::Durable);
    assert!(
        matches!(failed, Err(AppendError::Latched { .. })),
        "{failed:?}"
    );
    match durable.next_blocking(Duration::from_secs(5)) {
        Err(SubscribeError::Latched {
            shard: 0,
            durable_end: 1,
            ..
        }) => {}
        other => panic!("expected Latched at 1, got {other:?}"),
    }
}

/// An 8 KiB event whose payload starts with its id.
fn numbered(id: u64) -> ringfeed_engine::NewEvent {
    let mut e = event("/full", id);
    let mut payload = format!("{id:08}").into_bytes();
    payload.resize(8 << 10, b'x');
    e.payload = payload.into();
    e
}

/// The ids of the events stored in shard 0 of `storage`, in offset order.
fn stored_ids(storage: &MemStorage) -> Vec<u64> {
    stored_records(storage, 0)
        .iter()
        .map(|(_, _, payload)| std::str::from_utf8(&payload[..8]).unwrap().parse().unwrap())
        .collect()
}

/// A full disk found while making the next segment, where nothing is written
/// yet, is no I/O failure: appends are refused (DiskFull, which the server
/// answers RESOURCE_EXHAUSTED), none is half taken, the shard does not
/// latch, and it takes appends again by itself once space is freed.
#[test]
fn a_full_disk_refuses_appends_until_space_returns() {
    let _watchdog = ringfeed_testkit::arm();
    let storage = MemStorage::new();
    let engine = mem_engine(small_engine_config(1), std::slice::from_ref(&storage));
    storage.fill_disk(true);
    let mut acked = Vec::new();
    let mut refusal = None;
    for id in 0..1_000 {
        match engine.append_blocking(vec![numbered(id)], Durability::Durable) {
            Ok(_) => acked.push(id),
            Err(AppendError::DiskFull { shard: 0, cause }) => {
                refusal = Some(cause);
                break;
            }
            Err(e) => panic!("append {id}: {e}"),
        }
    }
    let cause = refusal.expect("a 1 MiB segment fills with 1,000 events of 8 KiB");
    assert!(cause.contains("No space left on device"), "{cause}");
    // Found ahead: while the active segment still has room for what was taken.
    assert!(acked.len() > 50, "refused after {} events", acked.len());
    assert!(engine.shard(0).latched().is_none());
    assert_eq!(engine.shard(0).no_space(), Some(cause));
    let memory = engine.append_blocking(vec![numbered(5_000)], Durability::Memory);
    assert!(
        matches!(memory, Err(AppendError::DiskFull { .. })),
        "{memory:?}"
    );

    storage.fill_disk(false);
    wait_until(
        Duration::from_secs(10),
        "the shard to take appends again",
        || engine.shard(0).no_space().is_none(),
    );
    for id in 10_000..10_200 {
        engine
            .append_blocking(vec![numbered(id)], Durability::Durable)
            .expect("appends are taken again once space returns");
        acked.push(id);
    }
    drop(engine);
    storage.process_crash();
    assert_eq!(stored_ids(&storage), acked, "exactly what was acknowledged");
}

/// A round that needs the next segment when the disk is full is refused
/// before any of it is written and handed back: its durable appends wait
/// (they are never answered falsely), and are written and acknowledged once
/// space returns; later appends are refused meanwhile.
#[test]
fn a_round_refused_for_a_full_disk_is_written_once_space_returns() {
    let _watchdog = ringfeed_testkit::arm();
    let storage = MemStorage::new();
    let config = ringfeed_engine::EngineConfig {
        flush_interval: Duration::from_secs(3600),
        ..small_engine_config(1)
    };
    let engine = std::sync::Arc::new(mem_engine(config, std::slice::from_ref(&storage)));
    // 70 × 8 KiB durable: below the point where the next segment is made.
    let mut acked: Vec<u64> = (0..70).collect();
    for &id in &acked {
        engine
            .append_blocking(vec![numbered(id)], Durability::Durable)
            .unwrap();
    }
    storage.fill_disk(true);
    // 60 × 8 KiB in one durable batch: two rounds (a round is at most 256
    // KiB here); the first fits what the segment has left, the second needs
    // the next segment.
    let batch: Vec<u64> = (100..160).collect();
    let waiter = {
        let (engine, batch) = (engine.clone(), batch.clone());
        std::thread::spawn(move || {
            let events = batch.iter().map(|&id| numbered(id)).collect();
            engine.append_blocking(events, Durability::Durable)
        })
    };
    wait_until(Duration::from_secs(10), "the round to be refused", || {
        engine.shard(0).no_space().is_some()
    });
    let later = engine.append_blocking(vec![numbered(300)], Durability::Durable);
    assert!(
        matches!(later, Err(AppendError::DiskFull { .. })),
        "{later:?}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !waiter.is_finished(),
        "a durable append answered while the disk is full"
    );
    assert!(engine.shard(0).latched().is_none());

    storage.fill_disk(false);
    waiter
        .join()
        .unwrap()
        .expect("the waiting durable append is acknowledged once space returns");
    acked.extend(batch);
    drop(engine);
    storage.process_crash();
    assert_eq!(stored_ids(&storage), acked);
}
