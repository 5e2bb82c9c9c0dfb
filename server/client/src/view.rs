//! Events read in place: [`EventView`] and [`EntryView`] decode the fields of
//! a stored `ringfeed.v1.Event` from its bytes when asked, without building
//! the message or allocating (strings and bytes are borrowed).
//!
//! Proto3 rules hold as a full decode applies them: a scalar or string field
//! that appears more than once reads as its last occurrence, a missing one as
//! its default, unknown fields are skipped. Two occurrences of one embedded
//! message (which a full decode merges) are the one case a view does not
//! reproduce: [`EventView::canonical`] tells when the bytes have that shape,
//! and [`crate::json`] then falls back to the full decode. Producers built on
//! protobuf libraries never write it.
//!
//! The wire format is walked with prost's own primitives
//! (`prost::encoding::{decode_key, decode_varint}`): what this module adds is
//! only which field is which.

use ringfeed_proto::prost::encoding::{decode_key, decode_varint, WireType};
use ringfeed_proto::prost::DecodeError;

/// One field as it appears on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

/// The fields of one message, in wire order.
#[derive(Clone)]
pub(crate) struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Fields<'a> {
        Fields { rest: bytes }
    }

    /// Bytes not walked yet.
    pub(crate) fn rest_len(&self) -> usize {
        self.rest.len()
    }

    fn field(&mut self) -> Result<(u32, Value<'a>), DecodeError> {
        let buf = &mut self.rest;
        let (tag, wire) = decode_key(buf)?;
        let value = match wire {
            WireType::Varint => Value::Varint(decode_varint(buf)?),
            WireType::SixtyFourBit => Value::Fixed64(u64::from_le_bytes(
                take(buf, 8)?.try_into().expect("8 bytes"),
            )),
            WireType::ThirtyTwoBit => Value::Fixed32(u32::from_le_bytes(
                take(buf, 4)?.try_into().expect("4 bytes"),
            )),
            WireType::LengthDelimited => {
                let len = decode_varint(buf)?;
                let len = usize::try_from(len).map_err(|_| DecodeError::new("length overflows"))?;
                Value::Bytes(take(buf, len)?)
            }
            WireType::StartGroup | WireType::EndGroup => {
                return Err(DecodeError::new("groups are not used by this schema"))
            }
        };
        Ok((tag, value))
    }
}

fn take<'a>(buf: &mut &'a [u8], len: usize) -> Result<&'a [u8], DecodeError> {
    if buf.len() < len {
        return Err(DecodeError::new("buffer underflow"));
    }
    let (head, tail) = buf.split_at(len);
    *buf = tail;
    Ok(head)
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let field = self.field();
        if field.is_err() {
            self.rest = &[];
        }
        Some(field)
    }
}

/// The last occurrence of field `tag` (proto3: the last one wins).
fn last<'a>(bytes: &'a [u8], tag: u32) -> Result<Option<Value<'a>>, DecodeError> {
    let mut found = None;
    for field in Fields::new(bytes) {
        let (t, value) = field?;
        if t == tag {
            found = Some(value);
        }
    }
    Ok(found)
}

fn string(value: Option<Value<'_>>) -> Result<&str, DecodeError> {
    match value {
        None => Ok(""),
        Some(Value::Bytes(b)) => std::str::from_utf8(b)
            .map_err(|_| DecodeError::new("invalid string value: data is not UTF-8 encoded")),
        Some(_) => Err(DecodeError::new("invalid wire type for a string")),
    }
}

fn bytes(value: Option<Value<'_>>) -> Result<&[u8], DecodeError> {
    match value {
        None => Ok(&[]),
        Some(Value::Bytes(b)) => Ok(b),
        Some(_) => Err(DecodeError::new("invalid wire type for bytes")),
    }
}

fn varint(value: Option<Value<'_>>) -> Result<u64, DecodeError> {
    match value {
        None => Ok(0),
        Some(Value::Varint(v)) => Ok(v),
        Some(_) => Err(DecodeError::new("invalid wire type for a varint")),
    }
}

fn message(value: Option<Value<'_>>) -> Result<Option<EntryView<'_>>, DecodeError> {
    match value {
        None => Ok(None),
        Some(Value::Bytes(b)) => Ok(Some(EntryView { bytes: b })),
        Some(_) => Err(DecodeError::new("invalid wire type for a message")),
    }
}

/// A stored `ringfeed.v1.Event`, read in place.
#[derive(Clone, Copy, Debug)]
pub struct EventView<'a> {
    bytes: &'a [u8],
}

impl<'a> EventView<'a> {
    pub fn new(bytes: &'a [u8]) -> EventView<'a> {
        EventView { bytes }
    }

    /// The encoded event.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Field 1: the directory the entry is in.
    pub fn directory(&self) -> Result<&'a str, DecodeError> {
        string(last(self.bytes, 1)?)
    }

    /// Field 2: the entry before the change (none for a create).
    pub fn old_entry(&self) -> Result<Option<EntryView<'a>>, DecodeError> {
        message(last(self.bytes, 2)?)
    }

    /// Field 3: the entry after the change (none for a delete).
    pub fn new_entry(&self) -> Result<Option<EntryView<'a>>, DecodeError> {
        message(last(self.bytes, 3)?)
    }

    /// Field 4: for a rename across directories, the new parent.
    pub fn new_parent_path(&self) -> Result<&'a str, DecodeError> {
        string(last(self.bytes, 4)?)
    }

    /// Field 5: the producers' signatures, packed or not, in order.
    pub fn signatures(&self) -> impl Iterator<Item = Result<i32, DecodeError>> + 'a {
        signatures(self.bytes)
    }

    /// Whether every singular field of the event and its entries appears at
    /// most once and the bytes decode: then the view reads exactly what a
    /// full decode would.
    pub fn canonical(&self) -> bool {
        self.parts().is_ok_and(|p| p.canonical)
    }
}

/// Every field of an event, read in one pass over its bytes (and one over
/// each entry's): what a reader of most fields, like the JSON writer, uses
/// instead of one accessor call (one pass) per field.
#[derive(Clone, Copy, Debug)]
pub struct EventParts<'a> {
    pub directory: &'a str,
    pub old_entry: Option<EntryParts<'a>>,
    pub new_entry: Option<EntryParts<'a>>,
    pub new_parent_path: &'a str,
    /// Whether every singular field (of the event and its entries) appeared
    /// at most once: then these parts are exactly what a full decode reads
    /// (otherwise an entry given twice was merged by a full decode and is
    /// the last one here).
    pub canonical: bool,
    /// Whether it carries a field these parts do not hold (a followed
    /// SeaweedFS filer's `seaweedfs`, field 6, or one this build does not
    /// know): whoever writes the event whole must take the full decode.
    pub has_other_fields: bool,
    view: EventView<'a>,
}

impl<'a> EventParts<'a> {
    /// What the event did, from the names it carries, as the server
    /// classified it when it stored it (`Kind::of`); `None` for an event
    /// naming no entry, which the server does not store.
    pub fn kind(&self) -> Option<ringfeed_core::record::Kind> {
        let name = |entry: &Option<EntryParts<'a>>| entry.as_ref().map_or("", |e| e.name);
        ringfeed_core::record::Kind::of(
            self.directory,
            name(&self.old_entry),
            name(&self.new_entry),
            self.new_parent_path,
        )
    }

    /// Field 5, packed or not, in order.
    pub fn signatures(&self) -> impl Iterator<Item = Result<i32, DecodeError>> + 'a {
        self.view.signatures()
    }
}

/// Every field of an entry, read in one pass.
#[derive(Clone, Copy, Debug)]
pub struct EntryParts<'a> {
    pub name: &'a str,
    pub is_directory: bool,
    pub size: u64,
    pub mtime_ns: i64,
    pub mode: u32,
    pub attributes: &'a [u8],
    /// Whether field 7 (extended attributes) has any entry.
    pub has_extended: bool,
    canonical: bool,
    view: EntryView<'a>,
}

impl<'a> EntryParts<'a> {
    /// Field 7's entries, as [`EntryView::extended`].
    pub fn extended(&self) -> impl Iterator<Item = Result<(&'a str, &'a [u8]), DecodeError>> + 'a {
        self.view.extended()
    }
}

impl<'a> EventView<'a> {
    /// Every field in one pass (entries: one pass each).
    pub fn parts(&self) -> Result<EventParts<'a>, DecodeError> {
        let (mut directory, mut parent) = (None, None);
        let (mut old_entry, mut new_entry) = (None, None);
        let mut seen = 0u32;
        let mut canonical = true;
        let mut has_other_fields = false;
        for field in Fields::new(self.bytes) {
            let (tag, value) = field?;
            if (1..=4).contains(&tag) {
                canonical &= seen & (1 << tag) == 0;
                seen |= 1 << tag;
            }
            match tag {
                1 => directory = Some(value),
                2 => old_entry = Some(value),
                3 => new_entry = Some(value),
                4 => parent = Some(value),
                5 => match value {
                    Value::Varint(_) => {}
                    Value::Bytes(mut run) => {
                        while !run.is_empty() {
                            decode_varint(&mut run)?;
                        }
                    }
                    _ => return Err(DecodeError::new("invalid wire type for signatures")),
                },
                _ => has_other_fields = true,
            }
        }
        let old_entry = message(old_entry)?.map(|e| e.parts()).transpose()?;
        let new_entry = message(new_entry)?.map(|e| e.parts()).transpose()?;
        canonical &= old_entry.is_none_or(|e| e.canonical) && new_entry.is_none_or(|e| e.canonical);
        Ok(EventParts {
            directory: string(directory)?,
            old_entry,
            new_entry,
            new_parent_path: string(parent)?,
            canonical,
            has_other_fields,
            view: *self,
        })
    }
}

impl<'a> EntryView<'a> {
    /// Every field in one pass.
    pub fn parts(&self) -> Result<EntryParts<'a>, DecodeError> {
        let mut values: [Option<Value<'a>>; 7] = [None; 7];
        let mut seen = 0u32;
        let mut canonical = true;
        let mut has_extended = false;
        for field in Fields::new(self.bytes) {
            let (tag, value) = field?;
            match tag {
                1..=6 => {
                    canonical &= seen & (1 << tag) == 0;
                    seen |= 1 << tag;
                    values[tag as usize] = Some(value);
                }
                7 => {
                    let Value::Bytes(entry) = value else {
                        return Err(DecodeError::new("invalid wire type for a map entry"));
                    };
                    map_entry(entry)?;
                    has_extended = true;
                }
                _ => {}
            }
        }
        Ok(EntryParts {
            name: string(values[1])?,
            is_directory: varint(values[2])? != 0,
            size: varint(values[3])?,
            mtime_ns: varint(values[4])? as i64,
            mode: varint(values[5])? as u32,
            attributes: bytes(values[6])?,
            has_extended,
            canonical,
            view: *self,
        })
    }
}

/// Field 5 of an Event: packed (one length-delimited run) or one varint per
/// occurrence; a full decode accepts both and concatenates.
fn signatures(bytes: &[u8]) -> impl Iterator<Item = Result<i32, DecodeError>> + '_ {
    let mut fields = Fields::new(bytes);
    let mut packed: &[u8] = &[];
    std::iter::from_fn(move || loop {
        if !packed.is_empty() {
            return Some(decode_varint(&mut packed).map(|v| v as i32));
        }
        match fields.next()? {
            Err(e) => return Some(Err(e)),
            Ok((5, Value::Varint(v))) => return Some(Ok(v as i32)),
            Ok((5, Value::Bytes(run))) => packed = run,
            Ok((5, _)) => return Some(Err(DecodeError::new("invalid wire type for signatures"))),
            Ok(_) => {}
        }
    })
}

/// A `ringfeed.v1.Entry` inside an event, read in place.
#[derive(Clone, Copy, Debug)]
pub struct EntryView<'a> {
    bytes: &'a [u8],
}

impl<'a> EntryView<'a> {
    // Each accessor is one pass over the entry, as `parts` is (proto3's "last
    // occurrence wins" means reading one field walks them all anyway), so
    // they read through it: the entry's field numbers and types live there.

    /// Field 1: the entry's name.
    pub fn name(&self) -> Result<&'a str, DecodeError> {
        Ok(self.parts()?.name)
    }

    /// Field 2.
    pub fn is_directory(&self) -> Result<bool, DecodeError> {
        Ok(self.parts()?.is_directory)
    }

    /// Field 3.
    pub fn size(&self) -> Result<u64, DecodeError> {
        Ok(self.parts()?.size)
    }

    /// Field 4.
    pub fn mtime_ns(&self) -> Result<i64, DecodeError> {
        Ok(self.parts()?.mtime_ns)
    }

    /// Field 5.
    pub fn mode(&self) -> Result<u32, DecodeError> {
        Ok(self.parts()?.mode)
    }

    /// Field 6: opaque attributes.
    pub fn attributes(&self) -> Result<&'a [u8], DecodeError> {
        Ok(self.parts()?.attributes)
    }

    /// Field 7: the extended attributes' entries `(key, value)` in wire order
    /// (a key repeated: the last one is what a full decode keeps).
    pub fn extended(&self) -> impl Iterator<Item = Result<(&'a str, &'a [u8]), DecodeError>> + 'a {
        Fields::new(self.bytes).filter_map(|field| match field {
            Err(e) => Some(Err(e)),
            Ok((7, Value::Bytes(entry))) => Some(map_entry(entry)),
            Ok((7, _)) => Some(Err(DecodeError::new("invalid wire type for a map entry"))),
            Ok(_) => None,
        })
    }
}

/// One `map<string, bytes>` entry: key (field 1), value (field 2).
fn map_entry(entry: &[u8]) -> Result<(&str, &[u8]), DecodeError> {
    Ok((string(last(entry, 1)?)?, bytes(last(entry, 2)?)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringfeed_proto::bytes::Bytes;
    use ringfeed_proto::prost::Message;
    use ringfeed_proto::v1::{Entry, Event};

    fn sample() -> Event {
        Event {
            directory: "/photos/2026".into(),
            old_entry: Some(Entry {
                name: "a.jpg".into(),
                size: 7,
                ..Default::default()
            }),
            new_entry: Some(Entry {
                name: "b.jpg".into(),
                is_directory: true,
                size: u64::MAX,
                mtime_ns: -5,
                mode: 0o644,
                attributes: Bytes::from_static(b"\x00\x01attr"),
                extended: [("k".to_owned(), Bytes::from_static(b"v"))].into(),
            }),
            new_parent_path: "/elsewhere".into(),
            signatures: vec![3, -1, 70000],
            seaweedfs: None,
        }
    }

    #[test]
    fn a_view_reads_what_a_full_decode_reads() {
        let event = sample();
        let bytes = event.encode_to_vec();
        let view = EventView::new(&bytes);
        assert!(view.canonical());
        assert_eq!(view.directory().unwrap(), event.directory);
        assert_eq!(view.new_parent_path().unwrap(), event.new_parent_path);
        let sigs: Vec<i32> = view.signatures().collect::<Result<_, _>>().unwrap();
        assert_eq!(sigs, event.signatures);
        for (view, entry) in [
            (
                view.old_entry().unwrap().unwrap(),
                event.old_entry.as_ref().unwrap(),
            ),
            (
                view.new_entry().unwrap().unwrap(),
                event.new_entry.as_ref().unwrap(),
            ),
        ] {
            assert_eq!(view.name().unwrap(), entry.name);
            assert_eq!(view.is_directory().unwrap(), entry.is_directory);
            assert_eq!(view.size().unwrap(), entry.size);
            assert_eq!(view.mtime_ns().unwrap(), entry.mtime_ns);
            assert_eq!(view.mode().unwrap(), entry.mode);
            assert_eq!(view.attributes().unwrap(), &entry.attributes[..]);
            let extended: Vec<(&str, &[u8])> = view.extended().collect::<Result<_, _>>().unwrap();
            let expected: Vec<(&str, &[u8])> = entry
                .extended
                .iter()
                .map(|(k, v)| (k.as_str(), &v[..]))
                .collect();
            assert_eq!(extended, expected);
        }
        let parts = view.parts().unwrap();
        assert!(parts.canonical);
        assert_eq!(parts.directory, event.directory);
        assert_eq!(parts.new_parent_path, event.new_parent_path);
        let sigs: Vec<i32> = parts.signatures().collect::<Result<_, _>>().unwrap();
        assert_eq!(sigs, event.signatures);
        for (parts, entry) in [
            (parts.old_entry.unwrap(), event.old_entry.as_ref().unwrap()),
            (parts.new_entry.unwrap(), event.new_entry.as_ref().unwrap()),
        ] {
            assert_eq!(parts.name, entry.name);
            assert_eq!(parts.is_directory, entry.is_directory);
            assert_eq!(
                (parts.size, parts.mtime_ns, parts.mode),
                (entry.size, entry.mtime_ns, entry.mode)
            );
            assert_eq!(parts.attributes, &entry.attributes[..]);
            assert_eq!(parts.has_extended, !entry.extended.is_empty());
        }
    }

    #[test]
    fn missing_fields_read_as_defaults_and_the_last_occurrence_wins() {
        let empty = EventView::new(&[]);
        assert_eq!(empty.directory().unwrap(), "");
        assert!(empty.new_entry().unwrap().is_none());
        assert_eq!(empty.signatures().count(), 0);
        // directory twice, then unknown field 15 (varint): last wins, unknown skipped.
        let mut bytes = Event {
            directory: "/a".into(),
            ..Default::default()
        }
        .encode_to_vec();
        bytes.extend(
            Event {
                directory: "/b".into(),
                ..Default::default()
            }
            .encode_to_vec(),
        );
        bytes.extend([15 << 3, 1]);
        let full = Event::decode(&bytes[..]).unwrap();
        let view = EventView::new(&bytes);
        assert_eq!(view.directory().unwrap(), full.directory);
        assert!(
            !view.canonical(),
            "a repeated singular field is not canonical"
        );
    }

    #[test]
    fn damaged_bytes_are_errors_not_panics() {
        let bytes = sample().encode_to_vec();
        for cut in 0..bytes.len() {
            let view = EventView::new(&bytes[..cut]);
            let _ = view.directory();
            let _ = view
                .new_entry()
                .map(|e| e.map(|e| (e.name(), e.attributes(), e.extended().count())));
            let _ = view.signatures().count();
            if Event::decode(&bytes[..cut]).is_err() {
                assert!(!view.canonical(), "cut at {cut}");
            }
        }
    }
}
