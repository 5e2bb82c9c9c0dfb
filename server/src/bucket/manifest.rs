//! A shard's manifest: the segments the bucket holds, checked when read
//! (bytes from a bucket are hostile until checked).

use serde::{Deserialize, Serialize};

/// The manifest's object name, in its shard's directory.
pub(super) const MANIFEST: &str = "manifest.json";
/// 2: each segment has a chunk index object (`index_bytes`,
/// `index_crc32c`). A version-1 manifest (an earlier build's) is refused.
const VERSION: u32 = 2;

/// What the bucket holds of one shard, oldest segment first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub version: u32,
    pub node: u32,
    pub shard: u32,
    /// The data dir the segments come from (its feed id, hex): another data
    /// dir's segments at the same offsets are other events.
    pub feed_id: String,
    /// The shard's generation history when this manifest was written:
    /// `[generation, first offset]`, oldest first (what a node rebuilt from
    /// the bucket checks cursors against).
    pub generations: Vec<[u64; 2]>,
    pub segments: Vec<ManifestSegment>,
}

/// One uploaded segment: its object (`name`, in the shard's directory) is
/// the segment file's bytes up to the end of its last chunk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestSegment {
    pub name: String,
    pub first_offset: u64,
    /// It holds `first_offset..next_offset`.
    pub next_offset: u64,
    /// Stamps of its first and last records (0 if it holds none).
    pub first_ts_ns: i64,
    pub last_ts_ns: i64,
    pub bytes: u64,
    pub crc32c: u32,
    /// The lowest and highest generation of its chunks.
    pub min_generation: u32,
    pub max_generation: u32,
    /// Its chunk index object (`NNN.idx`, see `index.rs`): length and CRC-32C.
    pub index_bytes: u64,
    pub index_crc32c: u32,
}

/// A data dir's feed id as manifests name it (16 hex digits).
pub fn feed_hex(feed_id: u64) -> String {
    format!("{feed_id:016x}")
}

/// [`feed_hex`] read back: `None` if it is not one (or is 0, no feed).
pub fn parse_feed_hex(text: &str) -> Option<u64> {
    u64::from_str_radix(text, 16).ok().filter(|&id| id != 0)
}

impl Manifest {
    pub fn new(node: u32, shard: u32, feed_id: String) -> Manifest {
        Manifest {
            version: VERSION,
            node,
            shard,
            feed_id,
            generations: Vec::new(),
            segments: Vec::new(),
        }
    }

    /// The generation history it names (`None`: none, or not a history).
    pub fn history(&self) -> Option<ringfeed_engine::Generations> {
        let entries = self
            .generations
            .iter()
            .map(|&[generation, first_offset]| {
                Some(ringfeed_engine::GenerationStart {
                    generation: u32::try_from(generation).ok()?,
                    first_offset,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        ringfeed_engine::Generations::from_entries(entries)
    }

    /// Records `history` as the shard's generation history.
    pub fn set_history(&mut self, history: &ringfeed_engine::Generations) {
        self.generations = history
            .entries()
            .iter()
            .map(|e| [u64::from(e.generation), e.first_offset])
            .collect();
    }

    pub(super) fn parse(bytes: &[u8]) -> Result<Manifest, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("not a manifest: {e}"))
    }

    pub(super) fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("a manifest serializes")
    }

    /// Every offset below this is in the bucket, as far as this manifest
    /// says (0 when it names no segment).
    pub fn uploaded_below(&self) -> u64 {
        self.segments.last().map_or(0, |s| s.next_offset)
    }

    /// Checks what a manifest read from a bucket says: its version, node and
    /// shard, each segment's name and offsets, segments in order without
    /// overlap.
    pub(super) fn check(&self, node: u32, shard: u32) -> Result<(), String> {
        if self.version != VERSION {
            return Err(format!("manifest version {}, not {VERSION}", self.version));
        }
        if (self.node, self.shard) != (node, shard) {
            return Err(format!(
                "the manifest of node {} shard {}, found where node {node} shard {shard}'s belongs",
                self.node, self.shard
            ));
        }
        if !self.generations.is_empty() && self.history().is_none() {
            return Err("its generation history is out of order".into());
        }
        let mut below = 0;
        for s in &self.segments {
            let named = ringfeed_engine::segment::parse_segment_name(&s.name);
            if named != Some(s.first_offset) || s.next_offset < s.first_offset {
                return Err(format!("segment {:?}: name and offsets disagree", s.name));
            }
            if s.first_offset < below {
                return Err(format!("segment {:?} overlaps the one before it", s.name));
            }
            below = s.next_offset;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(first: u64, next: u64) -> ManifestSegment {
        ManifestSegment {
            name: ringfeed_engine::segment::segment_name(first),
            first_offset: first,
            next_offset: next,
            first_ts_ns: 1,
            last_ts_ns: 2,
            bytes: 8192,
            crc32c: 7,
            min_generation: 1,
            max_generation: 1,
            index_bytes: 16,
            index_crc32c: 9,
        }
    }

    #[test]
    fn a_manifest_reads_back_and_is_checked() {
        let mut m = Manifest::new(2, 1, "ab".into());
        m.segments = vec![segment(0, 10), segment(10, 25)];
        let back = Manifest::parse(&m.to_json()).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.check(2, 1), Ok(()));
        assert_eq!(back.uploaded_below(), 25);
        assert!(back.check(2, 0).unwrap_err().contains("node 2 shard 1"));

        let mut overlapping = m.clone();
        overlapping.segments[1] = segment(9, 25);
        assert!(overlapping.check(2, 1).unwrap_err().contains("overlaps"));
        let mut misnamed = m.clone();
        misnamed.segments[0].name = "x.seg".into();
        assert!(misnamed.check(2, 1).unwrap_err().contains("disagree"));
        let mut history = m.clone();
        history.generations = vec![[1, 0], [2, 30]];
        assert_eq!(history.history().unwrap().current(), 2);
        history.generations = vec![[2, 0], [1, 30]];
        assert!(history.check(2, 1).unwrap_err().contains("out of order"));
        let mut future = m.clone();
        future.version = 3;
        assert!(future.check(2, 1).unwrap_err().contains("version 3"));
        let unknown = br#"{"version":2,"node":2,"shard":1,"feed_id":"ab","generations":[],"segments":[],"x":1}"#;
        assert!(Manifest::parse(unknown)
            .unwrap_err()
            .contains("unknown field"));
    }
}
