//! Filters, end to end: events appended through the engine and delivered
//! (or not) by header-only matching. Prefixes match at directory boundaries,
//! renames match by either path, excludes win over includes for a path,
//! signatures skip a subscriber's own events, and watched directories deliver
//! their direct children only.

use crate::common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{Engine, Filter, NewEvent, Start, SubscribeRequest};

fn create(dir: &str, name: &str) -> NewEvent {
    NewEvent {
        directory: dir.into(),
        new_name: name.into(),
        payload: format!("create {dir} {name}").into_bytes().into(),
        ..Default::default()
    }
}

fn rename(dir: &str, old: &str, new_parent: &str, new: &str) -> NewEvent {
    NewEvent {
        directory: dir.into(),
        old_name: old.into(),
        new_name: new.into(),
        new_parent: new_parent.into(),
        payload: format!("rename {dir}/{old} -> {new_parent}/{new}")
            .into_bytes()
            .into(),
        ..Default::default()
    }
}

fn delete(dir: &str, name: &str) -> NewEvent {
    NewEvent {
        directory: dir.into(),
        old_name: name.into(),
        payload: format!("delete {dir} {name}").into_bytes().into(),
        ..Default::default()
    }
}

fn signed(mut e: NewEvent, signatures: &[i32]) -> NewEvent {
    e.signatures = signatures.to_vec();
    e.payload = [&e.payload[..], format!(" signed {signatures:?}").as_bytes()]
        .concat()
        .into();
    e
}

/// The payloads (as strings) a filter delivers, in merged order.
fn delivered(engine: &Engine, filter: Filter, count_all: usize) -> Vec<String> {
    let all = {
        let mut sub = engine
            .subscribe(SubscribeRequest::from(Start::Beginning))
            .unwrap();
        take(&mut sub, count_all)
    };
    let until = all.iter().map(|e| e.2).max().unwrap();
    let mut sub = engine
        .subscribe(SubscribeRequest {
            filter,
            until_ns: Some(until),
            ..SubscribeRequest::from(Start::Beginning)
        })
        .unwrap();
    take_to_end(&mut sub)
        .into_iter()
        .map(|e| String::from_utf8(e.3).unwrap())
        .collect()
}

fn with_events(events: Vec<NewEvent>, check: impl FnOnce(&Engine, usize)) {
    let storages = vec![MemStorage::new(), MemStorage::new()];
    let engine = mem_engine(small_engine_config(2), &storages);
    let n = events.len();
    for e in events {
        append_all(&engine, vec![e]);
    }
    check(&engine, n);
    engine.shutdown().unwrap();
}

#[test]
fn prefixes_match_at_directory_boundaries() {
    let _watchdog = ringfeed_testkit::arm();
    with_events(
        vec![
            create("/a", "b"),   // the prefix itself: /a/b
            create("/a/b", "x"), // below it
            create("/a/b/c", "y"),
            create("/a", "bc"), // a sibling sharing the text prefix
            create("/a/bc", "z"),
            create("/", "a"),
        ],
        |engine, n| {
            assert_eq!(
                delivered(engine, Filter::prefix("/a/b"), n),
                ["create /a b", "create /a/b x", "create /a/b/c y"]
            );
            // A trailing slash means the same directory.
            assert_eq!(delivered(engine, Filter::prefix("/a/b/"), n).len(), 3);
            assert_eq!(delivered(engine, Filter::prefix("/"), n).len(), n);
            assert_eq!(delivered(engine, Filter::default(), n).len(), n);
            let two = Filter {
                prefixes: vec!["/a/bc".into(), "/a/b/c".into()],
                ..Filter::default()
            };
            assert_eq!(
                delivered(engine, two, n),
                ["create /a/b/c y", "create /a bc", "create /a/bc z"]
            );
        },
    );
}

#[test]
fn renames_match_by_either_path_in_both_directions() {
    let _watchdog = ringfeed_testkit::arm();
    with_events(
        vec![
            rename("/in", "f", "/out", "f"), // leaves the watched tree
            rename("/out", "g", "/in", "g"), // enters it
            rename("/in", "h", "", "h2"),    // renamed in place
            rename("/out", "i", "/elsewhere", "i"),
            rename("/inside", "j", "/outside", "j"), // text-prefix lookalikes only
        ],
        |engine, n| {
            assert_eq!(
                delivered(engine, Filter::prefix("/in"), n),
                [
                    "rename /in/f -> /out/f",
                    "rename /out/g -> /in/g",
                    "rename /in/h -> /h2"
                ]
            );
        },
    );
}

#[test]
fn excludes_signatures_and_watched_directories() {
    let _watchdog = ringfeed_testkit::arm();
    with_events(
        vec![
            create("/data", "a"),
            create("/data/tmp", "b"),
            create("/data/tmp/deep", "c"),
            rename("/data/tmp", "d", "/data", "d"), // out of the excluded part
            signed(create("/data", "mine"), &[7]),
            signed(create("/data", "theirs"), &[8, 9]),
            create("/watch", "child"),
            create("/watch/sub", "grandchild"),
        ],
        |engine, n| {
            let excluding = Filter {
                prefixes: vec!["/data".into()],
                exclude_prefixes: vec!["/data/tmp".into()],
                ..Filter::default()
            };
            assert_eq!(
                delivered(engine, excluding, n),
                [
                    "create /data a",
                    "rename /data/tmp/d -> /data/d",
                    "create /data mine signed [7]",
                    "create /data theirs signed [8, 9]"
                ]
            );
            let not_mine = Filter {
                prefixes: vec!["/data".into()],
                signature: Some(7),
                ..Filter::default()
            };
            let got = delivered(engine, not_mine, n);
            assert!(!got.iter().any(|p| p.contains("mine")), "{got:?}");
            assert!(got.iter().any(|p| p.contains("theirs")), "{got:?}");
            let watching = Filter {
                directories: vec!["/watch".into()],
                ..Filter::default()
            };
            assert_eq!(delivered(engine, watching, n), ["create /watch child"]);
            assert_eq!(
                delivered(engine, Filter::prefix("/data/tmp"), n).len(),
                3,
                "excluded paths are still there for others"
            );
        },
    );
}

#[test]
fn deletes_match_by_their_old_path_and_bad_filters_are_refused() {
    let _watchdog = ringfeed_testkit::arm();
    with_events(vec![delete("/x/y", "z"), create("/x", "w")], |engine, n| {
        assert_eq!(
            delivered(engine, Filter::prefix("/x/y"), n),
            ["delete /x/y z"]
        );
        for bad in ["relative", "/a//b", "/a/../b", "/nul\0"] {
            let err = engine
                .subscribe(SubscribeRequest {
                    filter: Filter::prefix(bad),
                    ..SubscribeRequest::from(Start::Beginning)
                })
                .err()
                .unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(err.to_string().contains("path_prefixes"), "{err}");
        }
    });
}
