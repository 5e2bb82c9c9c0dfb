//! Cluster cursors: the resume token of a feed merged from several nodes
//! (docs/design.md 7). For every node it covers, that node's own [`Cursor`] (its
//! shards' next offsets and generations), so it is exact per source and
//! portable: any node can resume it, asking each node for what follows its
//! part. A node not in the cursor is followed from its beginning, or, in a
//! cursor of a subscription that started at a time (`now`, `since_ns`),
//! from that time ([`ClusterCursor::since_ns`]): a node the subscription
//! has not heard from yet is then resumed from the same start.
//!
//! Version 3 layout (little-endian): `"RC" | u8 3 | u16 node count | (u32
//! node id, u16 length, that node's cursor bytes) per node, ids ascending |
//! u32 crc32c of everything before it`. Version 4, written when `since_ns`
//! is not 0: the same with `i64 since_ns` after the node count. The magic
//! and version byte are those of single-node cursors, so either kind is told
//! from the other by its third byte, and a single-node reader refuses a
//! cluster cursor by name.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::cursor::{Cursor, CursorError, CLUSTER_VERSION, CLUSTER_VERSION_SINCE};
use crate::record::read_u64;

const MAGIC: &[u8; 2] = b"RC";
const HEADER: usize = 5;
const MAX_NODES: usize = 1024;

/// For every node it covers, where that node's feed resumes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterCursor {
    nodes: BTreeMap<u32, Cursor>,
    /// Where a node not in `nodes` starts: events stamped at or after this
    /// (ns since the Unix epoch); 0: its beginning.
    since_ns: i64,
}

impl ClusterCursor {
    /// A cursor covering no node yet (every node from its beginning).
    pub fn new() -> ClusterCursor {
        ClusterCursor::default()
    }

    /// A cursor covering no node yet, every node starting at events stamped
    /// at or after `since_ns` (0: at its beginning).
    pub fn since(since_ns: i64) -> ClusterCursor {
        ClusterCursor {
            nodes: BTreeMap::new(),
            since_ns: since_ns.max(0),
        }
    }

    /// Where a node the cursor does not cover starts: at events stamped at
    /// or after this; 0: at its beginning.
    pub fn since_ns(&self) -> i64 {
        self.since_ns
    }

    /// Where node `id`'s feed resumes, if the cursor covers it.
    pub fn node(&self, id: u32) -> Option<&Cursor> {
        self.nodes.get(&id)
    }

    /// Node `id`'s part, to move it.
    pub fn node_mut(&mut self, id: u32) -> Option<&mut Cursor> {
        self.nodes.get_mut(&id)
    }

    /// Sets node `id`'s part.
    pub fn set(&mut self, id: u32, cursor: Cursor) {
        self.nodes.insert(id, cursor);
    }

    /// The nodes covered, by id, with their parts.
    pub fn nodes(&self) -> impl Iterator<Item = (u32, &Cursor)> {
        self.nodes.iter().map(|(&id, c)| (id, c))
    }

    /// Whether `bytes` are a cluster cursor's (by their version byte).
    // Bytes from the network (a client's cursor): hostile until checked.
    #[deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unreachable
    )]
    pub fn is_cluster(bytes: &[u8]) -> bool {
        matches!(
            bytes.split_first_chunk::<3>(),
            Some((&[m0, m1, CLUSTER_VERSION | CLUSTER_VERSION_SINCE], _)) if [m0, m1] == *MAGIC
        )
    }

    // `to_bytes` encodes into a buffer of its own; the lints are denied on
    // the decoding, `is_cluster`, `from_bytes` and `from_str`.

    /// The versioned wire form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + 4 + self.nodes.len() * 40);
        self.write_bytes(&mut out);
        out
    }

    /// The versioned wire form, appended to `out`.
    pub fn write_bytes(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(MAGIC);
        if self.since_ns == 0 {
            out.push(CLUSTER_VERSION);
            out.extend_from_slice(&(self.nodes.len() as u16).to_le_bytes());
        } else {
            out.push(CLUSTER_VERSION_SINCE);
            out.extend_from_slice(&(self.nodes.len() as u16).to_le_bytes());
            out.extend_from_slice(&self.since_ns.to_le_bytes());
        }
        for (id, cursor) in &self.nodes {
            out.extend_from_slice(&id.to_le_bytes());
            // The part's length, known once it is written.
            let len_at = out.len();
            out.extend_from_slice(&[0, 0]);
            cursor.write_bytes(out);
            let len = (out.len() - len_at - 2) as u16;
            out[len_at..len_at + 2].copy_from_slice(&len.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    /// Parses the wire form, refusing anything that is not exactly a cluster cursor.
    // Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
    #[deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unreachable
    )]
    pub fn from_bytes(bytes: &[u8]) -> Result<ClusterCursor, CursorError> {
        let bad = |m: &str| Err(CursorError::Malformed(m.to_string()));
        let Some((&[m0, m1, version, count_lo, count_hi], _)) = bytes.split_first_chunk::<HEADER>()
        else {
            return bad("not a ringfeed cursor");
        };
        if bytes.len() < HEADER + 4 || [m0, m1] != *MAGIC {
            return bad("not a ringfeed cursor");
        }
        let header = match version {
            CLUSTER_VERSION => HEADER,
            CLUSTER_VERSION_SINCE => HEADER + 8,
            _ => return bad("a single node's cursor, not a cluster cursor"),
        };
        if bytes.len() < header + 4 {
            return bad("truncated");
        }
        // Past that check `body` holds the header: a read of it that came up
        // short would be refused as truncated too, not panic.
        let Some((body, crc)) = bytes.split_last_chunk::<4>() else {
            return bad("truncated");
        };
        if crc32c::crc32c(body).to_le_bytes() != *crc {
            return bad("checksum mismatch (truncated or altered)");
        }
        let count = usize::from(u16::from_le_bytes([count_lo, count_hi]));
        if count > MAX_NODES {
            return bad("too many nodes");
        }
        let since_ns = match header > HEADER {
            true => match read_u64(body, HEADER) {
                Some(since_ns) => since_ns as i64,
                None => return bad("truncated"),
            },
            false => 0,
        };
        if since_ns < 0 || (header > HEADER && since_ns == 0) {
            return bad("bad start time");
        }
        let mut nodes = BTreeMap::new();
        let Some(mut rest) = body.get(header..) else {
            return bad("truncated");
        };
        let mut last = None;
        for _ in 0..count {
            let Some((&[i0, i1, i2, i3, len_lo, len_hi], after)) = rest.split_first_chunk::<6>()
            else {
                return bad("truncated node entry");
            };
            let id = u32::from_le_bytes([i0, i1, i2, i3]);
            let len = usize::from(u16::from_le_bytes([len_lo, len_hi]));
            if last.is_some_and(|l| id <= l) {
                return bad("node ids not ascending");
            }
            last = Some(id);
            let Some((part, after)) = after.split_at_checked(len) else {
                return bad("truncated node cursor");
            };
            let cursor = Cursor::from_bytes(part)
                .map_err(|e| CursorError::Malformed(format!("node {id}'s part: {e}")))?;
            nodes.insert(id, cursor);
            rest = after;
        }
        if !rest.is_empty() {
            return bad("bytes after the last node");
        }
        Ok(ClusterCursor { nodes, since_ns })
    }
}

/// URL-safe base64 of [`ClusterCursor::to_bytes`], no padding.
impl fmt::Display for ClusterCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::cursor::to_text(&self.to_bytes()))
    }
}

impl FromStr for ClusterCursor {
    type Err = CursorError;

    // Text from the network or a command line: hostile until checked.
    #[deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unreachable
    )]
    fn from_str(s: &str) -> Result<ClusterCursor, CursorError> {
        ClusterCursor::from_bytes(&crate::cursor::from_text(s)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ClusterCursor {
        let mut c = ClusterCursor::new();
        c.set(3, Cursor::with_generations(vec![10, 0], vec![2, 0]));
        c.set(1, Cursor::with_generations(vec![u64::MAX], vec![u32::MAX]));
        c.set(7, Cursor::new(vec![5, 6, 7]));
        c
    }

    #[test]
    fn round_trips_with_nodes_in_id_order() {
        let c = sample();
        let back = ClusterCursor::from_bytes(&c.to_bytes()).unwrap();
        assert_eq!(back, c);
        assert_eq!(
            back.nodes().map(|(id, _)| id).collect::<Vec<_>>(),
            [1, 3, 7]
        );
        assert_eq!(c.to_string().parse::<ClusterCursor>().unwrap(), c);
        assert_eq!(back.node(3).unwrap().offsets(), &[10, 0]);
        assert!(back.node(2).is_none());
        let empty = ClusterCursor::new();
        assert_eq!(ClusterCursor::from_bytes(&empty.to_bytes()).unwrap(), empty);
        assert!(ClusterCursor::is_cluster(&c.to_bytes()));
        // With a start time.
        let mut since = ClusterCursor::since(1_700_000_000_000_000_000);
        since.set(2, Cursor::new(vec![4]));
        let bytes = since.to_bytes();
        assert_eq!(bytes[2], CLUSTER_VERSION_SINCE);
        let back = ClusterCursor::from_bytes(&bytes).unwrap();
        assert_eq!(back, since);
        assert_eq!(back.since_ns(), 1_700_000_000_000_000_000);
        assert!(ClusterCursor::is_cluster(&bytes));
        assert_eq!(ClusterCursor::new().since_ns(), 0);
        assert_eq!(
            sample().to_bytes()[2],
            CLUSTER_VERSION,
            "no time: version 3"
        );
    }

    #[test]
    fn refuses_damage_and_the_other_kind() {
        let mut since = sample();
        since.since_ns = 5;
        for bytes in [sample().to_bytes(), since.to_bytes()] {
            refuses_damage_of(&bytes);
        }
        let bytes = sample().to_bytes();
        let err = Cursor::from_bytes(&since.to_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("cluster cursor"), "{err}");
        // Each kind names the other.
        let single = Cursor::new(vec![1]).to_bytes();
        assert!(!ClusterCursor::is_cluster(&single));
        let err = ClusterCursor::from_bytes(&single).unwrap_err().to_string();
        assert!(err.contains("single node"), "{err}");
        let err = Cursor::from_bytes(&bytes).unwrap_err().to_string();
        assert!(err.contains("cluster cursor"), "{err}");
    }

    fn refuses_damage_of(bytes: &[u8]) {
        let bytes = bytes.to_vec();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(
                ClusterCursor::from_bytes(&bad).is_err(),
                "flip at {i} accepted"
            );
        }
        for len in 0..bytes.len() {
            assert!(
                ClusterCursor::from_bytes(&bytes[..len]).is_err(),
                "cut at {len}"
            );
        }
    }
}
