//! The simulated world's life: made from a seed, its shards opened, one
//! random step at a time (faults, appends, flush I/O, ticks, subscribers),
//! and the rounds with faults stopped that settle it.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use super::{Broken, Fault, Node, Producer, Rng, SimConfig, Sub, World};
use crate::log::{Log, LogConfig};
use crate::shard::core::{CoreLimits, ShardCore};
use crate::shard::ShardShared;
use crate::storage::{block_on, Faults, MemStorage};
use crate::subscribe::{Ordering as SubOrdering, Subscription};

impl World {
    pub(super) fn new(seed: u64, config: &SimConfig) -> World {
        let shards = config.shards.max(1);
        let log_config = (0..shards)
            .map(|shard| LogConfig {
                shard,
                segment_bytes: 64 << 10,
                max_unsynced_bytes: 8 << 10,
            })
            .collect();
        let mut world = World {
            rng: Rng::new(seed),
            faults: config.faults.clone(),
            shards,
            log_config,
            limits: CoreLimits {
                window_bytes: 4 << 10,
                ring_bytes: 32 << 10,
                max_unflushed_bytes: 16 << 10,
                round_bytes: 8 << 10,
            },
            clock_ns: 1_000_000_000,
            storages: (0..shards)
                .map(|shard| {
                    // Zeros written ahead beside small rounds (as on a file
                    // system, `StorageFile::zero_ahead`), their writes under
                    // the same faults, by seed and shard: none, 4 KiB beside
                    // rounds of 1 KiB or less, or 16 KiB beside rounds of
                    // 4 KiB or less.
                    let storage = MemStorage::new();
                    storage.set_zero_ahead(
                        [0, 4 << 10, 16 << 10][(seed as usize + shard as usize) % 3],
                    );
                    storage
                })
                .collect(),
            nodes: Vec::new(),
            model: (0..shards).map(|_| BTreeMap::new()).collect(),
            pending: BTreeMap::new(),
            queues: (0..shards).map(|_| Default::default()).collect(),
            stalled: vec![0; shards as usize],
            disk_full: vec![0; shards as usize],
            subs: [
                (SubOrdering::Merged, false, false, false),
                (SubOrdering::PerShard, false, false, false),
                (SubOrdering::Merged, true, false, false),
                (SubOrdering::PerShard, false, true, false),
                (SubOrdering::Merged, false, false, true),
                (SubOrdering::PerShard, false, true, true),
            ]
            .into_iter()
            .map(|(ordering, chunk_mode, paused, filtered)| Sub {
                ordering,
                chunk_mode,
                paused,
                filtered,
                sub: None,
                cursor: None,
                next: vec![0; shards as usize],
                covered: (0..shards).map(|_| BTreeMap::new()).collect(),
                last_merged: None,
            })
            .collect(),
            delivered: 0,
            behind_ring: 0,
            writes_beside_sync: 0,
            disk_full_refusals: 0,
            rounds_refused: 0,
            retained: vec![0; shards as usize],
            bucket: None,
            uploads_lost: 0,
            retention_skips: 0,
            producers: (1..=4)
                .map(|id| Producer {
                    id,
                    next_sequence: 0,
                    sent: Vec::new(),
                })
                .collect(),
            next_event: 1,
            next_ack: 1,
            step: 0,
            trace: Vec::new(),
            digest: Default::default(),
            stored: 0,
            durable_acks: 0,
            duplicates: 0,
            restarts: 0,
        };
        if config.faults.contains(&Fault::Bucket) && world.rng.below(2) == 0 {
            world.bucket = Some(super::bucket::SimBucket::new(seed, shards));
            world.note("an object store under the shards".into());
        }
        world.open_all().expect("an empty log opens");
        world
    }

    pub(super) fn has(&self, fault: Fault) -> bool {
        self.faults.contains(&fault)
    }

    pub(super) fn note(&mut self, line: String) {
        line.hash(&mut self.digest);
        self.trace.push(format!("{:>6} {line}", self.step));
    }

    /// Opens every shard's log (recovery) and a core over it.
    pub(super) fn open_all(&mut self) -> Result<(), Broken> {
        let stamped_high = Arc::new(AtomicI64::new(0));
        self.nodes.clear();
        for shard in 0..self.shards {
            let storage = self.storages[shard as usize].clone();
            let opened = block_on(Log::open(
                storage.clone(),
                self.log_config[shard as usize].clone(),
            ));
            let (mut log, _report) = opened.map_err(|e| {
                (
                    "2.9 recovery opens what the shard wrote",
                    format!("shard {shard}: {e}"),
                )
            })?;
            let shared = Arc::new(ShardShared::new(shard, stamped_high.clone(), None));
            shared.attach(
                crate::storage::Storage::reader(&storage),
                log.generations().clone(),
            );
            if let Some(bucket) = &self.bucket {
                // As the uploader does when it reads the manifest.
                shared.set_cold(bucket.clone());
                shared.set_uploaded_below(bucket.uploaded_below(shard));
            }
            let (core, _heads) = ShardCore::over_opened_log(shared, self.limits, &mut log);
            self.nodes.push(Node {
                storage,
                log,
                core,
                sync: None,
            });
        }
        Ok(())
    }

    pub(super) fn step(&mut self) -> Result<(), Broken> {
        self.clock_ns += self.rng.below(2_000) as i64;
        for shard in 0..self.shards as usize {
            if self.disk_full[shard] > 0 {
                self.disk_full[shard] -= 1;
                if self.disk_full[shard] == 0 {
                    self.storages[shard].fill_disk(false);
                    self.note(format!("shard {shard}: space freed"));
                }
            }
        }
        if self.bucket.is_some() && self.rng.chance(50) {
            self.upload()?;
        }
        let roll = self.rng.below(1000);
        match roll {
            0..=389 => self.append()?,
            390..=419 => {
                let shard = self.rng.below(u64::from(self.shards)) as usize;
                self.take(shard)?;
            }
            420..=769 => self.flush_io()?,
            770..=809 => self.tick(),
            810..=819 => {
                // Due now; the core runs it between flush rounds, as on the
                // real path (never between a round's write and its sync).
                let shard = self.rng.below(u64::from(self.shards)) as usize;
                self.nodes[shard].core.retention_due();
            }
            820..=939 => {
                let sub = self.rng.below(self.subs.len() as u64) as usize;
                let max = 1 + self.rng.below(32);
                if !self.subs[sub].paused || self.rng.chance(30) {
                    self.poll_sub(sub, max)?;
                }
            }
            940..=959 => {
                let sub = self.rng.below(self.subs.len() as u64) as usize;
                self.reconnect(sub)?;
            }
            _ => self.fault()?,
        }
        self.check_shards()
    }

    /// Uploads a random shard's oldest sealed segment the store lacks, as
    /// the server's uploader does; a quarter of them are lost before the
    /// manifest names them.
    fn upload(&mut self) -> Result<(), Broken> {
        let bucket = self.bucket.clone().expect("called with a store");
        let shard = self.rng.below(u64::from(self.shards)) as usize;
        let node = &self.nodes[shard];
        let below = bucket.uploaded_below(shard as u32);
        let names = node.log.segment_names();
        // Every segment but the newest is sealed (synced in full).
        let sealed = names.len().saturating_sub(1);
        let firsts: Vec<u64> = names
            .iter()
            .map(|n| crate::segment::parse_segment_name(n).expect("segment names"))
            .collect();
        let Some(i) = (0..sealed).find(|&i| firsts[i] >= below) else {
            return Ok(());
        };
        let (first, next) = (firsts[i], firsts[i + 1]);
        if first != below {
            // Retention removed a segment the store never had: 2.7 broken.
            return Err((
                "2.7 with an object store, retention keeps what the store lacks",
                format!(
                    "shard {shard}: the store ends at {below}, the local log starts at {first}"
                ),
            ));
        }
        if self.rng.chance(250) {
            self.uploads_lost += 1;
            self.note(format!(
                "upload shard {shard} {first}..{next}: lost before the manifest"
            ));
            return Ok(());
        }
        let image = node.core.shared().files().map(&names[i]).map_err(|e| {
            (
                "2.9 a sealed segment reads back",
                format!("shard {shard}: {e}"),
            )
        })?;
        bucket
            .upload(shard as u32, first, next, &image)
            .map_err(|e| {
                (
                    "2.9 a sealed segment reads back whole",
                    format!("shard {shard} {first}..{next}: {e}"),
                )
            })?;
        node.core.shared().set_uploaded_below(next);
        self.note(format!("upload shard {shard} {first}..{next}"));
        Ok(())
    }

    /// The flush interval on a random shard, and every shard answers the
    /// claims merges asked of it (what the real shard's ticker does).
    fn tick(&mut self) {
        let shard = self.rng.below(u64::from(self.shards)) as usize;
        self.nodes[shard].core.flush_interval_passed();
        for node in &mut self.nodes {
            node.core.answer_claim(self.clock_ns);
            // The real shard's retry timer, about once a second.
            node.core.space_retry_due();
        }
        self.note(format!("tick shard {shard}"));
    }

    /// One round with faults stopped: a millisecond passes, and every shard
    /// takes its queue, flushes what it holds and answers claims.
    pub(super) fn settle(&mut self) -> Result<(), Broken> {
        self.clock_ns += 1_000_000;
        for shard in 0..self.shards as usize {
            self.take(shard)?;
            self.nodes[shard].core.flush_interval_passed();
            self.nodes[shard].core.space_retry_due();
            while self.flush_io_on(shard)? {}
            self.nodes[shard].core.answer_claim(self.clock_ns);
        }
        self.check_shards()
    }

    /// Faults stop: the shards flush everything and answer claims, and every
    /// subscriber must then catch up with every committed event (liveness).
    pub(super) fn quiesce(&mut self) -> Result<(), Broken> {
        for storage in &self.storages {
            storage.set_faults(Faults::default());
        }
        self.stalled.iter_mut().for_each(|s| *s = 0);
        if let Some(bucket) = &self.bucket {
            bucket.calm();
        }
        for (shard, full) in self.disk_full.iter_mut().enumerate() {
            *full = 0;
            self.storages[shard].fill_disk(false);
        }
        if self.nodes.iter().any(|n| n.core.is_latched()) {
            self.restart(false)?;
        }
        for _round in 0..64 {
            self.settle()?;
            for i in 0..self.subs.len() {
                self.poll_sub(i, 1 << 20)?;
                // A filtered cursor passes unselected events it never delivers.
                if let Some(cursor) = self.subs[i].sub.as_ref().map(Subscription::cursor) {
                    self.pass_over_to(i, &cursor)?;
                }
            }
            let caught_up = self.subs.iter().all(|sub| {
                (0..self.shards as usize)
                    .all(|s| sub.next[s] == self.nodes[s].core.shared().watermarks.committed_next())
            });
            if caught_up && self.pending.is_empty() {
                return Ok(());
            }
        }
        let behind: Vec<_> = self.subs.iter().map(|s| s.next.clone()).collect();
        let committed: Vec<_> = self
            .nodes
            .iter()
            .map(|n| n.core.shared().watermarks.committed_next())
            .collect();
        Err((
            "liveness: once faults stop, every subscriber catches up and every durable wait is answered",
            format!(
                "subscribers at {behind:?}, committed {committed:?}, durable waits unanswered: {:?}",
                self.pending.values().map(|p| (p.shard, p.needed)).collect::<Vec<_>>()
            ),
        ))
    }
}
