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
//! Not yet (docs/cluster.md): chunk mode.

use std::sync::Arc;
use std::time::Duration;

use ringfeed_engine::merge::{Merge, SourceId};
use ringfeed_engine::ClusterCursor;
use ringfeed_engine::{Cursor, Engine, Start, Step, SubscribeRequest, Subscription};
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::tonic::Status;
use ringfeed_proto::{v1, RawEventBatch, RawEventMessage, RawItem, RawSubscribeResponse};
use tokio::sync::{mpsc, watch, Notify};

use crate::client::{Backoff, FollowError, Follower};
use crate::membership::{KnownPeer, Membership};
use crate::peer_feed::{Gone, PeerFeed, PeerItem, Stepper, READ_AT_ONCE};
use crate::registry::Registered;
use crate::sender::{budget_units, Admission};
use crate::sender::{Outbox, Responses, SubscriberLimits};

/// How often a quiet peer sends a heartbeat to a cluster stream (its
/// bound): what a quiet peer may hold live delivery of the others' events
/// for. Each quiet peer stream sends 40 small responses a second for it.
const PEER_HEARTBEAT_MS: u32 = 25;
/// Most events pulled from the local subscription before merging them.
const LOCAL_PULL: usize = 1024;
/// Events a peer's task may have sent and the merge not taken yet.
const PEER_CHANNEL: usize = 4096;
/// Events taken from a peer's own follower between two looks at whether
/// its shared feed covers the stream's position (and at every watermark).
const SHARE_CHECK_EVENTS: u32 = 256;
/// Most events the merge holds queued: past it nothing more is pulled from
/// this node's subscription or the peers' channels until the merge moves
/// (a held merge moves at the latest after `peer_hold`).
const MAX_QUEUED: usize = 65_536;
/// What an event queued in the merge counts against the response budget
/// besides its payload (its cursor and bookkeeping).
const EVENT_OVERHEAD: usize = 96;

/// What an event in the merge counts against the response budget, in whole
/// units: at least what the response that sends it will hold for it.
fn event_units(payload: &[u8]) -> usize {
    budget_units(payload.len() + EVENT_OVERHEAD)
}

/// Reconnecting to a peer: soon, so a restarted peer's late events come
/// soon after it is back (gRPC's defaults grow to two minutes).
const PEER_BACKOFF: Backoff = Backoff {
    initial: Duration::from_millis(100),
    multiplier: 1.6,
    jitter: 0.2,
    max: Duration::from_secs(1),
};

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

/// What a peer's own follower task hands the stream.
struct FromPeer {
    /// Index of the node in the stream's node list.
    node: usize,
    /// Which of the node's followers sent it (items of one it left are
    /// dropped).
    follower: u64,
    item: Result<PeerItem, FollowError>,
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
    if r.chunk_mode {
        return Err(Status::invalid_argument(
            "scope cluster: chunk_mode is not supported yet",
        ));
    }
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
        followers: 0,
        wake: Arc::new(Notify::new()),
        outbox,
        stall_timeout: limits.stall_timeout,
        batch_max_events: limits.batch_max_events.max(1),
        batch_max_bytes: limits.batch_max_bytes.max(1),
        batching: r.batching,
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

/// Follows one peer, handing its items to the stream, until the stream
/// goes away (or stops reading this follower), the follower fails or its
/// stream ends at `until_ns`.
async fn follow_peer(follower: Follower, node: usize, id: u64, tx: mpsc::Sender<FromPeer>) {
    let mut stepper = Stepper::new(follower);
    let mut items = Vec::new();
    loop {
        let result = stepper.next(&mut items).await;
        let last = result.is_err() || matches!(items.last(), Some(PeerItem::End));
        for item in items.drain(..) {
            let item = FromPeer {
                node,
                follower: id,
                item: Ok(item),
            };
            if tx.send(item).await.is_err() {
                return;
            }
        }
        if let Err(e) = result {
            let item = FromPeer {
                node,
                follower: id,
                item: Err(e),
            };
            let _ = tx.send(item).await;
        }
        if last {
            return;
        }
    }
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

impl ClusterStream {
    async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        self.show(self.cursor().to_bytes().into());
        let registered = self.registered.clone();
        let (stalls, admission) = (self.outbox.stalls(), self.admission.clone());
        let stall_timeout = self.stall_timeout;
        let outcome = tokio::select! {
            biased;
            superseded = registered.superseded() => {
                Err(ringfeed_proto::wire::superseded_status(superseded.0))
            }
            outcome = self.feed(&mut shutdown) => outcome,
            // A client that stopped reading gives its queue and budget back
            // after stall_timeout, as a node stream's does.
            stalled = stalls.stalled(stall_timeout) => {
                Err(stalls.give_back(stalled, &registered, admission.metrics()))
            }
        };
        if let Err(status) = outcome {
            // After everything queued, even with the queue full.
            self.outbox.fail(status);
        }
    }

    /// Follows `peer` from its part of the start cursor (or the beginning):
    /// its shards join the merge (late, if the merge has delivered events).
    fn add_peer(&mut self, peer: &KnownPeer) -> Result<(), Status> {
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
        self.follow_own(self.nodes.len() - 1, start, false)
    }

    /// How this stream follows its peers (scope node, heartbeats, batches;
    /// start and client fields set by each use).
    fn peer_request(&self) -> v1::SubscribeRequest {
        let mut request = self.peer_request.clone();
        request.scope = v1::Scope::Node as i32;
        request.heartbeats = true;
        request.heartbeat_interval_ms = PEER_HEARTBEAT_MS;
        request.batching = true;
        request.client_id = 0;
        request.client_name = format!("cluster stream of node {}", self.nodes[0].id);
        request
    }

    /// Follows node `node` (a peer) with a follower of this stream's own
    /// from `start`; `resumed`: from where the stream already is (a crash
    /// that truncated the peer since is then an error, as for any follower
    /// after its first response, whatever the client's resume_truncated).
    fn follow_own(
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
        self.followers += 1;
        let id = self.followers;
        let task = tokio::spawn(follow_peer(follower, node, id, self.peer_tx.clone()));
        self.nodes[node].source = Source::Own {
            task,
            id,
            unchecked: 0,
        };
        Ok(())
    }

    /// Peers reached since the stream started (or last looked) join it.
    fn join_new_peers(&mut self) -> Result<(), Status> {
        self.changes.borrow_and_update();
        for peer in self.membership.reached_peers() {
            if self.nodes.iter().all(|n| n.id != peer.node_id) {
                tracing::info!(node = peer.node_id, address = %peer.address, "a peer joins a cluster stream");
                self.add_peer(&peer)?;
            }
        }
        Ok(())
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    async fn feed(&mut self, shutdown: &mut watch::Receiver<bool>) -> Result<(), Status> {
        loop {
            // Listen before looking, so news in between is not missed.
            let changed = self.local.changed();
            let more_local = self.pull_local()?;
            while !self.full(false) {
                let Ok(item) = self.peer_rx.try_recv() else {
                    break;
                };
                self.take_from_peer(item)?;
            }
            self.pull_shared()?;
            let short = self.short_of_budget();
            let full = self.full_when(short, false);
            let admission = self.admission.clone();
            if self.send_ready(shutdown).await? {
                continue;
            }
            // The local pull stopped short and could go on now (budget came
            // back meanwhile): no news of events would wake it.
            if more_local && !self.full(true) {
                continue;
            }
            // until_ns: once every node (skipped ones too) is past it and
            // nothing is queued, the stream ends OK.
            let until = self.peer_request.until_ns;
            if until != 0 && self.merge.queued() == 0 && self.merge.watermark() >= until {
                return Ok(());
            }
            // This node's shards hold the merge: ask them to claim up to the
            // stamp it waits for (an idle shard answers at once, and the
            // answer wakes `changed`). Peers' claims come with their
            // heartbeats.
            if let Some(ts) = self.merge.held_at() {
                let this = self.nodes[0].id;
                if self.merge.holding().any(|s| s.node == this) {
                    self.local.request_claims(ts);
                }
            }
            let hold = sleep_until(
                self.merge
                    .deadline()
                    .map(|at| self.started + Duration::from_nanos(at)),
            );
            let heartbeat = sleep_until(self.heartbeat.map(|every| self.last_sent + every));
            tokio::select! {
                biased;
                _ = shutdown.changed() => {
                    return Err(Status::unavailable("the server is shutting down"));
                }
                _ = self.outbox.closed() => return Ok(()),
                _ = changed => {}
                // The stream's own responses may hold the budget it waits
                // for: once the transport has written them nothing else
                // need happen, so it listens for budget coming back. (It
                // waited for news of events instead, and a stream that had
                // read everything stood still until the next append.)
                _ = admission.unit_freed(), if short => {}
                _ = self.changes.changed() => self.join_new_peers()?,
                item = self.peer_rx.recv(), if !full => match item {
                    Some(item) => self.take_from_peer(item)?,
                    None => return Err(Status::internal("the peers' tasks ended")),
                },
                _ = self.wake.notified(), if !full => {}
                _ = hold => {}
                _ = heartbeat => self.send_heartbeat(shutdown).await?,
            }
            // Held or skipped nodes show in ListSubscribers while quiet too.
            self.show(self.cursor().to_bytes().into());
        }
    }

    /// Whether the merge holds [`MAX_QUEUED`] events or is short of budget
    /// ([`Self::short_of_budget`]), and neither this node (`local`) nor the
    /// peers (`!local`) hold it: a source that holds the merge has nothing
    /// queued, and taking its events is what moves it (a held merge moves
    /// at the latest after `peer_hold`, so a stream over budget never
    /// stalls for good).
    fn full(&mut self, local: bool) -> bool {
        let short = self.short_of_budget();
        self.full_when(short, local)
    }

    /// [`Self::full`], the budget already looked at (`short`).
    fn full_when(&self, short: bool, local: bool) -> bool {
        let this = self.nodes[0].id;
        let over = self.merge.queued() >= MAX_QUEUED || short;
        over && !self.merge.holding().any(|s| (s.node == this) == local)
    }

    /// Whether the response budget cannot cover what the merge holds and a
    /// unit more for the next event. (Covering only what it held, an empty
    /// merge always looked covered, so with no budget free it still took
    /// one event at a time and sent each in a response that held none. An
    /// event larger than a unit, or a unit another stream took first, is
    /// covered short until the next look: the most a stream's merge holds
    /// beyond the budget is one event.)
    fn short_of_budget(&mut self) -> bool {
        !self
            .admission
            .try_cover(&mut self.budget, self.queued_units)
            || self.admission.free_units() == 0
    }

    /// Takes what the local subscription has ready; when it has nothing
    /// more, its watermark bounds every local shard. True if it stopped
    /// with more perhaps ready (the merge full, or [`LOCAL_PULL`] taken).
    fn pull_local(&mut self) -> Result<bool, Status> {
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

    /// An item of a peer's own follower (dropped if the stream has left
    /// that follower).
    fn take_from_peer(&mut self, from: FromPeer) -> Result<(), Status> {
        let node = &mut self.nodes[from.node];
        let Source::Own { id, unchecked, .. } = &mut node.source else {
            return Ok(());
        };
        if *id != from.follower {
            return Ok(());
        }
        let item = match from.item {
            Ok(item) => item,
            Err(e) => return Err(peer_failure(node.id, &node.address, e)),
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
        Ok(())
    }

    /// Takes an item of node `node` (a peer), from whichever follower: an
    /// event it already has (at or below its position) is skipped.
    fn take(&mut self, node: usize, item: PeerItem) -> Result<(), Status> {
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

    /// If node `node`'s shared feed covers where the stream is on it, the
    /// stream leaves its own follower and reads the feed.
    fn maybe_share(&mut self, node: usize) {
        let wake = self.wake.clone();
        let n = &mut self.nodes[node];
        if let Source::Own { unchecked, .. } = &mut n.source {
            *unchecked = 0;
        }
        let (Some(feed), Some(fed)) = (&n.feed, &n.fed) else {
            return;
        };
        let Some(seq) = feed.covers(fed) else {
            return;
        };
        if let Source::Own { task, .. } = &n.source {
            task.abort();
        }
        feed.listen(&wake);
        n.source = Source::Shared { seq };
        tracing::debug!(node = n.id, "a cluster stream reads the peer's shared feed");
    }

    /// Takes what the shared feeds the stream reads have; a stream that
    /// fell behind a feed (or whose feed failed) follows that peer on its
    /// own again from where it is.
    fn pull_shared(&mut self) -> Result<(), Status> {
        let mut items = Vec::new();
        for node in 1..self.nodes.len() {
            while matches!(self.nodes[node].source, Source::Shared { .. }) {
                if self.full(false) {
                    return Ok(());
                }
                let n = &mut self.nodes[node];
                let (Source::Shared { seq }, Some(feed)) = (&mut n.source, &n.feed) else {
                    break;
                };
                match feed.read(seq, READ_AT_ONCE, &mut items) {
                    Ok(()) if items.is_empty() => break,
                    Ok(()) => {
                        for item in items.drain(..) {
                            self.take(node, item)?;
                        }
                    }
                    Err(gone) => {
                        self.leave_feed(node, gone)?;
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Node `node`'s shared feed left the stream behind (or failed): its
    /// own follower takes over from where the stream is.
    fn leave_feed(&mut self, node: usize, gone: Gone) -> Result<(), Status> {
        let request = self.peer_request();
        let n = &mut self.nodes[node];
        tracing::info!(node = n.id, why = ?gone, "a cluster stream leaves the peer's shared feed");
        if let Some(feed) = n.feed.take() {
            feed.unlisten(&self.wake);
            n.feed = match gone {
                Gone::Passed => Some(feed),
                // A new one (this one is done).
                Gone::Failed => self
                    .membership
                    .peer_feeds
                    .get(n.id, &n.address, &request, |r| {
                        peer_follower(&self.membership, &n.address, r)
                    })
                    .ok(),
            };
        }
        let fed = n
            .fed
            .as_ref()
            .expect("a stream reads a feed only from a known position");
        let start = v1::subscribe_request::Start::Cursor(fed.to_bytes().into());
        self.follow_own(node, start, true)
    }

    /// Sends one response of the events the merge delivers now, if any:
    /// true if it took any from the merge (more may be ready).
    async fn send_ready(&mut self, shutdown: &mut watch::Receiver<bool>) -> Result<bool, Status> {
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
    fn cursor(&self) -> ClusterCursor {
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
    async fn send_heartbeat(&mut self, shutdown: &mut watch::Receiver<bool>) -> Result<(), Status> {
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
    fn show(&self, cursor: Bytes) {
        let listed = |ids: Vec<u32>| {
            let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
            ids.join(",")
        };
        let held = listed(node_ids(self.merge.holding()));
        let skipped = listed(node_ids(self.merge.skipped()));
        let mut mode = format!("cluster, {} node(s)", self.nodes.len());
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
    async fn send(
        &mut self,
        item: RawItem,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), Status> {
        let events = match &item {
            RawItem::Event(_) => 1,
            RawItem::Batch(b) => b.events.len() as u64,
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

/// A follower of the peer at `address` as this node follows its peers: with
/// its peer token and TLS, reconnecting soon after a failure.
fn peer_follower(
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

/// What a cluster stream's client is told when following a peer with the
/// stream's own follower fails. A refusal of what the client asked for (its
/// cursor's part for that node was made by another data dir, is below the
/// node's retention or was truncated by a crash; a filter the node refuses;
/// an event of the node lost there, or one this node does not forward)
/// keeps its code, so the client does not retry what cannot succeed (as
/// UNAVAILABLE, it was retried forever, and the peer's reason was lost);
/// anything else is UNAVAILABLE, which a retry may cure.
fn peer_failure(node: u32, address: &str, e: FollowError) -> Status {
    use ringfeed_proto::tonic::Code;
    match e {
        FollowError::Refused(status)
            if matches!(
                status.code(),
                Code::InvalidArgument
                    | Code::OutOfRange
                    | Code::FailedPrecondition
                    | Code::DataLoss
            ) =>
        {
            Status::new(
                status.code(),
                format!("node {node} ({address}): {}", status.message()),
            )
        }
        FollowError::Refused(status) => Status::unavailable(format!(
            "following node {node} ({address}): it ended the stream with {:?}: {}",
            status.code(),
            status.message()
        )),
        e => Status::unavailable(format!("following node {node} ({address}): {e}")),
    }
}

/// The ids of the nodes of `sources`, ascending, each once.
fn node_ids(sources: impl Iterator<Item = SourceId>) -> Vec<u32> {
    let mut ids: Vec<u32> = sources.map(|s| s.node).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Sleeps until `at`; never, without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
