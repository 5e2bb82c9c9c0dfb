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
