//! One shard's side of a subscription: its reader, the current run of
//! records, the next offset to deliver and the head that matches the filter.

use std::sync::Arc;

use bytes::Bytes;

use super::reader::ShardReader;
#[cfg(doc)]
use super::Subscription;
use super::{Delivered, RawChunk, Selector, SubscribeError};
use crate::chunk::ChunkHeader;
use crate::record;
use crate::shard::ShardShared;

/// One shard's side of a subscription.
pub(super) struct Lane {
    pub(super) reader: ShardReader,
    /// The current run of records; `at` is where its unconsumed part starts.
    pub(super) run: Bytes,
    pub(super) at: usize,
    /// The run is sealed (see `reader::Run::sealed`): chunk mode may ship it.
    pub(super) run_sealed: bool,
    /// The run's chunk header while the run is a whole chunk body (see
    /// `reader::Run::whole`); it describes the run only while `at` is 0.
    pub(super) run_whole: Option<ChunkHeader>,
    /// Next offset to deliver (the cursor): every earlier one was delivered or filtered out.
    pub(super) next: u64,
    /// The record at `at`, when it matches the filter.
    pub(super) head: Option<Head>,
    /// Stamp of the last record consumed (delivered or filtered out).
    pub(super) seen_ts: i64,
    /// Per-shard ordering with `until_ns`: this shard has nothing more to give.
    pub(super) done: bool,
    /// Records stamped before this are passed over, neither delivered nor
    /// shipped (a subscription from a time that starts at a stored
    /// segment's first offset); `i64::MIN` once one at or after it is seen.
    pub(super) skip_before: i64,
}

#[derive(Clone, Copy)]
pub(super) struct Head {
    pub(super) ts: i64,
    pub(super) offset: u64,
    pub(super) len: usize,
}

impl Lane {
    pub(super) fn shard(&self) -> &Arc<ShardShared> {
        self.reader.shard()
    }

    /// Makes sure `head` holds the next matching record if one is available,
    /// consuming non-matching records on the way. Returns whether it does.
    pub(super) fn fill(
        &mut self,
        filter: &Selector,
        match_all: bool,
    ) -> Result<bool, SubscribeError> {
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
                return Err(self.not_next(offset));
            }
            if matched {
                self.head = Some(Head { ts, offset, len });
                return Ok(true);
            }
            self.pass_over(len, ts);
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
    pub(super) fn fill_or_bound(
        &mut self,
        filter: &Selector,
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
        // Records this lane could not read yet (a cold store fetching them)
        // bound it the same way.
        let waits_on_cold = self.next < committed && self.reader.below_local(self.next);
        let bound = if (!durable_only || self.next >= committed) && !waits_on_cold {
            (claimed, true)
        } else {
            (self.seen_ts, false)
        };
        self.seen_ts = self.seen_ts.max(bound.0);
        Ok(Some(bound))
    }

    /// Makes sure the current run has unconsumed records if any are
    /// available, without filtering. Returns whether it has.
    pub(super) fn load(&mut self) -> Result<bool, SubscribeError> {
        loop {
            if self.at >= self.run.len() {
                // What was consumed is let go before reading on (a cold
                // store's chunk is memory, not a mapping).
                self.run = Bytes::new();
                self.at = 0;
                match self.reader.read(self.next)? {
                    Some(run) => {
                        debug_assert_eq!(run.first_offset, self.next);
                        self.run = run.bytes;
                        self.run_sealed = run.sealed;
                        self.run_whole = run.whole;
                    }
                    None => return Ok(false),
                }
            }
            if self.skip_before == i64::MIN || !self.skip_early()? {
                return Ok(true);
            }
        }
    }

    /// Consumes the run's records stamped before `skip_before`. Returns
    /// whether it consumed the whole run (read on).
    fn skip_early(&mut self) -> Result<bool, SubscribeError> {
        while self.at < self.run.len() {
            let (len, ts) = self.peek_next()?;
            if ts >= self.skip_before {
                self.skip_before = i64::MIN;
                return Ok(false);
            }
            self.pass_over(len, ts);
        }
        Ok(true)
    }

    /// The record at `at`: its length and stamp, checked to hold `next`.
    fn peek_next(&self) -> Result<(usize, i64), SubscribeError> {
        let shard = self.shard().id;
        let bad = |source| SubscribeError::Record { shard, source };
        let (len, offset, ts) = record::peek_position(&self.run[self.at..]).map_err(bad)?;
        if offset != self.next {
            return Err(self.not_next(offset));
        }
        Ok((len, ts))
    }

    /// The error for a record at `at` that holds `offset`, not `next`.
    fn not_next(&self, offset: u64) -> SubscribeError {
        SubscribeError::Corrupt {
            shard: self.shard().id,
            segment: String::new(),
            position: self.at as u64,
            reason: format!("expected offset {}, found {offset}", self.next),
        }
    }

    /// Consumes the record at `at` (`len` bytes, stamped `ts`) undelivered.
    fn pass_over(&mut self, len: usize, ts: i64) {
        self.at += len;
        self.next += 1;
        self.seen_ts = self.seen_ts.max(ts);
    }

    /// Consumes every record before `next` without delivering it (see
    /// [`Subscription::skip_to`]); `seen_ts` is what the other subscription's
    /// lane had seen there.
    pub(super) fn skip_to(&mut self, next: u64, seen_ts: i64) -> Result<(), SubscribeError> {
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
            let (len, ts) = self.peek_next()?;
            self.pass_over(len, ts);
        }
        self.seen_ts = self.seen_ts.max(seen_ts);
        Ok(())
    }

    /// Consumes the current run's next records, at most `max_bytes` of them
    /// (but at least one record), as one raw chunk, checking that they hold
    /// the expected offsets densely.
    pub(super) fn take_records(&mut self, max_bytes: usize) -> Result<RawChunk, SubscribeError> {
        let rest = self.run.slice(self.at..);
        let shard = self.shard().id;
        // A whole stored chunk that fits: its verified header already says
        // what a walk would find, and its body checksum is the chunk's.
        let whole = self
            .run_whole
            .filter(|_| self.at == 0 && rest.len() <= max_bytes);
        let (at, count, first_ts, last_ts, records_crc) = match whole {
            Some(header) => {
                debug_assert_eq!(header.first_offset, self.next);
                let count = u64::from(header.record_count);
                (
                    rest.len(),
                    count,
                    header.first_ts,
                    header.last_ts,
                    Some(header.body_crc),
                )
            }
            None => {
                let (at, count, first_ts, last_ts) = self.walk_records(&rest, max_bytes)?;
                (at, count, first_ts, last_ts, None)
            }
        };
        let chunk = RawChunk {
            shard,
            first_offset: self.next,
            count,
            first_ts,
            last_ts,
            records_crc,
            records: rest.slice(..at),
        };
        self.at += at;
        self.next += count;
        self.head = None;
        self.seen_ts = self.seen_ts.max(last_ts);
        Ok(chunk)
    }

    /// The records at the start of `rest` (the run from `at`) that fit in
    /// `max_bytes` (at least one): their length, count and first and last
    /// stamps, checking that they hold the expected offsets densely.
    fn walk_records(
        &self,
        rest: &[u8],
        max_bytes: usize,
    ) -> Result<(usize, u64, i64, i64), SubscribeError> {
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
        Ok((at, count, first_ts, last_ts))
    }

    /// Stamp of the first unconsumed record of the current run.
    pub(super) fn run_ts(&self) -> Option<i64> {
        record::peek_position(&self.run[self.at..])
            .ok()
            .map(|(_, _, ts)| ts)
    }

    pub(super) fn take(&mut self) -> Delivered {
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
