//! Names on the wire besides the messages: metadata keys and status message
//! conventions that the server sets and clients read.

/// Response metadata (binary) of every Subscribe stream: the cursor where the
/// stream starts, so a client that is cut off before its first response still
/// resumes exactly (a start at "now" cannot be repeated later).
pub const START_CURSOR_METADATA: &str = "ringfeed-start-cursor-bin";

/// Response-status metadata of a FAILED_PRECONDITION for a cursor truncated
/// by a crash: `shard=S generation=G surviving_end=E next=N`.
pub const TRUNCATION_METADATA: &str = "ringfeed-truncated";

/// How the CANCELLED message of a superseded stream starts (a newer stream of
/// the same client_id and a higher epoch replaced it); a client must not
/// reconnect after it.
pub const SUPERSEDED: &str = "superseded";

/// Status metadata of a superseded stream's CANCELLED: the client_epoch
/// (decimal) of the stream that replaced it. The typed form of [`SUPERSEDED`],
/// which clients should read ([`superseded_by`]) instead of the message.
pub const SUPERSEDED_METADATA: &str = "ringfeed-superseded-by";

/// The CANCELLED status a stream ends with when the same client connected
/// again with client_epoch `epoch`.
pub fn superseded_status(epoch: u64) -> tonic::Status {
    let mut status = tonic::Status::cancelled(format!(
        "{SUPERSEDED}: the same client connected again with client_epoch {epoch}"
    ));
    if let Ok(value) = epoch.to_string().parse() {
        status.metadata_mut().insert(SUPERSEDED_METADATA, value);
    }
    status
}

/// The epoch that superseded the stream `status` ended, if that is how it
/// ended (read from [`SUPERSEDED_METADATA`]; a status from a server that
/// predates it is recognised by its message).
pub fn superseded_by(status: &tonic::Status) -> Option<u64> {
    if status.code() != tonic::Code::Cancelled {
        return None;
    }
    if let Some(epoch) = status
        .metadata()
        .get(SUPERSEDED_METADATA)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
    {
        return Some(epoch);
    }
    status.message().starts_with(SUPERSEDED).then_some(0)
}

/// Subscribers a status overview lists when not told how many (the status
/// page's `/api/status` and `ringfeed status --json`): the most lagging first.
pub const OVERVIEW_SUBSCRIBERS: u32 = 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_superseded_status_says_by_which_epoch() {
        assert_eq!(superseded_by(&superseded_status(42)), Some(42));
        assert_eq!(
            superseded_by(&tonic::Status::cancelled("connection reset")),
            None
        );
        assert_eq!(
            superseded_by(&tonic::Status::unavailable("superseded")),
            None
        );
        // An older server: the message alone.
        assert_eq!(
            superseded_by(&tonic::Status::cancelled(format!(
                "{SUPERSEDED} by epoch 9"
            ))),
            Some(0)
        );
    }
}
