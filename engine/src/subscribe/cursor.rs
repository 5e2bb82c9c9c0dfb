//! Cursors: for every shard, the next offset a subscription will deliver.
//!
//! A cursor is the exact resume token: offsets are dense and permanent, so the
//! same cursor always yields the same next event. On the wire it is an opaque,
//! versioned, checksummed byte string; for people and command lines it is that
//! string in URL-safe base64 without padding.
//!
//! Version 1 layout (little-endian): `"RC" | u8 version | u16 shard count |
//! u64 next offset per shard | u32 crc32c of everything before it`.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use thiserror::Error;

const MAGIC: &[u8; 2] = b"RC";
const VERSION: u8 = 1;
const HEADER: usize = 5;
const MAX_SHARDS: usize = 1024;

/// For each shard, the next offset to deliver.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cursor {
    next: Vec<u64>,
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
         (the shard's next offset is {committed_next}): it was not made by this data dir"
    )]
    Beyond {
        shard: u32,
        offset: u64,
        committed_next: u64,
    },
}

impl Cursor {
    pub fn new(next: Vec<u64>) -> Cursor {
        Cursor { next }
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

    /// The versioned wire form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + 8 * self.next.len() + 4);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&(self.next.len() as u16).to_le_bytes());
        for offset in &self.next {
            out.extend_from_slice(&offset.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses the wire form, refusing anything that is not exactly a cursor.
    pub fn from_bytes(bytes: &[u8]) -> Result<Cursor, CursorError> {
        let bad = |m: &str| Err(CursorError::Malformed(m.to_string()));
        if bytes.len() < HEADER + 4 || &bytes[..2] != MAGIC {
            return bad("not a ringfeed cursor");
        }
        if bytes[2] != VERSION {
            return bad(&format!(
                "cursor version {} (this server reads version {VERSION})",
                bytes[2]
            ));
        }
        let count = u16::from_le_bytes([bytes[3], bytes[4]]) as usize;
        if count == 0 || count > MAX_SHARDS || bytes.len() != HEADER + 8 * count + 4 {
            return bad("wrong length for its shard count");
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body).to_le_bytes() != crc {
            return bad("checksum mismatch (truncated or altered)");
        }
        let next = body[HEADER..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        Ok(Cursor { next })
    }
}

/// URL-safe base64 of [`Cursor::to_bytes`], no padding.
impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.to_bytes()))
    }
}

impl FromStr for Cursor {
    type Err = CursorError;

    fn from_str(s: &str) -> Result<Cursor, CursorError> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s.trim())
            .map_err(|e| CursorError::Malformed(format!("not URL-safe base64: {e}")))?;
        Cursor::from_bytes(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_damage() {
        let c = Cursor::new(vec![0, 7, u64::MAX]);
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
