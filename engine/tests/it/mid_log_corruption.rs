//! A damaged chunk followed by valid chunks that prove it had been synced is
//! reported as corruption naming the segment and position; nothing after it is
//! silently dropped.

use crate::common::*;
use ringfeed_engine::storage::{block_on, MemStorage};
use ringfeed_engine::RecoveryError;

fn synced_log(chunks: u64) -> (MemStorage, Vec<(String, u64)>) {
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(async {
        for _ in 0..chunks {
            append_records(&mut log, 4, 4).await.unwrap();
            log.sync().await.unwrap();
        }
    });
    let positions = log
        .chunks()
        .map(|c| {
            (
                ringfeed_engine::segment::segment_name(c.segment),
                c.entry.position,
            )
        })
        .collect();
    drop(log);
    (storage, positions)
}

fn assert_corruption_at(storage: &MemStorage, segment: &str, position: u64) {
    match open_mem(storage, small_config()) {
        Err(RecoveryError::Corruption {
            segment: s,
            position: p,
            ..
        }) => {
            assert_eq!((s.as_str(), p), (segment, position));
        }
        Err(other) => panic!("expected corruption at {segment}:{position}, got {other}"),
        Ok((log, _)) => panic!(
            "corruption at {segment}:{position} went unreported; log opened with {} records",
            log.next_offset()
        ),
    }
}

#[test]
fn bit_flip_mid_segment_is_corruption() {
    let (storage, chunks) = synced_log(8);
    for (segment, position) in chunks.iter().take(7) {
        for at in [5usize, 40, 70, 100] {
            let damaged = MemStorage::new();
            damaged.set_file_bytes(segment, storage.file_bytes(segment).unwrap());
            damaged.flip_bit(segment, *position as usize + at, 2);
            assert_corruption_at(&damaged, segment, *position);
        }
    }
}

#[test]
fn bit_flip_in_an_older_segment_is_corruption() {
    // Enough chunks to fill several 64 KiB segments.
    let (storage, chunks) = synced_log(400);
    let segments: std::collections::BTreeSet<_> = chunks.iter().map(|c| c.0.clone()).collect();
    assert!(segments.len() >= 3, "the workload rotates");
    let first = segments.iter().next().unwrap();
    // The last chunk of the first segment: only the successor proves it was synced.
    let (segment, position) = chunks.iter().rfind(|c| &c.0 == first).unwrap().clone();
    storage.flip_bit(&segment, position as usize + 80, 0);
    assert_corruption_at(&storage, &segment, position);
}

#[test]
fn damage_to_the_last_chunk_after_a_clean_close_is_corruption() {
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(append_records(&mut log, 12, 4)).unwrap();
    let last = log.chunks().last().unwrap();
    block_on(log.close()).unwrap();
    let segment = ringfeed_engine::segment::segment_name(last.segment);
    storage.flip_bit(&segment, last.entry.position as usize + 90, 1);
    assert_corruption_at(&storage, &segment, last.entry.position);
}

#[test]
fn a_clean_close_reopens_as_clean() {
    let storage = MemStorage::new();
    let (mut log, _) = open_mem(&storage, small_config()).unwrap();
    block_on(append_records(&mut log, 12, 4)).unwrap();
    block_on(log.close()).unwrap();
    let (mut log, report) = open_mem(&storage, small_config()).unwrap();
    assert!(report.clean_close && report.truncated.is_none());
    block_on(append_records(&mut log, 3, 3)).unwrap();
    block_on(log.close()).unwrap();
    assert_records(
        &reopen_and_read(&storage, small_config()),
        &expected(0..15),
        "after two clean closes",
    );
}

/// Every chunk of `synced_log`: (segment, position, disk length, offsets).
fn chunk_map(storage: &MemStorage) -> Vec<(String, u64, u64, std::ops::Range<u64>)> {
    let (log, _) = open_mem(storage, small_config()).unwrap();
    log.chunks()
        .map(|c| {
            (
                ringfeed_engine::segment::segment_name(c.segment),
                c.entry.position,
                u64::from(c.entry.disk_len),
                c.entry.first_offset..c.entry.first_offset + u64::from(c.entry.record_count),
            )
        })
        .collect()
}

/// Every file's bytes, to see that a dry run changes nothing.
fn snapshot(storage: &MemStorage) -> Vec<(String, Vec<u8>)> {
    let mut names = storage.names();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let bytes = storage.file_bytes(&n).unwrap();
            (n, bytes)
        })
        .collect()
}

/// `ringfeed repair` (issue 36) on logs damaged at random (seeded: a flipped
/// bit, a zeroed 4 KiB block, or up to 200 random bytes, anywhere in the
/// chunks of a 1,600-event log over several segments): the dry run reports
/// and changes nothing; the repair keeps every event but those of the
/// chunks the damage touched, in order, once, with their stamps, renumbered
/// densely under a new generation; the log then opens; a second repair
/// finds nothing. `RINGFEED_REPAIR_ROUNDS` rounds (default 12; 50 by hand).
#[test]
fn repair_keeps_every_event_but_the_damaged_chunks() {
    use ringfeed_engine::repair::repair_shard;
    let rounds: u64 = std::env::var("RINGFEED_REPAIR_ROUNDS").map_or(12, |n| n.parse().unwrap());
    let (pristine, _) = synced_log(400);
    let chunks = chunk_map(&pristine);
    let total = chunks.last().unwrap().3.end;
    let (mut repaired, mut harmless) = (0, 0);
    for round in 0..rounds {
        let mut rng = Rng::new(round * 7919 + 17);
        let storage = MemStorage::new();
        for (name, bytes) in snapshot(&pristine) {
            storage.set_file_bytes(&name, bytes);
        }
        // Somewhere in the chunks of any segment but in its header block.
        let (segment, position, len, _) = &chunks[rng.below(chunks.len() as u64) as usize];
        let at = position + rng.below(*len);
        let mut bytes = storage.file_bytes(segment).unwrap();
        let damaged = match rng.below(3) {
            0 => {
                bytes[at as usize] ^= 1 << rng.below(8);
                at..at + 1
            }
            1 => {
                let block = at / 4096 * 4096;
                let block = block.max(4096);
                bytes[block as usize..block as usize + 4096].fill(0);
                block..block + 4096
            }
            _ => {
                let n = 1 + rng.below(200);
                for b in &mut bytes[at as usize..(at + n) as usize] {
                    *b = rng.next() as u8;
                }
                at..at + n
            }
        };
        // The chunks the damage broke: it touched them and they no longer
        // verify (bytes in a chunk's alignment padding are not its data).
        let lost: Vec<u64> = chunks
            .iter()
            .filter(|(s, p, l, _)| {
                s == segment
                    && *p < damaged.end
                    && damaged.start < p + l
                    && ringfeed_engine::chunk::verify(&bytes[*p as usize..(p + l) as usize])
                        .is_err()
            })
            .flat_map(|c| c.3.clone())
            .collect();
        storage.set_file_bytes(segment, bytes);
        if open_mem(&storage, small_config()).is_ok() {
            // The damage changed nothing a chunk holds (e.g. the same bit
            // set twice by random bytes, or zero padding).
            harmless += 1;
            continue;
        }
        let before = snapshot(&storage);
        let dry = block_on(repair_shard(storage.clone(), 0, true))
            .unwrap()
            .expect("damage to repair");
        assert!(
            snapshot(&storage) == before,
            "round {round}: the dry run changed files"
        );
        let done = block_on(repair_shard(storage.clone(), 0, false))
            .unwrap()
            .expect("damage to repair");
        assert_eq!(dry.holes, done.holes, "round {round}");
        let holes: Vec<u64> = done.holes.iter().flat_map(|h| h.offsets.clone()).collect();
        assert_eq!(
            holes, lost,
            "round {round}: lost exactly the damaged chunks' events"
        );
        let (log, _) = open_mem(&storage, small_config()).expect("a repaired log opens");
        let read = block_on(map_records(&log, |r| (r.offset, r.ts, r.payload.to_vec())));
        let expected: Vec<(i64, Vec<u8>)> = (0..total)
            .filter(|o| !lost.contains(o))
            .map(|o| (stamp_for(o), payload_for(o)))
            .collect();
        let offsets: Vec<u64> = read.iter().map(|r| r.0).collect();
        assert_eq!(
            offsets,
            (0..expected.len() as u64).collect::<Vec<_>>(),
            "round {round}: dense"
        );
        let kept: Vec<(i64, Vec<u8>)> = read.into_iter().map(|r| (r.1, r.2)).collect();
        assert!(
            kept == expected,
            "round {round}: every other event, in order, once"
        );
        let generation = done.generation.expect("a repair names its generation");
        assert!(
            log.generations()
                .entries()
                .iter()
                .any(|e| e.generation == generation && e.first_offset == done.renumbered_from),
            "round {round}: the survivors' generation starts at the first lost offset: {}",
            log.generations()
        );
        drop(log);
        assert_eq!(
            block_on(repair_shard(storage.clone(), 0, false)).unwrap(),
            None
        );
        repaired += 1;
    }
    eprintln!("{repaired} repaired, {harmless} harmless damage");
    assert!(
        repaired > rounds / 2,
        "{repaired} of {rounds} rounds damaged anything"
    );
}

/// A repair cut short (the process dies while it appends the survivors)
/// leaves its marker: the shard does not open, and repair run again
/// finishes it, with the same events as a repair that was never cut.
#[test]
fn an_interrupted_repair_is_finished_by_the_next() {
    use ringfeed_engine::repair::repair_shard;
    use ringfeed_engine::storage::Faults;
    let (storage, chunks) = synced_log(400);
    let (segment, position) = chunks[30].clone();
    storage.flip_bit(&segment, position as usize + 80, 0);
    let whole = MemStorage::new();
    for name in storage.names() {
        whole.set_file_bytes(&name, storage.file_bytes(&name).unwrap());
    }
    whole.set_faults(Faults::default());
    block_on(repair_shard(whole.clone(), 0, false))
        .unwrap()
        .unwrap();
    // Cut short at every tenth of the operations a whole repair takes.
    let ops = whole.ops();
    let read = |s: &MemStorage| {
        let (log, _) = open_mem(s, small_config()).unwrap();
        block_on(map_records(&log, |r| (r.offset, r.ts, r.payload.to_vec())))
    };
    let expected = read(&whole);
    let mut cut = 0;
    for halt in (1..10).map(|tenth| ops * tenth / 10) {
        let trial = MemStorage::new();
        for name in storage.names() {
            trial.set_file_bytes(&name, storage.file_bytes(&name).unwrap());
        }
        trial.set_faults(Faults {
            halt_after_ops: Some(halt),
            ..Faults::default()
        });
        if block_on(repair_shard(trial.clone(), 0, false)).is_ok() {
            continue; // it finished before the halt
        }
        cut += 1;
        trial.process_crash();
        trial.set_faults(Faults::default());
        if trial
            .names()
            .iter()
            .any(|n| n == ringfeed_engine::repair::MARKER)
        {
            assert!(matches!(
                open_mem(&trial, small_config()),
                Err(RecoveryError::InterruptedRepair)
            ));
        }
        block_on(repair_shard(trial.clone(), 0, false)).unwrap();
        assert!(read(&trial) == expected, "halted after {halt} operations");
    }
    assert_eq!(cut, 9, "of {ops} operations");
}
