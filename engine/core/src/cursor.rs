//! Cursors: for every shard, the next offset a subscription will deliver.
//!
//! A cursor is the exact resume token: offsets are dense and permanent, so the
//! same cursor always yields the same next event. On the wire it is an opaque,
//! versioned, checksummed byte string; for people and command lines it is that
//! string in URL-safe base64 without padding.
//!
//! Version 2 layout (little-endian): `"RC" | u8 version | u16 shard count |
//! (u64 next offset, u32 generation) per shard | u32 crc32c of everything
//! before it`. The generation is that of the last event the cursor covers on
//! the shard (0 when it covers none): it lets a server tell a cursor whose
//! events a crash destroyed from a valid one (see `ringfeed_engine::generation`).
//!
//! Version 5 is version 2 with the feed's id, a `u64` after the shard count:
//! the id a data dir drew when it was made (`ringfeed.meta`), so a server
//! refuses a cursor another data dir made instead of resuming the wrong feed
//! at the same offsets (every fresh data dir starts at generation 1). A
//! server writes version 5 whenever it knows its id.
//!
//! Versions 1 (`u64 next offset` per shard, no generations) and 2 still
//! parse; a version-1 cursor resumes as before, but truncation by a crash
//! cannot be detected for it, and neither can tell its feed.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use thiserror::Error;

use crate::record::{read_u32, read_u64};

const MAGIC: &[u8; 2] = b"RC";
const VERSION: u8 = 2;
const VERSION_1: u8 = 1;
/// [`VERSION`] with the feed's id.
const VERSION_FEED: u8 = 5;
/// The versions of a cluster cursor (`crate::cluster_cursor`), the same
/// magic: all versions are numbered here, so a node cursor's reader can
/// name a cluster cursor it is handed.
pub(crate) const CLUSTER_VERSION: u8 = 3;
/// [`CLUSTER_VERSION`] with a start time.
pub(crate) const CLUSTER_VERSION_SINCE: u8 = 4;
const HEADER: usize = 5;
const MAX_SHARDS: usize = 1024;

/// For each shard, the next offset to deliver.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cursor {
    next: Vec<u64>,
    /// Per shard, the generation of the last covered event; `None` for a
    /// version-1 cursor, which did not record them.
    generations: Option<Vec<u32>>,
    /// The id of the data dir whose feed this is; 0: not recorded.
    feed: u64,
}

/// A cursor that cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CursorError {
    #[error("malformed cursor: {0}")]
    Malformed(String),
    #[error("the cursor is for {found} shard(s) but this server has {expected}")]
    ShardCount { expected: usize, found: usize },
    #[error(
        "the cursor's offset {offset} for shard {shard} is beyond the last event \
         (the shard's next offset is {committed_next}): it was not made by this data dir{}",
        if *legacy { " (or, as a version-1 cursor without generations, it may predate a crash that \
         truncated the feed: resume from a time or from the beginning)" } else { "" }
    )]
    Beyond {
        shard: u32,
        offset: u64,
        committed_next: u64,
        /// The cursor is version 1: it cannot tell truncation from a foreign cursor.
        legacy: bool,
    },
    #[error(
        "the cursor was made by another data dir (feed {}; this server's is {}): \
         resume it on the server that made it, or start this feed from a time or from the beginning",
        FeedId(*cursor), FeedId(*ours)
    )]
    OtherFeed { cursor: u64, ours: u64 },
    #[error(
        "the cursor names generation {generation} of shard {shard}, which this data dir never \
         ran (its newest is {current}): it was made by another data dir"
    )]
    UnknownGeneration {
        shard: u32,
        generation: u32,
        current: u32,
    },
}

impl Cursor {
    /// A cursor without generations (as version 1 had): resuming it cannot
    /// detect truncation by a crash.
    pub fn new(next: Vec<u64>) -> Cursor {
        Cursor {
            next,
            generations: None,
            feed: 0,
        }
    }

    /// A cursor whose `generations[i]` is the generation of the last event it
    /// covers on shard `i`.
    pub fn with_generations(next: Vec<u64>, generations: Vec<u32>) -> Cursor {
        assert_eq!(next.len(), generations.len(), "one generation per shard");
        Cursor {
            next,
            generations: Some(generations),
            feed: 0,
        }
    }

    /// This cursor, saying it belongs to the feed of data dir `feed` (0: none).
    pub fn of_feed(mut self, feed: u64) -> Cursor {
        self.feed = feed;
        self
    }

    /// The id of the data dir whose feed this cursor follows; 0 when the
    /// cursor does not say (versions 1 and 2).
    pub fn feed(&self) -> u64 {
        self.feed
    }

    /// Per shard, the generation of the last covered event; `None` for a
    /// version-1 cursor.
    pub fn generations(&self) -> Option<&[u32]> {
        self.generations.as_deref()
    }

    /// Moves `shard`'s next offset, keeping its generation: right for any
    /// offset at or below the one a server put in this cursor (see
    /// `ringfeed_engine::generation`), which is how a client checkpoints inside a response.
    pub fn set_next(&mut self, shard: u32, next: u64) {
        if let Some(slot) = self.next.get_mut(shard as usize) {
            *slot = next;
        }
    }

    /// Sets `shard`'s next offset, and its generation when both this cursor
    /// and the caller have one: how a stream that delivers its shards'
    /// events in another order than it read them moves each shard's part on
    /// its own (a whole cursor taken after an event may cover another
    /// shard's events read earlier and not delivered yet).
    pub fn set_shard(&mut self, shard: u32, next: u64, generation: Option<u32>) {
        self.set_next(shard, next);
        if let (Some(generations), Some(generation)) = (self.generations.as_mut(), generation) {
            if let Some(slot) = generations.get_mut(shard as usize) {
                *slot = generation;
            }
        }
    }

    /// `shard`'s generation (`None` for a version-1 cursor).
    pub fn generation(&self, shard: u32) -> Option<u32> {
        self.generations
            .as_ref()
            .and_then(|g| g.get(shard as usize).copied())
    }

    /// Shards the cursor covers.
    pub fn shards(&self) -> usize {
        self.next.len()
    }

    /// The next offset to deliver from `shard`.
    pub fn next_offset(&self, shard: u32) -> u64 {
        self.next[shard as usize]
    }

    pub fn offsets(&self) -> &[u64] {
        &self.next
    }

    // `to_bytes` and `write_bytes` encode into a buffer of their own; the
    // lints are denied on `from_bytes` and the text decoding.

    /// The versioned wire form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + 8 + 12 * self.next.len() + 4);
        self.write_bytes(&mut out);
        out
    }

    /// Appends the versioned wire form to `out` (a reused buffer: no allocation).
    pub fn write_bytes(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(MAGIC);
        // Without generations, version 1: a generation written as 0 would
        // claim the cursor's events were all written by generation 0.
        // The feed's id only beside generations: a cursor without them is
        // one a client made by hand, or read from a version-1 cursor.
        let feed = self.generations.is_some() && self.feed != 0;
        out.push(match (&self.generations, feed) {
            (Some(_), true) => VERSION_FEED,
            (Some(_), false) => VERSION,
            (None, _) => VERSION_1,
        });
        out.extend_from_slice(&(self.next.len() as u16).to_le_bytes());
        if feed {
            out.extend_from_slice(&self.feed.to_le_bytes());
        }
        for (i, offset) in self.next.iter().enumerate() {
            out.extend_from_slice(&offset.to_le_bytes());
            if let Some(generations) = &self.generations {
                out.extend_from_slice(&generations[i].to_le_bytes());
            }
        }
        let crc = crc32c::crc32c(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    /// Parses the wire form, refusing anything that is not exactly a cursor.
    // Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
    #[deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unreachable
    )]
    pub fn from_bytes(bytes: &[u8]) -> Result<Cursor, CursorError> {
        let bad = |m: &str| Err(CursorError::Malformed(m.to_string()));
        let Some((&[m0, m1, version, count_lo, count_hi], _)) = bytes.split_first_chunk::<HEADER>()
        else {
            return bad("not a ringfeed cursor");
        };
        if bytes.len() < HEADER + 4 || [m0, m1] != *MAGIC {
            return bad("not a ringfeed cursor");
        }
        let (per_shard, header) = match version {
            VERSION => (12, HEADER),
            VERSION_FEED => (12, HEADER + 8),
            VERSION_1 => (8, HEADER),
            CLUSTER_VERSION | CLUSTER_VERSION_SINCE => {
                return bad(
                    "a cluster cursor (several nodes): resume it with a cluster subscription",
                )
            }
            _ => {
                return bad(&format!(
                    "cursor version {version} (this server reads versions 1, 2 and 5)"
                ))
            }
        };
        let count = usize::from(u16::from_le_bytes([count_lo, count_hi]));
        // `count <= MAX_SHARDS` is checked first: the product cannot overflow.
        if count == 0 || count > MAX_SHARDS || bytes.len() != header + per_shard * count + 4 {
            return bad("wrong length for its shard count");
        }
        // Every read below is inside the length just checked; one that was
        // not would be refused as that same error, not a panic.
        let wrong_length = || CursorError::Malformed("wrong length for its shard count".into());
        let (body, crc) = bytes.split_last_chunk::<4>().ok_or_else(wrong_length)?;
        if crc32c::crc32c(body).to_le_bytes() != *crc {
            return bad("checksum mismatch (truncated or altered)");
        }
        let feed = match version {
            VERSION_FEED => {
                let id = read_u64(body, HEADER).ok_or_else(wrong_length)?;
                if id == 0 {
                    return bad("feed id 0 in a version-5 cursor");
                }
                id
            }
            _ => 0,
        };
        let entries = body.get(header..).ok_or_else(wrong_length)?;
        let mut next = Vec::with_capacity(count);
        let mut generations = (version != VERSION_1).then(|| Vec::with_capacity(count));
        for entry in entries.chunks_exact(per_shard) {
            next.push(read_u64(entry, 0).ok_or_else(wrong_length)?);
            if let Some(generations) = &mut generations {
                generations.push(read_u32(entry, 8).ok_or_else(wrong_length)?);
            }
        }
        Ok(Cursor {
            next,
            generations,
            feed,
        })
    }
}

/// A data dir's feed id as people see it: 16 hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedId(pub u64);

impl fmt::Display for FeedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A cursor's text form: URL-safe base64 of its bytes, no padding.
pub(crate) fn to_text(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The bytes of a cursor's text form.
// Text from the network or a command line: hostile until checked.
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
pub(crate) fn from_text(text: &str) -> Result<Vec<u8>, CursorError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim())
        .map_err(|e| CursorError::Malformed(format!("not URL-safe base64: {e}")))
}

/// URL-safe base64 of [`Cursor::to_bytes`], no padding.
impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&to_text(&self.to_bytes()))
    }
}

impl FromStr for Cursor {
    type Err = CursorError;

    // Text from the network or a command line: hostile until checked.
    #[deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unreachable
    )]
    fn from_str(s: &str) -> Result<Cursor, CursorError> {
        Cursor::from_bytes(&from_text(s)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version-1 cursor as servers before generations wrote it: two shards
    /// at offsets 5 and 9 (bytes fixed here, not produced by this code).
    const V1_CURSOR: &str = "UkMBAgAFAAAAAAAAAAkAAAAAAAAAq9ijZA";

    #[test]
    fn version_1_cursors_still_parse() {
        let mut v1 = b"RC\x01\x02\x00".to_vec();
        v1.extend_from_slice(&5u64.to_le_bytes());
        v1.extend_from_slice(&9u64.to_le_bytes());
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        let c = Cursor::from_bytes(&v1).unwrap();
        assert_eq!((c.offsets(), c.generations()), (&[5u64, 9][..], None));
        let text = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&v1);
        assert_eq!(text, V1_CURSOR);
        assert_eq!(
            c.to_bytes(),
            v1,
            "a cursor without generations stays version 1"
        );
        assert_eq!(V1_CURSOR.parse::<Cursor>().unwrap(), c);
    }

    #[test]
    fn the_feed_id_round_trips_and_old_versions_keep_their_bytes() {
        let c = Cursor::with_generations(vec![3, 9], vec![1, 2]).of_feed(0xfeed_beef_0123_4567);
        let bytes = c.to_bytes();
        assert_eq!(bytes[2], VERSION_FEED);
        let back = Cursor::from_bytes(&bytes).unwrap();
        assert_eq!(back.feed(), 0xfeed_beef_0123_4567);
        assert_eq!(back, c);
        assert_eq!(c.to_string().parse::<Cursor>().unwrap(), c);
        // Without an id (a server that has none): version 2, as before.
        let v2 = Cursor::with_generations(vec![3, 9], vec![1, 2]);
        assert_eq!(v2.to_bytes()[2], VERSION);
        assert_eq!(Cursor::from_bytes(&v2.to_bytes()).unwrap().feed(), 0);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(Cursor::from_bytes(&bad).is_err(), "flip at {i} accepted");
        }
    }

    #[test]
    fn generations_round_trip() {
        let c = Cursor::with_generations(vec![3, 0], vec![7, 0]);
        let back = Cursor::from_bytes(&c.to_bytes()).unwrap();
        assert_eq!(back.generations(), Some(&[7u32, 0][..]));
        assert_eq!(back, c);
    }

    #[test]
    fn round_trips_and_refuses_damage() {
        let c = Cursor::with_generations(vec![0, 7, u64::MAX], vec![0, 1, u32::MAX]);
        assert_eq!(Cursor::from_bytes(&c.to_bytes()).unwrap(), c);
        assert_eq!(c.to_string().parse::<Cursor>().unwrap(), c);
        let bytes = c.to_bytes();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(Cursor::from_bytes(&bad).is_err(), "flip at {i} accepted");
        }
        assert!(Cursor::from_bytes(&bytes[..bytes.len() - 1]).is_err());
        assert!("not a cursor!".parse::<Cursor>().is_err());
    }
}
