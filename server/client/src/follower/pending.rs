//! Taking a response: its unread part (events, or a chunk's records checked
//! when it came and filtered as they are walked), and the checkpoint kept
//! exact inside it.

use ringfeed_core::filter::Selector;
use ringfeed_core::record::{peek_header, peek_position};
use ringfeed_core::{ClusterCursor, Cursor};
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::v1;

use super::Follower;
use crate::response::{Events, Item, Response};
use crate::{FollowError, FollowedEvent};

/// The unread part of a response.
#[derive(Clone, Debug, Default)]
pub(super) enum Pending {
    #[default]
    Empty,
    Events(Events),
    Chunk(ChunkRecords),
}

/// A chunk's records, checked when it arrived, filtered as they are walked.
#[derive(Clone, Debug)]
pub(super) struct ChunkRecords {
    /// The chunk as it came, its records taken out (into `records`).
    pub(super) message: v1::ChunkMessage,
    /// Its node (cluster scope; 0 otherwise).
    node: u32,
    pub(super) records: Bytes,
    /// Where the unread records start.
    at: usize,
}

impl Pending {
    /// The next event of the response (for a chunk: the next record that
    /// matches `filter` and `until`), or `None` when it is used up.
    fn next_event(
        &mut self,
        filter: &Selector,
        until: i64,
    ) -> Result<Option<FollowedEvent>, FollowError> {
        match self {
            Pending::Empty => Ok(None),
            Pending::Events(events) => events
                .next_event()
                .map_err(|e| FollowError::Corrupt(format!("an event message: {e}"))),
            Pending::Chunk(records) => records.next_match(filter, until),
        }
    }
}

impl ChunkRecords {
    /// The next record that matches `filter` and `until` (0: none), as an event.
    fn next_match(
        &mut self,
        filter: &Selector,
        until: i64,
    ) -> Result<Option<FollowedEvent>, FollowError> {
        while self.at < self.records.len() {
            let at = self.at;
            let shard = self.message.shard;
            let h = peek_header(&self.records[at..]).map_err(|e| {
                FollowError::Corrupt(format!("shard {shard} record at byte {at}: {e}"))
            })?;
            self.at += h.len;
            if filter.matches(&h) && (until == 0 || h.ts <= until) {
                return Ok(Some(FollowedEvent {
                    ts_ns: h.ts,
                    shard,
                    offset: h.offset,
                    node: self.node,
                    event: self.records.slice(at + h.payload_at..at + h.len),
                }));
            }
        }
        Ok(None)
    }
}

impl Follower {
    /// Takes a response: its events become the pending ones, its cursor
    /// the checkpoint once they are handed out.
    pub(super) fn take(&mut self, message: Bytes) -> Result<(), FollowError> {
        let response = Response::parse(message)
            .map_err(|e| FollowError::Corrupt(format!("a response does not decode: {e}")))?;
        let cluster_cursor = (self.cluster.is_some() && !response.cursor.is_empty())
            .then(|| ClusterCursor::from_bytes(&response.cursor))
            .transpose()
            .map_err(|e| FollowError::Corrupt(format!("cluster cursor: {e}")))?;
        let cursor = (!response.cursor.is_empty() && self.cluster.is_none())
            .then(|| Cursor::from_bytes(&response.cursor))
            .transpose()
            .map_err(|e| FollowError::Corrupt(format!("cursor: {e}")))?;
        self.pending = match response.item {
            Item::Events(events) => {
                if events.batch() {
                    self.stats.batches += 1;
                }
                Pending::Events(events)
            }
            Item::Chunk(chunk) => {
                self.stats.chunks += 1;
                Pending::Chunk(self.check_chunk(chunk)?)
            }
            Item::Heartbeat(h) => {
                self.stats.heartbeats += 1;
                self.watermark_ns = self.watermark_ns.max(h.merged_watermark_ns);
                Pending::Empty
            }
            Item::ChunkModeEnd => {
                self.in_chunks = false;
                Pending::Empty
            }
            Item::Nothing => Pending::Empty,
        };
        self.ahead = self.next_pending()?;
        if let Some(cursor) = cluster_cursor {
            let before = self.ahead.is_some().then(|| self.cluster_before(&cursor));
            if let Some(point) = self.cluster.as_mut() {
                match before {
                    None => point.checkpoint = Some(cursor),
                    Some(before) => {
                        point.checkpoint = Some(before);
                        point.response = Some(cursor);
                    }
                }
            }
            return Ok(());
        }
        let Some(cursor) = cursor else {
            return Ok(());
        };
        if self.ahead.is_none() {
            self.reached(cursor);
            return Ok(());
        }
        self.checkpoint = Some(self.checkpoint_before(&cursor));
        self.response_cursor = Some(cursor);
        Ok(())
    }

    /// The checkpoint while a response's events are handed out: the
    /// response's cursor (whose generations hold for every offset at or below
    /// its own, see ringfeed_engine::generation, whose rules the server
    /// applies) with each shard's offset moved back to where the previous
    /// checkpoint had it. Only filtered-out events lie between that and the
    /// shard's first pending event. Without a previous checkpoint, each
    /// shard's first pending event is looked for.
    fn checkpoint_before(&self, cursor: &Cursor) -> Cursor {
        let mut before = cursor.clone();
        match &self.checkpoint {
            Some(previous) if previous.shards() == cursor.shards() => {
                move_back(&mut before, previous);
            }
            _ => {
                let mut seen = vec![false; cursor.shards()];
                self.each_pending(|e| {
                    if let Some(seen) = seen.get_mut(e.shard as usize) {
                        if !*seen {
                            *seen = true;
                            at_first_pending(&mut before, e);
                        }
                    }
                });
            }
        }
        before
    }

    /// [`Follower::checkpoint_before`] in cluster scope, node by node: the
    /// response's cluster cursor with each node's shards moved back to
    /// where the previous checkpoint had them, or, for a node it did not
    /// cover, to that node's first pending event on each shard.
    fn cluster_before(&self, cursor: &ClusterCursor) -> ClusterCursor {
        let mut before = cursor.clone();
        let previous = self.cluster.as_ref().and_then(|p| p.checkpoint.as_ref());
        let mut uncovered = Vec::new();
        for (id, part) in cursor.nodes() {
            match (previous.and_then(|p| p.node(id)), before.node_mut(id)) {
                (Some(previous), Some(moved)) if previous.shards() == part.shards() => {
                    move_back(moved, previous);
                }
                _ => uncovered.push(id),
            }
        }
        if uncovered.is_empty() {
            return before;
        }
        let mut seen = Vec::new();
        self.each_pending(|e| {
            if uncovered.contains(&e.node) && !seen.contains(&(e.node, e.shard)) {
                seen.push((e.node, e.shard));
                if let Some(part) = before.node_mut(e.node) {
                    at_first_pending(part, e);
                }
            }
        });
        before
    }

    /// Calls `each` on the current response's events not handed out yet,
    /// in order, without handing them out.
    fn each_pending(&self, mut each: impl FnMut(&FollowedEvent)) {
        let mut rest = self.pending.clone();
        let mut event = self.ahead.clone();
        while let Some(e) = event {
            each(&e);
            // The events were walked once already: they decode.
            event = rest
                .next_event(&self.selector, self.request.until_ns)
                .ok()
                .flatten();
        }
    }

    /// The next event of the current response, or `None` when it is used up.
    fn next_pending(&mut self) -> Result<Option<FollowedEvent>, FollowError> {
        self.pending
            .next_event(&self.selector, self.request.until_ns)
    }

    /// Finds the event after the one just handed out; when the response is
    /// used up, its cursor becomes the checkpoint.
    pub(super) fn look_ahead(&mut self) -> Result<(), FollowError> {
        self.ahead = self.next_pending()?;
        if self.ahead.is_none() {
            self.pending = Pending::Empty;
            if let Some(point) = self.cluster.as_mut() {
                if let Some(cursor) = point.response.take() {
                    point.checkpoint = Some(cursor);
                }
            }
            if let Some(cursor) = self.response_cursor.take() {
                self.reached(cursor);
            }
        }
        Ok(())
    }

    /// Every event before `cursor` was handed out.
    pub(super) fn reached(&mut self, cursor: Cursor) {
        self.checkpoint = Some(cursor);
        // resume_truncated was for the cursor the follower started
        // from; a later crash's truncation must be reported again.
        self.request.resume_truncated = false;
    }

    pub(super) fn hand_out(&mut self, event: &FollowedEvent) {
        self.stats.events += 1;
        self.watermark_ns = self.watermark_ns.max(event.ts_ns - 1);
        if let Some(point) = self.cluster.as_mut() {
            // As below, in the event's node's part.
            let generation = point
                .response
                .as_ref()
                .and_then(|c| c.node(event.node))
                .and_then(|c| c.generation(event.shard));
            if let Some(part) = point
                .checkpoint
                .as_mut()
                .and_then(|c| c.node_mut(event.node))
            {
                part.set_shard(event.shard, event.offset + 1, generation);
            }
        }
        if let Some(checkpoint) = self.checkpoint.as_mut() {
            // Past this event the response's generation holds; the
            // checkpoint may still carry the previous response's.
            let generation = self
                .response_cursor
                .as_ref()
                .and_then(|c| c.generation(event.shard));
            checkpoint.set_shard(event.shard, event.offset + 1, generation);
        }
    }

    /// Checks a chunk (checksum, offsets dense from `first_offset`, the
    /// announced count) before any of its records is handed out.
    fn check_chunk(&self, mut chunk: v1::ChunkMessage) -> Result<ChunkRecords, FollowError> {
        if !self.in_chunks {
            return Err(FollowError::Corrupt(
                "a chunk after the end of chunk mode".into(),
            ));
        }
        // In cluster scope every chunk names its node, as every event does.
        let node = match self.cluster {
            Some(_) if chunk.node == 0 => {
                return Err(FollowError::Corrupt(format!(
                    "shard {} chunk at offset {}: no node in a cluster stream",
                    chunk.shard, chunk.first_offset
                )))
            }
            Some(_) => chunk.node,
            None => 0,
        };
        let records = std::mem::take(&mut chunk.records);
        if crc32c::crc32c(&records) != chunk.crc32c {
            return Err(FollowError::Corrupt(format!(
                "shard {} chunk at offset {}: checksum mismatch",
                chunk.shard, chunk.first_offset
            )));
        }
        let mut at = 0;
        let mut expected = chunk.first_offset;
        while at < records.len() {
            let (len, offset, _) = peek_position(&records[at..]).map_err(|e| {
                FollowError::Corrupt(format!("shard {} record {expected}: {e}", chunk.shard))
            })?;
            if offset != expected {
                return Err(FollowError::Corrupt(format!(
                    "shard {}: expected offset {expected}, found {offset}",
                    chunk.shard
                )));
            }
            at += len;
            expected += 1;
        }
        if expected - chunk.first_offset != u64::from(chunk.record_count) {
            return Err(FollowError::Corrupt(format!(
                "shard {} chunk at offset {}: {} records, {} announced",
                chunk.shard,
                chunk.first_offset,
                expected - chunk.first_offset,
                chunk.record_count
            )));
        }
        Ok(ChunkRecords {
            message: chunk,
            node,
            records,
            at: 0,
        })
    }
}

/// `before` (a response's cursor, same shards as `previous`) with each
/// shard moved back to where the previous checkpoint had it, if that is
/// not past it: its generation too, so a cursor inside a batch is the one a
/// response of its own would have carried.
fn move_back(before: &mut Cursor, previous: &Cursor) {
    for shard in 0..before.shards() as u32 {
        let next = previous.next_offset(shard);
        if next <= before.next_offset(shard) {
            before.set_shard(shard, next, previous.generation(shard));
        }
    }
}

/// `cursor`'s shard of `e` set just before `e`, its first pending event.
/// At offset 0 it covers none of the shard's events: generation 0, as a
/// server writes it.
fn at_first_pending(cursor: &mut Cursor, e: &FollowedEvent) {
    cursor.set_shard(e.shard, e.offset, (e.offset == 0).then_some(0));
}
