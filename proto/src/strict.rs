//! Strict wire checks: whether bytes are a message that every conformant
//! proto3 decoder reads the same way.
//!
//! ringfeed stores each event as its producer encoded it and sends those
//! bytes to every subscriber, so one producer's malformed event would reach
//! every reader. Decoders differ on malformed input: prost read a map field
//! sent with wire type 3 (start group) and never closed as the map, while
//! Python's protobuf refused the whole response carrying it ("Wire format
//! was corrupt"), so a Python subscriber failed at that event on every
//! reconnect, forever. What is checked here is what decoders may read
//! differently:
//!
//! - every field key is a varint of at most 10 bytes naming a field number
//!   in 1..=2^29-1 and one of the wire types 0, 1, 2, 5: groups (3, 4),
//!   deprecated and absent from proto3, are refused anywhere, unknown fields
//!   included, as are the undefined wire types 6 and 7;
//! - every value is whole: a varint of at most 10 bytes whose 10th byte is 0
//!   or 1 (no more than 64 bits), fixed values and lengths within the bytes;
//! - a field the schema knows has its type's wire type (a repeated scalar
//!   may also be packed, and then holds whole values only), its strings are
//!   UTF-8, and its messages (map entries too) pass the same checks, at most
//!   [`MAX_DEPTH`] deep.
//!
//! Unknown fields that are well formed pass: every decoder skips them alike,
//! and a producer on a newer schema keeps them. What decoders agree on by
//! the specification (the last of a repeated scalar wins, a repeated message
//! merges, an int32 keeps its low 32 bits, any nonzero bool is true, an
//! unknown enum value stays a number) is not refused.
//!
//! The rules come from the schema itself ([`crate::FILE_DESCRIPTOR_SET`]),
//! so a field added to `ringfeed.proto` is checked without a change here.

use std::collections::HashMap;
use std::fmt;
use std::sync::OnceLock;

use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::DescriptorProto;

use crate::schema::schema;

/// The stored message: `ringfeed.v1.Event`.
pub const EVENT: &str = "ringfeed.v1.Event";

/// Deepest nesting of messages checked (prost's and protobuf's own default
/// recursion limit).
pub const MAX_DEPTH: usize = 100;

/// Why bytes were refused: the field (a dotted path of field names from the
/// checked message, `#N` for a field the schema does not know; empty for the
/// message itself) and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub field: String,
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.field, self.reason)
        }
    }
}

impl std::error::Error for Refusal {}

/// Checks that `bytes` are a `message` (full name, e.g.
/// `"ringfeed.v1.Event"`) every conformant proto3 decoder reads alike.
///
/// # Panics
/// If `message` is not a message of the schema (a caller's mistake).
pub fn check(message: &str, bytes: &[u8]) -> Result<(), Refusal> {
    let rules = rules();
    let index = *rules
        .by_name
        .get(message.trim_start_matches('.'))
        .unwrap_or_else(|| panic!("{message} is not a message of ringfeed.proto or filer.proto"));
    check_at(rules, index, bytes)
}

/// [`check`] of a [`EVENT`], without looking its name up.
pub fn check_event(bytes: &[u8]) -> Result<(), Refusal> {
    static INDEX: OnceLock<usize> = OnceLock::new();
    let rules = rules();
    let index = *INDEX.get_or_init(|| rules.by_name[EVENT]);
    check_at(rules, index, bytes)
}

/// The fuzz target of the check (`engine/fuzz`, target `strict_event`;
/// CI runs its corpus in this module's tests): any bytes the check accepts
/// prost decodes as an event, and prost's encoding of that event passes
/// the check again. Panics otherwise.
pub fn fuzz_event(bytes: &[u8]) {
    use prost::Message;
    if check_event(bytes).is_err() {
        return;
    }
    let decoded = crate::v1::Event::decode(bytes)
        .unwrap_or_else(|e| panic!("accepted, but prost refuses it: {e}"));
    let again = decoded.encode_to_vec();
    if let Err(refusal) = check_event(&again) {
        panic!("prost's own encoding of an accepted event is refused: {refusal}");
    }
}

fn check_at(rules: &Rules, index: usize, bytes: &[u8]) -> Result<(), Refusal> {
    walk(rules, index, bytes, 1).map_err(|fault| Refusal {
        field: fault
            .path
            .iter()
            .rev()
            .map(|&(message, number)| match rules.field(message, number) {
                Some(field) => field.name.clone(),
                None => format!("#{number}"),
            })
            .collect::<Vec<_>>()
            .join("."),
        reason: fault.reason,
    })
}

/// Why a walk stopped, and the field it was in: the path is gathered as
/// the walk unwinds from the refusal (innermost field first), so an
/// accepted event costs no allocation for it. (Kept as the walk went, a
/// path cost a vector per event checked; naming each field as it was
/// walked cost more than the walk.)
struct Fault {
    reason: String,
    /// (message, field number), innermost first.
    path: Vec<(usize, u64)>,
}

impl Fault {
    fn new(reason: String) -> Fault {
        Fault {
            reason,
            path: Vec::new(),
        }
    }

    /// The fault, inside field `number` of message `message`.
    fn within(mut self, message: usize, number: u64) -> Fault {
        self.path.push((message, number));
        self
    }
}

/// The wire types of proto3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wire {
    Varint = 0,
    Fixed64 = 1,
    Len = 2,
    Fixed32 = 5,
}

impl Wire {
    fn name(self) -> &'static str {
        match self {
            Wire::Varint => "varint (0)",
            Wire::Fixed64 => "64-bit (1)",
            Wire::Len => "length-delimited (2)",
            Wire::Fixed32 => "32-bit (5)",
        }
    }
}

/// What a known field holds.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A number: its wire type.
    Scalar(Wire),
    String,
    Bytes,
    /// A message (or map entry): its index in [`Rules::messages`].
    Message(usize),
}

#[derive(Clone, Debug)]
struct Field {
    name: String,
    kind: Kind,
    repeated: bool,
}

/// The known fields of every message, compiled from the schema once.
struct Rules {
    /// Per message, its fields by number (`None` where it has none).
    messages: Vec<Vec<Option<Field>>>,
    by_name: HashMap<String, usize>,
}

impl Rules {
    fn field(&self, message: usize, number: u64) -> Option<&Field> {
        let number = usize::try_from(number).ok()?;
        self.messages[message].get(number)?.as_ref()
    }
}

fn rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(|| {
        let schema = schema();
        let mut names: Vec<&String> = schema.messages.keys().collect();
        names.sort();
        let by_name: HashMap<String, usize> = names
            .iter()
            .enumerate()
            .map(|(i, name)| ((*name).clone(), i))
            .collect();
        let messages = names
            .iter()
            .map(|name| compile(&schema.messages[*name], &by_name))
            .collect();
        Rules { messages, by_name }
    })
}

fn compile(message: &DescriptorProto, by_name: &HashMap<String, usize>) -> Vec<Option<Field>> {
    let mut fields: Vec<Option<Field>> = Vec::new();
    for f in &message.field {
        let number = f.number() as usize;
        let kind =
            match f.r#type() {
                Type::Double | Type::Fixed64 | Type::Sfixed64 => Kind::Scalar(Wire::Fixed64),
                Type::Float | Type::Fixed32 | Type::Sfixed32 => Kind::Scalar(Wire::Fixed32),
                Type::Int64
                | Type::Uint64
                | Type::Int32
                | Type::Bool
                | Type::Uint32
                | Type::Enum
                | Type::Sint32
                | Type::Sint64 => Kind::Scalar(Wire::Varint),
                Type::String => Kind::String,
                Type::Bytes => Kind::Bytes,
                Type::Message => {
                    let name = f.type_name().trim_start_matches('.');
                    Kind::Message(*by_name.get(name).unwrap_or_else(|| {
                        panic!("{}: message {name} is not in the schema", f.name())
                    }))
                }
                Type::Group => panic!("{}: groups are not proto3", f.name()),
            };
        if fields.len() <= number {
            fields.resize(number + 1, None);
        }
        fields[number] = Some(Field {
            name: f.name().to_owned(),
            kind,
            repeated: f.label() == Label::Repeated,
        });
    }
    fields
}

/// Checks the fields of message `index` in `bytes`.
fn walk(rules: &Rules, index: usize, mut bytes: &[u8], depth: usize) -> Result<(), Fault> {
    if depth > MAX_DEPTH {
        return Err(Fault::new(format!(
            "messages nested more than {MAX_DEPTH} deep"
        )));
    }
    while !bytes.is_empty() {
        let key = varint(&mut bytes).map_err(|e| Fault::new(format!("a field key {e}")))?;
        let number = key >> 3;
        if number == 0 || number > (1 << 29) - 1 {
            return Err(Fault::new(format!(
                "field number {number} is outside 1..=536870911"
            )));
        }
        let field = rules.field(index, number);
        // From here a refusal is in this field.
        let refused = |reason: String| Fault::new(reason).within(index, number);
        let wire = match key & 7 {
            0 => Wire::Varint,
            1 => Wire::Fixed64,
            2 => Wire::Len,
            5 => Wire::Fixed32,
            3 | 4 => {
                return Err(refused(format!(
                    "wire type {} (a group) is refused: groups are not proto3, and decoders \
                     read them differently",
                    key & 7
                )))
            }
            other => return Err(refused(format!("wire type {other} does not exist"))),
        };
        let value = match wire {
            Wire::Varint => {
                varint(&mut bytes).map_err(refused)?;
                &[][..]
            }
            Wire::Fixed64 => take(&mut bytes, 8).map_err(refused)?,
            Wire::Fixed32 => take(&mut bytes, 4).map_err(refused)?,
            Wire::Len => {
                let len = varint(&mut bytes).map_err(|e| refused(format!("a length {e}")))?;
                let len = usize::try_from(len)
                    .map_err(|_| refused("a length past the end".to_owned()))?;
                take(&mut bytes, len).map_err(refused)?
            }
        };
        if let Some(field) = field {
            known(rules, field, wire, value, depth).map_err(|f| f.within(index, number))?;
        }
    }
    Ok(())
}

/// Checks one value of a known field: its wire type, and what it holds.
fn known(
    rules: &Rules,
    field: &Field,
    wire: Wire,
    value: &[u8],
    depth: usize,
) -> Result<(), Fault> {
    let expected = match field.kind {
        Kind::Scalar(w) => w,
        Kind::String | Kind::Bytes | Kind::Message(_) => Wire::Len,
    };
    match (field.kind, wire) {
        (Kind::Scalar(_), w) if w == expected => Ok(()),
        // A repeated number may be packed: whole values back to back.
        (Kind::Scalar(w), Wire::Len) if field.repeated => {
            let mut packed = value;
            while !packed.is_empty() {
                match w {
                    Wire::Varint => varint(&mut packed).map(drop),
                    Wire::Fixed64 => take(&mut packed, 8).map(drop),
                    Wire::Fixed32 => take(&mut packed, 4).map(drop),
                    Wire::Len => unreachable!("a scalar is never length-delimited"),
                }
                .map_err(Fault::new)?;
            }
            Ok(())
        }
        (Kind::String, Wire::Len) => std::str::from_utf8(value)
            .map(drop)
            .map_err(|e| Fault::new(format!("not UTF-8 ({e})"))),
        (Kind::Bytes, Wire::Len) => Ok(()),
        (Kind::Message(index), Wire::Len) => walk(rules, index, value, depth + 1),
        _ => Err(Fault::new(format!(
            "wire type {} where its type needs {}",
            wire.name(),
            expected.name()
        ))),
    }
}

fn varint(bytes: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for i in 0..10 {
        let Some(&b) = bytes.get(i) else {
            return Err("is cut off (a varint runs past the end)".into());
        };
        if i == 9 && b > 1 {
            return Err("is a varint of more than 64 bits".into());
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Ok(value);
        }
    }
    Err("is a varint longer than 10 bytes".into())
}

fn take<'a>(bytes: &mut &'a [u8], len: usize) -> Result<&'a [u8], String> {
    if bytes.len() < len {
        return Err(format!(
            "{len} bytes are announced but only {} are left",
            bytes.len()
        ));
    }
    let (value, rest) = bytes.split_at(len);
    *bytes = rest;
    Ok(value)
}

/// Edits of valid encodings shared by the fuzzing tests.
#[cfg(test)]
use ringfeed_testkit::mutation;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1;
    use prost::Message as _;

    fn hex(text: &str) -> Vec<u8> {
        text.split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect()
    }

    #[test]
    fn a_valid_event_passes_with_its_unknown_fields() {
        let event = v1::Event {
            directory: "/d".into(),
            new_entry: Some(v1::Entry {
                name: "f".into(),
                size: 7,
                extended: [("user.k".to_owned(), b"v".to_vec().into())].into(),
                ..Default::default()
            }),
            signatures: vec![1, -2, 300],
            ..Default::default()
        };
        let mut bytes = event.encode_to_vec();
        check(EVENT, &bytes).unwrap();
        // Unknown fields of every valid wire type.
        bytes.extend(hex(
            "b0 06 05  b9 06 01 02 03 04 05 06 07 08  c2 06 02 61 62  cd 06 01 02 03 04",
        ));
        check(EVENT, &bytes).unwrap();
        // Signatures unpacked (each its own varint) are valid too.
        check(EVENT, &hex("28 01 28 02")).unwrap();
    }

    #[test]
    fn the_poison_event_of_issue_36_is_refused() {
        // new_entry.extended (7, a map) sent as wire type 3 and never closed.
        let request =
            hex("0a 18 0a 03 2f 66 7a 1a 11 0a 02 6f 6b 3b 0b 0a 06 75 73 65 72 2e 6b 12 01 76");
        let event = &request[2..];
        let refusal = check(EVENT, event).unwrap_err();
        assert_eq!(refusal.field, "new_entry.extended");
        assert!(refusal.reason.contains("wire type 3"), "{refusal}");
        // prost reads it anyway: what the check is for.
        assert!(v1::Event::decode(event).is_ok());
    }

    #[test]
    fn malformed_bytes_are_refused_naming_the_field() {
        for (bytes, field, reason) in [
            ("0b", "directory", "wire type 3"),
            ("0a 02 ff fe", "directory", "not UTF-8"),
            ("0a 05 61", "directory", "5 bytes are announced"),
            (
                "08 01",
                "directory",
                "wire type varint (0) where its type needs length-delimited",
            ),
            ("1a 01 10", "new_entry.is_directory", "cut off"),
            ("1a 03 18 80 80", "new_entry.size", "cut off"),
            (
                "28 ff ff ff ff ff ff ff ff ff 02",
                "signatures",
                "more than 64 bits",
            ),
            ("2a 02 01 80", "signatures", "cut off"),
            ("2d 00 00 00 00", "signatures", "wire type 32-bit (5)"),
            ("07", "", "field number 0"),
            ("f9 07 00", "#127", "8 bytes are announced"),
            ("1a 04 3a 02 0c 00", "new_entry.extended.key", "wire type 4"),
            ("1e", "new_entry", "wire type 6 does not exist"),
            ("fa ff ff ff ff 0f", "", "field number"),
        ] {
            let refused = check(EVENT, &hex(bytes));
            let Err(refusal) = refused else {
                panic!("{bytes}: accepted");
            };
            assert_eq!(refusal.field, field, "{bytes}: {refusal}");
            assert!(refusal.reason.contains(reason), "{bytes}: {refusal}");
        }
    }

    #[test]
    fn nesting_is_bounded() {
        // Unknown fields are not walked into, so no message of the schema
        // nests deeper than it declares: the bound is checked on a walk.
        let rules = rules();
        let entry = rules.by_name["ringfeed.v1.Entry"];
        assert!(walk(rules, entry, &[], MAX_DEPTH + 1).is_err());
        assert!(walk(rules, entry, &[], MAX_DEPTH).is_ok());
    }

    mod fuzz {
        //! The check under property-based fuzzing (issue 36): arbitrary
        //! bytes, and valid events with bytes set, flipped, inserted or cut.
        //! It never panics, and what it accepts prost decodes, and prost's
        //! encoding of that passes again: the check is never looser than
        //! the decoder the server reads events with. CI runs proptest's
        //! default cases; long mode: `PROPTEST_CASES=1000000 cargo test
        //! --release -p ringfeed-proto --lib strict`.
        use super::super::*;
        use crate::v1;
        use proptest::collection::vec;
        use proptest::prelude::*;
        use prost::Message as _;

        fn event(i: u8, extended: bool) -> Vec<u8> {
            v1::Event {
                directory: format!("/d/{i}"),
                old_entry: i.is_multiple_of(3).then(|| v1::Entry {
                    name: "old".into(),
                    ..Default::default()
                }),
                new_entry: Some(v1::Entry {
                    name: format!("n{i}é"),
                    size: u64::from(i) << 40,
                    mtime_ns: -i64::from(i),
                    attributes: vec![i; usize::from(i % 9)].into(),
                    extended: if extended {
                        [("user.a".to_owned(), vec![i].into())].into()
                    } else {
                        Default::default()
                    },
                    ..Default::default()
                }),
                signatures: vec![i32::from(i), -1],
                ..Default::default()
            }
            .encode_to_vec()
        }

        /// The checked-in corpus of the fuzz target, every file.
        #[test]
        fn the_fuzz_corpus_passes() {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../engine/fuzz/corpus/strict_event");
            let mut files = 0;
            for entry in std::fs::read_dir(&dir).unwrap() {
                fuzz_event(&std::fs::read(entry.unwrap().path()).unwrap());
                files += 1;
            }
            assert!(files > 0, "no corpus in {}", dir.display());
        }

        /// Writes the corpus's seed files (valid events), by hand:
        /// `cargo test -p ringfeed-proto -- --ignored write_the_seed_corpus`.
        #[test]
        #[ignore = "writes engine/fuzz/corpus; run by hand"]
        fn write_the_seed_corpus() {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../engine/fuzz/corpus/strict_event");
            std::fs::create_dir_all(&dir).unwrap();
            for (i, extended) in [(3, false), (200, true)] {
                std::fs::write(dir.join(format!("seed-{i}")), event(i, extended)).unwrap();
            }
        }

        proptest! {
            #[test]
            fn arbitrary_bytes(bytes in vec(any::<u8>(), 0..256)) {
                fuzz_event(&bytes);
            }

            #[test]
            fn mutated_events(
                i in any::<u8>(),
                extended in any::<bool>(),
                edits in crate::strict::mutation::edits(),
            ) {
                let mut bytes = event(i, extended);
                crate::strict::mutation::apply(&mut bytes, &edits);
                fuzz_event(&bytes);
            }
        }
    }
}
