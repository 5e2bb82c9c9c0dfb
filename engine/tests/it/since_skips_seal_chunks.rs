//! `since_ns` never jumps past events because a later segment begins with a
//! seal chunk (no records, stamp 0): a clean stop while the newest segment was
//! still empty, then appends after the seal. The look-up took the seal's
//! stamp 0 as "this segment starts before `since`" and skipped to that
//! segment, past every event of the one before.

use crate::common::*;
use ringfeed_engine::segment::{segment_name, SegmentHeader, SEGMENT_HEADER_BLOCK};
use ringfeed_engine::storage::{block_on, MemStorage};
use ringfeed_engine::{Start, SubscribeRequest};

#[test]
fn since_finds_events_before_a_segment_that_starts_with_a_seal() {
    let _watchdog = ringfeed_testkit::arm();
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(async {
        append_records(&mut log, 40, 8).await.unwrap();
        log.sync().await.unwrap();
    });
    let end = log.next_offset();
    drop(log);
    // The newest segment was created (by a rotation) and is still empty.
    let header = SegmentHeader {
        shard: 0,
        alignment: 512,
        first_offset: end,
        created_ns: 1,
        segment_bytes: small_config().segment_bytes,
        max_unsynced_bytes: small_config().max_unsynced_bytes,
    };
    let mut block = vec![0u8; small_config().segment_bytes as usize];
    header.encode(&mut block[..SEGMENT_HEADER_BLOCK]);
    storage.set_file_bytes(&segment_name(end), block);
    // A clean stop now seals it: its first chunk is the seal.
    let (log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(log.close()).unwrap();
    // Appends go on after the seal, in that segment.
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(async {
        append_records(&mut log, 10, 5).await.unwrap();
        log.sync().await.unwrap();
    });
    assert_eq!(log.segment_names().len(), 2);
    let end = log.next_offset();
    drop(log);

    let engine = mem_engine(small_engine_config(1), std::slice::from_ref(&storage));
    for k in [0, 13, 39, 45] {
        let mut sub = engine
            .subscribe(SubscribeRequest::from(Start::SinceNs(stamp_for(k))))
            .unwrap();
        let got = take(&mut sub, (end - k) as usize);
        assert_eq!(
            got.iter().map(|e| e.1).collect::<Vec<_>>(),
            (k..end).collect::<Vec<_>>(),
            "since the stamp of offset {k}"
        );
    }
    engine.shutdown().unwrap();
}
