//! What `ringfeed serve` wires: the listeners (bound before the data dir is
//! made, so a serve that cannot listen leaves nothing behind), the engine,
//! membership, tokens, the HTTP endpoints and the gRPC services, then serving
//! until SIGINT/SIGTERM and a clean close. The `ringfeed` binary's `serve`
//! command calls [`serve`] with the configuration its flags and file resolve
//! to.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use ringfeed_engine::Engine;
use ringfeed_proto::tonic::service::interceptor::InterceptedService;
use ringfeed_proto::RingFeedServer;

use crate::config::ServerConfig;
use crate::membership::{Members, Membership};
use crate::metrics::Exporter;
use crate::service::Service;

/// What `serve` listens on, bound before the data dir is opened.
struct Bound {
    listener: tokio::net::TcpListener,
    addr: std::net::SocketAddr,
    metrics: Option<tokio::net::TcpListener>,
    page: Option<tokio::net::TcpListener>,
    /// The page is served on the metrics' listener.
    page_shares_metrics: bool,
    /// SeaweedFS's filer API (`--filer-listen`).
    filer: Option<tokio::net::TcpListener>,
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
    let listener = crate::connections::bind(&config.listen)
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
    let filer = match &config.filer_listen {
        Some(at) => {
            // SeaweedFS clients send no ringfeed token: without client
            // certificates (SeaweedFS's own gRPC security: mutual TLS) the
            // filer API would be a way around tokens, and beyond loopback an
            // open door.
            let reachable = tokio::net::lookup_host(at)
                .await
                .with_context(|| format!("filer API: listening on {at}"))?
                .any(|a| !a.ip().is_loopback());
            let mutual_tls = config.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
            if (config.token_file.is_some() || reachable) && !mutual_tls && !config.insecure {
                anyhow::bail!(
                    "the SeaweedFS filer API (--filer-listen {at}) takes no tokens: {}. Give \
                     --tls-cert, --tls-key and --tls-client-ca (SeaweedFS clients then connect \
                     with the [grpc] ca and [grpc.client] cert and key of their security.toml), \
                     listen on a loopback address, or give --insecure to accept that",
                    if config.token_file.is_some() {
                        "it would let any local client read the feed around --token-file"
                    } else {
                        "anyone on the network could read the feed"
                    }
                );
            }
            Some(
                tokio::net::TcpListener::bind(at)
                    .await
                    .with_context(|| format!("filer API: listening on {at}"))?,
            )
        }
        None => None,
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
        filer,
        tls,
    })
}

/// Serves `config` until SIGINT or SIGTERM, then stops accepting, ends the
/// streams, flushes, syncs and closes the engine. Prints what tools parse
/// (`listening on ADDR`, and the metrics' and page's addresses) to stdout.
pub fn serve(config: ServerConfig) -> Result<()> {
    // Before the data dir: a bad token file is refused at once.
    let tokens = config
        .token_file
        .as_deref()
        .map(crate::auth::Tokens::load)
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
        filer,
        tls,
    } = runtime.block_on(bind(&config, clustered))?;
    // A node whose disk was lost, started on an empty data dir with its
    // node id and store, continues its feed from the store.
    if let Some(bucket) = &config.object_store {
        let restored = runtime.block_on(crate::bucket::restore_if_empty(bucket, &config.engine))?;
        for line in restored {
            println!("{line}");
        }
    }
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
        let auth = Arc::new(crate::auth::Auth::new(tokens));
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
        let completed = Arc::new(tokio::sync::Notify::new());
        let filers: Vec<Arc<crate::seaweedfs::FilerProgress>> = config
            .follow_filers
            .iter()
            .map(|filer| crate::seaweedfs::FilerProgress::new(filer.clone(), completed.clone()))
            .collect();
        for progress in &filers {
            tokio::spawn(crate::seaweedfs::follow(
                engine.clone(),
                progress.clone(),
                crate::seaweedfs::FollowFrom {
                    since_ns: config.follow_since_ns,
                    skip_gap: config.follow_skip_gap,
                },
                stop_rx.clone(),
            ));
        }
        let mut filer_addr = None;
        if let Some(listener) = filer {
            filer_addr = Some(listener.local_addr()?);
            let api = crate::seaweedfs::FilerApi::new(
                engine.clone(),
                filers.clone(),
                engine.feed_id() as i32,
                crate::seaweedfs::Kv::open(&data_dir).map_err(|e| anyhow::anyhow!("filer API: {e}"))?,
                service.streams().clone(),
                service.subscribers().clone(),
                stop_rx.clone(),
            );
            let service = crate::seaweedfs::OnlyTheFeed(
                ringfeed_proto::filer_pb::seaweed_filer_server::SeaweedFilerServer::new(
                    crate::seaweedfs::FilerService(api),
                ),
            );
            let mut stopping = stop_rx.clone();
            // The same TLS as the ringfeed listener: with a client CA, only
            // clients with a certificate it signed get in.
            let mut filer_transport = transport(&config.subscribers);
            if let Some(tls) = &tls {
                filer_transport = filer_transport
                    .tls_config(tls.clone())
                    .context("filer API: TLS")?;
            }
            let serving = filer_transport
                .add_service(service)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    async move {
                        let _ = stopping.wait_for(|s| *s).await;
                    },
                );
            tokio::spawn(async move {
                if let Err(e) = serving.await {
                    tracing::error!("the SeaweedFS filer API stopped: {e}");
                }
            });
        }
        let service_metrics = service.metrics().clone();
        let board = service.board().clone();
        if let Some(bucket) = &config.object_store {
            let state = Arc::new(crate::bucket::UploadState::new(bucket.url()));
            board.set_object_store(state.clone());
            tracing::info!(
                bucket = bucket.url(),
                "uploading sealed segments to the object store"
            );
            // Readers below a shard's local log read the bucket.
            let reader = crate::bucket::BucketReader::new(
                bucket.clone(),
                engine_node.unwrap_or(0),
                engine.shard_count(),
                config.object_store_reads,
                service_metrics.clone(),
                state.clone(),
            );
            let feed_id = crate::bucket::feed_hex(engine.feed_id());
            let loading = reader.load_manifests(engine.shard_count(), &feed_id);
            let manifests = match tokio::time::timeout(Duration::from_secs(10), loading).await {
                Ok(manifests) => manifests,
                Err(_) => {
                    tracing::warn!(
                        bucket = bucket.url(),
                        "the object store's manifests did not come in 10 s: \
                         history below the local log is readable once the uploader reads them"
                    );
                    Vec::new()
                }
            };
            for shard in 0..engine.shard_count() {
                engine.shard(shard).set_cold(reader.clone());
            }
            let uploader = crate::bucket::Uploader {
                engine: engine.clone(),
                data_dir: data_dir.clone(),
                node: engine_node.unwrap_or(0),
                bucket: bucket.clone(),
                upload_after: config.object_store_upload_after,
                metrics: service_metrics.clone(),
                state,
                reader,
                retention: config.object_store_retention,
                manifests,
            };
            crate::bucket::spawn_uploader(uploader, stop_rx.clone());
        }
        board.set_filers(filers.clone());
        tokio::spawn(board.clone().sample_every_second(stop_rx.clone()));
        let access = crate::http::Access {
            auth: auth.clone(),
            tls: match (&config.tls, metrics.is_some() || page.is_some()) {
                (Some(tls), true) => Some(tls.rustls_config(b"http/1.1")?),
                _ => None,
            },
        };
        // Room for the largest batch the engine accepts, plus framing.
        let max_message = limits.max_batch_bytes + (1 << 20);
        let append_budget = crate::append_budget::AppendBudget::with_max_message(
            config.append_budget_bytes,
            config.engine.append_timeout,
            max_message,
        );
        let mut metrics_addr = None;
        let mut page_addr = None;
        if let Some(listener) = metrics {
            let at = listener.local_addr()?;
            let exporter = Exporter::new(engine.clone(), service.metrics(), board.clone())
                .with_append_budget(append_budget.clone())
                .with_filers(filers.clone());
            let routes = crate::http::Routes {
                metrics: Some(Arc::new(exporter)),
                page: page_shares_metrics.then(|| board.clone()),
            };
            tokio::spawn(crate::http::serve(listener, routes, access.clone()));
            metrics_addr = Some(at);
            page_addr = page_shares_metrics.then_some(at);
        }
        if let Some(listener) = page {
            page_addr = Some(listener.local_addr()?);
            let routes = crate::http::Routes {
                metrics: None,
                page: Some(board.clone()),
            };
            tokio::spawn(crate::http::serve(listener, routes, access));
        }
        // gRPC server reflection, behind the same tokens as every call.
        let known_token = crate::reflection::KnownToken::new(auth.clone());
        let reflection_v1 = InterceptedService::new(
            crate::reflection::builder().build_v1()?,
            known_token.clone(),
        );
        let reflection_v1alpha = InterceptedService::new(
            crate::reflection::builder().build_v1alpha()?,
            known_token,
        );
        let (health, health_service) = tonic_health::server::health_reporter();
        health.set_serving::<RingFeedServer<Service>>().await;
        let ringfeed = RingFeedServer::new(service)
            .max_decoding_message_size(max_message)
            .max_encoding_message_size(max_message);
        let ringfeed = crate::append_budget::Budgeted::new(ringfeed, append_budget);
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
        let gate = crate::connections::Gate::new(
            config.connections,
            service_metrics.clone(),
            tls.is_some(),
        );
        let mut transport = transport(&config.subscribers);
        if let Some(tls) = tls {
            transport = transport.tls_config(tls).context("TLS")?;
        }
        let server = transport
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(ringfeed)
            .serve_with_incoming_shutdown(
                crate::connections::incoming(listener, gate),
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
        if let Some(at) = filer_addr {
            // SeaweedFS names a filer HTTP_PORT.GRPC_PORT; ringfeed has no
            // HTTP port for it, so the one SeaweedFS would assume.
            let http = at.port().saturating_sub(10_000).max(1);
            println!(
                "seaweedfs filer API on {at} (weed: -filer={}:{http}.{})",
                at.ip(),
                at.port()
            );
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
    auth: Arc<crate::auth::Auth>,
) -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    Ok(async move {
        while hangup.recv().await.is_some() {
            match crate::auth::Tokens::load(&path) {
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
pub fn producers_line(report: &ringfeed_engine::RecoveryReport) -> String {
    if report.producers == 0 {
        return String::new();
    }
    format!(
        ", {} idempotent producer(s) (table rebuilt from the log in {:.1} ms)",
        report.producers,
        report.producer_rebuild.as_secs_f64() * 1e3
    )
}

/// The gRPC transport as `serve` runs it (tests serve through the same):
/// HTTP/2 keepalives and each stream's send buffer from `limits`, stream
/// limits and windows.
pub fn transport(
    limits: &crate::sender::SubscriberLimits,
) -> ringfeed_proto::tonic::transport::Server {
    use std::time::Duration;
    ringfeed_proto::tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(limits.keepalive_interval))
        .http2_keepalive_timeout(Some(limits.keepalive_timeout))
        .tcp_keepalive(Some(Duration::from_secs(60)))
        .max_concurrent_streams(Some(4096))
        // Append bodies waiting for the append budget keep what they
        // received in flow-control windows: small per stream, roomy per
        // connection, so one waiting stream cannot block its neighbours.
        .initial_stream_window_size(Some(1 << 20))
        .initial_connection_window_size(Some(32 << 20))
        // What a subscription stream holds encoded and not yet written:
        // hyper's default (~400 KB) was held by every stream of a slow
        // client, and a storm of 2,000 resuming subscribers held ~800 MiB
        // there. The response budget (whose permits last until the transport
        // pulls the next response) is the backpressure; more here only adds
        // memory. (A patched tonic: engine/vendor/PATCHES.md.)
        .http2_max_send_buf_size(Some(limits.send_buffer_bytes))
}

/// Accepted connections of `listener` as `serve` takes them
/// ([`crate::connections::incoming`]), with the default limits and metrics of
/// their own: for tests and benchmarks that serve through the same path.
pub fn incoming(
    listener: tokio::net::TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<crate::connections::Guarded>> {
    let metrics = std::sync::Arc::new(crate::metrics::ServerMetrics::default());
    crate::connections::incoming(
        listener,
        crate::connections::Gate::new(crate::connections::Limits::default(), metrics, false),
    )
}
