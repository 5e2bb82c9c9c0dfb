//! TLS on the gRPC listener (issue 21): certificates made at test time
//! (rcgen: a CA, a server certificate for 127.0.0.1, a client certificate).
//! The CLI appends and tails over TLS with --tls-ca; a plaintext client
//! against the TLS server, and a TLS client against a plaintext server, fail
//! fast with a message saying so; with --tls-client-ca a client without a
//! certificate is refused and one with a certificate the CA signed is
//! served; the Python grpcio client round-trips over TLS with a token; the
//! metrics endpoint serves over TLS and needs an admin token; two cluster
//! nodes with TLS and tokens reach each other (--peer-tls-ca, --peer-token)
//! and a cluster tail over TLS prints both nodes' events.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::serve_binary::{new_token, run_bounded, Output, Server};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};

pub(crate) struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A CA, a server certificate (127.0.0.1, localhost) and a client
/// certificate, both signed by it, as PEM files in `dir`.
pub(crate) fn make_pki(dir: &Path) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    // Distinct names: a leaf whose issuer name equals its own looks
    // self-signed to BoringSSL (the Python client), whatever signed it.
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(DnType::CommonName, "ringfeed test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, names[0].as_str());
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &ca_cert, &ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf(
        vec!["127.0.0.1".into(), "localhost".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client_cert, client_key) =
        leaf(vec!["client".into()], ExtendedKeyUsagePurpose::ClientAuth);
    Pki {
        ca: write(dir, "ca.pem", &ca_cert.pem()),
        server_cert: write(dir, "server.pem", &server_cert),
        server_key: write(dir, "server.key", &server_key),
        client_cert: write(dir, "client.pem", &client_cert),
        client_key: write(dir, "client.key", &client_key),
    }
}

/// A CA named `name` alone, its certificate written to `dir`.
fn lone_ca(dir: &Path, name: &str) -> (PathBuf, rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name.push(DnType::CommonName, name);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = ca.self_signed(&key).unwrap();
    (write(dir, &format!("{name}.pem"), &cert.pem()), cert, key)
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

impl Pki {
    /// `serve` flags for TLS with the server certificate, then `more`.
    fn serve_flags<'a>(&'a self, more: &[&'a str]) -> Vec<&'a str> {
        let mut flags = vec![
            "--tls-cert",
            p(&self.server_cert),
            "--tls-key",
            p(&self.server_key),
        ];
        flags.extend_from_slice(more);
        flags
    }
}

/// Runs `ringfeed ARGS` (at most 20 s) and says how long it took.
fn ringfeed(args: &[&str]) -> (Output, Duration) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(args).env_remove("RINGFEED_TOKEN");
    let started = Instant::now();
    let out = run_bounded(command, None, Duration::from_secs(20));
    (out, started.elapsed())
}

/// Now, in ns since the Unix epoch, as a flag value.
fn now_ns() -> String {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.unwrap().as_nanos().to_string()
}

fn ok(out: &Output) -> bool {
    out.status.is_some_and(|s| s.success())
}

#[test]
fn tls_round_trips_and_mismatches_fail_fast() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let pki = make_pki(dir.path());
    let tls = Server::start_with(&dir.path().join("tls"), 2, &pki.serve_flags(&[]));
    let ca = ["--tls-ca", p(&pki.ca)];
    let server = ["--server", tls.addr.as_str()];

    let append = [
        &["append", "--dir", "/t", "--name", "f", "--op", "create"][..],
        &server,
        &ca,
    ]
    .concat();
    let (out, _) = ringfeed(&append);
    assert!(ok(&out), "append over TLS: {}", out.stderr);
    let now = now_ns();
    let tail = [
        &["tail", "--beginning", "--until-ns", now.as_str()][..],
        &server,
        &ca,
    ]
    .concat();
    let (out, _) = ringfeed(&tail);
    assert!(ok(&out), "tail over TLS: {}", out.stderr);
    assert!(out.stdout.contains("\"/t\""), "{}", out.stdout);
    let (out, _) = ringfeed(&[&["status"][..], &server, &ca].concat());
    assert!(ok(&out), "status over TLS: {}", out.stderr);

    // Plaintext against TLS: fails fast, saying TLS may be the cause.
    let (out, took) = ringfeed(&[&["status"][..], &server].concat());
    assert!(!ok(&out));
    assert!(out.stderr.contains("--tls-ca"), "{}", out.stderr);
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // TLS against plaintext: the same.
    let dir_plain = dir.path().join("plain");
    let plain = Server::start(&dir_plain, 1);
    let (out, took) = ringfeed(&[&["status", "--server", plain.addr.as_str()][..], &ca].concat());
    assert!(!ok(&out));
    assert!(
        out.stderr.contains("the server does not answer in TLS"),
        "{}",
        out.stderr
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // A CA that did not sign the server's certificate: refused.
    let other_dir = dir.path().join("other");
    std::fs::create_dir_all(&other_dir).unwrap();
    let other = make_pki(&other_dir);
    let (out, _) = ringfeed(&[&["status"][..], &server, &["--tls-ca", p(&other.ca)]].concat());
    assert!(!ok(&out), "an unknown CA was trusted");
    // Both CAs have one name: webpki finds the issuer, not its signature.
    said_plainly(&out, "but that CA's key did not sign it");
    let lone = lone_ca(dir.path(), "another CA").0;
    let (out, _) = ringfeed(&[&["status"][..], &server, &["--tls-ca", p(&lone)]].concat());
    said_plainly(&out, "the server's certificate was not signed by a CA in");
    // Nothing listening: no TLS hint.
    let (out, _) = ringfeed(&[&["status", "--server", "127.0.0.1:1"][..], &ca].concat());
    said_plainly(&out, "nothing is listening there (connection refused)");
    assert!(!out.stderr.contains("TLS"), "{}", out.stderr);

    // Mutual TLS.
    let mutual = Server::start_with(
        &dir.path().join("mutual"),
        1,
        &pki.serve_flags(&["--tls-client-ca", p(&pki.ca)]),
    );
    let server = ["--server", mutual.addr.as_str()];
    let (out, _) = ringfeed(&[&["status"][..], &server, &ca].concat());
    assert!(!ok(&out), "a client without a certificate was served");
    said_plainly(&out, "it asks for a client certificate");
    let theirs = [
        "--tls-cert",
        p(&other.client_cert),
        "--tls-key",
        p(&other.client_key),
    ];
    let (out, _) = ringfeed(&[&["status"][..], &server, &ca, &theirs].concat());
    assert!(!ok(&out), "a client certificate of another CA was accepted");
    said_plainly(&out, "the server refused this client's certificate");
    let mine = [
        "--tls-cert",
        p(&pki.client_cert),
        "--tls-key",
        p(&pki.client_key),
    ];
    let (out, _) = ringfeed(&[&["status"][..], &server, &ca, &mine].concat());
    assert!(ok(&out), "mutual TLS: {}", out.stderr);
    let now = now_ns();
    let tail = [
        &["tail", "--beginning", "--until-ns", now.as_str()][..],
        &server,
        &ca,
        &mine,
    ];
    let (out, _) = ringfeed(&tail.concat());
    assert!(ok(&out), "tail with mutual TLS: {}", out.stderr);
}

/// A refused TLS connection is said in a sentence that names the cause,
/// never as rustls's debug text ("Other(OtherError(CaUsedAsEndEntity))").
fn said_plainly(out: &Output, sentence: &str) {
    assert!(!ok(out), "expected a failure: {}", out.stderr);
    assert!(
        out.stderr.contains(sentence),
        "expected {sentence:?} in: {}",
        out.stderr
    );
    for debug in ["OtherError", "invalid peer certificate", "Context {"] {
        assert!(!out.stderr.contains(debug), "{}", out.stderr);
    }
}

/// Runs `program ARGS` in `dir` (at most 60 s); panics if it fails.
fn run_in(dir: &Path, program: &str, args: &[&str]) {
    let mut command = Command::new(program);
    command.args(args).current_dir(dir);
    let out = run_bounded(command, None, Duration::from_secs(60));
    assert!(ok(&out), "{program} {args:?}: {out}");
}

/// Whether `openssl` can run; under CI it must (`.ci/run` installs it).
fn openssl_here() -> bool {
    let here = Command::new("openssl").arg("version").output().is_ok();
    if !here {
        assert!(
            !ringfeed_testkit::under_ci(),
            "openssl is missing: .ci/run installs it, so CI must have it"
        );
        eprintln!("skipped: openssl not installed");
    }
    here
}

/// The certificate recipe in docs/security.md, run as written with the real
/// `openssl`, serves the CLI; and the self-signed certificate everyone makes
/// first (`openssl req -x509`, which marks it a CA) is accepted given as its
/// own CA, still only for the names it holds. Before, rustls refused the
/// latter with "invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))".
#[test]
fn certificates_made_by_openssl_as_users_make_them() {
    let _watchdog = ringfeed_testkit::arm();
    if !openssl_here() {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let pem = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let security = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/security.md"
    ))
    .expect("docs/security.md");
    let recipe = security
        .split("<!-- tls-recipe -->\n```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the TLS recipe in docs/security.md, after <!-- tls-recipe -->");
    run_in(dir.path(), "sh", &["-ec", recipe]);
    let server = Server::start_with(
        &dir.path().join("data"),
        1,
        &[
            "--tls-cert",
            &pem("server.pem"),
            "--tls-key",
            &pem("server.key"),
        ],
    );
    let ca = pem("ca.pem");
    let to = ["--server", server.addr.as_str(), "--tls-ca", ca.as_str()];
    let append = ["append", "--dir", "/r", "--name", "f", "--op", "create"];
    let (out, _) = ringfeed(&[&append[..], &to].concat());
    assert!(
        ok(&out),
        "append with the certificates of docs/security.md: {}",
        out.stderr
    );
    let now = now_ns();
    let tail = ["tail", "--beginning", "--until-ns", now.as_str()];
    let (out, _) = ringfeed(&[&tail[..], &to].concat());
    assert!(
        ok(&out),
        "tail with the certificates of docs/security.md: {}",
        out.stderr
    );
    assert!(out.stdout.contains("\"/r\""), "{}", out.stdout);
    drop(server);

    // The issue's one-liner: a self-signed certificate, its own CA.
    let self_signed = |name: &str| {
        let (key, cert) = (format!("{name}.key"), format!("{name}.pem"));
        run_in(
            dir.path(),
            "openssl",
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &cert,
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ],
        );
        (pem(&cert), pem(&key))
    };
    let (cert, key) = self_signed("self");
    let server = Server::start_with(
        &dir.path().join("data-self"),
        1,
        &["--tls-cert", &cert, "--tls-key", &key],
    );
    let (out, _) = ringfeed(&["status", "--server", &server.addr, "--tls-ca", &cert]);
    assert!(
        ok(&out),
        "a self-signed certificate as its own CA: {}",
        out.stderr
    );
    // Pinned, it is still good only for the names it holds.
    let port = server.addr.rsplit(':').next().unwrap();
    let localhost = format!("localhost:{port}");
    let (out, _) = ringfeed(&["status", "--server", &localhost, "--tls-ca", &cert]);
    said_plainly(
        &out,
        "the server's certificate is not valid for localhost (it is for 127.0.0.1)",
    );
    // Another self-signed certificate of the same name is not it.
    let (other, _) = self_signed("other");
    let (out, _) = ringfeed(&["status", "--server", &server.addr, "--tls-ca", &other]);
    assert!(!ok(&out), "another self-signed certificate was trusted");
    said_plainly(&out, "the server's certificate");
}

/// An expired certificate is refused, saying so: one a CA signed, and a
/// self-signed one given as its own CA (webpki checks the dates before it
/// finds the CA flag, which the pinned path relies on).
#[test]
fn an_expired_certificate_is_refused_saying_so() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let past = |params: &mut CertificateParams| {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    };
    // A leaf whose only fault is its date, and its CA.
    let (ca, ca_cert, ca_key) = lone_ca(dir.path(), "expiry CA");
    let leaf_key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    leaf.distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    past(&mut leaf);
    let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key).unwrap();
    // A self-signed CA certificate for 127.0.0.1 that expired.
    let own_key = KeyPair::generate().unwrap();
    let mut own = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    own.distinguished_name.push(DnType::CommonName, "127.0.0.1");
    own.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    past(&mut own);
    let own_cert = own.self_signed(&own_key).unwrap();
    let cases = [
        ("leaf", leaf_cert.pem(), leaf_key.serialize_pem(), ca),
        (
            "own",
            own_cert.pem(),
            own_key.serialize_pem(),
            PathBuf::new(),
        ),
    ];
    for (name, cert, key, ca) in cases {
        let cert_path = write(dir.path(), &format!("{name}.pem"), &cert);
        let key_path = write(dir.path(), &format!("{name}.key"), &key);
        let ca = if ca.as_os_str().is_empty() {
            cert_path.clone()
        } else {
            ca
        };
        let server = Server::start_with(
            &dir.path().join(name),
            1,
            &["--tls-cert", p(&cert_path), "--tls-key", p(&key_path)],
        );
        let (out, _) = ringfeed(&["status", "--server", &server.addr, "--tls-ca", p(&ca)]);
        said_plainly(
            &out,
            "the server's certificate expired at 2021-01-01T00:00:00Z",
        );
    }
}

/// The Python grpcio client over TLS, with a token.
#[test]
fn python_client_over_tls_with_a_token() {
    let _watchdog = ringfeed_testkit::arm();
    let python_ok = Command::new("python3")
        .args(["-c", "import grpc, grpc_tools.protoc"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !python_ok {
        assert!(
            !ringfeed_testkit::under_ci(),
            "python3 with grpcio and grpcio-tools is needed; .ci/run installs them"
        );
        eprintln!("skipped: python3 with grpcio and grpcio-tools not available");
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let pki = make_pki(dir.path());
    let (token, table) = new_token(&["--append", "/", "--read", "/"]);
    let tokens = write(dir.path(), "tokens.toml", &table);
    let server = Server::start_with(
        &dir.path().join("data"),
        2,
        &pki.serve_flags(&["--token-file", p(&tokens)]),
    );
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut client = Command::new("python3");
    client
        .arg(manifest.join("tests/python/ringfeed_client_test.py"))
        .args([
            "--server",
            &server.addr,
            "--tls-ca",
            p(&pki.ca),
            "--token",
            &token,
        ])
        .arg("--proto")
        .arg(manifest.join("../../proto/ringfeed.proto"));
    let output = run_bounded(client, None, Duration::from_secs(120));
    eprintln!("{output}");
    assert_eq!(
        output.code(),
        Some(0),
        "the python client failed; its output is above"
    );
}

/// GET `path` from `addr` over TLS trusting `ca`, with `authorization` if
/// given: the status code and the whole response.
async fn https_get(
    addr: &str,
    path: &str,
    ca: &Path,
    authorization: Option<&str>,
) -> (u16, String) {
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls;
    let config = client_config(ca);
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    let auth = authorization
        .map(|a| format!("authorization: {a}\r\n"))
        .unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\n{auth}connection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tls.read_to_string(&mut response).await.ok();
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, response)
}

/// The metrics endpoint and the status page over TLS, needing an admin
/// token when tokens exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_page_over_tls_need_an_admin_token() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let pki = make_pki(dir.path());
    let (admin, admin_table) = new_token(&["--admin"]);
    let (reader, reader_table) = new_token(&["--read", "/"]);
    let tokens = write(
        dir.path(),
        "tokens.toml",
        &format!("{admin_table}{reader_table}"),
    );
    let server = Server::start_with(
        &dir.path().join("data"),
        1,
        &pki.serve_flags(&[
            "--token-file",
            p(&tokens),
            "--metrics-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ]),
    );
    let metrics = server.metrics.clone().expect("a metrics address");
    let page = server.page.clone().expect("a status page address");
    // Both at 127.0.0.1:0: one listener serves both (as docs/status-page.md says
    // of one address); a page on a listener of its own is served by the
    // same `http::serve` with the same TLS acceptor.
    for (at, path, expect) in [
        (&metrics, "/metrics", "ringfeed_"),
        (&page, "/api/status", "\"startedNs\""),
    ] {
        let (code, _) = https_get(at, path, &pki.ca, None).await;
        assert_eq!(code, 401, "{path}: no token");
        let (code, _) = https_get(at, path, &pki.ca, Some(&format!("Bearer {reader}"))).await;
        assert_eq!(code, 403, "{path}: not admin");
        let (code, body) = https_get(at, path, &pki.ca, Some(&format!("Bearer {admin}"))).await;
        assert_eq!(code, 200, "{path}: {body}");
        assert!(body.contains(expect), "{path}: {body}");
    }
}

/// Two nodes serving TLS with token files reach each other over TLS with
/// their peer token; `tail --cluster` over TLS prints both nodes' events.
#[test]
fn cluster_nodes_over_tls() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let pki = make_pki(dir.path());
    let (peer, peer_table) = new_token(&["--read", "/", "--admin"]);
    let (writer, writer_table) = new_token(&["--append", "/", "--read", "/", "--admin"]);
    let tokens = write(
        dir.path(),
        "tokens.toml",
        &format!("{peer_table}{writer_table}"),
    );
    let ports = crate::cluster_nodes::free_ports(2);
    let dirs = crate::cluster_nodes::data_dirs(2, "tls-cluster-");
    let flags = pki.serve_flags(&[
        "--token-file",
        p(&tokens),
        "--peer-token",
        &peer,
        "--peer-tls-ca",
        p(&pki.ca),
    ]);
    let _servers: Vec<Server> = (0..2)
        .map(|i| crate::cluster_nodes::start_node(&ports, dirs[i].path(), i, 1, &flags))
        .collect();
    // `ringfeed ARGS` against `addr` over TLS with the writer's token.
    let run = |args: &[&str], addr: &str| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend([
            "--server",
            addr,
            "--tls-ca",
            p(&pki.ca),
            "--token",
            writer.as_str(),
        ]);
        ringfeed(&all)
    };
    // Each node sees its peer up.
    let deadline = Instant::now() + Duration::from_secs(20);
    for addr in &ports {
        loop {
            let (out, _) = run(&["nodes"], addr);
            assert!(ok(&out), "{}", out.stderr);
            let peer_up = out
                .stdout
                .lines()
                .any(|l| l.split_whitespace().nth(2) == Some("up"));
            if peer_up {
                break;
            }
            assert!(Instant::now() < deadline, "{addr}: {}", out.stdout);
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    for (i, addr) in ports.iter().enumerate() {
        let name = format!("from-node-{}", i + 1);
        let (out, _) = run(
            &["append", "--dir", "/c", "--name", &name, "--op", "create"],
            addr,
        );
        assert!(ok(&out), "{}", out.stderr);
    }
    let now = now_ns();
    let (out, _) = run(
        &["tail", "--cluster", "--beginning", "--until-ns", &now],
        &ports[0],
    );
    assert!(ok(&out), "{}", out.stderr);
    assert!(
        out.stdout.contains("from-node-1") && out.stdout.contains("from-node-2"),
        "{}",
        out.stdout
    );
}

/// Over TLS a connection has spoken only once it answered the server's
/// handshake flight: 20 connections that send a real ClientHello and then
/// nothing are each closed after `handshake_timeout_ms`, and a real client
/// is served meanwhile. (The ClientHello's bytes counted as speaking: such
/// a connection, and the TLS accept task it held, stayed for ever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_silent_after_its_hello_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let pki = make_pki(dir.path());
    let config = write(dir.path(), "ringfeed.toml", "handshake_timeout_ms = 1000\n");
    let server = Server::start_with(
        &dir.path().join("data"),
        1,
        &pki.serve_flags(&["--config", p(&config)]),
    );
    let hello = client_hello(&pki.ca);
    let mut silent = Vec::new();
    for _ in 0..20 {
        let mut tcp = tokio::net::TcpStream::connect(&server.addr).await.unwrap();
        tcp.write_all(&hello).await.unwrap();
        silent.push(tcp);
    }
    let (out, _) = ringfeed(&["status", "--server", &server.addr, "--tls-ca", p(&pki.ca)]);
    assert!(ok(&out), "a real client meanwhile: {}", out.stderr);
    let started = Instant::now();
    for (i, tcp) in silent.iter_mut().enumerate() {
        let mut flight = 0;
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            let mut buf = vec![0u8; 16 << 10];
            while let Ok(n @ 1..) = tcp.read(&mut buf).await {
                flight += n;
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "connection {i} still open {:?} after its ClientHello",
            started.elapsed()
        );
        assert!(flight > 0, "connection {i} got no handshake flight");
    }
}

/// The first flight of a rustls client trusting `ca`: its ClientHello.
fn client_hello(ca: &Path) -> Vec<u8> {
    use rustls::pki_types::ServerName;
    use tokio_rustls::rustls;
    let config = client_config(ca);
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut client = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let mut hello = Vec::new();
    client.write_tls(&mut hello).unwrap();
    assert!(hello.len() > 33, "a ClientHello of {} bytes", hello.len());
    hello
}

/// A rustls client configuration trusting the certificates in `ca`.
fn client_config(ca: &Path) -> tokio_rustls::rustls::ClientConfig {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    use tokio_rustls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}
