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

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll as TaskPoll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use thiserror::Error;

use crate::generation::CursorCheck;
use crate::record::{self, Record, RecordError, RecordHeader};
use crate::shard::{Readers, ShardShared, Waiter};

mod reader;

use reader::ShardReader;
pub use ringfeed_core::cursor::{Cursor, CursorError};
pub use ringfeed_core::filter::{Filter, FilterError};

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

/// Why a subscription could not start or continue.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SubscribeError {
    #[error(transparent)]
    Cursor(#[from] CursorError),
    #[error("invalid filter: {0}")]
    Filter(#[from] FilterError),
    #[error(
        "shard {shard}: offset {offset} is older than the oldest retained event \
         (offset {retained_from}{}); resubscribe from there or from a time",
        retained_ts.map(|ts| format!(", stamped {ts} ns")).unwrap_or_default()
    )]
    BelowRetention {
        shard: u32,
        offset: u64,
        retained_from: u64,
        retained_ts: Option<i64>,
    },
    #[error(
        "shard {shard}: the feed was truncated by a crash: generation {generation} kept offsets \
         below {surviving_end}{}, but the cursor is at offset {next}, so this subscriber's cursor \
         passed {lost} event(s) that no longer exist (offsets {surviving_end}..{next}; it saw those \
         its filters matched, and new events may since have taken those offsets). Resume from the surviving end explicitly (resume_truncated; \
         `ringfeed tail --resume-truncated`), or from a time",
        if *surviving_end == 0 { String::new() } else { format!(" (the last surviving is {})", surviving_end - 1) },
        lost = next - surviving_end
    )]
    Truncated {
        shard: u32,
        /// The cursor's generation for this shard.
        generation: u32,
        /// Where that generation's surviving events end (exclusive).
        surviving_end: u64,
        /// The cursor's next offset for this shard.
        next: u64,
    },
    #[error("shard {shard}: segment {segment} at byte {position}: {reason}")]
    Corrupt {
        shard: u32,
        segment: String,
        position: u64,
        reason: String,
    },
    #[error("shard {shard}: reading segments: {reason}")]
    Io { shard: u32, reason: String },
    #[error(
        "shard {shard} stopped after an I/O failure ({cause}): its events from offset \
         {durable_end} on are not durable and may never be, so a durable-only subscription \
         cannot continue past them until the server is restarted (then resume from the cursor)"
    )]
    Latched {
        shard: u32,
        cause: String,
        /// The shard's flushed watermark: everything below it was delivered
        /// (or is deliverable), nothing at or past it can be.
        durable_end: u64,
    },
    #[error("shard {shard}: a stored record does not decode: {source}")]
    Record {
        shard: u32,
        #[source]
        source: RecordError,
    },
}

/// One delivered event: its position and its stored record (shared, not copied).
#[derive(Clone, Debug)]
pub struct Delivered {
    pub shard: u32,
    pub offset: u64,
    pub ts: i64,
    record: Bytes,
}

impl Delivered {
    /// The whole stored record.
    pub fn record_bytes(&self) -> &Bytes {
        &self.record
    }

    /// The producer's encoded event, as appended.
    pub fn payload(&self) -> Bytes {
        self.record.slice(self.header().payload_at..)
    }

    /// The record's header fields (paths, kind, signatures).
    pub fn header(&self) -> RecordHeader<'_> {
        record::peek_header(&self.record).expect("delivered records were parsed once already")
    }

    /// The record, decoded and checksum-verified.
    pub fn record(&self) -> Result<Record<'_>, RecordError> {
        Record::decode(&self.record).map(|(r, _)| r)
    }
}

/// Stored records of one shard, verbatim and unfiltered, for chunk-mode
/// catch-up ([`Subscription::poll_chunk`]).
#[derive(Clone, Debug)]
pub struct RawChunk {
    pub shard: u32,
    /// Offset of the first record; the others follow densely.
    pub first_offset: u64,
    /// Number of records (at least one).
    pub count: u64,
    /// Stamps of the first and the last record.
    pub first_ts: i64,
    pub last_ts: i64,
    /// The records back to back in the stored record format (a view of a
    /// window or a segment mapping, not a copy).
    pub records: Bytes,
}

/// What [`Subscription::poll`] found.
#[derive(Debug)]
pub enum Step {
    Event(Delivered),
    /// Nothing to deliver yet.
    Pending,
    /// `until_ns` was reached: the subscription is complete.
    End,
}

/// One shard's side of a subscription.
struct Lane {
    reader: ShardReader,
    /// The current run of records; `at` is where its unconsumed part starts.
    run: Bytes,
    at: usize,
    /// The run is sealed (see `reader::Run::sealed`): chunk mode may ship it.
    run_sealed: bool,
    /// Next offset to deliver (the cursor): every earlier one was delivered or filtered out.
    next: u64,
    /// The record at `at`, when it matches the filter.
    head: Option<Head>,
    /// Stamp of the last record consumed (delivered or filtered out).
    seen_ts: i64,
    /// Per-shard ordering with `until_ns`: this shard has nothing more to give.
    done: bool,
}

#[derive(Clone, Copy)]
struct Head {
    ts: i64,
    offset: u64,
    len: usize,
}

impl Lane {
    fn shard(&self) -> &Arc<ShardShared> {
        self.reader.shard()
    }

    /// Makes sure `head` holds the next matching record if one is available,
    /// consuming non-matching records on the way. Returns whether it does.
    fn fill(&mut self, filter: &Filter, match_all: bool) -> Result<bool, SubscribeError> {
        if self.head.is_some() {
            return Ok(true);
        }
        loop {
            if !self.load()? {
                return Ok(false);
            }
            let rest = &self.run[self.at..];
            let bad = |source| SubscribeError::Record {
                shard: self.shard().id,
                source,
            };
            // Match-all needs only the framing; a filter reads the header's paths.
            let (len, offset, ts, matched) = if match_all {
                let (len, offset, ts) = record::peek_position(rest).map_err(bad)?;
                (len, offset, ts, true)
            } else {
                let h = record::peek_header(rest).map_err(bad)?;
                (h.len, h.offset, h.ts, filter.matches(&h))
            };
            if offset != self.next {
                return Err(SubscribeError::Corrupt {
                    shard: self.shard().id,
                    segment: String::new(),
                    position: self.at as u64,
                    reason: format!("expected offset {}, found {offset}", self.next),
                });
            }
            if matched {
                self.head = Some(Head { ts, offset, len });
                return Ok(true);
            }
            self.at += len;
            self.next += 1;
            self.seen_ts = self.seen_ts.max(ts);
        }
    }

    /// [`Lane::fill`]; when no record is available, returns the stamp at or
    /// below which this shard will never deliver another record.
    ///
    /// The claim is read first, then the committed watermark, then records
    /// are looked for: anything stamped at or below the claim is committed by
    /// the time the claim is published. Delivering only durable records, a
    /// lane that stopped short of `committed` waits on a flush, and its bound
    /// is the stamp of its last record: every later one is stamped above it.
    fn fill_or_bound(
        &mut self,
        filter: &Filter,
        match_all: bool,
        durable_only: bool,
    ) -> Result<Option<(i64, bool)>, SubscribeError> {
        let w = &self.shard().watermarks;
        let claimed = w.claimed_ts();
        let committed = w.committed_next();
        if self.fill(filter, match_all)? {
            return Ok(None);
        }
        // The second value: whether a claim can raise the bound. One that
        // waits on a flush is raised by the flush alone (which wakes the
        // subscription); asking for claims then would only make the shard
        // and the subscriber wake each other until the flush.
        let bound = if !durable_only || self.next >= committed {
            (claimed, true)
        } else {
            (self.seen_ts, false)
        };
        self.seen_ts = self.seen_ts.max(bound.0);
        Ok(Some(bound))
    }

    /// Makes sure the current run has unconsumed records if any are
    /// available, without filtering. Returns whether it has.
    fn load(&mut self) -> Result<bool, SubscribeError> {
        if self.at < self.run.len() {
            return Ok(true);
        }
        match self.reader.read(self.next)? {
            Some(run) => {
                debug_assert_eq!(run.first_offset, self.next);
                self.run = run.bytes;
                self.at = 0;
                self.run_sealed = run.sealed;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Consumes every record before `next` without delivering it (see
    /// [`Subscription::skip_to`]); `seen_ts` is what the other subscription's
    /// lane had seen there.
    fn skip_to(&mut self, next: u64, seen_ts: i64) -> Result<(), SubscribeError> {
        self.head = None; // its record is at `at`: walked over below
        let shard = self.shard().id;
        while self.next < next {
            if !self.load()? {
                return Err(SubscribeError::Corrupt {
                    shard,
                    segment: String::new(),
                    position: self.next,
                    reason: format!("record {} to skip over is not available", self.next),
                });
            }
            let bad = |source| SubscribeError::Record { shard, source };
            let (len, offset, ts) = record::peek_position(&self.run[self.at..]).map_err(bad)?;
            if offset != self.next {
                return Err(SubscribeError::Corrupt {
                    shard,
                    segment: String::new(),
                    position: self.at as u64,
                    reason: format!("expected offset {}, found {offset}", self.next),
                });
            }
            self.at += len;
            self.next += 1;
            self.seen_ts = self.seen_ts.max(ts);
        }
        self.seen_ts = self.seen_ts.max(seen_ts);
        Ok(())
    }

    /// Consumes the current run's next records, at most `max_bytes` of them
    /// (but at least one record), as one raw chunk, checking that they hold
    /// the expected offsets densely.
    fn take_records(&mut self, max_bytes: usize) -> Result<RawChunk, SubscribeError> {
        let rest = self.run.slice(self.at..);
        let shard = self.shard().id;
        let bad = |source| SubscribeError::Record { shard, source };
        let (mut at, mut count, mut first_ts, mut last_ts) = (0, 0u64, 0, 0);
        while at < rest.len() {
            let (len, offset, ts) = record::peek_position(&rest[at..]).map_err(bad)?;
            if count > 0 && at + len > max_bytes {
                break;
            }
            if offset != self.next + count {
                return Err(SubscribeError::Corrupt {
                    shard,
                    segment: String::new(),
                    position: (self.at + at) as u64,
                    reason: format!("expected offset {}, found {offset}", self.next + count),
                });
            }
            if count == 0 {
                first_ts = ts;
            }
            last_ts = ts;
            at += len;
            count += 1;
        }
        let chunk = RawChunk {
            shard,
            first_offset: self.next,
            count,
            first_ts,
            last_ts,
            records: rest.slice(..at),
        };
        self.at += at;
        self.next += count;
        self.head = None;
        self.seen_ts = self.seen_ts.max(last_ts);
        Ok(chunk)
    }

    /// Stamp of the first unconsumed record of the current run.
    fn run_ts(&self) -> Option<i64> {
        record::peek_position(&self.run[self.at..])
            .ok()
            .map(|(_, _, ts)| ts)
    }

    fn take(&mut self) -> Delivered {
        let head = self.head.take().expect("take follows a successful fill");
        let record = self.run.slice(self.at..self.at + head.len);
        self.at += head.len;
        self.next += 1;
        self.seen_ts = self.seen_ts.max(head.ts);
        Delivered {
            shard: self.shard().id,
            offset: head.offset,
            ts: head.ts,
            record,
        }
    }
}

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
            Start::Beginning => shards
                .iter()
                .map(|s| s.watermarks.snapshot().retained_from)
                .collect(),
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
                    if offset < w.retained_from {
                        return Err(reader.below_retention(offset));
                    }
                }
                next
            }
        };
        let lanes = readers
            .into_iter()
            .zip(next)
            .map(|(reader, next)| Lane {
                reader,
                run: Bytes::new(),
                at: 0,
                run_sealed: false,
                next,
                head: None,
                seen_ts: 0,
                done: false,
            })
            .collect();
        Ok(Subscription {
            match_all: filter.is_everything(),
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

    /// Chunk-mode catch-up: the next records of a sealed run (a segment
    /// chunk's body or a sealed ring window, from the cursor's record
    /// boundary on), at most `max_bytes` of them but at least one record,
    /// unfiltered, from the shard whose next record is stamped earliest. Each
    /// record is shipped once; the cursor moves past it.
    ///
    /// `None` means no shard has a sealed run now: every shard has reached
    /// the ring's open window or the end of what is committed (the live
    /// edge). Continue with [`Subscription::poll`], which picks up exactly
    /// where the chunks ended. `until_ns` does not cut chunks: records past
    /// it are shipped, and the reader drops them.
    pub fn poll_chunk(&mut self, max_bytes: usize) -> Result<Option<RawChunk>, SubscribeError> {
        let mut best: Option<(i64, usize)> = None;
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            if lane.done || !lane.load()? || !lane.run_sealed {
                continue;
            }
            let ts = lane.run_ts().unwrap_or(i64::MIN);
            if best.is_none_or(|(best_ts, _)| ts < best_ts) {
                best = Some((ts, i));
            }
        }
        let Some((_, i)) = best else {
            return Ok(None);
        };
        let chunk = self.lanes[i].take_records(max_bytes)?;
        self.update_watermark();
        Ok(Some(chunk))
    }

    /// Delivers the next event if it can be delivered now. Never blocks.
    pub fn poll(&mut self) -> Result<Step, SubscribeError> {
        if self.ended {
            return Ok(Step::End);
        }
        let step = match self.ordering {
            Ordering::Merged => self.poll_merged()?,
            Ordering::PerShard => self.poll_per_shard()?,
        };
        if matches!(step, Step::End) {
            self.ended = true;
        }
        Ok(step)
    }

    fn poll_merged(&mut self) -> Result<Step, SubscribeError> {
        'select: loop {
            for lane in &mut self.lanes {
                lane.fill(&self.filter, self.match_all)?;
            }
            let candidate = self.min_head();
            // Every other shard must be known to have nothing ordered before
            // the candidate (or, with no candidate, nothing at or below until_ns).
            let bound = match (candidate, self.until_ns) {
                (Some(i), _) => self.lanes[i].head.expect("has a head").ts,
                (None, Some(until)) => until,
                (None, None) => {
                    // Nothing to deliver: fold each shard's claim into what
                    // it has seen, so an idle subscription's watermark rises
                    // with claims (heartbeats, and merges of several feeds,
                    // read it). A record that arrived meanwhile is taken.
                    for lane in &mut self.lanes {
                        if lane
                            .fill_or_bound(&self.filter, self.match_all, self.durable_only)?
                            .is_none()
                        {
                            continue 'select;
                        }
                    }
                    self.update_watermark();
                    return Ok(Step::Pending);
                }
            };
            let mut blocked = false;
            for (i, lane) in self.lanes.iter_mut().enumerate() {
                if Some(i) == candidate || lane.head.is_some() {
                    continue;
                }
                let Some((claimed, claimable)) =
                    lane.fill_or_bound(&self.filter, self.match_all, self.durable_only)?
                else {
                    continue 'select;
                };
                if claimed < bound {
                    if claimable {
                        lane.shard().request_claim(bound);
                    }
                    blocked = true;
                }
            }
            self.update_watermark();
            if blocked {
                return Ok(Step::Pending);
            }
            let Some(i) = candidate else {
                return Ok(Step::End); // every shard claimed past until_ns
            };
            if self.until_ns.is_some_and(|u| bound > u) {
                return Ok(Step::End);
            }
            let event = self.lanes[i].take();
            self.watermark = self.watermark.max(event.ts - 1);
            return Ok(Step::Event(event));
        }
    }

    fn poll_per_shard(&mut self) -> Result<Step, SubscribeError> {
        for lane in &mut self.lanes {
            if lane.done {
                continue;
            }
            let (claimed, claimable) = lane
                .fill_or_bound(&self.filter, self.match_all, self.durable_only)?
                .unwrap_or((i64::MIN, false));
            if let Some(until) = self.until_ns {
                match lane.head {
                    Some(h) if h.ts > until => lane.done = true,
                    None if claimed >= until => lane.done = true,
                    None if claimable => lane.shard().request_claim(until),
                    None => {}
                    Some(_) => {}
                }
            }
        }
        self.update_watermark();
        let candidate = self
            .lanes
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.done)
            .filter_map(|(i, l)| l.head.map(|h| (h.ts, i)))
            .min();
        match candidate {
            Some((_, i)) => Ok(Step::Event(self.lanes[i].take())),
            None if self.lanes.iter().all(|l| l.done) => Ok(Step::End),
            None => Ok(Step::Pending),
        }
    }

    /// The lane whose head comes first in `(ts, shard, offset)` order.
    fn min_head(&self) -> Option<usize> {
        self.lanes
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.head.map(|h| ((h.ts, i, h.offset), i)))
            .min()
            .map(|(_, i)| i)
    }

    fn update_watermark(&mut self) {
        let lowest = self
            .lanes
            .iter()
            .map(|l| l.head.map_or(l.seen_ts, |h| h.ts - 1))
            .min()
            .unwrap_or(0);
        self.watermark = self.watermark.max(lowest);
    }

    /// The next event, waiting for one; `None` once `until_ns` is reached.
    pub async fn next(&mut self) -> Result<Option<Delivered>, SubscribeError> {
        loop {
            match self.poll()? {
                Step::Event(event) => return Ok(Some(event)),
                Step::End => return Ok(None),
                Step::Pending => {}
            }
            // Listen, then look again, so a wake-up between the two is not lost.
            let listeners = self.listen();
            match self.poll()? {
                Step::Event(event) => return Ok(Some(event)),
                Step::End => return Ok(None),
                Step::Pending => AnyListener(listeners).await,
            }
        }
    }

    /// [`Subscription::next`] for threads: waits at most `timeout`, then
    /// returns [`Step::Pending`].
    pub fn next_blocking(&mut self, timeout: Duration) -> Result<Step, SubscribeError> {
        match self.poll()? {
            Step::Pending => {}
            step => return Ok(step),
        }
        let deadline = Instant::now() + timeout;
        loop {
            match self.poll()? {
                Step::Pending => {}
                step => return Ok(step),
            }
            let listeners = self.listen();
            match self.poll()? {
                Step::Pending => {}
                step => return Ok(step),
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Step::Pending);
            }
            // A thread can block on one listener at a time: wait on the first
            // in short slices, so wake-ups of the others are seen promptly too.
            let slice = (deadline - now).min(Duration::from_millis(1));
            if let Some(first) = listeners.into_iter().next() {
                first.wait_timeout(slice);
            }
        }
    }

    /// Completes when any of the subscription's shards has news (a batch, a
    /// flush, a claim answered): poll after creating it, then wait on it, and
    /// no news is missed. It owns its listeners (borrows nothing).
    pub fn changed(&self) -> impl Future<Output = ()> + Send + 'static {
        AnyListener(self.listen())
    }

    /// Asks every shard to claim its stamps up to `ts` (answered at once by an
    /// idle shard), so the subscription's watermark can pass `ts`; the
    /// answers wake [`Subscription::changed`].
    pub fn request_claims(&self, ts: i64) {
        for lane in &self.lanes {
            lane.shard().request_claim(ts);
        }
    }

    /// Waits on every shard's readers: one listener per shard, woken by the
    /// engine's relay once per batch or flush of that shard (never by the shard).
    fn listen(&self) -> Vec<Waiter> {
        self.lanes
            .iter()
            .map(|l| Readers::wait(l.shard()))
            .collect()
    }
}

/// Completes when any of the waiters is woken.
struct AnyListener(Vec<Waiter>);

impl Future for AnyListener {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> TaskPoll<()> {
        for waiter in self.0.iter_mut() {
            if Pin::new(waiter).poll(cx).is_ready() {
                return TaskPoll::Ready(());
            }
        }
        TaskPoll::Pending
    }
}
