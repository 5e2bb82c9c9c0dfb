//! Encode once for all: live subscribers that follow the feed alike get the
//! same responses, so one encoding serves them all.
//!
//! Subscriptions of one shape (filter, order, durability; see
//! `Subscription::shape`) deliver the same events between two positions, and
//! with the same batching their sender packs them into the same response
//! with the same cursor. Such streams join one [`Group`]. A sender that
//! builds a response at the live edge (it ends because nothing more was
//! ready) while others share its group encodes it once and
//! keeps it in the group, keyed by the position it started from; a sender
//! that then stands at that position queues the same bytes and moves its
//! subscription past those events (`Subscription::skip_to`) instead of
//! reading, packing and encoding them again. Positions chain (each response
//! starts where one ended), so a wake-up of many subscribers at the live
//! edge costs one read and one encoding per response, not one per
//! subscriber. The encoding is a gRPC frame, which each stream's transport
//! takes as it is (`RawSubscribeResponse::Framed`): no copy per stream.
//!
//! Why only at the live edge: a catching-up stream's full batches are
//! rarely taken by another, and a kept one would hold its budget for
//! nothing; at the edge responses are small and many streams take the same
//! one. (While tonic still copied each encoding into every stream's buffer,
//! sharing full batches also cost a second copy: a storm of 2,000 peaked
//! ~130 MiB higher.)
//!
//! Bounds: a group keeps its last [`KEPT`] responses, and each holds its
//! bytes from the response budget while kept; responses are kept only while
//! half the budget stays free (one that cannot be is sent without being
//! kept), so keeping never makes a stream wait for budget. Subscriptions with `until_ns` never share (their
//! end differs), nor do backlog readers (they read at their own pace from
//! segment files, where sharing would rarely meet).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use ringfeed_engine::{Filter, Ordering, Progress, Subscription};
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::RawSubscribeResponse;
use tokio::sync::OwnedSemaphorePermit;

/// Responses a group keeps for subscribers behind the one that built them.
pub(crate) const KEPT: usize = 32;

/// What makes two streams' live responses the same from the same position.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Shape {
    filter: Filter,
    ordering: Ordering,
    durable_only: bool,
    batching: bool,
}

/// Every group, by shape; a group lives as long as a stream in it.
#[derive(Default)]
pub(crate) struct Groups(Arc<Mutex<HashMap<Shape, Weak<Group>>>>);

impl Groups {
    /// The group of streams shaped like `sub` with this batching; `None`
    /// for a subscription that ends (`until_ns`).
    pub fn join(&self, sub: &Subscription, batching: bool) -> Option<Arc<Group>> {
        let (filter, ordering, durable_only, until_ns) = sub.shape();
        if until_ns.is_some() {
            return None;
        }
        let shape = Shape {
            filter: filter.clone(),
            ordering,
            durable_only,
            batching,
        };
        let mut groups = lock(&self.0);
        if let Some(group) = groups.get(&shape).and_then(Weak::upgrade) {
            return Some(group);
        }
        let group = Arc::new(Group {
            shape: shape.clone(),
            groups: Arc::downgrade(&self.0),
            kept: Mutex::new(VecDeque::with_capacity(KEPT)),
        });
        groups.insert(shape, Arc::downgrade(&group));
        Some(group)
    }
}

/// Streams of one shape and the responses they share.
pub(crate) struct Group {
    shape: Shape,
    groups: Weak<Mutex<HashMap<Shape, Weak<Group>>>>,
    kept: Mutex<VecDeque<Arc<Shared>>>,
}

/// A response encoded once, and where it takes a subscription.
pub(crate) struct Shared {
    /// The position it starts from (every shard's next offset).
    from: Box<[u64]>,
    /// Where the subscription stands after it.
    pub to: Progress,
    /// The encoding, a gRPC frame (`RawSubscribeResponse::Framed`).
    pub response: RawSubscribeResponse,
    pub cursor: Bytes,
    pub events: u64,
    /// Its bytes, from the response budget, while the group keeps it.
    _budget: OwnedSemaphorePermit,
}

impl Shared {
    pub fn new(
        from: &[u64],
        to: Progress,
        response: RawSubscribeResponse,
        cursor: Bytes,
        events: u64,
        budget: OwnedSemaphorePermit,
    ) -> Shared {
        Shared {
            from: from.into(),
            to,
            response,
            cursor,
            events,
            _budget: budget,
        }
    }
}

impl Group {
    /// Whether another stream is in the group (a response encoded now may
    /// serve it).
    pub fn has_company(self: &Arc<Self>) -> bool {
        Arc::strong_count(self) > 1
    }

    /// The kept response that starts at `from`, if any.
    pub fn find(&self, from: &[u64]) -> Option<Arc<Shared>> {
        lock(&self.kept)
            .iter()
            .rev()
            .find(|shared| *shared.from == *from)
            .cloned()
    }

    /// Keeps `shared` for the streams behind, unless one starting at the
    /// same position is kept already (two streams built it at once); the
    /// oldest goes when [`KEPT`] are kept.
    pub fn keep(&self, shared: Arc<Shared>) {
        let mut kept = lock(&self.kept);
        if kept.iter().any(|k| k.from == shared.from) {
            return;
        }
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back(shared);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let Some(groups) = self.groups.upgrade() else {
            return;
        };
        let mut groups = lock(&groups);
        // A new group of this shape may have taken the place already.
        if groups
            .get(&self.shape)
            .is_some_and(|g| g.strong_count() == 0)
        {
            groups.remove(&self.shape);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
