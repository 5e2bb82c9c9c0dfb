//! Subscribers: opened, polled, disconnected and resumed (also across
//! restarts and below retention), each delivery checked against the model.

use std::sync::Arc;

use super::{Broken, World};
use crate::shard::ShardShared;
use crate::subscribe::{
    Cursor, Filter, Ordering as SubOrdering, Start, Step, SubscribeError, SubscribeRequest,
    Subscription,
};

impl World {
    fn open_sub(&self, i: usize, resume_truncated: bool) -> Result<Subscription, SubscribeError> {
        let sub = &self.subs[i];
        let start = match &sub.cursor {
            Some(cursor) => Start::Cursor(cursor.clone()),
            None => Start::Beginning,
        };
        let shards: Vec<Arc<ShardShared>> =
            self.nodes.iter().map(|n| n.core.shared_arc()).collect();
        let request = SubscribeRequest {
            ordering: sub.ordering,
            filter: if sub.filtered {
                Filter::prefix("/sim/1")
            } else {
                Filter::default()
            },
            resume_truncated,
            ..SubscribeRequest::from(start)
        };
        Subscription::open(&shards, 0, request)
    }

    /// Up to `max` deliveries to subscriber `i`, each checked.
    pub(super) fn poll_sub(&mut self, i: usize, max: u64) -> Result<(), Broken> {
        if self.subs[i].sub.is_none() {
            let opened = self
                .open_or_skip(i, false)?
                .map_err(|e| ("2.6 a cursor of this engine's life resumes", e.to_string()))?;
            self.subs[i].sub = Some(opened);
        }
        let mut got = 0;
        while got < max {
            let chunk_mode = self.subs[i].chunk_mode;
            let sub = self.subs[i].sub.as_mut().expect("opened above");
            if chunk_mode {
                match sub.poll_chunk(2048) {
                    Ok(Some(chunk)) => {
                        let mut at = 0;
                        for k in 0..chunk.count {
                            let bad = |e: crate::record::RecordError| {
                                ("chunks hold whole records", e.to_string())
                            };
                            let (len, offset, ts) =
                                crate::record::peek_position(&chunk.records[at..]).map_err(bad)?;
                            let header = crate::record::peek_header(&chunk.records[at..at + len])
                                .map_err(bad)?;
                            let payload = &chunk.records[at + header.payload_at..at + len];
                            if offset != chunk.first_offset + k {
                                return Err((
                                    "chunks are dense",
                                    format!(
                                        "offset {offset} at {k} of a chunk from {}",
                                        chunk.first_offset
                                    ),
                                ));
                            }
                            self.deliver(i, chunk.shard, offset, ts, payload, false)?;
                            if (k == 0 && ts != chunk.first_ts)
                                || (k + 1 == chunk.count && ts != chunk.last_ts)
                            {
                                return Err((
                                    "a chunk's stamps are its first and last record's",
                                    format!("record {k} stamped {ts}: {chunk:?}"),
                                ));
                            }
                            at += len;
                        }
                        // A whole stored chunk is shipped with its stored
                        // checksum, unread: it must be the records'.
                        if at != chunk.records.len()
                            || chunk.crc32c() != crc32c::crc32c(&chunk.records)
                        {
                            return Err((
                                "a chunk holds its records and their checksum",
                                format!(
                                    "{at} of {} bytes walked, crc {:x} (stored {:?})",
                                    chunk.records.len(),
                                    crc32c::crc32c(&chunk.records),
                                    chunk.records_crc
                                ),
                            ));
                        }
                        got += chunk.count;
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => return self.subscription_failed(i, e),
                }
            }
            let sub = self.subs[i].sub.as_mut().expect("opened above");
            match sub.poll() {
                Ok(Step::Event(event)) => {
                    let payload = event.payload();
                    let merged = self.subs[i].ordering == SubOrdering::Merged;
                    self.deliver(i, event.shard, event.offset, event.ts, &payload, merged)?;
                    got += 1;
                }
                Ok(Step::Pending) | Ok(Step::End) => break,
                Err(e) => return self.subscription_failed(i, e),
            }
        }
        if got > 0 {
            self.note(format!("subscriber {i} got {got}"));
        }
        Ok(())
    }

    fn deliver(
        &mut self,
        i: usize,
        shard: u32,
        offset: u64,
        ts: i64,
        payload: &[u8],
        merged: bool,
    ) -> Result<(), Broken> {
        let event = <[u8; 8]>::try_from(payload)
            .map(u64::from_le_bytes)
            .map_err(|_| {
                (
                    "subscribers see exactly the appended events",
                    format!("payload {payload:?}"),
                )
            })?;
        let s = shard as usize;
        // 2.6 (filtered): the events passed over are exactly those the
        // filter does not select.
        if self.subs[i].filtered && offset > self.subs[i].next[s] {
            self.pass_over(i, s, offset)?;
        }
        if offset < self.nodes[s].core.evicted_below() {
            // 2.8: read from disk, behind the ring the shard moved on from.
            self.behind_ring += 1;
        }
        let sub = &mut self.subs[i];
        // 2.6: resume is exact, never a skip, never a repeat.
        if offset != sub.next[s] {
            return Err((
                "2.6 resume is exact: a subscriber never skips and never repeats an event",
                format!(
                    "subscriber {i} got {shard}:{offset}, expected {shard}:{}",
                    sub.next[s]
                ),
            ));
        }
        // Exactly the events appended there (and only committed ones), and
        // only those the filter selects.
        let expect = self.model[s].get(&offset);
        if expect.is_none_or(|e| e.event != event || e.ts != ts || !sub.wants(e.event)) {
            return Err((
                "subscribers see exactly the appended events",
                format!(
                    "subscriber {i} got event {event} ts {ts} at {shard}:{offset}, the shard holds {expect:?}"
                ),
            ));
        }
        // 2.5: merged order is (ts, source), the same on every replay.
        if merged {
            if sub.last_merged.is_some_and(|last| (ts, shard) <= last) {
                return Err((
                    "2.5 a merged subscription delivers in (ts, source) order",
                    format!(
                        "subscriber {i} got ({ts}, shard {shard}) after {:?}",
                        sub.last_merged
                    ),
                ));
            }
            sub.last_merged = Some((ts, shard));
        }
        sub.next[s] += 1;
        sub.covered[s].insert(offset, event);
        self.delivered += 1;
        Ok(())
    }

    /// Moves filtered subscriber `i`'s next offset on shard `s` to `to`,
    /// over events the filter does not select: a filtered cursor passes
    /// those without delivering them (2.6: never a skip of a selected one).
    fn pass_over(&mut self, i: usize, s: usize, to: u64) -> Result<(), Broken> {
        let sub = &self.subs[i];
        let from = sub.next[s];
        if let Some((offset, e)) = self.model[s]
            .range(from..to)
            .find(|(_, e)| sub.wants(e.event))
        {
            return Err((
                "2.6 resume is exact: a filtered subscriber never skips a selected event",
                format!(
                    "subscriber {i} moved on shard {s} from {from} to {to} past selected event {} at {offset}",
                    e.event
                ),
            ));
        }
        let passed = self.model[s].range(from..to).map(|(&o, e)| (o, e.event));
        self.subs[i].covered[s].extend(passed);
        self.subs[i].next[s] = to;
        Ok(())
    }

    /// A filtered subscriber's positions, moved to its cursor (checked).
    pub(super) fn pass_over_to(&mut self, i: usize, cursor: &Cursor) -> Result<(), Broken> {
        if !self.subs[i].filtered {
            return Ok(());
        }
        for s in 0..self.shards as usize {
            let to = cursor.offsets()[s];
            if to > self.subs[i].next[s] {
                self.pass_over(i, s, to)?;
            }
        }
        Ok(())
    }

    /// Subscriber `i` disconnects and resumes from its cursor at once.
    pub(super) fn reconnect(&mut self, i: usize) -> Result<(), Broken> {
        let Some(open) = self.subs[i].sub.take() else {
            return Ok(());
        };
        let cursor = open.cursor();
        drop(open);
        self.pass_over_to(i, &cursor)?;
        // 2.6: the cursor is exactly what was delivered.
        if cursor.offsets() != self.subs[i].next.as_slice() {
            return Err((
                "2.6 a cursor records exactly what was delivered",
                format!(
                    "subscriber {i}: cursor {:?}, delivered up to {:?}",
                    cursor.offsets(),
                    self.subs[i].next
                ),
            ));
        }
        self.subs[i].cursor = Some(cursor);
        let reopened = self
            .open_or_skip(i, false)?
            .map_err(|e| ("2.6 a cursor of this engine's life resumes", e.to_string()))?;
        self.subs[i].sub = Some(reopened);
        self.note(format!("subscriber {i} reconnected"));
        Ok(())
    }

    /// After a restart (2.6): a subscriber's cursor resumes exactly if
    /// everything it was delivered survived, and is refused as truncated
    /// (never resumed silently) if the crash took some of it back.
    pub(super) fn resume_after_restart(&mut self, i: usize) -> Result<(), Broken> {
        if self.subs[i].cursor.is_none() {
            return Ok(());
        }
        let lost: Vec<bool> = (0..self.shards as usize)
            .map(|s| {
                self.subs[i].covered[s].iter().any(|(offset, event)| {
                    self.model[s].get(offset).is_none_or(|e| e.event != *event)
                })
            })
            .collect();
        match self.open_or_skip(i, false)? {
            Ok(reopened) => {
                if let Some(s) = lost.iter().position(|&l| l) {
                    return Err((
                        "2.6 a cursor past events a crash took back is refused as truncated, never resumed",
                        format!("subscriber {i} resumed on shard {s} past lost events"),
                    ));
                }
                self.subs[i].sub = Some(reopened);
                self.note(format!("subscriber {i} resumed"));
            }
            Err(SubscribeError::Truncated {
                shard,
                surviving_end,
                ..
            }) => {
                if !lost[shard as usize] {
                    return Err((
                        "2.6 a cursor is refused as truncated only if events it covers were lost",
                        format!(
                            "subscriber {i}: shard {shard} truncated at {surviving_end}, nothing it saw was lost"
                        ),
                    ));
                }
                // The documented way on: resume each truncated shard from
                // its surviving end (explicitly), forgetting what was lost.
                let reopened = self.open_or_skip(i, true)?.map_err(|e| {
                    (
                        "2.6 a truncated cursor resumes from the surviving end when asked",
                        e.to_string(),
                    )
                })?;
                let cursor = reopened.cursor();
                let sub = &mut self.subs[i];
                for (s, (&next, &lost)) in cursor.offsets().iter().zip(&lost).enumerate() {
                    if next != sub.next[s] && !lost {
                        return Err((
                            "2.6 resuming a truncated cursor moves only the truncated shards",
                            format!("subscriber {i} shard {s}: {} became {next}", sub.next[s]),
                        ));
                    }
                    sub.next[s] = next;
                    sub.covered[s].retain(|&offset, _| offset < next);
                }
                sub.sub = Some(reopened);
                self.note(format!(
                    "subscriber {i} resumed after truncation on shard {shard}"
                ));
            }
            Err(e) => {
                return Err((
                    "2.6 a cursor resumes or is refused as truncated",
                    format!("subscriber {i}: {e}"),
                ))
            }
        }
        Ok(())
    }

    /// A subscription failed: only a cursor below the retained range may
    /// (2.7), answered with the oldest retained offset, never a silent skip;
    /// the subscriber then skips there explicitly, as a client would.
    fn subscription_failed(&mut self, i: usize, e: SubscribeError) -> Result<(), Broken> {
        let mut open = self.subs[i].sub.take().expect("it was polled");
        // 2.10: a subscription's error is final. Polled again, it fails
        // again; it never turns into a clean end or goes on past the error.
        match open.poll() {
            Err(again) if again == e => {}
            other => {
                return Err((
                    "2.10 a subscription's final error is never turned into a clean end",
                    format!(
                        "subscriber {i} failed with {e}, then polled: {}",
                        match other {
                            Ok(Step::Event(ev)) => format!("event {}:{}", ev.shard, ev.offset),
                            Ok(Step::Pending) => "pending".into(),
                            Ok(Step::End) => "end".into(),
                            Err(e) => e.to_string(),
                        }
                    ),
                ))
            }
        }
        let cursor = open.cursor();
        self.pass_over_to(i, &cursor)?;
        match e {
            SubscribeError::BelowRetention {
                shard,
                offset,
                retained_from,
                ..
            } if self.below_retention_holds(i, shard, offset, retained_from) => {
                self.skip_to(i, cursor, shard, retained_from);
                Ok(())
            }
            e => Err((
                "a live subscription fails only below retention",
                format!("subscriber {i}: {e}"),
            )),
        }
    }

    /// The BelowRetention error names what it should: this subscriber's next
    /// offset, below the shard's oldest retained one.
    fn below_retention_holds(&self, i: usize, shard: u32, offset: u64, retained_from: u64) -> bool {
        let s = shard as usize;
        // With an object store nothing retention removed is out of range:
        // the store holds it (2.7 with a cold store).
        if self.bucket.is_some() {
            return false;
        }
        let now = self.nodes[s]
            .core
            .shared()
            .watermarks
            .snapshot()
            .retained_from;
        offset == self.subs[i].next[s] && offset < retained_from && retained_from == now
    }

    /// The subscriber's cursor, with `shard` moved to `to` (an explicit skip).
    fn skip_to(&mut self, i: usize, cursor: Cursor, shard: u32, to: u64) {
        let s = shard as usize;
        let mut next = cursor.offsets().to_vec();
        let mut gens = cursor
            .generations()
            .map_or_else(|| vec![0; next.len()], <[u32]>::to_vec);
        next[s] = to;
        gens[s] = match to {
            0 => 0,
            to => self.nodes[s].log.generations().of_offset(to - 1),
        };
        let sub = &mut self.subs[i];
        sub.cursor = Some(Cursor::with_generations(next, gens));
        sub.next[s] = to;
        self.retention_skips += 1;
        self.note(format!(
            "subscriber {i} skipped shard {shard} to retained {to}"
        ));
    }

    /// Opens subscriber `i` from its cursor; a cursor below the retained
    /// range is refused (2.7) and then skipped forward explicitly.
    fn open_or_skip(
        &mut self,
        i: usize,
        resume_truncated: bool,
    ) -> Result<Result<Subscription, SubscribeError>, Broken> {
        for _ in 0..=self.shards {
            match self.open_sub(i, resume_truncated) {
                Err(SubscribeError::BelowRetention {
                    shard,
                    offset,
                    retained_from,
                    ..
                }) => {
                    if !self.below_retention_holds(i, shard, offset, retained_from) {
                        return Err((
                            "2.7 a cursor below the retained range is refused naming the oldest retained offset",
                            format!("subscriber {i}: shard {shard} offset {offset}, retained from {retained_from}"),
                        ));
                    }
                    let cursor = self.subs[i].cursor.clone().expect("a cursor was refused");
                    self.skip_to(i, cursor, shard, retained_from);
                }
                Ok(opened) if self.subs[i].cursor.is_none() => {
                    // From the beginning: at each shard's oldest retained
                    // event, in the object store if it holds older ones.
                    let from = opened.cursor();
                    for (s, node) in self.nodes.iter().enumerate() {
                        let local = node.core.shared().watermarks.snapshot().retained_from;
                        let retained = match self
                            .bucket
                            .as_ref()
                            .and_then(|b| crate::subscribe::ColdStore::held(&**b, s as u32))
                        {
                            Some(held) if held.start < local && held.end >= local => held.start,
                            _ => local,
                        };
                        if from.offsets()[s] != retained {
                            return Err((
                                "2.7 a subscription from the beginning starts at the oldest retained event",
                                format!("subscriber {i} shard {s}: starts at {}, retained from {retained}", from.offsets()[s]),
                            ));
                        }
                    }
                    self.subs[i].next = from.offsets().to_vec();
                    return Ok(Ok(opened));
                }
                other => return Ok(other),
            }
        }
        Err((
            "2.7 a cursor below retention is refused once per shard",
            format!("subscriber {i}"),
        ))
    }
}
