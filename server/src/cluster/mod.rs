//! Cluster subscriptions (issue 20, first version; docs/design.md 7): this node's
//! shards merged with its peers' feeds.
//!
//! Sources are `(node, shard)`. This node's events come from an engine
//! subscription, each peer's from a `Follower` (node scope, heartbeats on) on
//! its own task; all go into one [`Merge`], which delivers in `(ts, node,
//! shard)` order under each node's bound (the local subscription's watermark
//! after it polls dry; a peer's heartbeat watermark), and skips a peer that
//! holds it longer than `peer_hold`: its events then come late, in its own
//! order, exactly once (the follower resumes exactly from its checkpoint
//! however often the peer goes away). Each response's cursor is a
//! [`ClusterCursor`]: per node, the node's cursor after its last event
//! delivered, so it resumes exactly on any node.
//!
//! A peer that joins the membership mid-stream (etcd, or a static peer
//! first reached) joins the merge as new sources: followed from the stream's
//! start (its part of the start cursor, or the beginning), its backlog
//! delivered late until it has caught up ([`Merge::add_source`]). A cursor
//! part of a node not in the stream is carried on unchanged in every cursor.
//!
//! Heartbeats, when asked for, carry the merge's watermark and the nodes
//! holding it or skipped.
//!
//! A stream starting at a time (`now`: this node's clock, or `since_ns`)
//! starts every node there, and its cursors carry that time for the nodes
//! it has not heard from yet, so a resume never reads them from their
//! beginning.
//!
//! With `until_ns` the stream ends OK once every node, skipped ones too, is
//! past it and everything at or below it was delivered.
//!
//! A peer is first followed by a follower of the stream's own; once the
//! stream is at the peer's live edge it reads the peer's shared live feed
//! instead (one per peer for all the node's cluster streams of the same
//! shape, [`crate::peer_feed`]), and follows on its own again if it falls
//! behind it. Each node's part of the cursor moves shard by shard (each
//! event carries its shard's next offset), so it is exact whatever order
//! the node's shards come in and whichever follower brought them.
//!
//! In chunk mode the stream first ships stored chunks: this node's, then
//! each peer's in turn (read from the peer in chunk mode and forwarded,
//! checked, each naming its node), its cursor moving each node's shard
//! past each chunk; then `ChunkModeEnd`, and the merge from where the
//! chunks ended ([`chunks`]).

mod budget;
mod chunks;
mod failure;
mod feeds;
mod merge;
mod peers;
mod send;
mod stream;

use std::sync::Arc;
use std::time::Duration;

use ringfeed_engine::merge::{Merge, SourceId};
use ringfeed_engine::ClusterCursor;
use ringfeed_engine::{Cursor, Engine, Start, SubscribeRequest, Subscription};
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::tonic::Status;
use ringfeed_proto::v1;
use tokio::sync::{mpsc, watch, Notify};

use crate::membership::Membership;
use crate::peer_feed::PeerFeed;
use crate::registry::Registered;
use crate::sender::{Admission, Outbox, Responses, SubscriberLimits};
use peers::FromPeer;

/// Steps (each at most a response's events, 512 by default) the peers'
/// tasks may have sent and the merge not taken yet.
const PEER_CHANNEL: usize = 8;

/// One event on its way through the merge.
struct Pending {
    /// Index of its node in the stream's node list.
    node: usize,
    shard: u32,
    offset: u64,
    payload: Bytes,
    /// Its shard's next offset and generation once it is delivered.
    next: u64,
    generation: Option<u32>,
}

/// A node of the stream: its id, where its shards' sources start in the
/// merge, and its cursor after its last event delivered.
struct Node {
    id: u32,
    first_source: usize,
    shards: u32,
    cursor: Option<Cursor>,
    /// Peers: where they are read from.
    source: Source,
    /// Peers: the position after the last item taken (pushed into the
    /// merge); a follower of the peer resumes there.
    fed: Option<Cursor>,
    /// Peers: the shared live feed to read once at its edge (none for a
    /// stream with `until_ns`).
    feed: Option<Arc<PeerFeed>>,
    address: String,
}

/// Where a node's events come from.
enum Source {
    /// This node's engine subscription.
    Local,
    /// The stream's own follower of the peer (catching up).
    Own {
        task: tokio::task::JoinHandle<()>,
        id: u64,
        /// Events since the last look at the shared feed.
        unchecked: u32,
    },
    /// The peer's shared live feed, from item `seq`.
    Shared { seq: u64 },
    /// Not followed yet: its chunks come first (chunk mode), from `start`.
    Waiting { start: v1::subscribe_request::Start },
}

/// Starts a cluster stream for `r` and returns what its client reads, and
/// the cursor of where it starts (for the start-cursor metadata: a client
/// cut off before its first response resumes from it exactly).
#[allow(clippy::too_many_arguments)] // each is the stream's own, from the service
pub(crate) fn start(
    engine: &Arc<Engine>,
    membership: &Arc<Membership>,
    r: &v1::SubscribeRequest,
    mut local_request: SubscribeRequest,
    limits: &SubscriberLimits,
    admission: Arc<Admission>,
    registered: Registered,
    shutdown: watch::Receiver<bool>,
    scope: Option<crate::auth::ReadScope>,
) -> Result<(Responses, Vec<u8>), Status> {
    // Every node starts at the same place: its part of a cursor, else the
    // cursor's start time (`now` is this node's clock), else its beginning.
    let start = match &r.start {
        Some(v1::subscribe_request::Start::Beginning(_)) => ClusterCursor::new(),
        Some(v1::subscribe_request::Start::SinceNs(ns)) => ClusterCursor::since((*ns).max(1)),
        Some(v1::subscribe_request::Start::Now(_)) | None => {
            ClusterCursor::since(ringfeed_engine::clock::now_ns())
        }
        Some(v1::subscribe_request::Start::Cursor(bytes)) => ClusterCursor::from_bytes(bytes)
            .map_err(|e| Status::invalid_argument(format!("cursor: {e}")))?,
    };
    let this = membership.node_id();
    if this == 0 {
        return Err(Status::failed_precondition(
            "scope cluster: this node has no node id (start it with --node-id)",
        ));
    }
    // Listen before listing, so a peer joining in between is not missed.
    let changes = membership.changes();
    let peers = membership.known_peers().map_err(Status::unavailable)?;
    local_request.start = match start.node(this) {
        Some(cursor) => Start::Cursor(cursor.clone()),
        None if start.since_ns() > 0 => Start::SinceNs(start.since_ns()),
        None => Start::Beginning,
    };
    let local = engine
        .subscribe(local_request)
        .map_err(crate::status::subscribe_status)?;

    let local_sources: Vec<SourceId> = (0..engine.shard_count())
        .map(|shard| SourceId { node: this, shard })
        .collect();
    let nodes = vec![Node {
        id: this,
        first_source: 0,
        shards: engine.shard_count(),
        cursor: Some(local.cursor()),
        source: Source::Local,
        fed: None,
        feed: None,
        address: String::new(),
    }];
    let (peer_tx, peer_rx) = mpsc::channel(PEER_CHANNEL);
    let (outbox, responses) = Outbox::new(limits);
    let mut stream = ClusterStream {
        local,
        nodes,
        merge: Merge::new(&local_sources, membership.peer_hold.as_nanos() as u64),
        membership: membership.clone(),
        changes,
        peer_request: r.clone(),
        start,
        peer_tx,
        peer_rx,
        held: FromPeer::default(),
        followers: 0,
        wake: Arc::new(Notify::new()),
        outbox,
        stall_timeout: limits.stall_timeout,
        batch_max_events: limits.batch_max_events.max(1),
        batch_max_bytes: limits.batch_max_bytes.max(1),
        batching: r.batching,
        chunks: r.chunk_mode,
        chunk_max_bytes: limits.chunk_max_bytes,
        started: tokio::time::Instant::now(),
        heartbeat: crate::sender::heartbeat_interval(r),
        last_sent: tokio::time::Instant::now(),
        registered: Arc::new(registered),
        events_sent: 0,
        admission,
        budget: None,
        queued_units: 0,
        scope,
    };
    for peer in &peers {
        stream.add_peer(peer)?;
    }
    let start_cursor = stream.cursor().to_bytes();
    tokio::spawn(stream.run(shutdown));
    Ok((responses, start_cursor))
}

struct ClusterStream {
    local: Subscription,
    nodes: Vec<Node>,
    merge: Merge<Pending>,
    membership: Arc<Membership>,
    /// Wakes when peers come, go or are first reached.
    changes: watch::Receiver<u64>,
    /// The client's request: the filter and order each peer is followed with.
    peer_request: v1::SubscribeRequest,
    /// Where the stream started: a peer joining is followed from its part.
    start: ClusterCursor,
    peer_tx: mpsc::Sender<FromPeer>,
    peer_rx: mpsc::Receiver<FromPeer>,
    /// What is left of the last step taken from `peer_rx` (the merge was
    /// full before all of it went in).
    held: FromPeer,
    /// Followers started (each own follower's id).
    followers: u64,
    /// Woken when a shared feed this stream reads gets items.
    wake: Arc<Notify>,
    /// The responses, then the final error if the stream fails.
    outbox: Outbox,
    /// How long queued responses may wait with the client taking none.
    stall_timeout: Duration,
    batch_max_events: usize,
    batch_max_bytes: usize,
    batching: bool,
    /// Chunk mode, until its chunks are shipped: peers added meanwhile
    /// wait for their turn ([`Source::Waiting`]).
    chunks: bool,
    chunk_max_bytes: usize,
    started: tokio::time::Instant,
    /// How often a quiet stream sends a heartbeat, if asked to.
    heartbeat: Option<Duration>,
    /// When the last response was sent.
    last_sent: tokio::time::Instant,
    /// What `ListSubscribers` shows of this stream (removed when it drops).
    registered: Arc<Registered>,
    events_sent: u64,
    /// The server's response budget: the merge's queued events count
    /// against it (`budget` covers `queued_units`), so many cluster streams
    /// held at once do not pull more than it into memory.
    admission: Arc<Admission>,
    budget: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The budget units of the events the merge holds, counted per event:
    /// a response charges whole units, so a merge that covered only its
    /// bytes in sum ran out of cover after a ninth of its small events, and
    /// its stream went on sending responses that held no budget.
    queued_units: usize,
    /// A token's read scope: events are shown as it shows them.
    scope: Option<crate::auth::ReadScope>,
}

impl Drop for ClusterStream {
    /// The peers' own followers end with the stream.
    fn drop(&mut self) {
        for node in &self.nodes {
            if let Source::Own { task, .. } = &node.source {
                task.abort();
            }
        }
    }
}
