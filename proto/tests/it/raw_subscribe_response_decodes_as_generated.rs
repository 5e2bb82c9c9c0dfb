//! A `RawSubscribeResponse` built from stored event bytes decodes, on the
//! client, as the generated `SubscribeResponse` with the original `Event`s;
//! and every variant survives generated -> raw -> generated unchanged, which
//! pins the raw types' tags to the schema's.

use bytes::Bytes;
use prost::Message;
use ringfeed_proto::v1::{
    subscribe_response::Item, ChunkMessage, ChunkModeEnd, Entry, Event, EventBatch, EventMessage,
    Heartbeat, ShardWatermark, SubscribeResponse,
};
use ringfeed_proto::{RawEventBatch, RawEventMessage, RawItem, RawSubscribeResponse};

fn rename_event() -> Event {
    Event {
        directory: "/data/a".into(),
        old_entry: Some(Entry {
            name: "old.txt".into(),
            is_directory: false,
            size: 4096,
            mtime_ns: 1_700_000_000_123_456_789,
            mode: 0o100644,
            attributes: Bytes::from_static(b"\x00\x01chunks"),
            extended: [
                ("user.a".to_string(), Bytes::from_static(b"1")),
                ("user.b".to_string(), Bytes::from_static(b"\xff\x00")),
            ]
            .into_iter()
            .collect(),
        }),
        new_entry: Some(Entry {
            name: "new.txt".into(),
            size: 4096,
            ..Default::default()
        }),
        new_parent_path: "/data/b".into(),
        signatures: vec![7, -3, i32::MAX],
        seaweedfs: None,
    }
}

fn create_event() -> Event {
    Event {
        directory: "/".into(),
        new_entry: Some(Entry {
            name: "d".into(),
            is_directory: true,
            mode: 0o040755,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn stored(event: &Event) -> Bytes {
    Bytes::from(event.encode_to_vec())
}

fn decode_as_client(raw: &RawSubscribeResponse) -> SubscribeResponse {
    SubscribeResponse::decode(raw.encode_to_vec().as_slice()).expect("client decode")
}

#[test]
fn event_variant_decodes_as_generated() {
    let event = rename_event();
    let raw = RawSubscribeResponse::new(
        Bytes::from_static(b"cursor-1"),
        RawItem::Event(RawEventMessage::new(42, 3, 1200, stored(&event))),
    );
    let expected = SubscribeResponse {
        cursor: Bytes::from_static(b"cursor-1"),
        item: Some(Item::Event(EventMessage {
            node: 0,
            ts_ns: 42,
            shard: 3,
            offset: 1200,
            event: Some(event),
        })),
    };
    assert_eq!(decode_as_client(&raw), expected);
}

#[test]
fn batch_variant_decodes_as_generated() {
    let events = [rename_event(), create_event(), Event::default()];
    let raw = RawSubscribeResponse::new(
        Bytes::from_static(b"c"),
        RawItem::Batch(RawEventBatch {
            events: events
                .iter()
                .enumerate()
                .map(|(i, e)| RawEventMessage::new(100 + i as i64, 1, i as u64, stored(e)))
                .collect(),
        }),
    );
    let expected = SubscribeResponse {
        cursor: Bytes::from_static(b"c"),
        item: Some(Item::Batch(EventBatch {
            events: events
                .iter()
                .enumerate()
                .map(|(i, e)| EventMessage {
                    node: 0,
                    ts_ns: 100 + i as i64,
                    shard: 1,
                    offset: i as u64,
                    event: Some(e.clone()),
                })
                .collect(),
        })),
    };
    // The empty Event encodes to zero bytes; it must still arrive as Some.
    assert_eq!(decode_as_client(&raw), expected);
}

#[test]
fn every_variant_round_trips_through_raw() {
    let cases = vec![
        SubscribeResponse::default(),
        SubscribeResponse {
            cursor: Bytes::from_static(b"x"),
            item: Some(Item::Event(EventMessage {
                node: 0,
                ts_ns: -1,
                shard: u32::MAX,
                offset: u64::MAX,
                event: None,
            })),
        },
        SubscribeResponse {
            cursor: Bytes::new(),
            item: Some(Item::Event(EventMessage {
                node: 0,
                event: Some(rename_event()),
                ..Default::default()
            })),
        },
        SubscribeResponse {
            cursor: Bytes::from_static(b"h"),
            item: Some(Item::Heartbeat(Heartbeat {
                merged_watermark_ns: 99,
                shards: vec![ShardWatermark {
                    shard: 2,
                    committed_next: 10,
                    claimed_ts_ns: 11,
                    flushed_next: 9,
                    flushed_ts_ns: 8,
                }],
                held_by_nodes: vec![3],
                skipped_nodes: vec![2, 3],
            })),
        },
        SubscribeResponse {
            cursor: Bytes::from_static(b"k"),
            item: Some(Item::Chunk(ChunkMessage {
                shard: 1,
                first_offset: 500,
                record_count: 2,
                crc32c: 0xdead_beef,
                records: Bytes::from_static(b"records"),
                first_ts_ns: 1,
                last_ts_ns: 2,
                node: 3,
            })),
        },
        SubscribeResponse {
            cursor: Bytes::from_static(b"e"),
            item: Some(Item::ChunkModeEnd(ChunkModeEnd {})),
        },
        SubscribeResponse {
            cursor: Bytes::new(),
            item: Some(Item::Batch(EventBatch { events: vec![] })),
        },
    ];
    for expected in cases {
        let wire = expected.encode_to_vec();
        // Server side: the generated encoding decodes as raw, and raw
        // re-encodes to the same bytes.
        let raw = RawSubscribeResponse::decode(wire.as_slice()).expect("raw decode");
        assert_eq!(raw.encode_to_vec(), wire, "{expected:?}");
        assert_eq!(RawSubscribeResponse::from(expected.clone()), raw);
        assert_eq!(decode_as_client(&raw), expected);
        // Encoded once, it is sent verbatim: the same bytes, the same
        // message for the client, the same fields back.
        let fields = raw.into_fields().expect("fields");
        let Some(item) = fields.item.clone() else {
            continue; // a response without an item is never sent
        };
        let once = RawSubscribeResponse::encoded(fields.cursor.clone(), item);
        assert!(matches!(once, RawSubscribeResponse::Framed(_)));
        assert_eq!(once.encoded_len(), wire.len());
        assert_eq!(once.encode_to_vec(), wire, "{expected:?}");
        assert_eq!(decode_as_client(&once), expected);
        assert_eq!(once.clone().into_fields().expect("decodes"), fields);
        // As the transport gets it: the gRPC prefix (not compressed, the
        // length) then the message, from a fields response or a framed one
        // alike; the lease lives as long as the frame's bytes.
        let mut prefixed = vec![0];
        prefixed.extend((wire.len() as u32).to_be_bytes());
        prefixed.extend(&wire);
        for response in [RawSubscribeResponse::Fields(fields.clone()), once] {
            let lease = std::sync::Arc::new(());
            let frames = response.into_frame(lease.clone());
            assert_eq!(frames.parts().concat(), prefixed, "{expected:?}");
            // The lease is in the last part written, and lives as long as
            // any slice of it.
            let last = frames
                .into_parts()
                .into_iter()
                .rfind(|p| !p.is_empty())
                .expect("a frame has bytes");
            let part = last.slice(1..);
            drop(last);
            assert_eq!(std::sync::Arc::strong_count(&lease), 2, "kept by a part");
            drop(part);
            assert_eq!(
                std::sync::Arc::strong_count(&lease),
                1,
                "dropped with the last part"
            );
        }
    }
}

/// A chunk response's frame is the prost encoding in three parts, whatever
/// the fields' sizes (each varint length at its byte boundaries, zero fields
/// left out), and its records part is the chunk's own bytes, not a copy.
#[test]
fn chunk_frames_are_the_encoding_with_the_records_uncopied() {
    use ringfeed_proto::raw::{chunk_frame, RawResponseFields};
    let lengths = [1usize, 127, 128, 16_383, 16_384, 70_000, 1 << 20];
    let mut case = 0u64;
    for &records_len in &lengths {
        for cursor_len in [0usize, 1, 127, 128] {
            for zeros in [false, true] {
                case += 1;
                let value = |v: u64| if zeros { 0 } else { v.wrapping_mul(case) };
                let records = Bytes::from(vec![(case % 251) as u8; records_len]);
                let chunk = ChunkMessage {
                    shard: value(3) as u32,
                    first_offset: value(1 << 40),
                    record_count: value(200) as u32,
                    crc32c: value(0x9e37_79b9) as u32,
                    records: records.clone(),
                    first_ts_ns: value(1_700_000_000_000_000_000) as i64,
                    last_ts_ns: -(value(5) as i64),
                    node: value(7) as u32,
                };
                let cursor = Bytes::from(vec![7u8; cursor_len]);
                let wire = RawResponseFields {
                    cursor: cursor.clone(),
                    item: Some(RawItem::Chunk(chunk.clone())),
                }
                .encode_to_vec();
                let mut prefixed = vec![0];
                prefixed.extend((wire.len() as u32).to_be_bytes());
                prefixed.extend(&wire);
                let frames = chunk_frame(&cursor, chunk);
                assert_eq!(
                    frames.parts().concat(),
                    prefixed,
                    "records {records_len}, cursor {cursor_len}, zeros {zeros}"
                );
                assert_eq!(frames.parts()[1].as_ptr(), records.as_ptr(), "not copied");
                assert!(frames.parts()[0].len() < cursor_len + 64 && frames.parts()[2].len() < 32);
            }
        }
    }
}
