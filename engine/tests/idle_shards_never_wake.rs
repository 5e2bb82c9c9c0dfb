//! An idle shard sleeps until work arrives: no timer, poll or signal wakes
//! it. Before the glommio patch a shard woke every 10 ms twice over (a command
//! re-check and the ticker) and a kicker thread signalled it every 50 ms. A
//! shard that is woken counts a voluntary context switch when it sleeps again,
//! so its count must not move while nothing happens; then one append must
//! still be taken at once (the wake-up path works).

#[path = "it/common.rs"]
mod common;

use std::time::Duration;

use common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::Durability;

/// (tid, voluntary context switches) of this process's shard threads (each
/// executor and glommio's helper thread beside it carry the shard's name).
fn shard_switches() -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with("ringfeed-shard") {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let voluntary = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("voluntary_ctxt_switches in /proc/self/task/TID/status");
        let tid = dir.file_name().unwrap().to_str().unwrap().parse().unwrap();
        out.push((tid, voluntary));
    }
    out.sort_unstable();
    out
}

#[test]
fn idle_shards_sleep_until_an_append() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = [MemStorage::new(), MemStorage::new()];
    let engine = mem_engine(small_engine_config(2), &storages);
    // Some memory-acked appends, so the flush interval's timer runs once and
    // then must not be re-armed.
    for i in 0..20 {
        engine
            .append_blocking(vec![event(&format!("/idle/{i}"), i)], Durability::Memory)
            .unwrap();
    }
    wait_until(Duration::from_secs(10), "everything flushed", || {
        (0..2).all(|s| engine.shard(s).unflushed_bytes() == 0)
    });
    // Let the last wake-ups (the flush's completion, the ticker's last look) settle.
    std::thread::sleep(Duration::from_millis(100));
    let before = shard_switches();
    assert!(before.len() >= 2, "a thread per shard at least: {before:?}");
    // 50 flush intervals of the test config.
    std::thread::sleep(Duration::from_millis(250));
    let after = shard_switches();
    assert_eq!(
        before, after,
        "an idle shard thread woke up (tid, voluntary context switches)"
    );
    let p = engine
        .append_blocking(vec![event("/idle/after", 99)], Durability::Durable)
        .unwrap();
    assert_eq!(p.len(), 1);
}
