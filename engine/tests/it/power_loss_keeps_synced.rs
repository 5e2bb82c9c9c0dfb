//! Simulated power loss at a random moment (every unsynced byte lost, or a
//! seeded arbitrary subset of the unsynced blocks kept): every record whose sync completed
//! is present after reopen, in order, with contiguous offsets; reopening ten
//! more times gives identical segment files (each open only starts a new
//! generation in the `generations` file). The workload rotates segments, so crashes
//! land inside rotations too. Half the seeds run with zeros written ahead of
//! the log's end (`MemStorage::set_zero_ahead`), so crashes land amid those
//! writes too.

use crate::common::*;
use ringfeed_engine::generation::GENERATIONS_FILE;
use ringfeed_engine::storage::{block_on, Faults, MemStorage};
use ringfeed_engine::{Generations, LogConfig};

fn config() -> LogConfig {
    LogConfig {
        shard: 0,
        segment_bytes: 16 << 10,
        max_unsynced_bytes: 4 << 10,
    }
}

/// Runs a random workload until it ends or a fault stops it; returns the
/// offset below which syncs were acknowledged.
fn workload(storage: &MemStorage, rng: &mut Rng, steps: u32, halt_after: Option<u64>) -> u64 {
    let (mut log, _) = open_mem(storage, config()).unwrap();
    storage.set_faults(Faults {
        halt_after_ops: halt_after,
        ..Faults::default()
    });
    let mut acked = 0;
    block_on(async {
        for _ in 0..steps {
            let result = if rng.below(3) == 0 {
                log.sync().await.map(|synced| acked = synced)
            } else {
                append_records(&mut log, 1 + rng.below(12), 1 + rng.below(5)).await
            };
            if result.is_err() {
                break;
            }
        }
    });
    acked
}

/// Zeros written ahead by `seed`'s runs: 4 KiB (small rounds get them) or none.
fn zero_ahead(seed: u64) -> usize {
    if seed.is_multiple_of(2) {
        4 << 10
    } else {
        0
    }
}

/// A fresh storage writing zeros ahead as `seed`'s runs do.
fn storage_for(seed: u64) -> MemStorage {
    let storage = MemStorage::new();
    storage.set_zero_ahead(zero_ahead(seed));
    storage
}

fn snapshot(storage: &MemStorage) -> Vec<(String, Vec<u8>)> {
    storage
        .names()
        .into_iter()
        .filter(|n| n != GENERATIONS_FILE)
        .map(|n| (n.clone(), storage.file_bytes(&n).unwrap()))
        .collect()
}

fn current_generation(storage: &MemStorage) -> u32 {
    let bytes = storage
        .file_bytes(GENERATIONS_FILE)
        .expect("a generations file");
    Generations::decode(&bytes).unwrap().current()
}

#[test]
fn synced_records_survive_power_loss() {
    for seed in seeds(40) {
        let mut rng = Rng::new(seed);
        // A fault-free run of the same workload says how many operations it makes.
        let probe = storage_for(seed);
        let mut probe_rng = Rng::new(seed);
        workload(&probe, &mut probe_rng, 60, None);
        let total_ops = probe.ops();
        if zero_ahead(seed) > 0 {
            // The same workload without them: the zeros were written.
            let plain = MemStorage::new();
            workload(&plain, &mut Rng::new(seed), 60, None);
            assert!(
                total_ops > plain.ops(),
                "seed {seed}: no zeros written ahead ({total_ops} operations, {} without)",
                plain.ops()
            );
        }

        let halt = rng.below(total_ops);
        // Both fault models: every unsynced byte lost, and a seeded subset of
        // the unsynced blocks kept (what real disks do).
        for keeping in [false, true] {
            let storage = storage_for(seed);
            let mut work_rng = Rng::new(seed);
            let acked = workload(&storage, &mut work_rng, 60, Some(halt));
            if keeping {
                storage.power_loss_keeping(seed);
            } else {
                storage.power_loss();
            }

            let what = format!(
                "seed {seed} (replay: RINGFEED_SEED={seed}), halt after op {halt} of {total_ops}, \
             unsynced blocks kept at random: {keeping}"
            );
            let first = reopen_and_read(&storage, config());
            assert!(
                first.len() as u64 >= acked,
                "{what}: {} records survived, {acked} were acked",
                first.len()
            );
            assert_records(&first, &expected(0..first.len() as u64), &what);
            let state = snapshot(&storage);
            let mut generation = current_generation(&storage);
            for round in 0..10 {
                let again = reopen_and_read(&storage, config());
                assert_records(&again, &first, &format!("{what}: reopen {round}"));
                assert!(
                    snapshot(&storage) == state,
                    "{what}: reopen {round} changed the segment files"
                );
                let next = current_generation(&storage);
                assert!(
                    next > generation,
                    "{what}: reopen {round} kept generation {generation}"
                );
                generation = next;
            }
        }
    }
}
