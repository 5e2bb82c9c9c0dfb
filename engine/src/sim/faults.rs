//! Faults: the injected failures, slow syncs, full disks and clock steps,
//! and restarts (process crash or power loss) with what recovery kept read
//! back and checked against every ack given.

use std::collections::BTreeMap;

use super::{Broken, Fault, World};
use crate::log::Log;
use crate::record::ProducerStamp;
use crate::storage::{block_on, Faults, MemStorage};

impl World {
    pub(super) fn fault(&mut self) -> Result<(), Broken> {
        let shard = self.rng.below(u64::from(self.shards)) as usize;
        let kind = self.rng.below(10);
        let latched = self.nodes.iter().any(|n| n.core.is_latched());
        match kind {
            0 if self.has(Fault::Crash) || latched => self.restart(false)?,
            1 if self.has(Fault::PowerLoss) => self.restart(true)?,
            2 if self.has(Fault::WriteError) => {
                self.nodes[shard].storage.set_faults(Faults {
                    fail_write: Some(0),
                    ..Faults::default()
                });
                self.note(format!("arm write error shard {shard}"));
            }
            3 if self.has(Fault::SyncError) => {
                self.nodes[shard].storage.set_faults(Faults {
                    fail_sync: Some(0),
                    ..Faults::default()
                });
                self.note(format!("arm sync error shard {shard}"));
            }
            4 if self.has(Fault::TornWrite) => {
                let keep = 512 * (1 + self.rng.below(4) as usize);
                self.nodes[shard].storage.set_faults(Faults {
                    tear_write: Some((0, keep)),
                    ..Faults::default()
                });
                self.note(format!("arm torn write shard {shard} keeping {keep} bytes"));
            }
            7 if self.has(Fault::StalledSync) => {
                let steps = 1 + self.rng.below(300);
                self.stalled[shard] = steps;
                self.note(format!(
                    "shard {shard}: its next fdatasync takes {steps} steps"
                ));
            }
            8 if self.has(Fault::Cancel) => self.cancel(shard),
            9 if self.has(Fault::DiskFull) => {
                let steps = 1 + self.rng.below(300);
                self.disk_full[shard] = steps;
                self.storages[shard].fill_disk(true);
                self.note(format!("shard {shard}: the disk is full for {steps} steps"));
            }
            5 | 6 if self.has(Fault::ClockStep) => {
                let by = self.rng.below(2_000_000_000) as i64 - 1_000_000_000;
                self.clock_ns = (self.clock_ns + by).max(1);
                self.note(format!("clock step {by} ns"));
            }
            _ => {}
        }
        Ok(())
    }

    /// Every shard stops at once (a process crash, or power loss), recovers,
    /// and what recovery kept is checked against every ack given.
    pub(super) fn restart(&mut self, power_loss: bool) -> Result<(), Broken> {
        let flushed: Vec<u64> = self
            .nodes
            .iter()
            .map(|n| n.core.shared().watermarks.flushed_next())
            .collect();
        let generations: Vec<u32> = self
            .nodes
            .iter()
            .map(|n| n.log.generations().current())
            .collect();
        for i in 0..self.subs.len() {
            let sub = &mut self.subs[i];
            // Merged order holds within an engine's life; across a restart
            // only per-shard order and exactness are promised.
            sub.last_merged = None;
            if let Some(open) = sub.sub.take() {
                let cursor = open.cursor();
                self.pass_over_to(i, &cursor)?;
                self.subs[i].cursor = Some(cursor);
            }
        }
        self.nodes.clear();
        self.pending.clear(); // never acknowledged: the process is gone
        for queue in &mut self.queues {
            queue.clear(); // never taken: the process is gone
        }
        self.stalled.iter_mut().for_each(|s| *s = 0);
        for storage in &self.storages {
            if power_loss {
                storage.power_loss_keeping(self.rng.next());
            } else {
                storage.process_crash();
            }
        }
        self.restarts += 1;
        self.note(format!(
            "{} (flushed {flushed:?})",
            if power_loss { "power loss" } else { "crash" }
        ));
        self.open_all()?;
        for shard in 0..self.shards as usize {
            let node = &self.nodes[shard];
            let kept = read_log(&node.log).map_err(|e| {
                (
                    "2.9 recovered chunks read back and verify",
                    format!("shard {shard}: {e}"),
                )
            })?;
            let next = node.log.next_offset();
            let gens = node.log.generations();
            // A new generation starts with every open.
            if gens.current() <= generations[shard] {
                return Err((
                    "2.6 every open starts a new generation",
                    format!(
                        "shard {shard}: generation {} after {}",
                        gens.current(),
                        generations[shard]
                    ),
                ));
            }
            let mut prev: Option<(u64, i64)> = None;
            let mut stamps = std::collections::BTreeSet::new();
            for &(offset, ts, _, stamp) in &kept {
                if prev.is_some_and(|(o, t)| offset != o + 1 || ts <= t) {
                    return Err((
                        "2.1 offsets are dense and stamps strictly increase within a shard",
                        format!("shard {shard}: recovered {offset} ts {ts} after {prev:?}"),
                    ));
                }
                prev = Some((offset, ts));
                if let Some(stamp) = stamp {
                    if !stamps.insert((stamp.producer_id, stamp.sequence)) {
                        return Err((
                            "2.12 retries never duplicate: a producer's event is stored once",
                            format!("shard {shard}: {stamp:?} recovered twice"),
                        ));
                    }
                }
            }
            let on_disk: BTreeMap<u64, (i64, u64)> = kept
                .iter()
                .map(|&(offset, ts, event, _)| (offset, (ts, event)))
                .collect();
            let retained = node.log.retained().map_or(next, |r| r.0);
            // Below the retained range, events were removed on purpose.
            for (&offset, expect) in self.model[shard].range(retained..) {
                let found = on_disk.get(&offset);
                let same = found == Some(&(expect.ts, expect.event));
                // Durable acks are never lost; nor is anything below the
                // flushed watermark (it means durable); after a process
                // crash, everything written stays.
                let must = expect.durable || offset < flushed[shard];
                if must && !same {
                    return Err((
                        "2.3 an acknowledged durable event is never lost",
                        format!(
                            "shard {shard} offset {offset}: expected event {} (ts {}, {}), recovered {found:?}",
                            expect.event,
                            expect.ts,
                            if expect.durable { "durably acked" } else { "flushed" }
                        ),
                    ));
                }
                if !same && found.is_some() {
                    return Err((
                        "2.9 recovery keeps exactly a prefix of what was written",
                        format!(
                            "shard {shard} offset {offset}: event {} became {found:?}",
                            expect.event
                        ),
                    ));
                }
                // Crash-safe cursors: an offset whose event was lost is
                // handed out again only under another generation.
                if !same && gens.of_offset(offset) == expect.generation {
                    return Err((
                        "2.6 an offset is never reused within a generation",
                        format!(
                            "shard {shard} offset {offset} (lost event {}) is in generation {} again",
                            expect.event, expect.generation
                        ),
                    ));
                }
            }
            if kept.len() as u64 != next - retained {
                return Err((
                    "2.9 recovery keeps exactly a prefix of what was written",
                    format!(
                        "shard {shard}: {} records read, retained {retained}..{next}",
                        kept.len()
                    ),
                ));
            }
            // Retention's removals may be undone by power loss (the
            // directory change was not synced), never extended.
            if retained > self.retained[shard] {
                return Err((
                    "2.7 recovery never loses retained segments",
                    format!(
                        "shard {shard}: retained from {retained}, was {}",
                        self.retained[shard]
                    ),
                ));
            }
            self.retained[shard] = retained;
        }
        // The model is now what the disk holds.
        for shard in 0..self.shards as usize {
            let next = self.nodes[shard].log.next_offset();
            self.model[shard].retain(|&offset, _| offset < next);
            for e in self.model[shard].values_mut() {
                // Recovered and synced by the open: it must survive from now on.
                e.durable = true;
            }
        }
        for i in 0..self.subs.len() {
            self.resume_after_restart(i)?;
        }
        Ok(())
    }
}

/// Every record of a log as (offset, ts, event id, producer stamp).
type Kept = Vec<(u64, i64, u64, Option<ProducerStamp>)>;

fn read_log(log: &Log<MemStorage>) -> Result<Kept, String> {
    let mut kept = Vec::new();
    for location in log.chunks().collect::<Vec<_>>() {
        let buf = block_on(log.read_chunk(&location)).map_err(|e| e.to_string())?;
        let header = crate::chunk::ChunkHeader::decode(&buf).map_err(|e| e.to_string())?;
        let body = crate::chunk::body_of(&buf, &header).map_err(|e| e.to_string())?;
        for record in crate::chunk::records(body) {
            let record = record.map_err(|e| e.to_string())?;
            let event = u64::from_le_bytes(
                record
                    .payload
                    .try_into()
                    .map_err(|_| "a payload that is not an event id".to_string())?,
            );
            kept.push((record.offset, record.ts, event, record.producer));
        }
    }
    Ok(kept)
}
