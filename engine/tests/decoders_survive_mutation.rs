//! Decoders under property-based fuzzing (issue 17): valid encodings of a
//! record, a chunk, a cursor and a segment header, mutated (bytes flipped,
//! cut, extended) and, where a checksum guards them, re-checksummed so the
//! mutation reaches the parser behind it. Every decoder returns a value or a
//! typed error, never panics; the readers that trust a verified chunk body
//! (`peek_header`, `peek_position`, `records`) survive a body that verified.
//! CI runs proptest's default cases; long mode: `PROPTEST_CASES=1000000
//! cargo test --release -p ringfeed-engine --test decoders_survive_mutation`.

use proptest::prelude::*;
use ringfeed_engine::chunk::{self, ChunkBuilder, CHUNK_HEADER_LEN};
use ringfeed_engine::record::{Kind, ProducerStamp, Record, Signatures};
use ringfeed_engine::segment::SegmentHeader;
use ringfeed_engine::{ClusterCursor, Cursor, GenerationStart, Generations};

mod fuzz_targets;
use fuzz_targets::{read_verified, rechecksum_chunk};
use ringfeed_testkit::mutation::{apply, edits};

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

/// A segment's first block, as a segment of shard 2 starts.
fn encode_segment_header() -> Vec<u8> {
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
    bytes
}

proptest! {
    #[test]
    fn a_mutated_record_decodes_or_is_refused(i in 0u64..1000, producer in any::<bool>(), e in edits(), recrc in any::<bool>()) {
        let mut bytes = encode_record(i, producer);
        apply(&mut bytes, &e);
        fuzz_targets::record(&stamped(recrc, bytes));
    }

    #[test]
    fn a_mutated_chunk_verifies_or_is_refused(count in 1u64..20, producer in any::<bool>(), e in edits(), recrc in any::<bool>()) {
        let mut bytes = encode_chunk(count, producer);
        apply(&mut bytes, &e);
        fuzz_targets::chunk(&stamped(recrc, bytes));
    }

    #[test]
    fn a_mutated_cursor_parses_or_is_refused(next in prop::collection::vec(any::<u64>(), 0..40), e in edits()) {
        let mut bytes = Cursor::new(next).to_bytes();
        apply(&mut bytes, &e);
        fuzz_targets::cursor(&bytes);
    }

    #[test]
    fn a_mutated_segment_header_decodes_or_is_refused(e in edits()) {
        let mut bytes = encode_segment_header();
        apply(&mut bytes, &e);
        fuzz_targets::segment_header(&bytes);
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

proptest! {
    /// Issue 36: every decoder of bytes found on disk, the generations file
    /// too. What decodes keeps its invariant (ordered entries).
    #[test]
    fn a_mutated_generations_file_decodes_or_is_refused(count in 1u32..40, e in edits(), recrc in any::<bool>()) {
        let mut bytes = encode_generations(count);
        apply(&mut bytes, &e);
        fuzz_targets::generations(&stamped(recrc, bytes));
    }

    #[test]
    fn arbitrary_bytes_as_a_generations_file(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        fuzz_targets::generations(&stamped(false, bytes));
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

/// A target's input: the checksum choice (see `fuzz_targets`), then `bytes`.
fn stamped(stamp: bool, bytes: Vec<u8>) -> Vec<u8> {
    let mut input = vec![u8::from(stamp)];
    input.extend(bytes);
    input
}

/// The checked-in corpus (`engine/fuzz/corpus/TARGET/`), every file
/// through its target: what the coverage-guided fuzzer found worth keeping
/// stays passing.
#[test]
fn the_fuzz_corpus_passes_every_target() {
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for (name, target) in fuzz_targets::TARGETS {
        let dir = corpus.join(name);
        let mut files = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            target(&std::fs::read(&path).unwrap());
            files += 1;
        }
        assert!(files > 0, "no corpus for {name} in {}", dir.display());
    }
}

/// The allocation bound can fail: a count read from the bytes that sized
/// an allocation before the bytes were checked would be caught.
#[test]
#[should_panic(expected = "allocated at the peak")]
fn an_allocation_past_the_bound_fails_a_target() {
    let counted = fuzz_targets::peak_allocated(|| drop(vec![0u8; 1 << 20]));
    assert!(
        counted >= 1 << 20,
        "the allocator counts nothing: {counted}"
    );
    fuzz_targets::bounded_for_test(&[0u8; 16], |_| {
        drop(std::hint::black_box(vec![0u8; 1 << 20]))
    });
}

/// Writes the seed files of the corpus (valid encodings of each target),
/// by hand when a format changes: `cargo test -p ringfeed-engine --test
/// decoders_survive_mutation -- --ignored write_the_seed_corpus`. The
/// fuzzer's own finds sit beside them.
#[test]
#[ignore = "writes engine/fuzz/corpus; run by hand"]
fn write_the_seed_corpus() {
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let write = |target: &str, name: &str, bytes: Vec<u8>| {
        let dir = corpus.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
    };
    write("record", "plain", stamped(true, encode_record(3, false)));
    write("record", "producer", stamped(true, encode_record(17, true)));
    write("chunk", "3", stamped(true, encode_chunk(3, true)));
    write("chunk", "12", stamped(true, encode_chunk(12, false)));
    write(
        "cursor",
        "node",
        Cursor::new(vec![5, 0, 1 << 40]).to_bytes(),
    );
    let mut cluster = ClusterCursor::new();
    cluster.set(1, Cursor::new(vec![7, 9]));
    cluster.set(3, Cursor::new(vec![0]));
    write("cursor", "cluster", cluster.to_bytes());
    write("segment_header", "plain", encode_segment_header());
    write("generations", "3", stamped(true, encode_generations(3)));
}
