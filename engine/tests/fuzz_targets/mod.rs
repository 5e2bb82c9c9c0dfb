//! The fuzz targets of the engine's decoders of untrusted bytes: one
//! function a target, taking any bytes. Shared by the coverage-guided
//! fuzzer (`engine/fuzz`, which includes this file by path) and by CI,
//! which runs every file of the checked-in corpus (`engine/fuzz/corpus/`)
//! through them in `decoders_survive_mutation`.
//!
//! A target fails (panics) when a decoder panics, or when a call allocates
//! more than [`allocation_bound`] of its input at its peak: a count read
//! from the bytes must never size an allocation before the bytes are
//! known to hold that many things.
//!
//! Where a checksum guards the bytes, the first byte of the input chooses
//! whether the target first stamps the right checksum over what follows
//! (odd) or takes the bytes as they are (even), so the fuzzer reaches the
//! parser behind the checksum as well as the checksum's own check.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ringfeed_engine::chunk::{self, ChunkHeader, CHUNK_HEADER_LEN};
use ringfeed_engine::record::{self, Record};
use ringfeed_engine::segment::SegmentHeader;
use ringfeed_engine::{ClusterCursor, Cursor, Generations};

/// Every target, by the name of its corpus folder.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("record", record),
    ("chunk", chunk),
    ("cursor", cursor),
    ("segment_header", segment_header),
    ("generations", generations),
];

/// The most a decoder may allocate at its peak for `input_len` bytes:
/// 16 KiB and four times the input (a decoded cursor or generations list
/// is a few words an entry, each read from at least four bytes).
pub fn allocation_bound(input_len: usize) -> usize {
    (16 << 10) + 4 * input_len
}

pub fn record(data: &[u8]) {
    let bytes = stamped(data, rechecksum_record);
    bounded("record", &bytes, |bytes| {
        let _ = Record::decode(bytes);
        let _ = record::peek_len(bytes);
        let _ = record::peek_header(bytes);
        let _ = record::peek_position(bytes);
        let _ = record::has_producer_stamp(bytes);
    });
}

pub fn chunk(data: &[u8]) {
    let bytes = stamped(data, rechecksum_chunk);
    bounded("chunk", &bytes, |bytes| {
        let _ = ChunkHeader::decode(bytes);
        read_verified(bytes);
    });
}

pub fn cursor(data: &[u8]) {
    bounded("cursor", data, |bytes| {
        let _ = Cursor::from_bytes(bytes);
        let _ = ClusterCursor::from_bytes(bytes);
    });
}

pub fn segment_header(data: &[u8]) {
    bounded("segment_header", data, |bytes| {
        let _ = SegmentHeader::decode(bytes);
    });
}

pub fn generations(data: &[u8]) {
    let bytes = stamped(data, rechecksum_generations);
    bounded("generations", &bytes, |bytes| {
        if let Ok(generations) = Generations::decode(bytes) {
            let entries = generations.entries();
            assert!(
                entries
                    .windows(2)
                    .all(|w| w[0].generation < w[1].generation),
                "decoded generations out of order: {entries:?}"
            );
        }
    });
}

/// The bytes after the checksum choice (the first byte), with the right
/// checksum stamped over them by `rechecksum` if the choice is odd.
fn stamped(data: &[u8], rechecksum: fn(&mut [u8])) -> Vec<u8> {
    let Some((first, rest)) = data.split_first() else {
        return Vec::new();
    };
    let mut bytes = rest.to_vec();
    if first & 1 == 1 {
        rechecksum(&mut bytes);
    }
    bytes
}

/// Runs `decode` on `bytes`, failing if it allocates past the bound.
fn bounded(target: &str, bytes: &[u8], decode: impl FnOnce(&[u8])) {
    let peak = peak_allocated(|| decode(bytes));
    let bound = allocation_bound(bytes.len());
    assert!(
        peak <= bound,
        "{target}: {peak} bytes allocated at the peak for {} bytes of input (bound {bound})",
        bytes.len()
    );
}

/// [`bounded`] for the test that shows the bound can fail.
pub fn bounded_for_test(bytes: &[u8], decode: impl FnOnce(&[u8])) {
    bounded("test", bytes, decode);
}

/// What a reader does with a chunk that verified: every record's header,
/// position and full decode.
pub fn read_verified(bytes: &[u8]) {
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

/// Re-checksums a record's header checksum (its first 8 bytes are the
/// length and the CRC of what follows), so a mutation gets past it.
pub fn rechecksum_record(bytes: &mut [u8]) {
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
pub fn rechecksum_chunk(bytes: &mut [u8]) {
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

/// Re-stamps a generations file's checksum over what its count says it holds.
pub fn rechecksum_generations(bytes: &mut [u8]) {
    let Some(count) = bytes.get(8..12) else {
        return;
    };
    let end = 12 + u32::from_le_bytes(count.try_into().unwrap()) as usize * 12;
    if end + 4 <= bytes.len() {
        let crc = crc32c::crc32c(&bytes[..end]);
        bytes[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// The allocator of a binary that runs these targets: the system's, with
/// each thread's live and peak bytes counted.
pub struct Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    // `try_with`: nothing is counted while a thread's locals are torn down.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize));
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as isize - layout.size() as isize);
        System.realloc(ptr, layout, new_size)
    }
}

/// The most `run` had allocated at once on this thread, beyond what was
/// live before it.
pub fn peak_allocated(run: impl FnOnce()) -> usize {
    let before = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(before));
    run();
    (PEAK.with(Cell::get) - before).max(0) as usize
}
