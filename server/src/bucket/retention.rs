//! Bucket retention, apart from the local one: which of a shard's oldest
//! segments in the bucket go (`object_store_retention_max_age_secs`,
//! `object_store_retention_max_bytes`). The manifest is written without
//! them first, then their objects are deleted: a reader sees them named
//! and whole, or not named (OUT_OF_RANGE below what the bucket holds).

use std::time::Duration;

use super::ManifestSegment;

/// How long and how much of a shard the bucket keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BucketRetention {
    /// A segment goes once its newest event is older than this.
    pub max_age: Option<Duration>,
    /// The oldest segments go while the shard's hold more bytes than this.
    pub max_bytes: Option<u64>,
}

impl BucketRetention {
    /// How many of `segments` (oldest first) go at `now_ns`. The newest
    /// always stays: it says where the bucket's history ends.
    pub fn expired(&self, segments: &[ManifestSegment], now_ns: i64) -> usize {
        let mut total: u64 = segments.iter().map(|s| s.bytes).sum();
        let mut gone = 0;
        for s in segments.iter().take(segments.len().saturating_sub(1)) {
            let too_old = self
                .max_age
                .is_some_and(|age| s.last_ts_ns < now_ns.saturating_sub(age.as_nanos() as i64));
            let too_much = self.max_bytes.is_some_and(|max| total > max);
            if !(too_old || too_much) {
                break;
            }
            total -= s.bytes;
            gone += 1;
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(first: u64, last_ts_ns: i64, bytes: u64) -> ManifestSegment {
        ManifestSegment {
            name: ringfeed_engine::segment::segment_name(first),
            first_offset: first,
            next_offset: first + 10,
            first_ts_ns: last_ts_ns - 5,
            last_ts_ns,
            bytes,
            crc32c: 0,
            min_generation: 1,
            max_generation: 1,
            index_bytes: 0,
            index_crc32c: 0,
        }
    }

    #[test]
    fn the_oldest_go_by_age_or_bytes_and_the_newest_stays() {
        let segments = [
            segment(0, 100, 10),
            segment(10, 200, 10),
            segment(20, 300, 10),
        ];
        let keep_all = BucketRetention::default();
        assert_eq!(keep_all.expired(&segments, 1_000), 0);
        let by_age = BucketRetention {
            max_age: Some(Duration::from_nanos(150)),
            max_bytes: None,
        };
        // Older than 400 - 150 = 250: the first two.
        assert_eq!(by_age.expired(&segments, 400), 2);
        assert_eq!(by_age.expired(&segments, 10_000), 2, "the newest stays");
        let by_bytes = BucketRetention {
            max_age: None,
            max_bytes: Some(15),
        };
        assert_eq!(by_bytes.expired(&segments, 0), 2);
        let roomy = BucketRetention {
            max_age: None,
            max_bytes: Some(20),
        };
        assert_eq!(roomy.expired(&segments, 0), 1);
    }
}
