//! The serde impls follow the proto3 JSON mapping as pbjson implements it:
//! lowerCamelCase names out (proto names also accepted in), default values
//! omitted, 64-bit integers as strings, enums by name, bytes as base64, and
//! unknown field names refused (pbjson-build's default; `ignore_unknown_fields`
//! is not set).

use bytes::Bytes;
use ringfeed_proto::v1::{
    subscribe_request::Start, AppendRequest, Durability, Entry, Event, Ordering, SubscribeRequest,
};

#[test]
fn event_round_trips_with_camel_case_names() {
    let json = r#"{"directory":"/a","newEntry":{"name":"f"}}"#;
    let event: Event = serde_json::from_str(json).expect("parse");
    assert_eq!(
        event,
        Event {
            directory: "/a".into(),
            new_entry: Some(Entry {
                name: "f".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    );
    assert_eq!(serde_json::to_string(&event).expect("serialize"), json);
}

#[test]
fn proto_field_names_are_accepted_on_input() {
    let event: Event =
        serde_json::from_str(r#"{"directory":"/a","new_entry":{"name":"f","is_directory":true}}"#)
            .expect("parse");
    let entry = event.new_entry.expect("new entry");
    assert!(entry.is_directory);
    assert_eq!(
        serde_json::to_string(&Event {
            new_entry: Some(entry),
            ..Default::default()
        })
        .expect("serialize"),
        r#"{"newEntry":{"name":"f","isDirectory":true}}"#
    );
}

#[test]
fn unknown_fields_are_refused() {
    let err = serde_json::from_str::<Event>(r#"{"directory":"/a","newEntri":{"name":"f"}}"#)
        .expect_err("unknown field accepted");
    assert!(
        err.to_string().contains("unknown field `newEntri`"),
        "{err}"
    );
    let err = serde_json::from_str::<Event>(r#"{"newEntry":{"name":"f","sise":"1"}}"#)
        .expect_err("unknown nested field accepted");
    assert!(err.to_string().contains("unknown field `sise`"), "{err}");
}

#[test]
fn scalars_follow_the_mapping() {
    let entry = Entry {
        name: "f".into(),
        size: 5,
        mtime_ns: -7,
        mode: 0o644,
        attributes: Bytes::from_static(b"\x00\xff"),
        extended: [("user.k".to_string(), Bytes::from_static(b"v"))]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    let json = serde_json::to_string(&entry).expect("serialize");
    assert_eq!(
        json,
        r#"{"name":"f","size":"5","mtimeNs":"-7","mode":420,"attributes":"AP8=","extended":{"user.k":"dg=="}}"#
    );
    assert_eq!(serde_json::from_str::<Entry>(&json).expect("parse"), entry);
    // 64-bit integers are also accepted as JSON numbers.
    let parsed: Entry = serde_json::from_str(r#"{"size":5}"#).expect("parse");
    assert_eq!(parsed.size, 5);
}

#[test]
fn enums_are_names_and_oneofs_are_flat() {
    let request = AppendRequest {
        events: vec![Event {
            directory: "/".into(),
            signatures: vec![3],
            ..Default::default()
        }],
        durability: Durability::Durable as i32,
        ..Default::default()
    };
    let json = serde_json::to_string(&request).expect("serialize");
    assert_eq!(
        json,
        r#"{"events":[{"directory":"/","signatures":[3]}],"durability":"DURABILITY_DURABLE"}"#
    );
    assert_eq!(
        serde_json::from_str::<AppendRequest>(&json).expect("parse"),
        request
    );

    let subscribe: SubscribeRequest = serde_json::from_str(
        r#"{"clientName":"sync","pathPrefix":"/a","sinceNs":"123","ordering":"ORDERING_PER_SHARD"}"#,
    )
    .expect("parse");
    assert_eq!(subscribe.client_name, "sync");
    assert_eq!(subscribe.start, Some(Start::SinceNs(123)));
    assert_eq!(subscribe.ordering(), Ordering::PerShard);
    let cursor: SubscribeRequest = serde_json::from_str(r#"{"cursor":"AQI="}"#).expect("parse");
    assert_eq!(
        cursor.start,
        Some(Start::Cursor(Bytes::from_static(&[1, 2])))
    );
}
