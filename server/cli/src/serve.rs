//! `ringfeed serve`: its flags over the config file's settings, the log
//! output, then `ringfeed_server::serve`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use ringfeed_server::FileConfig;

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `ringfeed serve`'s flags; each overrides the config file's setting.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Where the logs live; created if missing [default: ./ringfeed-data].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port [default: 127.0.0.1:7070].
    #[arg(long)]
    listen: Option<String>,
    /// Number of shards [default: the number of cores]. A data dir keeps its shard count.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    shards: Option<u32>,
    /// This node's id in a cluster (1 or more) [default: the id the data dir records, if any].
    /// Recorded in the data dir the first time; a data dir of another node is refused.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    node_id: Option<u32>,
    /// The other nodes of the cluster, HOST:PORT each, comma-separated (static membership;
    /// needs a node id). `ringfeed nodes` shows which are up.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',')]
    peers: Option<Vec<String>>,
    /// Membership through etcd: its endpoint URLs, comma-separated (needs a node id). The node
    /// registers its advertise address under a lease and follows the member list, so nodes
    /// joining and leaving are picked up without restarts. Instead of --peers.
    #[arg(long, value_name = "URL,...", value_delimiter = ',')]
    etcd: Option<Vec<String>>,
    /// Where peers reach this node [default: the address it listens on].
    #[arg(long, value_name = "HOST:PORT")]
    advertise: Option<String>,
    /// A TOML file with any engine and server setting (docs/configuration.md); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Tokens requests must carry: a TOML file of [[token]] tables (sha256, append, read,
    /// admin; see docs/security.md; `ringfeed token new` makes one). Reloaded on SIGHUP.
    /// Without it the server is open: anyone who reaches it may append and read everything.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// The token this node sends its peers (for peers started with --token-file; their token
    /// files must let it read "/" and be admin). Config `peer_token`.
    #[arg(long, env = "RINGFEED_PEER_TOKEN", hide_env_values = true)]
    peer_token: Option<String>,
    /// Serve gRPC over TLS with this certificate (PEM; with --tls-key). Config `tls_cert`.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The key of --tls-cert (PEM). Config `tls_key`.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Mutual TLS: clients must present a certificate this CA (PEM) signed. Config
    /// `tls_client_ca`.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Dial the cluster's peers over TLS, trusting the certificates this CA (PEM) signed
    /// (this node presents its own --tls-cert to peers that ask). Config `peer_tls_ca`.
    #[arg(long, value_name = "FILE")]
    peer_tls_ca: Option<PathBuf>,
    /// Listen on an address other hosts can reach without both TLS and a token file: anyone
    /// on the network could then read or append. Config `insecure`.
    #[arg(long)]
    insecure: bool,
    /// Follow a SeaweedFS filer's metadata log into this server, each event stored once, as
    /// the filer sent it (repeat for several filers). Written the SeaweedFS way: HOST:PORT
    /// (gRPC at PORT + 10000) or HOST:PORT.GRPCPORT. A filer followed for the first time is
    /// read from the oldest event its log keeps (see --follow-since); after a restart each
    /// continues right after its last stored event. Config `follow_filers`.
    #[arg(long = "follow-filer", value_name = "HOST:PORT[.GRPCPORT]")]
    follow_filers: Vec<String>,
    /// Where a filer followed for the first time starts: a duration back from now ("24h")
    /// or an RFC 3339 time [default: the oldest event its log keeps]. Config
    /// `follow_since_ns`.
    #[arg(long, value_name = "WHEN")]
    follow_since: Option<String>,
    /// Go on following a filer whose own log no longer reaches back to the last event stored
    /// from it (its log was pruned while this server was not following): the events between
    /// are gone from the filer and are skipped, logged and counted. Without it such a filer
    /// is not followed, with an error in `ringfeed status` and on /metrics, until a restart
    /// with this flag. Config `follow_skip_gap`.
    #[arg(long)]
    follow_skip_gap: bool,
    /// Serve SeaweedFS's filer gRPC API on ADDR for SeaweedFS's own clients (`weed
    /// filer.meta.tail -filer=HOST:PORT.GRPCPORT` with GRPCPORT = ADDR's port): the metadata
    /// feed of every followed filer and of this server's own appends, SubscribeMetadata and
    /// SubscribeLocalMetadata; every other filer RPC is refused UNIMPLEMENTED. It takes no
    /// tokens; it serves the TLS of --tls-cert/--tls-key, and with --token-file or beyond
    /// loopback it needs --tls-client-ca (clients present certificates, SeaweedFS's own gRPC
    /// security) or --insecure [default: off]. Config `filer_listen`.
    #[arg(long, value_name = "ADDR")]
    filer_listen: Option<String>,
    /// Upload each shard's sealed segments to an object store: s3://BUCKET/PREFIX (endpoint,
    /// region and credentials from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY; AWS_ALLOW_HTTP=true for a plain-HTTP endpoint) or file:///DIR.
    /// Each shard's manifest (PREFIX/node-N/shard-KKK/manifest.json) names what is uploaded;
    /// local retention keeps every segment until it is [default: off]. Config `object_store`.
    #[arg(long, value_name = "URL")]
    object_store: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics; port 0 picks a free port [default: off].
    #[arg(long)]
    metrics_listen: Option<String>,
    /// Serve the status page at http://ADDR/ (shards, subscribers and lag, updated live) and
    /// its data at http://ADDR/api/status; port 0 picks a free port. The same address as
    /// --metrics-listen serves both on one listener. With --token-file both need an admin
    /// token: open http://ADDR/#token=TOKEN [default: off]. Config `http_listen`.
    #[arg(long)]
    http_listen: Option<String>,
    /// Log lines as plain text or as one JSON object each.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Least severe level logged; RUST_LOG, when set, overrides it.
    #[arg(long, default_value = "info", value_parser = ["error", "warn", "info", "debug", "trace", "off"])]
    log_level: String,
}

/// Runs `serve` with `args`: logs first, then the server.
pub fn run(args: ServeArgs) -> Result<()> {
    init_logs(args.log_format, &args.log_level)?;
    serve_command(args)
}

/// Logs of `serve` go to stderr: stdout carries the lines tools parse
/// (`listening on ADDR`). Records of the `log` crate (glommio's warnings)
/// are routed into the same output.
fn init_logs(format: LogFormat, level: &str) -> Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => {
            EnvFilter::try_new(&spec).with_context(|| format!("RUST_LOG={spec}"))?
        }
        _ => EnvFilter::try_new(level).with_context(|| format!("--log-level {level}"))?,
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    match format {
        LogFormat::Text => logs.try_init(),
        LogFormat::Json => logs.json().try_init(),
    }
    .map_err(|e| anyhow::anyhow!("starting the log: {e}"))
}

/// Serves with the config file's settings, the flags overriding them.
fn serve_command(args: ServeArgs) -> Result<()> {
    let mut file = match &args.config {
        Some(path) => FileConfig::load(path)?,
        None => FileConfig::default(),
    };
    file.data_dir = args.data_dir.or(file.data_dir);
    file.listen = args.listen.or(file.listen);
    file.shards = args.shards.or(file.shards);
    file.node_id = args.node_id.or(file.node_id);
    file.peers = args.peers.or(file.peers);
    file.etcd = args.etcd.or(file.etcd);
    file.advertise = args.advertise.or(file.advertise);
    file.metrics_listen = args.metrics_listen.or(file.metrics_listen);
    file.http_listen = args.http_listen.or(file.http_listen);
    file.token_file = args.token_file.or(file.token_file);
    file.peer_token = args.peer_token.or(file.peer_token);
    file.insecure = Some(args.insecure || file.insecure.unwrap_or(false));
    file.tls_cert = args.tls_cert.or(file.tls_cert);
    file.tls_key = args.tls_key.or(file.tls_key);
    file.tls_client_ca = args.tls_client_ca.or(file.tls_client_ca);
    file.peer_tls_ca = args.peer_tls_ca.or(file.peer_tls_ca);
    if !args.follow_filers.is_empty() {
        file.follow_filers = Some(args.follow_filers);
    }
    file.filer_listen = args.filer_listen.or(file.filer_listen);
    file.object_store = args.object_store.or(file.object_store);
    if args.follow_skip_gap {
        file.follow_skip_gap = Some(true);
    }
    if let Some(when) = &args.follow_since {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        file.follow_since_ns = Some(crate::time::parse_when(when, now, "--follow-since")?);
    }
    ringfeed_server::serve(file.resolve()?)
}
