//! A scripted stand-in for a SeaweedFS filer's `SubscribeLocalMetadata`, on
//! raw HTTP/2, so a test can send what no real filer would: malformed
//! notifications, timestamps going back, endless heartbeats.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringfeed_proto::bytes::{Bytes, BytesMut};
use ringfeed_proto::filer_pb;
use ringfeed_proto::prost::Message;
use ringfeed_proto::tonic::codegen::http;
use tokio::net::TcpListener;

use crate::serve_binary::Server;
use ringfeed_proto::{v1, RingFeedClient};

/// One response of the script.
#[derive(Clone)]
pub enum Sent {
    /// An event at `ts_ns` creating `name` in `directory`.
    Create {
        ts_ns: i64,
        directory: String,
        name: String,
    },
    /// An event whose notification is `bytes`, whatever they are.
    Raw {
        ts_ns: i64,
        directory: String,
        bytes: Vec<u8>,
    },
}

impl Sent {
    fn ts_ns(&self) -> i64 {
        match self {
            Sent::Create { ts_ns, .. } | Sent::Raw { ts_ns, .. } => *ts_ns,
        }
    }

    fn encode(&self) -> Vec<u8> {
        let (ts_ns, directory, notification) = match self {
            Sent::Create {
                ts_ns,
                directory,
                name,
            } => (
                *ts_ns,
                directory,
                filer_pb::EventNotification {
                    new_entry: Some(filer_pb::Entry {
                        name: name.clone(),
                        ..Default::default()
                    }),
                    new_parent_path: directory.clone(),
                    ..Default::default()
                }
                .encode_to_vec(),
            ),
            Sent::Raw {
                ts_ns,
                directory,
                bytes,
            } => (*ts_ns, directory, bytes.clone()),
        };
        // SubscribeMetadataResponse by hand: directory = 1, event_notification = 2, ts_ns = 3.
        let mut message = Vec::new();
        ringfeed_proto::prost::encoding::string::encode(1, directory, &mut message);
        ringfeed_proto::prost::encoding::bytes::encode(2, &notification, &mut message);
        ringfeed_proto::prost::encoding::int64::encode(3, &ts_ns, &mut message);
        message
    }
}

/// What the stream does once the script is sent.
#[derive(Clone, Copy)]
pub enum Then {
    /// Stays open, silent.
    Hold,
    /// Sends an idle heartbeat (no notification, the time) every millisecond.
    Heartbeats,
}

pub struct FakeFiler {
    /// As `--follow-filer` names it: `127.0.0.1:1.PORT` (the HTTP port is not used).
    pub address: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

/// What the fake serves; a test may change it between subscriptions.
struct State {
    script: Vec<Sent>,
    then: Then,
    /// Its metadata log files, as `DAY/HH-MM.ID` under `/topics/.system/log`.
    log_files: Vec<String>,
}

const LOG_DIR: &str = "/topics/.system/log";

impl Drop for FakeFiler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn frame(message: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(5 + message.len());
    framed.extend_from_slice(&[0]);
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    framed.freeze()
}

impl FakeFiler {
    /// Serves `script` (the events after the request's `since_ns`) to every
    /// subscription, then does `then`; no log files.
    pub async fn start(script: Vec<Sent>, then: Then) -> FakeFiler {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            script,
            then,
            log_files: Vec::new(),
        }));
        let served = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let state = served.clone();
                tokio::spawn(async move {
                    let Ok(mut connection) = h2::server::handshake(tcp).await else {
                        return;
                    };
                    while let Some(Ok((request, respond))) = connection.accept().await {
                        tokio::spawn(answer(request, respond, state.clone()));
                    }
                });
            }
        });
        FakeFiler {
            address: format!("127.0.0.1:1.{port}"),
            state,
            task,
        }
    }

    /// Adds an event to the script (for subscriptions from now on).
    pub fn push(&self, sent: Sent) {
        self.state.lock().unwrap().script.push(sent);
    }

    /// Sets the log files `ListEntries` shows under `/topics/.system/log`.
    pub fn set_log_files(&self, files: &[&str]) {
        self.state.lock().unwrap().log_files = files.iter().map(|f| f.to_string()).collect();
    }
}

/// The request's one message.
async fn read_message(body: &mut h2::RecvStream) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    while received.len() < 5
        || received.len() < 5 + u32::from_be_bytes(received[1..5].try_into().unwrap()) as usize
    {
        let data = body.data().await?.ok()?;
        let _ = body.flow_control().release_capacity(data.len());
        received.extend_from_slice(&data);
    }
    Some(received[5..].to_vec())
}

async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    state: Arc<Mutex<State>>,
) {
    let path = request.uri().path().to_owned();
    let mut body = request.into_body();
    let Some(message) = read_message(&mut body).await else {
        return;
    };
    let response = http::Response::builder()
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let Ok(mut stream) = respond.send_response(response, false) else {
        return;
    };
    if path == "/filer_pb.SeaweedFiler/ListEntries" {
        let request = filer_pb::ListEntriesRequest::decode(&message[..]).unwrap();
        let names = list(&state.lock().unwrap().log_files, &request);
        for name in names {
            let response = filer_pb::ListEntriesResponse {
                entry: Some(filer_pb::Entry {
                    name,
                    ..Default::default()
                }),
                ..Default::default()
            };
            let _ = stream.send_data(frame(&response.encode_to_vec()), false);
        }
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        let _ = stream.send_trailers(trailers);
        return;
    }
    assert_eq!(path, "/filer_pb.SeaweedFiler/SubscribeLocalMetadata");
    let request = filer_pb::SubscribeMetadataRequest::decode(&message[..]).unwrap();
    let (script, then) = {
        let state = state.lock().unwrap();
        (state.script.clone(), state.then)
    };
    for sent in script.iter().filter(|s| s.ts_ns() > request.since_ns) {
        if stream.send_data(frame(&sent.encode()), false).is_err() {
            return;
        }
    }
    match then {
        Then::Hold => std::future::pending::<()>().await,
        Then::Heartbeats => {
            let mut ts_ns = script.iter().map(Sent::ts_ns).max().unwrap_or(0);
            loop {
                ts_ns += 1_000_000;
                let mut heartbeat = Vec::new();
                ringfeed_proto::prost::encoding::int64::encode(3, &ts_ns, &mut heartbeat);
                // Waits for the client's window: a client that stops
                // reading holds the fake back, as it would a filer.
                stream.reserve_capacity(heartbeat.len() + 5);
                if std::future::poll_fn(|cx| stream.poll_capacity(cx))
                    .await
                    .is_none()
                {
                    return;
                }
                if stream.send_data(frame(&heartbeat), false).is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
}

/// The names `ListEntries` answers from `files` (`DAY/FILE`): the days in
/// the log directory, or the files of one day; sorted, after
/// `start_from_file_name`, at most `limit`.
fn list(files: &[String], request: &filer_pb::ListEntriesRequest) -> Vec<String> {
    let mut names: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let (day, file) = f.split_once('/').unwrap();
            if request.directory == LOG_DIR {
                Some(day.to_owned())
            } else if request.directory == format!("{LOG_DIR}/{day}") {
                Some(file.to_owned())
            } else {
                None
            }
        })
        .filter(|name| {
            let after = request.start_from_file_name.as_str();
            name.as_str() > after || (request.inclusive_start_from && name == after)
        })
        .collect();
    names.sort();
    names.dedup();
    names.truncate(if request.limit == 0 {
        usize::MAX
    } else {
        request.limit as usize
    });
    names
}

/// The first followed filer's row in `server`'s status once `done` holds
/// for it, and the events committed then (the watchdog bounds the wait).
pub async fn first_filer_until(
    server: &Server,
    done: impl Fn(&v1::FollowedFiler) -> bool,
) -> (v1::FollowedFiler, u64) {
    let mut client = RingFeedClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    loop {
        let status = client
            .status(v1::StatusRequest::default())
            .await
            .unwrap()
            .into_inner();
        let filer = status.filers[0].clone();
        if done(&filer) {
            let committed = status.shards.iter().map(|s| s.committed_next).sum();
            return (filer, committed);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
