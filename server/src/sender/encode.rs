//! Engine deliveries as response items: events (as a read scope shows
//! them), chunks of stored records, heartbeats.

use std::sync::Arc;

use ringfeed_engine::{Delivered, RawChunk, ShardShared, Subscription};
use ringfeed_proto::{v1, RawEventMessage, RawItem};

use super::StreamOptions;

fn raw_event(d: &Delivered) -> RawEventMessage {
    RawEventMessage::new(d.ts, d.shard, d.offset, d.payload())
}

/// Adds `d` to `events` as the stream's read scope, if any, shows it.
pub(super) fn shown(d: &Delivered, options: &StreamOptions, events: &mut Vec<RawEventMessage>) {
    let Some(scope) = &options.scope else {
        events.push(raw_event(d));
        return;
    };
    let payload = d.payload();
    match scope.show_record(&d.header(), &payload) {
        crate::auth::Shown::Same => events.push(raw_event(d)),
        crate::auth::Shown::Rewritten(bytes) => {
            events.push(RawEventMessage::new(d.ts, d.shard, d.offset, bytes))
        }
        crate::auth::Shown::Hidden => {}
    }
}

/// A stored chunk as a response item (`node`: its node's id in a cluster
/// stream, 0 in node scope).
pub(crate) fn chunk_message(chunk: RawChunk, node: u32) -> v1::ChunkMessage {
    v1::ChunkMessage {
        shard: chunk.shard,
        first_offset: chunk.first_offset,
        record_count: chunk.count as u32,
        crc32c: chunk.crc32c(),
        records: chunk.records,
        first_ts_ns: chunk.first_ts,
        last_ts_ns: chunk.last_ts,
        node,
    }
}

pub(super) fn heartbeat_item(shards: &[Arc<ShardShared>], sub: &Subscription) -> RawItem {
    let shards = shards
        .iter()
        .map(|shard| {
            let w = shard.watermarks.snapshot();
            v1::ShardWatermark {
                shard: shard.id,
                committed_next: w.committed_next,
                claimed_ts_ns: w.claimed_ts,
                flushed_next: w.flushed_next,
                flushed_ts_ns: w.flushed_ts,
            }
        })
        .collect();
    RawItem::Heartbeat(v1::Heartbeat {
        merged_watermark_ns: sub.watermark(),
        shards,
        ..Default::default()
    })
}
