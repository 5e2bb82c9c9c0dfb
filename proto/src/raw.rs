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
//! Cost on the wire path: no decode, no re-encode; a response is copied once,
//! into its own frame (by the server's stream queue, or once for every
//! stream that shares it), which [`ServerCodec`] hands to the transport
//! without copying it into tonic's encode buffer. A chunk's records are not
//! copied at all: its frame is three parts, the bytes before the records,
//! the records (a view of stored bytes) and the bytes after them.

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
/// the generated server's `SubscribeStream`. Either its fields, or a complete
/// gRPC frame of it, which [`ServerCodec`] hands to the transport as it is:
/// encoded once and queued to every stream it goes to (encode once for all),
/// or framed by the stream's queue with the memory it holds
/// ([`RawSubscribeResponse::into_frame`]).
#[derive(Clone, PartialEq, Debug)]
pub enum RawSubscribeResponse {
    Fields(RawResponseFields),
    /// A gRPC message frame: the 5-byte prefix (0: not compressed, then the
    /// length, big-endian), then the encoding of
    /// `ringfeed.v1.SubscribeResponse`, in up to three parts written in turn.
    Framed(Frames),
}

pub use tonic::codec::Frames;

/// The gRPC message prefix: a compression flag and a 4-byte length.
const PREFIX: usize = 5;

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

    /// Encodes a response once, as a frame, to be queued to many streams.
    pub fn encoded(cursor: Bytes, item: RawItem) -> Self {
        let fields = RawResponseFields {
            cursor,
            item: Some(item),
        };
        RawSubscribeResponse::Framed(frame(&fields).freeze().into())
    }

    /// The response as a gRPC frame whose bytes keep `lease` until the last
    /// of them is dropped: by the transport once it has written them (or
    /// its stream is gone). A framed response is not copied again, nor are
    /// a chunk's records ([`chunk_frame`]).
    pub fn into_frame<L: Send + 'static>(self, lease: L) -> Frames {
        let frames = match self {
            RawSubscribeResponse::Fields(RawResponseFields {
                cursor,
                item: Some(RawItem::Chunk(chunk)),
            }) => chunk_frame(&cursor, chunk),
            RawSubscribeResponse::Fields(fields) => frame(&fields).freeze().into(),
            RawSubscribeResponse::Framed(frames) => frames,
        };
        // The parts are written in order: the last one goes last.
        let mut parts = frames.into_parts();
        if let Some(last) = parts.iter_mut().rev().find(|p| !p.is_empty()) {
            *last = Bytes::from_owner(Leased {
                bytes: std::mem::take(last),
                _lease: lease,
            });
        }
        Frames::new(parts)
    }

    /// The response's fields (a framed one decoded: events stay views of
    /// its bytes).
    pub fn into_fields(self) -> Result<RawResponseFields, prost::DecodeError> {
        match self {
            RawSubscribeResponse::Fields(fields) => Ok(fields),
            RawSubscribeResponse::Framed(frames) => {
                RawResponseFields::decode(joined(&frames).slice(PREFIX..))
            }
        }
    }
}

/// The frames' bytes in one buffer (a copy unless there is one part).
fn joined(frames: &Frames) -> Bytes {
    match frames.parts() {
        [one, b, c] if b.is_empty() && c.is_empty() => one.clone(),
        parts => parts.concat().into(),
    }
}

/// A chunk response as a gRPC frame in three parts: the prefix and every
/// byte before the records, the records themselves (not copied), and the
/// fields after them. Joined, the parts are exactly the prost encoding of
/// `RawResponseFields { cursor, item: Chunk(chunk) }` after its prefix.
pub fn chunk_frame(cursor: &Bytes, mut chunk: v1::ChunkMessage) -> Frames {
    use bytes::BufMut;
    use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
    let records = std::mem::take(&mut chunk.records);
    // Fields 1-4, then 6-8, each as prost writes them (records empty: left out).
    let before = v1::ChunkMessage {
        first_ts_ns: 0,
        last_ts_ns: 0,
        node: 0,
        ..chunk
    };
    let after = v1::ChunkMessage {
        first_ts_ns: chunk.first_ts_ns,
        last_ts_ns: chunk.last_ts_ns,
        node: chunk.node,
        ..Default::default()
    };
    let records_key = key_len(5) + encoded_len_varint(records.len() as u64);
    let chunk_len = before.encoded_len() + records_key + records.len() + after.encoded_len();
    let cursor_len = if cursor.is_empty() {
        0
    } else {
        key_len(1) + encoded_len_varint(cursor.len() as u64) + cursor.len()
    };
    let len = cursor_len + key_len(5) + encoded_len_varint(chunk_len as u64) + chunk_len;
    let mut head =
        bytes::BytesMut::with_capacity(PREFIX + len - records.len() - after.encoded_len());
    head.put_u8(0);
    head.put_u32(u32::try_from(len).expect("a response is far below 4 GiB"));
    if !cursor.is_empty() {
        prost::encoding::bytes::encode(1, cursor, &mut head);
    }
    encode_key(5, WireType::LengthDelimited, &mut head);
    encode_varint(chunk_len as u64, &mut head);
    before.encode_raw(&mut head);
    encode_key(5, WireType::LengthDelimited, &mut head);
    encode_varint(records.len() as u64, &mut head);
    let mut tail = bytes::BytesMut::with_capacity(after.encoded_len());
    after.encode_raw(&mut tail);
    Frames::new([head.freeze(), records, tail.freeze()])
}

/// `fields` encoded after a gRPC prefix, in one allocation of its size.
fn frame(fields: &RawResponseFields) -> bytes::BytesMut {
    use bytes::BufMut;
    let len = fields.encoded_len();
    let mut buf = bytes::BytesMut::with_capacity(PREFIX + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).expect("a response is far below 4 GiB"));
    fields.encode_raw(&mut buf);
    buf
}

/// A frame's bytes and what they keep while they live.
struct Leased<L> {
    bytes: Bytes,
    _lease: L,
}

impl<L> AsRef<[u8]> for Leased<L> {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// By hand: a framed response is its encoding after the prefix; a fields
/// response is the derived encoding of its fields.
impl Message for RawSubscribeResponse {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        match self {
            RawSubscribeResponse::Fields(fields) => fields.encode_raw(buf),
            RawSubscribeResponse::Framed(frames) => {
                let [first, second, third] = frames.parts();
                buf.put_slice(&first[PREFIX..]);
                buf.put_slice(second);
                buf.put_slice(third);
            }
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        if let RawSubscribeResponse::Framed(frames) = self {
            let fields = RawResponseFields::decode(joined(frames).slice(PREFIX..))?;
            *self = RawSubscribeResponse::Fields(fields);
        }
        match self {
            RawSubscribeResponse::Fields(fields) => fields.merge_field(tag, wire_type, buf, ctx),
            RawSubscribeResponse::Framed(_) => unreachable!("decoded above"),
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            RawSubscribeResponse::Fields(fields) => fields.encoded_len(),
            RawSubscribeResponse::Framed(frames) => frames.len() - PREFIX,
        }
    }

    fn clear(&mut self) {
        *self = RawSubscribeResponse::default();
    }
}

/// The generated server's codec: prost's, except that a response that is
/// already a gRPC frame ([`RawSubscribeResponse::Framed`]) goes to the
/// transport as it is (through the patched tonic's `Encoder::frame`, see
/// `engine/vendor/PATCHES.md`): not copied into tonic's encode buffer, and
/// what its bytes keep (a stream's response budget) lasts until hyper has
/// written them. A request that does not decode is INVALID_ARGUMENT
/// ([`ServerDecoder`]).
pub struct ServerCodec<T, U>(std::marker::PhantomData<(T, U)>);

impl<T, U> Default for ServerCodec<T, U> {
    fn default() -> Self {
        ServerCodec(std::marker::PhantomData)
    }
}

/// A message the server sends: encoded as usual unless it is a frame.
pub trait ServerMessage: Message + Sized {
    /// The message as a complete gRPC frame, or itself to be encoded.
    fn into_grpc_frame(self) -> Result<Frames, Self> {
        Err(self)
    }
}

impl ServerMessage for RawSubscribeResponse {
    fn into_grpc_frame(self) -> Result<Frames, Self> {
        match self {
            RawSubscribeResponse::Framed(frames) => Ok(frames),
            fields => Err(fields),
        }
    }
}

impl ServerMessage for v1::AppendResponse {}
impl ServerMessage for v1::StatusResponse {}
impl ServerMessage for v1::ListSubscribersResponse {}
impl ServerMessage for v1::ListNodesResponse {}

impl<T, U> tonic::codec::Codec for ServerCodec<T, U>
where
    T: ServerMessage + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ServerEncoder<T>;
    type Decoder = ServerDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ServerEncoder(std::marker::PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        ServerDecoder(std::marker::PhantomData)
    }
}

/// [`ServerCodec`]'s decoder: prost's, except that a request that is not a
/// valid message is INVALID_ARGUMENT (the client sent it wrong), where tonic
/// answers INTERNAL, which tells a client the server is broken.
pub struct ServerDecoder<U>(std::marker::PhantomData<U>);

impl<U: Message + Default> tonic::codec::Decoder for ServerDecoder<U> {
    type Item = U;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        buf: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<U>, tonic::Status> {
        U::decode(buf).map(Some).map_err(|e| {
            tonic::Status::invalid_argument(format!("the request is not a valid message: {e}"))
        })
    }
}

/// [`ServerCodec`]'s encoder.
pub struct ServerEncoder<T>(std::marker::PhantomData<T>);

impl<T: ServerMessage> tonic::codec::Encoder for ServerEncoder<T> {
    type Item = T;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: T,
        buf: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        item.encode(buf)
            .expect("Message only errors if not enough space");
        Ok(())
    }

    fn frame(&mut self, item: T) -> Result<Frames, T> {
        item.into_grpc_frame()
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

/// `filer_pb.SubscribeMetadataResponse` as ringfeed's filer API sends it:
/// the item type of the generated filer server's metadata streams. Either
/// its fields, encoded as usual, or complete gRPC frames: one message or
/// several back to back, encoded once and sent to every stream they go to
/// (a client reads a stream's messages from its bytes whatever the HTTP/2
/// frames, so many small messages go out in one write).
///
/// Not a `prost::Message` on purpose: frames of several messages have no
/// single message's encoding, and [`FilerServerCodec`] sends them only as
/// they are.
#[derive(Clone, PartialEq, Debug)]
pub enum RawFilerResponse {
    Fields(Box<crate::filer_pb::SubscribeMetadataResponse>),
    /// One or more gRPC messages, each its 5-byte prefix (0: not
    /// compressed, then the length, big-endian) and then the encoding of a
    /// `filer_pb.SubscribeMetadataResponse`.
    Frames(Bytes),
}

impl RawFilerResponse {
    /// `message`'s encoding as one gRPC frame.
    pub fn frame(message: &crate::filer_pb::SubscribeMetadataResponse) -> Bytes {
        use bytes::BufMut;
        let len = message.encoded_len();
        let mut buf = bytes::BytesMut::with_capacity(PREFIX + len);
        buf.put_u8(0);
        buf.put_u32(u32::try_from(len).expect("a response is far below 4 GiB"));
        message.encode_raw(&mut buf);
        buf.freeze()
    }

    /// The response as gRPC frames whose bytes keep `lease` until the last
    /// of them is dropped (by the transport once it has written them, or
    /// its stream is gone). Frames are not copied again.
    pub fn into_leased_frames<L: Send + 'static>(self, lease: L) -> Bytes {
        let bytes = match self {
            RawFilerResponse::Fields(fields) => RawFilerResponse::frame(&fields),
            RawFilerResponse::Frames(bytes) => bytes,
        };
        Bytes::from_owner(Leased {
            bytes,
            _lease: lease,
        })
    }

    /// The messages of [`RawFilerResponse::Frames`] (for tests and checks):
    /// `None` when the bytes are not whole frames.
    pub fn messages(frames: &[u8]) -> Option<Vec<&[u8]>> {
        let mut rest = frames;
        let mut messages = Vec::new();
        while !rest.is_empty() {
            let (prefix, after) = rest.split_first_chunk::<PREFIX>()?;
            let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
            if prefix[0] != 0 || after.len() < len {
                return None;
            }
            messages.push(&after[..len]);
            rest = &after[len..];
        }
        Some(messages)
    }
}

/// What the filer server sends: encoded by prost, or frames as they are.
pub trait FilerServerItem: Sized {
    /// Encodes the item as one message (the path tonic takes without frames).
    fn encode_message(self, buf: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status>;
    /// The item as complete gRPC frames, or itself to be encoded.
    fn into_frames(self) -> Result<Bytes, Self> {
        Err(self)
    }
}

impl<M: Message> FilerServerItem for M {
    fn encode_message(self, buf: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        self.encode(buf)
            .expect("Message only errors if not enough space");
        Ok(())
    }
}

impl FilerServerItem for RawFilerResponse {
    fn encode_message(self, buf: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        match self {
            RawFilerResponse::Fields(fields) => fields.encode_message(buf),
            // Only compression takes this path, and the filer listener
            // never compresses.
            RawFilerResponse::Frames(_) => Err(tonic::Status::internal(
                "encoded responses cannot be compressed",
            )),
        }
    }

    fn into_frames(self) -> Result<Bytes, Self> {
        match self {
            RawFilerResponse::Frames(bytes) => Ok(bytes),
            fields => Err(fields),
        }
    }
}

/// The generated filer server's codec: prost's for every RPC, except that
/// [`RawFilerResponse::Frames`] go to the transport as they are (through
/// the patched tonic's `Encoder::frame`), and a request that does not
/// decode is INVALID_ARGUMENT ([`ServerDecoder`]).
pub struct FilerServerCodec<T, U>(std::marker::PhantomData<(T, U)>);

impl<T, U> Default for FilerServerCodec<T, U> {
    fn default() -> Self {
        FilerServerCodec(std::marker::PhantomData)
    }
}

impl<T, U> tonic::codec::Codec for FilerServerCodec<T, U>
where
    T: FilerServerItem + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = FilerServerEncoder<T>;
    type Decoder = ServerDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        FilerServerEncoder(std::marker::PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        ServerDecoder(std::marker::PhantomData)
    }
}

/// [`FilerServerCodec`]'s encoder.
pub struct FilerServerEncoder<T>(std::marker::PhantomData<T>);

impl<T: FilerServerItem> tonic::codec::Encoder for FilerServerEncoder<T> {
    type Item = T;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: T,
        buf: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        item.encode_message(buf)
    }

    fn frame(&mut self, item: T) -> Result<Frames, T> {
        item.into_frames().map(Frames::from)
    }
}
