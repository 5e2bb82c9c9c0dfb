//! Two ways recovery used to hide damage or leave it behind:
//!
//! - A lost write in a segment synced in full (its last chunk's first block
//!   reads as zeros, the chunk's later blocks are there) was taken for a torn
//!   tail: the rest of the segment was zeroed, and the open then failed with
//!   `Gap`. It is corruption of synced data: reported, nothing overwritten.
//! - After a clean close, a torn write of a later chunk was not scanned (the
//!   seal short-cut recovery), so its residue stayed on disk, contrary to
//!   docs/format.md. It is cut and zeroed like any torn tail.

use crate::common::*;
use ringfeed_engine::segment::segment_name;
use ringfeed_engine::storage::{block_on, MemStorage};
use ringfeed_engine::RecoveryError;

const BLOCK: usize = 512;

#[test]
fn a_lost_write_in_a_fully_synced_segment_is_corruption_and_nothing_is_overwritten() {
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(async {
        while log.segment_names().len() < 2 {
            append_records(&mut log, 8, 8).await.unwrap();
            log.sync().await.unwrap();
        }
        append_records(&mut log, 8, 8).await.unwrap();
        log.sync().await.unwrap();
    });
    let first = log.segment_names()[0].clone();
    let last = log
        .chunks()
        .filter(|c| segment_name(c.segment) == first)
        .last()
        .expect("the first segment holds chunks");
    drop(log);
    assert!(
        last.entry.disk_len as usize > BLOCK,
        "the chunk spans blocks ({} bytes)",
        last.entry.disk_len
    );
    let mut bytes = storage.file_bytes(&first).unwrap();
    let at = last.entry.position as usize;
    bytes[at..at + BLOCK].fill(0);
    storage.set_file_bytes(&first, bytes.clone());

    match open_mem(&storage, small_config()) {
        Err(RecoveryError::Corruption {
            segment, position, ..
        }) => assert_eq!((segment.as_str(), position), (first.as_str(), at as u64)),
        Err(other) => panic!("expected corruption at {first}:{at}, got {other}"),
        Ok((log, _)) => panic!("opened with {} records", log.next_offset()),
    }
    assert!(
        storage.file_bytes(&first).unwrap() == bytes,
        "the failed open overwrote the damaged segment"
    );
}

#[test]
fn a_torn_write_after_a_clean_close_is_cut_and_zeroed() {
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(async {
        append_records(&mut log, 4, 4).await.unwrap();
        log.close().await.unwrap();
    });
    let (mut log, report) = open_mem(&storage, small_config()).unwrap();
    assert!(report.clean_close);
    block_on(append_records(&mut log, 8, 8)).unwrap(); // written, never synced
    let torn = log.chunks().last().unwrap();
    assert!(torn.entry.disk_len as usize > BLOCK);
    drop(log); // a process crash: the unsynced chunk stays as written
    let name = segment_name(torn.segment);
    let mut bytes = storage.file_bytes(&name).unwrap();
    let at = torn.entry.position as usize;
    let end = at + torn.entry.disk_len as usize;
    bytes[at..at + BLOCK].fill(0); // its first block never reached the disk
    storage.set_file_bytes(&name, bytes);

    let (log, report) = open_mem(&storage, small_config()).unwrap();
    assert_eq!(log.next_offset(), 4);
    let (segment, tail) = report.truncated.expect("the torn write is reported");
    assert_eq!(
        (segment.as_str(), tail.position),
        (name.as_str(), at as u64)
    );
    let after = storage.file_bytes(&name).unwrap();
    assert!(
        after[at..end].iter().all(|&b| b == 0),
        "the torn chunk's residue is zeroed"
    );
}
