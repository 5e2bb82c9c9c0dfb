//! What producers append, how it is checked, and what they get back.
//!
//! A batch is validated completely before any of it is appended: one bad
//! event refuses the whole batch with an error naming the event and field.

use std::time::Duration;

use thiserror::Error;

use crate::record::{Kind, Record, Signatures};
pub use ringfeed_core::path::path_problem;

/// One namespace mutation, as a producer hands it in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewEvent {
    /// Absolute, normalized directory holding the entry (`/` for the root).
    pub directory: String,
    /// The entry's name before the mutation; empty for a create.
    pub old_name: String,
    /// The entry's name after the mutation; empty for a delete.
    pub new_name: String,
    /// Where the entry moved to; empty unless it left `directory`.
    pub new_parent: String,
    /// Producers' signatures (sync tools skip their own events by them).
    pub signatures: Vec<i32>,
    /// The producer's encoded event, stored verbatim (shared with the
    /// request that carried it, not copied out of it).
    pub payload: bytes::Bytes,
}

impl NewEvent {
    /// Create, delete, update or rename, from which names are present.
    pub fn kind(&self) -> Option<Kind> {
        Kind::of(
            &self.directory,
            &self.old_name,
            &self.new_name,
            &self.new_parent,
        )
    }

    /// The record this event becomes once stamped.
    pub fn record(&self, offset: u64, ts: i64) -> Record<'_> {
        Record {
            ts,
            offset,
            kind: self.kind().unwrap_or(Kind::Update),
            signatures: Signatures::new(&self.signatures),
            directory: &self.directory,
            old_name: &self.old_name,
            new_name: &self.new_name,
            new_parent: &self.new_parent,
            payload: &self.payload,
            producer: None,
        }
    }

    /// Bytes the event takes as a record.
    pub fn record_len(&self) -> usize {
        self.record(0, 0).encoded_len()
    }
}

/// When an append is acknowledged, and so what the acknowledgement promises.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Acknowledged once the events are visible to readers. Survives nothing
    /// by itself: a process crash or power loss before the next flush (within
    /// the flush interval, or when a window fills) loses it.
    #[default]
    Memory,
    /// Acknowledged after `fdatasync` of every chunk holding the events.
    /// Survives a process crash and power loss (given a disk that honours
    /// flushes).
    Durable,
}

/// Where an appended event lives forever.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Position {
    pub shard: u32,
    pub offset: u64,
    pub ts: i64,
}

/// Limits on what one append may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_path_bytes: usize,
    /// Largest event as a record (header, paths and payload).
    pub max_event_bytes: usize,
    pub max_batch_events: usize,
    pub max_batch_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_path_bytes: 4096,
            max_event_bytes: 256 << 10,
            max_batch_events: 100_000,
            max_batch_bytes: 64 << 20,
        }
    }
}

/// Why an append was refused or failed. Nothing of a refused batch is appended.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AppendError {
    #[error("event could not be framed: {0}")]
    Frame(#[from] crate::record::RecordError),
    #[error("event {index}: {field} {reason}")]
    Invalid {
        index: usize,
        field: &'static str,
        reason: String,
    },
    #[error("batch of {events} events and {bytes} bytes exceeds the limits ({max_events} events, {max_bytes} bytes)")]
    BatchTooLarge {
        events: usize,
        bytes: usize,
        max_events: usize,
        max_bytes: usize,
    },
    #[error(
        "shard {shard} has {unflushed} bytes waiting to be flushed (limit {limit}); \
         the append waited {waited:?} for the disk and gave up"
    )]
    ResourceExhausted {
        shard: u32,
        unflushed: usize,
        limit: usize,
        waited: Duration,
    },
    #[error(
        "shard {shard} has {queued} bytes of appends queued for it (limit {limit}, \
         max_queued_bytes); nothing of this batch was appended, retry later"
    )]
    QueueFull {
        shard: u32,
        queued: usize,
        limit: usize,
    },
    #[error(
        "shard {shard} refuses appends: the disk is full ({cause}); nothing of this batch \
         was appended. Free space on that disk (or keep less: retention_max_bytes in the config); \
         appends are taken again within a second once the next segment fits"
    )]
    DiskFull { shard: u32, cause: String },
    #[error("shard {shard} stopped after an I/O failure ({cause}); it acknowledges nothing until the engine is reopened")]
    Latched { shard: u32, cause: String },
    #[error("the engine is shut down")]
    ShutDown,
    #[error(
        "producer {producer_id}: the batch starts at sequence {first}, but the next \
         sequence is {expected} (sequences {expected}..{first} were never sent); \
         nothing of this batch was appended. Resend from sequence {expected}"
    )]
    SequenceGap {
        producer_id: u64,
        expected: u64,
        first: u64,
    },
    #[error(
        "producer {producer_id}: sequence {sequence} is at or below {last}, the highest \
         shard {shard} stored, and is not one ringfeed remembers storing (older than \
         the events it keeps per producer, or skipped: a later sequence of this \
         producer reached the shard first). Nothing of this batch was appended to \
         shard {shard}; continue with new sequences above {last}"
    )]
    StaleSequence {
        producer_id: u64,
        sequence: u64,
        shard: u32,
        last: u64,
    },
}

/// An idempotent producer's batch: who sends it and the sequence number of
/// its first event (each next event takes the next number). A retry with
/// the same id and numbers stores nothing again and gets the original
/// positions back (`crate::producer` says what is remembered).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Producer {
    /// Any number but 0, stable across the producer's restarts.
    pub id: u64,
    pub first_sequence: u64,
}

/// What became of one appended event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stored {
    pub position: Position,
    /// The event had been stored before (an idempotent producer's retry):
    /// `position` is where, and nothing was appended now.
    pub duplicate: bool,
}

fn invalid(index: usize, field: &'static str, reason: impl Into<String>) -> AppendError {
    AppendError::Invalid {
        index,
        field,
        reason: reason.into(),
    }
}

/// Checks a directory-like path: absolute, normalized, no NUL.
fn check_path(
    index: usize,
    field: &'static str,
    path: &str,
    limits: &Limits,
) -> Result<(), AppendError> {
    check_len(index, field, path, limits)?;
    match path_problem(path) {
        Some(problem) => Err(invalid(index, field, problem)),
        None => Ok(()),
    }
}

/// Refuses a path or name longer than the limit.
fn check_len(
    index: usize,
    field: &'static str,
    value: &str,
    limits: &Limits,
) -> Result<(), AppendError> {
    if value.len() > limits.max_path_bytes {
        return Err(invalid(
            index,
            field,
            format!(
                "is {} bytes, longer than {}",
                value.len(),
                limits.max_path_bytes
            ),
        ));
    }
    Ok(())
}

fn check_name(
    index: usize,
    field: &'static str,
    name: &str,
    limits: &Limits,
) -> Result<(), AppendError> {
    check_len(index, field, name, limits)?;
    if name.contains('\0') || name.contains('/') || name == "." || name == ".." {
        return Err(invalid(
            index,
            field,
            format!("{name:?} is not an entry name (no NUL or '/', not '.' or '..')"),
        ));
    }
    Ok(())
}

/// Validates a whole batch; returns its size in record bytes.
pub fn validate_batch(events: &[NewEvent], limits: &Limits) -> Result<usize, AppendError> {
    let mut bytes = 0;
    for (index, event) in events.iter().enumerate() {
        check_path(index, "directory", &event.directory, limits)?;
        check_name(index, "old_name", &event.old_name, limits)?;
        check_name(index, "new_name", &event.new_name, limits)?;
        if !event.new_parent.is_empty() {
            check_path(index, "new_parent", &event.new_parent, limits)?;
        }
        if event.kind().is_none() {
            return Err(invalid(
                index,
                "new_name",
                "and old_name are both empty: an event needs an old entry, a new entry, or both",
            ));
        }
        if event.signatures.len() > crate::record::MAX_SIGNATURES {
            return Err(invalid(
                index,
                "signatures",
                format!(
                    "has {} entries, more than {}",
                    event.signatures.len(),
                    crate::record::MAX_SIGNATURES
                ),
            ));
        }
        let len = event.record_len();
        if len > limits.max_event_bytes {
            return Err(invalid(
                index,
                "payload",
                format!(
                    "makes the event {len} bytes, more than {}",
                    limits.max_event_bytes
                ),
            ));
        }
        bytes += len;
    }
    if events.len() > limits.max_batch_events || bytes > limits.max_batch_bytes {
        return Err(AppendError::BatchTooLarge {
            events: events.len(),
            bytes,
            max_events: limits.max_batch_events,
            max_bytes: limits.max_batch_bytes,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(dir: &str, name: &str) -> NewEvent {
        NewEvent {
            directory: dir.into(),
            new_name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn kinds() {
        assert_eq!(create("/a", "x").kind(), Some(Kind::Create));
        let mut e = create("/a", "x");
        e.old_name = "x".into();
        assert_eq!(e.kind(), Some(Kind::Update));
        e.new_parent = "/b".into();
        assert_eq!(e.kind(), Some(Kind::Rename));
        e.new_name = String::new();
        assert_eq!(e.kind(), None, "a delete cannot move");
        assert_eq!(
            NewEvent {
                directory: "/".into(),
                ..Default::default()
            }
            .kind(),
            None
        );
    }

    #[test]
    fn bad_input_is_named() {
        let limits = Limits::default();
        let ok = create("/a/b", "c");
        for (event, field) in [
            (create("a/b", "c"), "directory"),
            (create("/a/b/", "c"), "directory"),
            (create("/a//b", "c"), "directory"),
            (create("/a/../b", "c"), "directory"),
            (create("/a\0b", "c"), "directory"),
            (create("/a", "c/d"), "new_name"),
            (create("/a", "c\0"), "new_name"),
            (
                NewEvent {
                    new_parent: "rel".into(),
                    old_name: "x".into(),
                    ..create("/a", "y")
                },
                "new_parent",
            ),
            (
                NewEvent {
                    payload: vec![0; 2 << 20].into(),
                    ..create("/a", "x")
                },
                "payload",
            ),
        ] {
            let batch = vec![ok.clone(), event];
            match validate_batch(&batch, &limits) {
                Err(AppendError::Invalid {
                    index: 1, field: f, ..
                }) => assert_eq!(f, field),
                other => panic!("expected {field} refused, got {other:?}"),
            }
        }
        assert!(validate_batch(&[create("/", "root-child")], &limits).is_ok());
    }
}
