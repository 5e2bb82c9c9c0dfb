//! Records: one event as stored, a framed, checksummed, little-endian byte string.
//!
//! The header carries everything a subscription filter reads (stamp, offset,
//! kind, signatures, the four path strings); the producer's encoded event
//! follows as an opaque payload that the engine never decodes. Encoding writes
//! into a caller's buffer without allocating; decoding borrows from the input,
//! never panics on arbitrary bytes and returns a typed error.
//!
//! Layout (`docs/format.md` has the full picture):
//!
//! ```text
//! u32 len | u32 crc32c | i64 ts | u64 offset | u8 kind | u8 signature_count |
//! u16 dir_len | u16 old_name_len | u16 new_name_len | u16 new_parent_len |
//! signatures (i32 each) | directory | old_name | new_name | new_parent | payload
//! ```
//!
//! `len` counts the whole record, itself included. `crc32c` covers every byte
//! after the crc field.
//!
//! A record appended by an idempotent producer has bit 7 of `kind` set and
//! carries `u64 producer_id | u64 sequence` between the fixed header and the
//! signatures ([`ProducerStamp`]); records without it are laid out as above,
//! so logs written before producer ids existed read unchanged.

use thiserror::Error;

/// Bytes of the fixed part of a record header.
pub const RECORD_HEADER_LEN: usize = 34;

/// Largest record the engine accepts, header and payload included.
pub const MAX_RECORD_LEN: usize = 16 << 20;

/// Longest path string (directory, entry name or new parent) a record holds.
pub const MAX_PATH_LEN: usize = u16::MAX as usize;

/// Most signatures one record carries.
pub const MAX_SIGNATURES: usize = u8::MAX as usize;

/// Bytes a [`ProducerStamp`] adds after the fixed header.
pub const PRODUCER_STAMP_LEN: usize = 16;

/// Bit of the `kind` byte saying a [`ProducerStamp`] follows the fixed header.
const KIND_PRODUCER: u8 = 0x80;

const CRC_START: usize = 8;

/// Which idempotent producer appended a record, and its sequence number
/// there: a retry carries the same pair, which is how the shard knows it
/// already holds the event (see `ringfeed_engine::ProducerTable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProducerStamp {
    pub producer_id: u64,
    pub sequence: u64,
}

/// What a namespace mutation did. Which entries it carries follows from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A new entry appeared: `new_name` only.
    Create = 1,
    /// An entry went away: `old_name` only.
    Delete = 2,
    /// An entry changed in place: both names, same path.
    Update = 3,
    /// An entry moved or was renamed: both names, different path.
    Rename = 4,
}

impl Kind {
    /// What an event did, from the names it carries: create (a new name
    /// only), delete (an old name only), update (both, the same, in place),
    /// rename (both, and a changed name or parent). `new_parent` empty means
    /// the entry stays in `directory`. `None`: no name at all, or a parent
    /// with only one name.
    pub fn of(directory: &str, old_name: &str, new_name: &str, new_parent: &str) -> Option<Kind> {
        let moved = !new_parent.is_empty() && new_parent != directory;
        match (old_name.is_empty(), new_name.is_empty()) {
            (true, false) if new_parent.is_empty() => Some(Kind::Create),
            (false, true) if new_parent.is_empty() => Some(Kind::Delete),
            (false, false) if !moved && old_name == new_name => Some(Kind::Update),
            (false, false) => Some(Kind::Rename),
            _ => None,
        }
    }

    /// "create", "delete", "update" or "rename".
    pub fn name(self) -> &'static str {
        match self {
            Kind::Create => "create",
            Kind::Delete => "delete",
            Kind::Update => "update",
            Kind::Rename => "rename",
        }
    }

    pub fn from_u8(value: u8) -> Option<Self> {
        match value {
            1 => Some(Kind::Create),
            2 => Some(Kind::Delete),
            3 => Some(Kind::Update),
            4 => Some(Kind::Rename),
            _ => None,
        }
    }
}

/// A record's fields, borrowed. Used both to encode and as the result of a decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub ts: i64,
    pub offset: u64,
    pub kind: Kind,
    pub signatures: Signatures<'a>,
    /// The directory holding the entry (or the old entry, for a rename).
    pub directory: &'a str,
    /// The entry's name before the mutation; empty for a create.
    pub old_name: &'a str,
    /// The entry's name after the mutation; empty for a delete.
    pub new_name: &'a str,
    /// The directory the entry moved to; empty unless it is a rename across directories.
    pub new_parent: &'a str,
    /// The producer's encoded event, stored verbatim.
    pub payload: &'a [u8],
    /// Set when an idempotent producer appended the record.
    pub producer: Option<ProducerStamp>,
}

/// Signatures as stored: little-endian `i32`s, read without copying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signatures<'a>(SigRepr<'a>);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SigRepr<'a> {
    Values(&'a [i32]),
    Raw(&'a [u8]),
}

impl<'a> Signatures<'a> {
    pub fn new(values: &'a [i32]) -> Self {
        Signatures(SigRepr::Values(values))
    }

    pub fn len(&self) -> usize {
        match self.0 {
            SigRepr::Values(v) => v.len(),
            SigRepr::Raw(b) => b.len() / 4,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = i32> + 'a {
        let (values, raw): (&'a [i32], &'a [u8]) = match self.0 {
            SigRepr::Values(v) => (v, &[]),
            SigRepr::Raw(b) => (&[], b),
        };
        values.iter().copied().chain(
            raw.chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        )
    }

    pub fn contains(&self, signature: i32) -> bool {
        self.iter().any(|s| s == signature)
    }
}

/// Why a record could not be encoded or decoded.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RecordError {
    #[error("record needs {needed} bytes but only {available} are available")]
    Truncated { needed: usize, available: usize },
    #[error("record length {len} is outside 34..={max}")]
    BadLength { len: usize, max: usize },
    #[error("record checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch { stored: u32, computed: u32 },
    #[error("unknown record kind {0}")]
    UnknownKind(u8),
    #[error("record field lengths add up to {fields} bytes, more than the record's {len}")]
    FieldsOverrun { fields: usize, len: usize },
    #[error("{field} is not valid UTF-8")]
    InvalidUtf8 { field: &'static str },
    #[error("{field} is {len} bytes, longer than {max}")]
    FieldTooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("a {kind:?} record must have {rule}")]
    KindMismatch { kind: Kind, rule: &'static str },
}

impl<'a> Record<'a> {
    /// Bytes this record occupies when encoded.
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER_LEN
            + if self.producer.is_some() {
                PRODUCER_STAMP_LEN
            } else {
                0
            }
            + 4 * self.signatures.len()
            + self.directory.len()
            + self.old_name.len()
            + self.new_name.len()
            + self.new_parent.len()
            + self.payload.len()
    }

    /// Checks the limits and the kind's shape, so that every record that
    /// encodes also decodes.
    pub fn validate(&self) -> Result<(), RecordError> {
        for (field, value) in [
            ("directory", self.directory),
            ("old_name", self.old_name),
            ("new_name", self.new_name),
            ("new_parent", self.new_parent),
        ] {
            if value.len() > MAX_PATH_LEN {
                return Err(RecordError::FieldTooLong {
                    field,
                    len: value.len(),
                    max: MAX_PATH_LEN,
                });
            }
        }
        if self.signatures.len() > MAX_SIGNATURES {
            return Err(RecordError::FieldTooLong {
                field: "signatures",
                len: self.signatures.len(),
                max: MAX_SIGNATURES,
            });
        }
        let len = self.encoded_len();
        if len > MAX_RECORD_LEN {
            return Err(RecordError::BadLength {
                len,
                max: MAX_RECORD_LEN,
            });
        }
        let has_old = !self.old_name.is_empty();
        let has_new = !self.new_name.is_empty();
        let moved = !self.new_parent.is_empty() && self.new_parent != self.directory;
        let rule = match self.kind {
            Kind::Create if has_new && !has_old && self.new_parent.is_empty() => return Ok(()),
            Kind::Create => "a new name only",
            Kind::Delete if has_old && !has_new && self.new_parent.is_empty() => return Ok(()),
            Kind::Delete => "an old name only",
            Kind::Update if has_old && self.old_name == self.new_name && !moved => return Ok(()),
            Kind::Update => "equal old and new names in the same directory",
            Kind::Rename if has_old && has_new && (moved || self.old_name != self.new_name) => {
                return Ok(())
            }
            Kind::Rename => "both names and a changed path",
        };
        Err(RecordError::KindMismatch {
            kind: self.kind,
            rule,
        })
    }

    // The encoders below index freely: they write into a buffer they checked
    // or sized themselves, never into bytes a reader handed them. The lints
    // are denied on the decoders (`decode` and the `peek_*` functions).

    /// Encodes into the front of `buf` and returns the bytes written.
    /// Allocates nothing; `buf` must hold at least [`Record::encoded_len`] bytes.
    pub fn encode_into(&self, buf: &mut [u8]) -> Result<usize, RecordError> {
        self.validate()?;
        let len = self.encoded_len();
        if buf.len() < len {
            return Err(RecordError::Truncated {
                needed: len,
                available: buf.len(),
            });
        }
        let out = &mut buf[..len];
        let head = len - self.payload.len();
        self.encode_head(len, &mut out[..head]);
        out[head..].copy_from_slice(self.payload);
        seal(out);
        Ok(len)
    }

    /// Appends the record to `out` as [`Record::encode_into`] would encode
    /// it, but without its checksum: for a record framed to be stamped
    /// (its offset and stamp set by [`restamp`], which computes the checksum
    /// then; computing it here too spent crc32c twice on every byte). Room
    /// for the payload is not zeroed first (a batch of large events framed
    /// into a zeroed buffer spent a tenth of its time in `memset`).
    pub fn frame_unstamped(&self, out: &mut Vec<u8>) -> Result<usize, RecordError> {
        self.validate()?;
        let len = self.encoded_len();
        let start = out.len();
        out.resize(start + len - self.payload.len(), 0);
        self.encode_head(len, &mut out[start..]);
        out.extend_from_slice(self.payload);
        Ok(len)
    }

    /// Everything of the encoded record (`len` bytes, its
    /// [`Record::encoded_len`]) but its payload and checksum, into `out`
    /// (exactly that long).
    fn encode_head(&self, len: usize, out: &mut [u8]) {
        out[0..4].copy_from_slice(&(len as u32).to_le_bytes());
        out[8..16].copy_from_slice(&self.ts.to_le_bytes());
        out[16..24].copy_from_slice(&self.offset.to_le_bytes());
        out[24] = self.kind as u8
            | if self.producer.is_some() {
                KIND_PRODUCER
            } else {
                0
            };
        out[25] = self.signatures.len() as u8;
        out[26..28].copy_from_slice(&(self.directory.len() as u16).to_le_bytes());
        out[28..30].copy_from_slice(&(self.old_name.len() as u16).to_le_bytes());
        out[30..32].copy_from_slice(&(self.new_name.len() as u16).to_le_bytes());
        out[32..34].copy_from_slice(&(self.new_parent.len() as u16).to_le_bytes());
        let mut at = RECORD_HEADER_LEN;
        if let Some(stamp) = self.producer {
            out[at..at + 8].copy_from_slice(&stamp.producer_id.to_le_bytes());
            out[at + 8..at + 16].copy_from_slice(&stamp.sequence.to_le_bytes());
            at += PRODUCER_STAMP_LEN;
        }
        for signature in self.signatures.iter() {
            out[at..at + 4].copy_from_slice(&signature.to_le_bytes());
            at += 4;
        }
        for part in [
            self.directory.as_bytes(),
            self.old_name.as_bytes(),
            self.new_name.as_bytes(),
            self.new_parent.as_bytes(),
        ] {
            out[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        debug_assert_eq!(at, out.len(), "the head is everything before the payload");
    }

    /// Decodes the record at the front of `buf`, verifying its checksum.
    /// Returns the record and the bytes it occupies.
    // Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
    #[deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unreachable
    )]
    pub fn decode(buf: &'a [u8]) -> Result<(Record<'a>, usize), RecordError> {
        let bytes = front(buf)?;
        let (head, covered) = bytes
            .split_at_checked(CRC_START)
            .ok_or_else(|| short(bytes))?;
        let stored = read_u32(head, 4).ok_or_else(|| short(bytes))?;
        let computed = crc32c::crc32c(covered);
        if stored != computed {
            return Err(RecordError::ChecksumMismatch { stored, computed });
        }
        Ok((parse_verified(bytes)?, bytes.len()))
    }
}

// `restamp` and `seal` are encoders (indexing allowed): their `buf` is a
// record the caller framed itself.

/// Sets the stamp and offset of an encoded record in place and recomputes its
/// checksum. `buf` is exactly one record produced by [`Record::encode_into`].
/// This lets producers frame records on their own threads and the shard only
/// stamp them.
pub fn restamp(buf: &mut [u8], offset: u64, ts: i64) {
    buf[8..16].copy_from_slice(&ts.to_le_bytes());
    buf[16..24].copy_from_slice(&offset.to_le_bytes());
    seal(buf);
}

/// Computes and stores the checksum of the encoded record `buf` (exactly its length).
fn seal(buf: &mut [u8]) {
    let crc = crc32c::crc32c(&buf[CRC_START..]);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Reads and bounds-checks the length prefix of the record at the front of `buf`.
// Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
pub fn peek_len(buf: &[u8]) -> Result<usize, RecordError> {
    front(buf).map(<[u8]>::len)
}

/// The record at the front of `buf`, exactly its bytes: [`peek_len`]'s checks.
// Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
fn front(buf: &[u8]) -> Result<&[u8], RecordError> {
    if buf.len() < RECORD_HEADER_LEN {
        return Err(short(buf));
    }
    let len = read_u32(buf, 0).ok_or_else(|| short(buf))? as usize;
    if !(RECORD_HEADER_LEN..=MAX_RECORD_LEN).contains(&len) {
        return Err(RecordError::BadLength {
            len,
            max: MAX_RECORD_LEN,
        });
    }
    buf.get(..len).ok_or(RecordError::Truncated {
        needed: len,
        available: buf.len(),
    })
}

/// The error for `buf` shorter than a record's fixed header. The decoders
/// check that length first; a read of the fixed header that still comes up
/// short gives this error too, never a panic.
fn short(buf: &[u8]) -> RecordError {
    RecordError::Truncated {
        needed: RECORD_HEADER_LEN,
        available: buf.len(),
    }
}

/// True if the record at the front of `buf` (at least its fixed header)
/// carries a [`ProducerStamp`].
// Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
pub fn has_producer_stamp(buf: &[u8]) -> bool {
    buf.get(24).is_some_and(|kind| kind & KIND_PRODUCER != 0)
}

/// The offset and stamp of the record at the front of `buf`, without verifying it.
/// Used to walk a chunk body whose checksum has already been verified.
// Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
pub fn peek_position(buf: &[u8]) -> Result<(usize, u64, i64), RecordError> {
    let bytes = front(buf)?;
    let offset = read_u64(bytes, 16).ok_or_else(|| short(bytes))?;
    let ts = read_u64(bytes, 8).ok_or_else(|| short(bytes))? as i64;
    Ok((bytes.len(), offset, ts))
}

/// A record's header fields as raw bytes, read without verifying the checksum
/// or the UTF-8 of the paths: for walking records that were verified already
/// (a chunk body whose checksum matched) or that the shard framed itself (a
/// window). Subscription filters run on this, never decoding the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader<'a> {
    /// Bytes the whole record occupies.
    pub len: usize,
    pub offset: u64,
    pub ts: i64,
    /// The kind's number (1 ..= 4 in a valid record), the producer bit masked off.
    pub kind: u8,
    pub producer: Option<ProducerStamp>,
    /// Little-endian `i32`s.
    pub signatures: &'a [u8],
    pub directory: &'a [u8],
    pub old_name: &'a [u8],
    pub new_name: &'a [u8],
    pub new_parent: &'a [u8],
    /// Where the payload starts, from the record's first byte.
    pub payload_at: usize,
}

impl RecordHeader<'_> {
    /// The event's paths as (directory, name): the old entry's, then the
    /// new entry's (in `new_parent` when set, else in `directory`); a
    /// rename has both, a create or a delete one.
    pub fn paths(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let old = (!self.old_name.is_empty()).then_some((self.directory, self.old_name));
        let new_dir = if self.new_parent.is_empty() {
            self.directory
        } else {
            self.new_parent
        };
        let new = (!self.new_name.is_empty()).then_some((new_dir, self.new_name));
        [old, new].into_iter().flatten()
    }

    /// True if one of the record's signatures is `signature`.
    pub fn has_signature(&self, signature: i32) -> bool {
        let want = signature.to_le_bytes();
        self.signatures.chunks_exact(4).any(|s| s == want)
    }
}

/// Parses the header of the record at the front of `buf` (bounds-checked, no
/// checksum or UTF-8 check: see [`RecordHeader`]).
// Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
pub fn peek_header(buf: &[u8]) -> Result<RecordHeader<'_>, RecordError> {
    let bytes = front(buf)?;
    let len = bytes.len();
    let byte_at = |at: usize| bytes.get(at).copied().ok_or_else(|| short(bytes));
    let u16_at = |at| read_u16(bytes, at).ok_or_else(|| short(bytes));
    let u64_at = |at| read_u64(bytes, at).ok_or_else(|| short(bytes));
    let kind_byte = byte_at(24)?;
    let stamped = kind_byte & KIND_PRODUCER != 0;
    let fixed = RECORD_HEADER_LEN + if stamped { PRODUCER_STAMP_LEN } else { 0 };
    let sig_len = 4 * usize::from(byte_at(25)?);
    let lens = [u16_at(26)?, u16_at(28)?, u16_at(30)?, u16_at(32)?].map(usize::from);
    // Counts of a u8 and four u16s: at most 50 + 4 * 255 + 4 * 65535, so the
    // sum cannot overflow, not even in a 32-bit usize.
    let fields = fixed + sig_len + lens.iter().sum::<usize>();
    if fields > len {
        return Err(RecordError::FieldsOverrun { fields, len });
    }
    // Every split below fits (`fields <= len`); one that did not would be
    // this same error, not a panic.
    let overrun = || RecordError::FieldsOverrun { fields, len };
    let (head, rest) = bytes.split_at_checked(fixed).ok_or_else(overrun)?;
    let producer = match stamped {
        true => Some(ProducerStamp {
            producer_id: read_u64(head, RECORD_HEADER_LEN).ok_or_else(overrun)?,
            sequence: read_u64(head, RECORD_HEADER_LEN + 8).ok_or_else(overrun)?,
        }),
        false => None,
    };
    let (signatures, mut rest) = rest.split_at_checked(sig_len).ok_or_else(overrun)?;
    let mut parts: [&[u8]; 4] = [&[]; 4];
    for (part, field_len) in parts.iter_mut().zip(lens) {
        (*part, rest) = rest.split_at_checked(field_len).ok_or_else(overrun)?;
    }
    let [directory, old_name, new_name, new_parent] = parts;
    Ok(RecordHeader {
        len,
        offset: u64_at(16)?,
        ts: u64_at(8)? as i64,
        kind: kind_byte & !KIND_PRODUCER,
        producer,
        signatures,
        directory,
        old_name,
        new_name,
        new_parent,
        payload_at: fields,
    })
}

// Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
fn parse_verified(bytes: &[u8]) -> Result<Record<'_>, RecordError> {
    let h = peek_header(bytes)?;
    // The error names the kind byte as stored, producer bit included.
    let producer_bit = if h.producer.is_some() {
        KIND_PRODUCER
    } else {
        0
    };
    let kind = Kind::from_u8(h.kind).ok_or(RecordError::UnknownKind(h.kind | producer_bit))?;
    let text =
        |field, part| std::str::from_utf8(part).map_err(|_| RecordError::InvalidUtf8 { field });
    Ok(Record {
        ts: h.ts,
        offset: h.offset,
        kind,
        signatures: Signatures(SigRepr::Raw(h.signatures)),
        directory: text("directory", h.directory)?,
        old_name: text("old_name", h.old_name)?,
        new_name: text("new_name", h.new_name)?,
        new_parent: text("new_parent", h.new_parent)?,
        payload: bytes
            .get(h.payload_at..)
            .ok_or(RecordError::FieldsOverrun {
                fields: h.payload_at,
                len: bytes.len(),
            })?,
        producer: h.producer,
    })
}

// The little-endian readers of the decoders (the engine's chunk and segment
// headers use them too): `None` when `b` does not hold the value at `at`, so
// that each caller turns a short read into its own error.

/// The little-endian `u16` at `at` in `b`, if `b` holds it.
#[doc(hidden)]
// Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
pub fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(*b.get(at..)?.first_chunk()?))
}

/// The little-endian `u32` at `at` in `b`, if `b` holds it.
#[doc(hidden)]
// Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
pub fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(*b.get(at..)?.first_chunk()?))
}

/// The little-endian `u64` at `at` in `b`, if `b` holds it.
#[doc(hidden)]
// Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
pub fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(*b.get(at..)?.first_chunk()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record<'static> {
        Record {
            ts: 1_700_000_000_000_000_000,
            offset: 42,
            kind: Kind::Rename,
            signatures: Signatures::new(&[7, -3]),
            directory: "/a/b",
            old_name: "x",
            new_name: "y",
            new_parent: "/c",
            payload: b"payload",
            producer: None,
        }
    }

    #[test]
    fn round_trip() {
        let rec = sample();
        let mut buf = vec![0u8; rec.encoded_len() + 5];
        let n = rec.encode_into(&mut buf).unwrap();
        assert_eq!(n, rec.encoded_len());
        let (back, used) = Record::decode(&buf).unwrap();
        assert_eq!(used, n);
        assert_eq!(back.signatures.iter().collect::<Vec<_>>(), vec![7, -3]);
        assert_eq!(
            (
                back.ts,
                back.offset,
                back.kind,
                back.directory,
                back.old_name
            ),
            (rec.ts, rec.offset, rec.kind, rec.directory, rec.old_name)
        );
        assert_eq!(
            (back.new_name, back.new_parent, back.payload),
            ("y", "/c", &b"payload"[..])
        );
    }

    fn stamped() -> Record<'static> {
        Record {
            producer: Some(ProducerStamp {
                producer_id: 0x0102_0304_0506_0708,
                sequence: 77,
            }),
            ..sample()
        }
    }

    #[test]
    fn a_producer_stamp_round_trips_and_moves_the_fields_after_it() {
        let rec = stamped();
        assert_eq!(
            rec.encoded_len(),
            sample().encoded_len() + PRODUCER_STAMP_LEN
        );
        let mut buf = vec![0u8; rec.encoded_len()];
        rec.encode_into(&mut buf).unwrap();
        let (back, _) = Record::decode(&buf).unwrap();
        assert_eq!(back.producer, rec.producer);
        assert_eq!(back.kind, Kind::Rename);
        assert_eq!(back.signatures.iter().collect::<Vec<_>>(), vec![7, -3]);
        assert_eq!((back.directory, back.payload), ("/a/b", &b"payload"[..]));
        let h = peek_header(&buf).unwrap();
        assert_eq!((h.kind, h.producer), (Kind::Rename as u8, rec.producer));
        assert!(h.has_signature(-3));
        // A record without a stamp reads as before: no producer.
        let mut plain = vec![0u8; sample().encoded_len()];
        sample().encode_into(&mut plain).unwrap();
        assert_eq!(Record::decode(&plain).unwrap().0.producer, None);
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        for rec in [sample(), stamped()] {
            flipped_bits_are_caught(rec);
        }
    }

    fn flipped_bits_are_caught(rec: Record<'_>) {
        let mut buf = vec![0u8; rec.encoded_len()];
        rec.encode_into(&mut buf).unwrap();
        for byte in 0..buf.len() {
            for bit in 0..8 {
                let mut bad = buf.clone();
                bad[byte] ^= 1 << bit;
                assert!(
                    Record::decode(&bad).is_err(),
                    "flip at {byte}:{bit} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn restamped_records_verify_with_their_new_position() {
        let rec = sample();
        let mut buf = vec![0u8; rec.encoded_len()];
        rec.encode_into(&mut buf).unwrap();
        restamp(&mut buf, 9, 77);
        let (back, _) = Record::decode(&buf).unwrap();
        assert_eq!((back.offset, back.ts, back.payload), (9, 77, rec.payload));
    }

    #[test]
    fn header_peek_agrees_with_decode() {
        let rec = sample();
        let mut buf = vec![0u8; rec.encoded_len()];
        rec.encode_into(&mut buf).unwrap();
        let h = peek_header(&buf).unwrap();
        assert_eq!((h.len, h.offset, h.ts, h.kind), (buf.len(), 42, rec.ts, 4));
        assert_eq!((h.directory, h.old_name), (&b"/a/b"[..], &b"x"[..]));
        assert_eq!((h.new_name, h.new_parent), (&b"y"[..], &b"/c"[..]));
        assert_eq!(&buf[h.payload_at..], b"payload");
        assert!(h.has_signature(-3) && h.has_signature(7) && !h.has_signature(3));
    }

    #[test]
    fn kind_shape_is_enforced() {
        let mut rec = sample();
        rec.kind = Kind::Create;
        assert!(matches!(
            rec.validate(),
            Err(RecordError::KindMismatch { .. })
        ));
        let mut small = [0u8; 10];
        assert!(matches!(
            sample().encode_into(&mut small),
            Err(RecordError::Truncated { .. })
        ));
    }
}
