//! Why following stopped.

use ringfeed_proto::tonic::Status;

/// Why following stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The server refused the subscription or ended it for a reason a
    /// reconnect cannot fix: OUT_OF_RANGE (below retention), INVALID_ARGUMENT,
    /// ALREADY_EXISTS or CANCELLED (another stream of this client replaced
    /// this one), DATA_LOSS, ...
    #[error("the server ended the subscription")]
    Refused(#[source] Status),
    /// A chunk failed its checks: the bytes received are not what was stored.
    #[error("corrupt chunk from the server: {0}")]
    Corrupt(String),
    /// The server address is not a valid URI.
    #[error("server address {0:?}: {1}")]
    Address(String, String),
}
