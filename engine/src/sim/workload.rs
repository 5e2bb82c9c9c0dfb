//! The workload: producers' appends (plain, idempotent, retried), queued
//! per shard and taken in order as the command loop does, staged on the
//! core, and their durable acks.

use super::{Broken, Expect, Fault, Pending, Queued, World, APPEND_TIMEOUT_STEPS, QUEUE_BYTES};
use crate::event::{AppendError, Stored};
use crate::record::{Kind, ProducerStamp, Record, Signatures};
use crate::shard::core::{Admit, Judged, Replies};

impl World {
    /// An append of 1–6 events to one shard: plain, idempotent, or (with
    /// [`Fault::Retry`]) a producer's earlier batch again.
    pub(super) fn append(&mut self) -> Result<(), Broken> {
        let durable = self.rng.chance(400);
        let p = self.rng.below(self.producers.len() as u64 + 1) as usize;
        let retry = self.has(Fault::Retry)
            && p < self.producers.len()
            && !self.producers[p].sent.is_empty()
            && self.rng.chance(250);
        let (shard, stamps, events) = if retry {
            let sent = &self.producers[p].sent;
            let (shard, first, events) = sent[self.rng.below(sent.len() as u64) as usize].clone();
            let id = self.producers[p].id;
            (shard, stamps(id, first, events.len() as u64), events)
        } else {
            let shard = self.rng.below(u64::from(self.shards)) as u32;
            let count = 1 + self.rng.below(6);
            let events: Vec<u64> = (0..count).map(|i| self.next_event + i).collect();
            self.next_event += count;
            let stamps = if p < self.producers.len() {
                let producer = &mut self.producers[p];
                let first = producer.next_sequence;
                producer.next_sequence += count;
                producer.sent.push((shard, first, events.clone()));
                if producer.sent.len() > 16 {
                    producer.sent.remove(0);
                }
                stamps(producer.id, first, count)
            } else {
                vec![None; count as usize]
            };
            (shard, stamps, events)
        };
        let records = frame(&events, &stamps);
        // Queued for the shard as the engine does: refused when the queue is
        // over its budget (an empty queue takes any one batch).
        let shared = self.nodes[shard as usize].core.shared_arc();
        if let Err(e) = shared.reserve_queue(records.len(), QUEUE_BYTES) {
            self.note(format!("append shard {shard} {events:?}: {e}"));
            return Ok(());
        }
        // 2.11: the commands queued for a shard are bounded.
        let queued = shared.queued_bytes();
        if queued > QUEUE_BYTES.max(records.len()) {
            return Err((
                "2.11 the bytes queued for a shard stay within its queue budget",
                format!("shard {shard}: {queued} bytes queued, budget {QUEUE_BYTES}"),
            ));
        }
        self.queues[shard as usize].push_back(Queued {
            events,
            stamps,
            records,
            durable,
            retry,
            arrived: self.step,
            cancelled: false,
        });
        // Mostly taken at once; otherwise it waits for a later take, and a
        // caller may give up on it meanwhile.
        if self.rng.chance(700) {
            self.take(shard as usize)?;
        }
        Ok(())
    }

    /// The shard takes its queued appends in order, until one has to wait
    /// for room (it stays at the head, as the real command loop waits).
    pub(super) fn take(&mut self, shard: usize) -> Result<(), Broken> {
        while let Some(head) = self.queues[shard].front() {
            let cancelled = head.cancelled;
            let idempotent = head.stamps[0].is_some();
            let node = &mut self.nodes[shard];
            let judged = match node.core.judge(&head.records, idempotent) {
                Ok(judged) => judged,
                Err(AppendError::StaleSequence { .. }) => {
                    let line = format!("append shard {shard} {:?}: stale", head.events);
                    self.dequeue(shard);
                    self.note(line);
                    continue;
                }
                Err(e) => return Err(("appends of valid records are judged", e.to_string())),
            };
            let unflushed_before = node.core.unflushed_bytes();
            match node.core.admit(&judged, cancelled) {
                Admit::Stage if cancelled => return Err((
                    "2.11 an append whose caller is gone before its shard takes it is not applied",
                    format!(
                        "shard {shard}: a cancelled append of {:?} was staged",
                        head.events
                    ),
                )),
                Admit::Stage => {
                    let command = self.dequeue(shard);
                    self.stage_command(shard as u32, command, &judged)?;
                }
                Admit::Abandoned if !cancelled => {
                    return Err((
                        "appends whose caller waits are taken",
                        format!("shard {shard}: {:?} abandoned", head.events),
                    ))
                }
                Admit::Abandoned => {
                    let command = self.dequeue(shard);
                    self.note(format!(
                        "append shard {shard} {:?}: cancelled, not applied",
                        command.events
                    ));
                }
                Admit::Refused(e) => {
                    if matches!(e, AppendError::DiskFull { .. }) {
                        self.disk_full_refusals += 1;
                    }
                    let command = self.dequeue(shard);
                    self.note(format!("append shard {shard} {:?}: {e}", command.events));
                }
                Admit::Wait { unflushed } => {
                    // 2.8: a shard waits only for its own flush, never for a
                    // reader: the refusal is explained by unflushed bytes alone.
                    let bound = self.limits.max_unflushed_bytes;
                    if unflushed != unflushed_before
                        || unflushed == 0
                        || unflushed + judged.new_bytes <= bound
                    {
                        return Err((
                            "2.8 a shard never waits for a subscriber: only unflushed bytes hold an append back",
                            format!(
                                "shard {shard}: told to wait with {unflushed} unflushed (was {unflushed_before}), {} new, bound {bound}",
                                judged.new_bytes
                            ),
                        ));
                    }
                    // The real shard waits up to append_timeout, then refuses.
                    if self.step - head.arrived > APPEND_TIMEOUT_STEPS {
                        let command = self.dequeue(shard);
                        self.note(format!(
                            "append shard {shard} {:?}: timed out waiting for room",
                            command.events
                        ));
                        continue;
                    }
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Takes the head of `shard`'s queue, giving its bytes back.
    fn dequeue(&mut self, shard: usize) -> Queued {
        let command = self.queues[shard]
            .pop_front()
            .expect("a head was looked at");
        self.nodes[shard]
            .core
            .shared()
            .release_queue(command.records.len());
        command
    }

    /// A caller gives up on one of the appends queued for a shard.
    pub(super) fn cancel(&mut self, shard: usize) {
        let queue = &mut self.queues[shard];
        if queue.is_empty() {
            return;
        }
        let at = self.rng.below(queue.len() as u64) as usize;
        queue[at].cancelled = true;
        let events = queue[at].events.clone();
        self.note(format!("caller of append shard {shard} {events:?} gone"));
    }

    /// Stamps and publishes a taken append, checking what it staged.
    fn stage_command(
        &mut self,
        shard: u32,
        command: Queued,
        judged: &Judged,
    ) -> Result<(), Broken> {
        let Queued {
            events,
            stamps,
            records,
            durable,
            retry,
            ..
        } = command;
        let now = self.clock_ns;
        let node = &mut self.nodes[shard as usize];
        let committed_before = node.core.shared().watermarks.committed_next();
        let last_ts_before = node.core.last_ts();
        let staged = node
            .core
            .stage(&records, events.len(), judged, now)
            .map_err(|e| ("appends of valid records are staged", e.to_string()))?;
        let generation = node.log.generations().current();
        let shared = node.core.shared();
        let committed = shared.watermarks.committed_next();
        // Offsets are dense and stamps strictly increase, whatever the clock did.
        let mut expect_offset = committed_before;
        let mut prev_ts = last_ts_before;
        let mut new_offsets = Vec::new();
        for (i, stored) in staged.positions.iter().enumerate() {
            let Stored {
                position,
                duplicate,
            } = *stored;
            if duplicate {
                self.duplicates += 1;
                // A duplicate gets its original's position, and only if the
                // original is stored there.
                let original = self.model[shard as usize].get(&position.offset);
                let same = original.is_some_and(|o| o.event == events[i] && o.ts == position.ts);
                if !same {
                    return Err((
                        "2.12 a retry appends nothing and gets its original position",
                        format!(
                            "event {} answered as a duplicate at {}:{} which holds {:?}",
                            events[i], shard, position.offset, original
                        ),
                    ));
                }
                continue;
            }
            if let Some(stamp) = stamps[i] {
                // Within the retained range: the table is rebuilt at open from
                // the retained records, so after a restart a retry of an event
                // that retention already removed is new again (docs/appends.md,
                // "Idempotent producers"; the simulator found that edge).
                let retained = self.nodes[shard as usize]
                    .core
                    .shared()
                    .watermarks
                    .snapshot()
                    .retained_from;
                if let Some((offset, _)) = self.model[shard as usize]
                    .range(retained..)
                    .find(|(_, e)| e.stamp == Some(stamp))
                {
                    return Err((
                        "2.12 retries never duplicate: a producer's event is stored once",
                        format!(
                            "{stamp:?} stored again at {shard}:{} (already at {offset})",
                            position.offset
                        ),
                    ));
                }
            }
            if position.offset != expect_offset || position.ts <= prev_ts {
                return Err((
                    "2.1 offsets are dense and stamps strictly increase within a shard",
                    format!(
                        "staged at {shard}:{} ts {} after offset {} ts {prev_ts}",
                        position.offset,
                        position.ts,
                        expect_offset.wrapping_sub(1)
                    ),
                ));
            }
            expect_offset += 1;
            prev_ts = position.ts;
            new_offsets.push(position.offset);
            self.model[shard as usize].insert(
                position.offset,
                Expect {
                    event: events[i],
                    ts: position.ts,
                    stamp: stamps[i],
                    durable: false,
                    generation,
                },
            );
            self.stored += 1;
        }
        if expect_offset != committed {
            return Err((
                "2.4 the committed watermark covers exactly what was staged, in the same step",
                format!("committed {committed}, staged through {expect_offset}"),
            ));
        }
        let all: Vec<u64> = staged.positions.iter().map(|s| s.position.offset).collect();
        self.note(format!(
            "append shard {shard} events {events:?} {} -> {:?}{}",
            if durable { "durable" } else { "memory" },
            all,
            if retry { " (retry)" } else { "" }
        ));
        if durable {
            let ack = self.next_ack;
            self.next_ack += 1;
            self.pending.insert(
                ack,
                Pending {
                    shard,
                    offsets: all,
                    needed: staged.needed,
                },
            );
            if let Some(ack) = self.nodes[shard as usize]
                .core
                .wait_durable(staged.needed, ack)
            {
                self.durable_ack(ack)?;
            }
        }
        Ok(())
    }

    pub(super) fn answer(&mut self, replies: Replies<u64>) -> Result<(), Broken> {
        for ack in replies.ok {
            self.durable_ack(ack)?;
        }
        for (ack, error) in replies.failed {
            self.pending.remove(&ack);
            self.note(format!("durable ack {ack} failed: {error}"));
        }
        Ok(())
    }

    fn durable_ack(&mut self, ack: u64) -> Result<(), Broken> {
        let pending = self
            .pending
            .remove(&ack)
            .expect("each ack is answered once");
        let node = &self.nodes[pending.shard as usize];
        let synced = node.log.synced_offset();
        // Durable acks only after the fdatasync that covers them returned.
        if synced < pending.needed {
            return Err((
                "2.3 a durable ack is given only after the fdatasync covering it returns",
                format!(
                    "ack {ack} of {}:{:?} needs offset {} synced, the log has synced below {synced}",
                    pending.shard, pending.offsets, pending.needed
                ),
            ));
        }
        let model = &mut self.model[pending.shard as usize];
        for offset in &pending.offsets {
            if let Some(e) = model.get_mut(offset) {
                e.durable = true;
            }
        }
        self.durable_acks += 1;
        self.note(format!("durable ack {ack}"));
        Ok(())
    }
}

/// The stamps of `count` events of producer `id` from sequence `first`.
fn stamps(id: u64, first: u64, count: u64) -> Vec<Option<ProducerStamp>> {
    (first..first + count)
        .map(|sequence| {
            Some(ProducerStamp {
                producer_id: id,
                sequence,
            })
        })
        .collect()
}

/// Frames events (their ids as payloads) as the engine does for one shard.
fn frame(events: &[u64], stamps: &[Option<ProducerStamp>]) -> Vec<u8> {
    let mut out = Vec::new();
    for (event, stamp) in events.iter().zip(stamps) {
        let payload = event.to_le_bytes();
        let directory = format!("/sim/{}", event % 3);
        let record = Record {
            ts: 0,
            offset: 0,
            kind: Kind::Create,
            signatures: Signatures::new(&[]),
            directory: &directory,
            old_name: "",
            new_name: "entry",
            new_parent: "",
            payload: &payload,
            producer: *stamp,
        };
        let at = out.len();
        out.resize(at + record.encoded_len(), 0);
        record
            .encode_into(&mut out[at..])
            .expect("the simulator's records are valid");
    }
    out
}
