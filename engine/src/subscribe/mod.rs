//! Subscriptions: every matching event from a start position, exactly once, in
//! a deterministic order, then live.
//!
//! A subscription keeps, per shard, a reader (ring or segments, see
//! [`reader`]) and the next offset to deliver: its [`Cursor`]. Events are
//! filtered on their record headers ([`Filter`]) and merged across shards in
//! `(ts, shard, offset)` order. In [`Ordering::Merged`] an event is emitted
//! only when every other shard has a pending event ordered after it or has
//! claimed (no future stamp at or below) its stamp; a quiet shard is asked to
//! claim. [`Ordering::PerShard`] emits as soon as any shard has an event.
//!
//! A subscription never makes a shard wait and holds at most one run of
//! records per shard (a window or a chunk body, shared, not copied), however
//! far behind it is. It is driven by [`Subscription::poll`] (never blocks),
//! [`Subscription::next`] (async, runtime-agnostic) or
//! [`Subscription::next_blocking`].

use std::sync::Arc;

use bytes::Bytes;

use crate::generation::CursorCheck;
use crate::shard::ShardShared;

mod cold;
mod delivered;
mod error;
mod lane;
mod reader;
mod request;
mod shard_merge;
mod wait;

pub use cold::{ColdChunk, ColdStore};
pub use delivered::{Delivered, RawChunk, Step};
pub use error::SubscribeError;
use lane::Lane;
pub(crate) use reader::ShardReader;
pub use request::{Ordering, Start, SubscribeRequest};
pub use ringfeed_core::cursor::{Cursor, CursorError};
pub use ringfeed_core::filter::{Filter, FilterError, Selector, MAX_FILTER_PATH_BYTES};

/// How far a subscription has read: per shard the next offset and the last stamp
/// seen, and its watermark. Another subscription of the same filter, order
/// and durability that stands at or before it can move there
/// ([`Subscription::skip_to`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    lanes: Box<[(u64, i64)]>,
    watermark: i64,
}

impl Progress {
    /// The next offset of every shard (the cursor's offsets).
    pub fn offsets(&self) -> impl Iterator<Item = u64> + '_ {
        self.lanes.iter().map(|&(next, _)| next)
    }
}

/// A running subscription.
pub struct Subscription {
    lanes: Vec<Lane>,
    filter: Filter,
    /// The filter made ready to match.
    selector: Selector,
    match_all: bool,
    until_ns: Option<i64>,
    ordering: Ordering,
    durable_only: bool,
    watermark: i64,
    ended: bool,
    /// The data dir's feed id, written into every cursor (0: none).
    feed: u64,
}

impl Subscription {
    /// Opens a subscription over `shards` (all of an engine's shards, in id
    /// order) of the feed whose id is `feed` (0: a feed without one, whose
    /// cursors say nothing of it).
    pub(crate) fn open(
        shards: &[Arc<ShardShared>],
        feed: u64,
        request: SubscribeRequest,
    ) -> Result<Subscription, SubscribeError> {
        let filter = request.filter.normalized()?;
        let mut readers: Vec<ShardReader> = shards
            .iter()
            .map(|s| ShardReader::new(s.clone(), request.durable_only))
            .collect();
        let next: Vec<u64> = match &request.start {
            Start::Beginning => readers.iter().map(|r| r.oldest()).collect(),
            // Durable only: from the flushed end, so the start cursor never
            // covers events a crash could still take back (it would be
            // refused as truncated although nothing was delivered).
            Start::Now if request.durable_only => {
                shards.iter().map(|s| s.watermarks.flushed_next()).collect()
            }
            Start::Now => shards
                .iter()
                .map(|s| s.watermarks.committed_next())
                .collect(),
            Start::SinceNs(since) => readers
                .iter_mut()
                .map(|r| r.find_ts(*since))
                .collect::<Result<_, _>>()?,
            Start::Cursor(cursor) => {
                // Before anything else: another feed's offsets and shard
                // count may well fit this one.
                if cursor.feed() != 0 && feed != 0 && cursor.feed() != feed {
                    return Err(CursorError::OtherFeed {
                        cursor: cursor.feed(),
                        ours: feed,
                    }
                    .into());
                }
                if cursor.shards() != shards.len() {
                    return Err(CursorError::ShardCount {
                        expected: shards.len(),
                        found: cursor.shards(),
                    }
                    .into());
                }
                let mut next = cursor.offsets().to_vec();
                for (i, (reader, shard)) in readers.iter_mut().zip(shards).enumerate() {
                    if let Some(generations) = cursor.generations() {
                        let history = shard.generations();
                        match history.check(generations[i], next[i]) {
                            CursorCheck::Valid => {}
                            CursorCheck::Truncated { surviving_end }
                                if request.resume_truncated =>
                            {
                                next[i] = surviving_end;
                            }
                            CursorCheck::Truncated { surviving_end } => {
                                return Err(SubscribeError::Truncated {
                                    shard: shard.id,
                                    generation: generations[i],
                                    surviving_end,
                                    next: next[i],
                                });
                            }
                            CursorCheck::Unknown => {
                                return Err(CursorError::UnknownGeneration {
                                    shard: shard.id,
                                    generation: generations[i],
                                    current: history.current(),
                                }
                                .into())
                            }
                        }
                    }
                    let offset = next[i];
                    let w = shard.watermarks.snapshot();
                    if offset > w.committed_next {
                        return Err(CursorError::Beyond {
                            shard: shard.id,
                            offset,
                            committed_next: w.committed_next,
                            legacy: cursor.generations().is_none(),
                        }
                        .into());
                    }
                    if offset < w.retained_from && offset < reader.oldest() {
                        return Err(reader.below_retention(offset));
                    }
                }
                next
            }
        };
        // From a time, each lane passes over the records stamped before it:
        // a start found in the cold store is its segment's first offset.
        let skip_before = match request.start {
            Start::SinceNs(since) => since,
            _ => i64::MIN,
        };
        let lanes = readers
            .into_iter()
            .zip(next)
            .map(|(reader, next)| Lane {
                skip_before,
                reader,
                run: Bytes::new(),
                at: 0,
                run_sealed: false,
                run_whole: None,
                next,
                head: None,
                seen_ts: 0,
                done: false,
            })
            .collect();
        Ok(Subscription {
            match_all: filter.is_everything(),
            selector: filter.selector(),
            filter,
            lanes,
            until_ns: request.until_ns,
            ordering: request.ordering,
            durable_only: request.durable_only,
            watermark: 0,
            ended: false,
            feed,
        })
    }

    /// The resume token: for every shard, the next offset to deliver and
    /// the generation of the last event before it.
    pub fn cursor(&self) -> Cursor {
        let next: Vec<u64> = self.lanes.iter().map(|l| l.next).collect();
        let generations = self
            .lanes
            .iter()
            .map(|l| match l.next {
                0 => 0,
                next => l.shard().generations().of_offset(next - 1),
            })
            .collect();
        Cursor::with_generations(next, generations).of_feed(self.feed)
    }

    /// Where this subscription stands.
    pub fn progress(&self) -> Progress {
        Progress {
            lanes: self.lanes.iter().map(|l| (l.next, l.seen_ts)).collect(),
            watermark: self.watermark,
        }
    }

    /// The next offset of every shard, in shard order (the cursor's offsets).
    pub fn offsets(&self) -> impl Iterator<Item = u64> + '_ {
        self.lanes.iter().map(|l| l.next)
    }

    /// What decides which events this subscription delivers and in what
    /// order, besides where it stands: two subscriptions alike in these
    /// deliver the same events from the same position (in `Merged` order,
    /// the same sequence).
    pub fn shape(&self) -> (&Filter, Ordering, bool, Option<i64>) {
        (
            &self.filter,
            self.ordering,
            self.durable_only,
            self.until_ns,
        )
    }

    /// Moves to `to`, the position another subscription of the same
    /// [`shape`](Subscription::shape) reached from at or before where this one
    /// stands, having delivered what lies between: every record before `to`
    /// is consumed here without being delivered. Returns false, changing
    /// nothing, if this subscription stands past `to` in any shard.
    ///
    /// This is how one encoding of a response goes to many subscribers: the
    /// events between two positions are the same for every subscription of
    /// one shape, so the one that read them shares its response and the
    /// others move past them.
    pub fn skip_to(&mut self, to: &Progress) -> Result<bool, SubscribeError> {
        if to.lanes.len() != self.lanes.len()
            || self
                .lanes
                .iter()
                .zip(&to.lanes[..])
                .any(|(l, &(next, _))| l.next > next)
        {
            return Ok(false);
        }
        for (lane, &(next, seen_ts)) in self.lanes.iter_mut().zip(&to.lanes[..]) {
            lane.skip_to(next, seen_ts)?;
        }
        self.watermark = self.watermark.max(to.watermark);
        Ok(true)
    }

    /// The stamp through which every matching event has been delivered (as of
    /// the last poll): a caught-up subscriber's freshness.
    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// Committed events not yet delivered or filtered, summed over shards.
    pub fn lag_events(&self) -> u64 {
        self.lanes
            .iter()
            .map(|l| l.shard().watermarks.committed_next().saturating_sub(l.next))
            .sum()
    }

    /// Whether any shard's next records come from segment files rather than
    /// the ring: the subscription is reading backlog.
    pub fn reads_backlog(&self) -> bool {
        self.lanes.iter().any(|l| l.reader.below_ring(l.next))
    }
}
