//! ringfeed in front of SeaweedFS: following filers' metadata logs into the
//! engine (`serve --follow-filer`), each event stored once, as the filer
//! sent it.
//!
//! A followed filer is an idempotent producer whose events all go to one
//! shard ([`ringfeed_engine::Engine::append_to_shard`]): recovery keeps each
//! shard's valid prefix, so after any crash what ringfeed holds of a filer is
//! a prefix of what it received, and the follower resumes right after the
//! last stored event, at that event's filer timestamp. Events are appended
//! durably before the follower moves on, so its position only moves with
//! durable events.

mod address;
mod cache;
mod filer_api;
mod follow;
mod kv;
mod log_files;
mod merge;
mod metrics;
mod rounds;
mod slots;
mod view;

pub use address::FilerAddress;
pub use filer_api::{FilerApi, FilerService, OnlyTheFeed};
pub use follow::{follow, FilerProgress, FilerReading, FollowFrom};
pub use kv::Kv;
pub use metrics::FilerMetrics;
