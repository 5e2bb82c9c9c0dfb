//! Polling a subscription: the next event across its shards, merged in
//! `(ts, shard, offset)` order or per shard, chunk-mode runs, and the
//! watermark the lanes' heads allow.

use super::{Ordering, RawChunk, Step, SubscribeError, Subscription};

impl Subscription {
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
    ///
    /// A shard whose next records are being fetched from the cold store
    /// ships nothing meanwhile; `None` then does not mean the live edge:
    /// [`Subscription::next_chunk`] waits for them.
    pub fn poll_chunk(&mut self, max_bytes: usize) -> Result<Option<RawChunk>, SubscribeError> {
        Ok(self.poll_chunk_or_wait(max_bytes)?.0)
    }

    /// [`Subscription::poll_chunk`], waiting while a shard's next records
    /// are being fetched from the cold store: `None` only at the live edge.
    pub async fn next_chunk(
        &mut self,
        max_bytes: usize,
    ) -> Result<Option<RawChunk>, SubscribeError> {
        loop {
            match self.poll_chunk_or_wait(max_bytes)? {
                (Some(chunk), _) => return Ok(Some(chunk)),
                (None, false) => return Ok(None),
                (None, true) => {}
            }
            // Listen, then look again, so a fetch landing between the two
            // is not missed.
            let changed = self.changed();
            match self.poll_chunk_or_wait(max_bytes)? {
                (Some(chunk), _) => return Ok(Some(chunk)),
                (None, false) => return Ok(None),
                (None, true) => changed.await,
            }
        }
    }

    /// The next chunk, and whether a shard waits on the cold store.
    fn poll_chunk_or_wait(
        &mut self,
        max_bytes: usize,
    ) -> Result<(Option<RawChunk>, bool), SubscribeError> {
        let mut best: Option<(i64, usize)> = None;
        let mut waits = false;
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            if lane.done {
                continue;
            }
            if !lane.load()? {
                waits |= lane.reader.below_local(lane.next);
                continue;
            }
            if !lane.run_sealed {
                continue;
            }
            let ts = lane.run_ts().unwrap_or(i64::MIN);
            if best.is_none_or(|(best_ts, _)| ts < best_ts) {
                best = Some((ts, i));
            }
        }
        let Some((_, i)) = best else {
            return Ok((None, waits));
        };
        let chunk = self.lanes[i].take_records(max_bytes)?;
        self.update_watermark();
        Ok((Some(chunk), waits))
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
                lane.fill(&self.selector, self.match_all)?;
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
                            .fill_or_bound(&self.selector, self.match_all, self.durable_only)?
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
                    lane.fill_or_bound(&self.selector, self.match_all, self.durable_only)?
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
                .fill_or_bound(&self.selector, self.match_all, self.durable_only)?
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
}
