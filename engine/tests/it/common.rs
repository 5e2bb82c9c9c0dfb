//! Helpers shared by the engine's behaviour tests.
#![allow(dead_code)]

use ringfeed_engine::chunk;
use ringfeed_engine::storage::{block_on, MemStorage, Storage};
use ringfeed_engine::{Kind, Log, LogConfig, Record, RecoveryError, RecoveryReport, Signatures};

/// One stored event as the tests compare them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub offset: u64,
    pub ts: i64,
    pub directory: String,
    pub payload: Vec<u8>,
}

/// The payload a test writes for `offset`: distinct per offset, varied in length.
pub fn payload_for(offset: u64) -> Vec<u8> {
    let n = (offset % 7) as usize * 13;
    let mut p = format!("event-{offset}:").into_bytes();
    p.extend(std::iter::repeat_n(b'x', n));
    p
}

pub fn stamp_for(offset: u64) -> i64 {
    1_000_000 + offset as i64 * 10
}

pub fn small_config() -> LogConfig {
    LogConfig {
        shard: 0,
        segment_bytes: 64 << 10,
        max_unsynced_bytes: 8 << 10,
    }
}

/// Appends `count` records in chunks of `per_chunk`, with the deterministic
/// payloads and stamps above. Returns the chunk positions written.
pub async fn append_records<S: Storage>(
    log: &mut Log<S>,
    count: u64,
    per_chunk: u64,
) -> Result<(), ringfeed_engine::LogError> {
    let end = log.next_offset() + count;
    while log.next_offset() < end {
        let mut builder = log.chunk_builder(4096);
        let first = log.next_offset();
        for offset in first..(first + per_chunk).min(end) {
            let payload = payload_for(offset);
            let directory = format!("/dir/{}", offset % 5);
            let rec = Record {
                ts: stamp_for(offset),
                offset,
                kind: Kind::Create,
                signatures: Signatures::new(&[1, 2]),
                directory: &directory,
                old_name: "",
                new_name: "file",
                new_parent: "",
                payload: &payload,
                producer: None,
            };
            builder
                .push(&rec)
                .expect("the test's chunk buffer holds its records");
        }
        log.append(builder).await?;
    }
    Ok(())
}

/// Maps every record of the log, read back through the index and verified.
pub async fn map_records<S: Storage, T>(
    log: &Log<S>,
    mut f: impl FnMut(&Record<'_>) -> T,
) -> Vec<T> {
    let mut out = Vec::new();
    for location in log.chunks().collect::<Vec<_>>() {
        let buf = log
            .read_chunk(&location)
            .await
            .expect("indexed chunk reads back");
        let header = chunk::ChunkHeader::decode(&buf).unwrap();
        for rec in chunk::records(chunk::body_of(&buf, &header).unwrap()) {
            out.push(f(&rec.unwrap()));
        }
    }
    out
}

/// The offset and stamp of the first record stamped at or after `ts`: the
/// chunk the index names (`Log::locate_ts`, the binary search readers use
/// through the shard's published copy), then its records.
pub async fn first_at_or_after<S: Storage>(log: &Log<S>, ts: i64) -> Option<(u64, i64)> {
    let location = log.locate_ts(ts)?;
    let buf = log
        .read_chunk(&location)
        .await
        .expect("indexed chunk reads back");
    let header = chunk::ChunkHeader::decode(&buf).unwrap();
    let found = chunk::records(chunk::body_of(&buf, &header).unwrap())
        .map(|rec| rec.unwrap())
        .find(|rec| rec.ts >= ts)
        .map(|rec| (rec.offset, rec.ts));
    found
}

/// Every record of the log, read back through the index and verified.
pub async fn read_all<S: Storage>(log: &Log<S>) -> Vec<Stored> {
    map_records(log, |rec| Stored {
        offset: rec.offset,
        ts: rec.ts,
        directory: rec.directory.to_string(),
        payload: rec.payload.to_vec(),
    })
    .await
}

/// (offset, stamp, payload) of a stored record.
pub fn position_and_payload(rec: &Record<'_>) -> (u64, i64, Vec<u8>) {
    (rec.offset, rec.ts, rec.payload.to_vec())
}

/// The records `append_records` writes for `range`.
pub fn expected(range: std::ops::Range<u64>) -> Vec<Stored> {
    range
        .map(|offset| Stored {
            offset,
            ts: stamp_for(offset),
            directory: format!("/dir/{}", offset % 5),
            payload: payload_for(offset),
        })
        .collect()
}

pub fn open_mem(
    storage: &MemStorage,
    config: LogConfig,
) -> Result<(Log<MemStorage>, RecoveryReport), RecoveryError> {
    block_on(Log::open(storage.clone(), config))
}

/// Opens, reads everything, and drops the log (no clean close).
pub fn reopen_and_read(storage: &MemStorage, config: LogConfig) -> Vec<Stored> {
    let (log, _) = open_mem(storage, config).expect("log reopens");
    block_on(read_all(&log))
}

/// Compares record lists, printing a short summary instead of every record.
#[track_caller]
pub fn assert_records(got: &[Stored], want: &[Stored], what: &str) {
    if got != want {
        let first_diff = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: got {} records (offsets {:?}..{:?}), want {} (offsets {:?}..{:?}); first difference at index {:?}",
            got.len(),
            got.first().map(|r| r.offset),
            got.last().map(|r| r.offset),
            want.len(),
            want.first().map(|r| r.offset),
            want.last().map(|r| r.offset),
            first_diff,
        );
    }
}

/// A small deterministic generator (xorshift64*) so randomized tests replay from a printed seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Seeds for a randomized test: `RINGFEED_SEED` replays one, else `count` fixed ones.
pub fn seeds(count: u64) -> Vec<u64> {
    match std::env::var("RINGFEED_SEED") {
        Ok(s) => vec![s.parse().expect("RINGFEED_SEED is a number")],
        Err(_) => (1..=count).map(|i| i * 0x9E37_79B9).collect(),
    }
}

// ---- helpers for engine-level tests ----

use std::sync::Arc;

use ringfeed_engine::clock::{Clock, SystemClock};
use ringfeed_engine::{Engine, EngineConfig, Limits, NewEvent};

/// An event in `dir` whose payload names `id`.
pub fn event(dir: &str, id: u64) -> NewEvent {
    NewEvent {
        directory: dir.to_string(),
        new_name: format!("f{id}"),
        payload: format!("payload-{id}").into_bytes().into(),
        ..Default::default()
    }
}

/// An event in `/d` with an 8 KiB payload.
pub fn big_event(id: u64) -> NewEvent {
    let mut e = event("/d", id);
    e.payload = vec![b'x'; 8 << 10].into();
    e
}

/// Makes shard 0 of a `small_engine_config` engine stuck: its disk hangs
/// (`storage` stalls syncs) and its unflushed bytes are at the bound, so its
/// next append waits for room that never comes until syncs are released.
pub fn stick_shard_0(engine: &Engine, storage: &MemStorage) {
    storage.stall_syncs(true);
    let mut id = 0;
    while engine.shard(0).unflushed_bytes() < 240 << 10 {
        id += 1;
        engine
            .append_blocking(vec![big_event(id)], ringfeed_engine::Durability::Memory)
            .unwrap();
    }
}

/// Small windows and bounds, so tests exercise sealing, flushing and eviction.
pub fn small_engine_config(shards: u32) -> EngineConfig {
    EngineConfig {
        data_dir: "unused".into(),
        shards,
        window_bytes: 64 << 10,
        ring_bytes: 1 << 20,
        max_unflushed_bytes: 256 << 10,
        flush_interval: std::time::Duration::from_millis(5),
        append_timeout: std::time::Duration::from_secs(2),
        segment_bytes: 1 << 20,
        limits: Limits {
            max_event_bytes: 16 << 10,
            ..Limits::default()
        },
        ..EngineConfig::default()
    }
}

pub fn mem_engine(config: EngineConfig, storages: &[MemStorage]) -> Engine {
    mem_engine_with_clock(config, storages, Arc::new(SystemClock))
}

pub fn mem_engine_with_clock(
    config: EngineConfig,
    storages: &[MemStorage],
    clock: Arc<dyn Clock>,
) -> Engine {
    let storages = storages.to_vec();
    Engine::open_with(config, clock, move |shard| storages[shard as usize].clone())
        .expect("engine opens")
}

/// Every record of one shard's log as stored (open the log directly).
pub fn stored_records(storage: &MemStorage, shard: u32) -> Vec<(u64, i64, Vec<u8>)> {
    let config = LogConfig {
        shard,
        segment_bytes: 1 << 20,
        max_unsynced_bytes: 4 << 20,
    };
    let (log, _) = block_on(Log::open(storage.clone(), config)).expect("shard log reopens");
    block_on(map_records(&log, position_and_payload))
}

/// Waits for `cond` up to `limit`, polling; panics with `what` if it never holds.
pub fn wait_until(limit: std::time::Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Every record (offset, ts, payload) of each shard of an O_DIRECT data dir, read
/// on a fresh glommio executor through the log's own recovery and index.
pub fn read_dma_logs(data_dir: &std::path::Path, shards: u32) -> Vec<Vec<(u64, i64, Vec<u8>)>> {
    use ringfeed_engine::storage::DmaStorage;
    let dir = data_dir.to_path_buf();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(move || async move {
            let mut all = Vec::new();
            for shard in 0..shards {
                let storage = DmaStorage::open(ringfeed_engine::shard_dir(&dir, shard)).unwrap();
                let config = LogConfig {
                    shard,
                    segment_bytes: 1 << 20,
                    max_unsynced_bytes: 4 << 20,
                };
                let (log, _) = Log::open(storage, config)
                    .await
                    .expect("the shard's log reopens");
                let records = map_records(&log, position_and_payload).await;
                all.push(records);
            }
            all
        })
        .expect("glommio executor starts")
        .join()
        .expect("reading the logs")
}

/// Asserts that a shard's stored records have offsets dense from 0 and strictly increasing stamps.
#[track_caller]
pub fn assert_dense_log(records: &[(u64, i64, Vec<u8>)], what: &str) {
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.0, i as u64, "{what}: offsets are dense from 0");
    }
    assert!(
        records.windows(2).all(|p| p[1].1 > p[0].1),
        "{what}: stamps strictly increase"
    );
}

/// An event as a subscriber sees it: (shard, offset, ts, payload).
pub type Seen = (u32, u64, i64, Vec<u8>);

/// Appends `events` (memory durability) and returns them as subscribers should
/// see them, keyed by position.
pub fn append_all(engine: &Engine, events: Vec<NewEvent>) -> Vec<Seen> {
    let payloads: Vec<Vec<u8>> = events.iter().map(|e| e.payload.to_vec()).collect();
    let positions = engine
        .append_blocking(events, ringfeed_engine::Durability::Memory)
        .expect("append");
    positions
        .into_iter()
        .zip(payloads)
        .map(|(p, payload)| (p.shard, p.offset, p.ts, payload))
        .collect()
}

/// Sorts events into merged order: (ts, shard, offset).
pub fn merged_order(mut events: Vec<Seen>) -> Vec<Seen> {
    events.sort_by_key(|e| (e.2, e.0, e.1));
    events
}

/// Takes up to `count` events from a subscription, failing if it stalls for 10 s.
pub fn take(sub: &mut ringfeed_engine::Subscription, count: usize) -> Vec<Seen> {
    let mut got = Vec::with_capacity(count.min(1 << 16));
    while got.len() < count {
        match sub
            .next_blocking(std::time::Duration::from_secs(10))
            .expect("subscription works")
        {
            ringfeed_engine::Step::Event(d) => {
                got.push((d.shard, d.offset, d.ts, d.payload().to_vec()))
            }
            ringfeed_engine::Step::Pending => panic!(
                "subscription stalled after {} of {count} events (cursor {:?})",
                got.len(),
                sub.cursor()
            ),
            ringfeed_engine::Step::End => break,
        }
    }
    got
}

/// Reads until the subscription ends (until_ns), failing if it stalls for 10 s.
pub fn take_to_end(sub: &mut ringfeed_engine::Subscription) -> Vec<Seen> {
    take(sub, usize::MAX)
}

/// The cursor after the first `k` events of a merged stream over `shards` shards
/// whose per-shard offsets start at `base`.
pub fn cursor_after(stream: &[Seen], k: usize, base: &[u64]) -> ringfeed_engine::Cursor {
    let mut next = base.to_vec();
    for e in &stream[..k] {
        next[e.0 as usize] = e.1 + 1;
    }
    ringfeed_engine::Cursor::new(next)
}

/// Asserts two event streams are equal, reporting the first difference.
pub fn assert_stream(got: &[Seen], want: &[Seen], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            (g.0, g.1, g.2),
            (w.0, w.1, w.2),
            "{what}: event {i} differs (shard, offset, ts)"
        );
        assert_eq!(g.3, w.3, "{what}: event {i} payload differs");
    }
    assert_eq!(got.len(), want.len(), "{what}: stream lengths differ");
}
