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

    /// Where a consumer for `from` starts, as JetStream's consumer config.
    fn start_of(&self, from: From) -> Result<Start> {
        Ok(match from {
            From::Beginning => Start::All,
            From::Now => Start::New,
            From::Resume { index, .. } => Start::At(self.resume.get("nats", index)?),
        })
    }
}

/// Where a push consumer starts.
#[derive(Clone, Copy, Debug)]
enum Start {
    /// The stream's first message.
    All,
    /// After the stream's last message when the consumer is created.
    New,
    /// This stream sequence.
    At(u64),
}

/// Creates a push consumer starting at `start` on a connection of its own.
/// One try; `None` if the create got no answer in time.
async fn consumer_once(addr: &str, start: Start) -> Result<Option<Subscriber>> {
    let (reader, mut writer) = client::connect(addr).await?;
    let deliver = new_inbox();
    let api_inbox = new_inbox();
    let mut config = json!({
        "deliver_subject": deliver,
        "ack_policy": "none",
        "replay_policy": "instant",
        "flow_control": true,
        "idle_heartbeat": IDLE_HEARTBEAT_NS,
    });
    match start {
        Start::All => config["deliver_policy"] = json!("all"),
        Start::New => config["deliver_policy"] = json!("new"),
        Start::At(sequence) => {
            config["deliver_policy"] = json!("by_start_sequence");
            config["opt_start_seq"] = json!(sequence);
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
        addr: addr.to_owned(),
        start,
        reader,
        writer,
        early: VecDeque::new(),
        reconnects: 0,
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
                let info = js_reply(&msg).context("creating the consumer")?;
                // Where it starts, as a stream sequence, so a reconnection
                // before its first delivery resumes there too: the reply's
                // `delivered.stream_seq` is the sequence before its first
                // (seen: 0 for "all", the stream's last for "new", N-1 for
                // "by_start_sequence" N).
                if let Some(last) = info["delivered"]["stream_seq"].as_u64() {
                    subscriber.start = Start::At(last + 1);
                }
                return Ok(Some(subscriber));
            }
            Op::Msg(msg) => subscriber.early.push_back(msg),
            Op::Ping => subscriber.writer.pong().await?,
            _ => {}
        }
    }
}

/// A push consumer from `start`. Under a storm JetStream's API can leave a
/// consumer create unanswered (its request queue is bounded; 1,000 creates
/// at once got no reply within 30 s here): like a real client, try again,
/// on a fresh connection with fresh subjects, so a consumer that was created
/// after all only pushes to a subject nobody listens on (an ephemeral
/// consumer without interest is removed by the server) and nothing arrives
/// twice.
async fn consumer(addr: &str, start: Start) -> Result<Subscriber> {
    const ATTEMPTS: u32 = 10;
    for _ in 0..ATTEMPTS {
        if let Some(subscriber) = consumer_once(addr, start).await? {
            return Ok(subscriber);
        }
    }
    bail!("NATS did not answer {ATTEMPTS} consumer creates, each within {REPLY_TIMEOUT:?}")
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

    /// A push consumer from `from`, on a connection of its own, that
    /// reconnects and resumes after its last delivery when the server cuts
    /// it off ([`Subscriber::next`]).
    async fn subscribe(&self, from: From) -> Result<Box<dyn super::Subscriber>> {
        Ok(Box::new(consumer(&self.addr, self.start_of(from)?).await?))
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
    addr: String,
    /// Where a consumer created now would resume it: the stream sequence
    /// after its last delivery (or where its consumer started).
    start: Start,
    reader: Reader,
    writer: Writer,
    /// Deliveries read while waiting for the consumer's creation.
    early: VecDeque<Msg>,
    /// Reconnections since the last delivery.
    reconnects: u32,
}

/// Reconnections in a row without a delivery before the subscriber gives up.
const RECONNECTS: u32 = 10;

/// Subscriber reconnections since the server started (said when it stops).
static RECONNECTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Drop for Nats {
    fn drop(&mut self) {
        let reconnected = RECONNECTED.swap(0, std::sync::atomic::Ordering::Relaxed);
        if reconnected > 0 {
            eprintln!(
                "# nats: the server cut subscribers off {reconnected} times; each reconnected \
                 and resumed after its last delivery"
            );
        }
    }
}

#[async_trait::async_trait]
impl super::Subscriber for Subscriber {
    /// The next delivery. When the server closes the connection (JetStream
    /// cuts off a consumer it finds slow: in a 1,000-subscriber storm here
    /// after 2,304 of 10,000 events, "early eof"), it does what a real client
    /// does: connects again and creates a consumer from the stream sequence
    /// after its last delivery, so nothing is lost or delivered twice.
    async fn next(&mut self) -> Result<Option<Delivered>> {
        let msg = loop {
            match self.receive().await {
                Ok(msg) => break msg,
                Err(cut) => self.reconnect(cut).await?,
            }
        };
        let sequence = stream_sequence(&msg)?;
        self.start = Start::At(sequence + 1);
        self.reconnects = 0;
        unstamp(&msg.payload)
            .map(Some)
            .ok_or_else(|| anyhow!("a message without the bench's stamp on {}", msg.subject))
    }
}

/// The stream sequence of a delivery, from its reply subject:
/// `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>`
/// (the server sets it whatever the consumer's ack policy), or the longer
/// form with a domain and an account hash after `$JS.ACK`.
fn stream_sequence(msg: &Msg) -> Result<u64> {
    let reply = msg.reply.as_deref().unwrap_or_default();
    let tokens: Vec<&str> = reply.split('.').collect();
    let at = match tokens.len() {
        9 => 5,
        n if n >= 11 => 7,
        _ => bail!("a delivery whose reply subject is not a JetStream ack: {reply:?}"),
    };
    if tokens[..2] != ["$JS", "ACK"] {
        bail!("a delivery whose reply subject is not a JetStream ack: {reply:?}");
    }
    tokens[at]
        .parse()
        .with_context(|| format!("the stream sequence in {reply:?}"))
}

impl Subscriber {
    /// The next delivery on this connection, answering the server's pings
    /// and status messages meanwhile. An error is the connection's: reading
    /// or answering failed.
    async fn receive(&mut self) -> Result<Msg> {
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
            return Ok(msg);
        }
    }

    /// The connection was cut (`cut` says how): a fresh consumer from where
    /// this one got to, on a fresh connection; a failed attempt counts as
    /// another cut.
    async fn reconnect(&mut self, mut cut: anyhow::Error) -> Result<()> {
        loop {
            self.reconnects += 1;
            if self.reconnects > RECONNECTS {
                return Err(cut.context(format!(
                    "NATS cut the subscriber off {RECONNECTS} times in a row without a delivery"
                )));
            }
            match consumer(&self.addr, self.start).await {
                Ok(fresh) => {
                    let reconnects = self.reconnects;
                    *self = fresh;
                    self.reconnects = reconnects;
                    RECONNECTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) => cut = e,
            }
        }
    }

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
