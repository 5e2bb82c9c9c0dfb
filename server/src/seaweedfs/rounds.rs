//! Rounds shared by the filer API's streams of one request: the responses
//! a stream built from one position of the feed to the next, kept so that
//! another stream of the same request at the same position sends them as
//! they are and moves past them ([`ringfeed_engine::Subscription::skip_to`]),
//! instead of reading, merging, matching and copying the same events again.
//! K subscribers catching up from the same point in lockstep (a storm, a
//! bench) then cost about one round's work, not K.
//!
//! A round is kept only when it starts and ends with nothing held in the
//! stream's merge: then where the stream stands is its position in the feed
//! (and its count of events filtered out in a row, for the markers), and
//! the same request from the same position reads the same events. What the
//! builder's merge let out depended on the sources' watermarks it had seen;
//! those only move forward, so what it let out is allowed to any stream
//! after it.
//!
//! Direct-mapped by the key's hash; a newer round in the slot replaces the
//! one there. Only rounds of at most `MAX_ROUND_BYTES` are kept, so the
//! memory is bounded: `SLOTS` x `MAX_ROUND_BYTES` (32 MiB).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use ringfeed_engine::Progress;
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::filer_pb;

use super::slots::Slots;
use super::view::Matcher;

/// Slots: a few hundred rounds (each up to `READ_CHUNK` events) of a
/// handful of requests.
const SLOTS: usize = 512;
/// The largest round kept (a round of large events is not shared).
const MAX_ROUND_BYTES: usize = 64 << 10;

/// What decides a stream's responses besides where it stands: what it
/// matches, and how it is sent and bounded.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Shape {
    matcher: Matcher,
    batching: bool,
    since_ns: i64,
    until_ns: i64,
}

impl Shape {
    pub fn of(request: &filer_pb::SubscribeMetadataRequest) -> Arc<Shape> {
        Arc::new(Shape {
            matcher: Matcher::new(request),
            batching: request.client_supports_batching,
            since_ns: request.since_ns.max(0),
            until_ns: request.until_ns.max(0),
        })
    }

    /// About what the shape holds in memory (its matcher).
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Shape>() + self.matcher.memory_bytes()
    }

    /// Which events the request selects.
    pub fn matcher(&self) -> &Matcher {
        &self.matcher
    }
}

/// Where a round starts: the request, the feed's next offset per shard, and
/// the events filtered out in a row before it.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Start {
    pub shape: Arc<Shape>,
    pub offsets: Vec<u64>,
    pub filtered: u64,
}

/// One round: its responses (gRPC frames), where it ends, and the events
/// filtered out in a row at its end.
#[derive(Debug)]
pub struct Round {
    pub items: Vec<Bytes>,
    pub to: Progress,
    pub filtered: u64,
}

pub struct Rounds {
    slots: Slots<Start, Round>,
}

impl Default for Rounds {
    fn default() -> Self {
        Rounds {
            slots: Slots::new(SLOTS),
        }
    }
}

impl Rounds {
    /// The round kept for `start`, if any.
    pub fn get(&self, start: &Start) -> Option<Arc<Round>> {
        self.slots.get(slot_of(start), start)
    }

    /// Keeps `round` for `start` if it is small enough; whether it did.
    pub fn put(&self, start: Start, round: Round) -> bool {
        if round.items.iter().map(|i| i.len()).sum::<usize>() > MAX_ROUND_BYTES {
            return false;
        }
        self.slots.put(slot_of(&start), start, Arc::new(round));
        true
    }
}

fn slot_of(start: &Start) -> usize {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    start.hash(&mut hasher);
    (hasher.finish() % SLOTS as u64) as usize
}
