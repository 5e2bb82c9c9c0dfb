//! After a failed write or sync the log acknowledges nothing more until it is
//! reopened; reopening recovers what was synced.

use crate::common::*;
use ringfeed_engine::storage::{block_on, Faults, MemStorage};
use ringfeed_engine::LogError;

fn assert_latched<T: std::fmt::Debug>(result: Result<T, LogError>) {
    assert!(
        matches!(result, Err(LogError::Latched { .. })),
        "expected latched, got {result:?}"
    );
}

#[test]
fn failed_write_latches() {
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(async {
        append_records(&mut log, 8, 4).await.unwrap();
        log.sync().await.unwrap();
        storage.set_faults(Faults {
            fail_write: Some(0),
            ..Faults::default()
        });
        assert!(matches!(
            append_records(&mut log, 4, 4).await,
            Err(LogError::Io { .. })
        ));
        assert!(log.latched().is_some());
        assert_latched(append_records(&mut log, 4, 4).await);
        assert_latched(log.sync().await);
    });
    drop(log);
    assert_records(
        &reopen_and_read(&storage, small_config()),
        &expected(0..8),
        "after reopen",
    );
}

#[test]
fn failed_sync_latches_and_is_never_retried() {
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(async {
        append_records(&mut log, 8, 4).await.unwrap();
        storage.set_faults(Faults {
            fail_sync: Some(0),
            ..Faults::default()
        });
        assert!(matches!(log.sync().await, Err(LogError::Io { .. })));
        // A retried fsync could succeed and falsely report the lost pages durable.
        assert_latched(log.sync().await);
        assert_latched(append_records(&mut log, 4, 4).await);
    });
    assert_eq!(log.synced_offset(), 0, "nothing was acknowledged durable");
}
