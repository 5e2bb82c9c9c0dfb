//! Reads from the bucket: the engine's cold store ([`ColdStore`]). A reader
//! below a shard's local log asks for the chunk holding its offset; this
//! answers from a small cache, or starts fetching and says so, and wakes the
//! shard's readers once the chunk is in.
//!
//! What is fetched: a segment's chunk index once (its object `NNN.idx`,
//! checked against the manifest's length and checksum and against the
//! segment), then pieces of the segment object by range: the chunk wanted
//! and those after it, up to [`PIECE_BYTES`]. Every chunk is verified as a
//! chunk read from disk is (its header's and body's checksums) and against
//! its index entry (shard, offsets, stamps) before it is cached; one that
//! fails is fetched again, and after [`CORRUPT_TRIES`] failures the reader
//! is told it cannot be read (never delivered).
//!
//! Memory: the cache and the pieces being fetched together stay within
//! `cache_bytes` (least recently read chunks go first); at most `fetches`
//! run at once. Each cached chunk is its own allocation, so a reader holds
//! only the chunk it is reading, however long ago it was evicted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ringfeed_engine::chunk::{self, ChunkHeader, CHUNK_HEADER_LEN};
use ringfeed_engine::segment::index::ChunkEntry;
use ringfeed_engine::{ColdChunk, ColdStore, ShardShared};
use tokio::sync::{Notify, Semaphore};

use super::{index, Bucket, Manifest, ManifestSegment, UploadState};
use crate::metrics::ServerMetrics;

/// Bytes of a segment object one fetch asks for (more if its first chunk
/// is larger).
pub const PIECE_BYTES: u64 = 4 << 20;
/// How far ahead of a reader pieces are fetched before it asks (two pieces).
const READ_AHEAD: u64 = 2 * PIECE_BYTES;
/// Fetches of a chunk that fails its checks before the reader is told.
const CORRUPT_TRIES: u32 = 3;
/// How long a fetch keeps retrying a store that does not answer before the
/// reader is told (it may then resume from its cursor).
const UNREACHABLE_FOR: Duration = Duration::from_secs(120);
/// Chunk indexes kept (each a few KiB to a few MiB).
const MAX_INDEXES: usize = 64;

/// Limits of reads from the bucket.
#[derive(Clone, Copy, Debug)]
pub struct ReadLimits {
    /// Cached chunks and pieces in flight, together.
    pub cache_bytes: u64,
    /// Fetches at once.
    pub fetches: usize,
}

/// The bucket as the engine's cold store.
pub struct BucketReader {
    /// Itself, for the fetches it spawns.
    me: std::sync::Weak<BucketReader>,
    bucket: Arc<Bucket>,
    node: u32,
    runtime: tokio::runtime::Handle,
    limits: ReadLimits,
    state: Mutex<State>,
    /// Notified when cache room may have freed up.
    room: Notify,
    fetches: Semaphore,
    metrics: Arc<ServerMetrics>,
    status: Arc<UploadState>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Fetch {
    /// A segment's chunk index: (shard, segment's first offset).
    Index(u32, u64),
    /// A piece of a segment from a chunk: (shard, the chunk's first offset).
    Piece(u32, u64),
}

struct Cached {
    header: ChunkHeader,
    body: Bytes,
    tick: u64,
}

#[derive(Default)]
struct State {
    /// Per shard, the manifest the uploader last read or wrote.
    manifests: Vec<Option<Arc<Manifest>>>,
    indexes: HashMap<(u32, u64), Arc<Vec<ChunkEntry>>>,
    /// Index keys, oldest first (the first to go past MAX_INDEXES).
    index_order: Vec<(u32, u64)>,
    /// Verified chunks by (shard, first offset).
    chunks: HashMap<(u32, u64), Cached>,
    /// Chunk keys by last read: the least recently read first.
    lru: BTreeMap<u64, (u32, u64)>,
    tick: u64,
    cached_bytes: u64,
    /// Bytes of pieces being fetched.
    reserved: u64,
    in_flight: HashSet<Fetch>,
    /// Every chunk a piece in flight holds, by (shard, first offset): a
    /// reader asking for one waits for that piece, fetching nothing more.
    coming: HashSet<(u32, u64)>,
    /// Fetches that gave up, told to the next reader that asks.
    failed: HashMap<Fetch, Failure>,
}

impl State {
    /// Whether chunk `key` is cached or in a piece being fetched: nothing
    /// to fetch for it.
    fn known(&self, key: &(u32, u64)) -> bool {
        self.chunks.contains_key(key) || self.coming.contains(key)
    }
}

impl BucketReader {
    pub fn new(
        bucket: Arc<Bucket>,
        node: u32,
        shards: u32,
        limits: ReadLimits,
        metrics: Arc<ServerMetrics>,
        status: Arc<UploadState>,
    ) -> Arc<BucketReader> {
        let state = State {
            manifests: vec![None; shards as usize],
            ..State::default()
        };
        Arc::new_cyclic(|me| BucketReader {
            me: me.clone(),
            bucket,
            node,
            runtime: tokio::runtime::Handle::current(),
            limits: ReadLimits {
                cache_bytes: limits.cache_bytes.max(1),
                fetches: limits.fetches.max(1),
            },
            state: Mutex::new(state),
            room: Notify::new(),
            fetches: Semaphore::new(limits.fetches.max(1)),
            metrics,
            status,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the bucket holds of `shard` now (the uploader read or wrote it).
    pub fn set_manifest(&self, shard: u32, manifest: &Manifest) {
        if let Some(slot) = self.lock().manifests.get_mut(shard as usize) {
            *slot = Some(Arc::new(manifest.clone()));
        }
    }

    /// Reads every shard's manifest of this data dir's feed (`feed_id`,
    /// hex), so readers find the bucket's history from the first request
    /// on. Returns them per shard (a new one where the bucket holds none),
    /// for the uploader to start from: `None` where the manifest is
    /// another feed's or could not be read now (the uploader reads it
    /// again, and says why).
    pub async fn load_manifests(&self, shards: u32, feed_id: &str) -> Vec<Option<Manifest>> {
        let mut loaded = vec![None; shards as usize];
        for (shard, slot) in (0..shards).zip(&mut loaded) {
            match self.bucket.manifest(self.node, shard).await {
                Ok(Some(m)) if m.feed_id == feed_id => {
                    self.set_manifest(shard, &m);
                    *slot = Some(m);
                }
                Ok(Some(_)) => {}
                Ok(None) => *slot = Some(Manifest::new(self.node, shard, feed_id.to_owned())),
                Err(e) => {
                    tracing::warn!(bucket = self.bucket.url(), shard, "reading manifests: {e}");
                    break;
                }
            }
        }
        loaded
    }

    /// Starts `fetch` unless it runs already; tells a failure it ended in
    /// once, and fetches again on the next ask.
    fn start(&self, st: &mut State, fetch: Fetch, shard: &Arc<ShardShared>, job: Job) -> ColdChunk {
        match st.failed.remove(&fetch) {
            Some(Failure::Refused(reason)) => return ColdChunk::Failed(reason),
            Some(Failure::Unreachable(reason)) => return ColdChunk::Unavailable(reason),
            None => {}
        }
        let Some(this) = self.me.upgrade() else {
            return ColdChunk::Failed("the server is stopping".into());
        };
        if st.in_flight.insert(fetch) {
            if let Job::Piece { chunks, .. } = &job {
                st.coming
                    .extend(chunks.iter().map(|c| (job.shard(), c.first_offset)));
            }
            let shard = shard.clone();
            self.runtime.spawn(async move {
                let outcome = this.run(&job).await;
                this.finish(fetch, &job, outcome);
                // After the cache has it: a reader that looks again finds it.
                shard.wake_readers();
            });
        }
        ColdChunk::Pending
    }

    /// Fetches, verifies and retries: the chunks (or index) it got, or why
    /// it gave up.
    async fn run(&self, job: &Job) -> Result<Got, Failure> {
        let _permit = self
            .fetches
            .acquire()
            .await
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        let bytes = job.bytes();
        self.reserve(bytes).await;
        let deadline = Instant::now() + UNREACHABLE_FOR;
        let mut backoff = Duration::from_millis(250);
        let mut corrupt = 0;
        let outcome = loop {
            let (object, range) = job.object();
            let path = self
                .bucket
                .shard_dir(self.node, job.shard())
                .child(object.as_str());
            let got = match self.bucket.store.get_range(&path, range.clone()).await {
                // Removed by bucket retention (the manifest no longer names
                // it: the reader is told so when it asks again), or lost.
                Err(object_store::Error::NotFound { .. }) => {
                    let e = format!("{path} is not in the store");
                    self.read_failed(&e);
                    break Err(Failure::Refused(e));
                }
                got => got.map_err(|e| format!("reading {path} bytes {range:?}: {e}")),
            };
            let got = match got {
                Ok(got) => {
                    self.metrics.bucket_fetched(got.len() as u64);
                    self.status.update(|s| s.bytes_fetched += got.len() as u64);
                    got
                }
                Err(e) if Instant::now() < deadline => {
                    self.read_failed(&e);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(8));
                    continue;
                }
                Err(e) => {
                    self.read_failed(&e);
                    break Err(Failure::Unreachable(e));
                }
            };
            match job.verify(got) {
                Ok(done) => break Ok(done),
                Err(e) => {
                    corrupt += 1;
                    let e = format!("{path} bytes {range:?}: {e}");
                    self.read_failed(&e);
                    if corrupt >= CORRUPT_TRIES {
                        break Err(Failure::Refused(format!(
                            "refused {corrupt} times, it is not delivered: {e}"
                        )));
                    }
                }
            }
        };
        let mut st = self.lock();
        st.reserved -= bytes;
        drop(st);
        self.room.notify_waiters();
        outcome
    }

    fn read_failed(&self, why: &str) {
        tracing::warn!(bucket = self.bucket.url(), "read: {why}");
        self.metrics.bucket_read_failed();
        self.status.update(|s| {
            s.read_errors += 1;
            s.read_error = why.to_owned();
        });
    }

    /// Waits until `bytes` more fit the cache budget beside what is cached
    /// (evicting the least recently read) and in flight; a fetch with
    /// nothing else in flight always goes (one piece may pass the budget).
    async fn reserve(&self, bytes: u64) {
        loop {
            let room = self.room.notified();
            {
                let mut st = self.lock();
                while st.cached_bytes + st.reserved + bytes > self.limits.cache_bytes {
                    let Some((_, key)) = st.lru.pop_first() else {
                        break;
                    };
                    if let Some(gone) = st.chunks.remove(&key) {
                        st.cached_bytes -= gone.body.len() as u64;
                    }
                }
                if st.reserved == 0
                    || st.cached_bytes + st.reserved + bytes <= self.limits.cache_bytes
                {
                    st.reserved += bytes;
                    self.publish_cached(&st);
                    return;
                }
            }
            room.await;
        }
    }

    fn finish(&self, fetch: Fetch, job: &Job, outcome: Result<Got, Failure>) {
        let mut st = self.lock();
        st.in_flight.remove(&fetch);
        if let Job::Piece { chunks, .. } = job {
            for c in chunks {
                st.coming.remove(&(job.shard(), c.first_offset));
            }
        }
        match outcome {
            Err(reason) => {
                st.failed.insert(fetch, reason);
            }
            Ok(Got::Index(chunks)) => {
                let key = (job.shard(), job.segment().first_offset);
                if st.indexes.insert(key, Arc::new(chunks)).is_none() {
                    st.index_order.push(key);
                }
                while st.index_order.len() > MAX_INDEXES {
                    let old = st.index_order.remove(0);
                    st.indexes.remove(&old);
                }
            }
            Ok(Got::Chunks(chunks)) => {
                for (header, body) in chunks {
                    st.tick += 1;
                    let (key, tick) = ((job.shard(), header.first_offset), st.tick);
                    st.cached_bytes += body.len() as u64;
                    if let Some(old) = st.chunks.insert(key, Cached { header, body, tick }) {
                        st.cached_bytes -= old.body.len() as u64;
                        st.lru.remove(&old.tick);
                    }
                    st.lru.insert(tick, key);
                }
                self.publish_cached(&st);
            }
        }
    }

    /// The cache's bytes, to the metrics and the status.
    fn publish_cached(&self, st: &State) {
        self.metrics.set_bucket_cache_bytes(st.cached_bytes);
        self.status.update(|s| s.cache_bytes = st.cached_bytes);
    }
}

/// One fetch's work.
enum Job {
    Index {
        shard: u32,
        segment: ManifestSegment,
    },
    Piece {
        shard: u32,
        segment: ManifestSegment,
        /// The chunks to fetch, consecutive in the object.
        chunks: Vec<ChunkEntry>,
    },
}

/// Why a fetch gave up.
enum Failure {
    /// What the store holds fails its checks, or is not there.
    Refused(String),
    /// The store did not answer for [`UNREACHABLE_FOR`].
    Unreachable(String),
}

enum Got {
    Index(Vec<ChunkEntry>),
    Chunks(Vec<(ChunkHeader, Bytes)>),
}

impl Job {
    fn shard(&self) -> u32 {
        match self {
            Job::Index { shard, .. } | Job::Piece { shard, .. } => *shard,
        }
    }

    fn segment(&self) -> &ManifestSegment {
        match self {
            Job::Index { segment, .. } | Job::Piece { segment, .. } => segment,
        }
    }

    /// The object and byte range to fetch.
    fn object(&self) -> (String, Range<u64>) {
        match self {
            Job::Index { segment, .. } => {
                (index::index_name(&segment.name), 0..segment.index_bytes)
            }
            Job::Piece {
                segment, chunks, ..
            } => (segment.name.clone(), piece_range(chunks)),
        }
    }

    /// Bytes the fetch holds while it runs.
    fn bytes(&self) -> u64 {
        let (_, range) = self.object();
        range.end - range.start
    }

    /// What the fetched bytes hold, every byte checked.
    fn verify(&self, got: Bytes) -> Result<Got, String> {
        match self {
            Job::Index { segment, .. } => {
                if got.len() as u64 != segment.index_bytes
                    || crc32c::crc32c(&got) != segment.index_crc32c
                {
                    return Err(format!(
                        "the chunk index is not the one the manifest names ({} bytes)",
                        got.len()
                    ));
                }
                index::decode(&got, segment).map(Got::Index)
            }
            Job::Piece { shard, chunks, .. } => {
                let range = piece_range(chunks);
                let base = range.start;
                if got.len() as u64 != range.end - base {
                    return Err(format!("{} bytes, not the range asked for", got.len()));
                }
                let mut out = Vec::with_capacity(chunks.len());
                for entry in chunks {
                    let at = (entry.position - base) as usize;
                    let image = got
                        .get(at..at + entry.disk_len as usize)
                        .ok_or("a chunk runs past the piece")?;
                    let header = chunk::verify(image)
                        .map_err(|e| format!("chunk at byte {}: {e}", entry.position))?;
                    let described = header.shard == *shard
                        && header.first_offset == entry.first_offset
                        && header.record_count == entry.record_count
                        && header.first_ts == entry.first_ts
                        && header.last_ts == entry.last_ts;
                    if !described {
                        return Err(format!(
                            "chunk at byte {} is not the one its index names",
                            entry.position
                        ));
                    }
                    let body = image
                        .get(CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + header.body_len as usize)
                        .ok_or("a chunk body runs past its image")?;
                    // Its own allocation: a reader holding it keeps no more.
                    out.push((header, Bytes::copy_from_slice(body)));
                }
                Ok(Got::Chunks(out))
            }
        }
    }
}

/// The bytes of the object `chunks` (consecutive) take.
fn piece_range(chunks: &[ChunkEntry]) -> Range<u64> {
    let start = chunks.first().map_or(0, |c| c.position);
    let end = chunks
        .last()
        .map_or(0, |c| c.position + u64::from(c.disk_len));
    start..end
}

impl ColdStore for BucketReader {
    fn held(&self, shard: u32) -> Option<Range<u64>> {
        let st = self.lock();
        let manifest = st.manifests.get(shard as usize)?.as_ref()?;
        let first = manifest.segments.first()?.first_offset;
        Some(first..manifest.uploaded_below())
    }

    fn find_ts(&self, shard: u32, since: i64) -> Option<u64> {
        let st = self.lock();
        let manifest = st.manifests.get(shard as usize)?.as_ref()?;
        manifest
            .segments
            .iter()
            .find(|s| s.next_offset > s.first_offset && s.last_ts_ns >= since)
            .map(|s| s.first_offset)
    }

    fn chunk(&self, shard: &Arc<ShardShared>, offset: u64) -> ColdChunk {
        let id = shard.id;
        let mut st = self.lock();
        let Some(manifest) = st.manifests.get(id as usize).cloned().flatten() else {
            return ColdChunk::NotHeld;
        };
        let segments = &manifest.segments;
        let at = segments.partition_point(|s| s.next_offset <= offset);
        let Some(segment) = segments.get(at).filter(|s| s.first_offset <= offset) else {
            return ColdChunk::NotHeld;
        };
        let Some(index) = st.indexes.get(&(id, segment.first_offset)).cloned() else {
            let job = Job::Index {
                shard: id,
                segment: segment.clone(),
            };
            return self.start(&mut st, Fetch::Index(id, segment.first_offset), shard, job);
        };
        let at = index.partition_point(|c| c.end_offset() <= offset);
        let Some(entry) = index.get(at).filter(|c| c.first_offset <= offset) else {
            return ColdChunk::Failed(format!(
                "the chunk index of {} has no chunk for offset {offset}",
                segment.name
            ));
        };
        st.tick += 1;
        let tick = st.tick;
        if let Some(cached) = st.chunks.get_mut(&(id, entry.first_offset)) {
            let old = std::mem::replace(&mut cached.tick, tick);
            let ready = ColdChunk::Ready {
                header: cached.header,
                body: cached.body.clone(),
            };
            st.lru.remove(&old);
            st.lru.insert(tick, (id, entry.first_offset));
            self.read_ahead(&mut st, shard, segment, &index, at);
            drop(st);
            self.metrics.bucket_cache_hit();
            self.status.update(|s| s.cache_hits += 1);
            return ready;
        }
        let fetch = Fetch::Piece(id, entry.first_offset);
        if st.coming.contains(&(id, entry.first_offset)) && !st.failed.contains_key(&fetch) {
            // In a piece being fetched (for this reader or another).
            return ColdChunk::Pending;
        }
        self.metrics.bucket_cache_miss();
        self.status.update(|s| s.cache_misses += 1);
        let job = Job::Piece {
            shard: id,
            segment: segment.clone(),
            chunks: piece_from(&st, id, &index, at),
        };
        let asked = self.start(&mut st, fetch, shard, job);
        self.read_ahead(&mut st, shard, segment, &index, at);
        asked
    }
}

impl BucketReader {
    /// Keeps fetches ahead of a reader at chunk `at` of `segment`: the
    /// first chunk within [`READ_AHEAD`] bytes after it that is neither
    /// cached nor coming starts a piece. So a lone reader does not wait a
    /// round trip per piece.
    fn read_ahead(
        &self,
        st: &mut State,
        shard: &Arc<ShardShared>,
        segment: &ManifestSegment,
        index: &[ChunkEntry],
        at: usize,
    ) {
        let id = shard.id;
        let mut bytes = 0;
        for (i, c) in index.iter().enumerate().skip(at + 1) {
            bytes += u64::from(c.disk_len);
            if bytes > READ_AHEAD {
                return;
            }
            if st.known(&(id, c.first_offset)) {
                continue;
            }
            let fetch = Fetch::Piece(id, c.first_offset);
            if st.failed.contains_key(&fetch) {
                return;
            }
            let job = Job::Piece {
                shard: id,
                segment: segment.clone(),
                chunks: piece_from(st, id, index, i),
            };
            self.start(st, fetch, shard, job);
            return;
        }
    }
}

/// The chunk at `at` of `index` and those after it, up to a piece (at
/// least the one), stopping before one that is cached or coming already.
fn piece_from(st: &State, id: u32, index: &[ChunkEntry], at: usize) -> Vec<ChunkEntry> {
    let mut bytes = 0;
    index[at..]
        .iter()
        .enumerate()
        .take_while(|&(i, c)| {
            bytes += u64::from(c.disk_len);
            i == 0 || (bytes <= PIECE_BYTES && !st.known(&(id, c.first_offset)))
        })
        .map(|(_, c)| *c)
        .collect()
}
