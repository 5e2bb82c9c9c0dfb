//! The ringfeed server: the gRPC service over the engine, its configuration,
//! and the command-line client.

#![deny(unsafe_code)]

pub mod cli_client;
pub mod config;
pub mod service;
