//! Who is in the cluster (issue 20): this node and its peers, given
//! statically (`--peers`) or found in etcd (`--etcd`: each node registers
//! `PREFIX<node id> = advertise address` under a lease and watches the
//! prefix, so nodes joining and leaving are picked up without restarts).
//! Each peer's `Status` is asked every [`POLL_INTERVAL`] to learn its node id
//! and shard count and whether it is up. `ListNodes` / `ringfeed nodes` show
//! the result; cluster subscriptions follow the peers it knows and are told
//! when that changes ([`Membership::changes`]).

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

/// Where nodes register in etcd, by default: `ringfeed/nodes/<id>`.
pub const DEFAULT_ETCD_PREFIX: &str = "ringfeed/nodes/";
/// A node's etcd lease, by default: a node that dies leaves the member list
/// this long after its last keep-alive (one that stops cleanly revokes it
/// and leaves at once).
pub const DEFAULT_ETCD_LEASE: Duration = Duration::from_secs(5);

/// Where the member list comes from, besides this node.
#[derive(Clone, Debug, PartialEq)]
pub enum Members {
    /// These peers, HOST:PORT each, for the node's lifetime.
    Static(Vec<String>),
    /// Registered in etcd at `endpoints` (URLs) under `prefix`.
    Etcd(EtcdMembers),
}

#[derive(Clone, Debug, PartialEq)]
pub struct EtcdMembers {
    pub endpoints: Vec<String>,
    pub prefix: String,
    pub lease: Duration,
}

/// How this node follows its peers in cluster streams.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// How long a peer may hold a cluster subscription's merge.
    pub peer_hold: Duration,
    /// Items each shared peer feed keeps.
    pub peer_feed_events: usize,
    /// The token this node sends its peers (`serve --peer-token`): their
    /// token files must let it read everything and ask for status.
    pub peer_token: Option<String>,
    /// TLS to the peers (`serve --peer-tls-ca`): the CA that signed their
    /// certificates, and this node's own certificate to present.
    pub peer_tls: Option<crate::tls::ClientTls>,
}

impl Default for ClusterOptions {
    fn default() -> ClusterOptions {
        ClusterOptions {
            peer_hold: DEFAULT_PEER_HOLD,
            peer_feed_events: crate::peer_feed::DEFAULT_FEED_ITEMS,
            peer_token: None,
            peer_tls: None,
        }
    }
}

/// This node and its peers.
pub struct Membership {
    node_id: u32,
    advertise: String,
    members: Members,
    peers: Mutex<Vec<Arc<Peer>>>,
    /// Bumped when a peer comes, goes or is first reached.
    changes: watch::Sender<u64>,
    /// How long a peer may hold a cluster subscription's merge.
    pub peer_hold: Duration,
    /// Sent to peers (status polls, cluster streams).
    pub(crate) peer_bearer: crate::client::Bearer,
    /// TLS to the peers, when they serve TLS (its files read once, at start).
    pub(crate) peer_tls: Option<ringfeed_proto::tonic::transport::ClientTlsConfig>,
    /// The peers' shared live feeds (one per peer and stream shape).
    pub(crate) peer_feeds: crate::peer_feed::PeerFeeds,
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
    /// The id it registered under (etcd), 0 when given statically.
    registered_id: u32,
    /// What the last try found (`address` filled in when listed).
    seen: Mutex<NodeInfo>,
    /// Set when it leaves the member list: its poll task ends.
    gone: watch::Sender<bool>,
}

impl Membership {
    /// `node_id` 0: none (a single node). `peers`: HOST:PORT each.
    pub fn new(node_id: u32, advertise: String, peers: Vec<String>) -> Arc<Membership> {
        Membership::with_members(
            node_id,
            advertise,
            Members::Static(peers),
            &ClusterOptions::default(),
        )
        .expect("no peer token or TLS files to check")
    }

    /// A membership whose peers come from `members`.
    pub fn with_members(
        node_id: u32,
        advertise: String,
        members: Members,
        options: &ClusterOptions,
    ) -> anyhow::Result<Arc<Membership>> {
        let peer_bearer = crate::client::Bearer::new(options.peer_token.as_deref())
            .ok_or_else(|| anyhow::anyhow!("the peer token is not a valid header value"))?;
        let peer_tls = match &options.peer_tls {
            Some(tls) if tls.enabled() => Some(tls.config()?),
            _ => None,
        };
        let peers = match &members {
            Members::Static(peers) => peers.iter().map(|a| Peer::new(a.clone(), 0)).collect(),
            Members::Etcd(_) => Vec::new(),
        };
        Ok(Arc::new(Membership {
            node_id,
            advertise,
            members,
            peers: Mutex::new(peers),
            changes: watch::channel(0).0,
            peer_hold: options.peer_hold,
            peer_bearer,
            peer_tls,
            peer_feeds: crate::peer_feed::PeerFeeds::new(options.peer_feed_events),
        }))
    }

    /// Asks every peer for its status every [`POLL_INTERVAL`], and with
    /// etcd registers this node and follows the member list, until
    /// `shutdown`, on the current tokio runtime. With etcd, returns the task
    /// that, after `shutdown`, revokes the node's lease (it leaves the
    /// member list at once): await it before the runtime stops, or the
    /// revoke may never be sent and the node stays listed until its lease
    /// runs out.
    pub fn start(
        self: &Arc<Self>,
        shutdown: watch::Receiver<bool>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        for peer in self.peer_list() {
            self.poll(peer, shutdown.clone());
        }
        match &self.members {
            Members::Etcd(etcd) => Some(tokio::spawn(
                self.clone().follow_etcd(etcd.clone(), shutdown),
            )),
            Members::Static(_) => None,
        }
    }

    /// Wakes when the member list changes or a peer is first reached.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn peer_list(&self) -> Vec<Arc<Peer>> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    /// Asks `peer` for its status every [`POLL_INTERVAL`] until it leaves
    /// or `shutdown`.
    fn poll(self: &Arc<Self>, peer: Arc<Peer>, mut shutdown: watch::Receiver<bool>) {
        let channel = crate::tls::uri(&peer.address, self.peer_tls.is_some())
            .map_err(|e| format!("{e:#}"))
            .and_then(|uri| Endpoint::from_shared(uri).map_err(|e| e.to_string()))
            .and_then(|e| match &self.peer_tls {
                None => Ok(e),
                Some(tls) => e.tls_config(tls.clone()).map_err(|e| e.to_string()),
            })
            .map(|e| e.connect_timeout(ANSWER_WITHIN).timeout(ANSWER_WITHIN))
            .map(|e| e.connect_lazy());
        let membership = self.clone();
        let mut gone = peer.gone.subscribe();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(POLL_INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    biased;
                    _ = shutdown.changed() => return,
                    _ = gone.changed() => return,
                    _ = ticks.tick() => {}
                }
                let found = match &channel {
                    Ok(channel) => membership.ask(channel.clone()).await,
                    Err(e) => Err(format!("bad peer address: {e}")),
                };
                membership.record(&peer, found);
            }
        });
    }

    /// Registers this node in etcd and follows the member list until
    /// `shutdown`; a lost session (etcd down, lease expired) is started
    /// again after a second, the member list kept meanwhile.
    async fn follow_etcd(self: Arc<Self>, etcd: EtcdMembers, mut shutdown: watch::Receiver<bool>) {
        loop {
            match self.etcd_session(&etcd, &mut shutdown).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(endpoints = ?etcd.endpoints, "etcd membership: {e}; trying again in 1 s")
                }
            }
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    async fn etcd_session(
        self: &Arc<Self>,
        etcd: &EtcdMembers,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), String> {
        use etcd_client::{
            Client, ConnectOptions, EventType, GetOptions, PutOptions, WatchOptions,
        };
        let e = |what: &str| {
            let what = what.to_string();
            move |e: etcd_client::Error| format!("{what}: {e}")
        };
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5));
        let mut client = Client::connect(&etcd.endpoints, Some(options))
            .await
            .map_err(e("connecting"))?;
        let ttl = etcd.lease.as_secs().max(1) as i64;
        let lease = client
            .lease_grant(ttl, None)
            .await
            .map_err(e("lease"))?
            .id();
        let key = format!("{}{}", etcd.prefix, self.node_id);
        client
            .put(
                key.as_str(),
                self.advertise.as_str(),
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .map_err(e("registering"))?;
        let (mut keeper, mut kept) = client
            .lease_keep_alive(lease)
            .await
            .map_err(e("keep-alive"))?;
        let listed = client
            .get(etcd.prefix.as_str(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(e("listing members"))?;
        let revision = listed.header().map_or(0, |h| h.revision());
        let members: Vec<(u32, String)> = listed
            .kvs()
            .iter()
            .filter_map(|kv| self.member(&etcd.prefix, kv.key(), kv.value()))
            .collect();
        self.set_members(&members, shutdown);
        tracing::info!(key, lease, members = members.len(), "registered in etcd");
        let (_watcher, mut watched) = client
            .watch(
                etcd.prefix.as_str(),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(revision + 1),
                ),
            )
            .await
            .map_err(e("watching members"))?;
        let mut ticks = tokio::time::interval(etcd.lease / 3);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.changed() => {
                    // Leave at once rather than when the lease runs out.
                    let _ = tokio::time::timeout(ANSWER_WITHIN, client.lease_revoke(lease)).await;
                    return Ok(());
                }
                _ = ticks.tick() => keeper.keep_alive().await.map_err(e("keep-alive"))?,
                answer = kept.message() => match answer.map_err(e("keep-alive"))? {
                    Some(a) if a.ttl() > 0 => {}
                    _ => return Err("the lease expired".into()),
                },
                news = watched.message() => {
                    let news = news.map_err(e("watching members"))?.ok_or("the watch ended")?;
                    if news.canceled() {
                        return Err(format!("the watch was cancelled: {}", news.cancel_reason()));
                    }
                    for event in news.events() {
                        let Some(kv) = event.kv() else { continue };
                        match event.event_type() {
                            EventType::Put => {
                                if let Some((id, address)) = self.member(&etcd.prefix, kv.key(), kv.value()) {
                                    self.add_member(id, address, shutdown);
                                }
                            }
                            EventType::Delete => {
                                if let Some(id) = member_id(&etcd.prefix, kv.key()) {
                                    self.remove_member(id);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// A registered peer, from its key and value (not this node).
    fn member(&self, prefix: &str, key: &[u8], value: &[u8]) -> Option<(u32, String)> {
        let id = member_id(prefix, key)?;
        let address = std::str::from_utf8(value).ok()?.to_string();
        (id != self.node_id && id != 0).then_some((id, address))
    }

    /// The member list is `members` (a fresh etcd listing).
    fn set_members(self: &Arc<Self>, members: &[(u32, String)], shutdown: &watch::Receiver<bool>) {
        let listed: Vec<u32> = members.iter().map(|m| m.0).collect();
        for peer in self.peer_list() {
            if !listed.contains(&peer.registered_id) {
                self.remove_member(peer.registered_id);
            }
        }
        for (id, address) in members {
            self.add_member(*id, address.clone(), shutdown);
        }
    }

    /// Node `id` is registered at `address` (a new peer, or one that moved).
    fn add_member(self: &Arc<Self>, id: u32, address: String, shutdown: &watch::Receiver<bool>) {
        let peer = {
            let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            if peers
                .iter()
                .any(|p| p.registered_id == id && p.address == address)
            {
                return;
            }
            if let Some(i) = peers.iter().position(|p| p.registered_id == id) {
                let _ = peers.remove(i).gone.send(true);
            }
            let peer = Peer::new(address, id);
            peers.push(peer.clone());
            peer
        };
        tracing::info!(node = id, address = %peer.address, "peer joined");
        self.poll(peer, shutdown.clone());
        self.changed();
    }

    /// Node `id` left the member list (its lease ended or was revoked).
    fn remove_member(&self, id: u32) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = peers.iter().position(|p| p.registered_id == id) {
            let peer = peers.remove(i);
            let _ = peer.gone.send(true);
            tracing::info!(node = id, address = %peer.address, "peer left");
            drop(peers);
            self.changed();
        }
    }

    async fn ask(&self, channel: Channel) -> Result<NodeInfo, String> {
        let mut request = ringfeed_proto::tonic::Request::new(StatusRequest::default());
        self.peer_bearer.apply(&mut request);
        let status = RingFeedClient::new(channel)
            .status(request)
            .await
            .map_err(|s| match crate::tls::explain(&s, None) {
                // A TLS failure, said as what to fix (`--peer-tls-ca`).
                Some(tls) => format!("{tls} (this node's --peer-tls-ca)"),
                None => format!("{}: {}", s.code(), s.message()),
            })?
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

    fn record(&self, peer: &Peer, found: Result<NodeInfo, String>) {
        let mut seen = peer.seen.lock().unwrap_or_else(|p| p.into_inner());
        match found {
            Ok(info) => {
                if peer.registered_id != 0 && info.node_id != peer.registered_id {
                    drop(seen);
                    let error = format!(
                        "it answers as node {} but registered as node {}",
                        info.node_id, peer.registered_id
                    );
                    return self.record(peer, Err(error));
                }
                let first = seen.node_id != info.node_id || seen.shards != info.shards;
                *seen = info;
                drop(seen);
                if first {
                    self.changed();
                }
            }
            Err(error) => {
                if seen.up || seen.error != error {
                    tracing::warn!(peer = %peer.address, "peer unreachable: {error}");
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
        self.peer_list().iter().map(|peer| peer.known()).collect()
    }

    /// The peers whose id and shard count are known (reached at least once).
    pub fn reached_peers(&self) -> Vec<KnownPeer> {
        self.peer_list()
            .iter()
            .filter_map(|peer| peer.known().ok())
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
            .chain(self.peer_list().iter().map(|peer| NodeInfo {
                address: peer.address.clone(),
                ..peer.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
            }))
            .collect()
    }
}

impl Peer {
    /// Its id, address and shard count, or why they are not known yet.
    fn known(&self) -> Result<KnownPeer, String> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.node_id == 0 || seen.shards == 0 {
            return Err(format!(
                "peer {} was not reached yet ({}): its node id is unknown",
                self.address, seen.error
            ));
        }
        Ok(KnownPeer {
            node_id: seen.node_id,
            address: self.address.clone(),
            shards: seen.shards,
        })
    }

    fn new(address: String, registered_id: u32) -> Arc<Peer> {
        Arc::new(Peer {
            address,
            registered_id,
            seen: Mutex::new(NodeInfo {
                node_id: registered_id,
                error: "not reached yet".into(),
                ..NodeInfo::default()
            }),
            gone: watch::channel(false).0,
        })
    }
}

/// The node id an etcd key `<prefix><id>` registers.
fn member_id(prefix: &str, key: &[u8]) -> Option<u32> {
    std::str::from_utf8(key.strip_prefix(prefix.as_bytes())?)
        .ok()?
        .parse()
        .ok()
}
