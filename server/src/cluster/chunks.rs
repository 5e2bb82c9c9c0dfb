//! Chunk mode in cluster scope: before the merge, the stream ships stored
//! chunks, this node's first, then each peer's in turn, then
//! `ChunkModeEnd`; the merge then starts from where the chunks ended.
//!
//! Every chunk names its node, and the stream's cursor moves that node's
//! shard past it, so a resume from any response's cursor continues exactly
//! (in chunk mode again, or in events). Like a node stream's chunks, they
//! are not filtered, and they do not interleave by time: this node's
//! chunks, then node by node.
//!
//! A peer's chunks are read from the peer in chunk mode (node scope) and
//! forwarded as they come, once checked: the checksum, dense offsets and
//! count as any follower checks them, and every record's header and event
//! as an append's (bytes every decoder reads alike). The follower that
//! read them goes on with the peer's events in the merge. A peer that
//! sends nothing for `peer_hold` (down, or slow to answer) ends its chunks
//! there: the merge follows it from where they ended, and skips it while it
//! holds the merge, as any peer.

use ringfeed_proto::tonic::Status;
use ringfeed_proto::{v1, RawItem};
use tokio::sync::watch;

use super::failure::peer_failure;
use super::peers::peer_follower;
use super::{ClusterStream, Source};
use crate::client::FollowError;
use crate::peer_feed::check_peer_event;
use crate::sender::{chunk_message, trim};

impl ClusterStream {
    /// Ships this node's stored chunks, then each peer's, then
    /// `ChunkModeEnd`.
    pub(super) async fn ship_chunks(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), Status> {
        let this = self.nodes[0].id;
        loop {
            // Reserved before reading, as a node stream's: reading below
            // the ring allocates.
            let permit = self.budget_for(self.chunk_max_bytes, shutdown).await?;
            let chunk = self
                .local
                .next_chunk(self.chunk_max_bytes)
                .await
                .map_err(crate::status::subscribe_status)?;
            let Some(chunk) = chunk else {
                break;
            };
            let permit = trim(permit, chunk.records.len());
            self.nodes[0].cursor = Some(self.local.cursor());
            let item = RawItem::Chunk(chunk_message(chunk, this));
            self.send(item, Some(permit), shutdown).await?;
        }
        for node in 1..self.nodes.len() {
            self.peer_chunks(node, shutdown).await?;
        }
        self.chunks = false;
        let marker = RawItem::ChunkModeEnd(v1::ChunkModeEnd {});
        self.send(marker, None, shutdown).await
    }

    /// Forwards node `node`'s (a peer's) stored chunks, then leaves it to
    /// the merge with the follower that read them.
    async fn peer_chunks(
        &mut self,
        node: usize,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), Status> {
        let Source::Waiting { start } = &self.nodes[node].source else {
            return Ok(());
        };
        let start = start.clone();
        let mut request = self.peer_request();
        request.chunk_mode = true;
        request.start = Some(start.clone());
        let n = &self.nodes[node];
        let mut follower = peer_follower(&self.membership, &n.address, request)?;
        let hold = self.membership.peer_hold;
        loop {
            let next = tokio::select! {
                biased;
                _ = shutdown.changed() => {
                    return Err(Status::unavailable("the server is shutting down"));
                }
                next = tokio::time::timeout(hold, follower.next_chunk()) => next,
            };
            let n = &mut self.nodes[node];
            let mut chunk = match next {
                Ok(Ok(Some(chunk))) => chunk,
                // Its chunks are over: the same follower goes on with its
                // events, from right after them.
                Ok(Ok(None)) => {
                    self.follow_with(node, follower);
                    return Ok(());
                }
                Ok(Err(e)) => return Err(peer_failure(n.id, &n.address, e)),
                // Nothing for peer_hold: the merge follows it from here.
                Err(_) => {
                    tracing::info!(
                        node = n.id,
                        "a peer sent no chunk for peer_hold: its events follow in the merge"
                    );
                    let resumed = n.fed.is_some();
                    let start = match &n.fed {
                        Some(fed) => v1::subscribe_request::Start::Cursor(fed.to_bytes().into()),
                        None => start,
                    };
                    return self.follow_own(node, start, resumed);
                }
            };
            if let Err(e) = check_forwarded(&chunk) {
                return Err(peer_failure(n.id, &n.address, e));
            }
            if chunk.shard >= n.shards {
                return Err(Status::internal(format!(
                    "node {} sent a chunk of shard {}, but it has {} shard(s)",
                    n.id, chunk.shard, n.shards
                )));
            }
            let after = follower.cursor();
            n.cursor.clone_from(&after);
            n.fed = after;
            chunk.node = n.id;
            let permit = self.budget_for(chunk.records.len(), shutdown).await?;
            self.send(RawItem::Chunk(chunk), Some(permit), shutdown)
                .await?;
        }
    }

    /// Waits for `bytes` of the response budget (at most half of it).
    async fn budget_for(
        &self,
        bytes: usize,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, Status> {
        tokio::select! {
            biased;
            _ = shutdown.changed() => Err(Status::unavailable("the server is shutting down")),
            permit = self.admission.bytes(bytes) => Ok(permit),
        }
    }
}

/// A peer's chunk is forwarded only if every record in it is one this
/// node would have stored: a header that reads, and an event checked as a
/// peer's events are ([`check_peer_event`]; the follower checked the
/// checksum, the offsets and the count). Nothing is skipped: the stream
/// ends with DATA_LOSS at the first record that is not.
fn check_forwarded(chunk: &v1::ChunkMessage) -> Result<(), FollowError> {
    let records = &chunk.records[..];
    let mut at = 0;
    let mut offset = chunk.first_offset;
    while at < records.len() {
        let h = ringfeed_engine::record::peek_header(&records[at..]).map_err(|e| {
            FollowError::Refused(Status::data_loss(format!(
                "its record at shard {} offset {offset} is not forwarded: {e}",
                chunk.shard
            )))
        })?;
        check_peer_event(
            "record",
            chunk.shard,
            offset,
            &records[at + h.payload_at..at + h.len],
        )?;
        at += h.len;
        offset += 1;
    }
    Ok(())
}
