//! NATS JetStream 2.9 on loopback: the events go to one file-backed stream
//! (`BENCH`, subjects `bench.>`; event i is published on `bench.dNN`, NN =
//! i % 64) as acknowledged publishes; a subscriber is an ephemeral push
//! consumer with flow control, on a connection of its own. Spoken through a
//! minimal hand-written client ([`client`], which says why).

mod client;

use std::collections::VecDeque;
use std::ops::Range;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use self::client::{new_inbox, wait_reply, Msg, Op, Reader, Requester, Writer, REPLY_TIMEOUT};
use super::{
    closed_loop, free_ports, pipelined_loop, stamp, unstamp, wait_ready, Ack, Delivered,
    Durability, From, Kind, Process, ResumePoints, READY_TIMEOUT,
};
use crate::util::now_ns;

const STREAM: &str = "BENCH";

/// Server-to-consumer heartbeat interval when idle (ns, as JetStream's JSON
/// durations are). Flow control requires heartbeats.
const IDLE_HEARTBEAT_NS: u64 = 5_000_000_000;

fn event(index: u64, payload: usize) -> (String, Vec<u8>) {
    (
        format!("bench.d{}", index % 64),
        stamp(index, now_ns(), payload),
    )
}

/// The JSON of a JetStream API reply or publish ack, or why it failed.
fn js_reply(msg: &Msg) -> Result<Value> {
    if msg.status() == Some(503) {
        bail!(
            "no responders on {} (JetStream not ready, or no stream for the subject)",
            msg.subject
        );
    }
    let reply: Value = serde_json::from_slice(&msg.payload).with_context(|| {
        format!(
            "a JetStream reply that is not JSON: {:?}",
            String::from_utf8_lossy(&msg.payload)
        )
    })?;
    if let Some(error) = reply.get("error") {
        bail!("JetStream said: {error}");
    }
    Ok(reply)
}

/// The stream sequence a publish ack (`{"stream":"BENCH","seq":N}`) gives.
fn ack_seq(msg: &Msg) -> Result<u64> {
    let ack = js_reply(msg)?;
    ack.get("seq")
        .and_then(Value::as_u64)
        .ok_or_else(|| anyhow!("a JetStream publish ack without seq: {ack}"))
}

pub struct Nats {
    addr: String,
    resume: ResumePoints,
    processes: Vec<Process>,
}

impl Nats {
    pub async fn start(binary: &Path, dir: &Path) -> Result<Nats> {
        let port = free_ports(1)?[0];
        let addr = format!("127.0.0.1:{port}");
        let mut command = Command::new(binary);
        command.arg("-js").arg("-sd").arg(dir.join("nats")).args([
            "-a",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ]);
        let log = dir.join("nats-server.log");
        let mut process = Process::spawn("nats-server", command, &log)?;
        let config = json!({
            "name": STREAM,
            "subjects": ["bench.>"],
            "storage": "file",
            "retention": "limits",
            "discard": "old",
            "max_msgs": -1,
            "max_bytes": -1,
            "num_replicas": 1,
        });
        // Creating the stream is the readiness check: it needs JetStream up,
        // not just the port. Creating it again with the same config is a no-op.
        wait_ready(
            std::slice::from_mut(&mut process),
            &log.display().to_string(),
            READY_TIMEOUT,
            || async {
                let api = Requester::connect(&addr).await?;
                let reply = api
                    .request(
                        &format!("$JS.API.STREAM.CREATE.{STREAM}"),
                        config.to_string().into_bytes(),
                    )
                    .await?;
                js_reply(&reply).map(drop)
            },
        )
        .await?;
        Ok(Nats {
            addr,
            resume: ResumePoints::default(),
            processes: vec![process],
        })
    }

    /// One try; `None` if the create got no answer in time.
    async fn subscribe_once(&self, from: From) -> Result<Option<Subscriber>> {
        let (reader, mut writer) = client::connect(&self.addr).await?;
        let deliver = new_inbox();
        let api_inbox = new_inbox();
        let mut config = json!({
            "deliver_subject": deliver,
            "ack_policy": "none",
            "replay_policy": "instant",
            "flow_control": true,
            "idle_heartbeat": IDLE_HEARTBEAT_NS,
        });
        match from {
            From::Beginning => config["deliver_policy"] = json!("all"),
            // From the stream's last sequence + 1 at creation.
            From::Now => config["deliver_policy"] = json!("new"),
            From::Resume { index, .. } => {
                config["deliver_policy"] = json!("by_start_sequence");
                config["opt_start_seq"] = json!(self.resume.get("nats", index)?);
            }
        }
        let request = json!({ "stream_name": STREAM, "config": config });
        // Subscribed to the deliveries before the consumer exists, so none
        // is published to a subject nobody listens on.
        writer.subscribe(&deliver, DELIVERIES).await?;
        writer.subscribe(&api_inbox, API_REPLY).await?;
        writer
            .publish(
                &format!("$JS.API.CONSUMER.CREATE.{STREAM}"),
                Some(&api_inbox),
                request.to_string().as_bytes(),
            )
            .await?;
        writer.flush().await?;
        let mut subscriber = Subscriber {
            reader,
            writer,
            early: VecDeque::new(),
        };
        // Deliveries may overtake the create reply: keep them for next().
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let Ok(op) = tokio::time::timeout_at(deadline.into(), subscriber.reader.next()).await
            else {
                return Ok(None);
            };
            match op? {
                Op::Msg(msg) if msg.sid == API_REPLY => {
                    js_reply(&msg).context("creating the consumer")?;
                    return Ok(Some(subscriber));
                }
                Op::Msg(msg) => subscriber.early.push_back(msg),
                Op::Ping => subscriber.writer.pong().await?,
                _ => {}
            }
        }
    }
}

#[async_trait::async_trait]
impl super::System for Nats {
    fn kind(&self) -> Kind {
        Kind::Nats
    }

    fn durability(&self, durable: bool) -> Durability {
        let _ = durable;
        "stored in the stream's file before the ack; fsync periodic (default 2 min)"
    }

    fn processes(&self) -> &[Process] {
        &self.processes
    }

    /// Each producer has a connection of its own and up to `batch`
    /// publishes in flight: it sends `batch` events in one write and waits
    /// for all their acks (each publish's latency runs from that write to
    /// its own ack).
    async fn append(
        &self,
        events: Range<u64>,
        payload: usize,
        producers: usize,
        batch: usize,
        _durable: bool,
    ) -> Result<Histogram<u64>> {
        let (first, addr) = (events.start, self.addr.clone());
        let (acks, lowest) = closed_loop(
            events,
            producers,
            batch,
            || Requester::connect(&addr),
            move |connection, request, sent| async move {
                let replies = connection
                    .send_all(request.map(|i| event(i, payload)))
                    .await?;
                let mut acks = Vec::with_capacity(replies.len());
                for reply in replies {
                    let seq = ack_seq(&wait_reply(reply).await?)?;
                    acks.push(Ack::since(sent, Some(seq)));
                }
                Ok((connection, acks))
            },
        )
        .await?;
        if let Some(lowest) = lowest {
            self.resume.record(first, lowest);
        }
        Ok(acks)
    }

    /// Async acked publishes: each publish is a request whose reply is its
    /// JetStream ack, up to `window` unanswered per producer.
    async fn append_pipelined(
        &self,
        events: Range<u64>,
        payload: usize,
        producers: usize,
        window: usize,
        _durable: bool,
    ) -> Option<Result<Histogram<u64>>> {
        let (first, addr) = (events.start, self.addr.clone());
        let acks = pipelined_loop(
            events,
            producers,
            window,
            || async { Requester::connect(&addr).await.map(Arc::new) },
            move |connection: &Arc<Requester>, index| {
                let connection = connection.clone();
                async move {
                    let sent = connection.send_all([event(index, payload)]).await;
                    let reply = sent?.into_iter().next().expect("one request, one reply");
                    Ok(async move { Ok(Some(ack_seq(&wait_reply(reply).await?)?)) })
                }
            },
        )
        .await;
        Some(acks.map(|(acks, lowest)| {
            if let Some(lowest) = lowest {
                self.resume.record(first, lowest);
            }
            acks
        }))
    }

    fn appender(&self) -> Arc<dyn super::Appender> {
        Arc::new(Appender {
            addr: self.addr.clone(),
            connection: Arc::new(tokio::sync::OnceCell::new()),
        })
    }

    /// A push consumer from `from`, on a connection of its own. Under a
    /// storm JetStream's API can leave a consumer create unanswered (its
    /// request queue is bounded; 1,000 creates at once got no reply within
    /// 30 s here): like a real client, try again, on a fresh connection with
    /// fresh subjects, so a consumer that was created after all only pushes
    /// to a subject nobody listens on (an ephemeral consumer without
    /// interest is removed by the server) and nothing arrives twice.
    async fn subscribe(&self, from: From) -> Result<Box<dyn super::Subscriber>> {
        const ATTEMPTS: u32 = 10;
        for _ in 0..ATTEMPTS {
            if let Some(subscriber) = self.subscribe_once(from).await? {
                return Ok(Box::new(subscriber));
            }
        }
        bail!("NATS did not answer {ATTEMPTS} consumer creates, each within {REPLY_TIMEOUT:?}")
    }
}

/// The subscriber connection's subscription ids.
const DELIVERIES: u64 = 1;
const API_REPLY: u64 = 2;

/// Publishes single events over one shared connection (opened on first use).
#[derive(Clone)]
pub struct Appender {
    addr: String,
    connection: Arc<tokio::sync::OnceCell<Requester>>,
}

#[async_trait::async_trait]
impl super::Appender for Appender {
    async fn append_one(&self, index: u64, payload: usize) -> Result<()> {
        let connection = self
            .connection
            .get_or_try_init(|| Requester::connect(&self.addr))
            .await?;
        let (subject, payload) = event(index, payload);
        ack_seq(&connection.request(&subject, payload).await?)?;
        Ok(())
    }
}

pub struct Subscriber {
    reader: Reader,
    writer: Writer,
    /// Deliveries read while waiting for the consumer's creation.
    early: VecDeque<Msg>,
}

#[async_trait::async_trait]
impl super::Subscriber for Subscriber {
    async fn next(&mut self) -> Result<Option<Delivered>> {
        loop {
            let msg = match self.early.pop_front() {
                Some(msg) => msg,
                None => match self.reader.next().await? {
                    Op::Msg(msg) => msg,
                    Op::Ping => {
                        self.writer.pong().await?;
                        continue;
                    }
                    _ => continue,
                },
            };
            if msg.sid != DELIVERIES {
                continue;
            }
            if msg.status().is_some() {
                self.answer_status(&msg).await?;
                continue;
            }
            return unstamp(&msg.payload)
                .map(Some)
                .ok_or_else(|| anyhow!("a message without the bench's stamp on {}", msg.subject));
        }
    }
}

impl Subscriber {
    /// JetStream's status messages on the deliver subject (status 100, no
    /// payload). A flow control request carries a reply subject, answered
    /// when the subscriber reaches it, i.e. once it has taken everything
    /// sent before: that is what lets the server send more. Surprise: an
    /// idle heartbeat may also carry `Nats-Consumer-Stalled: SUBJECT` when the
    /// server is still waiting for a flow control answer it believes lost;
    /// it too must be answered, or the consumer stays stalled.
    async fn answer_status(&mut self, msg: &Msg) -> Result<()> {
        let stalled = msg.header("Nats-Consumer-Stalled").map(str::to_owned);
        for subject in msg.reply.iter().chain(stalled.iter()) {
            self.writer.publish(subject, None, b"").await?;
        }
        self.writer.flush().await
    }
}
