//! Flush I/O, one operation at a time: a round's write, its sync beside
//! the next write, and retention passes.

use super::{Broken, RunningSync, World};
use crate::retention::RetentionPolicy;
use crate::segment::error::LogError;
use crate::shard::core::{chunk_images, FlushIo};
use crate::storage::block_on;

impl World {
    /// One flush I/O on a random shard: a round's write, or its sync.
    pub(super) fn flush_io(&mut self) -> Result<(), Broken> {
        let shard = self.rng.below(u64::from(self.shards)) as usize;
        self.flush_io_on(shard).map(drop)
    }

    /// One flush I/O on `shard`, if its core has one to do: whether it had.
    /// A running sync may return now (unless stalled) or go on while the
    /// next round is written.
    pub(super) fn flush_io_on(&mut self, shard: usize) -> Result<bool, Broken> {
        if self.nodes[shard].sync.is_some() {
            if self.stalled[shard] > 0 {
                // The fdatasync is under way and has not returned.
                self.stalled[shard] -= 1;
            } else if self.rng.chance(50) {
                return self.sync_returns(shard).map(|()| true);
            }
        }
        let node = &mut self.nodes[shard];
        let replies = match node.core.next_io() {
            FlushIo::Write(plan) => {
                let result = block_on(node.log.append_chunks(&chunk_images(&plan)));
                if node.sync.is_some() && result.is_ok() {
                    self.writes_beside_sync += 1;
                }
                if matches!(result, Err(LogError::NoSpace { .. })) {
                    self.rounds_refused += 1;
                }
                let line = format!(
                    "write shard {shard} {} chunk(s){}: {}",
                    plan.len(),
                    if node.sync.is_some() {
                        " beside a running sync"
                    } else {
                        ""
                    },
                    result
                        .as_ref()
                        .map_or_else(|e| e.to_string(), |_| "ok".into())
                );
                drop(plan);
                let replies = node.core.written(result, node.log.no_space());
                self.note(line);
                replies
            }
            FlushIo::Sync => match node.log.begin_sync() {
                Ok(ticket) => {
                    let mut sync: RunningSync = Box::pin(async move {
                        let result = ticket.run().await;
                        (ticket, result)
                    });
                    // Its first poll fixes what it covers.
                    let first = block_on(futures_lite::future::poll_once(&mut sync));
                    assert!(first.is_none(), "a sync returns at a later poll");
                    node.sync = Some(sync);
                    self.note(format!("sync shard {shard} begins"));
                    return Ok(true);
                }
                Err(e) => node.core.synced(Err(e), &node.log),
            },
            FlushIo::Retention => return self.retention(shard).map(|()| true),
            FlushIo::Prepare => {
                let result = block_on(node.log.prepare_next());
                let line = format!(
                    "shard {shard} makes its next segment: {}",
                    result
                        .as_ref()
                        .map_or_else(|e| e.to_string(), |_| "ok".into())
                );
                let replies = node.core.prepared(result);
                self.note(line);
                replies
            }
            FlushIo::Wait if node.sync.is_some() && self.stalled[shard] == 0 => {
                return self.sync_returns(shard).map(|()| true)
            }
            FlushIo::Wait | FlushIo::Stop => return Ok(false),
        };
        self.answer(replies).map(|()| true)
    }

    /// The running sync of `shard` returns.
    fn sync_returns(&mut self, shard: usize) -> Result<(), Broken> {
        let node = &mut self.nodes[shard];
        let sync = node.sync.take().expect("a sync runs");
        let (ticket, result) = block_on(sync);
        let flushed = node.log.finish_sync(ticket, result);
        let line = format!(
            "sync shard {shard}: {}",
            flushed
                .as_ref()
                .map_or_else(|e| e.to_string(), |n| format!("through {n}"))
        );
        let replies = node.core.synced(flushed, &node.log);
        self.note(line);
        self.answer(replies)
    }

    /// A retention pass the core asked for: whole old segments go.
    fn retention(&mut self, shard: usize) -> Result<(), Broken> {
        let policy = RetentionPolicy {
            max_age: None,
            max_bytes: Some(64 << 10),
            keep_until_uploaded: self.bucket.is_some(),
        };
        let node = &mut self.nodes[shard];
        if node.core.is_latched() {
            return Ok(());
        }
        // As the flusher: with a store, nothing it lacks goes.
        let keep_from = match self.bucket {
            Some(_) => node.core.shared().uploaded_below(),
            None => u64::MAX,
        };
        let Ok(outcome) = block_on(node.log.apply_retention(policy, self.clock_ns, keep_from))
        else {
            self.note(format!("retention shard {shard}: failed"));
            return Ok(());
        };
        node.core.retention_applied(&outcome, &node.log);
        let w = node.core.shared().watermarks.snapshot();
        // 2.7 / 2.3: retention removes whole segments that are durable, never
        // what a crash could still need to replay or a reader has not got on disk.
        if w.retained_from > w.flushed_next {
            return Err((
                "2.7 retention removes only durable, whole segments",
                format!(
                    "shard {shard}: retained from {}, flushed {}",
                    w.retained_from, w.flushed_next
                ),
            ));
        }
        self.retained[shard] = w.retained_from;
        self.note(format!(
            "retention shard {shard}: retained from {}",
            w.retained_from
        ));
        Ok(())
    }
}
