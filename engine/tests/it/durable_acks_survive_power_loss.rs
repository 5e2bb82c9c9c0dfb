//! Durable acknowledgements mean it: with the fault-injecting backend halting
//! all I/O at a random moment and then dropping every unsynced byte, every
//! event acknowledged as durable is present after reopen, offsets contiguous
//! and stamps increasing.

use crate::common::*;
use ringfeed_engine::storage::{Faults, MemStorage};
use ringfeed_engine::Durability;

#[test]
fn acked_durable_events_survive() {
    let _watchdog = ringfeed_testkit::arm();
    for seed in seeds(12) {
        let mut rng = Rng::new(seed);
        let what = format!("seed {seed} (replay: RINGFEED_SEED={seed})");
        let storages = vec![MemStorage::new(), MemStorage::new()];
        let engine = mem_engine(small_engine_config(2), &storages);
        // Halt the storage of each shard after a random number of operations.
        for s in &storages {
            s.set_faults(Faults {
                halt_after_ops: Some(20 + rng.below(300)),
                ..Faults::default()
            });
        }
        let mut acked = Vec::new();
        let mut id = 0u64;
        for _ in 0..400 {
            let batch: Vec<_> = (0..1 + rng.below(20))
                .map(|_| {
                    id += 1;
                    event(&format!("/d{}", id % 7), id)
                })
                .collect();
            let payloads: Vec<_> = batch.iter().map(|e| e.payload.clone()).collect();
            match engine.append_blocking(batch, Durability::Durable) {
                Ok(positions) => acked.extend(positions.into_iter().zip(payloads)),
                Err(_) => {
                    if (0..2).all(|s| engine.shard(s).latched().is_some()) {
                        break;
                    }
                }
            }
        }
        drop(engine);
        // Odd seeds: a seeded subset of the unsynced blocks survives.
        for s in &storages {
            if seed % 2 == 1 {
                s.power_loss_keeping(seed);
            } else {
                s.power_loss();
            }
        }
        for (shard, storage) in storages.iter().enumerate() {
            let records = stored_records(storage, shard as u32);
            assert_dense_log(&records, &format!("{what}: shard {shard}"));
            for (position, payload) in acked.iter().filter(|(p, _)| p.shard == shard as u32) {
                let r = records.get(position.offset as usize).unwrap_or_else(|| {
                    panic!(
                        "{what}: acked {position:?} lost ({} records survived)",
                        records.len()
                    )
                });
                assert_eq!(
                    (r.1, &r.2),
                    (position.ts, &payload.to_vec()),
                    "{what}: acked {position:?} changed"
                );
            }
        }
        assert!(
            !acked.is_empty(),
            "{what}: the workload acknowledged something before the halt"
        );
    }
}
