//! Idempotent producers (issue 15): a retried batch appends nothing and gets
//! its original positions back, whole or in part, across shards; a gap and a
//! stale sequence are refused with nothing appended; the producer table is
//! rebuilt from the log at open, so retries after a restart are still
//! recognised, and events a crash destroyed (memory-acked, never flushed) are
//! stored again when retried instead of being taken for duplicates.

use std::time::Duration;

use crate::common::*;
use ringfeed_engine::storage::{Faults, MemStorage};
use ringfeed_engine::{
    AppendError, Durability, Engine, EngineConfig, NewEvent, Position, Producer, Stored,
};

/// Events spread over both shards (directories hash to different shards).
fn events(ids: std::ops::Range<u64>) -> Vec<NewEvent> {
    ids.map(|id| event(&format!("/dir/{}", id % 7), id))
        .collect()
}

fn producer(first_sequence: u64) -> Option<Producer> {
    Some(Producer {
        id: 42,
        first_sequence,
    })
}

fn positions(stored: &[Stored]) -> Vec<Position> {
    stored.iter().map(|s| s.position).collect()
}

fn committed(engine: &Engine) -> Vec<u64> {
    (0..engine.shard_count())
        .map(|s| engine.shard(s).watermarks.committed_next())
        .collect()
}

fn append(
    engine: &Engine,
    events: Vec<NewEvent>,
    durability: Durability,
    producer: Option<Producer>,
) -> Result<Vec<Stored>, AppendError> {
    futures_lite::future::block_on(engine.append_idempotent(events, durability, producer))
}

fn config() -> EngineConfig {
    EngineConfig {
        flush_interval: Duration::from_secs(3600),
        ..small_engine_config(2)
    }
}

#[test]
fn a_retried_batch_appends_nothing_and_gets_its_original_positions() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new(), MemStorage::new()];
    let engine = mem_engine(config(), &storages);
    let first = append(&engine, events(0..50), Durability::Memory, producer(0)).unwrap();
    assert!(first.iter().all(|s| !s.duplicate));
    let shards: std::collections::BTreeSet<u32> = first.iter().map(|s| s.position.shard).collect();
    assert_eq!(shards.len(), 2, "the batch spans both shards");
    let before = committed(&engine);

    // The whole batch again: nothing new, every original position.
    let retry = append(&engine, events(0..50), Durability::Durable, producer(0)).unwrap();
    assert!(retry.iter().all(|s| s.duplicate));
    assert_eq!(positions(&retry), positions(&first));
    assert_eq!(committed(&engine), before, "a retry appends nothing");

    // A retry cut differently (the tail of the first batch plus new events):
    // the old part is answered from memory, the new part stored.
    let overlap = append(&engine, events(40..60), Durability::Memory, producer(40)).unwrap();
    assert_eq!(positions(&overlap[..10]), positions(&first[40..]));
    assert!(overlap[..10].iter().all(|s| s.duplicate));
    assert!(overlap[10..].iter().all(|s| !s.duplicate));
    let after: u64 = committed(&engine).iter().sum();
    assert_eq!(
        after,
        before.iter().sum::<u64>() + 10,
        "only the 10 new events"
    );

    // Another producer with the same numbers is not a duplicate.
    let other = Some(Producer {
        id: 7,
        first_sequence: 0,
    });
    let theirs = append(&engine, events(0..5), Durability::Memory, other).unwrap();
    assert!(theirs.iter().all(|s| !s.duplicate));
    // Without a producer, nothing is de-duplicated.
    engine
        .append_blocking(events(0..5), Durability::Memory)
        .unwrap();
    let total: u64 = committed(&engine).iter().sum();
    assert_eq!(total, 70);
}

#[test]
fn gaps_and_stale_sequences_are_refused_with_nothing_appended() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new(), MemStorage::new()];
    let engine = mem_engine(config(), &storages);
    append(&engine, events(0..20), Durability::Memory, producer(100)).unwrap();
    let before = committed(&engine);

    // Next is 120: a batch starting at 121 skips one.
    let gap = append(&engine, events(20..25), Durability::Memory, producer(121)).unwrap_err();
    match &gap {
        AppendError::SequenceGap {
            producer_id: 42,
            expected: 120,
            first: 121,
        } => {}
        other => panic!("expected a gap at 120, got {other:?}"),
    }
    assert!(
        gap.to_string().contains("Resend from sequence 120"),
        "{gap}"
    );
    assert_eq!(committed(&engine), before);

    // Only the first shard's directory: sequences 90..95 are below what the
    // shard stored and were never stored there.
    let same_dir: Vec<NewEvent> = (0..5).map(|id| event("/dir/0", id)).collect();
    let stale = append(&engine, same_dir, Durability::Memory, producer(90)).unwrap_err();
    assert!(
        matches!(
            stale,
            AppendError::StaleSequence {
                producer_id: 42,
                sequence: 90,
                ..
            }
        ),
        "{stale:?}"
    );
    assert_eq!(committed(&engine), before);

    // Continuing at the next sequence works.
    append(&engine, events(20..25), Durability::Memory, producer(120)).unwrap();
    assert!(matches!(
        append(
            &engine,
            events(0..1),
            Durability::Memory,
            Some(Producer {
                id: 0,
                first_sequence: 0
            })
        ),
        Err(AppendError::Invalid {
            field: "producer_id",
            ..
        })
    ));
}

#[test]
fn the_table_is_rebuilt_from_the_log_at_open() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new(), MemStorage::new()];
    let engine = mem_engine(config(), &storages);
    let first = append(&engine, events(0..30), Durability::Durable, producer(0)).unwrap();
    drop(engine); // clean close

    let engine = mem_engine(config(), &storages);
    let producers: usize = engine.recovery_reports().iter().map(|r| r.producers).sum();
    assert_eq!(producers, 2, "producer 42 on each shard");
    let before = committed(&engine);
    let retry = append(&engine, events(0..30), Durability::Durable, producer(0)).unwrap();
    assert!(retry.iter().all(|s| s.duplicate));
    assert_eq!(positions(&retry), positions(&first));
    assert_eq!(committed(&engine), before);
    // The next sequence survived too: a gap is still a gap.
    assert!(matches!(
        append(&engine, events(30..31), Durability::Memory, producer(31)),
        Err(AppendError::SequenceGap { expected: 30, .. })
    ));
}

#[test]
fn events_a_crash_destroyed_are_stored_again_when_retried() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new(), MemStorage::new()];
    let engine = mem_engine(config(), &storages);
    let durable = append(&engine, events(0..10), Durability::Durable, producer(0)).unwrap();
    // Memory-acked, never flushed (the flush interval is an hour).
    append(&engine, events(10..20), Durability::Memory, producer(10)).unwrap();
    for storage in &storages {
        storage.set_faults(Faults {
            halt_after_ops: Some(0),
            ..Faults::default()
        });
    }
    drop(engine);
    for storage in &storages {
        storage.power_loss();
        storage.set_faults(Faults::default());
    }

    let engine = mem_engine(config(), &storages);
    let kept: u64 = committed(&engine).iter().sum();
    assert_eq!(kept, 10, "the crash kept the durable 10");
    // The producer does not know which of its memory-acked events survived:
    // it retries everything it sent. The durable part is recognised, the
    // destroyed part is stored anew.
    let retry = append(&engine, events(0..20), Durability::Durable, producer(0)).unwrap();
    assert_eq!(positions(&retry[..10]), positions(&durable));
    assert!(retry[..10].iter().all(|s| s.duplicate));
    assert!(
        retry[10..].iter().all(|s| !s.duplicate),
        "lost events are not duplicates"
    );
    let total: u64 = committed(&engine).iter().sum();
    assert_eq!(total, 20);
    drop(engine);
    let mut payloads: Vec<Vec<u8>> = (0..2)
        .flat_map(|s| stored_records(&storages[s as usize], s))
        .map(|r| r.2)
        .collect();
    payloads.sort();
    let mut want: Vec<Vec<u8>> = events(0..20)
        .into_iter()
        .map(|e| e.payload.to_vec())
        .collect();
    want.sort();
    assert_eq!(payloads, want, "each event stored exactly once");
}

#[test]
fn a_retry_of_stored_events_is_answered_while_the_shard_has_no_room() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new()];
    let engine = mem_engine(small_engine_config(1), &storages);
    // 24 KiB: more than the room left on a stuck shard.
    let batch = || (0..3).map(big_event).collect::<Vec<_>>();
    let first = append(&engine, batch(), Durability::Memory, producer(0)).unwrap();
    // The disk hangs and unflushed bytes are at the bound: a new append
    // would wait (and time out after `append_timeout`, 2 s here).
    stick_shard_0(&engine, &storages[0]);
    let before = committed(&engine);

    // The retry needs no room: it stores nothing, so it is answered at once
    // (with syncs stalled, waiting could only end in ResourceExhausted).
    let retry = append(&engine, batch(), Durability::Memory, producer(0));
    // Released before asserting: an engine dropped with syncs stalled would
    // wait for its flusher forever.
    storages[0].stall_syncs(false);
    let retry = retry.expect("a pure retry is not refused for lack of room");
    assert!(retry.iter().all(|s| s.duplicate));
    assert_eq!(positions(&retry), positions(&first));
    assert_eq!(committed(&engine), before);

    // New events are still stored once the disk answers.
    let more = append(&engine, vec![big_event(3)], Durability::Memory, producer(3)).unwrap();
    assert!(!more[0].duplicate);
}

/// A follower of an upstream log (the SeaweedFS ingest) keeps its events on
/// one shard: what a crash leaves is then a prefix of what it sent, and it
/// resumes right after [`Engine::last_stored`], whose payload says where
/// upstream it was. Memory-acked events past the last durable batch are
/// lost by the crash and not reported as stored.
#[test]
fn a_producer_on_one_shard_resumes_after_its_last_stored_event() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new(), MemStorage::new()];
    let engine = mem_engine(config(), &storages);
    let on_one = |events: Vec<NewEvent>, first: u64, durability| {
        futures_lite::future::block_on(engine.append_to_shard(
            1,
            events,
            durability,
            producer(first),
        ))
        .unwrap()
    };
    // Directories that route to both shards, all sent to shard 1.
    let durable = on_one(events(0..20), 0, Durability::Durable);
    assert!(durable.iter().all(|s| s.position.shard == 1));
    on_one(events(20..30), 20, Durability::Memory);
    for storage in &storages {
        storage.set_faults(Faults {
            halt_after_ops: Some(0),
            ..Faults::default()
        });
    }
    drop(engine);
    for storage in &storages {
        storage.power_loss();
        storage.set_faults(Faults::default());
    }

    let engine = mem_engine(config(), &storages);
    assert_eq!(committed(&engine), vec![0, 20]);
    let (sequence, position) = engine.last_stored(42).expect("producer 42 is stored");
    assert_eq!(sequence, 19);
    assert_eq!(position, durable[19].position);
    let event = engine
        .read_at(position.shard, position.offset)
        .unwrap()
        .expect("the last stored event is readable");
    assert_eq!(event.ts, position.ts);
    assert_eq!(event.payload(), events(19..20)[0].payload);
    assert!(engine.last_stored(7).is_none(), "an unknown producer");
    assert!(engine.read_at(1, 20).unwrap().is_none(), "past the end");
}
