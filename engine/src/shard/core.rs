//! The shard's decisions as a plain state machine: no executor, no clock of
//! its own, no I/O.
//!
//! [`ShardCore`] takes commands (an append's records, a durable wait, a flush
//! request), clock readings and I/O completions, and answers with what to do
//! next ([`FlushIo`]) and who to answer ([`Replies`]). The glommio shard
//! (`super`) drives it on its core: it awaits the channel, the timers and the
//! log's writes and syncs, and hands each outcome back. The simulator
//! (`crate::sim`) drives the same core on one thread from a seed, over the
//! in-memory storage, so every rule here runs under its faults too.
//!
//! The order the invariants of docs/design.md section 2 need is kept here, not in
//! the drivers: a flush round is written, then synced, and only a completed
//! sync moves the flushed watermark and answers durable waiters; a window is
//! evicted only after the flushed watermark covering it is published; a
//! failed write or sync latches the shard. The core also wakes whoever waits
//! on the shard (readers, appends waiting for room) once per batch, round or
//! claim, so no driver can forget to.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::event::{AppendError, Stored};
use crate::log::{ChunkImage, Log};
use crate::producer::{ProducerTable, Seen};
use crate::record;
use crate::ring::{FlushRange, Ring};
use crate::storage::Storage;

use super::ShardShared;

mod append;
mod flush;

/// The sizes the core decides by.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CoreLimits {
    pub window_bytes: usize,
    pub ring_bytes: usize,
    pub max_unflushed_bytes: usize,
    /// Most bytes one flush round writes before it syncs.
    pub round_bytes: usize,
}

/// An append's records judged against the producer table before anything
/// waits or is staged.
pub(crate) struct Judged {
    /// Per record, in order, for an idempotent append; empty otherwise.
    seen: Vec<(record::ProducerStamp, Seen)>,
    /// Bytes of the records that will be staged (duplicates are not).
    pub new_bytes: usize,
    duplicates: usize,
}

/// Whether an append is taken now ([`ShardCore::admit`]).
pub(crate) enum Admit {
    /// Stage it now.
    Stage,
    /// Its caller is gone: not applied.
    Abandoned,
    /// The shard is latched, or the disk is full: answer this.
    Refused(AppendError),
    /// No room under the unflushed bound: wait for a flush (a flush is wanted).
    Wait { unflushed: usize },
}

/// What staging an append did.
pub(crate) struct Staged {
    pub positions: Vec<Stored>,
    /// The flushed watermark a durable ack of this append waits for.
    pub needed: u64,
    /// The flusher should look now (a flush is wanted or a window filled).
    pub wake_flusher: bool,
    /// These were the first unflushed bytes since the last flush: the flush
    /// interval starts now.
    pub first_unflushed: bool,
}

/// The next I/O the flusher should start. A round is written, then synced;
/// the next round's write may run while the last one's sync does (one write
/// and one sync at a time), so a sync's wait is not added to the next round's.
pub(crate) enum FlushIo {
    /// Write these window suffixes as chunks (one round), then report
    /// [`ShardCore::written`] before asking again. A running sync goes on.
    Write(Vec<FlushRange>),
    /// Start a sync of everything written so far; report
    /// [`ShardCore::synced`] when it returns. Meanwhile keep asking: the next
    /// write may be due.
    Sync,
    /// Apply retention (never while a sync runs).
    Retention,
    /// Try again to make the next segment's file (the disk was full), and
    /// report [`ShardCore::prepared`].
    Prepare,
    /// Nothing to start until woken, or until the running sync returns.
    Wait,
    /// Closing, nothing left and no sync running: close the log and stop.
    Stop,
}

/// Who to answer: waiters whose wait is over, and waiters that failed.
pub(crate) struct Replies<R> {
    pub ok: Vec<R>,
    pub failed: Vec<(R, AppendError)>,
}

impl<R> Default for Replies<R> {
    fn default() -> Replies<R> {
        Replies {
            ok: Vec::new(),
            failed: Vec::new(),
        }
    }
}

struct Waiter<R> {
    /// Answer once `flushed_next >= needed`.
    needed: u64,
    reply: R,
}

/// The rounds handed to the flusher and not yet durable, oldest last in
/// each step: they become durable in the order they were planned.
#[derive(Default)]
struct Rounds {
    /// Handed out with [`FlushIo::Write`]; its completion is awaited.
    writing: Option<Vec<FlushRange>>,
    /// Written, and no sync covering them started yet.
    written: Vec<FlushRange>,
    /// Covered by the sync handed out with [`FlushIo::Sync`], which runs.
    syncing: Option<Vec<FlushRange>>,
}

impl Rounds {
    fn idle(&self) -> bool {
        self.writing.is_none() && self.written.is_empty() && self.syncing.is_none()
    }
}

/// One shard's state and rules. `R` is whatever the driver answers a durable
/// waiter with (a reply channel on the real path, an id in the simulator).
pub(crate) struct ShardCore<R> {
    shared: Arc<ShardShared>,
    limits: CoreLimits,
    ring: Ring,
    last_ts: i64,
    producers: ProducerTable,
    waiters: VecDeque<Waiter<R>>,
    latched: Option<String>,
    /// The disk is full (the log could not make the next segment): appends
    /// are refused until a [`FlushIo::Prepare`] succeeds.
    no_space: Option<String>,
    /// A round was refused for want of the next segment and handed back to
    /// the ring: no round starts until space returns.
    blocked: bool,
    /// The driver's retry timer asked for a [`FlushIo::Prepare`].
    prepare_due: bool,
    flush_wanted: bool,
    retention_due: bool,
    closing: bool,
    rounds: Rounds,
}

impl<R> ShardCore<R> {
    /// A core over a just-opened log whose watermarks `shared` already holds.
    fn new(
        shared: Arc<ShardShared>,
        limits: CoreLimits,
        ring: Ring,
        last_ts: i64,
        producers: ProducerTable,
    ) -> ShardCore<R> {
        ShardCore {
            shared,
            limits,
            ring,
            last_ts,
            producers,
            waiters: VecDeque::new(),
            latched: None,
            no_space: None,
            blocked: false,
            prepare_due: false,
            flush_wanted: false,
            retention_due: false,
            closing: false,
            rounds: Rounds::default(),
        }
    }

    /// A core over a log just opened (recovered): publishes the log's
    /// watermarks and index in `shared` and takes its producer table. Also
    /// returns each producer's next expected sequence, for the engine.
    pub fn over_opened_log<S: Storage>(
        shared: Arc<ShardShared>,
        limits: CoreLimits,
        log: &mut Log<S>,
    ) -> (ShardCore<R>, Vec<crate::producer::ProducerHead>) {
        let next = log.next_offset();
        let last_ts = log.last_ts().unwrap_or(0);
        let w = &shared.watermarks;
        shared.stamped_high.fetch_max(last_ts, Ordering::AcqRel);
        w.publish_committed(next, last_ts);
        w.claim(last_ts);
        shared.publish_index(log);
        w.publish_flushed(next, last_ts);
        w.publish_evicted(next);
        w.publish_retained(log.retained().map_or(next, |r| r.0));
        let producers = log.take_producers();
        let heads = producers.heads().collect();
        let ring = Ring::new(
            limits.window_bytes,
            limits.ring_bytes,
            next,
            shared.ring.clone(),
        );
        (
            ShardCore::new(shared, limits, ring, last_ts, producers),
            heads,
        )
    }

    pub fn shared(&self) -> &ShardShared {
        &self.shared
    }

    pub fn shared_arc(&self) -> Arc<ShardShared> {
        self.shared.clone()
    }

    // The simulator's probes (`crate::sim`).
    #[cfg(feature = "sim")]
    pub fn last_ts(&self) -> i64 {
        self.last_ts
    }

    pub fn unflushed_bytes(&self) -> usize {
        self.ring.unflushed_bytes()
    }

    // The simulator's probes (`crate::sim`).
    #[cfg(feature = "sim")]
    /// The offset below which the ring holds no records.
    pub fn evicted_below(&self) -> u64 {
        self.ring.evicted_below()
    }

    pub fn is_latched(&self) -> bool {
        self.latched.is_some()
    }

    pub fn latched_error(&self) -> Option<AppendError> {
        self.latched.as_ref().map(|cause| AppendError::Latched {
            shard: self.shared.id,
            cause: cause.clone(),
        })
    }

    /// A durable wait for the flushed watermark to reach `needed`: the reply
    /// back at once if it has, else `None` (it comes with a later
    /// [`ShardCore::synced`]) and a flush is wanted.
    pub fn wait_durable(&mut self, needed: u64, reply: R) -> Option<R> {
        if needed <= self.shared.watermarks.flushed_next() {
            return Some(reply);
        }
        self.waiters.push_back(Waiter { needed, reply });
        self.flush_wanted = true;
        None
    }

    /// The flush interval passed with bytes unflushed: flush them. True if
    /// the flusher should be woken.
    pub fn flush_interval_passed(&mut self) -> bool {
        if self.ring.unflushed_bytes() == 0 {
            return false;
        }
        self.flush_wanted = true;
        true
    }

    /// Answers a merge's claim request (if any): claims "no future stamp at
    /// or below" the wanted stamp, or as far towards it as the shard can.
    /// Every stamp some shard already made visible is claimed at once,
    /// whatever the clock says: a clock stepped back must not stall merges
    /// for the length of the step, nor slow them to one event per claim
    /// (claiming only the wanted stamp did that: the simulator's liveness
    /// check found merges crawling one event per round trip while the clock
    /// was behind the stamps). Beyond that (an `until_ns` ahead of every
    /// stamp), the clock has to get there: then how far short, in ns, and the
    /// driver asks again when the clock may have arrived. Runs between
    /// commands, so no stamp is in progress: every stamp at or below the
    /// claim is already visible, and later ones are fenced above it.
    pub fn answer_claim(&mut self, now_ns: i64) -> Option<i64> {
        let shared = &*self.shared;
        let wanted = shared.watermarks.claim_wanted();
        if wanted == 0 {
            return None;
        }
        let reached = shared.stamped_high.load(Ordering::Acquire);
        let ts = now_ns.max(self.last_ts).max(reached);
        shared.watermarks.claim(ts);
        // Merges waiting on this shard's claim.
        shared.announce();
        if ts >= wanted {
            shared.watermarks.claim_answered(wanted);
            None
        } else {
            Some(wanted - ts)
        }
    }

    pub fn retention_due(&mut self) {
        self.retention_due = true;
    }

    /// No more commands: flush what is left, then stop.
    pub fn close(&mut self) {
        self.closing = true;
    }
}

/// The chunk images of a round's plan ([`FlushIo::Write`]), for the log's write.
pub(crate) fn chunk_images(plan: &[FlushRange]) -> Vec<ChunkImage<'_>> {
    plan.iter()
        .map(|r| ChunkImage {
            description: r.description,
            body: r.body(),
        })
        .collect()
}
