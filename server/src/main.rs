//! The `ringfeed` command line: `serve` runs the gRPC server over the
//! engine; `append`, `tail` and `status` are its clients; `tune` probes the
//! machine and writes a configuration; `inspect` prints a data dir's logs.

#![deny(unsafe_code)]

/// mimalloc, not glibc malloc: under an append flood glibc's per-thread arenas
/// and dynamic mmap threshold kept freed batch buffers resident, and peak RSS
/// was about twice what was live (`ringfeed-bench append-flood`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use glommio::{LocalExecutorBuilder, Placement};
use ringfeed_engine::storage::DmaStorage;
use ringfeed_engine::{Engine, Log, LogConfig};
use ringfeed_proto::tonic::service::interceptor::InterceptedService;
use ringfeed_proto::RingFeedServer;
use ringfeed_server::config::{FileConfig, ServerConfig, DEFAULT_DATA_DIR};
use ringfeed_server::membership::{Members, Membership};
use ringfeed_server::metrics::Exporter;
use ringfeed_server::service::Service;

#[derive(Parser)]
#[command(
    name = "ringfeed",
    version,
    about = "A thread-per-core change-feed storage engine: append metadata change events, follow them from any point in time"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server: open (and recover) the data dir, serve gRPC until SIGINT/SIGTERM,
    /// then stop accepting, flush, sync and exit 0.
    ///
    /// Prints `listening on ADDR` once it accepts connections (then `metrics on
    /// http://ADDR/metrics` with --metrics-listen, and `status page on
    /// http://ADDR/` with --http-listen). Logs go to stderr.
    Serve(ServeArgs),
    /// Append events (from flags, or JSON lines on stdin) and print their positions.
    ///
    /// One event from flags:
    ///   ringfeed append --dir /photos --name cat.jpg --op create
    ///
    /// Or one proto3-JSON `Event` per line on stdin (blank lines skipped):
    ///   {"directory":"/photos","newEntry":{"name":"dog.jpg","size":"1024"}}
    ///   {"directory":"/docs","oldEntry":{"name":"a.txt"},"newEntry":{"name":"b.txt"}}
    ///
    /// Each acknowledged event prints {"shard":S,"offset":O,"ts":T}, in input order.
    #[command(verbatim_doc_comment)]
    Append(ringfeed_server::cli_client::AppendArgs),
    /// Follow the feed and print one JSON line per event.
    Tail(ringfeed_server::cli_client::TailArgs),
    /// Show the server's shards, watermarks and subscribers.
    Status(ringfeed_server::cli_client::StatusArgs),
    /// List the connected subscribers: identity, peer, mode, lag, filters, cursor.
    Subscribers(ringfeed_server::cli_client::SubscribersArgs),
    /// Show the nodes of the cluster as the server sees them, and which are up.
    Nodes(ringfeed_server::cli_client::NodesArgs),
    /// Tokens for `serve --token-file` (docs/security.md).
    Token {
        #[command(subcommand)]
        what: TokenCommand,
    },
    /// Check this machine, measure its disk and recommend a configuration.
    Tune {
        #[command(subcommand)]
        what: Tune,
    },
    /// Print the segments, chunk counts and generations of every shard in a data dir,
    /// read-only: it changes nothing (a leftover or torn tail a server's open would
    /// repair is reported, not repaired). Beside a running server it may see the
    /// active segment mid-write.
    Inspect {
        /// The data dir to read (a server's --data-dir); nothing in it is
        /// changed, and a running server may keep it.
        #[arg(long, default_value = DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
    },
    /// Mend a data dir whose logs `serve` refuses for damage (a flipped bit, a
    /// zeroed block): keeps every event but those of the chunks that no longer
    /// verify, appends the events after the damage again from the first lost
    /// offset under a new generation (a cursor past the hole is then refused as
    /// truncated, as after a crash: resume it with --resume-truncated or from a
    /// time), and prints which shard, offsets and stamps were lost. Refused while
    /// a server holds the data dir. Safe to run again, also after it was cut short.
    Repair {
        /// The data dir to mend (a server's --data-dir, with the server stopped).
        #[arg(long, default_value = DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        /// Say what would be lost and kept; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Print a new random token on the first line, then the [[token]] table to add to the
    /// token file (it holds the token's SHA-256, never the token). Keep the token secret;
    /// send SIGHUP to the server after editing the file.
    New {
        /// A path prefix the token may append under (repeat for more).
        #[arg(long, value_name = "PREFIX")]
        append: Vec<String>,
        /// A path prefix the token may read ("/" for everything; repeat for more).
        #[arg(long, value_name = "PREFIX")]
        read: Vec<String>,
        /// The token may also ask for status, subscribers and nodes.
        #[arg(long)]
        admin: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Tune {
    /// Kernel, io_uring, O_DIRECT alignment, file system, memlock, cores and disk, with fixes.
    Probe {
        /// The data dir whose disk to check.
        #[arg(long, default_value = DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Measure fdatasync latency and O_DIRECT bandwidth of the data dir's disk (a few seconds).
    Calibrate {
        #[arg(long, default_value = DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Probe, calibrate, and recommend a configuration (the TOML `serve --config` reads).
    Profile {
        #[arg(long, default_value = DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        #[arg(long)]
        json: bool,
        /// Write the configuration to this file.
        #[arg(long)]
        write: Option<PathBuf>,
    },
}

/// `ringfeed serve`'s flags; each overrides the config file's setting.
#[derive(clap::Args)]
struct ServeArgs {
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

fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Command::Serve(args) => {
            init_logs(args.log_format, &args.log_level).and_then(|()| serve_command(args))
        }
        Command::Append(args) => client(ringfeed_server::cli_client::append(args)),
        Command::Tail(args) => client(ringfeed_server::cli_client::tail(args)),
        Command::Status(args) => client(ringfeed_server::cli_client::status(args)),
        Command::Subscribers(args) => client(ringfeed_server::cli_client::subscribers(args)),
        Command::Nodes(args) => client(ringfeed_server::cli_client::nodes(args)),
        Command::Token {
            what:
                TokenCommand::New {
                    append,
                    read,
                    admin,
                },
        } => ringfeed_server::auth::new_token(&append, &read, admin).map(|(token, table)| {
            println!("{token}");
            print!("{table}");
        }),
        Command::Tune { what } => tune(what),
        Command::Inspect { data_dir } => inspect(&data_dir),
        Command::Repair { data_dir, dry_run } => repair(&data_dir, dry_run),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let (code, message) = ringfeed_server::cli_client::exit_code(&e);
            eprintln!("ringfeed: {message}");
            std::process::ExitCode::from(code.clamp(1, 255) as u8)
        }
    }
}

/// Runs a client command on a small tokio runtime.
fn client(f: impl std::future::Future<Output = Result<()>>) -> Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(f)
}

fn tune(what: Tune) -> Result<()> {
    let progress = &mut |line: &str| eprintln!("{line}");
    match what {
        Tune::Probe { data_dir, json } => {
            let probe = ringfeed_tuning::probe(&data_dir, None)?;
            print_report(&probe, json, probe.render_human())
        }
        Tune::Calibrate { data_dir, json } => {
            let c = ringfeed_tuning::calibrate(
                &data_dir,
                ringfeed_tuning::DEFAULT_CALIBRATION_BUDGET,
                progress,
            )?;
            print_report(&c, json, c.render_human())
        }
        Tune::Profile {
            data_dir,
            json,
            write,
        } => {
            let probe = ringfeed_tuning::probe(&data_dir, None)?;
            let c = ringfeed_tuning::calibrate(
                &data_dir,
                ringfeed_tuning::DEFAULT_CALIBRATION_BUDGET,
                progress,
            )?;
            let profile = ringfeed_tuning::profile(&probe, &c);
            if let Some(path) = write {
                std::fs::write(&path, profile.to_toml())
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
            print_report(&profile, json, profile.render_human())
        }
    }
}

fn print_report<T: serde::Serialize>(value: &T, json: bool, human: String) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        print!("{human}");
    }
    Ok(())
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
    serve(file.resolve()?)
}

/// What `serve` listens on, bound before the data dir is opened.
struct Bound {
    listener: tokio::net::TcpListener,
    addr: std::net::SocketAddr,
    metrics: Option<tokio::net::TcpListener>,
    page: Option<tokio::net::TcpListener>,
    /// The page is served on the metrics' listener.
    page_shares_metrics: bool,
    tls: Option<ringfeed_proto::tonic::transport::ServerTlsConfig>,
}

/// Checks the listen policy and binds every listener.
async fn bind(config: &ServerConfig, clustered: bool) -> Result<Bound> {
    // Other hosts could reach it: without TLS anyone on the path reads
    // every event and every token, and without tokens anyone may read
    // and append. Checked before binding.
    let reachable = tokio::net::lookup_host(&config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?
        .find(|a| !a.ip().is_loopback());
    let protected = config.tls.is_some() && config.token_file.is_some();
    if let (Some(addr), false, false) = (reachable, protected, config.insecure) {
        anyhow::bail!(
            "listening on {addr}, which other hosts can reach, without {}: anyone on the \
             network could read the feed or append. Give --tls-cert/--tls-key and \
             --token-file, listen on a loopback address, or give --insecure (config \
             `insecure = true`) to accept that",
            match (config.tls.is_some(), config.token_file.is_some()) {
                (false, false) => "TLS and tokens",
                (false, true) => "TLS",
                _ => "tokens",
            }
        );
    }
    let tls = config.tls.as_ref().map(|t| t.config()).transpose()?;
    let listener = ringfeed_server::connections::bind(&config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let metrics = match &config.metrics_listen {
        Some(at) => Some(
            tokio::net::TcpListener::bind(at)
                .await
                .with_context(|| format!("metrics: listening on {at}"))?,
        ),
        None => None,
    };
    // The page gets a listener of its own (an operator's browser is
    // often let in where Prometheus's scrapes are not), unless it is
    // given the metrics' address: that listener then serves both.
    let page_shares_metrics =
        config.http_listen.is_some() && config.http_listen == config.metrics_listen;
    let page = match &config.http_listen {
        Some(at) if !page_shares_metrics => Some(
            tokio::net::TcpListener::bind(at)
                .await
                .with_context(|| format!("status page: listening on {at}"))?,
        ),
        _ => None,
    };
    // Peers dial the advertised address: a wildcard one reaches nobody.
    if clustered && config.advertise.is_none() && addr.ip().is_unspecified() {
        anyhow::bail!(
            "listening on {addr}, which peers cannot dial: give the address they reach this \
             node at with --advertise HOST:PORT"
        );
    }
    Ok(Bound {
        listener,
        addr,
        metrics,
        page,
        page_shares_metrics,
        tls,
    })
}

fn serve(config: ServerConfig) -> Result<()> {
    // Before the data dir: a bad token file is refused at once.
    let tokens = config
        .token_file
        .as_deref()
        .map(ringfeed_server::auth::Tokens::load)
        .transpose()?;
    let data_dir = config.engine.data_dir.clone();
    let limits = config.engine.limits;
    let shards = config.engine.shards;
    let clustered = match &config.members {
        Members::Static(peers) => !peers.is_empty(),
        Members::Etcd(_) => true,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.io_threads)
        .thread_name("ringfeed-io")
        .enable_all()
        .build()
        .context("starting the network runtime")?;
    // Every listener before the data dir: a serve that cannot listen leaves
    // nothing behind (a fresh data dir preallocates a segment per shard).
    let Bound {
        listener,
        addr,
        metrics,
        page,
        page_shares_metrics,
        tls,
    } = runtime.block_on(bind(&config, clustered))?;
    let engine = Engine::open(config.engine.clone())
        .with_context(|| format!("opening data dir {}", data_dir.display()))?;
    let engine_node = engine.node_id();
    if clustered && engine_node.is_none() {
        anyhow::bail!(
            "a node with peers or etcd needs a node id: start it with --node-id N (each node its own)"
        );
    }
    for (shard, report) in engine.recovery_reports().iter().enumerate() {
        println!(
            "shard {shard}: {} segment(s), {} record(s), next offset {}{}{}{}",
            report.segments,
            report.records,
            report.next_offset,
            if report.clean_close {
                ", closed cleanly"
            } else {
                ""
            },
            match &report.truncated {
                Some((segment, torn)) => format!(", torn tail cut at {segment}:{}", torn.position),
                None => String::new(),
            },
            producers_line(report)
        );
    }
    let engine = Arc::new(engine);
    let served: Result<()> = runtime.block_on(async {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let advertise = config.advertise.clone().unwrap_or_else(|| addr.to_string());
        let membership = Membership::with_members(
            engine_node.unwrap_or(0),
            advertise,
            config.members.clone(),
            &config.cluster,
        )?;
        let leaving = membership.start(stop_rx.clone());
        let auth = Arc::new(ringfeed_server::auth::Auth::new(tokens));
        if let Some(path) = config.token_file.clone() {
            tokio::spawn(reload_tokens_on_sighup(path, auth.clone())?);
        } else {
            // Once, at start: the default on loopback, so not a warning.
            tracing::info!(
                "no --token-file: the server is open, anyone who reaches {addr} may append and read everything"
            );
        }
        let service = Service::with_limits(
            engine.clone(),
            stop_rx.clone(),
            config.subscribers.clone(),
            Arc::default(),
        )
        .with_membership(membership)
        .with_auth(auth.clone());
        let service = service.with_data_dir(data_dir.display().to_string());
        let service_metrics = service.metrics().clone();
        let board = service.board().clone();
        tokio::spawn(board.clone().sample_every_second(stop_rx.clone()));
        let access = ringfeed_server::http::Access {
            auth: auth.clone(),
            tls: match (&config.tls, metrics.is_some() || page.is_some()) {
                (Some(tls), true) => Some(tls.rustls_config(b"http/1.1")?),
                _ => None,
            },
        };
        let mut metrics_addr = None;
        let mut page_addr = None;
        if let Some(listener) = metrics {
            let at = listener.local_addr()?;
            let exporter = Exporter::new(engine.clone(), service.metrics(), board.clone());
            let routes = ringfeed_server::http::Routes {
                metrics: Some(Arc::new(exporter)),
                page: page_shares_metrics.then(|| board.clone()),
            };
            tokio::spawn(ringfeed_server::http::serve(listener, routes, access.clone()));
            metrics_addr = Some(at);
            page_addr = page_shares_metrics.then_some(at);
        }
        if let Some(listener) = page {
            page_addr = Some(listener.local_addr()?);
            let routes = ringfeed_server::http::Routes {
                metrics: None,
                page: Some(board.clone()),
            };
            tokio::spawn(ringfeed_server::http::serve(listener, routes, access));
        }
        // gRPC server reflection, behind the same tokens as every call.
        let known_token = ringfeed_server::reflection::KnownToken::new(auth.clone());
        let reflection_v1 = InterceptedService::new(
            ringfeed_server::reflection::builder().build_v1()?,
            known_token.clone(),
        );
        let reflection_v1alpha = InterceptedService::new(
            ringfeed_server::reflection::builder().build_v1alpha()?,
            known_token,
        );
        let (health, health_service) = tonic_health::server::health_reporter();
        health.set_serving::<RingFeedServer<Service>>().await;
        // Room for the largest batch the engine accepts, plus framing.
        let max_message = limits.max_batch_bytes + (1 << 20);
        let ringfeed = RingFeedServer::new(service)
            .max_decoding_message_size(max_message)
            .max_encoding_message_size(max_message);
        let ringfeed = ringfeed_server::append_budget::Budgeted::new(
            ringfeed,
            ringfeed_server::append_budget::AppendBudget::with_max_message(
                config.append_budget_bytes,
                config.engine.append_timeout,
                max_message,
            ),
        );
        // Registered before `listening on` is printed: a SIGTERM that comes
        // right after that line must stop the server gracefully, not kill it
        // (registered lazily, inside the shutdown future, the handler was
        // only installed once the server was first polled, after the line;
        // tune_profile_is_served caught that under load in CI).
        let stop_signal = stop_signals()?;
        let signal = async move {
            stop_signal.await;
            tracing::info!("stopping: no new connections; ending streams, then flush and sync");
            let _ = stop_tx.send(true);
        };
        let gate = ringfeed_server::connections::Gate::new(
            config.connections,
            service_metrics.clone(),
            tls.is_some(),
        );
        let mut transport = ringfeed_server::transport(&config.subscribers);
        if let Some(tls) = tls {
            transport = transport.tls_config(tls).context("TLS")?;
        }
        let server = transport
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(ringfeed)
            .serve_with_incoming_shutdown(
                ringfeed_server::connections::incoming(listener, gate),
                signal,
            );
        let node = match engine_node {
            Some(id) => format!(" as node {id}"),
            None => String::new(),
        };
        println!(
            "ringfeed: data dir {} open with {shards} shard(s){node}",
            data_dir.display()
        );
        println!("listening on {addr}");
        let scheme = if config.tls.is_some() { "https" } else { "http" };
        if let Some(at) = metrics_addr {
            println!("metrics on {scheme}://{at}/metrics");
        }
        if let Some(at) = page_addr {
            println!("status page on {scheme}://{at}/");
        }
        // Clients that keep a stream open past shutdown get 10 s to let go.
        let mut stopping = stop_rx;
        let grace = async move {
            let _ = stopping.wait_for(|s| *s).await;
            tokio::time::sleep(Duration::from_secs(10)).await;
        };
        tokio::select! {
            result = server => result.context("serving")?,
            _ = grace => tracing::warn!("clients still connected 10 s after shutdown began; closing their streams anyway"),
        }
        // Leave etcd's member list now (the lease revoked), not when the
        // lease runs out: the runtime's end would cancel the revoke.
        if let Some(leaving) = leaving {
            if tokio::time::timeout(Duration::from_secs(3), leaving).await.is_err() {
                tracing::warn!("etcd: the lease was not revoked within 3 s; the node leaves the member list when it runs out");
            }
        }
        Ok(())
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    served?;
    match Arc::try_unwrap(engine) {
        Ok(engine) => engine.shutdown().context("shutting down")?,
        // Dropping the last reference shuts the engine down cleanly as well.
        Err(engine) => drop(engine),
    }
    // The data is safe by now; a closed stdout must not turn that into a failure.
    use std::io::Write;
    let _ = writeln!(
        std::io::stdout(),
        "ringfeed: flushed, synced and closed cleanly"
    );
    Ok(())
}

/// Installs the SIGHUP handler now; the returned future reloads the token
/// file into `auth` at each SIGHUP (a file that does not load is logged and
/// the tokens in use are kept).
fn reload_tokens_on_sighup(
    path: PathBuf,
    auth: Arc<ringfeed_server::auth::Auth>,
) -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    Ok(async move {
        while hangup.recv().await.is_some() {
            match ringfeed_server::auth::Tokens::load(&path) {
                Ok(tokens) => {
                    tracing::info!(tokens = tokens.len(), file = %path.display(), "token file reloaded");
                    auth.replace(tokens);
                }
                Err(e) => tracing::error!(
                    error = format!("{e:#}"),
                    "the token file did not load; the tokens in use are kept"
                ),
            }
        }
    })
}

/// Installs the SIGINT and SIGTERM handlers now; the returned future ends
/// when either signal arrives.
fn stop_signals() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    })
}

/// The idempotent producers a shard's open found, and what rebuilding their
/// table from the log cost (empty when there are none).
fn producers_line(report: &ringfeed_engine::RecoveryReport) -> String {
    if report.producers == 0 {
        return String::new();
    }
    format!(
        ", {} idempotent producer(s) (table rebuilt from the log in {:.1} ms)",
        report.producers,
        report.producer_rebuild.as_secs_f64() * 1e3
    )
}

/// The `shard-NNN` directories of a data dir, by shard.
fn shard_dirs(data_dir: &Path) -> Result<Vec<(u32, PathBuf)>> {
    if !data_dir.is_dir() {
        bail!("{} is not a directory", data_dir.display());
    }
    let mut shard_dirs = Vec::new();
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(n) = name
            .strip_prefix("shard-")
            .and_then(|n| n.parse::<u32>().ok())
        {
            shard_dirs.push((n, entry.path()));
        }
    }
    shard_dirs.sort();
    if shard_dirs.is_empty() {
        bail!("{} holds no shard-NNN directories", data_dir.display());
    }
    Ok(shard_dirs)
}

fn repair(data_dir: &Path, dry_run: bool) -> Result<()> {
    use ringfeed_engine::repair::repair_shard;
    let shard_dirs = shard_dirs(data_dir)?;
    // Held for the whole repair: no server opens the data dir meanwhile.
    let _lock = ringfeed_engine::lock::DataDirLock::take(data_dir)
        .map_err(|e| anyhow::anyhow!("{e}; stop the server before repairing"))?;
    let reports = LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            let mut reports = Vec::new();
            for (shard, dir) in shard_dirs {
                let storage = if dry_run {
                    DmaStorage::open_read_only(&dir)
                } else {
                    DmaStorage::open(&dir)
                }
                .map_err(|e| format!("{}: {e}", dir.display()))?;
                let report = repair_shard(storage, shard, dry_run)
                    .await
                    .map_err(|e| e.to_string())?;
                reports.push((shard, report));
            }
            Ok::<_, String>(reports)
        })
        .map_err(|e| anyhow::anyhow!("starting the executor: {e}"))?
        .join()
        .map_err(|e| anyhow::anyhow!("executor: {e:?}"))?
        .map_err(|e| anyhow::anyhow!(e))?;
    let stamp = |ts: Option<i64>| {
        ts.and_then(|ns| u64::try_from(ns).ok())
            .map(|ns| {
                humantime::format_rfc3339_nanos(
                    std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns),
                )
                .to_string()
            })
            .unwrap_or_else(|| "-".to_owned())
    };
    let (mut mended, mut lost, mut moved) = (0, 0, 0);
    for (shard, report) in reports {
        let Some(r) = report else {
            println!("shard {shard}: no damage");
            continue;
        };
        mended += 1;
        // The open's own words, without its advice to run this command.
        let damage = r
            .damage
            .split(" `ringfeed repair")
            .next()
            .unwrap_or_default();
        println!("shard {shard}: {damage}");
        for hole in &r.holes {
            let n = hole.offsets.end - hole.offsets.start;
            lost += n;
            let bytes = if hole.bytes.start == u64::MAX {
                String::new()
            } else {
                format!(
                    " (bytes {}..{} of {})",
                    hole.bytes.start, hole.bytes.end, hole.segment
                )
            };
            println!(
                "  {} offsets {}..{}: {n} event(s) stamped after {} and before {}{bytes}",
                if dry_run { "would lose" } else { "lost" },
                hole.offsets.start,
                hole.offsets.end,
                stamp(hole.after_ts),
                stamp(hole.before_ts),
            );
        }
        moved += r.survivors;
        let kept = r.renumbered_from..r.renumbered_from + r.survivors;
        match r.generation {
            Some(generation) => println!(
                "  kept {} event(s) after the damage, now at offsets {}..{} (generation {generation}); \
                 a cursor past offset {} is refused as truncated: resume it with \
                 --resume-truncated, or from a time",
                r.survivors, kept.start, kept.end, r.renumbered_from
            ),
            None => println!(
                "  would keep {} event(s) after the damage, at offsets {}..{} under a new generation",
                r.survivors, kept.start, kept.end
            ),
        }
    }
    if dry_run {
        println!(
            "dry run: {mended} shard(s) to repair, {lost} event(s) to lose, {moved} to renumber; \
             nothing in {} was changed",
            data_dir.display()
        );
    } else {
        println!("repaired {mended} shard(s): {lost} event(s) lost, {moved} renumbered");
    }
    Ok(())
}

fn inspect(data_dir: &Path) -> Result<()> {
    let shard_dirs = shard_dirs(data_dir)?;
    // Read-only either way; a running server may append and cut while this
    // reads, so say so (a torn tail seen now may be its unfinished write).
    if let Some(pid) = ringfeed_engine::lock::DataDirLock::holder(data_dir) {
        let pid = pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        println!(
            "a running server{pid} holds {}: what follows is a moment of a log it may be \
             writing",
            data_dir.display()
        );
    }
    let data_dir_shown = data_dir.display().to_string();
    LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            for (shard, dir) in shard_dirs {
                let storage = DmaStorage::open_read_only(&dir)
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
                let (log, report) = Log::open_read_only(storage, LogConfig::new(shard))
                    .await
                    .map_err(|e| format!("shard {shard}: {e}"))?;
                println!(
                    "shard {shard}: next offset {}, retained {:?}, generations {}",
                    report.next_offset,
                    log.retained(),
                    log.generations()
                );
                for name in &report.removed {
                    println!("  {name}: a leftover a server's open would remove");
                }
                if report.producers > 0 {
                    println!("  {}", producers_line(&report).trim_start_matches(", "));
                }
                if let Some((name, torn)) = &report.truncated {
                    println!(
                        "  {name}: torn tail at byte {} ({}); a server's open would cut it there",
                        torn.position, torn.reason
                    );
                }
                for name in log.segment_names() {
                    let first: u64 =
                        ringfeed_engine::segment::parse_segment_name(&name).unwrap_or(0);
                    let chunks: Vec<_> = log.chunks().filter(|c| c.segment == first).collect();
                    let records: u64 = chunks.iter().map(|c| u64::from(c.entry.record_count)).sum();
                    println!("  {name}: {} chunk(s), {records} record(s)", chunks.len());
                }
            }
            println!("(read-only: nothing in {data_dir_shown} was changed)");
            Ok::<(), String>(())
        })
        .map_err(|e| anyhow::anyhow!("starting the executor: {e}"))?
        .join()
        .map_err(|e| anyhow::anyhow!("executor: {e:?}"))?
        .map_err(|e| anyhow::anyhow!(e))
}
