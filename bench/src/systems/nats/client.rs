//! The few verbs of the NATS client protocol the benchmark needs, over one
//! buffered TCP connection: CONNECT, PING/PONG, PUB, SUB, and parsing of
//! what the server sends (INFO, MSG, HMSG, PING, PONG, +OK, -ERR).
//!
//! Hand-written rather than the `async-nats` crate, which would pull rustls,
//! ring and dozens of crates into a workspace whose CI must build in minutes,
//! for a benchmark that uses five protocol verbs. [`Requester`] adds what
//! request/reply needs (a reply inbox per connection, replies matched to
//! requests) for JetStream's API and its acknowledged publishes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// How long a request waits for its reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// A subject no other connection uses, for replies and push deliveries.
pub fn new_inbox() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "_INBOX.{}.{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A message the server delivered (MSG, or HMSG when it has headers).
#[derive(Debug)]
pub struct Msg {
    pub subject: String,
    pub sid: u64,
    pub reply: Option<String>,
    /// The raw header block (`NATS/1.0[ status text]\r\nKey: Value\r\n…`).
    pub headers: Option<Vec<u8>>,
    pub payload: Vec<u8>,
}

impl Msg {
    /// The status code of a status message (`NATS/1.0 503`, `NATS/1.0 100
    /// Idle Heartbeat`): the server's own messages, not stored ones.
    pub fn status(&self) -> Option<u16> {
        let headers = self.headers.as_deref()?;
        let first = headers.split(|&b| b == b'\r').next()?;
        let rest = first.strip_prefix(b"NATS/1.0")?;
        std::str::from_utf8(rest)
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// A header's value (names compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        let headers = std::str::from_utf8(self.headers.as_deref()?).ok()?;
        headers.split("\r\n").skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }
}

/// One protocol message from the server.
pub enum Op {
    Msg(Msg),
    Ping,
    Pong,
    Info,
    Ok,
}

pub struct Reader {
    inner: BufReader<OwnedReadHalf>,
    line: Vec<u8>,
}

impl Reader {
    /// The next protocol message; `-ERR` is an error (the server closes the
    /// connection after most of them), as is the connection closing.
    pub async fn next(&mut self) -> Result<Op> {
        self.line.clear();
        if self.inner.read_until(b'\n', &mut self.line).await? == 0 {
            bail!("the NATS server closed the connection");
        }
        let line = std::str::from_utf8(&self.line)
            .context("a protocol line that is not UTF-8")?
            .trim_end();
        let (verb, args) = line.split_once(' ').unwrap_or((line, ""));
        match verb.to_ascii_uppercase().as_str() {
            "MSG" | "HMSG" => {
                let headered = verb.eq_ignore_ascii_case("HMSG");
                let msg = parse_msg_line(args, headered)
                    .ok_or_else(|| anyhow!("a malformed NATS message line: {line:?}"))?;
                self.read_msg(msg).await.map(Op::Msg)
            }
            "PING" => Ok(Op::Ping),
            "PONG" => Ok(Op::Pong),
            "INFO" => Ok(Op::Info),
            "+OK" => Ok(Op::Ok),
            "-ERR" => bail!("the NATS server said: {args}"),
            _ => bail!("an unknown NATS protocol line: {line:?}"),
        }
    }

    async fn read_msg(
        &mut self,
        (mut msg, header_len, total_len): (Msg, usize, usize),
    ) -> Result<Msg> {
        // The body, then CRLF.
        let mut body = vec![0; total_len + 2];
        self.inner.read_exact(&mut body).await?;
        if !body.ends_with(b"\r\n") || header_len > total_len {
            bail!("a NATS message body of the wrong length on {}", msg.subject);
        }
        body.truncate(total_len);
        if header_len > 0 {
            msg.payload = body.split_off(header_len);
            msg.headers = Some(body);
        } else {
            msg.payload = body;
        }
        Ok(msg)
    }
}

/// `MSG subject sid [reply] len` or `HMSG subject sid [reply] hlen len`:
/// the message without its body, its header length and its total length.
fn parse_msg_line(args: &str, headered: bool) -> Option<(Msg, usize, usize)> {
    let fields: Vec<&str> = args.split_ascii_whitespace().collect();
    let sizes = if headered { 2 } else { 1 };
    let (names, lengths) = fields.split_at(fields.len().checked_sub(sizes)?);
    let (subject, sid, reply) = match *names {
        [subject, sid] => (subject, sid, None),
        [subject, sid, reply] => (subject, sid, Some(reply.to_owned())),
        _ => return None,
    };
    let total: usize = lengths.last()?.parse().ok()?;
    let header = if headered {
        lengths[0].parse().ok()?
    } else {
        0
    };
    let msg = Msg {
        subject: subject.to_owned(),
        sid: sid.parse().ok()?,
        reply,
        headers: None,
        payload: Vec::new(),
    };
    Some((msg, header, total))
}

pub struct Writer {
    inner: BufWriter<OwnedWriteHalf>,
}

impl Writer {
    /// Buffers a PUB; sent on [`Writer::flush`].
    pub async fn publish(
        &mut self,
        subject: &str,
        reply: Option<&str>,
        payload: &[u8],
    ) -> Result<()> {
        let line = match reply {
            Some(reply) => format!("PUB {subject} {reply} {}\r\n", payload.len()),
            None => format!("PUB {subject} {}\r\n", payload.len()),
        };
        self.inner.write_all(line.as_bytes()).await?;
        self.inner.write_all(payload).await?;
        self.inner.write_all(b"\r\n").await?;
        Ok(())
    }

    /// Buffers a SUB; sent on [`Writer::flush`].
    pub async fn subscribe(&mut self, subject: &str, sid: u64) -> Result<()> {
        self.inner
            .write_all(format!("SUB {subject} {sid}\r\n").as_bytes())
            .await?;
        Ok(())
    }

    /// Answers the server's keep-alive PING (it drops a connection that
    /// misses two), and flushes.
    pub async fn pong(&mut self) -> Result<()> {
        self.inner.write_all(b"PONG\r\n").await?;
        self.flush().await
    }

    pub async fn flush(&mut self) -> Result<()> {
        self.inner.flush().await?;
        Ok(())
    }
}

/// Opens a connection and completes the handshake: INFO, CONNECT, then a
/// PING whose PONG proves the server accepted the CONNECT.
pub async fn connect(addr: &str) -> Result<(Reader, Writer)> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to nats-server at {addr}"))?;
    stream.set_nodelay(true)?;
    let (read, write) = stream.into_split();
    let mut reader = Reader {
        inner: BufReader::with_capacity(256 << 10, read),
        line: Vec::new(),
    };
    let mut writer = Writer {
        inner: BufWriter::with_capacity(64 << 10, write),
    };
    if !matches!(reader.next().await?, Op::Info) {
        bail!("nats-server at {addr} did not start with INFO");
    }
    // headers: status messages (flow control, heartbeats, 503) are HMSGs;
    // no_responders: a request to a subject nobody serves gets a 503 at once
    // instead of waiting out the timeout.
    writer
        .inner
        .write_all(
            b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\
              \"no_responders\":true,\"lang\":\"rust\",\"version\":\"bench\"}\r\nPING\r\n",
        )
        .await?;
    writer.flush().await?;
    loop {
        match reader.next().await? {
            Op::Pong => return Ok((reader, writer)),
            Op::Ping => writer.pong().await?,
            _ => {}
        }
    }
}

/// Replies of requests in flight, by request number; `closed` once the
/// connection is gone, with why.
#[derive(Default)]
struct Pending {
    waiting: HashMap<u64, oneshot::Sender<Result<Msg>>>,
    closed: Option<String>,
}

/// One connection that sends requests and routes their replies: each
/// request's reply subject is `INBOX.N`, and a task reads the replies
/// (subscribed as `INBOX.*`) and hands each to its waiting request. Shared
/// by concurrent requesters; dropped, it stops the task and the connection.
pub struct Requester {
    writer: Arc<tokio::sync::Mutex<Writer>>,
    pending: Arc<Mutex<Pending>>,
    next: AtomicU64,
    inbox: String,
    reader: tokio::task::JoinHandle<()>,
}

impl Requester {
    pub async fn connect(addr: &str) -> Result<Requester> {
        let (mut reader, mut writer) = connect(addr).await?;
        let inbox = new_inbox();
        writer.subscribe(&format!("{inbox}.*"), 1).await?;
        writer.flush().await?;
        let pending = Arc::new(Mutex::new(Pending::default()));
        let writer = Arc::new(tokio::sync::Mutex::new(writer));
        let (routes, pongs) = (pending.clone(), writer.clone());
        let prefix = format!("{inbox}.");
        let reader = tokio::spawn(async move {
            let why = loop {
                match reader.next().await {
                    Ok(Op::Msg(msg)) => {
                        let n = msg
                            .subject
                            .strip_prefix(&prefix)
                            .and_then(|n| n.parse().ok());
                        let waiter =
                            n.and_then(|n| routes.lock().expect("poisoned").waiting.remove(&n));
                        if let Some(waiter) = waiter {
                            let _ = waiter.send(Ok(msg));
                        }
                    }
                    // Requesters hold the writer only while writing.
                    Ok(Op::Ping) => {
                        if let Err(e) = pongs.lock().await.pong().await {
                            break format!("{e:#}");
                        }
                    }
                    Ok(_) => {}
                    Err(e) => break format!("{e:#}"),
                }
            };
            let mut pending = routes.lock().expect("poisoned");
            for (_, waiter) in pending.waiting.drain() {
                let _ = waiter.send(Err(anyhow!("{why}")));
            }
            pending.closed = Some(why);
        });
        Ok(Requester {
            writer,
            pending,
            next: AtomicU64::new(0),
            inbox,
            reader,
        })
    }

    /// Sends `requests` (subject, payload) in one write, and returns a
    /// receiver per request for its reply.
    pub async fn send_all(
        &self,
        requests: impl IntoIterator<Item = (String, Vec<u8>)>,
    ) -> Result<Vec<oneshot::Receiver<Result<Msg>>>> {
        let mut writer = self.writer.lock().await;
        let mut replies = Vec::new();
        for (subject, payload) in requests {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            {
                let mut pending = self.pending.lock().expect("poisoned");
                if let Some(why) = &pending.closed {
                    bail!("NATS connection lost: {why}");
                }
                pending.waiting.insert(n, tx);
            }
            writer
                .publish(&subject, Some(&format!("{}.{n}", self.inbox)), &payload)
                .await?;
            replies.push(rx);
        }
        writer.flush().await?;
        Ok(replies)
    }

    /// Sends one request and waits (at most [`REPLY_TIMEOUT`]) for its reply.
    pub async fn request(&self, subject: &str, payload: Vec<u8>) -> Result<Msg> {
        let reply = self.send_all([(subject.to_owned(), payload)]).await?;
        let reply = reply.into_iter().next().expect("one request, one receiver");
        wait_reply(reply).await
    }
}

/// A request's reply, waited for at most [`REPLY_TIMEOUT`].
pub async fn wait_reply(reply: oneshot::Receiver<Result<Msg>>) -> Result<Msg> {
    tokio::time::timeout(REPLY_TIMEOUT, reply)
        .await
        .map_err(|_| anyhow!("no NATS reply within {REPLY_TIMEOUT:?}"))?
        .map_err(|_| anyhow!("NATS connection lost"))?
}

impl Drop for Requester {
    fn drop(&mut self) {
        self.reader.abort();
    }
}
