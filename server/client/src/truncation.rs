//! What a FAILED_PRECONDITION "truncated by a crash" status says: where the
//! cursor's feed survived.

use ringfeed_proto::tonic::{Code, Status};

/// What a FAILED_PRECONDITION "truncated by a crash" status says, read from
/// its metadata (see `TRUNCATION_METADATA`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncation {
    pub shard: u32,
    /// The cursor's generation for the shard.
    pub generation: u32,
    /// Where that generation's surviving events end (exclusive): the offset
    /// a resumed subscriber continues at.
    pub surviving_end: u64,
    /// The cursor's offset: `next - surviving_end` events it covered are gone.
    pub next: u64,
}

pub use ringfeed_proto::wire::TRUNCATION_METADATA;

impl Truncation {
    /// The truncation a status reports, if it reports one.
    pub fn of(status: &Status) -> Option<Truncation> {
        if status.code() != Code::FailedPrecondition {
            return None;
        }
        let text = status.metadata().get(TRUNCATION_METADATA)?.to_str().ok()?;
        let field = |name: &str| {
            text.split(' ')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse::<u64>().ok())
        };
        Some(Truncation {
            shard: u32::try_from(field("shard")?).ok()?,
            generation: u32::try_from(field("generation")?).ok()?,
            surviving_end: field("surviving_end")?,
            next: field("next")?,
        })
    }

    /// The metadata value that [`Truncation::of`] reads.
    pub fn metadata_value(&self) -> String {
        format!(
            "shard={} generation={} surviving_end={} next={}",
            self.shard, self.generation, self.surviving_end, self.next
        )
    }
}
