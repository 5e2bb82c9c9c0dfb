//! What goes into the merge: this node's events, a peer's items (each
//! once, whichever follower brought it), and the bounds they set.

use ringfeed_engine::Step;
use ringfeed_proto::tonic::Status;

use super::budget::event_units;
use super::{ClusterStream, Pending};
use crate::peer_feed::PeerItem;

/// Most events pulled from the local subscription before merging them.
const LOCAL_PULL: usize = 1024;

impl ClusterStream {
    /// Takes what the local subscription has ready; when it has nothing
    /// more, its watermark bounds every local shard. True if it stopped
    /// with more perhaps ready (the merge full, or [`LOCAL_PULL`] taken).
    pub(super) fn pull_local(&mut self) -> Result<bool, Status> {
        for _ in 0..LOCAL_PULL {
            if self.full(true) {
                return Ok(true);
            }
            match self.local.poll().map_err(crate::status::subscribe_status)? {
                Step::Event(d) => self.push_local(d),
                Step::Pending => {
                    self.bound_node(0, self.local.watermark());
                    return Ok(false);
                }
                Step::End => {
                    // Past until_ns: no more local events.
                    self.bound_node(0, i64::MAX);
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Node `node` (index in `nodes`) will push nothing more stamped at or
    /// below `ts`, on any of its shards.
    fn bound_node(&mut self, node: usize, ts: i64) {
        let node = &self.nodes[node];
        for shard in 0..node.shards as usize {
            self.merge.bound(node.first_source + shard, ts);
        }
    }

    fn push_local(&mut self, d: ringfeed_engine::Delivered) {
        let source = self.nodes[0].first_source + d.shard as usize;
        let after = self.local.cursor();
        let pending = Pending {
            node: 0,
            shard: d.shard,
            offset: d.offset,
            payload: d.payload(),
            next: after.next_offset(d.shard),
            generation: after.generation(d.shard),
        };
        self.queued_units += event_units(&pending.payload);
        self.merge.push(source, d.ts, pending);
    }

    /// Takes an item of node `node` (a peer), from whichever follower: an
    /// event it already has (at or below its position) is skipped.
    pub(super) fn take(&mut self, node: usize, item: PeerItem) -> Result<(), Status> {
        let n = &mut self.nodes[node];
        match &item {
            PeerItem::Start(start) => {
                if n.cursor.is_none() {
                    n.cursor = Some((**start).clone());
                }
            }
            PeerItem::Event {
                shard,
                offset,
                generation,
                ..
            } => {
                if *shard >= n.shards {
                    return Err(Status::internal(format!(
                        "node {} sent an event of shard {shard}, but it has {} shard(s)",
                        n.id, n.shards
                    )));
                }
                // Already taken: below the position, in the same
                // generation. An event of another generation at such an
                // offset is new (a peer that lost events in a crash and
                // reused their offsets, resumed with resume_truncated).
                let taken = n.fed.as_ref().is_some_and(|f| {
                    *offset < f.next_offset(*shard)
                        && (generation.is_none()
                            || f.generation(*shard).is_none()
                            || f.generation(*shard) == *generation)
                });
                if taken {
                    return Ok(());
                }
            }
            PeerItem::Watermark { .. } | PeerItem::End => {}
        }
        item.advance(&mut n.fed);
        match item {
            PeerItem::Event {
                ts,
                shard,
                offset,
                payload,
                next,
                generation,
            } => {
                let source = n.first_source + shard as usize;
                self.queued_units += event_units(&payload);
                let pending = Pending {
                    node,
                    shard,
                    offset,
                    payload,
                    next,
                    generation,
                };
                self.merge.push(source, ts, pending);
            }
            PeerItem::Watermark { ts, .. } => self.bound_node(node, ts),
            // Past until_ns: nothing more at or below it will come.
            PeerItem::End => self.bound_node(node, i64::MAX),
            PeerItem::Start(_) => {}
        }
        Ok(())
    }
}
