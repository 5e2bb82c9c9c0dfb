//! The committed format fixtures keep opening as they did: a clean log, one
//! with a torn tail, and one with mid-log corruption. They pin the on-disk
//! format: a change that breaks them breaks every existing data dir.
//!
//! Regenerate (only on a deliberate format change) with
//! `cargo test -p ringfeed-engine --test it committed_fixtures_open -- --ignored regenerate`.

use std::path::PathBuf;

use crate::common::*;
use ringfeed_engine::storage::{block_on, MemStorage};
use ringfeed_engine::{LogConfig, RecoveryError};

fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn config() -> LogConfig {
    LogConfig {
        shard: 0,
        segment_bytes: 16 << 10,
        max_unsynced_bytes: 4 << 10,
    }
}

fn load(name: &str) -> MemStorage {
    MemStorage::load_dir(&fixture_dir(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

#[test]
fn clean_fixture_opens_whole() {
    let storage = load("clean");
    let (log, report) = open_mem(&storage, config()).unwrap();
    assert!(report.clean_close && report.truncated.is_none());
    assert_eq!(log.segment_names().len(), 2, "the fixture spans a rotation");
    assert_records(
        &block_on(read_all(&log)),
        &expected(0..120),
        "clean fixture",
    );
}

#[test]
fn torn_fixture_recovers_to_the_boundary() {
    let storage = load("torn-tail");
    let (log, report) = open_mem(&storage, config()).unwrap();
    let (_, torn) = report.truncated.expect("the torn tail is reported");
    assert_records(&block_on(read_all(&log)), &expected(0..115), "torn fixture");
    assert_eq!(torn.residue_chunks, 0);
}

#[test]
fn corrupt_fixture_is_refused() {
    let storage = load("corrupt");
    match open_mem(&storage, config()) {
        Err(RecoveryError::Corruption {
            segment, position, ..
        }) => {
            assert_eq!(segment, "00000000000000000000.seg");
            assert_eq!(
                position,
                4096 + 512,
                "the second chunk of the first segment"
            );
        }
        other => panic!(
            "expected corruption, got {:?}",
            other.map(|(l, _)| l.next_offset())
        ),
    }
}

#[test]
#[ignore = "rewrites the committed fixtures"]
fn regenerate() {
    // clean: 120 records in chunks of 5, one rotation, closed cleanly.
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, config()).unwrap();
    block_on(async {
        for _ in 0..24 {
            append_records(&mut log, 5, 5).await.unwrap();
            log.sync().await.unwrap();
        }
        log.close().await.unwrap();
    });
    save("clean", &storage);

    // torn-tail: the same log as a crash left it, the last chunk's body cut short.
    let torn = MemStorage::new();
    let (mut log, _) = open_mem(&torn, config()).unwrap();
    block_on(async {
        for _ in 0..24 {
            append_records(&mut log, 5, 5).await.unwrap();
            log.sync().await.unwrap();
        }
    });
    let last = log.chunks().last().unwrap();
    let name = ringfeed_engine::segment::segment_name(last.segment);
    drop(log);
    let mut bytes = torn.file_bytes(&name).unwrap();
    bytes.truncate(last.entry.position as usize + 100);
    torn.set_file_bytes(&name, bytes);
    save("torn-tail", &torn);

    // corrupt: the clean log with one bit flipped in the second chunk's body.
    let corrupt = load("clean");
    corrupt.flip_bit("00000000000000000000.seg", 4096 + 512 + 80, 4);
    save("corrupt", &corrupt);
}

fn save(name: &str, storage: &MemStorage) {
    let dir = fixture_dir(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    storage.save_dir(&dir).unwrap();
}
