//! A scripted stand-in for a SeaweedFS filer's `SubscribeLocalMetadata`, on
//! raw HTTP/2, so a test can send what no real filer would: malformed
//! notifications, timestamps going back, endless heartbeats.

use std::time::Duration;

use ringfeed_proto::bytes::{Bytes, BytesMut};
use ringfeed_proto::filer_pb;
use ringfeed_proto::prost::Message;
use ringfeed_proto::tonic::codegen::http;
use tokio::net::TcpListener;

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
    task: tokio::task::JoinHandle<()>,
}

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
    /// subscription, then does `then`.
    pub async fn start(script: Vec<Sent>, then: Then) -> FakeFiler {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let script = script.clone();
                tokio::spawn(async move {
                    let Ok(mut connection) = h2::server::handshake(tcp).await else {
                        return;
                    };
                    while let Some(Ok((request, respond))) = connection.accept().await {
                        tokio::spawn(answer(request, respond, script.clone(), then));
                    }
                });
            }
        });
        FakeFiler {
            address: format!("127.0.0.1:1.{port}"),
            task,
        }
    }
}

async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    script: Vec<Sent>,
    then: Then,
) {
    let mut body = request.into_body();
    let mut received = Vec::new();
    while received.len() < 5
        || received.len() < 5 + u32::from_be_bytes(received[1..5].try_into().unwrap()) as usize
    {
        match body.data().await {
            Some(Ok(data)) => {
                let _ = body.flow_control().release_capacity(data.len());
                received.extend_from_slice(&data);
            }
            _ => return,
        }
    }
    let request = filer_pb::SubscribeMetadataRequest::decode(&received[5..]).unwrap();
    let response = http::Response::builder()
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let Ok(mut stream) = respond.send_response(response, false) else {
        return;
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
