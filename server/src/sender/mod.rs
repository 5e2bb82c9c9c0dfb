//! One subscription stream's sender: reads the engine subscription, packs
//! responses and hands them to the gRPC stream through a small bounded queue.
//!
//! - Reading and sending overlap: this task fills the queue while the
//!   transport frames and writes earlier responses. The queue holds at most
//!   `queue_responses` responses, each at most a batch or a chunk, as views of
//!   ring windows or segment mappings (never copies); the HTTP/2 stream's flow
//!   control is the backpressure, and a stalled client costs its share of the
//!   response budget (below) until `stall_timeout`, then gives it back.
//! - Batching (when the client allows batches): a response carries every
//!   event its subscription has ready at once, up to `batch_max_events` and
//!   `batch_max_bytes`: a subscriber behind the feed gets full batches, one at
//!   the live edge gets what arrived since its last response (usually one
//!   event, sent as a single `Event`). Waiting for more never happens, so
//!   batching adds no latency, and under fan-out load each subscriber's wake-up
//!   carries all it missed in one response instead of one per event (it used to
//!   batch only when more than `batch_min_ready` events or `batch_behind` of
//!   stamps behind, and sent ready events one by one otherwise: 1,000 live
//!   subscribers then oscillated around 64 events of lag). Heartbeats and
//!   markers are never batched (they are separate response items).
//! - Chunk mode: sealed runs of stored records go out verbatim until the
//!   reader reaches the live edge, then a `ChunkModeEnd` marker, then events.
//! - Admission: while a subscription reads below the ring (segment files), it
//!   holds one of `backlog_readers` places. Every response of every
//!   subscription (ring readers too) holds its bytes from one shared
//!   `response_budget_bytes` from before it is built until the transport
//!   has written it: the queue hands the transport each response as a gRPC
//!   frame (its one copy: the server's codec does not copy it again) that
//!   holds the response's budget until its last byte is dropped
//!   (`Queue::poll_next`, `Leases`). Peak memory is bounded by the budget,
//!   not by subscribers x queue depth. A backlog reader reserves before
//!   reading (reading allocates); a ring reader reserves once its next event
//!   is at hand (a view costs nothing), so an idle live subscriber holds no
//!   budget. A cancelled or superseded stream drops what it holds or waits
//!   for.
//! - Liveness: what a stream holds comes back by its transport writing (or
//!   the stream's end, or the stall give-back), never by its sender building
//!   more, so a sender waiting for budget never waits on itself; the budget
//!   is a FIFO semaphore, so every waiter is served in turn, one response at
//!   a time, whatever the number of subscribers (docs/response-budget.md).

mod admission;
mod encode;
mod limits;
mod outbox;
mod queue;
mod stalls;
mod task;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use ringfeed_engine::{ShardShared, Subscription};
use tokio::sync::watch;

use crate::metrics::ServerMetrics;
use crate::registry::Registered;
use crate::shared::Groups;
use task::{Connected, Sender};

pub(crate) use admission::{budget_bytes, budget_units, trim, Admission, Place};
pub(crate) use encode::chunk_message;
pub(crate) use limits::heartbeat_interval;
pub use limits::SubscriberLimits;
pub(crate) use outbox::{Outbox, Responses};

/// What the client asked for, besides the engine request.
pub(crate) struct StreamOptions {
    pub batching: bool,
    pub heartbeat: Option<Duration>,
    pub chunk_mode: bool,
    /// A token's read scope: events are shown as it shows them (renames
    /// across its edge rewritten); such a stream shares no responses.
    pub scope: Option<crate::auth::ReadScope>,
}

/// What every subscription stream's sender shares.
pub(crate) struct Streams {
    /// The engine's shards, in id order (heartbeats and pacing read their
    /// watermarks).
    pub shards: Arc<[Arc<ShardShared>]>,
    pub limits: Arc<SubscriberLimits>,
    pub admission: Arc<Admission>,
    pub metrics: Arc<ServerMetrics>,
    /// Streams that share live responses (encode once for all).
    pub groups: Groups,
}

impl Streams {
    /// Starts a stream's sender on the current tokio runtime and returns what
    /// its client reads. The stream ends when the subscription does (OK),
    /// fails, is superseded, the server shuts down, or the client goes away.
    pub fn start(
        &self,
        sub: Subscription,
        options: StreamOptions,
        registered: Registered,
        shutdown: watch::Receiver<bool>,
    ) -> Responses {
        let (outbox, responses) = Outbox::new(&self.limits);
        let sender = Sender {
            group: match options.scope {
                None => self.groups.join(&sub, options.batching),
                Some(_) => None,
            },
            shards: self.shards.clone(),
            limits: self.limits.clone(),
            admission: self.admission.clone(),
            outbox,
            registered,
            sent: Default::default(),
            metrics: Connected::new(self.metrics.clone()),
        };
        tokio::spawn(sender.run(sub, options, shutdown));
        responses
    }
}
