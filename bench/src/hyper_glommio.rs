//! hyper's HTTP/2 server on glommio executors: the spike of issue 18's
//! option 1 ("gRPC on the shard cores"). A glommio TCP stream serves as
//! hyper's I/O and glommio's `spawn_local` as hyper's executor, so tonic's
//! generated services run on the executor that accepted the connection,
//! with no tokio thread in between.
//!
//! Safe code only (the bench forbids `unsafe`): reads go through a buffer
//! the stream owns and are copied once into hyper's, which a production
//! version would avoid by reading into hyper's buffer directly.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::{TcpListener, TcpStream};

/// Bytes read from the socket at a time.
const READ_BUFFER: usize = 16 << 10;

/// A glommio TCP stream as hyper's I/O.
pub struct Io {
    stream: TcpStream,
    buffer: Box<[u8]>,
}

impl Io {
    pub fn new(stream: TcpStream) -> Io {
        Io {
            stream,
            buffer: vec![0; READ_BUFFER].into_boxed_slice(),
        }
    }
}

impl hyper::rt::Read for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let want = buf.remaining().min(this.buffer.len());
        match Pin::new(&mut this.stream).poll_read(cx, &mut this.buffer[..want]) {
            Poll::Ready(Ok(n)) => {
                buf.put_slice(&this.buffer[..n]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl hyper::rt::Write for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_close(cx)
    }
}

/// glommio's `spawn_local` as hyper's executor: HTTP/2 streams run as tasks
/// of the executor that owns their connection.
#[derive(Clone, Copy)]
pub struct LocalExec;

impl<F> hyper::rt::Executor<F> for LocalExec
where
    F: Future + 'static,
    F::Output: 'static,
{
    fn execute(&self, future: F) {
        glommio::spawn_local(future).detach();
    }
}

/// Listens on 127.0.0.1:`port` (0: a free one; glommio binds with
/// SO_REUSEPORT, so executors can share a port) and says on `bound` which
/// port, or why it could not; then serves `service` over HTTP/2 on every
/// connection accepted until `stop` is set (and one more connection arrives
/// to wake the accept), and says so on `done`.
pub async fn serve<S, B>(
    port: u16,
    service: S,
    stop: Arc<AtomicBool>,
    bound: Sender<Result<u16, String>>,
    done: Sender<()>,
) where
    S: tower_service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>
        + Clone
        + 'static,
    S::Future: 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(listener) => listener,
        Err(e) => {
            let _ = bound.send(Err(e.to_string()));
            return;
        }
    };
    let _ = bound.send(
        listener
            .local_addr()
            .map(|a| a.port())
            .map_err(|e| e.to_string()),
    );
    while !stop.load(Ordering::Acquire) {
        let Ok(stream) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(service.clone());
        glommio::spawn_local(async move {
            let _ = hyper::server::conn::http2::Builder::new(LocalExec)
                .serve_connection(Io::new(stream), service)
                .await;
        })
        .detach();
    }
    let _ = done.send(());
}
