//! Look-ups over the index: the chunk holding an offset, and the first record
//! stamped at or after a time, across segments.

use crate::common::*;
use ringfeed_engine::storage::{block_on, MemStorage};
use ringfeed_engine::LogConfig;

#[test]
fn every_offset_and_stamp_is_found() {
    let storage = MemStorage::new();
    let config = LogConfig {
        shard: 0,
        segment_bytes: 8 << 10,
        max_unsynced_bytes: 2 << 10,
    };
    let (mut log, _) = open_mem(&storage, config).unwrap();
    block_on(append_records(&mut log, 300, 7)).unwrap();
    assert!(log.segment_names().len() > 3);
    for offset in 0..300 {
        let loc = log
            .locate_offset(offset)
            .unwrap_or_else(|| panic!("offset {offset} not found"));
        assert!(loc.entry.first_offset <= offset && offset < loc.entry.end_offset());
        let ts = stamp_for(offset);
        assert_eq!(
            block_on(first_at_or_after(&log, ts)),
            Some((offset, ts)),
            "exact stamp of {offset}"
        );
        assert_eq!(
            block_on(first_at_or_after(&log, ts - 5)),
            Some((offset, ts)),
            "stamp just before {offset}"
        );
    }
    assert_eq!(log.locate_offset(300), None);
    assert_eq!(block_on(first_at_or_after(&log, stamp_for(299) + 1)), None);
    assert_eq!(
        block_on(first_at_or_after(&log, i64::MIN)),
        Some((0, stamp_for(0)))
    );
}
