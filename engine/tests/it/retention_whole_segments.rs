//! Retention deletes only whole old segments, oldest first, never the one
//! being written, and reports the oldest retained offset and stamp.

use std::time::Duration;

use crate::common::*;
use ringfeed_engine::storage::{block_on, MemStorage};
use ringfeed_engine::{LogConfig, RetentionPolicy};

fn config() -> LogConfig {
    LogConfig {
        shard: 0,
        segment_bytes: 8 << 10,
        max_unsynced_bytes: 2 << 10,
    }
}

fn filled(records: u64) -> (MemStorage, ringfeed_engine::Log<MemStorage>) {
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, config()).unwrap();
    block_on(async {
        append_records(&mut log, records, 4).await.unwrap();
        log.sync().await.unwrap();
    });
    (storage, log)
}

/// The segment files in `storage` (beside them lives the generation history).
fn segment_files(storage: &MemStorage) -> Vec<String> {
    let mut names: Vec<String> = storage
        .names()
        .into_iter()
        .filter(|n| n.ends_with(".seg"))
        .collect();
    names.sort();
    names
}

#[test]
fn by_bytes_keeps_the_newest_segments() {
    let (storage, mut log) = filled(400);
    let before = log.segment_names();
    assert!(before.len() >= 5, "workload spans segments: {before:?}");
    let outcome = block_on(log.apply_retention(
        RetentionPolicy {
            max_bytes: Some(2 * config().segment_bytes),
            ..Default::default()
        },
        0,
        u64::MAX,
    ))
    .unwrap();
    assert_eq!(outcome.removed, before[..before.len() - 2].to_vec());
    assert_eq!(log.segment_names(), before[before.len() - 2..].to_vec());
    assert_eq!(
        segment_files(&storage),
        log.segment_names(),
        "files on disk match"
    );
    let (first, ts) = outcome.retained.unwrap();
    assert_eq!(Some((first, ts)), log.retained());
    assert_eq!(ts, stamp_for(first));
    assert_records(
        &block_on(read_all(&log)),
        &expected(first..400),
        "retained range",
    );
    drop(log);
    let (reopened, _) = open_mem(&storage, config()).unwrap();
    assert_eq!(
        reopened.retained(),
        Some((first, ts)),
        "retention survives reopen"
    );
}

/// With an object store, a segment goes only once the store holds it: the
/// bound stops retention at the first segment ending above it, whatever the
/// size limit says.
#[test]
fn never_a_segment_the_object_store_does_not_hold() {
    let (storage, mut log) = filled(400);
    let before = log.segment_names();
    let starts: Vec<u64> = before
        .iter()
        .map(|n| ringfeed_engine::segment::parse_segment_name(n).unwrap())
        .collect();
    let policy = RetentionPolicy {
        max_bytes: Some(0),
        keep_until_uploaded: true,
        ..Default::default()
    };
    // Nothing uploaded: nothing goes.
    let outcome = block_on(log.apply_retention(policy, 0, 0)).unwrap();
    assert!(outcome.removed.is_empty(), "{outcome:?}");
    // The store holds the first two segments and part of the third.
    let outcome = block_on(log.apply_retention(policy, 0, starts[2] + 1)).unwrap();
    assert_eq!(outcome.removed, before[..2].to_vec());
    assert_eq!(segment_files(&storage), before[2..].to_vec());
}

#[test]
fn never_the_active_segment() {
    let (storage, mut log) = filled(400);
    let active = log.segment_names().pop().unwrap();
    let outcome = block_on(log.apply_retention(
        RetentionPolicy {
            max_bytes: Some(0),
            max_age: Some(Duration::ZERO),
            ..Default::default()
        },
        i64::MAX,
        u64::MAX,
    ))
    .unwrap();
    assert!(!outcome.removed.contains(&active));
    assert_eq!(segment_files(&storage), vec![active.clone()]);
    // The log still appends into it.
    block_on(append_records(&mut log, 3, 3)).unwrap();
    assert_eq!(log.next_offset(), 403);
}

#[test]
fn by_age_removes_segments_whose_newest_record_is_older() {
    let (_storage, mut log) = filled(400);
    let cutoff = stamp_for(150);
    let segments: Vec<_> = log.chunks().collect();
    let outcome = block_on(log.apply_retention(
        RetentionPolicy {
            max_age: Some(Duration::from_nanos(1_000)),
            ..Default::default()
        },
        cutoff + 1_000,
        u64::MAX,
    ))
    .unwrap();
    assert!(!outcome.removed.is_empty());
    for name in &outcome.removed {
        let first = ringfeed_engine::segment::parse_segment_name(name).unwrap();
        let newest = segments
            .iter()
            .filter(|c| c.segment == first)
            .map(|c| c.entry.last_ts)
            .max()
            .unwrap();
        assert!(
            newest < cutoff,
            "{name} held a record at {newest}, not older than {cutoff}"
        );
    }
    let (first, _) = log.retained().unwrap();
    let first_kept_newest = segments
        .iter()
        .filter(|c| c.segment == first)
        .map(|c| c.entry.last_ts)
        .max()
        .unwrap();
    assert!(
        first_kept_newest >= cutoff,
        "a segment young enough to keep was removed"
    );
    assert!(first <= 150, "record 150 is still retained");
}
