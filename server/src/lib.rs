//! The ringfeed server: the gRPC service over the engine, its configuration,
//! its metrics endpoint, and the command-line client.

#![deny(unsafe_code)]

pub mod append_budget;
pub mod cli_client;
/// The client library (its own crate, `ringfeed-client`, which does not build the engine).
pub use ringfeed_client as client;
pub mod config;
pub mod metrics;
pub mod registry;
pub mod sender;
pub mod service;
pub mod sim;
pub mod status;

/// Accepted connections of `listener` with Nagle's algorithm off: small
/// responses (acks, live events) would otherwise wait for the peer's delayed
/// ACK, about 40 ms on Linux (measured: batch-64 append acks at p50 44 ms).
pub fn incoming(
    listener: tokio::net::TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|conn| {
        let conn = conn?;
        conn.set_nodelay(true)?;
        Ok(conn)
    })
}
