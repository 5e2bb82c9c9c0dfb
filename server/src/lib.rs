//! The ringfeed server: the gRPC service over the engine, its configuration,
//! its cluster, and its HTTP endpoints (metrics and the status page).
//! [`bootstrap::serve`] wires them as `ringfeed serve` runs them (the
//! binary is the `ringfeed-cli` crate, server/cli).

#![deny(unsafe_code)]

pub mod append_budget;
pub mod auth;
pub mod board;
pub mod bootstrap;
mod cluster;
/// The client library (its own crate, `ringfeed-client`, which does not build the engine).
pub use ringfeed_client as client;
pub mod config;
pub mod connections;
pub mod http;
pub mod membership;
pub mod metrics;
pub(crate) mod peer_feed;
pub mod reflection;
pub mod registry;
pub mod sender;
pub mod service;
pub(crate) mod shared;
#[cfg(feature = "sim")]
pub mod sim;
pub mod status;
pub mod tls;

/// The gRPC transport as `serve` runs it (tests serve through the same):
/// HTTP/2 keepalives and each stream's send buffer from `limits`, stream
/// limits and windows.
pub fn transport(limits: &sender::SubscriberLimits) -> ringfeed_proto::tonic::transport::Server {
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
/// ([`connections::incoming`]), with the default limits and metrics of
/// their own: for tests and benchmarks that serve through the same path.
pub fn incoming(
    listener: tokio::net::TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<connections::Guarded>> {
    let metrics = std::sync::Arc::new(metrics::ServerMetrics::default());
    connections::incoming(
        listener,
        connections::Gate::new(connections::Limits::default(), metrics, false),
    )
}

/// Edits of valid encodings shared by the fuzzing tests.
#[cfg(test)]
use ringfeed_testkit::mutation;
