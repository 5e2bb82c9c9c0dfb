//! An event's proto3 JSON written straight from its bytes ([`EventView`]):
//! the same text the generated pbjson serializer writes for the decoded
//! `ringfeed.v1.Event` (lowerCamelCase names in field order, defaults left
//! out, 64-bit integers as strings, bytes as padded standard base64), without
//! building the message. Bytes a view cannot read exactly as a full decode
//! would ([`EventView::canonical`] false: a field repeated, or damage) and
//! entries with extended attributes (a JSON object whose key order the
//! generated serializer does not fix) go through the full decode instead, so
//! the text is always the generated serializer's.

use ringfeed_proto::prost::{DecodeError, Message};
use ringfeed_proto::v1;

use crate::view::{EntryParts, EventParts, EventView};

/// Appends the proto3 JSON of the encoded `ringfeed.v1.Event` `event` to `out`.
/// On an error `out` is as it was.
pub fn write_event_json(event: &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
    write_event_parts_json(event, EventView::new(event).parts(), out)
}

/// [`write_event_json`] with the event's parts read already
/// (`EventView::new(event).parts()`), for a caller that reads them too.
pub fn write_event_parts_json(
    event: &[u8],
    parts: Result<EventParts<'_>, DecodeError>,
    out: &mut Vec<u8>,
) -> Result<(), DecodeError> {
    let start = out.len();
    match parts {
        Ok(parts) if parts.canonical => match write_parts(&parts, out) {
            Ok(true) => return Ok(()),
            Ok(false) | Err(_) => out.truncate(start),
        },
        _ => {}
    }
    let decoded = v1::Event::decode(event)?;
    serde_json::to_writer(&mut *out, &decoded).expect("an Event always serializes");
    Ok(())
}

/// Writes the event's JSON; `Ok(false)` when an entry holds extended
/// attributes or the event has fields the parts do not hold (a SeaweedFS
/// filer's `seaweedfs`): the full decode writes those.
fn write_parts(event: &EventParts<'_>, out: &mut Vec<u8>) -> Result<bool, DecodeError> {
    if event.has_other_fields {
        return Ok(false);
    }
    let mut object = Object::open(out);
    if !event.directory.is_empty() {
        object.string("directory", event.directory);
    }
    for (name, entry) in [
        ("oldEntry", &event.old_entry),
        ("newEntry", &event.new_entry),
    ] {
        if let Some(entry) = entry {
            if entry.has_extended {
                return Ok(false);
            }
            object.key(name);
            write_entry(entry, object.out);
        }
    }
    if !event.new_parent_path.is_empty() {
        object.string("newParentPath", event.new_parent_path);
    }
    let mut signatures = event.signatures().peekable();
    if signatures.peek().is_some() {
        object.key("signatures");
        object.out.push(b'[');
        for (i, signature) in signatures.enumerate() {
            if i > 0 {
                object.out.push(b',');
            }
            push_int(object.out, signature?);
        }
        object.out.push(b']');
    }
    object.close();
    Ok(true)
}

fn write_entry(entry: &EntryParts<'_>, out: &mut Vec<u8>) {
    let mut object = Object::open(out);
    if !entry.name.is_empty() {
        object.string("name", entry.name);
    }
    if entry.is_directory {
        object.key("isDirectory");
        object.out.extend_from_slice(b"true");
    }
    if entry.size != 0 {
        object.quoted_int("size", entry.size);
    }
    if entry.mtime_ns != 0 {
        object.quoted_int("mtimeNs", entry.mtime_ns);
    }
    if entry.mode != 0 {
        object.key("mode");
        push_int(object.out, entry.mode);
    }
    if !entry.attributes.is_empty() {
        object.key("attributes");
        object.out.push(b'"');
        push_base64(object.out, entry.attributes, &base64_simd::STANDARD);
        object.out.push(b'"');
    }
    object.close();
}

/// Appends `value` in decimal.
pub fn push_int(out: &mut Vec<u8>, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Appends `bytes` in base64 of `kind`, straight into `out`: SIMD, which
/// base64's own encoder is not (it was a fifth of a tail's CPU with 200-byte
/// attributes), and no streaming encoder (9 % of a tail before).
pub fn push_base64(out: &mut Vec<u8>, bytes: &[u8], kind: &base64_simd::Base64) {
    let at = out.len();
    out.resize(at + kind.encoded_length(bytes.len()), 0);
    let written = kind
        .encode(bytes, base64_simd::Out::from_slice(&mut out[at..]))
        .len();
    out.truncate(at + written);
}

/// A JSON object being written: commas between members.
struct Object<'a> {
    out: &'a mut Vec<u8>,
    members: usize,
}

impl<'a> Object<'a> {
    fn open(out: &'a mut Vec<u8>) -> Object<'a> {
        out.push(b'{');
        Object { out, members: 0 }
    }

    fn key(&mut self, name: &str) {
        if self.members > 0 {
            self.out.push(b',');
        }
        self.members += 1;
        self.out.push(b'"');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    /// A string member, escaped as serde_json escapes.
    fn string(&mut self, name: &str, value: &str) {
        self.key(name);
        // serde_json escapes only control characters, '"' and '\\'; a
        // path holds none as a rule, and looking for them a whole string
        // at a time is several times faster than its byte-by-byte escape
        // (which was a sixth of a tail's CPU).
        let plain = value.bytes().fold(true, |plain, b| {
            plain & (b >= 0x20 && b != b'"' && b != b'\\')
        });
        if plain {
            self.out.push(b'"');
            self.out.extend_from_slice(value.as_bytes());
            self.out.push(b'"');
        } else {
            serde_json::to_writer(&mut *self.out, value).expect("writing to a Vec");
        }
    }

    /// A 64-bit integer member, as proto3 JSON writes it: in quotes.
    fn quoted_int(&mut self, name: &str, value: impl itoa::Integer) {
        self.key(name);
        self.out.push(b'"');
        push_int(self.out, value);
        self.out.push(b'"');
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringfeed_proto::bytes::Bytes;
    use ringfeed_proto::v1::{Entry, Event};

    fn generated(event: &Event) -> String {
        serde_json::to_string(event).unwrap()
    }

    fn written(bytes: &[u8]) -> String {
        let mut out = b"prefix".to_vec();
        write_event_json(bytes, &mut out).unwrap();
        String::from_utf8(out[6..].to_vec()).unwrap()
    }

    #[test]
    fn the_text_is_the_generated_serializers() {
        let events = [
            Event::default(),
            Event {
                directory: "/a \"quoted\" \\ dir\n\u{1}é/".into(),
                ..Default::default()
            },
            Event {
                directory: "/photos".into(),
                old_entry: Some(Entry::default()),
                new_entry: Some(Entry {
                    name: "cat.jpg".into(),
                    is_directory: true,
                    size: u64::MAX,
                    mtime_ns: -1_700_000_000_000_000_000,
                    mode: 0o755,
                    attributes: Bytes::from_static(b"\x00\xffab"),
                    ..Default::default()
                }),
                new_parent_path: "/other".into(),
                signatures: vec![1, -2, i32::MAX],
                seaweedfs: None,
            },
            Event {
                new_entry: Some(Entry {
                    name: "x".into(),
                    extended: [("k".to_owned(), Bytes::from_static(b"v"))].into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            // A followed filer's event: its filer, time and notification too.
            Event {
                directory: "/d".into(),
                new_entry: Some(Entry {
                    name: "f".into(),
                    ..Default::default()
                }),
                seaweedfs: Some(ringfeed_proto::v1::SeaweedfsEvent {
                    filer: "127.0.0.1:8888".into(),
                    ts_ns: 1_796_586_192_760_514_587,
                    event_notification: Bytes::from_static(b"\x12\x03\x0a\x01f"),
                }),
                ..Default::default()
            },
        ];
        for event in &events {
            assert_eq!(
                written(&event.encode_to_vec()),
                generated(event),
                "{event:?}"
            );
        }
    }

    /// Random events (fields present or not, awkward characters, extremes):
    /// always the generated serializer's text.
    #[test]
    fn random_events_match_the_generated_serializer() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let pieces = [
            "",
            "/",
            "a",
            "\"",
            "\\",
            "\n",
            "\u{7f}",
            "\u{0}",
            "é",
            "日本",
            "\u{1f600}",
            " ",
            "\u{1f}",
            "\t",
            "~",
        ];
        let mut text = |n: u64| -> String {
            (0..n % 5)
                .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                .collect()
        };
        let mut next2 = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed
        };
        for i in 0..2_000u64 {
            let r = next2();
            let entry = |r: u64, t: &mut dyn FnMut(u64) -> String| Entry {
                name: t(r),
                is_directory: r & 1 == 1,
                size: if r & 2 == 2 { r } else { 0 },
                mtime_ns: if r & 4 == 4 { r as i64 } else { 0 },
                mode: if r & 8 == 8 { (r >> 8) as u32 } else { 0 },
                attributes: Bytes::from(r.to_le_bytes()[..(r % 9) as usize].to_vec()),
                ..Default::default()
            };
            let event = Event {
                directory: text(r >> 3),
                old_entry: (r & 16 == 16).then(|| entry(r >> 5, &mut text)),
                new_entry: (r & 32 == 32).then(|| entry(r >> 7, &mut text)),
                new_parent_path: text(r >> 11),
                signatures: (0..(r >> 13) % 4).map(|k| (r >> k) as i32).collect(),
                seaweedfs: None,
            };
            assert_eq!(
                written(&event.encode_to_vec()),
                generated(&event),
                "event {i}: {event:?}"
            );
        }
    }

    #[test]
    fn non_canonical_bytes_fall_back_to_the_full_decode() {
        // new_entry twice: a full decode merges the two.
        let mut bytes = Event {
            new_entry: Some(Entry {
                name: "a".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec();
        bytes.extend(
            Event {
                new_entry: Some(Entry {
                    size: 5,
                    ..Default::default()
                }),
                ..Default::default()
            }
            .encode_to_vec(),
        );
        let merged = Event::decode(&bytes[..]).unwrap();
        assert_eq!(merged.new_entry.as_ref().unwrap().name, "a");
        assert_eq!(written(&bytes), generated(&merged));
    }

    #[test]
    fn damage_is_the_full_decodes_error_and_writes_nothing() {
        let bytes = Event {
            directory: "/abc".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let mut out = b"kept".to_vec();
        assert!(write_event_json(&bytes[..bytes.len() - 1], &mut out).is_err());
        assert_eq!(out, b"kept");
        // A string that is not UTF-8.
        let mut bad = bytes.clone();
        let last = bad.len() - 1;
        bad[last] = 0xff;
        assert!(write_event_json(&bad, &mut out).is_err());
        assert_eq!(out, b"kept");
    }
}
