//! Reaching a server, and saying what went wrong in one line and an exit code.

use anyhow::{Context, Result};
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::tonic::{Code, Status};
use ringfeed_proto::RingFeedClient;

pub(super) const DEFAULT_SERVER: &str = "127.0.0.1:7070";

/// Largest response the client decodes (tonic's default is 4 MiB). A batch of
/// large events can exceed that; the server's own limits are the real bound.
const MAX_RESPONSE_BYTES: usize = 256 << 20;

pub(super) async fn connect(server: &str) -> Result<RingFeedClient<Channel>> {
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

/// Exit code and one-line message for an error from a client command:
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
