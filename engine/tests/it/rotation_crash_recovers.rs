//! A crash at every single storage operation of a workload that rotates
//! segments — process crash or power loss — always reopens, keeps every
//! acknowledged record, and the log continues; a record acknowledged right
//! after that reopen survives a later power loss.

use crate::common::*;
use ringfeed_engine::storage::{block_on, Faults, MemStorage};
use ringfeed_engine::LogConfig;

fn config() -> LogConfig {
    LogConfig {
        shard: 0,
        segment_bytes: 8 << 10,
        max_unsynced_bytes: 2 << 10,
    }
}

/// Appends and syncs chunk by chunk until done or stopped; returns the acked offset.
fn workload(storage: &MemStorage, halt_after: Option<u64>) -> u64 {
    let (mut log, _) = open_mem(storage, config()).unwrap();
    storage.set_faults(Faults {
        halt_after_ops: halt_after,
        ..Faults::default()
    });
    let mut acked = 0;
    block_on(async {
        for _ in 0..40 {
            if append_records(&mut log, 4, 4).await.is_err() {
                return;
            }
            match log.sync().await {
                Ok(synced) => acked = synced,
                Err(_) => return,
            }
        }
    });
    acked
}

#[test]
fn crash_at_every_operation() {
    let probe = MemStorage::new();
    workload(&probe, None);
    let total_ops = probe.ops();
    let (log, _) = open_mem(&probe, config()).unwrap();
    assert!(
        log.segment_names().len() >= 4,
        "the workload rotates segments"
    );
    drop(log);

    for halt in 0..=total_ops {
        for crash in [
            "process crash",
            "power loss",
            "power loss keeping some blocks",
        ] {
            let storage = MemStorage::new();
            let acked = workload(&storage, Some(halt));
            match crash {
                "process crash" => storage.process_crash(),
                "power loss" => storage.power_loss(),
                _ => storage.power_loss_keeping(halt),
            }
            let what = format!("halt after op {halt} of {total_ops}, {crash}");
            let (mut log, _) =
                open_mem(&storage, config()).unwrap_or_else(|e| panic!("{what}: {e}"));
            let records = block_on(read_all(&log));
            assert!(records.len() as u64 >= acked, "{what}: lost acked records");
            assert_records(&records, &expected(0..records.len() as u64), &what);
            assert!(
                storage
                    .names()
                    .iter()
                    .all(|n| n.ends_with(".seg") || n == "generations"),
                "{what}: leftovers {:?}",
                storage.names()
            );
            // One durable record acknowledged right after the reopen survives
            // a power loss: every name it depends on was made durable at open
            // (a rename whose directory sync the crash cut off must not be
            // undone by the power loss after the ack).
            block_on(async {
                append_records(&mut log, 1, 1).await.unwrap();
                log.sync().await.unwrap();
            });
            drop(log);
            storage.power_loss();
            let (mut log, _) = open_mem(&storage, config())
                .unwrap_or_else(|e| panic!("{what}: after a power loss: {e}"));
            let kept = records.len() as u64 + 1;
            assert_records(
                &block_on(read_all(&log)),
                &expected(0..kept),
                &format!("{what}: acknowledged after the reopen, then power loss"),
            );
            block_on(async {
                append_records(&mut log, 30, 3).await.unwrap();
                log.sync().await.unwrap();
            });
            drop(log);
            assert_records(
                &reopen_and_read(&storage, config()),
                &expected(0..kept + 30),
                &format!("{what}: continued"),
            );
        }
    }
}
