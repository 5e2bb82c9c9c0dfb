//! The shard's ticker task: the flush interval, claims for merges waiting
//! on the shard, retention passes and retries while the disk is full.

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::driver::Driver;

/// How often a shard whose disk is full tries again to make its next
/// segment: how long after space is freed appends are taken again.
const SPACE_RETRY: Duration = Duration::from_secs(1);

/// Flushes memory-acknowledged events a flush interval after they became
/// unflushed, answers claim requests of merges waiting on this shard, and runs
/// retention. It sleeps with a timer only while one of those is due later, so
/// an idle shard is never woken.
pub(super) async fn ticker(driver: Rc<Driver>) {
    let Driver {
        config,
        core,
        clock,
        wake_flusher,
        wake_ticker: wake,
    } = &*driver;
    let shared = core.borrow().shared_arc();
    /// Longest wait for the clock to reach a requested claim: bounds how late
    /// a claim comes if the clock is stepped while the shard waits.
    const MAX_CLAIM_WAIT: Duration = Duration::from_secs(1);
    /// Shortest: a clock that does not move (a test's manual clock) must not
    /// turn the wait into a spin.
    const MIN_CLAIM_WAIT: Duration = Duration::from_micros(50);
    let retains = config.retention.max_age.is_some() || config.retention.max_bytes.is_some();
    let mut next_retention = Instant::now() + config.retention_interval;
    let mut flush_due: Option<Instant> = None;
    // Set while a requested claim is above this shard's clock: claim again then.
    let mut claim_retry: Option<Instant> = None;
    // While the disk is full: when the flusher tries the next segment again.
    let mut space_retry: Option<Instant> = None;
    loop {
        // Listen before looking, so a wake-up between the look and the wait is kept.
        let local = wake.listen();
        let remote = shared.claim_requested.listen();
        let now = Instant::now();
        if core.borrow().unflushed_bytes() == 0 {
            flush_due = None;
        } else if flush_due.is_none() {
            flush_due = Some(now + config.flush_interval);
        }
        let claim_due = match shared.watermarks.claim_wanted() {
            0 => {
                claim_retry = None;
                None
            }
            _ => Some(claim_retry.unwrap_or(now)),
        };
        if core.borrow().no_space().is_none() {
            space_retry = None;
        } else if space_retry.is_none() {
            space_retry = Some(now + SPACE_RETRY);
        }
        let deadline = [
            flush_due,
            retains.then_some(next_retention),
            claim_due,
            space_retry,
        ]
        .into_iter()
        .flatten()
        .min();
        if deadline.is_none_or(|at| at > now) {
            let woken = futures_lite::future::or(local, remote);
            match deadline {
                Some(at) => {
                    let timer = async { glommio::timer::sleep(at - now).await };
                    futures_lite::future::or(woken, timer).await
                }
                None => woken.await,
            }
        }
        let now = Instant::now();
        let mut st = core.borrow_mut();
        let mut wake_flush = false;
        if flush_due.is_some_and(|due| due <= now) {
            flush_due = None;
            wake_flush = st.flush_interval_passed();
        }
        // Between commands on this core: see `ShardCore::answer_claim`.
        let wanted = shared.watermarks.claim_wanted();
        let claimed = wanted != 0 && claim_retry.is_none_or(|at| at <= now);
        if claimed {
            claim_retry = st.answer_claim(clock.now_ns()).map(|short| {
                let behind = Duration::from_nanos(short as u64);
                now + behind.clamp(MIN_CLAIM_WAIT, MAX_CLAIM_WAIT)
            });
        }
        if space_retry.is_some_and(|at| at <= now) {
            space_retry = None;
            wake_flush |= st.space_retry_due();
        }
        if retains && next_retention <= now {
            next_retention = now + config.retention_interval;
            st.retention_due();
            wake_flush = true;
        }
        drop(st);
        if wake_flush {
            wake_flusher.notify(usize::MAX);
        }
    }
}
