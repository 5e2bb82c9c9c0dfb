//! Decoders under property-based fuzzing (issue 17): valid encodings of a
//! record, a chunk, a cursor and a segment header, mutated (bytes flipped,
//! cut, extended) and, where a checksum guards them, re-checksummed so the
//! mutation reaches the parser behind it. Every decoder returns a value or a
//! typed error, never panics; the readers that trust a verified chunk body
//! (`peek_header`, `peek_position`, `records`) survive a body that verified.
//! CI runs proptest's default cases; long mode: `PROPTEST_CASES=1000000
//! cargo test --release -p ringfeed-engine --test decoders_survive_mutation`.

use proptest::prelude::*;
use ringfeed_engine::chunk::{self, ChunkBuilder, ChunkHeader, CHUNK_HEADER_LEN};
use ringfeed_engine::record::{self, Kind, ProducerStamp, Record, Signatures};
use ringfeed_engine::segment::SegmentHeader;
use ringfeed_engine::{Cursor, GenerationStart, Generations};

mod mutation;
use mutation::{apply, edits};

fn sample(i: u64, producer: bool) -> (String, String, Vec<u8>, Option<ProducerStamp>) {
    (
        format!("/dir/{}", i % 7),
        format!("name-{i}"),
        vec![i as u8; (i % 40) as usize],
        producer.then_some(ProducerStamp {
            producer_id: 9,
            sequence: i,
        }),
    )
}

fn encode_record(i: u64, producer: bool) -> Vec<u8> {
    let (dir, name, payload, stamp) = sample(i, producer);
    let rec = Record {
        ts: 1_000 + i as i64,
        offset: i,
        kind: Kind::Update,
        signatures: Signatures::new(&[1, -2]),
        directory: &dir,
        old_name: &name,
        new_name: &name,
        new_parent: "",
        payload: &payload,
        producer: stamp,
    };
    let mut out = vec![0u8; rec.encoded_len()];
    rec.encode_into(&mut out).unwrap();
    out
}

/// A valid chunk of `count` records, its buffer starting at the header.
fn encode_chunk(count: u64, producer: bool) -> Vec<u8> {
    let mut builder = ChunkBuilder::new(vec![0u8; 64 << 10], 3, 100);
    for i in 0..count {
        let (dir, name, payload, stamp) = sample(100 + i, producer);
        let rec = Record {
            ts: 5_000 + i as i64,
            offset: 100 + i,
            kind: Kind::Create,
            signatures: Signatures::new(&[]),
            directory: &dir,
            old_name: "",
            new_name: &name,
            new_parent: "",
            payload: &payload,
            producer: stamp,
        };
        builder.push(&rec).unwrap();
    }
    let (buf, _, disk_len) = builder.finish(0, 512);
    buf[..disk_len].to_vec()
}

/// Re-checksums a record's header checksum (its first 8 bytes are the
/// length and the CRC of what follows), so a mutation gets past it.
fn rechecksum_record(bytes: &mut [u8]) {
    if bytes.len() < 8 {
        return;
    }
    let len = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    let end = len.clamp(8, bytes.len());
    let crc = crc32c::crc32c(&bytes[8..end]);
    bytes[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Re-checksums a chunk: the body CRC and the header's own, keeping the
/// header's body length as mutated.
fn rechecksum_chunk(bytes: &mut [u8]) {
    if bytes.len() < CHUNK_HEADER_LEN {
        return;
    }
    let body_len = u32::from_le_bytes(bytes[40..44].try_into().unwrap()) as usize;
    let end = (CHUNK_HEADER_LEN + body_len).min(bytes.len());
    let body_crc = crc32c::crc32c(&bytes[CHUNK_HEADER_LEN..end]);
    bytes[44..48].copy_from_slice(&body_crc.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..60]);
    bytes[60..64].copy_from_slice(&crc.to_le_bytes());
}

/// What a reader does with a chunk that verified: every record's header,
/// position and full decode.
fn read_verified(bytes: &[u8]) {
    let Ok(header) = chunk::verify(bytes) else {
        return;
    };
    let Ok(body) = chunk::body_of(bytes, &header) else {
        return;
    };
    let mut at = 0;
    while at < body.len() {
        let Ok(h) = record::peek_header(&body[at..]) else {
            break;
        };
        let _ = record::peek_position(&body[at..]);
        let _ = h.has_signature(1);
        at += h.len.max(1);
    }
    for rec in chunk::records(body) {
        let _ = rec;
    }
}

proptest! {
    #[test]
    fn a_mutated_record_decodes_or_is_refused(i in 0u64..1000, producer in any::<bool>(), e in edits(), recrc in any::<bool>()) {
        let mut bytes = encode_record(i, producer);
        apply(&mut bytes, &e);
        if recrc {
            rechecksum_record(&mut bytes);
        }
        let _ = Record::decode(&bytes);
        let _ = record::peek_len(&bytes);
        let _ = record::peek_header(&bytes);
        let _ = record::peek_position(&bytes);
        let _ = record::has_producer_stamp(&bytes);
    }

    #[test]
    fn a_mutated_chunk_verifies_or_is_refused(count in 1u64..20, producer in any::<bool>(), e in edits(), recrc in any::<bool>()) {
        let mut bytes = encode_chunk(count, producer);
        apply(&mut bytes, &e);
        if recrc {
            rechecksum_chunk(&mut bytes);
        }
        let _ = ChunkHeader::decode(&bytes);
        read_verified(&bytes);
    }

    #[test]
    fn a_mutated_cursor_parses_or_is_refused(next in prop::collection::vec(any::<u64>(), 0..40), e in edits()) {
        let mut bytes = Cursor::new(next).to_bytes();
        apply(&mut bytes, &e);
        let _ = Cursor::from_bytes(&bytes);
    }

    #[test]
    fn a_mutated_segment_header_decodes_or_is_refused(e in edits()) {
        let header = SegmentHeader {
            shard: 2,
            alignment: 4096,
            first_offset: 4096,
            created_ns: 1,
            segment_bytes: 1 << 20,
            max_unsynced_bytes: 64 << 10,
        };
        let mut bytes = vec![0u8; 4096];
        header.encode(&mut bytes);
        apply(&mut bytes, &e);
        let _ = SegmentHeader::decode(&bytes);
    }
}

/// A generations file (`DATA/shard-NNN/generations`, read at every open)
/// of `count` entries.
fn encode_generations(count: u32) -> Vec<u8> {
    let entries = (0..count)
        .map(|g| GenerationStart {
            generation: g + 1,
            first_offset: u64::from(g) * 1000,
        })
        .collect();
    Generations::from_entries(entries).unwrap().encode(512)
}

/// Re-stamps a generations file's checksum over what its count says it holds.
fn rechecksum_generations(bytes: &mut [u8]) {
    let Some(count) = bytes.get(8..12) else {
        return;
    };
    let end = 12 + u32::from_le_bytes(count.try_into().unwrap()) as usize * 12;
    if end + 4 <= bytes.len() {
        let crc = crc32c::crc32c(&bytes[..end]);
        bytes[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

proptest! {
    /// Issue 36: every decoder of bytes found on disk, the generations file
    /// too. What decodes keeps its invariant (ordered entries).
    #[test]
    fn a_mutated_generations_file_decodes_or_is_refused(count in 1u32..40, e in edits(), recrc in any::<bool>()) {
        let mut bytes = encode_generations(count);
        apply(&mut bytes, &e);
        if recrc {
            rechecksum_generations(&mut bytes);
        }
        if let Ok(generations) = Generations::decode(&bytes) {
            let entries = generations.entries();
            prop_assert!(entries.windows(2).all(|w| w[0].generation < w[1].generation));
        }
    }

    #[test]
    fn arbitrary_bytes_as_a_generations_file(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = Generations::decode(&bytes);
    }
}

/// The mutations above reach past the checksums: a fixed sample of
/// single-byte edits of a chunk body, re-checksummed, must verify sometimes
/// (an edit in a payload) and fail sometimes (an edit in a record header),
/// or the properties would only ever exercise the checksum comparison.
#[test]
fn mutations_reach_the_parsers_behind_the_checksums() {
    let clean = encode_chunk(12, true);
    let body_len = u32::from_le_bytes(clean[40..44].try_into().unwrap()) as usize;
    let (mut verified, mut refused) = (0, 0);
    for i in 0..body_len {
        let mut bytes = clean.clone();
        bytes[CHUNK_HEADER_LEN + i] ^= 0x5A;
        rechecksum_chunk(&mut bytes);
        match chunk::verify(&bytes) {
            Ok(_) => {
                verified += 1;
                read_verified(&bytes);
            }
            Err(_) => refused += 1,
        }
    }
    assert!(
        verified > 0 && refused > 0,
        "verified {verified}, refused {refused}"
    );
}
