//! Who may hold a connection to the gRPC port, and for how long without
//! speaking.
//!
//! Nothing closed a TCP connection that never spoke: 3,000 connections that
//! sent nothing, or only the HTTP/2 preface, were all open 20 s later, and a
//! few thousand more would have taken every file descriptor, after which
//! each `accept` failed and every real client was refused. Here:
//!
//! - A connection has [`Limits::handshake`] to send the first
//!   [`HANDSHAKE_BYTES`] (the HTTP/2 client preface and a SETTINGS frame's
//!   header), else it is closed. Over TLS those bytes count only once the
//!   server has written (its handshake flight): a client has spoken when it
//!   answered it, which completes the TLS handshake. (Counted from the
//!   first byte, a client that sent a ClientHello and then nothing had
//!   spoken, and held its connection and a TLS accept task for ever.)
//! - At most [`Limits::max_connections`] are open. At the cap, a new
//!   connection makes room by closing the oldest one that has not finished
//!   its handshake yet, so a flood of silent connections cannot keep a real
//!   client out (a real client's handshake takes a round trip; the flood's
//!   never ends); only when every open connection has spoken is the new one
//!   refused. Both are counted and said in the log, at most every 10 s.
//! - `accept` failing (out of descriptors, or memory) waits 100 ms before it
//!   tries again, instead of spinning on the error.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use ringfeed_engine::RateLimit;
use ringfeed_proto::tonic::transport::server::{Connected, TcpConnectInfo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::metrics::ServerMetrics;

/// Bytes a client sends first: the HTTP/2 client preface (24) and the header
/// of the SETTINGS frame that must follow it (9). A connection that has sent
/// them has spoken.
pub const HANDSHAKE_BYTES: usize = 33;

/// How many connections, and how long one may stay silent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub handshake: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: Limits::default_max_connections(),
            handshake: Limits::DEFAULT_HANDSHAKE,
        }
    }
}

impl Limits {
    /// Descriptors kept for everything but client connections: segment
    /// files, peers, etcd, the metrics and status listeners.
    pub const RESERVED_FDS: usize = 256;
    pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
    pub const DEFAULT_HANDSHAKE: Duration = Duration::from_secs(5);

    /// The default cap: 10,000, or fewer if the process may open fewer
    /// files ([`Limits::most_connections`]).
    pub fn default_max_connections() -> usize {
        Self::DEFAULT_MAX_CONNECTIONS.min(Self::most_connections())
    }

    /// The most connections this process can take: its open files limit
    /// (soft `RLIMIT_NOFILE`) less [`Limits::RESERVED_FDS`]; past that,
    /// `accept` itself fails. 10,000 when the limit cannot be read.
    pub fn most_connections() -> usize {
        match open_files_limit() {
            Some(limit) => (limit.saturating_sub(Self::RESERVED_FDS as u64) as usize).max(1),
            None => Self::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// The soft limit on open files, from `/proc/self/limits`.
pub fn open_files_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The connections open now, shared by the accept loop and each connection.
pub struct Gate {
    limits: Limits,
    /// The listener speaks TLS: see the module's doc.
    tls: bool,
    metrics: Arc<ServerMetrics>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    open: usize,
    next_id: u64,
    /// Open connections that have not spoken yet, oldest first.
    silent: BTreeMap<u64, Arc<Silent>>,
}

/// A connection that has not spoken yet, as the gate sees it.
#[derive(Default)]
struct Silent {
    /// Closed to make room for a newer connection.
    evicted: AtomicBool,
    /// Its reader, woken to find out.
    waker: Mutex<Option<Waker>>,
}

static CAP_WARNINGS: RateLimit = RateLimit::new(Duration::from_secs(10));
static ACCEPT_WARNINGS: RateLimit = RateLimit::new(Duration::from_secs(10));

impl Gate {
    pub fn new(limits: Limits, metrics: Arc<ServerMetrics>, tls: bool) -> Arc<Gate> {
        Arc::new(Gate {
            limits,
            tls,
            metrics,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `io` in, or refuses it (`None`: it is dropped, which closes it).
    fn admit(self: &Arc<Self>, io: TcpStream) -> Option<Guarded> {
        let mut state = self.lock();
        if state.open >= self.limits.max_connections {
            let oldest = state.silent.keys().next().copied();
            match oldest.and_then(|id| state.silent.remove(&id)) {
                Some(silent) => {
                    silent.evicted.store(true, Ordering::Release);
                    if let Some(waker) = silent
                        .waker
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .take()
                    {
                        waker.wake();
                    }
                    self.metrics.connection_closed_silent();
                    if let Some(suppressed) = CAP_WARNINGS.check() {
                        tracing::warn!(
                            max_connections = self.limits.max_connections,
                            suppressed,
                            "{} connections open (max_connections): closed the oldest that had not \
                             completed its HTTP/2 handshake to make room",
                            state.open
                        );
                    }
                }
                None => {
                    self.metrics.connection_refused();
                    if let Some(suppressed) = CAP_WARNINGS.check() {
                        tracing::warn!(
                            max_connections = self.limits.max_connections,
                            suppressed,
                            "refused a connection: {} open, every one of them in use \
                             (max_connections; raise it, and the open files limit with it)",
                            state.open
                        );
                    }
                    return None;
                }
            }
        }
        state.open += 1;
        state.next_id += 1;
        let id = state.next_id;
        let silent = Arc::new(Silent::default());
        state.silent.insert(id, silent.clone());
        drop(state);
        self.metrics.connection_opened();
        Some(Guarded {
            io,
            gate: self.clone(),
            id,
            silent: Some(silent),
            read: 0,
            counting: !self.tls,
            deadline: Some(Box::pin(tokio::time::sleep(self.limits.handshake))),
        })
    }

    fn spoke(&self, id: u64) {
        self.lock().silent.remove(&id);
    }

    fn closed(&self, id: u64) {
        let mut state = self.lock();
        state.open -= 1;
        state.silent.remove(&id);
        drop(state);
        self.metrics.connection_closed();
    }
}

/// Connections the kernel completes before `accept` takes them; it caps
/// this at `net.core.somaxconn` (4096 on current kernels).
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `address` (HOST:PORT, names resolved) with a backlog of
/// [`LISTEN_BACKLOG`]. tokio's `bind` listens with 128: in a reconnect
/// storm the 129th SYN waiting was dropped, and its client tried again only
/// after TCP's 1 s retransmission timeout (3,000 connections opened one
/// after another took 14 s; 0.2 s against a plain accept loop).
pub async fn bind(address: &str) -> io::Result<TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host(address).await? {
        let socket = match addr {
            std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        match socket
            .bind(addr)
            .and_then(|()| socket.listen(LISTEN_BACKLOG))
        {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{address} names no address"),
        )
    }))
}

/// Accepted connections of `listener` through `gate`, with Nagle's
/// algorithm off: small responses (acks, live events) would otherwise wait
/// for the peer's delayed ACK, about 40 ms on Linux (measured: batch-64
/// append acks at p50 44 ms).
pub fn incoming(
    listener: TcpListener,
    gate: Arc<Gate>,
) -> impl tokio_stream::Stream<Item = io::Result<Guarded>> {
    futures_lite::stream::unfold((listener, gate), |(listener, gate)| async move {
        loop {
            match listener.accept().await {
                Ok((io, _)) => {
                    if io.set_nodelay(true).is_err() {
                        continue; // the peer is already gone
                    }
                    if let Some(conn) = gate.admit(io) {
                        return Some((Ok(conn), (listener, gate)));
                    }
                }
                Err(e) => {
                    if let Some(suppressed) = ACCEPT_WARNINGS.check() {
                        tracing::warn!(
                            suppressed,
                            "accepting a connection failed: {e}; trying again in 100 ms"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}

/// An accepted connection: counted by its [`Gate`] while open, and closed
/// if it stays silent past the handshake deadline or is made room for.
pub struct Guarded {
    io: TcpStream,
    gate: Arc<Gate>,
    id: u64,
    /// Until it has spoken.
    silent: Option<Arc<Silent>>,
    /// Bytes read while `counting`.
    read: usize,
    /// Whether bytes read count towards speaking: at once in plain text,
    /// over TLS once the server has written.
    counting: bool,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Guarded {
    /// Bytes read from now on count, once the server has written any.
    fn wrote(&mut self, written: &Poll<io::Result<usize>>) {
        if matches!(written, Poll::Ready(Ok(n)) if *n > 0) {
            self.counting = true;
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.gate.closed(self.id);
    }
}

impl Connected for Guarded {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.io.connect_info()
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(silent) = &this.silent {
            if silent.evicted.load(Ordering::Acquire) {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "closed before its HTTP/2 handshake to make room (max_connections)",
                )));
            }
            *silent.waker.lock().unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
            if let Some(deadline) = &mut this.deadline {
                if deadline.as_mut().poll(cx).is_ready() {
                    this.gate.metrics.connection_closed_silent();
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no HTTP/2 handshake within the handshake timeout",
                    )));
                }
            }
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), true) = (&read, this.counting) {
            this.read += buf.filled().len() - before;
            if this.silent.is_some() && this.read >= HANDSHAKE_BYTES {
                this.silent = None;
                this.deadline = None;
                this.gate.spoke(this.id);
            }
        }
        read
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write(cx, buf);
        self.wrote(&written);
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.wrote(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
