//! Starting a shard's executor: the glommio glue, kept apart from the
//! engine's and the shard's logic.
//!
//! One `LocalExecutor` per shard, on its own thread, pinned only when the
//! configuration names CPUs (tests run unbound), with a preempt timer short
//! enough that a busy command queue cannot hold finished I/O back.
//!
//! Where it bit: each time an executor went to sleep, stock glommio issued
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, an IPI to every CPU running
//! a thread of this process (a VM exit per CPU on a VM), so a shard sleeping
//! between single-event appends paid it per append. The vendored glommio uses
//! a fence pair instead (engine/vendor/PATCHES.md, patch 2).

use std::future::Future;
use std::time::Duration;

use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};

/// Longest a shard's busy command loop runs before glommio reaps I/O completions.
const SHARD_PREEMPT_TIMER: Duration = Duration::from_micros(500);

/// Where shard `id` runs: `cpus[id % len]` when CPUs are configured, else unbound.
pub(crate) fn placement(cpus: Option<&[usize]>, id: u32) -> Placement {
    match cpus {
        Some(cpus) if !cpus.is_empty() => Placement::Fixed(cpus[id as usize % cpus.len()]),
        _ => Placement::Unbound,
    }
}

/// Starts shard `id`'s executor thread running `run`.
pub(crate) fn spawn_shard<F, Fut>(
    id: u32,
    placement: Placement,
    run: F,
) -> Result<ExecutorJoinHandle<()>, String>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    LocalExecutorBuilder::new(placement)
        .name(&format!("ringfeed-shard-{id}"))
        // glommio polls for I/O completions between task-queue runs; a queue
        // kept busy by appends runs until this timer fires (100 ms by
        // default), which delayed every flush, and every durable ack, by up
        // to that long. Half a millisecond bounds the delay.
        .preempt_timer(SHARD_PREEMPT_TIMER)
        .spawn(run)
        .map_err(|e| e.to_string())
}
