//! A generated `AppendRequest` decodes on the server as `RawAppendRequest`
//! whose events are the producer's encodings byte for byte, fields this
//! schema does not know included.

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use ringfeed_proto::v1::{AppendRequest, Durability, Entry, Event};
use ringfeed_proto::RawAppendRequest;

#[test]
fn events_arrive_as_their_encodings() {
    let events = vec![
        Event {
            directory: "/a".into(),
            new_entry: Some(Entry {
                name: "f".into(),
                ..Default::default()
            }),
            signatures: vec![1, 2],
            ..Default::default()
        },
        Event::default(),
    ];
    let request = AppendRequest {
        events: events.clone(),
        durability: Durability::Durable as i32,
        ..Default::default()
    };
    let raw = RawAppendRequest::decode(Bytes::from(request.encode_to_vec())).expect("decode");
    assert_eq!(raw.durability(), Durability::Durable);
    let expected: Vec<Bytes> = events
        .iter()
        .map(|e| Bytes::from(e.encode_to_vec()))
        .collect();
    assert_eq!(raw.events, expected);
    assert_eq!(RawAppendRequest::from(request.clone()), raw);
    assert_eq!(
        AppendRequest::decode(raw.encode_to_vec().as_slice()).expect("decode"),
        request
    );
}

#[test]
fn unknown_event_fields_are_kept_verbatim() {
    // An Event from a newer producer: field 99 (varint 5) is unknown here.
    let mut newer = BytesMut::from(
        Event {
            directory: "/a".into(),
            ..Default::default()
        }
        .encode_to_vec()
        .as_slice(),
    );
    prost::encoding::encode_key(99, prost::encoding::WireType::Varint, &mut newer);
    newer.put_u8(5);
    let newer = newer.freeze();

    let mut wire = BytesMut::new();
    prost::encoding::bytes::encode(1, &newer, &mut wire);
    let raw = RawAppendRequest::decode(wire.freeze()).expect("decode");
    assert_eq!(raw.events, vec![newer.clone()]);
    assert_eq!(raw.durability(), Durability::Unspecified);

    // Validation decodes a copy; the stored bytes keep field 99.
    let decoded = Event::decode(raw.events[0].clone()).expect("event");
    assert_eq!(decoded.directory, "/a");
    assert_ne!(Bytes::from(decoded.encode_to_vec()), newer);
}
