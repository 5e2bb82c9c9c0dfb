//! A torn last chunk — cut at any byte, or with any header byte damaged —
//! recovers to the previous chunk boundary with every earlier record intact,
//! and the log continues from there.

use crate::common::*;
use ringfeed_engine::segment::SegmentHeader;
use ringfeed_engine::storage::{block_on, MemStorage};

/// A log of 6 chunks (5 records each) left by a crash, with the position and
/// length of the last chunk.
fn crashed_log() -> (MemStorage, String, u64, u64) {
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(async {
        for _ in 0..6 {
            append_records(&mut log, 5, 5).await.unwrap();
            log.sync().await.unwrap();
        }
    });
    let last = log.chunks().last().unwrap().entry;
    let name = log.segment_names().pop().unwrap();
    drop(log);
    storage.process_crash();
    (storage, name, last.position, u64::from(last.disk_len))
}

fn check_recovered_to(storage: &MemStorage, kept: u64, what: &str) {
    let (mut log, report) =
        open_mem(storage, small_config()).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_records(&block_on(read_all(&log)), &expected(0..kept), what);
    assert_eq!(report.next_offset, kept, "{what}");
    // The log continues at the boundary, and the continuation survives a reopen.
    block_on(async {
        append_records(&mut log, 7, 3).await.unwrap();
        log.sync().await.unwrap();
    });
    drop(log);
    let again = reopen_and_read(storage, small_config());
    assert_records(
        &again,
        &expected(0..kept + 7),
        &format!("{what}: continuation after recovery"),
    );
}

#[test]
fn cut_at_every_byte_of_the_last_chunk() {
    let (storage, name, position, len) = crashed_log();
    let full = storage.file_bytes(&name).unwrap();
    let header = ringfeed_engine::chunk::ChunkHeader::decode(&full[position as usize..]).unwrap();
    let body_end = position + 64 + u64::from(header.body_len);
    for cut in position..position + len {
        let damaged = MemStorage::new();
        damaged.set_file_bytes(&name, full[..cut as usize].to_vec());
        // A cut inside the padding leaves the chunk whole: it is kept.
        let kept = if cut < body_end { 25 } else { 30 };
        check_recovered_to(&damaged, kept, &format!("cut at byte {cut}"));
    }
}

#[test]
fn any_damaged_header_byte_of_the_last_chunk() {
    let (storage, name, position, _) = crashed_log();
    let full = storage.file_bytes(&name).unwrap();
    for byte in 0..64 {
        for pattern in [0x01u8, 0x80, 0xFF] {
            let mut bytes = full.clone();
            bytes[position as usize + byte] ^= pattern;
            let damaged = MemStorage::new();
            damaged.set_file_bytes(&name, bytes);
            check_recovered_to(&damaged, 25, &format!("header byte {byte} ^ {pattern:#x}"));
        }
    }
}

#[test]
fn torn_body_with_unsynced_residue_after_it() {
    // Two chunks written without a sync between: the first torn, the second
    // landed whole. Neither was acknowledged as durable, so both go.
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(async {
        append_records(&mut log, 10, 5).await.unwrap();
        log.sync().await.unwrap();
        append_records(&mut log, 10, 5).await.unwrap();
    });
    let chunks: Vec<_> = log.chunks().collect();
    let torn = chunks[2].entry;
    let name = log.segment_names().pop().unwrap();
    drop(log);
    storage.flip_bit(&name, torn.position as usize + 100, 3);
    let (log, report) = open_mem(&storage, small_config()).unwrap();
    assert_records(
        &block_on(read_all(&log)),
        &expected(0..10),
        "after the torn group",
    );
    let (_, tail) = report.truncated.expect("the torn tail is reported");
    assert_eq!((tail.position, tail.residue_chunks), (torn.position, 1));
    drop(log);
    // The residue was zeroed: a new chunk at the same offsets cannot be joined
    // by the stale second chunk on a later open.
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(append_records(&mut log, 5, 5)).unwrap();
    drop(log);
    assert_records(
        &reopen_and_read(&storage, small_config()),
        &expected(0..15),
        "after rewriting",
    );
}

/// A segment header claiming an unsynced bound near `u64::MAX` (it carries
/// its checksum, so recovery takes it) made the end of the residue scan past
/// a torn chunk overflow: a panic where overflow checks are on, a scan that
/// stopped short where they are off. The scan now ends at the end of the file.
#[test]
fn an_unsynced_bound_near_u64_max_is_scanned_to_the_end_of_the_file() {
    let (storage, name, position, _) = crashed_log();
    let mut bytes = storage.file_bytes(&name).unwrap();
    let mut header = SegmentHeader::decode(&bytes).unwrap();
    header.max_unsynced_bytes = u64::MAX;
    header.encode(&mut bytes);
    bytes[position as usize] ^= 0x01; // the last chunk's magic: a torn tail
    let damaged = MemStorage::new();
    damaged.set_file_bytes(&name, bytes);
    check_recovered_to(&damaged, 25, "an unsynced bound of u64::MAX");
}
