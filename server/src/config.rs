//! The server's configuration: a TOML file (`ringfeed serve --config FILE`)
//! whose every key is optional, overridden by command-line flags. Unknown or
//! invalid keys are refused with the key named. `ringfeed tune profile`
//! writes this same format.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ringfeed_engine::{EngineConfig, Limits, RetentionPolicy};
use serde::Deserialize;

use crate::membership::{EtcdMembers, Members, DEFAULT_ETCD_LEASE, DEFAULT_ETCD_PREFIX};
use crate::sender::SubscriberLimits;

/// Default data dir and listen address (also the client's default server).
pub const DEFAULT_DATA_DIR: &str = "./ringfeed-data";
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7070";
/// The largest `chunk_max_bytes`: a chunk response stays below the 4 MiB
/// that gRPC clients accept by default.
const MAX_CHUNK_RESPONSE_BYTES: usize = (4 << 20) - (64 << 10);
/// Append bytes in flight in the whole server, by default: a few large
/// batches at once; a flood of clients waits on HTTP/2 flow control.
pub const DEFAULT_APPEND_BUDGET: usize = 32 << 20;

/// What a config file may say. Field names are the TOML keys.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub data_dir: Option<PathBuf>,
    /// This node's id in a cluster (at least 1), recorded in the data dir.
    pub node_id: Option<u32>,
    /// The other nodes of the cluster, HOST:PORT each (static membership).
    pub peers: Option<Vec<String>>,
    /// Where peers reach this node; default: the address it listens on.
    pub advertise: Option<String>,
    /// How long a peer may hold a cluster subscription's merge before the
    /// feed goes on without it (its events then come late).
    pub peer_hold_ms: Option<u64>,
    /// Items (events and heartbeats) each shared peer feed keeps for the
    /// cluster streams at that peer's live edge; a stream that falls further
    /// behind follows the peer on its own until it is back.
    pub peer_feed_events: Option<usize>,
    /// Tokens requests must carry (`serve --token-file`).
    pub token_file: Option<PathBuf>,
    /// The token this node sends its peers (`serve --peer-token`).
    pub peer_token: Option<String>,
    /// Listen on a non-loopback address without TLS and tokens (`serve --insecure`).
    pub insecure: Option<bool>,
    /// TLS for the gRPC listener (`serve --tls-cert --tls-key [--tls-client-ca]`), PEM files.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_client_ca: Option<PathBuf>,
    /// The CA that signed the peers' certificates: this node dials its peers
    /// over TLS (`serve --peer-tls-ca`).
    pub peer_tls_ca: Option<PathBuf>,
    /// SeaweedFS filers to follow (`serve --follow-filer`), each written the
    /// SeaweedFS way: `host:port` (gRPC at port + 10000) or `host:port.grpcPort`.
    pub follow_filers: Option<Vec<String>>,
    /// Where a filer followed for the first time starts, ns since the Unix
    /// epoch (`serve --follow-since`); default 0: the oldest event its log keeps.
    pub follow_since_ns: Option<i64>,
    /// Follow a filer whose log no longer reaches back to the last event
    /// stored from it (`serve --follow-skip-gap`): the events between are
    /// gone from the filer, and are skipped, counted and logged. Default
    /// false: such a filer is not followed until an operator decides.
    pub follow_skip_gap: Option<bool>,
    /// Serve SeaweedFS's filer gRPC API (its metadata feed) on this address
    /// (`serve --filer-listen`); off when absent.
    pub filer_listen: Option<String>,
    /// etcd endpoints (URLs): membership through etcd instead of `peers`.
    pub etcd: Option<Vec<String>>,
    /// Where nodes register in etcd: `<prefix><node id>`.
    pub etcd_prefix: Option<String>,
    /// The node's etcd lease: a node that dies leaves the member list this
    /// long after its last keep-alive (whole seconds, at least 1).
    pub etcd_lease_s: Option<u64>,
    pub listen: Option<String>,
    pub metrics_listen: Option<String>,
    /// The status page's address (`/` and `/api/status`).
    pub http_listen: Option<String>,
    pub shards: Option<u32>,
    pub io_threads: Option<usize>,
    pub cpus: Option<Vec<usize>>,
    pub window_bytes: Option<usize>,
    pub ring_bytes: Option<usize>,
    pub max_unflushed_bytes: Option<usize>,
    /// Record bytes of appends queued for one shard; past it, refused.
    pub max_queued_bytes: Option<usize>,
    pub flush_interval_ms: Option<u64>,
    pub append_timeout_ms: Option<u64>,
    pub segment_bytes: Option<u64>,
    pub max_event_bytes: Option<usize>,
    pub retention_max_age_secs: Option<u64>,
    pub retention_max_bytes: Option<u64>,
    /// How often each shard applies retention (default 60 s).
    pub retention_interval_secs: Option<u64>,
    /// Upload sealed segments to this object store (`serve
    /// --object-store`): `s3://BUCKET/PREFIX` (endpoint, region and
    /// credentials from the `AWS_*` environment variables) or `file:///DIR`.
    /// Local retention then keeps every segment until the store holds it.
    pub object_store: Option<String>,
    /// Upload a sealed segment once it is this old (default 0: at once).
    pub object_store_upload_after_secs: Option<u64>,
    /// Bucket retention, apart from the local one: a shard's segments in the
    /// object store are removed, oldest first, once their newest event is
    /// older than this (default: kept for ever).
    pub object_store_retention_max_age_secs: Option<u64>,
    /// Bucket retention: the oldest segments are removed while a shard's
    /// segments in the store hold more than this many bytes (default: no
    /// limit).
    pub object_store_retention_max_bytes: Option<u64>,
    /// Reads below the local log: bytes of chunks cached and being fetched
    /// together (default 256 MiB).
    pub object_store_cache_bytes: Option<u64>,
    /// Reads below the local log: fetches at once (default 4).
    pub object_store_fetches: Option<usize>,
    /// Settings of the S3 client, over the environment's (a table: the
    /// `object_store` crate's names, `aws_access_key_id`,
    /// `aws_secret_access_key`, `aws_endpoint`, `aws_region`,
    /// `aws_allow_http`, ...). Never shown: values may be secrets.
    pub object_store_options: Option<StoreOptions>,
    /// No longer used (still accepted, so older files keep working): a
    /// subscriber that allows batches gets every ready event in one response,
    /// however far behind it is.
    pub batch_behind_ms: Option<u64>,
    /// No longer used, as `batch_behind_ms`.
    pub batch_min_ready: Option<u64>,
    /// Responses queued per subscriber ahead of its gRPC stream.
    pub subscriber_queue: Option<usize>,
    /// Bytes of responses all subscribers together may hold built and not
    /// yet taken by the transport (`backlog_budget_bytes`, its name when it
    /// covered only readers below the ring, is still read).
    #[serde(alias = "backlog_budget_bytes")]
    pub response_budget_bytes: Option<usize>,
    /// Bytes each subscription stream may hold encoded in the HTTP/2 layer.
    pub subscriber_send_buffer_bytes: Option<usize>,
    /// A subscriber that reads nothing for this long gives its place back.
    pub stall_timeout_secs: Option<u64>,
    /// HTTP/2 keepalive: a ping after this long without a frame...
    pub keepalive_interval_secs: Option<u64>,
    /// ... and the connection closed if its answer takes longer than this.
    pub keepalive_timeout_secs: Option<u64>,
    /// Subscribers that may read backlog (below the ring) at once.
    pub backlog_readers: Option<usize>,
    /// Bytes the filters of all connected subscribers may hold together.
    pub filter_budget_bytes: Option<usize>,
    /// Most record bytes of one chunk-mode response.
    pub chunk_max_bytes: Option<usize>,
    /// Bytes of append requests all clients together may have in flight in
    /// the server; past it, HTTP/2 flow control holds producers back.
    pub append_budget_bytes: Option<usize>,
    /// Connections to the gRPC port open at once; at the cap the oldest that
    /// has not completed its handshake is closed to make room, else the new
    /// one is refused. Default 10,000, or the open files limit less 256.
    pub max_connections: Option<usize>,
    /// Milliseconds a new connection has to send its HTTP/2 preface (or TLS
    /// handshake) before it is closed. Default 5000.
    pub handshake_timeout_ms: Option<u64>,
}

/// [`FileConfig::object_store_options`]: shown (Debug) by their keys only.
#[derive(Clone, Default, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct StoreOptions(pub std::collections::BTreeMap<String, String>);

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// Everything `serve` runs with, after file and flags are combined.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub engine: EngineConfig,
    pub listen: String,
    pub metrics_listen: Option<String>,
    /// The status page's address; the same as `metrics_listen` serves both.
    pub http_listen: Option<String>,
    pub io_threads: usize,
    pub subscribers: SubscriberLimits,
    /// See [`FileConfig::append_budget_bytes`].
    pub append_budget_bytes: usize,
    /// See [`FileConfig::max_connections`] and [`FileConfig::handshake_timeout_ms`].
    pub connections: crate::connections::Limits,
    /// See [`FileConfig::peers`] and [`FileConfig::etcd`].
    pub members: Members,
    pub advertise: Option<String>,
    /// Peer hold, shared feed size and peer token.
    pub cluster: crate::membership::ClusterOptions,
    pub token_file: Option<PathBuf>,
    pub insecure: bool,
    pub tls: Option<crate::tls::ServerTls>,
    /// See [`FileConfig::follow_filers`].
    pub follow_filers: Vec<crate::seaweedfs::FilerAddress>,
    /// See [`FileConfig::follow_since_ns`].
    pub follow_since_ns: i64,
    /// See [`FileConfig::follow_skip_gap`].
    pub follow_skip_gap: bool,
    /// See [`FileConfig::filer_listen`].
    pub filer_listen: Option<String>,
    /// See [`FileConfig::object_store`] (opened, so a bad URL fails at
    /// start) and [`FileConfig::object_store_upload_after_secs`].
    pub object_store: Option<std::sync::Arc<crate::bucket::Bucket>>,
    pub object_store_upload_after: Duration,
    /// See [`FileConfig::object_store_cache_bytes`] and
    /// [`FileConfig::object_store_fetches`].
    pub object_store_reads: crate::bucket::ReadLimits,
    /// See [`FileConfig::object_store_retention_max_age_secs`] and
    /// [`FileConfig::object_store_retention_max_bytes`].
    pub object_store_retention: crate::bucket::BucketRetention,
}

impl FileConfig {
    /// Reads and parses a config file; errors name the file and the key.
    pub fn load(path: &Path) -> Result<FileConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config file {}", path.display()))?;
        FileConfig::parse(&text).with_context(|| format!("config file {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<FileConfig> {
        // toml's message names the key (e.g. "unknown field `windw_bytes`, expected one of ...").
        toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.message().trim()))
    }

    /// Applies defaults and checks the result (the engine checks its own part).
    pub fn resolve(self) -> Result<ServerConfig> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let defaults = EngineConfig::default();
        let shards = self.shards.unwrap_or(cores as u32);
        if shards == 0 {
            bail!("shards: must be at least 1");
        }
        let io_threads = self.io_threads.unwrap_or(cores.max(1));
        if io_threads == 0 {
            bail!("io_threads: must be at least 1");
        }
        let mut limits = Limits::default();
        if let Some(max) = self.max_event_bytes {
            limits.max_event_bytes = max;
        }
        if self.node_id == Some(0) {
            bail!("node_id: must be at least 1");
        }
        for peer in self.peers.iter().flatten() {
            let port = peer
                .rsplit_once(':')
                .map(|(host, port)| (host, port.parse::<u16>()));
            if !matches!(port, Some((host, Ok(p))) if !host.is_empty() && p != 0) {
                bail!("peers: {peer:?} is not HOST:PORT");
            }
        }
        let members = match (self.peers, self.etcd) {
            (Some(_), Some(_)) => bail!("peers and etcd: membership comes from one or the other"),
            (_, Some(endpoints)) => {
                if endpoints.is_empty() {
                    bail!("etcd: give at least one endpoint URL");
                }
                let lease = self.etcd_lease_s.unwrap_or(DEFAULT_ETCD_LEASE.as_secs());
                if lease == 0 {
                    bail!("etcd_lease_s: must be at least 1");
                }
                Members::Etcd(EtcdMembers {
                    endpoints,
                    prefix: self
                        .etcd_prefix
                        .unwrap_or_else(|| DEFAULT_ETCD_PREFIX.into()),
                    lease: Duration::from_secs(lease),
                })
            }
            (peers, None) => Members::Static(peers.unwrap_or_default()),
        };
        let secs_at_least_one = |key: &str, value: Option<u64>, default: Duration| match value {
            Some(0) => bail!("{key}: must be at least 1"),
            Some(secs) => Ok(Duration::from_secs(secs)),
            None => Ok(default),
        };
        let engine = EngineConfig {
            data_dir: self.data_dir.unwrap_or_else(|| DEFAULT_DATA_DIR.into()),
            node_id: self.node_id,
            shards,
            cpus: self.cpus,
            window_bytes: self.window_bytes.unwrap_or(defaults.window_bytes),
            ring_bytes: self.ring_bytes.unwrap_or(defaults.ring_bytes),
            max_unflushed_bytes: self
                .max_unflushed_bytes
                .unwrap_or(defaults.max_unflushed_bytes),
            max_queued_bytes: self.max_queued_bytes.unwrap_or(defaults.max_queued_bytes),
            flush_interval: self
                .flush_interval_ms
                .map_or(defaults.flush_interval, Duration::from_millis),
            append_timeout: self
                .append_timeout_ms
                .map_or(defaults.append_timeout, Duration::from_millis),
            segment_bytes: self.segment_bytes.unwrap_or(defaults.segment_bytes),
            retention: RetentionPolicy {
                max_age: self.retention_max_age_secs.map(Duration::from_secs),
                max_bytes: self.retention_max_bytes,
                keep_until_uploaded: self.object_store.is_some(),
            },
            retention_interval: secs_at_least_one(
                "retention_interval_secs",
                self.retention_interval_secs,
                defaults.retention_interval,
            )?,
            limits,
        };
        if engine.flush_interval.is_zero() {
            bail!("flush_interval_ms: must be at least 1");
        }
        let d = SubscriberLimits::default();
        let at_least_one = |key: &str, value: Option<usize>, default: usize| match value {
            Some(0) => bail!("{key}: must be at least 1"),
            v => Ok(v.unwrap_or(default)),
        };
        let subscribers = SubscriberLimits {
            queue_responses: at_least_one(
                "subscriber_queue",
                self.subscriber_queue,
                d.queue_responses,
            )?,
            response_budget_bytes: match self.response_budget_bytes {
                // Two KiB units: a stream's last response and its next.
                Some(bytes) if bytes < 2048 => {
                    bail!("response_budget_bytes: must be at least 2048")
                }
                Some(bytes) => bytes,
                None => d.response_budget_bytes,
            },
            stall_timeout: secs_at_least_one(
                "stall_timeout_secs",
                self.stall_timeout_secs,
                d.stall_timeout,
            )?,
            keepalive_interval: secs_at_least_one(
                "keepalive_interval_secs",
                self.keepalive_interval_secs,
                d.keepalive_interval,
            )?,
            keepalive_timeout: secs_at_least_one(
                "keepalive_timeout_secs",
                self.keepalive_timeout_secs,
                d.keepalive_timeout,
            )?,
            send_buffer_bytes: at_least_one(
                "subscriber_send_buffer_bytes",
                self.subscriber_send_buffer_bytes,
                d.send_buffer_bytes,
            )?,
            backlog_readers: at_least_one(
                "backlog_readers",
                self.backlog_readers,
                d.backlog_readers,
            )?,
            filter_budget_bytes: at_least_one(
                "filter_budget_bytes",
                self.filter_budget_bytes,
                d.filter_budget_bytes,
            )?,
            chunk_max_bytes: match self.chunk_max_bytes {
                // Below gRPC clients' usual 4 MiB message limit, with room
                // for the response's other fields.
                Some(bytes) if !(4096..=MAX_CHUNK_RESPONSE_BYTES).contains(&bytes) => bail!(
                    "chunk_max_bytes: {bytes} is not between 4096 and {MAX_CHUNK_RESPONSE_BYTES} \
                     (gRPC clients refuse messages past 4 MiB by default)"
                ),
                Some(bytes) => bytes,
                None => d.chunk_max_bytes,
            },
            ..d
        };
        let mut follow_filers = Vec::new();
        for given in self.follow_filers.iter().flatten() {
            let filer = crate::seaweedfs::FilerAddress::parse(given)
                .map_err(|e| anyhow::anyhow!("follow_filers: {e}"))?;
            if follow_filers.contains(&filer) {
                bail!("follow_filers: {given:?} is named twice");
            }
            follow_filers.push(filer);
        }
        let follow_since_ns = match self.follow_since_ns {
            Some(ns) if ns < 0 => bail!("follow_since_ns: {ns} is before the Unix epoch"),
            since => since.unwrap_or(0),
        };
        let options: Vec<(&str, &str)> = self
            .object_store_options
            .iter()
            .flat_map(|o| o.0.iter())
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let object_store = match &self.object_store {
            Some(url) => Some(std::sync::Arc::new(
                crate::bucket::Bucket::open_with(url, &options).map_err(|e| anyhow::anyhow!(e))?,
            )),
            None if !options.is_empty() => {
                bail!("object_store_options: given without object_store")
            }
            None => None,
        };
        let object_store_reads = crate::bucket::ReadLimits {
            cache_bytes: match self.object_store_cache_bytes {
                Some(b) if b < 16 << 20 => {
                    bail!("object_store_cache_bytes: {b} is less than 16 MiB (16777216)")
                }
                b => b.unwrap_or(256 << 20),
            },
            fetches: match self.object_store_fetches {
                Some(n) if !(1..=64).contains(&n) => {
                    bail!("object_store_fetches: {n} is not between 1 and 64")
                }
                n => n.unwrap_or(4),
            },
        };
        let object_store_retention = crate::bucket::BucketRetention {
            max_age: self
                .object_store_retention_max_age_secs
                .map(Duration::from_secs),
            max_bytes: self.object_store_retention_max_bytes,
        };
        if object_store.is_none()
            && (object_store_retention.max_age.is_some()
                || object_store_retention.max_bytes.is_some())
        {
            bail!("object_store_retention_*: given without object_store");
        }
        Ok(ServerConfig {
            object_store,
            object_store_reads,
            object_store_retention,
            object_store_upload_after: Duration::from_secs(
                self.object_store_upload_after_secs.unwrap_or(0),
            ),
            follow_filers,
            follow_since_ns,
            follow_skip_gap: self.follow_skip_gap.unwrap_or(false),
            filer_listen: self.filer_listen,
            engine,
            listen: self.listen.unwrap_or_else(|| DEFAULT_LISTEN.into()),
            metrics_listen: self.metrics_listen,
            http_listen: self.http_listen,
            io_threads,
            subscribers,
            append_budget_bytes: at_least_one(
                "append_budget_bytes",
                self.append_budget_bytes,
                DEFAULT_APPEND_BUDGET,
            )?,
            connections: crate::connections::Limits {
                max_connections: at_least_one(
                    "max_connections",
                    self.max_connections,
                    crate::connections::Limits::default_max_connections(),
                )?,
                handshake: match self.handshake_timeout_ms {
                    Some(0) => bail!("handshake_timeout_ms: must be at least 1"),
                    Some(ms) => Duration::from_millis(ms),
                    None => crate::connections::Limits::DEFAULT_HANDSHAKE,
                },
            },
            members,
            advertise: self.advertise,
            cluster: crate::membership::ClusterOptions {
                peer_hold: self
                    .peer_hold_ms
                    .map_or(crate::membership::DEFAULT_PEER_HOLD, Duration::from_millis),
                peer_feed_events: at_least_one(
                    "peer_feed_events",
                    self.peer_feed_events,
                    crate::peer_feed::DEFAULT_FEED_ITEMS,
                )?,
                peer_token: self.peer_token,
                // Peers serve TLS: trust this CA, and present this node's
                // own certificate (peers with a client CA ask for one).
                peer_tls: self.peer_tls_ca.map(|ca| crate::tls::ClientTls {
                    ca: Some(ca),
                    cert: self.tls_cert.clone(),
                    key: self.tls_key.clone(),
                }),
            },
            token_file: self.token_file,
            insecure: self.insecure.unwrap_or(false),
            tls: match (self.tls_cert, self.tls_key) {
                (Some(cert), Some(key)) => Some(crate::tls::ServerTls {
                    cert,
                    key,
                    client_ca: self.tls_client_ca,
                }),
                (None, None) if self.tls_client_ca.is_none() => None,
                _ => {
                    anyhow::bail!("tls_cert and tls_key go together (and tls_client_ca needs them)")
                }
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// S3 settings in the config file reach the store, are checked by name
    /// at start, and are never shown.
    #[test]
    fn object_store_options_are_checked_and_never_shown() {
        let text = "object_store = \"s3://bucket/prefix\"\n\
                    [object_store_options]\n\
                    aws_endpoint = \"http://127.0.0.1:9\"\n\
                    aws_allow_http = \"true\"\n\
                    aws_access_key_id = \"ringfeed\"\n\
                    aws_secret_access_key = \"sekrit\"\n";
        let file = FileConfig::parse(text).unwrap();
        let shown = format!("{file:?}");
        assert!(
            shown.contains("aws_secret_access_key") && !shown.contains("sekrit"),
            "{shown}"
        );
        let resolved = file.resolve().unwrap();
        assert!(!format!("{resolved:?}").contains("sekrit"));

        let bad = text.replace("aws_endpoint", "aws_nonsense");
        let err = FileConfig::parse(&bad).unwrap().resolve().unwrap_err();
        assert!(
            err.to_string()
                .contains("\"aws_nonsense\" is not an S3 setting"),
            "{err}"
        );
        let alone = "[object_store_options]\naws_region = \"x\"\n";
        let err = FileConfig::parse(alone).unwrap().resolve().unwrap_err();
        assert!(err.to_string().contains("without object_store"), "{err}");
        let local =
            "object_store = \"file:///tmp/x\"\n[object_store_options]\naws_region = \"x\"\n";
        let err = FileConfig::parse(local).unwrap().resolve().unwrap_err();
        assert!(err.to_string().contains("takes no S3 settings"), "{err}");
    }

    proptest::proptest! {
        /// A config file is read from disk, where anything can be (issue
        /// 36): valid files with bytes set, flipped, inserted or cut, and
        /// arbitrary text, parse and resolve to a value or an error, never
        /// a panic.
        #[test]
        fn any_config_text_parses_or_is_refused(
            edits in crate::mutation::edits(),
            text in ".{0,200}",
        ) {
            let mut bytes = "shards = 2\nio_threads = 1\nwindow_bytes = 262144\nsegment_bytes = 2097152\n\
                 max_event_bytes = 65536\nretention_max_bytes = 10\npeers = [\"1=127.0.0.1:1\"]\n\
                 listen = \"127.0.0.1:0\"\nmax_connections = 7\nhandshake_timeout_ms = 9\n"
                .as_bytes()
                .to_vec();
            crate::mutation::apply(&mut bytes, &edits);
            for text in [String::from_utf8_lossy(&bytes).into_owned(), text] {
                if let Ok(config) = FileConfig::parse(&text) {
                    let _ = config.resolve();
                }
            }
        }
    }

    #[test]
    fn unknown_and_mistyped_keys_are_named() {
        let err = FileConfig::parse("windw_bytes = 4096\n").unwrap_err();
        assert!(err.to_string().contains("windw_bytes"), "{err}");
        let err = FileConfig::parse("shards = \"two\"\n").unwrap_err();
        assert!(err.to_string().contains("string"), "{err}");
        let err = FileConfig::parse("shards = 0\n")
            .unwrap()
            .resolve()
            .unwrap_err();
        assert!(err.to_string().contains("shards"), "{err}");
    }

    #[test]
    fn membership_comes_from_etcd_or_peers_never_both() {
        let resolve = |text: &str| FileConfig::parse(text).unwrap().resolve();
        let c =
            resolve("etcd = [\"http://127.0.0.1:2379\"]\netcd_prefix = \"x/\"\netcd_lease_s = 2\n")
                .unwrap();
        assert_eq!(
            c.members,
            Members::Etcd(EtcdMembers {
                endpoints: vec!["http://127.0.0.1:2379".into()],
                prefix: "x/".into(),
                lease: Duration::from_secs(2),
            })
        );
        let c = resolve("peers = [\"127.0.0.1:1\"]\n").unwrap();
        assert_eq!(c.members, Members::Static(vec!["127.0.0.1:1".into()]));
        let both = "peers = [\"127.0.0.1:1\"]\netcd = [\"http://127.0.0.1:2379\"]\n";
        let err = resolve(both).unwrap_err().to_string();
        assert!(err.contains("peers and etcd"), "{err}");
        let err = resolve("etcd = []\n").unwrap_err().to_string();
        assert!(err.contains("etcd"), "{err}");
        let err = resolve("etcd = [\"http://h:1\"]\netcd_lease_s = 0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("etcd_lease_s"), "{err}");
    }

    #[test]
    fn every_key_is_read() {
        let c = FileConfig::parse(
            "data_dir = \"/x\"\nlisten = \"127.0.0.1:1\"\nshards = 3\nio_threads = 2\n\
             window_bytes = 65536\nring_bytes = 1048576\nmax_unflushed_bytes = 262144\n\
             flush_interval_ms = 7\nappend_timeout_ms = 9\nsegment_bytes = 1048576\n\
             max_event_bytes = 16384\nretention_max_age_secs = 60\nretention_max_bytes = 10\n\
             cpus = [0]\nmetrics_listen = \"127.0.0.1:9\"\nhttp_listen = \"127.0.0.1:8\"\nbatch_behind_ms = 500\n\
             batch_min_ready = 10\nsubscriber_queue = 4\nresponse_budget_bytes = 1048576\n\
             backlog_readers = 3\nsubscriber_send_buffer_bytes = 32768\nstall_timeout_secs = 5\n\
             chunk_max_bytes = 65536\n",
        )
        .unwrap()
        .resolve()
        .unwrap();
        let e = &c.engine;
        assert_eq!(
            (e.shards, e.window_bytes, e.ring_bytes),
            (3, 65536, 1 << 20)
        );
        assert_eq!(e.flush_interval, Duration::from_millis(7));
        assert_eq!(e.retention.max_bytes, Some(10));
        assert_eq!((c.io_threads, c.listen.as_str()), (2, "127.0.0.1:1"));
        assert_eq!(c.http_listen.as_deref(), Some("127.0.0.1:8"));
        let s = &c.subscribers;
        assert_eq!(s.queue_responses, 4);
        assert_eq!((s.response_budget_bytes, s.backlog_readers), (1 << 20, 3));
        assert_eq!(s.send_buffer_bytes, 32768);
        assert_eq!(s.stall_timeout, Duration::from_secs(5));
        assert_eq!(s.chunk_max_bytes, 65536);
        // A chunk response must fit what gRPC clients accept by default.
        for bad in [0, 4095, 4 << 20] {
            let err = FileConfig::parse(&format!("chunk_max_bytes = {bad}\n"))
                .unwrap()
                .resolve()
                .unwrap_err();
            assert!(err.to_string().contains("chunk_max_bytes"), "{err}");
        }
        // The budget's name from when it covered only backlog readers.
        let old = FileConfig::parse("backlog_budget_bytes = 4096\n")
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(old.subscribers.response_budget_bytes, 4096);
        let err = FileConfig::parse("backlog_readers = 0\n")
            .unwrap()
            .resolve()
            .unwrap_err();
        assert!(err.to_string().contains("backlog_readers"), "{err}");
    }
}
