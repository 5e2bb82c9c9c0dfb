//! Server-side mirrors of generated messages that carry stored `Event`s as
//! opaque bytes, so the server never decodes and re-encodes an event.
//!
//! Invariant: each type here has exactly the wire format of the generated
//! message it mirrors (same tags, same presence rules). That holds because a
//! length-delimited embedded message and a `bytes` field share one encoding;
//! an `Option<Event>` maps to an `Option<Bytes>` (present even when empty) and
//! a `repeated Event` to a `repeated bytes`. The tests in `tests/` check every
//! variant against the generated types.
//!
//! Why these types appear in the generated server trait: `build.rs` generates
//! the tonic client from the service as declared and the tonic server from the
//! same descriptor with the Rust types of three methods swapped
//! (`Subscribe`'s response, `Append`/`AppendStream`'s request). tonic-build
//! then emits `ProstCodec<RawSubscribeResponse, SubscribeRequest>` and
//! `ProstCodec<AppendResponse, RawAppendRequest>` routes. The alternatives were
//! worse: `extern_path` would swap the type for the client too; a second
//! .proto copy or a `tonic_build::manual` service would repeat the service
//! definition by hand; a hand-written route would bypass the generated
//! router. The .proto remains the only schema.
//!
//! Cost on the wire path: no decode, no re-encode; tonic's encoder still
//! copies the stored bytes once into its frame buffer.

use bytes::Bytes;
use prost::Message;

use crate::v1;

/// `ringfeed.v1.EventMessage` with the event as its stored encoding.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawEventMessage {
    /// The event's stamp, ns since the Unix epoch.
    #[prost(int64, tag = "1")]
    pub ts_ns: i64,
    /// Shard that holds the event.
    #[prost(uint32, tag = "2")]
    pub shard: u32,
    /// The event's offset within `shard`.
    #[prost(uint64, tag = "3")]
    pub offset: u64,
    /// A prost/protobuf encoding of `ringfeed.v1.Event` (the producer's bytes,
    /// verbatim). `Some` is always sent, even when empty, exactly as an
    /// `Option<Event>` would be; clients decode it as `EventMessage.event`.
    #[prost(bytes = "bytes", optional, tag = "4")]
    pub event: Option<Bytes>,
    /// The node that holds the event (cluster subscriptions; 0 otherwise).
    #[prost(uint32, tag = "5")]
    pub node: u32,
}

impl RawEventMessage {
    /// An event message around stored event bytes.
    pub fn new(ts_ns: i64, shard: u32, offset: u64, event: Bytes) -> Self {
        Self {
            ts_ns,
            shard,
            offset,
            event: Some(event),
            node: 0,
        }
    }
}

/// `ringfeed.v1.EventBatch` of [`RawEventMessage`]s.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawEventBatch {
    /// At least one event, in the subscription's order.
    #[prost(message, repeated, tag = "1")]
    pub events: Vec<RawEventMessage>,
}

/// `ringfeed.v1.SubscribeResponse` as the server sends it: the item type of
/// the generated server's `SubscribeStream`. Either its fields, which tonic
/// encodes for the stream it goes to, or an encoding made once and queued to
/// every stream it goes to (encode once for all: tonic copies the bytes into
/// each stream's frame and encodes nothing).
#[derive(Clone, PartialEq, Debug)]
pub enum RawSubscribeResponse {
    Fields(RawResponseFields),
    /// A complete encoding of `ringfeed.v1.SubscribeResponse`.
    Encoded(Bytes),
}

/// The fields of a [`RawSubscribeResponse`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawResponseFields {
    /// Resume token positioned after this response; empty = unchanged.
    #[prost(bytes = "bytes", tag = "1")]
    pub cursor: Bytes,
    /// What this response carries.
    #[prost(oneof = "RawItem", tags = "2, 3, 4, 5, 6")]
    pub item: Option<RawItem>,
}

impl Default for RawSubscribeResponse {
    fn default() -> Self {
        RawSubscribeResponse::Fields(RawResponseFields::default())
    }
}

impl RawSubscribeResponse {
    /// A response carrying `item`, positioned at `cursor`.
    pub fn new(cursor: Bytes, item: RawItem) -> Self {
        RawSubscribeResponse::Fields(RawResponseFields {
            cursor,
            item: Some(item),
        })
    }

    /// Encodes a response once, to be queued to many streams.
    pub fn encoded(cursor: Bytes, item: RawItem) -> Self {
        let fields = RawResponseFields {
            cursor,
            item: Some(item),
        };
        RawSubscribeResponse::Encoded(fields.encode_to_vec().into())
    }

    /// The response's fields (an encoded one decoded: events stay views of
    /// its bytes).
    pub fn into_fields(self) -> Result<RawResponseFields, prost::DecodeError> {
        match self {
            RawSubscribeResponse::Fields(fields) => Ok(fields),
            RawSubscribeResponse::Encoded(bytes) => RawResponseFields::decode(bytes),
        }
    }
}

/// By hand, to send an encoded response verbatim; a fields response is the
/// derived encoding of its fields.
impl Message for RawSubscribeResponse {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        match self {
            RawSubscribeResponse::Fields(fields) => fields.encode_raw(buf),
            RawSubscribeResponse::Encoded(bytes) => buf.put_slice(bytes),
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        if let RawSubscribeResponse::Encoded(bytes) = self {
            *self = RawSubscribeResponse::Fields(RawResponseFields::decode(bytes.clone())?);
        }
        match self {
            RawSubscribeResponse::Fields(fields) => fields.merge_field(tag, wire_type, buf, ctx),
            RawSubscribeResponse::Encoded(_) => unreachable!("decoded above"),
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            RawSubscribeResponse::Fields(fields) => fields.encoded_len(),
            RawSubscribeResponse::Encoded(bytes) => bytes.len(),
        }
    }

    fn clear(&mut self) {
        *self = RawSubscribeResponse::default();
    }
}

/// `ringfeed.v1.SubscribeResponse.item`, with raw events.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum RawItem {
    /// One event.
    #[prost(message, tag = "2")]
    Event(RawEventMessage),
    /// Several events.
    #[prost(message, tag = "3")]
    Batch(RawEventBatch),
    /// A heartbeat.
    #[prost(message, tag = "4")]
    Heartbeat(v1::Heartbeat),
    /// Raw stored records (chunk mode).
    #[prost(message, tag = "5")]
    Chunk(v1::ChunkMessage),
    /// End of chunk-mode catch-up.
    #[prost(message, tag = "6")]
    ChunkModeEnd(v1::ChunkModeEnd),
}

/// `ringfeed.v1.AppendRequest` as the server receives it: each event stays
/// the producer's encoding, so it can be stored verbatim (fields unknown to
/// this schema included). Decode a copy with `Event::decode(bytes.clone())`
/// to validate it; with `Bytes` input, `bytes` fields inside it are not copied.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawAppendRequest {
    /// Encoded `ringfeed.v1.Event`s, in request order.
    #[prost(bytes = "bytes", repeated, tag = "1")]
    pub events: Vec<Bytes>,
    /// When to acknowledge. Use `durability()` to read it as an enum
    /// (unknown values read as `Unspecified`, which means memory).
    #[prost(enumeration = "v1::Durability", tag = "2")]
    pub durability: i32,
    /// Idempotent producer (0: none) and the sequence of `events[0]`.
    #[prost(uint64, tag = "3")]
    pub producer_id: u64,
    #[prost(uint64, tag = "4")]
    pub first_sequence: u64,
}

impl From<v1::EventMessage> for RawEventMessage {
    /// Encodes the event. For tests and mock servers; the real server holds
    /// stored bytes and uses [`RawEventMessage::new`].
    fn from(m: v1::EventMessage) -> Self {
        Self {
            ts_ns: m.ts_ns,
            shard: m.shard,
            offset: m.offset,
            event: m.event.map(|e| Bytes::from(e.encode_to_vec())),
            node: m.node,
        }
    }
}

impl From<v1::EventBatch> for RawEventBatch {
    fn from(b: v1::EventBatch) -> Self {
        Self {
            events: b.events.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<v1::SubscribeResponse> for RawSubscribeResponse {
    /// Encodes any events. For tests and mock servers.
    fn from(r: v1::SubscribeResponse) -> Self {
        use v1::subscribe_response::Item;
        RawSubscribeResponse::Fields(RawResponseFields {
            cursor: r.cursor,
            item: r.item.map(|item| match item {
                Item::Event(e) => RawItem::Event(e.into()),
                Item::Batch(b) => RawItem::Batch(b.into()),
                Item::Heartbeat(h) => RawItem::Heartbeat(h),
                Item::Chunk(c) => RawItem::Chunk(c),
                Item::ChunkModeEnd(m) => RawItem::ChunkModeEnd(m),
            }),
        })
    }
}

impl From<v1::AppendRequest> for RawAppendRequest {
    /// Encodes the events. For tests and in-process callers.
    fn from(r: v1::AppendRequest) -> Self {
        Self {
            events: r
                .events
                .iter()
                .map(|e| Bytes::from(e.encode_to_vec()))
                .collect(),
            durability: r.durability,
            producer_id: r.producer_id,
            first_sequence: r.first_sequence,
        }
    }
}
