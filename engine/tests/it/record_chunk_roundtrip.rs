//! Records and chunks round-trip for random paths, signatures and payloads
//! (empty payloads and maximum-length paths included), and no decoder panics
//! on arbitrary bytes.

use proptest::prelude::*;
use ringfeed_engine::chunk::{self, ChunkBuilder, ChunkHeader};
use ringfeed_engine::record::{Kind, ProducerStamp, Record, Signatures, MAX_PATH_LEN};
use ringfeed_engine::segment::SegmentHeader;

#[derive(Clone, Debug)]
struct Owned {
    kind: Kind,
    signatures: Vec<i32>,
    directory: String,
    old_name: String,
    new_name: String,
    new_parent: String,
    payload: Vec<u8>,
    producer: Option<ProducerStamp>,
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        "/[a-z0-9/_.é-]{0,40}",
        // Maximum length, including multi-byte characters at the edge.
        Just(format!("/{}", "p".repeat(MAX_PATH_LEN - 1))),
        Just(format!("/{}é", "q".repeat(MAX_PATH_LEN - 3))),
    ]
}

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_.ü-]{1,30}"
}

fn owned() -> impl Strategy<Value = Owned> {
    (
        0..4u8,
        prop::collection::vec(any::<i32>(), 0..8),
        path(),
        name(),
        name(),
        prop_oneof![Just(String::new()), path()],
        prop_oneof![Just(Vec::new()), prop::collection::vec(any::<u8>(), 0..300)],
        prop::option::of((any::<u64>(), any::<u64>())),
    )
        .prop_map(
            |(k, signatures, directory, old, new, parent, payload, producer)| {
                let (kind, old_name, new_name, new_parent) = match k {
                    0 => (Kind::Create, String::new(), new, String::new()),
                    1 => (Kind::Delete, old, String::new(), String::new()),
                    2 => (Kind::Update, old.clone(), old, String::new()),
                    _ => {
                        let new = if new == old { format!("{new}2") } else { new };
                        (Kind::Rename, old, new, parent)
                    }
                };
                Owned {
                    kind,
                    signatures,
                    directory,
                    old_name,
                    new_name,
                    new_parent,
                    payload,
                    producer: producer.map(|(producer_id, sequence)| ProducerStamp {
                        producer_id,
                        sequence,
                    }),
                }
            },
        )
}

fn view(o: &Owned, offset: u64, ts: i64) -> Record<'_> {
    Record {
        ts,
        offset,
        kind: o.kind,
        signatures: Signatures::new(&o.signatures),
        directory: &o.directory,
        old_name: &o.old_name,
        new_name: &o.new_name,
        new_parent: &o.new_parent,
        payload: &o.payload,
        producer: o.producer,
    }
}

fn assert_same(a: &Record<'_>, b: &Record<'_>) {
    assert_eq!((a.ts, a.offset, a.kind), (b.ts, b.offset, b.kind));
    assert_eq!(
        a.signatures.iter().collect::<Vec<_>>(),
        b.signatures.iter().collect::<Vec<_>>()
    );
    assert_eq!(
        (a.directory, a.old_name, a.new_name, a.new_parent),
        (b.directory, b.old_name, b.new_name, b.new_parent)
    );
    assert_eq!((a.payload, a.producer), (b.payload, b.producer));
}

proptest! {
    #[test]
    fn record_round_trips(o in owned(), offset in any::<u64>(), ts in any::<i64>()) {
        let rec = view(&o, offset, ts);
        let mut buf = vec![0xAAu8; rec.encoded_len() + 3];
        let n = rec.encode_into(&mut buf).unwrap();
        prop_assert_eq!(n, rec.encoded_len());
        let (back, used) = Record::decode(&buf).unwrap();
        prop_assert_eq!(used, n);
        assert_same(&rec, &back);
    }

    /// A record framed unstamped (after other bytes) and stamped in place is
    /// byte for byte the record encoded with that offset and stamp.
    #[test]
    fn framed_then_stamped_equals_encoded(o in owned(), offset in any::<u64>(), ts in any::<i64>(), before in 0usize..9) {
        let mut framed = vec![0x55u8; before];
        let n = view(&o, 0, 0).frame_unstamped(&mut framed).unwrap();
        prop_assert_eq!(framed.len(), before + n);
        ringfeed_engine::record::restamp(&mut framed[before..], offset, ts);
        let rec = view(&o, offset, ts);
        let mut encoded = vec![0u8; rec.encoded_len()];
        rec.encode_into(&mut encoded).unwrap();
        prop_assert_eq!(&framed[before..], &encoded[..]);
    }

    #[test]
    fn chunk_round_trips(records in prop::collection::vec(owned(), 1..12), first in 0u64..1 << 40, shard in any::<u32>()) {
        let capacity: usize = 64 + records.iter().map(|o| view(o, 0, 0).encoded_len()).sum::<usize>();
        let mut builder = ChunkBuilder::new(vec![0u8; capacity.next_multiple_of(512)], shard, first);
        for (i, o) in records.iter().enumerate() {
            builder.push(&view(o, first + i as u64, 10 + i as i64 * 3)).unwrap();
        }
        let (buf, header, disk_len) = builder.finish(4096, 512);
        prop_assert_eq!(disk_len % 512, 0);
        prop_assert_eq!(chunk::verify(&buf[..disk_len]).unwrap(), header);
        let body = chunk::body_of(&buf, &header).unwrap();
        let back: Vec<_> = chunk::records(body).map(|r| r.unwrap()).collect();
        prop_assert_eq!(back.len(), records.len());
        for (i, (o, b)) in records.iter().zip(&back).enumerate() {
            assert_same(&view(o, first + i as u64, 10 + i as i64 * 3), b);
        }
    }

    #[test]
    fn decoders_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = Record::decode(&bytes);
        let _ = ChunkHeader::decode(&bytes);
        let _ = chunk::verify(&bytes);
        let _ = SegmentHeader::decode(&bytes);
        for rec in chunk::records(&bytes) {
            let _ = rec;
        }
    }

    /// Valid framing with garbage inside: lengths and counts that lie.
    #[test]
    fn decoders_never_panic_on_plausible_headers(mut bytes in prop::collection::vec(any::<u8>(), 34..600), len in 0u32..700) {
        bytes[0..4].copy_from_slice(&len.to_le_bytes());
        let crc = crc32c::crc32c(&bytes[8..(len as usize).clamp(8, bytes.len())]);
        bytes[4..8].copy_from_slice(&crc.to_le_bytes());
        let _ = Record::decode(&bytes);
        let mut chunk_bytes = vec![0u8; 64];
        chunk_bytes[0..4].copy_from_slice(b"RFCK");
        chunk_bytes.extend_from_slice(&bytes);
        let _ = chunk::verify(&chunk_bytes);
    }
}
