//! Reads scoped to paths (issue 21): a subscriber whose token reads `/a`
//! sees a rename from `/a/x` to `/b/x` as a delete of `/a/x` and a rename
//! from `/b/y` into `/a/y` as a create of `/a/y`, never a path outside `/a`
//! (not `/b`, not `/ab`), in event mode, in chunk mode (served as events
//! for it) and through a server restart; a filter outside its scope is
//! refused without naming a path.

use std::time::Duration;

use crate::serve_binary::{new_token, Server};
use ringfeed_proto::prost::Message;
use ringfeed_proto::tonic::{metadata::MetadataValue, Code, Request};
use ringfeed_proto::v1::{self, subscribe_response::Item};
use ringfeed_proto::RingFeedClient;
use ringfeed_server::client::{Backoff, Follower};

fn entry(name: &str) -> Option<v1::Entry> {
    Some(v1::Entry {
        name: name.into(),
        ..Default::default()
    })
}

fn create(dir: &str, name: &str) -> v1::Event {
    v1::Event {
        directory: dir.into(),
        new_entry: entry(name),
        ..Default::default()
    }
}

fn rename(dir: &str, name: &str, to: &str) -> v1::Event {
    v1::Event {
        directory: dir.into(),
        old_entry: entry(name),
        new_entry: entry(name),
        new_parent_path: to.into(),
        ..Default::default()
    }
}

/// An event as (what happened, path): "create /a/x", "delete /a/x",
/// "rename /a/x -> /a/d/x".
fn described(e: &v1::Event) -> String {
    let join = |d: &str, n: &str| format!("{}/{n}", d.trim_end_matches('/'));
    let new_dir = if e.new_parent_path.is_empty() {
        &e.directory
    } else {
        &e.new_parent_path
    };
    match (&e.old_entry, &e.new_entry) {
        (None, Some(n)) => format!("create {}", join(new_dir, &n.name)),
        (Some(o), None) => format!("delete {}", join(&e.directory, &o.name)),
        (Some(o), Some(n)) => format!(
            "rename {} -> {}",
            join(&e.directory, &o.name),
            join(new_dir, &n.name)
        ),
        (None, None) => format!("dir {}", e.directory),
    }
}

async fn append(
    client: &mut RingFeedClient<ringfeed_proto::tonic::transport::Channel>,
    auth: &str,
    event: v1::Event,
) {
    let mut request = Request::new(v1::AppendRequest {
        events: vec![event],
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("authorization", MetadataValue::try_from(auth).unwrap());
    client.append(request).await.unwrap();
}

/// The first `count` events of a subscription under `auth`, described.
async fn read(addr: &str, auth: &str, r: v1::SubscribeRequest, count: usize) -> Vec<String> {
    let mut client = RingFeedClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut request = Request::new(r);
    request
        .metadata_mut()
        .insert("authorization", MetadataValue::try_from(auth).unwrap());
    let mut stream = client.subscribe(request).await.unwrap().into_inner();
    let mut seen = Vec::new();
    while seen.len() < count {
        let response = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .unwrap_or_else(|_| panic!("{} of {count} events in 10 s: {seen:?}", seen.len()))
            .unwrap()
            .unwrap();
        let events = match response.item {
            Some(Item::Event(e)) => vec![e],
            Some(Item::Batch(b)) => b.events,
            Some(Item::Chunk(_)) => panic!("a chunk to a scoped subscriber"),
            _ => Vec::new(),
        };
        for e in events {
            let event = e.event.expect("an event");
            let bytes = event.encode_to_vec();
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains("/b") && !text.contains("/ab"), "{event:?}");
            seen.push(described(&event));
        }
    }
    // Nothing more (the last event appended is out of scope).
    let more = tokio::time::timeout(Duration::from_millis(300), async {
        loop {
            let r = stream.message().await.unwrap().unwrap();
            if matches!(r.item, Some(Item::Event(_)) | Some(Item::Batch(_))) {
                return r;
            }
        }
    })
    .await;
    assert!(more.is_err(), "more than {count} events: {more:?}");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_reader_sees_nothing_outside_its_scope() {
    let _watchdog = ringfeed_testkit::arm();
    let (writer, writer_table) = new_token(&["--append", "/", "--read", "/"]);
    let (reader, reader_table) = new_token(&["--read", "/a"]);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = dir.path().join("tokens.toml");
    std::fs::write(&file, format!("{writer_table}{reader_table}")).unwrap();
    let data = dir.path().join("data");
    let flags = ["--token-file", file.to_str().unwrap()];
    let server = Server::start_with(&data, 2, &flags);
    let addr = server.addr.clone();
    let (writer_h, reader_h) = (format!("Bearer {writer}"), format!("Bearer {reader}"));
    let mut client = RingFeedClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    for event in [
        create("/a", "x1"),
        create("/b", "y1"),
        rename("/a", "x1", "/b"),
        rename("/b", "y1", "/a"),
        rename("/a", "y1", "/a/d"),
        create("/a/sub", "z"),
        create("/ab", "w"),
        create("/b", "q"),
    ] {
        append(&mut client, &writer_h, event).await;
    }
    let want = [
        "create /a/x1",
        "delete /a/x1",
        "create /a/y1",
        "rename /a/y1 -> /a/d/y1",
        "create /a/sub/z",
    ];
    let beginning = || v1::SubscribeRequest {
        start: Some(v1::subscribe_request::Start::Beginning(true)),
        ..Default::default()
    };
    for (what, request) in [
        ("events", beginning()),
        (
            "batches",
            v1::SubscribeRequest {
                batching: true,
                ..beginning()
            },
        ),
        (
            "chunk mode",
            v1::SubscribeRequest {
                chunk_mode: true,
                ..beginning()
            },
        ),
        (
            "a filter of /",
            v1::SubscribeRequest {
                path_prefix: "/".into(),
                ..beginning()
            },
        ),
    ] {
        assert_eq!(
            read(&addr, &reader_h, request, want.len()).await,
            want,
            "{what}"
        );
    }
    // A narrower filter inside the scope: only its part.
    let narrow = v1::SubscribeRequest {
        path_prefix: "/a/sub".into(),
        ..beginning()
    };
    assert_eq!(read(&addr, &reader_h, narrow, 1).await, ["create /a/sub/z"]);
    // A filter outside the scope: refused, naming no path.
    let mut request = Request::new(v1::SubscribeRequest {
        path_prefix: "/b".into(),
        ..beginning()
    });
    request.metadata_mut().insert(
        "authorization",
        MetadataValue::try_from(reader_h.as_str()).unwrap(),
    );
    let denied = client.subscribe(request).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(!denied.message().contains("/b"), "{denied:?}");

    // Through a restart: the client library follows with the token.
    let mut follower = Follower::new(&addr, beginning(), Backoff::default())
        .unwrap()
        .with_token(Some(&reader))
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let e = follower.next().await.unwrap().unwrap();
        seen.push(described(&e.decode().unwrap()));
    }
    server.stop();
    let server = Server::start_on_with(&data, 2, &addr, &flags);
    let mut client = RingFeedClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    append(&mut client, &writer_h, create("/a", "after")).await;
    append(&mut client, &writer_h, rename("/a", "after", "/b")).await;
    while seen.len() < want.len() + 2 {
        let e = tokio::time::timeout(Duration::from_secs(20), follower.next())
            .await
            .expect("the follower goes on after the restart")
            .unwrap()
            .unwrap();
        let event = e.decode().unwrap();
        let bytes = event.encode_to_vec();
        assert!(!String::from_utf8_lossy(&bytes).contains("/b"), "{event:?}");
        seen.push(described(&event));
    }
    let mut all: Vec<&str> = want.to_vec();
    all.extend(["create /a/after", "delete /a/after"]);
    assert_eq!(seen, all, "exactly once, in order, through the restart");
}
