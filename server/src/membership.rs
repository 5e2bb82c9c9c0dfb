//! Who is in the cluster (issue 20, static membership): this node and the
//! peers it was given (`--peers`), each peer's `Status` asked every
//! [`POLL_INTERVAL`] to learn its node id and whether it is up. `ListNodes`
//! and `ringfeed nodes` show the result. Membership through etcd (leases and
//! a watch) will feed the same list.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringfeed_proto::tonic::transport::{Channel, Endpoint};
use ringfeed_proto::v1::{NodeInfo, StatusRequest};
use ringfeed_proto::RingFeedClient;
use tokio::sync::watch;

use ringfeed_engine::clock::now_ns;

/// How often each peer is asked for its status, and how long an answer may take.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// How long a peer may hold a cluster subscription's merge, by default.
pub const DEFAULT_PEER_HOLD: Duration = Duration::from_secs(3);

/// This node and its peers.
pub struct Membership {
    node_id: u32,
    advertise: String,
    peers: Vec<Peer>,
    /// How long a peer may hold a cluster subscription's merge.
    pub peer_hold: Duration,
}

/// A peer as a cluster subscription follows it.
#[derive(Clone, Debug)]
pub struct KnownPeer {
    pub node_id: u32,
    pub address: String,
    pub shards: u32,
}

struct Peer {
    address: String,
    /// What the last try found (`address` filled in when listed).
    seen: Mutex<NodeInfo>,
}

impl Membership {
    /// `node_id` 0: none (a single node). `peers`: HOST:PORT each.
    pub fn new(node_id: u32, advertise: String, peers: Vec<String>) -> Arc<Membership> {
        Membership::with_peer_hold(node_id, advertise, peers, DEFAULT_PEER_HOLD)
    }

    /// [`Membership::new`] with a given `peer_hold`.
    pub fn with_peer_hold(
        node_id: u32,
        advertise: String,
        peers: Vec<String>,
        peer_hold: Duration,
    ) -> Arc<Membership> {
        Arc::new(Membership {
            node_id,
            advertise,
            peer_hold,
            peers: peers
                .into_iter()
                .map(|address| Peer {
                    address,
                    seen: Mutex::new(NodeInfo {
                        error: "not reached yet".into(),
                        ..NodeInfo::default()
                    }),
                })
                .collect(),
        })
    }

    /// Asks every peer for its status every [`POLL_INTERVAL`] until
    /// `shutdown`, on the current tokio runtime.
    pub fn start(self: &Arc<Self>, shutdown: watch::Receiver<bool>) {
        for (i, peer) in self.peers.iter().enumerate() {
            let channel = Endpoint::from_shared(format!("http://{}", peer.address))
                .map(|e| e.connect_timeout(ANSWER_WITHIN).timeout(ANSWER_WITHIN))
                .map(|e| e.connect_lazy());
            let membership = self.clone();
            let mut shutdown = shutdown.clone();
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(POLL_INTERVAL);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        biased;
                        _ = shutdown.changed() => return,
                        _ = ticks.tick() => {}
                    }
                    let found = match &channel {
                        Ok(channel) => membership.ask(channel.clone()).await,
                        Err(e) => Err(format!("bad peer address: {e}")),
                    };
                    membership.record(i, found);
                }
            });
        }
    }

    async fn ask(&self, channel: Channel) -> Result<NodeInfo, String> {
        let status = RingFeedClient::new(channel)
            .status(StatusRequest {})
            .await
            .map_err(|s| format!("{}: {}", s.code(), s.message()))?
            .into_inner();
        if status.node_id == 0 {
            return Err("it has no node id (start it with --node-id)".into());
        }
        if status.node_id == self.node_id {
            return Err(format!(
                "it has this node's id {} (every node needs its own)",
                self.node_id
            ));
        }
        Ok(NodeInfo {
            node_id: status.node_id,
            up: true,
            last_seen_ns: now_ns(),
            shards: status.shards.len() as u32,
            version: status.version,
            ..NodeInfo::default()
        })
    }

    fn record(&self, peer: usize, found: Result<NodeInfo, String>) {
        let mut seen = self.peers[peer]
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match found {
            Ok(info) => *seen = info,
            Err(error) => {
                if seen.up || seen.error != error {
                    tracing::warn!(peer = %self.peers[peer].address, "peer unreachable: {error}");
                }
                // Keep what it said last (id, shards, version, when).
                seen.up = false;
                seen.error = error;
            }
        }
    }

    /// This node's id (0: none).
    pub fn node_id(&self) -> u32 {
        self.node_id
    }

    /// Every peer with its id and shard count, or why one cannot be
    /// followed (never reached, so its id is unknown).
    pub fn known_peers(&self) -> Result<Vec<KnownPeer>, String> {
        self.peers
            .iter()
            .map(|peer| {
                let seen = peer.seen.lock().unwrap_or_else(|p| p.into_inner());
                if seen.node_id == 0 || seen.shards == 0 {
                    return Err(format!(
                        "peer {} was not reached yet ({}): its node id is unknown",
                        peer.address, seen.error
                    ));
                }
                Ok(KnownPeer {
                    node_id: seen.node_id,
                    address: peer.address.clone(),
                    shards: seen.shards,
                })
            })
            .collect()
    }

    /// This node (with `shards` shards), then each peer as last seen.
    pub fn nodes(&self, shards: u32) -> Vec<NodeInfo> {
        let this = NodeInfo {
            node_id: self.node_id,
            address: self.advertise.clone(),
            this_node: true,
            up: true,
            last_seen_ns: now_ns(),
            shards,
            version: env!("CARGO_PKG_VERSION").into(),
            error: String::new(),
        };
        std::iter::once(this)
            .chain(self.peers.iter().map(|peer| NodeInfo {
                address: peer.address.clone(),
                ..peer.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
            }))
            .collect()
    }
}
