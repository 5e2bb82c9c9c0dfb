//! The client half of the `ringfeed` command line: `append`, `tail` and
//! `status`, each a clap `Args` struct and an async function that talks to a
//! server through the generated `RingFeedClient`.
//!
//! Output is made for pipes: `append` and `tail` print one JSON object per
//! line and flush every line; diagnostics go to stderr. The printed forms are
//! a contract (scripts parse them): `{"shard":..,"offset":..,"ts":..}` per
//! acknowledged event, `{"ts":..,"shard":..,"offset":..,"cursor":"..","event":{..}}`
//! per delivered event, numbers as JSON numbers and the event in the proto3
//! JSON mapping. A tail line's cursor never skips an event when resumed from
//! (see [`TailArgs`] for the one case where it may repeat some).

use std::fmt::Write as _;
use std::io::{self, BufRead, Write};
use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use base64::alphabet;
use base64::engine::{DecodePaddingMode, Engine as _, GeneralPurpose, GeneralPurposeConfig};
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::tonic::{Code, Status};
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::v1::{
    AppendRequest, Durability, Entry, Event, ListSubscribersRequest, Ordering, Position,
    ShardStatus, StatusRequest, StatusResponse, SubscribeRequest, SubscriberInfo,
};
use ringfeed_proto::RingFeedClient;

use crate::client::{Backoff, FollowedEvent, Follower};

mod append;
mod output;
mod status;
mod tail;
#[cfg(test)]
mod tests;
mod time;

pub use append::{append, AppendArgs, Op};
pub use status::{status, subscribers, StatusArgs, SubscribersArgs};
pub use tail::{tail, TailArgs};
// Every command's helpers, for the other commands and the tests.
#[allow(unused_imports)]
use {append::*, output::*, status::*, tail::*, time::*};

const DEFAULT_SERVER: &str = "127.0.0.1:7070";

/// Largest response the client decodes (tonic's default is 4 MiB). A batch of
/// large events can exceed that; the server's own limits are the real bound.
const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// Batches read from stdin but not yet handed to gRPC. With the batches in
/// flight on the stream this bounds memory while keeping the pipe full.
const APPEND_QUEUE: usize = 4;

/// Cursor text: URL-safe base64. Printed without padding; padding is
/// accepted on input so a cursor copied from elsewhere still works.
const CURSOR_B64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

async fn connect(server: &str) -> Result<RingFeedClient<Channel>> {
    let uri = if server.contains("://") {
        server.to_owned()
    } else {
        format!("http://{server}")
    };
    let client = RingFeedClient::connect(uri.clone())
        .await
        .with_context(|| format!("connecting to {uri}"))?;
    Ok(client.max_decoding_message_size(MAX_RESPONSE_BYTES))
}

use ringfeed_engine::clock::now_ns;

/// Exit code and one-line message for an error from the functions above:
/// a gRPC status -> (its numeric code, "error: <CODE_NAME>: <message>");
/// anything else -> (1, "error: ...").
pub fn exit_code(err: &anyhow::Error) -> (i32, String) {
    let one_line = |s: &str| s.replace(['\n', '\r'], " ");
    if let Some(status) = err.chain().find_map(|e| e.downcast_ref::<Status>()) {
        let code = status.code();
        // Code::Ok as an error would exit 0; it cannot happen, but never lie.
        if code != Code::Ok {
            return (
                code as i32,
                format!("error: {}: {}", code_name(code), one_line(status.message())),
            );
        }
    }
    (1, format!("error: {}", one_line(&format!("{err:#}"))))
}

/// The canonical name of a gRPC status code, as in the gRPC spec.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
