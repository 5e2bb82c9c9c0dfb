//! `SubscribeResponse`s read in place: the codec hands the follower each
//! response as the bytes received (a view of tonic's receive buffer, not a
//! copy), and [`Response::parse`] finds its parts without building messages.
//! The events of a batch are walked one at a time ([`Events`]), each handed
//! out as a [`FollowedEvent`] whose event bytes are a view of the response:
//! nothing is allocated per event.

use ringfeed_proto::bytes::{Buf, BufMut, Bytes};
use ringfeed_proto::prost::{DecodeError, Message};
use ringfeed_proto::tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use ringfeed_proto::tonic::Status;
use ringfeed_proto::v1::{self, SubscribeRequest};

use crate::view::{Fields, Value};
use crate::FollowedEvent;

/// The follower's gRPC codec: requests encoded by prost, responses kept as
/// their bytes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RawResponseCodec;

impl Codec for RawResponseCodec {
    type Encode = SubscribeRequest;
    type Decode = Bytes;
    type Encoder = RawResponseCodec;
    type Decoder = RawResponseCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawResponseCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawResponseCodec
    }
}

impl Encoder for RawResponseCodec {
    type Item = SubscribeRequest;
    type Error = Status;

    fn encode(&mut self, item: SubscribeRequest, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        if buf.remaining_mut() < item.encoded_len() {
            return Err(Status::internal("no room to encode the subscribe request"));
        }
        item.encode(buf)
            .map_err(|e| Status::internal(format!("encoding the subscribe request: {e}")))
    }
}

impl Decoder for RawResponseCodec {
    type Item = Bytes;
    type Error = Status;

    /// The whole message: `BytesMut::split_to` underneath, so no copy.
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(buf.copy_to_bytes(buf.remaining())))
    }
}

/// What a response carries.
#[derive(Debug)]
pub(crate) enum Item {
    /// One `EventMessage` or an `EventBatch`, still encoded.
    Events(Events),
    Chunk(v1::ChunkMessage),
    Heartbeat(v1::Heartbeat),
    ChunkModeEnd,
    Nothing,
}

/// One response: its cursor (empty: unchanged) and its item.
#[derive(Debug)]
pub(crate) struct Response {
    pub cursor: Bytes,
    pub item: Item,
}

impl Response {
    /// Reads `message` as a `ringfeed.v1.SubscribeResponse` (proto3 rules:
    /// the last item wins, unknown fields are skipped).
    pub fn parse(message: Bytes) -> Result<Response, DecodeError> {
        let mut cursor = Bytes::new();
        let mut item = Item::Nothing;
        for field in Fields::new(&message) {
            let (tag, value) = field?;
            let Value::Bytes(part) = value else {
                if (1..=6).contains(&tag) {
                    return Err(DecodeError::new(
                        "invalid wire type in a subscribe response",
                    ));
                }
                continue;
            };
            let part = message.slice_ref(part);
            match tag {
                1 => cursor = part,
                2 => item = Item::Events(Events::new(part, true)),
                3 => item = Item::Events(Events::new(part, false)),
                4 => item = Item::Heartbeat(v1::Heartbeat::decode(part)?),
                5 => item = Item::Chunk(v1::ChunkMessage::decode(part)?),
                6 => item = Item::ChunkModeEnd,
                _ => {}
            }
        }
        Ok(Response { cursor, item })
    }
}

/// The events of one `Item::Events`, decoded as they are walked.
#[derive(Clone, Debug, Default)]
pub(crate) struct Events {
    body: Bytes,
    /// Where the unread part of `body` starts.
    at: usize,
    /// `body` is one `EventMessage` (not yet handed out while `at` is 0),
    /// not an `EventBatch`.
    single: bool,
}

impl Events {
    fn new(body: Bytes, single: bool) -> Events {
        Events {
            body,
            at: 0,
            single,
        }
    }

    /// Whether these are an `EventBatch`'s.
    pub fn batch(&self) -> bool {
        !self.single
    }

    /// The next event, if any.
    pub fn next_event(&mut self) -> Result<Option<FollowedEvent>, DecodeError> {
        if self.single {
            // An all-default EventMessage encodes to no bytes: still one event.
            if self.at > 0 {
                return Ok(None);
            }
            self.at = self.body.len().max(1);
            return event_message(&self.body, &self.body).map(Some);
        }
        if self.at >= self.body.len() {
            return Ok(None);
        }
        let mut fields = Fields::new(&self.body[self.at..]);
        while let Some(field) = fields.next() {
            let (tag, value) = field?;
            let consumed = self.body.len() - fields.rest_len();
            match (tag, value) {
                (1, Value::Bytes(message)) => {
                    self.at = consumed;
                    return event_message(&self.body, message).map(Some);
                }
                (1, _) => return Err(DecodeError::new("invalid wire type for a batch's event")),
                _ => self.at = consumed,
            }
        }
        self.at = self.body.len();
        Ok(None)
    }
}

/// An `EventMessage` found in `whole` (its event bytes become a view of it).
fn event_message(whole: &Bytes, message: &[u8]) -> Result<FollowedEvent, DecodeError> {
    let mut event = FollowedEvent {
        ts_ns: 0,
        shard: 0,
        offset: 0,
        node: 0,
        event: Bytes::new(),
    };
    for field in Fields::new(message) {
        match field? {
            (1, Value::Varint(v)) => event.ts_ns = v as i64,
            (2, Value::Varint(v)) => event.shard = v as u32,
            (3, Value::Varint(v)) => event.offset = v,
            (4, Value::Bytes(b)) => event.event = whole.slice_ref(b),
            (5, Value::Varint(v)) => event.node = v as u32,
            (1..=5, _) => return Err(DecodeError::new("invalid wire type in an event message")),
            _ => {}
        }
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringfeed_proto::v1::subscribe_response::Item as GenItem;
    use ringfeed_proto::v1::{Entry, Event, EventBatch, EventMessage, SubscribeResponse};

    fn message(i: u64) -> EventMessage {
        EventMessage {
            node: 0,
            ts_ns: 1_000 + i as i64,
            shard: (i % 3) as u32,
            offset: i,
            event: Some(Event {
                directory: format!("/d{i}"),
                new_entry: Some(Entry {
                    name: format!("f{i}"),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }
    }

    fn walk(response: &SubscribeResponse) -> (Bytes, Vec<FollowedEvent>) {
        let parsed = Response::parse(response.encode_to_vec().into()).unwrap();
        let Item::Events(mut events) = parsed.item else {
            panic!("no events: {:?}", parsed.item);
        };
        let mut out = Vec::new();
        while let Some(e) = events.next_event().unwrap() {
            out.push(e);
        }
        (parsed.cursor, out)
    }

    /// A batch response of events `0..n` at `cursor`.
    fn batch(cursor: &'static [u8], n: u64) -> SubscribeResponse {
        SubscribeResponse {
            cursor: Bytes::from_static(cursor),
            item: Some(GenItem::Batch(EventBatch {
                events: (0..n).map(message).collect(),
            })),
        }
    }

    #[test]
    fn batches_and_single_events_walk_as_the_generated_decode_reads_them() {
        let batch = batch(b"cursor", 5);
        let (cursor, events) = walk(&batch);
        assert_eq!(&cursor[..], b"cursor");
        assert_eq!(events.len(), 5);
        for (i, e) in events.iter().enumerate() {
            let expected = message(i as u64);
            assert_eq!(
                (e.ts_ns, e.shard, e.offset),
                (expected.ts_ns, expected.shard, expected.offset)
            );
            assert_eq!(
                Event::decode(e.event.clone()).unwrap(),
                expected.event.unwrap()
            );
        }
        let single = SubscribeResponse {
            cursor: Bytes::new(),
            item: Some(GenItem::Event(message(7))),
        };
        let (cursor, events) = walk(&single);
        assert!(cursor.is_empty());
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].offset, 7);
    }

    #[test]
    fn an_all_default_event_message_is_still_one_event() {
        let r = SubscribeResponse {
            cursor: Bytes::new(),
            item: Some(GenItem::Event(EventMessage::default())),
        };
        let (_, events) = walk(&r);
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].ts_ns, events[0].offset), (0, 0));
        assert!(events[0].event.is_empty());
    }

    #[test]
    fn an_event_message_with_an_empty_event_is_an_empty_event() {
        let mut m = message(1);
        m.event = Some(Event::default());
        let r = SubscribeResponse {
            cursor: Bytes::new(),
            item: Some(GenItem::Event(m)),
        };
        let (_, events) = walk(&r);
        assert!(events[0].event.is_empty());
    }

    #[test]
    fn damaged_responses_are_errors_not_panics() {
        let batch = batch(b"c", 3).encode_to_vec();
        for cut in 0..batch.len() {
            let Ok(parsed) = Response::parse(Bytes::copy_from_slice(&batch[..cut])) else {
                continue;
            };
            if let Item::Events(mut events) = parsed.item {
                while let Ok(Some(_)) = events.next_event() {}
            }
        }
    }
}
