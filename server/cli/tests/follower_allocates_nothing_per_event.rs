//! The client library allocates nothing per event in the steady state
//! (issue 19): responses are read in place, events are views of the bytes
//! received, and their fields are read without building messages. Counted on
//! the follower's own thread (a current-thread runtime, so its connection's
//! HTTP/2 and gRPC decoding run there too) while it catches up on 30,000
//! events in batches and in chunks; the server runs on other threads.
//!
//! Allocations per response (the receive buffer, the response's cursor) are
//! allowed: a batch or chunk carries hundreds of events, so the bound is far
//! below one per event yet fails at once if anything allocates per event.

#[path = "it/common.rs"]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::*;
use ringfeed_proto::v1::{self, subscribe_request::Start};
use ringfeed_server::client::{Backoff, Follower};

struct CountingPerThread;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// count is a const-initialised thread-local Cell (no allocation, no destructor).
unsafe impl GlobalAlloc for CountingPerThread {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: CountingPerThread = CountingPerThread;

fn allocations() -> u64 {
    ALLOCATIONS.with(|c| c.get())
}

const EVENTS: u64 = 30_000;
/// Events read before counting starts (connection set-up, buffers growing).
const WARM_UP: u64 = 5_000;

#[test]
fn catching_up_allocates_nothing_per_event() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = server_rt.block_on(async {
        let server = TestServer::start(dma_engine(dir.path(), 2)).await;
        let mut client = server.client().await;
        for first in (0..EVENTS).step_by(1_000) {
            let events = (first..first + 1_000)
                .map(|i| create(&format!("/alloc/d{}", i % 7), &format!("f{i}")))
                .collect();
            client.append(request(events, false)).await.unwrap();
        }
        server
    });
    let addr = server.addr.to_string();
    for chunk_mode in [false, true] {
        let follower_rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (counted, read) = follower_rt.block_on(async {
            let request = v1::SubscribeRequest {
                start: Some(Start::Beginning(true)),
                batching: true,
                chunk_mode,
                ..Default::default()
            };
            let mut follower = Follower::new(&addr, request, Backoff::default()).unwrap();
            let (mut read, mut before, mut names) = (0u64, 0u64, 0usize);
            while read < EVENTS {
                let event = follower
                    .next()
                    .await
                    .unwrap()
                    .expect("no until_ns: never ends");
                let view = event.view();
                let entry = view.new_entry().unwrap().expect("a create has a new entry");
                assert!(view.directory().unwrap().starts_with("/alloc/d"));
                names += entry.name().unwrap().len() + entry.size().unwrap() as usize;
                read += 1;
                if read == WARM_UP {
                    before = allocations();
                }
            }
            assert!(names > 0);
            (allocations() - before, read - WARM_UP)
        });
        let per_event = counted as f64 / read as f64;
        println!("chunk mode {chunk_mode}: {counted} allocations over {read} events ({per_event:.4} per event)");
        assert!(
            per_event < 0.05,
            "chunk mode {chunk_mode}: {counted} allocations for {read} events: something allocates per event"
        );
    }
    server_rt.block_on(server.stop());
}
