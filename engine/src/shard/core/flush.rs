//! The flush side of the core: when a round is due, the next I/O for the
//! flusher, and what each completion (write, sync, prepare, retention)
//! publishes and answers; latching, and the shard's stop.

use std::sync::atomic::Ordering;

use super::{FlushIo, Replies, ShardCore};
use crate::event::AppendError;
use crate::log::Log;
use crate::retention::RetentionOutcome;
use crate::segment::error::LogError;
use crate::storage::Storage;

impl<R> ShardCore<R> {
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
