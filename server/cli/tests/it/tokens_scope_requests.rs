//! Tokens (issue 21, first part): `ringfeed token new` makes a token and its
//! table; a server started with `--token-file` refuses requests without a
//! known token (UNAUTHENTICATED, bad tokens of every shape, no panic), an
//! append outside the token's append prefixes whole (PERMISSION_DENIED
//! naming the path, nothing of the batch stored), status without admin; a
//! token scoped to /a reads /a; a token file rewritten and SIGHUP takes
//! effect without a restart. The CLI sends --token or RINGFEED_TOKEN.
//! Cluster nodes whose peers have token files reach them with --peer-token.
//! A listen address other hosts can reach needs TLS and tokens, or
//! --insecure.

use std::time::{Duration, Instant};

use crate::serve_binary::{new_token, run_bounded, Server};
use ringfeed_proto::tonic::{self, metadata::MetadataValue, Code, Request};
use ringfeed_proto::v1;
use ringfeed_proto::RingFeedClient;

/// A new token with `flags`: (token, its table).
fn with_token<T>(message: T, authorization: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(value) = authorization {
        request
            .metadata_mut()
            .insert("authorization", MetadataValue::try_from(value).unwrap());
    }
    request
}

fn append_request(directory: &str, names: &[&str]) -> v1::AppendRequest {
    v1::AppendRequest {
        events: names
            .iter()
            .map(|name| v1::Event {
                directory: directory.into(),
                new_entry: Some(v1::Entry {
                    name: (*name).into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

async fn committed(client: &mut RingFeedClient<tonic::transport::Channel>, admin: &str) -> u64 {
    let status = client
        .status(with_token(v1::StatusRequest::default(), Some(admin)))
        .await
        .unwrap()
        .into_inner();
    status.shards.iter().map(|s| s.committed_next).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_need_a_token_within_its_scope() {
    let _watchdog = ringfeed_testkit::arm();
    let (writer, writer_table) = new_token(&["--append", "/a/", "--read", "/"]);
    let (admin, admin_table) = new_token(&["--read", "/", "--admin"]);
    let (scoped, scoped_table) = new_token(&["--read", "/a"]);
    let (append_only, append_only_table) = new_token(&["--append", "/a"]);
    assert!(
        !writer_table.contains(&writer),
        "the table never holds the token"
    );
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = dir.path().join("tokens.toml");
    std::fs::write(
        &file,
        format!("{writer_table}{admin_table}{scoped_table}{append_only_table}"),
    )
    .unwrap();
    let server = Server::start_with(
        &dir.path().join("data"),
        2,
        &["--token-file", file.to_str().unwrap()],
    );
    let mut client = RingFeedClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    let (writer_h, admin_h, scoped_h) = (
        format!("Bearer {writer}"),
        format!("Bearer {admin}"),
        format!("Bearer {scoped}"),
    );

    // Missing and bad tokens of every shape.
    // Past the server's 4 KiB limit, under HTTP/2's header limit (larger
    // headers are refused by HTTP/2 itself, RESOURCE_EXHAUSTED).
    let huge = format!("Bearer {}", "x".repeat(5_000));
    for bad in [
        None,
        Some(""),
        Some("Bearer "),
        Some("bearer x"),
        Some("Basic dXNlcjpwYXNz"),
        Some(writer.as_str()),
        Some("Bearer rf_not-a-known-token"),
        Some(huge.as_str()),
    ] {
        let status = client
            .append(with_token(append_request("/a", &["f"]), bad))
            .await
            .unwrap_err();
        let shown: Option<String> = bad.map(|b| b.chars().take(40).collect());
        assert_eq!(
            status.code(),
            Code::Unauthenticated,
            "{shown:?}: {status:?}"
        );
        assert!(!status.message().contains(&writer));
    }
    // Bytes that are not UTF-8 (HTTP allows 0x80-0xff in a header value).
    let mut request = Request::new(append_request("/a", &["f"]));
    let mut headers = ringfeed_proto::tonic::codegen::http::HeaderMap::new();
    let value = b"Bearer \xff\xfe\x80";
    let value = ringfeed_proto::tonic::codegen::http::HeaderValue::from_bytes(value).unwrap();
    headers.insert("authorization", value);
    *request.metadata_mut() = ringfeed_proto::tonic::metadata::MetadataMap::from_headers(headers);
    let status = client.append(request).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");

    // In scope: stored. Out of scope: refused whole, naming the path.
    client
        .append(with_token(
            append_request("/a", &["f1", "f2"]),
            Some(&writer_h),
        ))
        .await
        .unwrap();
    assert_eq!(committed(&mut client, &admin_h).await, 2);
    let denied = client
        .append(with_token(append_request("/ab", &["f3"]), Some(&writer_h)))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(denied.message().contains("/ab/f3"), "{denied:?}");
    let mut mixed = append_request("/a", &["ok"]);
    mixed.events.extend(append_request("/b", &["no"]).events);
    let denied = client
        .append(with_token(mixed, Some(&writer_h)))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert_eq!(
        committed(&mut client, &admin_h).await,
        2,
        "nothing of it stored"
    );
    // The admin token may not append.
    let denied = client
        .append(with_token(append_request("/a", &["x"]), Some(&admin_h)))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);

    // Admin requests.
    for token in [&writer_h, &scoped_h] {
        let denied = client
            .status(with_token(v1::StatusRequest::default(), Some(token)))
            .await
            .unwrap_err();
        assert_eq!(denied.code(), Code::PermissionDenied);
        let denied = client
            .list_subscribers(with_token(v1::ListSubscribersRequest {}, Some(token)))
            .await
            .unwrap_err();
        assert_eq!(denied.code(), Code::PermissionDenied);
    }

    // Reads: a token that reads everything.
    let subscribe = || v1::SubscribeRequest {
        start: Some(v1::subscribe_request::Start::Beginning(true)),
        ..Default::default()
    };
    let mut stream = client
        .subscribe(with_token(subscribe(), Some(&writer_h)))
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .unwrap()
        .unwrap();
    assert!(first.is_some());
    // A named client's stream is superseded only by the same token: the
    // same name, id and a higher epoch under another token is another
    // client, and the first stream goes on.
    let named = |epoch: u64| v1::SubscribeRequest {
        client_name: "sync".into(),
        client_id: 7,
        client_epoch: epoch,
        start: Some(v1::subscribe_request::Start::Now(true)),
        ..Default::default()
    };
    let mut first_stream = client
        .subscribe(with_token(named(1), Some(&writer_h)))
        .await
        .unwrap()
        .into_inner();
    let _second = client
        .subscribe(with_token(named(2), Some(&admin_h)))
        .await
        .unwrap()
        .into_inner();
    client
        .append(with_token(
            append_request("/a", &["after"]),
            Some(&writer_h),
        ))
        .await
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), first_stream.message())
        .await
        .unwrap();
    assert!(
        matches!(next, Ok(Some(_))),
        "the first token's stream goes on: {next:?}"
    );

    // A token that may only append may not read.
    let denied = client
        .subscribe(with_token(
            subscribe(),
            Some(&format!("Bearer {append_only}")),
        ))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    // A token scoped to /a reads /a (tokens_scoped_reads.rs has the rest).
    let mut scoped_stream = client
        .subscribe(with_token(subscribe(), Some(&scoped_h)))
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(10), scoped_stream.message())
        .await
        .unwrap()
        .unwrap()
        .expect("an event");
    let Some(v1::subscribe_response::Item::Event(e)) = first.item else {
        panic!("an event first: {first:?}");
    };
    assert_eq!(e.event.unwrap().directory, "/a");

    // The CLI: --token, or RINGFEED_TOKEN; none is refused with the code's name.
    let cli = |args: &[&str], env_token: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ringfeed"));
        command.args(args).env_remove("RINGFEED_TOKEN");
        if let Some(token) = env_token {
            command.env("RINGFEED_TOKEN", token);
        }
        run_bounded(command, None, Duration::from_secs(20))
    };
    let server_flag = ["--server", server.addr.as_str()];
    let out = cli(
        &[
            &["append", "--dir", "/a/cli", "--name", "f", "--op", "create"][..],
            &server_flag[..],
            &["--token", &writer],
        ]
        .concat(),
        None,
    );
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.stderr);
    let out = cli(
        &[
            &["append", "--dir", "/a/cli", "--name", "g", "--op", "create"][..],
            &server_flag[..],
        ]
        .concat(),
        None,
    );
    assert!(out.stderr.contains("UNAUTHENTICATED"), "{}", out.stderr);
    // The CLI says how to give one (issue 35).
    assert!(
        out.stderr.contains("--token") && out.stderr.contains("RINGFEED_TOKEN"),
        "{}",
        out.stderr
    );
    let out = cli(&[&["status"][..], &server_flag[..]].concat(), Some(&admin));
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.stderr);
    let out = cli(&[&["status"][..], &server_flag[..]].concat(), Some(&writer));
    assert!(out.stderr.contains("PERMISSION_DENIED"), "{}", out.stderr);
    let out = cli(
        &[
            &["tail", "--beginning", "--until-ns", "1"][..],
            &server_flag[..],
        ]
        .concat(),
        Some(&writer),
    );
    assert!(
        out.status.is_some_and(|s| s.success()),
        "tail: {}",
        out.stderr
    );
    let out = cli(
        &[
            &["tail", "--beginning", "--until-ns", "1"][..],
            &server_flag[..],
        ]
        .concat(),
        None,
    );
    assert!(
        out.stderr.contains("UNAUTHENTICATED"),
        "tail: {}",
        out.stderr
    );

    // Reload: the writer's table removed; SIGHUP; it is unknown now, and the
    // server kept running.
    std::fs::write(&file, format!("{admin_table}{scoped_table}")).unwrap();
    server.hangup();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let result = client
            .append(with_token(
                append_request("/a", &["after"]),
                Some(&writer_h),
            ))
            .await;
        match result {
            Err(status) if status.code() == Code::Unauthenticated => break,
            _ => {
                assert!(
                    Instant::now() < deadline,
                    "the reload took no effect in 10 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert!(committed(&mut client, &admin_h).await >= 2);
}

/// A server that other hosts could reach without TLS is refused before it
/// listens, unless --insecure.
#[test]
fn a_reachable_listen_address_needs_insecure() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(["serve", "--listen", "0.0.0.0:0", "--data-dir"]);
    command.arg(dir.path().join("data"));
    let out = run_bounded(command, None, Duration::from_secs(20));
    assert_eq!(out.status.and_then(|s| s.code()), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("--insecure"), "{}", out.stderr);
    assert!(!out.stdout.contains("listening on"), "{}", out.stdout);
}

/// Two nodes with token files reach each other with --peer-token: both are
/// up, and a cluster stream on node 1 delivers both nodes' events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_nodes_reach_each_other_with_a_peer_token() {
    let _watchdog = ringfeed_testkit::arm();
    let (peer, peer_table) = new_token(&["--read", "/", "--admin"]);
    let (writer, writer_table) = new_token(&["--append", "/", "--read", "/"]);
    let ports = crate::cluster_nodes::free_ports(2);
    let dirs = crate::cluster_nodes::data_dirs(2, "tokens-cluster-");
    let _servers: Vec<Server> = (0..2)
        .map(|i| {
            let file = dirs[i].path().join("tokens.toml");
            std::fs::write(&file, format!("{peer_table}{writer_table}")).unwrap();
            let flags = [
                "--token-file",
                file.to_str().unwrap(),
                "--peer-token",
                &peer,
            ];
            crate::cluster_nodes::start_node(&ports, dirs[i].path(), i, 1, &flags)
        })
        .collect();
    let (peer_h, writer_h) = (format!("Bearer {peer}"), format!("Bearer {writer}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    for addr in &ports {
        let mut client = crate::cluster_nodes::client(addr).await;
        loop {
            let nodes = client
                .list_nodes(with_token(v1::ListNodesRequest {}, Some(&peer_h)))
                .await
                .unwrap()
                .into_inner()
                .nodes;
            if nodes.iter().all(|n| n.up && n.node_id != 0) {
                break;
            }
            assert!(Instant::now() < deadline, "{addr}: {nodes:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        client
            .append(with_token(
                append_request("/n", &[addr.as_str()]),
                Some(&writer_h),
            ))
            .await
            .unwrap();
    }
    let mut stream = crate::cluster_nodes::client(&ports[0])
        .await
        .subscribe(with_token(
            v1::SubscribeRequest {
                start: Some(v1::subscribe_request::Start::Beginning(true)),
                scope: v1::Scope::Cluster as i32,
                ..Default::default()
            },
            Some(&writer_h),
        ))
        .await
        .unwrap()
        .into_inner();
    let mut nodes = std::collections::BTreeSet::new();
    while nodes.len() < 2 {
        let response = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .expect("both nodes' events within 10 s")
            .unwrap()
            .unwrap();
        nodes.extend(
            crate::cluster_nodes::events_of(response)
                .iter()
                .map(|e| e.1),
        );
    }
    assert_eq!(nodes.into_iter().collect::<Vec<_>>(), vec![1, 2]);
}
