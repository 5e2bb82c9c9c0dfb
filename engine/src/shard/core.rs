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

use crate::event::{AppendError, Position, Stored};
use crate::log::{ChunkImage, Log};
use crate::producer::{ProducerTable, Seen};
use crate::record;
use crate::retention::RetentionOutcome;
use crate::ring::{FlushRange, Ring};
use crate::segment::error::LogError;
use crate::storage::Storage;

use super::ShardShared;

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
    ) -> (ShardCore<R>, Vec<(u64, u64)>) {
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

    /// Judges each record of an idempotent producer's append against the
    /// table: its stamp and whether it is new or a duplicate. A stale one
    /// refuses the whole part (see `crate::producer`). A plain append is all new.
    pub fn judge(&self, records: &[u8], idempotent: bool) -> Result<Judged, AppendError> {
        let mut judged = Judged {
            seen: Vec::new(),
            new_bytes: 0,
            duplicates: 0,
        };
        if !idempotent {
            judged.new_bytes = records.len();
            return Ok(judged);
        }
        let mut at = 0;
        while at < records.len() {
            let index = judged.seen.len();
            let header = record::peek_header(&records[at..]).map_err(|_| AppendError::Invalid {
                index,
                field: "event",
                reason: "malformed framing".into(),
            })?;
            let Some(stamp) = header.producer else {
                return Err(AppendError::Invalid {
                    index,
                    field: "event",
                    reason: "framed without its producer stamp".into(),
                });
            };
            match self.producers.check(stamp) {
                Seen::Stale { last } => {
                    return Err(AppendError::StaleSequence {
                        producer_id: stamp.producer_id,
                        sequence: stamp.sequence,
                        shard: self.shared.id,
                        last,
                    })
                }
                seen @ Seen::Duplicate { .. } => {
                    judged.duplicates += 1;
                    judged.seen.push((stamp, seen));
                }
                seen => {
                    judged.new_bytes += header.len;
                    judged.seen.push((stamp, seen));
                }
            }
            at += header.len;
        }
        Ok(judged)
    }

    /// Whether the shard takes a judged append now (docs/design.md 2.11, 2.2): an
    /// append whose caller is gone is not applied (and counted); a latched
    /// shard refuses it; else it is staged if its new bytes fit under the
    /// unflushed bound ([`ShardCore::room`]), or waits for a flush. Decided in
    /// the same non-yielding step that stages it, so a caller that leaves
    /// while it waits is never applied later.
    pub fn admit(&mut self, judged: &Judged, caller_gone: bool) -> Admit {
        if caller_gone {
            self.shared.stats.abandoned.fetch_add(1, Ordering::Relaxed);
            return Admit::Abandoned;
        }
        if let Some(e) = self.latched_error() {
            return Admit::Refused(e);
        }
        if let Some(cause) = &self.no_space {
            return Admit::Refused(AppendError::DiskFull {
                shard: self.shared.id,
                cause: cause.clone(),
            });
        }
        match self.room(judged.new_bytes) {
            Ok(()) => Admit::Stage,
            Err(unflushed) => Admit::Wait { unflushed },
        }
    }

    /// Back-pressure: whether `bytes` more fit under the unflushed bound now.
    /// When they do not, the unflushed bytes, and a flush is wanted (the
    /// driver wakes the flusher and waits for the flushed watermark to move).
    pub fn room(&mut self, bytes: usize) -> Result<(), usize> {
        let unflushed = self.ring.unflushed_bytes();
        if bytes == 0 || unflushed == 0 || unflushed + bytes <= self.limits.max_unflushed_bytes {
            return Ok(());
        }
        self.flush_wanted = true;
        Err(unflushed)
    }

    /// Stamps, frames and publishes an append's records in one step: no event
    /// is ever stamped but invisible, and stamps strictly increase with
    /// offsets. `now_ns` is the clock's reading (one per batch: stamps within
    /// it are consecutive nanoseconds).
    pub fn stage(
        &mut self,
        records: &[u8],
        count: usize,
        judged: &Judged,
        now_ns: i64,
    ) -> Result<Staged, AppendError> {
        let shared = &*self.shared;
        let first_unflushed = self.ring.unflushed_bytes() == 0;
        let mut positions = Vec::with_capacity(count);
        let mut staged = 0usize;
        let mut duplicates_end = 0;
        let now = now_ns.max(shared.watermarks.fence() + 1);
        let mut at = 0;
        while at < records.len() {
            let Ok(len) = record::peek_len(&records[at..]) else {
                // The engine framed these records itself; refuse rather than panic.
                return Err(AppendError::Invalid {
                    index: positions.len(),
                    field: "event",
                    reason: "malformed framing".into(),
                });
            };
            let record = &records[at..at + len];
            at += len;
            let seen = judged.seen.get(positions.len()).copied();
            if let Some((_, Seen::Duplicate { offset, ts })) = seen {
                duplicates_end = duplicates_end.max(offset + 1);
                positions.push(Stored {
                    position: Position {
                        shard: shared.id,
                        offset,
                        ts,
                    },
                    duplicate: true,
                });
                continue;
            }
            let ts = now.max(self.last_ts + 1);
            let offset = self.ring.stage(record, ts);
            self.last_ts = ts;
            if let Some((stamp, _)) = seen {
                self.producers.record(stamp, offset, ts);
            }
            staged += len;
            positions.push(Stored {
                position: Position {
                    shard: shared.id,
                    offset,
                    ts,
                },
                duplicate: false,
            });
        }
        // Before the batch is visible: a merge that sees it may ask other shards
        // to claim its stamp, and they claim up to this at once.
        shared
            .stamped_high
            .fetch_max(self.last_ts, Ordering::AcqRel);
        self.ring.publish();
        let next = self.ring.next_offset();
        shared.watermarks.publish_committed(next, self.last_ts);
        // Windows flushed by earlier rounds leave now if the new ones took
        // the ring past its budget. Eviction used to wait for the next
        // round's sync, so while an fdatasync stalled the ring grew by up to
        // max_unflushed_bytes past ring_bytes (the simulator's 2.11 check
        // found it). They are durable and in the published index already.
        if self.ring.capacity_bytes() > self.limits.ring_bytes {
            let evicted = self.ring.evict();
            shared.watermarks.publish_evicted(evicted);
        }
        shared.publish_memory(&self.ring);
        let stats = &shared.stats;
        stats.appended.fetch_add(
            (positions.len() - judged.duplicates) as u64,
            Ordering::Relaxed,
        );
        stats
            .duplicates
            .fetch_add(judged.duplicates as u64, Ordering::Relaxed);
        stats
            .appended_bytes
            .fetch_add(staged as u64, Ordering::Relaxed);
        // Readers wake once per batch, never per event, and not by the shard.
        shared.announce();
        let window_full = self.ring.unflushed_bytes() >= self.limits.window_bytes;
        Ok(Staged {
            positions,
            // A duplicate is acknowledged as durable only once its original is.
            needed: if staged > 0 { next } else { duplicates_end },
            wake_flusher: self.flush_wanted || window_full,
            first_unflushed: first_unflushed && staged > 0,
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

    /// Whether a flush round should start now: bytes in no round yet, not
    /// latched, and a flush wanted (a durable waiter, back-pressure, the
    /// interval), closing, or a full window's worth.
    fn flush_due(&self) -> bool {
        let pending = self.ring.unplanned_bytes();
        self.latched.is_none()
            && !self.blocked
            && pending > 0
            && (self.flush_wanted || self.closing || pending >= self.limits.window_bytes)
    }

    // The simulator's probes (`crate::sim`).
    #[cfg(feature = "sim")]
    /// A durable waiter with no flush round under way or due: the flusher
    /// would sleep while someone waits for it (docs/design.md 2.13). Never true
    /// unless a rule here is broken; the simulator checks it after every step.
    pub fn parked_with_waiters(&self) -> bool {
        !self.waiters.is_empty()
            && self.latched.is_none()
            && !self.blocked
            && self.rounds.idle()
            && !self.flush_due()
    }

    /// Whether a sync handed out with [`FlushIo::Sync`] is still running.
    pub fn sync_running(&self) -> bool {
        self.rounds.syncing.is_some()
    }

    /// What the flusher should start next.
    pub fn next_io(&mut self) -> FlushIo {
        assert!(
            self.rounds.writing.is_none(),
            "the driver reports a round's write before asking again"
        );
        if self.latched.is_some() {
            // Nothing more is written or synced; a running sync is awaited.
            return if self.closing && !self.sync_running() {
                FlushIo::Stop
            } else {
                FlushIo::Wait
            };
        }
        if self.rounds.syncing.is_none() && !self.rounds.written.is_empty() {
            self.rounds.syncing = Some(std::mem::take(&mut self.rounds.written));
            return FlushIo::Sync;
        }
        if self.prepare_due {
            self.prepare_due = false;
            if self.no_space.is_some() {
                return FlushIo::Prepare;
            }
        }
        // A large round waits for the running sync instead of being written
        // beside it. What overlapping saves is the write's latency, which
        // for a large round the write's own sync dominates anyway, and on a
        // virtual disk the running sync (the host flushing its cache) then
        // also writes the new round back, so the acks it owes come later:
        // 1,024 × 4 KiB durable batches lost 8-10 % with every round
        // overlapped, while small rounds gained (docs/engine.md).
        let overlap_too_large =
            self.rounds.syncing.is_some() && self.ring.unplanned_bytes() > self.limits.window_bytes;
        if self.flush_due() && !overlap_too_large {
            self.flush_wanted = false;
            let plan = self
                .ring
                .flush_plan(self.shared.id, self.limits.round_bytes);
            self.ring.mark_planned(&plan);
            self.rounds.writing = Some(plan.clone());
            return FlushIo::Write(plan);
        }
        if !self.rounds.idle() {
            // A sync runs (written rounds would have started one above).
            return FlushIo::Wait;
        }
        if self.retention_due {
            self.retention_due = false;
            return FlushIo::Retention;
        }
        if self.closing {
            FlushIo::Stop
        } else {
            FlushIo::Wait
        }
    }

    /// The round's write completed; `no_space` is the log's word on the
    /// next segment ([`Log::no_space`]). A full disk refuses the round
    /// before any of it is written: it goes back to the ring, to be written
    /// once space returns, and appends are refused meanwhile. Any other
    /// failure latches the shard.
    pub fn written(&mut self, result: Result<(), LogError>, no_space: Option<&str>) -> Replies<R> {
        let plan = self
            .rounds
            .writing
            .take()
            .expect("a write completes only for a round handed out");
        match result {
            Ok(()) => {
                self.rounds.written.extend(plan);
                self.space(no_space);
                Replies::default()
            }
            Err(LogError::NoSpace { cause }) => {
                self.ring.unplan(&plan);
                self.blocked = true;
                self.space(Some(&cause));
                Replies::default()
            }
            Err(e) => self.latch(e.to_string()),
        }
    }

    /// A [`FlushIo::Prepare`] returned: on success appends are taken again
    /// and a round refused for want of space is written. A failure other
    /// than a full disk latches the shard.
    pub fn prepared(&mut self, result: Result<(), LogError>) -> Replies<R> {
        match result {
            Ok(()) => {
                self.space(None);
                Replies::default()
            }
            Err(LogError::NoSpace { cause }) => {
                self.space(Some(&cause));
                Replies::default()
            }
            Err(e) => self.latch(e.to_string()),
        }
    }

    /// Why appends are refused for want of disk space, while they are.
    pub fn no_space(&self) -> Option<&str> {
        self.no_space.as_deref()
    }

    /// The driver's retry timer (about once a second while the disk is
    /// full): the flusher should try the next segment again. True if it
    /// should be woken.
    pub fn space_retry_due(&mut self) -> bool {
        self.prepare_due = self.no_space.is_some();
        self.prepare_due
    }

    /// Records what the log last found of the disk's space, saying so when
    /// it changes.
    fn space(&mut self, no_space: Option<&str>) {
        let shared = &*self.shared;
        match (no_space, self.no_space.is_some()) {
            (Some(cause), false) => {
                tracing::error!(
                    shard = shared.id,
                    "shard {} refuses appends: the disk is full ({cause}); free space on it, \
                     and appends are taken again within a second once the next segment fits",
                    shared.id
                );
                shared.set_no_space(Some(cause.to_string()));
                self.no_space = Some(cause.to_string());
            }
            (None, true) => {
                tracing::info!(
                    shard = shared.id,
                    "shard {} takes appends again: the disk has room for its next segment",
                    shared.id
                );
                shared.set_no_space(None);
                self.no_space = None;
                if std::mem::take(&mut self.blocked) {
                    // The refused round's waiters are still waiting.
                    self.flush_wanted = true;
                }
            }
            _ => {}
        }
    }

    /// The running sync completed: on success everything up to `flushed_next`
    /// is durable (the rounds it covered, and maybe more: a write may have
    /// synced on its own to keep within the unsynced bound). Publishes, in this order, the index, the flushed watermark
    /// and what the ring evicted (a reader that finds an offset gone from the
    /// ring must find it covered by the flushed watermark, and its chunk in the
    /// index), then answers the durable waiters it satisfies. A failure
    /// latches the shard.
    pub fn synced<S: Storage>(
        &mut self,
        result: Result<u64, LogError>,
        log: &Log<S>,
    ) -> Replies<R> {
        let plan = self
            .rounds
            .syncing
            .take()
            .expect("a sync completes only once handed out");
        if self.latched.is_some() {
            // A write failed while it ran: every waiter has been answered.
            return Replies::default();
        }
        let flushed_next = match result {
            Ok(next) => next,
            Err(e) => return self.latch(e.to_string()),
        };
        self.ring.mark_flushed(&plan);
        let shared = &*self.shared;
        shared.publish_index(log);
        shared
            .watermarks
            .publish_flushed(flushed_next, log.last_ts().unwrap_or(0));
        let evicted = self.ring.evict();
        shared.watermarks.publish_evicted(evicted);
        shared.publish_memory(&self.ring);
        // Readers (durable-only ones, readers below the ring) and appends
        // waiting for room wake once per round.
        shared.flushed.notify(usize::MAX);
        shared.announce();
        let mut replies = Replies::default();
        while self
            .waiters
            .front()
            .is_some_and(|w| w.needed <= flushed_next)
        {
            replies
                .ok
                .push(self.waiters.pop_front().expect("checked").reply);
        }
        // A waiter this round did not cover (it needs bytes past the round's
        // plan) keeps a flush wanted: else, with less than a window left,
        // the flusher would sleep until the flush interval while it waits
        // (the simulator's 2.13 check found it, with syncs stalled).
        if !self.waiters.is_empty() {
            self.flush_wanted = true;
        }
        replies
    }

    /// Latches the shard on a failed write or sync: it acknowledges nothing
    /// more until the engine is reopened. Every durable waiter fails.
    fn latch(&mut self, cause: String) -> Replies<R> {
        let shared = &*self.shared;
        shared.stats.io_errors.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            shard = shared.id,
            %cause,
            "shard {} stopped on an I/O error: it acknowledges nothing more until the \
             server restarts; check the disk (dmesg, SMART) before restarting",
            shared.id
        );
        *shared.latched.lock().unwrap_or_else(|p| p.into_inner()) = Some(cause.clone());
        self.latched = Some(cause.clone());
        // Appends waiting for room and durable-only readers learn of it.
        shared.flushed.notify(usize::MAX);
        shared.announce();
        let mut replies = Replies::default();
        for waiter in self.waiters.drain(..) {
            replies.failed.push((
                waiter.reply,
                AppendError::Latched {
                    shard: shared.id,
                    cause: cause.clone(),
                },
            ));
        }
        replies
    }

    /// A retention pass removed whole old segments: readers learn the oldest
    /// retained offset, then see the trimmed index. With no chunk on disk
    /// (nothing flushed yet), that is the log's end, as at open: everything
    /// from there on is still in the ring. (It used to be the committed
    /// watermark, which declared the ring's unflushed events gone: readers
    /// from the beginning skipped them, and a cursor below was refused as
    /// below retention though nothing had been removed. The simulator found
    /// it: "2.7 retention removes only durable, whole segments".)
    pub fn retention_applied<S: Storage>(&mut self, outcome: &RetentionOutcome, log: &Log<S>) {
        let end = log.next_offset();
        self.shared
            .watermarks
            .publish_retained(outcome.retained.map_or(end, |r| r.0));
        self.shared.publish_index(log);
    }

    /// The shard stopped: every waiter left is told so.
    pub fn shut_down(&mut self) -> Replies<R> {
        let mut replies = Replies::default();
        for waiter in self.waiters.drain(..) {
            replies.failed.push((waiter.reply, AppendError::ShutDown));
        }
        replies
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
