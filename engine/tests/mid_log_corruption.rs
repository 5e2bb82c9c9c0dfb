//! A damaged chunk followed by valid chunks that prove it had been synced is
//! reported as corruption naming the segment and position; nothing after it is
//! silently dropped.

mod common;

use common::*;
use ringfeed_engine::storage::{block_on, MemStorage};
use ringfeed_engine::RecoveryError;

fn synced_log(chunks: u64) -> (MemStorage, Vec<(String, u64)>) {
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(async {
        for _ in 0..chunks {
            append_records(&mut log, 4, 4).await.unwrap();
            log.sync().await.unwrap();
        }
    });
    let positions = log
        .chunks()
        .map(|c| {
            (
                ringfeed_engine::segment::segment_name(c.segment),
                c.entry.position,
            )
        })
        .collect();
    drop(log);
    (storage, positions)
}

fn assert_corruption_at(storage: &MemStorage, segment: &str, position: u64) {
    match open_mem(storage, small_config()) {
        Err(RecoveryError::Corruption {
            segment: s,
            position: p,
            ..
        }) => {
            assert_eq!((s.as_str(), p), (segment, position));
        }
        Err(other) => panic!("expected corruption at {segment}:{position}, got {other}"),
        Ok((log, _)) => panic!(
            "corruption at {segment}:{position} went unreported; log opened with {} records",
            log.next_offset()
        ),
    }
}

#[test]
fn bit_flip_mid_segment_is_corruption() {
    let (storage, chunks) = synced_log(8);
    for (segment, position) in chunks.iter().take(7) {
        for at in [5usize, 40, 70, 100] {
            let damaged = MemStorage::new();
            damaged.set_file_bytes(segment, storage.file_bytes(segment).unwrap());
            damaged.flip_bit(segment, *position as usize + at, 2);
            assert_corruption_at(&damaged, segment, *position);
        }
    }
}

#[test]
fn bit_flip_in_an_older_segment_is_corruption() {
    // Enough chunks to fill several 64 KiB segments.
    let (storage, chunks) = synced_log(400);
    let segments: std::collections::BTreeSet<_> = chunks.iter().map(|c| c.0.clone()).collect();
    assert!(segments.len() >= 3, "the workload rotates");
    let first = segments.iter().next().unwrap();
    // The last chunk of the first segment: only the successor proves it was synced.
    let (segment, position) = chunks
        .iter()
        .filter(|c| &c.0 == first)
        .last()
        .unwrap()
        .clone();
    storage.flip_bit(&segment, position as usize + 80, 0);
    assert_corruption_at(&storage, &segment, position);
}

#[test]
fn damage_to_the_last_chunk_after_a_clean_close_is_corruption() {
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(append_records(&mut log, 12, 4)).unwrap();
    let last = log.chunks().last().unwrap();
    block_on(log.close()).unwrap();
    let segment = ringfeed_engine::segment::segment_name(last.segment);
    storage.flip_bit(&segment, last.entry.position as usize + 90, 1);
    assert_corruption_at(&storage, &segment, last.entry.position);
}

#[test]
fn a_clean_close_reopens_as_clean() {
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(append_records(&mut log, 12, 4)).unwrap();
    block_on(log.close()).unwrap();
    let (mut log, report) = open_mem(&storage, small_config()).unwrap();
    assert!(report.clean_close && report.truncated.is_none());
    block_on(append_records(&mut log, 3, 3)).unwrap();
    block_on(log.close()).unwrap();
    assert_records(
        &reopen_and_read(&storage, small_config()),
        &expected(0..15),
        "after two clean closes",
    );
}
