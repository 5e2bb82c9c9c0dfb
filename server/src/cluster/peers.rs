//! Following peers: each with a follower of the stream's own (a task
//! handing its items over a channel) until it can read the peer's shared
//! feed; peers joining mid-stream.

use std::time::Duration;

use ringfeed_engine::merge::SourceId;
use ringfeed_proto::tonic::Status;
use ringfeed_proto::v1;
use tokio::sync::mpsc;

use super::failure::peer_failure;
use super::{ClusterStream, Node, Source};
use crate::client::{Backoff, FollowError, Follower};
use crate::membership::{KnownPeer, Membership};
use crate::peer_feed::{PeerItem, Stepper};

/// How often a quiet peer sends a heartbeat to a cluster stream (its
/// bound): what a quiet peer may hold live delivery of the others' events
/// for. Each quiet peer stream sends 40 small responses a second for it.
const PEER_HEARTBEAT_MS: u32 = 25;

/// Events taken from a peer's own follower between two looks at whether
/// its shared feed covers the stream's position (and at every watermark).
const SHARE_CHECK_EVENTS: u32 = 256;

/// Reconnecting to a peer: soon, so a restarted peer's late events come
/// soon after it is back (gRPC's defaults grow to two minutes).
const PEER_BACKOFF: Backoff = Backoff {
    initial: Duration::from_millis(100),
    multiplier: 1.6,
    jitter: 0.2,
    max: Duration::from_secs(1),
};

/// What a peer's own follower task hands the stream: a step's items at
/// once (the rest of one response), not one channel message per event
/// (sending each event on its own was a tenth of a cluster stream's CPU
/// while it caught up on its peers).
#[derive(Default)]
pub(super) struct FromPeer {
    /// Index of the node in the stream's node list.
    node: usize,
    /// Which of the node's followers sent it (items of one it left are
    /// dropped).
    follower: u64,
    items: std::vec::IntoIter<PeerItem>,
    /// How the follower failed after `items`, if it did.
    failed: Option<FollowError>,
}

impl FromPeer {
    /// Whether every item (and the failure) was taken.
    pub(super) fn is_empty(&self) -> bool {
        self.items.len() == 0 && self.failed.is_none()
    }
}

/// Follows one peer, handing its items to the stream, until the stream
/// goes away (or stops reading this follower), the follower fails or its
/// stream ends at `until_ns`.
async fn follow_peer(follower: Follower, node: usize, id: u64, tx: mpsc::Sender<FromPeer>) {
    let mut stepper = Stepper::new(follower);
    loop {
        let mut items = Vec::new();
        let result = stepper.next(&mut items).await;
        let last = result.is_err() || matches!(items.last(), Some(PeerItem::End));
        let from = FromPeer {
            node,
            follower: id,
            items: items.into_iter(),
            failed: result.err(),
        };
        if tx.send(from).await.is_err() || last {
            return;
        }
    }
}

impl ClusterStream {
    /// Follows `peer` from its part of the start cursor (or the beginning):
    /// its shards join the merge (late, if the merge has delivered events).
    pub(super) fn add_peer(&mut self, peer: &KnownPeer) -> Result<(), Status> {
        let cursor = self.start.node(peer.node_id).cloned();
        let start = match &cursor {
            Some(cursor) => v1::subscribe_request::Start::Cursor(cursor.to_bytes().into()),
            None if self.start.since_ns() > 0 => {
                v1::subscribe_request::Start::SinceNs(self.start.since_ns())
            }
            None => v1::subscribe_request::Start::Beginning(true),
        };
        let feed = match self.peer_request.until_ns {
            0 => Some(self.membership.peer_feeds.get(
                peer.node_id,
                &peer.address,
                &self.peer_request(),
                |r| peer_follower(&self.membership, &peer.address, r),
            )?),
            // Its own followers end at until_ns; a live feed does not.
            _ => None,
        };
        let mut first_source = None;
        for shard in 0..peer.shards {
            let source = self.merge.add_source(SourceId {
                node: peer.node_id,
                shard,
            });
            first_source.get_or_insert(source);
        }
        self.nodes.push(Node {
            id: peer.node_id,
            first_source: first_source.expect("a peer has at least one shard"),
            shards: peer.shards,
            cursor: cursor.clone(),
            source: Source::Local,
            fed: cursor,
            feed,
            address: peer.address.clone(),
        });
        if self.chunks {
            // Its chunks first, in its turn (chunks.rs).
            self.nodes.last_mut().expect("just pushed").source = Source::Waiting { start };
            return Ok(());
        }
        self.follow_own(self.nodes.len() - 1, start, false)
    }

    /// How this stream follows its peers (scope node, heartbeats, batches;
    /// start and client fields set by each use).
    pub(super) fn peer_request(&self) -> v1::SubscribeRequest {
        let mut request = self.peer_request.clone();
        request.scope = v1::Scope::Node as i32;
        request.heartbeats = true;
        request.heartbeat_interval_ms = PEER_HEARTBEAT_MS;
        request.batching = true;
        // Events: a chunk-mode stream reads its peers' chunks with a
        // request of its own first (chunks.rs).
        request.chunk_mode = false;
        request.client_id = 0;
        request.client_name = format!("cluster stream of node {}", self.nodes[0].id);
        request
    }

    /// Follows node `node` (a peer) with a follower of this stream's own
    /// from `start`; `resumed`: from where the stream already is (a crash
    /// that truncated the peer since is then an error, as for any follower
    /// after its first response, whatever the client's resume_truncated).
    pub(super) fn follow_own(
        &mut self,
        node: usize,
        start: v1::subscribe_request::Start,
        resumed: bool,
    ) -> Result<(), Status> {
        let mut request = self.peer_request();
        request.start = Some(start);
        request.resume_truncated &= !resumed;
        let address = &self.nodes[node].address;
        let follower = peer_follower(&self.membership, address, request)?;
        self.follow_with(node, follower);
        Ok(())
    }

    /// Follows node `node` (a peer) with `follower`, a follower of the
    /// stream's own, on a task of its own.
    pub(super) fn follow_with(&mut self, node: usize, follower: Follower) {
        self.followers += 1;
        let id = self.followers;
        let task = tokio::spawn(follow_peer(follower, node, id, self.peer_tx.clone()));
        self.nodes[node].source = Source::Own {
            task,
            id,
            unchecked: 0,
        };
    }

    /// Peers reached since the stream started (or last looked) join it.
    pub(super) fn join_new_peers(&mut self) -> Result<(), Status> {
        self.changes.borrow_and_update();
        for peer in self.membership.reached_peers() {
            if self.nodes.iter().all(|n| n.id != peer.node_id) {
                tracing::info!(node = peer.node_id, address = %peer.address, "a peer joins a cluster stream");
                self.add_peer(&peer)?;
            }
        }
        Ok(())
    }

    /// Takes what the peers' own followers handed over while the merge is
    /// not full; what is left of a step waits in `held`.
    pub(super) fn take_from_peers(&mut self) -> Result<(), Status> {
        loop {
            if self.held.is_empty() {
                match self.peer_rx.try_recv() {
                    Ok(from) => self.held = from,
                    Err(_) => return Ok(()),
                }
            }
            let mut from = std::mem::take(&mut self.held);
            let taken = self.take_from_peer(&mut from);
            self.held = from;
            taken?;
            if !self.held.is_empty() {
                return Ok(());
            }
        }
    }

    /// Takes items of a peer's own follower from `from` while the merge is
    /// not full (all of them if the stream has left that follower); what
    /// is left waits in `from`.
    fn take_from_peer(&mut self, from: &mut FromPeer) -> Result<(), Status> {
        while !from.is_empty() && !self.full(false) {
            let node = &mut self.nodes[from.node];
            let Source::Own { id, unchecked, .. } = &mut node.source else {
                *from = FromPeer::default();
                return Ok(());
            };
            if *id != from.follower {
                *from = FromPeer::default();
                return Ok(());
            }
            let Some(item) = from.items.next() else {
                let e = from
                    .failed
                    .take()
                    .expect("a failure once the items are taken");
                return Err(peer_failure(node.id, &node.address, e));
            };
            let look = match &item {
                PeerItem::Event { .. } => {
                    *unchecked += 1;
                    *unchecked >= SHARE_CHECK_EVENTS
                }
                PeerItem::Watermark { .. } => true,
                _ => false,
            };
            self.take(from.node, item)?;
            if look {
                self.maybe_share(from.node);
            }
        }
        Ok(())
    }
}

/// A follower of the peer at `address` as this node follows its peers: with
/// its peer token and TLS, reconnecting soon after a failure.
pub(super) fn peer_follower(
    membership: &Membership,
    address: &str,
    request: v1::SubscribeRequest,
) -> Result<Follower, Status> {
    let refused =
        |e: &dyn std::fmt::Display| Status::invalid_argument(format!("peer {address}: {e}"));
    let mut follower = Follower::new(address, request, PEER_BACKOFF)
        .map_err(|e| refused(&e))?
        .with_bearer(membership.peer_bearer.clone());
    if let Some(tls) = &membership.peer_tls {
        follower = follower.with_tls(tls.clone()).map_err(|e| refused(&e))?;
    }
    Ok(follower)
}
