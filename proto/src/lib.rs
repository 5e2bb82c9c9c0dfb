//! The ringfeed gRPC schema (`ringfeed.proto`, package `ringfeed.v1`) as Rust.
//!
//! [`v1`] holds the generated prost messages (every `bytes` field is a
//! [`bytes::Bytes`]), their proto3 JSON serde impls (pbjson: lowerCamelCase
//! names, enums as their proto names, 64-bit integers as strings, bytes as
//! base64; unknown fields are refused), the tonic client and the tonic server.
//! The server's `Subscribe` stream and `Append`/`AppendStream` requests use the
//! wire-identical types of [`raw`], so stored events are sent and received as
//! opaque bytes, never decoded and re-encoded; clients use the generated types
//! throughout.

#![deny(unsafe_code)]

pub use bytes;
pub use prost;
pub use tonic;

pub mod json;
pub mod raw;
mod schema;
pub mod strict;
pub mod wire;

/// Generated code for package `ringfeed.v1`.
pub mod v1 {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]

    include!(concat!(env!("OUT_DIR"), "/ringfeed.v1.rs"));
    include!(concat!(env!("OUT_DIR"), "/ringfeed.v1.serde.rs"));
}

/// Generated code for SeaweedFS's package `filer_pb` (`seaweedfs/filer.proto`,
/// the field numbers of `weed` 4.48).
pub mod filer_pb {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]

    include!(concat!(env!("OUT_DIR"), "/filer_pb.rs"));
}

pub use raw::{
    RawAppendRequest, RawEventBatch, RawEventMessage, RawItem, RawResponseFields,
    RawSubscribeResponse,
};
pub use v1::ring_feed_client::RingFeedClient;
pub use v1::ring_feed_server::{RingFeed, RingFeedServer};

/// The encoded `FileDescriptorSet` of `ringfeed.proto` (for gRPC reflection).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/ringfeed_descriptor.bin"));

/// The encoded `FileDescriptorSet` of SeaweedFS's `filer.proto`.
pub const FILER_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/filer_descriptor.bin"));
