//! Taking an append: its records judged against the producer table, its
//! admission under the unflushed bound, and the step that stamps, frames
//! and publishes it.

use std::sync::atomic::Ordering;

use super::{Admit, Judged, ShardCore, Staged};
use crate::event::{AppendError, Position, Stored};
use crate::producer::Seen;
use crate::record;

impl<R> ShardCore<R> {
    /// Judges each record of an idempotent producer's append against the
    /// table: its stamp and whether it is new or a duplicate. A stale one
    /// refuses the whole part (see `crate::producer`). A plain append is all new.
    pub fn judge(&self, records: &[u8], idempotent: bool) -> Result<Judged, AppendError> {
        let mut judged = Judged {
            seen: Vec::new(),
            new_bytes: 0,
            duplicates: 0,
        };
        if !idempotent {
            judged.new_bytes = records.len();
            return Ok(judged);
        }
        let mut at = 0;
        while at < records.len() {
            let index = judged.seen.len();
            let header = record::peek_header(&records[at..]).map_err(|_| AppendError::Invalid {
                index,
                field: "event",
                reason: "malformed framing".into(),
            })?;
            let Some(stamp) = header.producer else {
                return Err(AppendError::Invalid {
                    index,
                    field: "event",
                    reason: "framed without its producer stamp".into(),
                });
            };
            match self.producers.check(stamp) {
                Seen::Stale { last } => {
                    return Err(AppendError::StaleSequence {
                        producer_id: stamp.producer_id,
                        sequence: stamp.sequence,
                        shard: self.shared.id,
                        last,
                    })
                }
                seen @ Seen::Duplicate { .. } => {
                    judged.duplicates += 1;
                    judged.seen.push((stamp, seen));
                }
                seen => {
                    judged.new_bytes += header.len;
                    judged.seen.push((stamp, seen));
                }
            }
            at += header.len;
        }
        Ok(judged)
    }

    /// Whether the shard takes a judged append now (docs/design.md 2.11, 2.2): an
    /// append whose caller is gone is not applied (and counted); a latched
    /// shard refuses it; else it is staged if its new bytes fit under the
    /// unflushed bound ([`ShardCore::room`]), or waits for a flush. Decided in
    /// the same non-yielding step that stages it, so a caller that leaves
    /// while it waits is never applied later.
    pub fn admit(&mut self, judged: &Judged, caller_gone: bool) -> Admit {
        if caller_gone {
            self.shared.stats.abandoned.fetch_add(1, Ordering::Relaxed);
            return Admit::Abandoned;
        }
        if let Some(e) = self.latched_error() {
            return Admit::Refused(e);
        }
        if let Some(cause) = &self.no_space {
            return Admit::Refused(AppendError::DiskFull {
                shard: self.shared.id,
                cause: cause.clone(),
            });
        }
        match self.room(judged.new_bytes) {
            Ok(()) => Admit::Stage,
            Err(unflushed) => Admit::Wait { unflushed },
        }
    }

    /// Back-pressure: whether `bytes` more fit under the unflushed bound now.
    /// When they do not, the unflushed bytes, and a flush is wanted (the
    /// driver wakes the flusher and waits for the flushed watermark to move).
    pub fn room(&mut self, bytes: usize) -> Result<(), usize> {
        let unflushed = self.ring.unflushed_bytes();
        if bytes == 0 || unflushed == 0 || unflushed + bytes <= self.limits.max_unflushed_bytes {
            return Ok(());
        }
        self.flush_wanted = true;
        Err(unflushed)
    }

    /// Stamps, frames and publishes an append's records in one step: no event
    /// is ever stamped but invisible, and stamps strictly increase with
    /// offsets. `now_ns` is the clock's reading (one per batch: stamps within
    /// it are consecutive nanoseconds).
    pub fn stage(
        &mut self,
        records: &[u8],
        count: usize,
        judged: &Judged,
        now_ns: i64,
    ) -> Result<Staged, AppendError> {
        let shared = &*self.shared;
        let first_unflushed = self.ring.unflushed_bytes() == 0;
        let mut positions = Vec::with_capacity(count);
        let mut staged = 0usize;
        let mut duplicates_end = 0;
        let now = now_ns.max(shared.watermarks.fence() + 1);
        let mut dense_next = shared.watermarks.committed_next();
        let mut at = 0;
        while at < records.len() {
            let Ok(len) = record::peek_len(&records[at..]) else {
                // The engine framed these records itself; refuse rather than panic.
                return Err(AppendError::Invalid {
                    index: positions.len(),
                    field: "event",
                    reason: "malformed framing".into(),
                });
            };
            let record = &records[at..at + len];
            at += len;
            let seen = judged.seen.get(positions.len()).copied();
            if let Some((_, Seen::Duplicate { offset, ts })) = seen {
                duplicates_end = duplicates_end.max(offset + 1);
                positions.push(Stored {
                    position: Position {
                        shard: shared.id,
                        offset,
                        ts,
                    },
                    duplicate: true,
                });
                continue;
            }
            let ts = now.max(self.last_ts + 1);
            let offset = self.ring.stage(record, ts);
            // Dense offsets, strictly increasing stamps (docs/design.md 2.1):
            // each record takes the offset after the last published one's.
            debug_assert_eq!(offset, dense_next, "2.1: an offset skipped or repeated");
            debug_assert!(ts > self.last_ts, "2.1: a stamp not above the last");
            dense_next = offset + 1;
            self.last_ts = ts;
            if let Some((stamp, _)) = seen {
                self.producers.record(stamp, offset, ts);
            }
            staged += len;
            positions.push(Stored {
                position: Position {
                    shard: shared.id,
                    offset,
                    ts,
                },
                duplicate: false,
            });
        }
        // Before the batch is visible: a merge that sees it may ask other shards
        // to claim its stamp, and they claim up to this at once.
        shared
            .stamped_high
            .fetch_max(self.last_ts, Ordering::AcqRel);
        self.ring.publish();
        let next = self.ring.next_offset();
        shared.watermarks.publish_committed(next, self.last_ts);
        // Windows flushed by earlier rounds leave now if the new ones took
        // the ring past its budget. Eviction used to wait for the next
        // round's sync, so while an fdatasync stalled the ring grew by up to
        // max_unflushed_bytes past ring_bytes (the simulator's 2.11 check
        // found it). They are durable and in the published index already.
        if self.ring.capacity_bytes() > self.limits.ring_bytes {
            let evicted = self.ring.evict();
            shared.watermarks.publish_evicted(evicted);
        }
        shared.publish_memory(&self.ring);
        let stats = &shared.stats;
        stats.appended.fetch_add(
            (positions.len() - judged.duplicates) as u64,
            Ordering::Relaxed,
        );
        stats
            .duplicates
            .fetch_add(judged.duplicates as u64, Ordering::Relaxed);
        stats
            .appended_bytes
            .fetch_add(staged as u64, Ordering::Relaxed);
        // Readers wake once per batch, never per event, and not by the shard.
        shared.announce();
        let window_full = self.ring.unflushed_bytes() >= self.limits.window_bytes;
        Ok(Staged {
            positions,
            // A duplicate is acknowledged as durable only once its original is.
            needed: if staged > 0 { next } else { duplicates_end },
            wake_flusher: self.flush_wanted || window_full,
            first_unflushed: first_unflushed && staged > 0,
        })
    }
}
