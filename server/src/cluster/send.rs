//! What the stream sends: responses of the events the merge delivers,
//! heartbeats, its cursor, and what ListSubscribers shows of it.

use ringfeed_engine::merge::SourceId;
use ringfeed_engine::ClusterCursor;
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::tonic::Status;
use ringfeed_proto::{v1, RawEventBatch, RawEventMessage, RawItem, RawSubscribeResponse};
use tokio::sync::watch;

use super::budget::event_units;
use super::{ClusterStream, Source};
use crate::sender::Admission;

impl ClusterStream {
    /// Sends one response of the events the merge delivers now, if any:
    /// true if it took any from the merge (more may be ready).
    pub(super) async fn send_ready(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<bool, Status> {
        let limit = if self.batching {
            self.batch_max_events
        } else {
            1
        };
        let now = self.now();
        let mut events = Vec::new();
        // What the popped events counted against the budget in the merge.
        let mut popped_units = 0;
        // Events of at most `batch_max_bytes` a response, as a node stream's
        // (what a response holds of the budget until the transport has
        // written it, and a size every gRPC client takes: their default limit
        // is 4 MiB, which 512 events of 8 KiB passed).
        let mut payload_bytes = 0;
        while events.len() < limit && payload_bytes < self.batch_max_bytes {
            let Some(popped) = self.merge.pop(now) else {
                break;
            };
            let p = popped.event;
            let counted = event_units(&p.payload);
            payload_bytes += p.payload.len();
            popped_units += counted;
            self.queued_units -= counted;
            let node = &mut self.nodes[p.node];
            let payload = match self.scope.as_ref().map(|s| s.show(&p.payload)) {
                None | Some(crate::auth::Shown::Same) => Some(p.payload),
                Some(crate::auth::Shown::Rewritten(bytes)) => Some(bytes),
                Some(crate::auth::Shown::Hidden) => None,
            };
            if let Some(payload) = payload {
                events.push(RawEventMessage {
                    node: node.id,
                    ..RawEventMessage::new(popped.ts, p.shard, p.offset, payload)
                });
            }
            // A node's first event comes after its start (its follower's
            // Start item), so its cursor is known by then.
            let Some(cursor) = node.cursor.as_mut() else {
                return Err(Status::internal(format!(
                    "an event of node {} before its start",
                    node.id
                )));
            };
            cursor.set_shard(p.shard, p.next, p.generation);
        }
        // The response holds the budget its events held in the merge until
        // the transport has written it (none for events the merge held
        // over budget: `full` lets that happen only while the other side
        // holds it, at most MAX_QUEUED events). Never waits for budget: a
        // stream waiting for it while its merge holds some could wait on
        // streams that wait on it.
        let permit = Admission::carve(&mut self.budget, popped_units);
        Admission::trim(&mut self.budget, self.queued_units);
        if events.is_empty() {
            // Popped events the read scope hides move the stream too: more
            // may be ready behind them.
            return Ok(popped_units > 0);
        }
        let item = if events.len() == 1 {
            RawItem::Event(events.pop().expect("one"))
        } else {
            RawItem::Batch(RawEventBatch { events })
        };
        self.send(item, permit, shutdown).await?;
        Ok(true)
    }

    /// The stream's cursor: per node, its cursor after its last event
    /// delivered; nodes not in the stream keep their start part.
    pub(super) fn cursor(&self) -> ClusterCursor {
        let mut cursor = self.start.clone();
        for node in &self.nodes {
            if let Some(c) = &node.cursor {
                cursor.set(node.id, c.clone());
            }
        }
        cursor
    }

    /// A heartbeat: the merged watermark, and which nodes hold the merge
    /// or are skipped.
    pub(super) async fn send_heartbeat(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), Status> {
        let heartbeat = v1::Heartbeat {
            merged_watermark_ns: self.merge.watermark().max(0),
            shards: Vec::new(),
            held_by_nodes: node_ids(self.merge.holding()),
            skipped_nodes: node_ids(self.merge.skipped()),
        };
        self.send(RawItem::Heartbeat(heartbeat), None, shutdown)
            .await
    }

    /// Updates what `ListSubscribers` shows: position, lag (now minus the
    /// merge's watermark), and in `mode` the nodes holding the merge or
    /// skipped.
    /// `cursor`: the stream's cursor, encoded.
    pub(super) fn show(&self, cursor: Bytes) {
        let listed = |ids: Vec<u32>| {
            let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
            ids.join(",")
        };
        let held = listed(node_ids(self.merge.holding()));
        let skipped = listed(node_ids(self.merge.skipped()));
        let mut mode = format!("cluster, {} node(s)", self.nodes.len());
        if self.chunks {
            mode += ", chunks";
        }
        let shared = self
            .nodes
            .iter()
            .filter(|n| matches!(n.source, Source::Shared { .. }))
            .count();
        if shared > 0 {
            mode += &format!(", {shared} on shared peer feeds");
        }
        if !held.is_empty() {
            mode += &format!(", held by node(s) {held}");
        }
        if !skipped.is_empty() {
            mode += &format!(", skipping node(s) {skipped} (their events come late)");
        }
        let watermark = self.merge.watermark();
        let lag_seconds = if watermark > 0 {
            (ringfeed_engine::clock::now_ns() - watermark).max(0) as f64 / 1e9
        } else {
            0.0
        };
        let sent = self.events_sent;
        let lag_events = self.local.lag_events();
        self.registered.update(|info| {
            info.cursor = cursor;
            info.lag_events = lag_events;
            info.lag_seconds = lag_seconds;
            info.events_sent = sent;
            if info.mode != mode {
                info.mode = mode;
            }
        });
    }

    /// Queues `item` (holding `permit` of the budget until the transport
    /// has written it) with the stream's cursor after it.
    pub(super) async fn send(
        &mut self,
        item: RawItem,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), Status> {
        let events = match &item {
            RawItem::Event(_) => 1,
            RawItem::Batch(b) => b.events.len() as u64,
            RawItem::Chunk(c) => {
                self.admission.metrics().chunk_sent();
                u64::from(c.record_count)
            }
            _ => 0,
        };
        let cursor: Bytes = self.cursor().to_bytes().into();
        let response = RawSubscribeResponse::new(cursor.clone(), item);
        tokio::select! {
            biased;
            _ = shutdown.changed() => Err(Status::unavailable("the server is shutting down")),
            sent = self.outbox.send(response, permit) => {
                sent.map_err(|_| Status::cancelled("the client went away"))?;
                // Counted once queued, as a node stream's.
                self.events_sent += events;
                self.last_sent = tokio::time::Instant::now();
                self.show(cursor);
                Ok(())
            }
        }
    }
}

/// The ids of the nodes of `sources`, ascending, each once.
fn node_ids(sources: impl Iterator<Item = SourceId>) -> Vec<u32> {
    let mut ids: Vec<u32> = sources.map(|s| s.node).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}
