//! The oracle: reads exactly what a client reads and checks every response,
//! event, chunk, final error and clean end against the simulated shards.

use std::hash::Hash;
use std::task::{Context, Poll, Waker};

use ringfeed_engine::sim::Broken;
use ringfeed_engine::{record, Cursor, Ordering};
use ringfeed_proto::tonic::{Code, Status};
use ringfeed_proto::{v1, RawItem, RawSubscribeResponse};

use super::{ClientStream, World};

impl World {
    /// Reads up to `max` responses: `Some` once the stream has ended.
    pub(super) fn read(
        &mut self,
        s: &mut ClientStream,
        max: u64,
        who: &str,
    ) -> Result<Option<End>, Broken> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut read = 0;
        while read < max {
            match s.responses.as_mut().poll_next(&mut cx) {
                Poll::Pending => return Ok(None),
                Poll::Ready(Some(Ok(response))) => {
                    if s.failed {
                        return Err((
                            "2.10 a stream's final error is its last item",
                            format!("{who}: a response after the final error"),
                        ));
                    }
                    self.response(s, response, who)?;
                    read += 1;
                }
                Poll::Ready(Some(Err(status))) => {
                    if s.failed {
                        return Err((
                            "2.10 a stream's final error is its last item",
                            format!("{who}: a second final error {status}"),
                        ));
                    }
                    self.final_error(s, &status, who)?;
                    self.sim.note(format!(
                        "{who} stream fails: {:?} {}",
                        status.code(),
                        status.message()
                    ));
                    s.failed = true;
                    read += 1;
                }
                Poll::Ready(None) if s.failed => return Ok(Some(End::Failed)),
                Poll::Ready(None) => {
                    self.sim.note(format!("{who} stream ends clean"));
                    self.clean_end(s, who)?;
                    return Ok(Some(End::Clean));
                }
            }
        }
        Ok(None)
    }

    /// A response: its item checked, then its cursor.
    fn response(
        &mut self,
        s: &mut ClientStream,
        response: RawSubscribeResponse,
        who: &str,
    ) -> Result<(), Broken> {
        let response = response
            .into_fields()
            .map_err(|e| ("responses decode", format!("{who}: {e}")))?;
        let Some(item) = response.item else {
            return Err(("every response carries an item", who.to_string()));
        };
        match item {
            RawItem::Event(e) => {
                let payload = e.event.unwrap_or_default();
                self.event(s, (e.shard, e.offset, e.ts_ns), &payload, who, true)?;
            }
            RawItem::Batch(batch) => {
                if batch.events.is_empty() {
                    return Err(("a batch carries events", format!("{who}: an empty batch")));
                }
                for e in batch.events {
                    let payload = e.event.unwrap_or_default();
                    self.event(s, (e.shard, e.offset, e.ts_ns), &payload, who, true)?;
                }
            }
            RawItem::Chunk(chunk) => self.chunk(s, &chunk, who)?,
            RawItem::Heartbeat(beat) => {
                // 2.10: a control message of its own, and truthful: every
                // event delivered after it is stamped above its watermark.
                s.heartbeat_mark = s.heartbeat_mark.max(beat.merged_watermark_ns);
                self.outcome.heartbeats += 1;
            }
            RawItem::ChunkModeEnd(_) => {
                if !s.chunk_mode || s.chunks_ended {
                    return Err((
                        "2.10 the chunk-mode marker comes once, in chunk mode",
                        who.to_string(),
                    ));
                }
                s.chunks_ended = true;
            }
        }
        // 2.6: each response's cursor is exactly what was delivered up to it.
        let cursor = Cursor::from_bytes(&response.cursor)
            .map_err(|e| ("responses carry a valid cursor", format!("{who}: {e}")))?;
        if cursor.offsets() != s.next.as_slice() {
            return Err((
                "2.6 a response's cursor is exactly what was delivered up to it",
                format!(
                    "{who}: cursor {:?}, delivered up to {:?}",
                    cursor.offsets(),
                    s.next
                ),
            ));
        }
        s.cursor = cursor;
        Ok(())
    }

    fn chunk(
        &mut self,
        s: &mut ClientStream,
        chunk: &v1::ChunkMessage,
        who: &str,
    ) -> Result<(), Broken> {
        if !s.chunk_mode || s.chunks_ended {
            return Err((
                "2.10 chunks come only in chunk mode, before its marker",
                who.to_string(),
            ));
        }
        if crc32c::crc32c(&chunk.records) != chunk.crc32c {
            return Err(("a chunk's checksum covers its records", who.to_string()));
        }
        let bad = |e: record::RecordError| ("chunks hold whole records", format!("{who}: {e}"));
        let mut at = 0;
        for k in 0..u64::from(chunk.record_count) {
            let rest = chunk.records.get(at..).unwrap_or_default();
            let (len, offset, ts) = record::peek_position(rest).map_err(bad)?;
            let header = record::peek_header(rest).map_err(bad)?;
            let payload = rest.get(header.payload_at..len).unwrap_or_default();
            if offset != chunk.first_offset + k {
                return Err((
                    "chunks are dense",
                    format!(
                        "{who}: offset {offset} at {k} of a chunk from {}",
                        chunk.first_offset
                    ),
                ));
            }
            // Chunks go out by run, not merged event by event.
            self.event(s, (chunk.shard, offset, ts), payload, who, false)?;
            at += len;
        }
        if at != chunk.records.len() {
            return Err(("a chunk holds exactly its records", who.to_string()));
        }
        Ok(())
    }

    /// One delivered event at `(shard, offset, ts)`; `in_order` when it
    /// came as an event rather than inside a chunk (chunks go out by run).
    fn event(
        &mut self,
        s: &mut ClientStream,
        (shard, offset, ts): (u32, u64, i64),
        payload: &[u8],
        who: &str,
        in_order: bool,
    ) -> Result<(), Broken> {
        let sh = shard as usize;
        if sh >= s.next.len() {
            return Err((
                "events name a shard of the engine",
                format!("{who}: shard {shard}"),
            ));
        }
        // 2.6: exactly the next event of its shard, never a skip or a repeat.
        if offset != s.next[sh] {
            return Err((
                "2.6 resume is exact: a stream never skips and never repeats an event",
                format!(
                    "{who}: got {shard}:{offset}, expected {shard}:{}",
                    s.next[sh]
                ),
            ));
        }
        let event = <[u8; 8]>::try_from(payload).map(u64::from_le_bytes).ok();
        let stored = self.sim.event_at(shard, offset);
        if event.is_none() || stored != event.map(|e| (e, ts)) {
            return Err((
                "streams carry exactly the appended events",
                format!("{who}: got {event:?} ts {ts} at {shard}:{offset}, stored {stored:?}"),
            ));
        }
        if ts <= s.heartbeat_mark {
            return Err((
                "2.10 a heartbeat's watermark is below every event delivered after it",
                format!(
                    "{who}: {shard}:{offset} ts {ts} after a heartbeat at {}",
                    s.heartbeat_mark
                ),
            ));
        }
        // 2.5: merged order is (ts, shard), the same on every replay.
        if in_order && s.ordering == Ordering::Merged {
            if s.last_merged.is_some_and(|last| (ts, shard) <= last) {
                return Err((
                    "2.5 a merged subscription delivers in (ts, source) order",
                    format!("{who}: ({ts}, shard {shard}) after {:?}", s.last_merged),
                ));
            }
            s.last_merged = Some((ts, shard));
        }
        s.next[sh] += 1;
        (shard, offset, ts).hash(&mut self.digest);
        self.outcome.events += 1;
        Ok(())
    }

    /// The stream's final error: one it was given cause for.
    fn final_error(&mut self, s: &ClientStream, status: &Status, who: &str) -> Result<(), Broken> {
        status.code().hash(&mut self.digest);
        if status.code() == Code::OutOfRange {
            // 2.7: only a stream whose next event retention removed.
            let shards = self.sim.shards();
            let below = shards
                .iter()
                .enumerate()
                .any(|(i, shard)| s.next[i] < shard.watermarks.snapshot().retained_from);
            if !below {
                return Err((
                    "2.7 a stream fails OUT_OF_RANGE only below the retained range",
                    format!("{who}: {status} at {:?}", s.next),
                ));
            }
            self.outcome.out_of_range += 1;
            return Ok(());
        }
        // Superseded: CANCELLED naming one of the epochs that replaced it
        // (a stream may be superseded again before its sender sees the first).
        let superseded_by = ringfeed_proto::wire::superseded_by(status);
        let expected = s.may_fail.iter().any(|&(code, epoch)| {
            code == status.code() && (code != Code::Cancelled || superseded_by == Some(epoch))
        });
        if !expected {
            return Err((
                "2.10 a stream fails only with an error it was given cause for",
                format!("{who}: {status}, causes {:?}", s.may_fail),
            ));
        }
        match status.code() {
            Code::Cancelled => self.outcome.cancelled += 1,
            _ => self.outcome.unavailable += 1,
        }
        Ok(())
    }

    /// A clean end: only at until_ns, with every event up to it delivered.
    fn clean_end(&mut self, s: &ClientStream, who: &str) -> Result<(), Broken> {
        let Some(until) = s.until_ns else {
            return Err((
                "2.10 a stream's final error is never turned into a clean end",
                format!(
                    "{who} ended clean without an until_ns (causes to fail: {:?}, at {:?})",
                    s.may_fail, s.next
                ),
            ));
        };
        for (shard, &next) in s.next.iter().enumerate() {
            if let Some((_, ts)) = self.sim.event_at(shard as u32, next) {
                if ts <= until {
                    return Err((
                        "2.10 a stream ends clean only once every event up to until_ns is delivered",
                        format!("{who}: ended before {shard}:{next} ts {ts}, until {until}"),
                    ));
                }
            }
        }
        self.outcome.clean_ends += 1;
        Ok(())
    }
}

pub(super) enum End {
    Clean,
    Failed,
}
