//! The shard's flusher task: writes the core's flush rounds, runs their
//! syncs beside it, applies retention, and accounts for each round.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::core::{chunk_images, FlushIo, ShardCore};
use super::driver::{answer, Driver, DurableReply};
use super::ShardShared;
use crate::log::{Log, SyncTicket};
use crate::rate_limit::RateLimit;
use crate::storage::Storage;

/// An fdatasync slower than this is worth a warning: a healthy SSD syncs in
/// well under a millisecond, and durable acks wait for it.
const SLOW_FSYNC: Duration = Duration::from_millis(100);
/// Slow-fsync warnings of every shard share one limit.
static SLOW_FSYNC_WARNINGS: RateLimit = RateLimit::new(Duration::from_secs(10));

/// Does the core's flush I/O: writes a round's chunks, syncs, applies
/// retention, and hands each completion back; sleeps while the core has
/// nothing to do. A sync runs as a task of its own beside the flusher, so the
/// next round's write goes on while the disk syncs the last one.
pub(super) async fn flusher<S: Storage + 'static>(mut log: Log<S>, driver: Rc<Driver>) {
    let Driver {
        config,
        core,
        wake_flusher: wake,
        ..
    } = &*driver;
    let shared = core.borrow().shared_arc();
    // Rounds written and not yet covered by a running sync, then those the
    // running sync covers: (started, bytes), for their figures once durable.
    let mut written: Vec<(Instant, u64)> = Vec::new();
    let mut syncing: Option<(Vec<(Instant, u64)>, SyncTask<S>)> = None;
    loop {
        let listener = wake.listen();
        if let Some((_, task)) = &mut syncing {
            if let Some(done) = futures_lite::future::poll_once(task).await {
                let (rounds, _) = syncing.take().expect("checked");
                synced(&shared, core, &mut log, rounds, done);
            }
        }
        let next = core.borrow_mut().next_io();
        match next {
            FlushIo::Write(plan) => {
                let started = Instant::now();
                let bytes = plan.iter().map(|r| (r.to - r.from) as u64).sum();
                let result = log.append_chunks(&chunk_images(&plan)).await;
                drop(plan);
                let failed = result.is_err();
                answer(core.borrow_mut().written(result, log.no_space()));
                if failed {
                    end_round(&shared, started, bytes);
                } else {
                    written.push((started, bytes));
                }
            }
            FlushIo::Sync => {
                let rounds = std::mem::take(&mut written);
                match log.begin_sync() {
                    Ok(ticket) => {
                        let task = glommio::spawn_local(async move {
                            let started = Instant::now();
                            let result = ticket.run().await;
                            (ticket, result, started.elapsed())
                        });
                        syncing = Some((rounds, task));
                    }
                    Err(e) => {
                        let replies = core.borrow_mut().synced(Err(e), &log);
                        answer(replies);
                    }
                }
            }
            FlushIo::Retention => {
                let now = crate::clock::now_ns();
                let keep_from = match config.retention.keep_until_uploaded {
                    true => shared.uploaded_below(),
                    false => u64::MAX,
                };
                if let Ok(outcome) = log.apply_retention(config.retention, now, keep_from).await {
                    core.borrow_mut().retention_applied(&outcome, &log);
                }
                shared
                    .stats
                    .retention_passes
                    .fetch_add(1, Ordering::Relaxed);
            }
            FlushIo::Prepare => {
                let result = log.prepare_next().await;
                answer(core.borrow_mut().prepared(result));
            }
            FlushIo::Wait => match syncing.take() {
                None => listener.await,
                Some((rounds, mut task)) => {
                    // Whichever comes first: the sync returns, or work to start.
                    let done = futures_lite::future::or(async { Some((&mut task).await) }, async {
                        listener.await;
                        None
                    })
                    .await;
                    match done {
                        Some(done) => synced(&shared, core, &mut log, rounds, done),
                        None => syncing = Some((rounds, task)),
                    }
                }
            },
            FlushIo::Stop => break,
        }
    }
    if !core.borrow().is_latched() {
        let _ = log.close().await;
    }
    // Anyone still waiting is told the shard is gone.
    let replies = core.borrow_mut().shut_down();
    answer(replies);
}

/// A sync running beside the flusher ([`Log::begin_sync`]).
type SyncTask<S> = glommio::Task<SyncDone<S>>;
/// A sync's ticket, outcome and duration.
type SyncDone<S> = (
    SyncTicket<<S as Storage>::File>,
    std::io::Result<()>,
    Duration,
);

/// The running sync returned: its figures, then the log's and the core's
/// account of it, and the durable waiters it satisfies answered.
fn synced<S: Storage>(
    shared: &ShardShared,
    core: &RefCell<ShardCore<DurableReply>>,
    log: &mut Log<S>,
    rounds: Vec<(Instant, u64)>,
    (ticket, result, fsync): SyncDone<S>,
) {
    shared.stats.fsync_latency.record(fsync);
    if fsync >= SLOW_FSYNC {
        warn_slow_fsync(shared.id, fsync);
    }
    for (started, bytes) in rounds {
        end_round(shared, started, bytes);
    }
    let flushed = log.finish_sync(ticket, result);
    let replies = core.borrow_mut().synced(flushed, log);
    answer(replies);
}

/// A flush round's figures, once it has ended (synced, or failed).
fn end_round(shared: &ShardShared, started: Instant, bytes: u64) {
    let stats = &shared.stats;
    stats.flush_latency.record(started.elapsed());
    stats.rounds.fetch_add(1, Ordering::Relaxed);
    stats.bytes.fetch_add(bytes, Ordering::Relaxed);
    stats
        .busy_ns
        .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// Tells the operator the disk is slow and what to look at, at most once per
/// 10 s over all shards.
fn warn_slow_fsync(shard: u32, took: Duration) {
    if let Some(suppressed) = SLOW_FSYNC_WARNINGS.check() {
        tracing::warn!(
            shard,
            fsync_ms = took.as_millis() as u64,
            suppressed,
            "disk is slow: fdatasync on shard {shard} took {} ms, and durable acks wait for it; \
             check the disk's load and health (iostat -x, dmesg), that the data dir is on a \
             local SSD rather than a network or shared volume, and `ringfeed tune calibrate`",
            took.as_millis()
        );
    }
}
