//! What a subscription asks for: where it starts, what it filters, how
//! far it goes, and the order it delivers in.

#[cfg(doc)]
use super::SubscribeError;
use super::{Cursor, Filter};

/// Where a subscription starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// The oldest retained event of every shard.
    Beginning,
    /// After the last event committed when the subscription opens.
    Now,
    /// The first event stamped at or after this (ns since the Unix epoch), per shard.
    SinceNs(i64),
    /// Exactly where a previous subscription left off.
    Cursor(Cursor),
}

/// The order events are delivered in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Ordering {
    /// `(ts, shard, offset)`: the same on every replay.
    #[default]
    Merged,
    /// Each shard in order, shards interleaved as events come: lowest latency.
    PerShard,
}

/// What to subscribe to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscribeRequest {
    pub start: Start,
    pub filter: Filter,
    /// End after the last event stamped at or below this.
    pub until_ns: Option<i64>,
    pub ordering: Ordering,
    /// Deliver only durable (flushed) events: nothing a crash can take back
    /// is ever seen, at the cost of waiting for each event's flush (up to the
    /// shard's flush interval for memory-acknowledged appends). Off by
    /// default: a cursor then records generations, so an event a crash took
    /// back is reported ([`SubscribeError::Truncated`]), never silently reused.
    pub durable_only: bool,
    /// Resume a cursor that a crash truncated ([`SubscribeError::Truncated`])
    /// from each truncated shard's surviving end instead of failing: events
    /// the subscriber saw there no longer exist, and new events may have
    /// taken their offsets. An explicit choice, never a default.
    pub resume_truncated: bool,
}

impl SubscribeRequest {
    /// Everything from `start` on, merged, unfiltered, unbounded.
    pub fn from(start: Start) -> SubscribeRequest {
        SubscribeRequest {
            start,
            filter: Filter::default(),
            until_ns: None,
            ordering: Ordering::Merged,
            durable_only: false,
            resume_truncated: false,
        }
    }
}
