//! What a follower hands out: one event at a time, or a step of
//! `Follower::next_step`.

use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::prost::Message;
use ringfeed_proto::v1;

use crate::view::EventView;

/// What [`Follower::next_step`](crate::Follower::next_step) found.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Event(FollowedEvent),
    /// No event at hand, and every matching event stamped at or below this
    /// (ns) has been handed out.
    Watermark(i64),
    /// `until_ns` was reached.
    End,
}

/// One event as the follower hands it out.
#[derive(Clone, Debug, PartialEq)]
pub struct FollowedEvent {
    pub ts_ns: i64,
    pub shard: u32,
    pub offset: u64,
    /// The node that took it (cluster scope; 0 otherwise).
    pub node: u32,
    /// The producer's encoded `Event`, byte for byte.
    pub event: Bytes,
}

impl FollowedEvent {
    /// The event's fields, read in place when asked (no allocation).
    pub fn view(&self) -> EventView<'_> {
        EventView::new(&self.event)
    }

    /// The event as a message (allocates its strings and entries).
    pub fn decode(&self) -> Result<v1::Event, ringfeed_proto::prost::DecodeError> {
        v1::Event::decode(self.event.clone())
    }
}
