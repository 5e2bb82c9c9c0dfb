//! One live stream per peer, shared by every cluster stream of this node
//! that is at that peer's live edge (issue 20; docs/design.md 7): not one peer
//! stream per subscriber.
//!
//! A [`PeerFeed`] follows one peer from now (node scope, heartbeats, the
//! filter and options of the cluster streams it serves: streams of another
//! shape get another feed) and keeps its last items in a ring. A cluster
//! stream catches up on a peer with a follower of its own; once its
//! position on the peer is covered by the ring (every shard at or past the
//! ring's base, same generations), it drops that follower and reads the
//! ring instead, skipping what it already has by offset. A stream that falls
//! behind the ring (its oldest items were dropped before it read them), or
//! whose feed failed, follows the peer on its own again from where it is.
//!
//! Items carry, per event, only its shard's next offset and generation
//! after it: a stream moves each shard's part of its cursor on its own, so
//! a position made from the feed's items is exact for each stream whatever
//! part of the feed it read.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use ringfeed_engine::Cursor;
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::prost::Message;
use ringfeed_proto::v1;
use tokio::sync::Notify;

use ringfeed_proto::tonic::Status;

use crate::client::{FollowError, Follower, Step as FollowStep};

/// Items a feed keeps by default (config `peer_feed_events`).
pub const DEFAULT_FEED_ITEMS: usize = 8192;
/// Most payload bytes a feed keeps, whatever its item count.
const FEED_BYTES: usize = 16 << 20;
/// Most items a stream takes from a feed at once.
pub(crate) const READ_AT_ONCE: usize = 256;

/// What a follower of a peer hands on, in order.
#[derive(Clone, Debug)]
pub(crate) enum PeerItem {
    /// Where the follower starts (its checkpoint before its first item).
    Start(Arc<Cursor>),
    Event {
        ts: i64,
        shard: u32,
        offset: u64,
        payload: Bytes,
        /// The shard's next offset and generation once it is delivered.
        next: u64,
        generation: Option<u32>,
    },
    /// Every event stamped at or below `ts` was handed out; the follower's
    /// checkpoint then.
    Watermark {
        ts: i64,
        checkpoint: Option<Arc<Cursor>>,
    },
    /// Past `until_ns`: nothing more will come.
    End,
}

impl PeerItem {
    /// Moves `position` (a position on the peer) past this item.
    pub(crate) fn advance(&self, position: &mut Option<Cursor>) {
        match (self, position.as_mut()) {
            (PeerItem::Start(start), None) => *position = Some((**start).clone()),
            (
                PeerItem::Event {
                    shard,
                    next,
                    generation,
                    ..
                },
                Some(p),
            ) => p.set_shard(*shard, *next, *generation),
            (
                PeerItem::Watermark {
                    checkpoint: Some(c),
                    ..
                },
                Some(p),
            ) if c.shards() == p.shards() => {
                for shard in 0..c.shards() as u32 {
                    if c.next_offset(shard) > p.next_offset(shard) {
                        p.set_shard(shard, c.next_offset(shard), c.generation(shard));
                    }
                }
            }
            (
                PeerItem::Watermark {
                    checkpoint: Some(c),
                    ..
                },
                None,
            ) => *position = Some((**c).clone()),
            _ => {}
        }
    }
}

/// Turns a follower's steps into [`PeerItem`]s: its first is preceded by
/// where it started, and each step brings every event already received.
pub(crate) struct Stepper {
    follower: Follower,
    started: bool,
}

impl Stepper {
    pub(crate) fn new(follower: Follower) -> Stepper {
        Stepper {
            follower,
            started: false,
        }
    }

    /// Waits for the next step and appends its items to `out`.
    pub(crate) async fn next(&mut self, out: &mut Vec<PeerItem>) -> Result<(), FollowError> {
        loop {
            let step = self.follower.next_step().await?;
            let end = matches!(step, FollowStep::End);
            self.push(step, out)?;
            if end || !self.follower.has_buffered() {
                return Ok(());
            }
        }
    }

    fn push(&mut self, step: FollowStep, out: &mut Vec<PeerItem>) -> Result<(), FollowError> {
        let checkpoint = self.follower.checkpoint();
        match step {
            FollowStep::Event(e) => {
                check_peer_event("event", e.shard, e.offset, &e.event)?;
                let checkpoint = checkpoint.expect("a checkpoint once an event was handed out");
                if !self.started {
                    // The checkpoint before the event: the same with its
                    // shard moved back to it.
                    let mut before = checkpoint.clone();
                    before.set_next(e.shard, e.offset);
                    out.push(PeerItem::Start(Arc::new(before)));
                    self.started = true;
                }
                out.push(PeerItem::Event {
                    ts: e.ts_ns,
                    shard: e.shard,
                    offset: e.offset,
                    payload: e.event,
                    next: checkpoint.next_offset(e.shard),
                    generation: checkpoint.generation(e.shard),
                });
            }
            FollowStep::Watermark(ts) => {
                let checkpoint = checkpoint.cloned().map(Arc::new);
                if let (false, Some(start)) = (self.started, &checkpoint) {
                    out.push(PeerItem::Start(start.clone()));
                    self.started = true;
                }
                out.push(PeerItem::Watermark { ts, checkpoint });
            }
            FollowStep::End => out.push(PeerItem::End),
        }
        Ok(())
    }
}

/// Checks a peer's event (`what`: "event", or "record" of a chunk) as a
/// producer's is: a peer of an older version, or a damaged one, may hold an
/// event that decoders read differently, and forwarded it would stop every
/// strict reader of the cluster stream at it. Nothing is skipped: the
/// stream ends with DATA_LOSS at that event.
pub(crate) fn check_peer_event(
    what: &str,
    shard: u32,
    offset: u64,
    event: &[u8],
) -> Result<(), FollowError> {
    ringfeed_proto::strict::check_event(event).map_err(|refusal| {
        FollowError::Refused(Status::data_loss(format!(
            "its {what} at shard {shard} offset {offset} is not forwarded: {refusal} \
             (not bytes every protobuf decoder reads alike)"
        )))
    })
}

/// Why a stream cannot read a feed any more.
#[derive(Debug)]
pub(crate) enum Gone {
    /// Items it had not read were dropped (it fell too far behind).
    Passed,
    /// The feed's follower failed (e.g. the peer refused the stream).
    Failed,
}

/// A peer's shared live feed; its follower ends when the last stream
/// holding it goes away.
pub(crate) struct PeerFeed {
    ring: Mutex<Ring>,
    task: tokio::task::AbortHandle,
}

struct Ring {
    items: VecDeque<PeerItem>,
    /// The sequence number of `items[0]`.
    first: u64,
    /// The follower's position before `items[0]`; `None` until it started.
    base: Option<Cursor>,
    payload_bytes: usize,
    capacity: usize,
    failed: bool,
    /// Streams reading the feed, woken when items come.
    readers: Vec<Weak<Notify>>,
}

impl Drop for PeerFeed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PeerFeed {
    /// Where a stream at `position` on the peer starts reading: the oldest
    /// item kept, if the ring covers `position` (every shard at or past its
    /// base, with the same generation); the stream skips what it has.
    pub(crate) fn covers(&self, position: &Cursor) -> Option<u64> {
        let ring = self.ring.lock().expect("feed lock");
        let base = ring.base.as_ref()?;
        let covered = !ring.failed
            && base.shards() == position.shards()
            && (0..base.shards() as u32).all(|shard| {
                base.next_offset(shard) <= position.next_offset(shard)
                    && base.generation(shard) == position.generation(shard)
            });
        covered.then_some(ring.first)
    }

    /// Appends to `out` at most `max` items from number `*seq` on, and moves
    /// `*seq` past them.
    pub(crate) fn read(
        &self,
        seq: &mut u64,
        max: usize,
        out: &mut Vec<PeerItem>,
    ) -> Result<(), Gone> {
        let ring = self.ring.lock().expect("feed lock");
        if ring.failed {
            return Err(Gone::Failed);
        }
        if *seq < ring.first {
            return Err(Gone::Passed);
        }
        let at = (*seq - ring.first) as usize;
        out.extend(ring.items.iter().skip(at).take(max).cloned());
        *seq += (ring.items.len().saturating_sub(at)).min(max) as u64;
        Ok(())
    }

    /// Wakes `reader` whenever items come (until [`PeerFeed::unlisten`]).
    pub(crate) fn listen(&self, reader: &Arc<Notify>) {
        let mut ring = self.ring.lock().expect("feed lock");
        ring.readers.push(Arc::downgrade(reader));
        reader.notify_one();
    }

    pub(crate) fn unlisten(&self, reader: &Arc<Notify>) {
        let mut ring = self.ring.lock().expect("feed lock");
        ring.readers
            .retain(|r| r.strong_count() > 0 && !std::ptr::eq(r.as_ptr(), Arc::as_ptr(reader)));
    }

    fn failed(&self) -> bool {
        self.ring.lock().expect("feed lock").failed
    }

    /// Keeps `items` (dropping the oldest past the ring's bounds), or marks
    /// the feed failed; wakes its readers.
    fn take(&self, items: &mut Vec<PeerItem>, failed: bool) {
        let mut ring = self.ring.lock().expect("feed lock");
        for item in items.drain(..) {
            if let PeerItem::Start(_) = item {
                item.advance(&mut ring.base);
                continue;
            }
            if let PeerItem::Event { payload, .. } = &item {
                ring.payload_bytes += payload.len();
            }
            ring.items.push_back(item);
        }
        while ring.items.len() > ring.capacity || ring.payload_bytes > FEED_BYTES {
            let Some(old) = ring.items.pop_front() else {
                break;
            };
            if let PeerItem::Event { payload, .. } = &old {
                ring.payload_bytes -= payload.len();
            }
            old.advance(&mut ring.base);
            ring.first += 1;
        }
        ring.failed |= failed;
        ring.readers.retain(|r| match r.upgrade() {
            Some(reader) => {
                reader.notify_one();
                true
            }
            None => false,
        });
    }
}

/// Follows the peer into `feed` until the feed goes away or its follower
/// fails.
async fn run(feed: Weak<PeerFeed>, follower: Follower, made: tokio::sync::oneshot::Receiver<()>) {
    // Not before the feed is made (until then `feed` upgrades to nothing).
    if made.await.is_err() {
        return;
    }
    let mut stepper = Stepper::new(follower);
    let mut items = Vec::new();
    loop {
        let result = stepper.next(&mut items).await;
        let Some(feed) = feed.upgrade() else {
            return;
        };
        if let Err(e) = &result {
            tracing::warn!(error = %e, "a shared peer feed failed; its streams follow the peer on their own");
        }
        feed.take(&mut items, result.is_err());
        if result.is_err() {
            return;
        }
    }
}

/// The feeds of this node's peers, one per peer and stream shape.
pub struct PeerFeeds {
    feeds: Mutex<HashMap<FeedKey, Weak<PeerFeed>>>,
    capacity: usize,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct FeedKey {
    node: u32,
    address: String,
    /// The peer request, encoded (start and client fields cleared).
    shape: Vec<u8>,
}

impl PeerFeeds {
    /// Feeds keeping `capacity` items each (at least 1).
    pub fn new(capacity: usize) -> PeerFeeds {
        PeerFeeds {
            feeds: Mutex::default(),
            capacity: capacity.max(1),
        }
    }

    /// The live feed of peer `node` at `address` for streams following it
    /// with `request` (its start and client fields are replaced): the
    /// running one, or a new one following the peer from now with the
    /// follower `follower` makes of the request.
    pub(crate) fn get(
        &self,
        node: u32,
        address: &str,
        request: &v1::SubscribeRequest,
        follower: impl FnOnce(v1::SubscribeRequest) -> Result<Follower, Status>,
    ) -> Result<Arc<PeerFeed>, Status> {
        let mut request = request.clone();
        request.start = Some(v1::subscribe_request::Start::Now(true));
        request.client_id = 0;
        request.client_epoch = 0;
        request.until_ns = 0;
        let key = FeedKey {
            node,
            address: address.to_owned(),
            shape: request.encode_to_vec(),
        };
        let mut feeds = self.feeds.lock().expect("feeds lock");
        feeds.retain(|_, feed| feed.strong_count() > 0);
        if let Some(feed) = feeds.get(&key).and_then(Weak::upgrade) {
            if !feed.failed() {
                return Ok(feed);
            }
        }
        request.client_name = request.client_name.replace("cluster stream", "shared feed");
        let follower = follower(request)?;
        let (made, made_rx) = tokio::sync::oneshot::channel();
        let feed = Arc::new_cyclic(|weak: &Weak<PeerFeed>| PeerFeed {
            ring: Mutex::new(Ring {
                items: VecDeque::new(),
                first: 0,
                base: None,
                payload_bytes: 0,
                capacity: self.capacity,
                failed: false,
                readers: Vec::new(),
            }),
            // Holds only a weak reference: the feed ends with its last stream.
            task: tokio::spawn(run(weak.clone(), follower, made_rx)).abort_handle(),
        });
        let _ = made.send(());
        feeds.insert(key, Arc::downgrade(&feed));
        Ok(feed)
    }
}
