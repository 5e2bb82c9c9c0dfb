//! Open, append, close, again and again, on real O_DIRECT storage: every
//! cycle must finish. This is where glommio's park race hung the engine at
//! open (engine/vendor/PATCHES.md): a freshly started shard thread parked
//! before its first task ran. `bench/scripts/hang-loop.sh` runs this file
//! (and `data_dir_meta_and_reopen`) thousands of times; here it runs a
//! bounded number of cycles under the watchdog.

use crate::common::*;
use ringfeed_engine::{Durability, Engine, EngineConfig};

/// Cycles per run: `RINGFEED_STRESS_CYCLES` sets another count.
fn cycles() -> u64 {
    std::env::var("RINGFEED_STRESS_CYCLES").map_or(40, |c| {
        c.parse().expect("RINGFEED_STRESS_CYCLES is a whole number")
    })
}

#[test]
fn open_append_close_repeated() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::Builder::new()
        .prefix("engine-stress-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let config = EngineConfig {
        data_dir: dir.path().to_path_buf(),
        ..small_engine_config(2)
    };
    let mut appended = 0u64;
    for cycle in 0..cycles() {
        let engine = Engine::open(config.clone()).expect("the engine opens");
        let reopened: u64 = engine
            .recovery_reports()
            .iter()
            .map(|r| r.next_offset)
            .sum();
        assert_eq!(reopened, appended, "cycle {cycle}: every event came back");
        let batch = (0..8)
            .map(|i| event(&format!("/s/{i}"), appended + i))
            .collect();
        let durability = if cycle % 2 == 0 {
            Durability::Memory
        } else {
            Durability::Durable
        };
        let positions = engine.append_blocking(batch, durability).unwrap();
        appended += positions.len() as u64;
        engine.shutdown().expect("the engine closes");
    }
}
