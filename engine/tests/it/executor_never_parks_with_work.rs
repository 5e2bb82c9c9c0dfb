//! Regression for glommio 0.9.0's park race (engine/vendor/PATCHES.md).
//!
//! What went wrong: `LocalExecutor::run` arms the preempt timer in `poll_io`,
//! then `run_task_queues` checks `need_preempt()` before running any queue. If
//! the timer had already fired by then (the thread was descheduled for longer
//! than the timer, common on a loaded 2-vCPU VM), it reported "nothing ran",
//! and the executor parked in `io_uring_enter` with no time limit while a
//! runnable task sat in its queue: the engine hung at open, or stalled mid-run.
//!
//! A preempt timer of one microsecond makes "the timer fired before the first
//! queue ran" the common case instead of a rare one, so an unpatched executor
//! hangs within a few iterations. Each executor must finish; a hang fails the
//! test after a bound, naming the case, instead of hanging the suite.

use std::sync::mpsc;
use std::time::Duration;

use glommio::{LocalExecutorBuilder, Placement};

/// Far above what any case needs (milliseconds), far below CI's patience.
const BOUND: Duration = Duration::from_secs(20);

/// Runs `work` on a fresh executor with a tiny preempt timer; fails if it does
/// not finish within `BOUND`.
fn must_finish<F, Fut>(case: &str, work: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let (done, finished) = mpsc::channel();
    let handle = LocalExecutorBuilder::new(Placement::Unbound)
        .name(case)
        .preempt_timer(Duration::from_micros(1))
        .spawn(move || async move {
            work().await;
            let _ = done.send(());
        })
        .expect("an executor starts");
    match finished.recv_timeout(BOUND) {
        Ok(()) => handle.join().expect("the executor thread exits cleanly"),
        // The executor is parked for good; its thread is left behind (it
        // cannot be woken from here), and the test fails.
        Err(_) => panic!(
            "{case}: the executor did not finish within {BOUND:?}: it parked with a runnable task"
        ),
    }
}

/// The engine's startup shape: the executor's first task is ready at once.
#[test]
fn first_task_runs_with_a_tiny_preempt_timer() {
    let _watchdog = ringfeed_testkit::arm();
    for i in 0..200 {
        must_finish(&format!("first-task-{i}"), || async {});
    }
}

/// A shard's steady state: tasks that spawn, yield and wake each other, so
/// the run loop passes the preempt check with queued work thousands of times.
#[test]
fn spawning_and_yielding_tasks_all_finish() {
    let _watchdog = ringfeed_testkit::arm();
    for i in 0..20 {
        must_finish(&format!("spawn-yield-{i}"), || async {
            for _ in 0..2_000 {
                let child = glommio::spawn_local(async {
                    glommio::yield_if_needed().await;
                    1u64
                });
                futures_lite::future::yield_now().await;
                assert_eq!(child.await, 1);
            }
        });
    }
}

/// Wake-ups from another thread (how appends reach a shard) while the
/// executor keeps being preempted: every one must be picked up.
#[test]
fn foreign_wakeups_are_never_slept_through() {
    let _watchdog = ringfeed_testkit::arm();
    for i in 0..20 {
        let (tx, rx) = flume::bounded::<u64>(1);
        let producer = std::thread::spawn(move || {
            for n in 0..2_000u64 {
                if tx.send(n).is_err() {
                    return;
                }
            }
        });
        must_finish(&format!("foreign-wake-{i}"), move || async move {
            for n in 0..2_000u64 {
                assert_eq!(rx.recv_async().await, Ok(n));
                futures_lite::future::yield_now().await;
            }
        });
        producer.join().expect("the producer finishes");
    }
}
