//! What a cluster stream's client is told when following a peer fails.

use ringfeed_proto::tonic::Status;

use crate::client::FollowError;

/// What a cluster stream's client is told when following a peer with the
/// stream's own follower fails. A refusal of what the client asked for (its
/// cursor's part for that node was made by another data dir, is below the
/// node's retention or was truncated by a crash; a filter the node refuses;
/// an event of the node lost there, or one this node does not forward)
/// keeps its code, so the client does not retry what cannot succeed (as
/// UNAVAILABLE, it was retried forever, and the peer's reason was lost);
/// anything else is UNAVAILABLE, which a retry may cure.
pub(super) fn peer_failure(node: u32, address: &str, e: FollowError) -> Status {
    use ringfeed_proto::tonic::Code;
    match e {
        FollowError::Refused(status)
            if matches!(
                status.code(),
                Code::InvalidArgument
                    | Code::OutOfRange
                    | Code::FailedPrecondition
                    | Code::DataLoss
            ) =>
        {
            Status::new(
                status.code(),
                format!("node {node} ({address}): {}", status.message()),
            )
        }
        FollowError::Refused(status) => Status::unavailable(format!(
            "following node {node} ({address}): it ended the stream with {:?}: {}",
            status.code(),
            status.message()
        )),
        e => Status::unavailable(format!("following node {node} ({address}): {e}")),
    }
}
