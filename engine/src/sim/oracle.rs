//! The oracle's checks of every shard's watermarks and memory after every
//! step.

use super::{Broken, World};

impl World {
    /// Every shard's watermarks and memory, after every step.
    pub(super) fn check_shards(&self) -> Result<(), Broken> {
        for (shard, node) in self.nodes.iter().enumerate() {
            let w = &node.core.shared().watermarks;
            let (committed, flushed) = (w.committed_next(), w.flushed_next());
            // Readers never pass the committed watermark; the flushed one
            // never passes it either.
            if flushed > committed {
                return Err((
                    "2.4 flushed <= committed",
                    format!("shard {shard}: flushed {flushed} > committed {committed}"),
                ));
            }
            // The flushed watermark means durable.
            if flushed > node.log.synced_offset() {
                return Err((
                    "2.3 the flushed watermark moves only after the fdatasync covering it",
                    format!(
                        "shard {shard}: flushed {flushed}, synced below {}",
                        node.log.synced_offset()
                    ),
                ));
            }
            // Flush before evict: a window leaves memory only once on disk.
            let evicted = node.core.evicted_below();
            if evicted > flushed {
                return Err((
                    "2.2 flush before evict: a window leaves the ring only once durable",
                    format!("shard {shard}: ring evicted below {evicted}, flushed {flushed}"),
                ));
            }
            // No shard parks with work: a durable waiter always has a flush
            // round due or under way (the flusher would sleep otherwise).
            if node.core.parked_with_waiters() {
                return Err((
                    "2.13 no thread parks with work: a durable waiter always has a flush due or under way",
                    format!(
                        "shard {shard}: durable waiters, {} bytes unflushed, and no flush due",
                        node.core.unflushed_bytes()
                    ),
                ));
            }
            // Bounded memory.
            let bound = self.limits.ring_bytes + 2 * self.limits.window_bytes;
            if node.core.shared().ring_bytes() > bound {
                return Err((
                    "2.11 ring memory stays within ring_bytes",
                    format!(
                        "shard {shard}: {} bytes of windows, bound {bound}",
                        node.core.shared().ring_bytes()
                    ),
                ));
            }
            // Back-pressure: a batch is taken only with room for it (or
            // when nothing is unflushed); batches here are under 1 KiB.
            let unflushed = node.core.unflushed_bytes();
            if unflushed > self.limits.max_unflushed_bytes + 1024 {
                return Err((
                    "2.2 unflushed bytes stay within max_unflushed_bytes",
                    format!("shard {shard}: {unflushed} unflushed"),
                ));
            }
        }
        Ok(())
    }
}
