//! `idle-wakeups`: how often an idle `ringfeed serve` wakes up.
//!
//! Starts the real server binary (next to this one) with N shards, lets it
//! settle, then reads every thread's context switches (voluntary +
//! nonvoluntary, from `/proc/PID/task/TID/status`) before and after a quiet
//! window. A thread that sleeps until work arrives adds nothing; one woken by
//! a timer or a signal adds one voluntary switch per wake-up.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::systems::spawn_server;

/// (voluntary + nonvoluntary switches, thread name) per tid of `pid`.
fn switches(pid: u32) -> BTreeMap<u32, (u64, String)> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let field = |key: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        let name = status
            .lines()
            .find_map(|l| l.strip_prefix("Name:"))
            .unwrap_or("?")
            .trim()
            .to_owned();
        let total = field("voluntary_ctxt_switches:") + field("nonvoluntary_ctxt_switches:");
        out.insert(tid, (total, name));
    }
    out
}

pub fn run(dir: &Path, shards: u32, settle: Duration, window: Duration) -> Result<()> {
    if window.is_zero() {
        bail!("--seconds must be positive");
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let (server, addr) = spawn_server(&dir.join("data"), shards)?;
    let pid = server.pid();
    std::thread::sleep(settle);
    let before = switches(pid);
    std::thread::sleep(window);
    let after = switches(pid);
    drop(server);
    let _ = std::fs::remove_dir_all(dir);

    let seconds = window.as_secs_f64();
    println!(
        "# idle-wakeups: ringfeed serve --shards {shards} on {addr}, {:.0} s after {:.0} s to settle; \
         wake-ups = voluntary + nonvoluntary context switches per thread",
        seconds,
        settle.as_secs_f64()
    );
    println!(
        "{:>8} {:<18} {:>9} {:>10}",
        "tid", "thread", "wake-ups", "per s"
    );
    let mut total = 0;
    for (tid, (count, name)) in &after {
        // A thread born during the window counts from zero.
        let was = before.get(tid).map_or(0, |(c, _)| *c);
        let woke = count.saturating_sub(was);
        total += woke;
        println!(
            "{tid:>8} {name:<18} {woke:>9} {:>10.2}",
            woke as f64 / seconds
        );
    }
    println!(
        "total: {total} wake-ups in {seconds:.0} s = {:.2} per second ({} threads)",
        total as f64 / seconds,
        after.len()
    );
    Ok(())
}
