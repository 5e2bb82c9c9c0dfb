//! The glommio side of a shard's command loop: the [`Driver`] its three
//! tasks share, appends (judged, held back for room, staged) and flush
//! requests, and the answers to durable waiters.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use event_listener::Event;

use super::core::{Admit, Judged, Replies, ShardCore};
use super::{AppendCommand, Reply, ShardConfig};
use crate::clock::Clock;
use crate::event::{AppendError, Durability, Stored};

/// What a durable waiter is answered with on the real path.
pub(super) enum DurableReply {
    Append(Reply<Result<Vec<Stored>, AppendError>>, Vec<Stored>),
    Flush(Reply<Result<(), AppendError>>),
}

impl DurableReply {
    fn send_ok(self) {
        // A caller that gave up waiting is not an error for the shard.
        match self {
            DurableReply::Append(reply, positions) => drop(reply.send(Ok(positions))),
            DurableReply::Flush(reply) => drop(reply.send(Ok(()))),
        }
    }

    fn send_err(self, error: AppendError) {
        match self {
            DurableReply::Append(reply, _) => drop(reply.send(Err(error))),
            DurableReply::Flush(reply) => drop(reply.send(Err(error))),
        }
    }
}

pub(super) fn answer(replies: Replies<DurableReply>) {
    for reply in replies.ok {
        reply.send_ok();
    }
    for (reply, error) in replies.failed {
        reply.send_err(error);
    }
}

/// The glommio side of a shard: its [`ShardCore`], the clock, and the events
/// its three tasks (command loop, flusher, ticker) wake each other with. The
/// core is borrowed only between awaits.
pub(super) struct Driver {
    pub(super) config: ShardConfig,
    pub(super) core: RefCell<ShardCore<DurableReply>>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) wake_flusher: Event,
    pub(super) wake_ticker: Event,
}

impl Driver {
    pub(super) fn flush(&self, reply: Reply<Result<(), AppendError>>) {
        let mut core = self.core.borrow_mut();
        if let Some(e) = core.latched_error() {
            let _ = reply.send(Err(e));
            return;
        }
        let needed = core.shared().watermarks.committed_next();
        if let Some(now) = core.wait_durable(needed, DurableReply::Flush(reply)) {
            now.send_ok();
            return;
        }
        drop(core);
        self.wake_flusher.notify(usize::MAX);
    }

    pub(super) async fn append(&self, command: AppendCommand) {
        let AppendCommand {
            records,
            count,
            durability,
            arrived,
            idempotent,
            reply,
        } = command;
        // Idempotent producers: every event is judged before any waits or is
        // staged, so a stale one refuses this shard's part whole, and a retry
        // of events already stored is answered without waiting for room it
        // does not need. (The table cannot change before this append is
        // staged: the command loop takes one append at a time.)
        let judged = match self.core.borrow().judge(&records, idempotent) {
            Ok(judged) => judged,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        if !self.wait_for_room(&judged, arrived, &reply).await {
            return;
        }

        // Stamp, frame and publish in one step that never yields.
        let step = Instant::now();
        let mut core = self.core.borrow_mut();
        let staged = match core.stage(&records, count, &judged, self.clock.now_ns()) {
            Ok(staged) => staged,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let shared = core.shared();
        shared
            .stats
            .append_ns
            .fetch_add(step.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let mut wake_flusher = staged.wake_flusher;
        match durability {
            Durability::Memory => drop(reply.send(Ok(staged.positions))),
            Durability::Durable => {
                let waiting = DurableReply::Append(reply, staged.positions);
                match core.wait_durable(staged.needed, waiting) {
                    Some(now) => now.send_ok(),
                    None => wake_flusher = true,
                }
            }
        }
        drop(core);
        if wake_flusher {
            self.wake_flusher.notify(usize::MAX);
        }
        if staged.first_unflushed {
            // The first unflushed bytes since the last flush: the ticker starts
            // the flush interval's clock.
            self.wake_ticker.notify(usize::MAX);
        }
    }

    /// Back-pressure: waits while `bytes` more would push unflushed bytes past
    /// the bound, at most `append_timeout` since the append arrived (not since
    /// this shard took it: time queued behind other commands counts). False
    /// when the append is not to be applied (answered, or its caller gone).
    async fn wait_for_room(
        &self,
        judged: &Judged,
        arrived: Instant,
        reply: &Reply<Result<Vec<Stored>, AppendError>>,
    ) -> bool {
        let config = &self.config;
        loop {
            let listener = self.core.borrow().shared().flushed.listen();
            {
                let mut core = self.core.borrow_mut();
                // The caller's presence is read in the same non-yielding step
                // that stages the batch (when there is room).
                let unflushed = match core.admit(judged, reply.is_disconnected()) {
                    Admit::Stage => return true,
                    Admit::Abandoned => return false,
                    Admit::Refused(e) => {
                        let _ = reply.send(Err(e));
                        return false;
                    }
                    Admit::Wait { unflushed } => unflushed,
                };
                let waited = arrived.elapsed();
                if waited >= config.append_timeout {
                    let _ = reply.send(Err(AppendError::ResourceExhausted {
                        shard: core.shared().id,
                        unflushed,
                        limit: config.max_unflushed_bytes,
                        waited,
                    }));
                    return false;
                }
            }
            self.wake_flusher.notify(usize::MAX);
            let remaining = config.append_timeout.saturating_sub(arrived.elapsed());
            futures_lite::future::or(listener, glommio::timer::sleep(remaining)).await;
        }
    }
}
