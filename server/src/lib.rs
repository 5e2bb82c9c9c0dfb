//! The ringfeed server: the gRPC service over the engine, its configuration,
//! its cluster, and its HTTP endpoints (metrics and the status page).
//! [`serve`] wires them as `ringfeed serve` runs them (the
//! binary is the `ringfeed-cli` crate, server/cli).

#![deny(unsafe_code)]

mod append_budget;
mod auth;
mod board;
mod bootstrap;
pub mod bucket;
mod cluster;
mod config;
mod connections;
mod http;
mod membership;
mod metrics;
mod peer_feed;
mod reflection;
mod registry;
mod seaweedfs;
mod sender;
mod service;
mod shared;
#[cfg(feature = "sim")]
pub mod sim;
mod status;
mod tls;

// The library's API, all of it: what the `ringfeed` binary's commands
// (server/cli), the system tests and the benchmarks use.
pub use append_budget::{AppendBudget, Budgeted};
pub use auth::new_token;
pub use bootstrap::{incoming, producers_line, serve, transport};
pub use config::{FileConfig, ServerConfig, DEFAULT_DATA_DIR};
pub use connections::Limits as ConnectionLimits;
pub use http::{serve as serve_http, Routes};
pub use metrics::Exporter;
pub use registry::filter_bytes;
/// The client library (its own crate, `ringfeed-client`, which does not build the engine).
pub use ringfeed_client as client;
pub use seaweedfs::{FilerAddress, FilerProgress, FilerReading};
pub use sender::SubscriberLimits;
pub use service::Service;

/// Edits of valid encodings shared by the fuzzing tests.
#[cfg(test)]
use ringfeed_testkit::mutation;
