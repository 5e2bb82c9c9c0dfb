//! The server-wide budget of append bytes in flight (docs/design.md 2.11).
//!
//! Every `Append` and `AppendStream` request body passes through
//! [`BudgetBody`], which reads each gRPC message's 5-byte length prefix and
//! takes the message's size from one shared semaphore before it lets any of
//! the message through to tonic's decoder. While the budget is spent the body
//! returns `Pending`: hyper stops reading, and HTTP/2 flow control holds the
//! client back. So the bytes a flood of producers makes the server hold are
//! bounded by the budget (times the copies decoding and framing make), not by
//! the number of clients. A message that waits longer than the append
//! timeout is refused with RESOURCE_EXHAUSTED, nothing of it appended.
//!
//! A unary append keeps its bytes until its response is produced (the
//! decoded events and framed records live that long). A stream gives back a
//! message's bytes once the message is received in full, and never waits for
//! room while it holds any (so streams cannot wait on each other). Known
//! limits: the budget is charged at a message's declared length, so a client
//! that declares a large message and then stalls holds that much until the
//! stream ends; and a request waiting for room keeps its received data in the
//! connection's flow-control window (sized generously in `serve`).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use hyper::body::Frame;
use ringfeed_proto::bytes::{Buf, Bytes};
use ringfeed_proto::tonic::body::Body;
use ringfeed_proto::tonic::codegen::http;
use ringfeed_proto::tonic::codegen::Service;
use ringfeed_proto::tonic::server::NamedService;
use ringfeed_proto::tonic::Status;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Budget units are KiB, so a u32 permit count covers any budget.
const UNIT: usize = 1024;

/// Bytes of append requests the server holds at once, for all clients.
#[derive(Debug)]
pub struct AppendBudget {
    permits: Arc<Semaphore>,
    units: usize,
    /// How long a message may wait for room before it is refused.
    wait: Duration,
    /// A message declared larger than this could never be appended (it is
    /// over the batch limit): refused at its length prefix, taking nothing.
    max_message: usize,
    /// Messages refused because the budget stayed full for `wait`.
    refused: AtomicU64,
}

impl AppendBudget {
    pub fn new(bytes: usize, wait: Duration) -> Arc<AppendBudget> {
        AppendBudget::with_max_message(bytes, wait, usize::MAX)
    }

    /// [`AppendBudget::new`], refusing at once (INVALID_ARGUMENT) a message
    /// declared larger than `max_message` bytes instead of letting it wait
    /// for room (the whole budget) only to be refused by the decoder.
    pub fn with_max_message(bytes: usize, wait: Duration, max_message: usize) -> Arc<AppendBudget> {
        let units = bytes.div_ceil(UNIT).max(1);
        Arc::new(AppendBudget {
            max_message,
            permits: Arc::new(Semaphore::new(units)),
            units,
            wait,
            refused: AtomicU64::new(0),
        })
    }

    /// Budget bytes not taken now.
    pub fn available_bytes(&self) -> usize {
        self.permits.available_permits() * UNIT
    }

    /// The whole budget, in bytes (the configured size rounded up to KiB).
    pub fn capacity_bytes(&self) -> usize {
        self.units * UNIT
    }

    /// Append messages refused so far because the budget stayed full.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Waits for room for a message of `bytes` (a message larger than the
    /// whole budget takes all of it).
    fn take(
        self: &Arc<Self>,
        bytes: usize,
    ) -> Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, Status>> + Send>> {
        let units = bytes.div_ceil(UNIT).clamp(1, self.units) as u32;
        let budget = self.clone();
        Box::pin(async move {
            let acquire = budget.permits.clone().acquire_many_owned(units);
            match tokio::time::timeout(budget.wait, acquire).await {
                Ok(permit) => Ok(permit.expect("the semaphore is never closed")),
                Err(_) => Err({
                    budget.refused.fetch_add(1, Ordering::Relaxed);
                    Status::resource_exhausted(format!(
                    "the server's append budget ({} bytes in flight, config append_budget_bytes) \
                     stayed full for {:?}: nothing of this request was appended; retry later",
                        budget.units * UNIT,
                        budget.wait
                    ))
                }),
            }
        })
    }
}

/// Wraps the RingFeed service: its append methods' bodies draw on the budget.
#[derive(Clone)]
pub struct Budgeted<S> {
    inner: S,
    budget: Arc<AppendBudget>,
}

impl<S> Budgeted<S> {
    pub fn new(inner: S, budget: Arc<AppendBudget>) -> Budgeted<S> {
        Budgeted { inner, budget }
    }
}

impl<S: NamedService> NamedService for Budgeted<S> {
    const NAME: &'static str = S::NAME;
}

type Held = Arc<Mutex<Vec<OwnedSemaphorePermit>>>;

impl<S> Service<http::Request<Body>> for Budgeted<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let path = request.uri().path();
        let streaming = path.ends_with("/AppendStream");
        if !(streaming || path.ends_with("/Append")) {
            return Box::pin(self.inner.call(request));
        }
        let held: Held = Arc::default();
        let (parts, body) = request.into_parts();
        let body = Body::new(BudgetBody::new(
            body,
            self.budget.clone(),
            held.clone(),
            streaming,
        ));
        let response = self.inner.call(http::Request::from_parts(parts, body));
        Box::pin(async move {
            let response = response.await;
            drop(held); // a unary append's bytes are given back with its answer
            response
        })
    }
}

/// A request body that takes each message's size from the budget before it
/// passes the message on.
struct BudgetBody {
    inner: Body,
    budget: Arc<AppendBudget>,
    held: Held,
    streaming: bool,
    /// The length prefix being read (compressed flag and u32 big-endian length).
    header: [u8; 5],
    header_len: usize,
    /// Bytes of the current message not yet seen.
    remaining: usize,
    /// The declared length of a message over `max_message`, once seen.
    oversize: Option<usize>,
    /// A data frame held back until the budget has room for the messages
    /// it starts.
    pending: Option<Bytes>,
    taking: Option<Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, Status>> + Send>>>,
}

impl BudgetBody {
    fn new(inner: Body, budget: Arc<AppendBudget>, held: Held, streaming: bool) -> BudgetBody {
        BudgetBody {
            inner,
            budget,
            held,
            streaming,
            header: [0; 5],
            header_len: 0,
            remaining: 0,
            oversize: None,
            pending: None,
            taking: None,
        }
    }

    /// Walks `data` through the framing; returns the sizes of the messages
    /// whose length prefix ends in it.
    fn messages_started(&mut self, data: &[u8]) -> usize {
        let mut sizes = 0;
        let mut at = 0;
        while at < data.len() {
            if self.remaining > 0 {
                let n = self.remaining.min(data.len() - at);
                self.remaining -= n;
                at += n;
                continue;
            }
            self.header[self.header_len] = data[at];
            self.header_len += 1;
            at += 1;
            if self.header_len == 5 {
                self.header_len = 0;
                let len = u32::from_be_bytes([
                    self.header[1],
                    self.header[2],
                    self.header[3],
                    self.header[4],
                ]) as usize;
                self.remaining = len;
                if len > self.budget.max_message {
                    self.oversize.get_or_insert(len);
                }
                sizes += len.max(1);
            }
        }
        sizes
    }
}

impl BudgetBody {
    /// A stream gives its bytes back once a message has been received in
    /// full (tonic decodes and appends it next), so an idle stream holds none.
    /// A unary append keeps them until its answer.
    fn release_if_received(&self) {
        if self.streaming && self.remaining == 0 && self.header_len == 0 {
            self.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }
}

impl hyper::body::Body for BudgetBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        loop {
            if let Some(taking) = this.taking.as_mut() {
                let permit = ready!(taking.as_mut().poll(cx));
                this.taking = None;
                let permit = permit?;
                this.held
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(permit);
            }
            if let Some(data) = this.pending.take() {
                this.release_if_received();
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                None => {
                    if this.streaming {
                        this.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
                    }
                    return Poll::Ready(None);
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                Some(Ok(frame)) => frame,
            };
            let data = match frame.into_data() {
                Ok(mut data) => data.copy_to_bytes(data.remaining()),
                Err(frame) => return Poll::Ready(Some(Ok(frame))),
            };
            let sizes = this.messages_started(&data);
            if let Some(len) = this.oversize {
                return Poll::Ready(Some(Err(Status::invalid_argument(format!(
                    "a request of {len} bytes is larger than any batch the server accepts \
                     ({} bytes: max_batch_bytes plus framing); nothing of it was appended: \
                     split it into smaller requests",
                    this.budget.max_message
                )))));
            }
            if sizes == 0 {
                this.release_if_received();
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            if this.streaming {
                // Never wait for room while holding some: a stream that did
                // would wait on itself, and streams on each other.
                this.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
            }
            this.pending = Some(data);
            this.taking = Some(this.budget.take(sizes));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_none() && self.taking.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A request body of one gRPC message of `len` bytes, drawing on `budget`.
    fn body(budget: &Arc<AppendBudget>, len: usize) -> (BudgetBody, Held) {
        let mut wire = vec![0u8];
        wire.extend_from_slice(&(len as u32).to_be_bytes());
        wire.resize(5 + len, 1);
        let held: Held = Arc::default();
        let inner = Body::new(
            http_body_util::Full::new(Bytes::from(wire))
                .map_err(|e: Infallible| -> Status { match e {} }),
        );
        let body = BudgetBody::new(inner, budget.clone(), held.clone(), false);
        (body, held)
    }

    fn poll_once(body: &mut BudgetBody) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        hyper::body::Body::poll_frame(Pin::new(body), &mut cx)
    }

    /// Regression: a stream took room for its next message while holding its
    /// previous one's, so two messages over half the budget in one stream
    /// waited on each other until the timeout.
    #[tokio::test]
    async fn a_stream_never_waits_on_itself() {
        let budget = AppendBudget::new(1 << 20, Duration::from_millis(200));
        let message = |len: usize| {
            let mut wire = vec![0u8];
            wire.extend_from_slice(&(len as u32).to_be_bytes());
            wire.resize(5 + len, 1);
            Ok::<_, Status>(Frame::data(Bytes::from(wire)))
        };
        let frames = tokio_stream::iter(vec![message(700 << 10), message(700 << 10)]);
        let inner = Body::new(http_body_util::StreamBody::new(frames));
        let mut stream = BudgetBody::new(inner, budget.clone(), Arc::default(), true);
        for i in 0..2 {
            let frame = stream.frame().await.expect("a frame");
            assert!(frame.is_ok(), "message {i}: {frame:?}");
        }
        assert_eq!(
            budget.available_bytes(),
            1 << 20,
            "a received message holds nothing"
        );
    }

    #[tokio::test]
    async fn a_message_waits_for_budget_then_is_refused_with_resource_exhausted() {
        let budget = AppendBudget::new(1 << 20, Duration::from_millis(100));
        let (mut first, first_held) = body(&budget, 800 << 10);
        let frame = first.frame().await.expect("a frame").expect("no error");
        assert_eq!(frame.into_data().unwrap().len(), 5 + (800 << 10));
        assert!(
            budget.available_bytes() < 300 << 10,
            "the first message holds its bytes"
        );

        // The second does not fit: nothing of it passes while the first holds.
        let (mut second, _second_held) = body(&budget, 800 << 10);
        assert!(poll_once(&mut second).is_pending());
        drop(first);
        assert!(
            poll_once(&mut second).is_pending(),
            "a unary append keeps its bytes until answered"
        );
        drop(first_held); // the first append was answered
        let frame = second.frame().await.expect("a frame").expect("no error");
        assert!(frame.is_data());

        // A third waits past the bound: RESOURCE_EXHAUSTED, nothing passed on.
        let (mut third, _) = body(&budget, 800 << 10);
        let refused = third
            .frame()
            .await
            .expect("an answer")
            .expect_err("refused");
        assert_eq!(
            refused.code(),
            ringfeed_proto::tonic::Code::ResourceExhausted
        );
        assert!(
            refused.message().contains("append_budget_bytes"),
            "{refused:?}"
        );
    }

    /// A message over the batch limit could never be appended: it is refused
    /// at its length prefix, without waiting for room (here the budget is
    /// all taken) and without taking any.
    #[tokio::test]
    async fn a_message_over_the_batch_limit_is_refused_at_once() {
        let budget = AppendBudget::with_max_message(64 << 10, Duration::from_secs(30), 128 << 10);
        let (mut holder, _held) = body(&budget, 64 << 10);
        holder.frame().await.expect("a frame").expect("no error");
        assert_eq!(budget.available_bytes(), 0);
        let (mut big, _) = body(&budget, 200 << 10);
        match poll_once(&mut big) {
            Poll::Ready(Some(Err(status))) => {
                assert_eq!(status.code(), ringfeed_proto::tonic::Code::InvalidArgument);
                assert!(status.message().contains("max_batch_bytes"), "{status:?}");
            }
            other => panic!("expected an immediate refusal, got {other:?}"),
        }
        let (mut fits, _) = body(&budget, 100 << 10);
        assert!(
            poll_once(&mut fits).is_pending(),
            "within the limit it waits"
        );
    }

    #[test]
    fn message_sizes_are_read_from_length_prefixes_split_anywhere() {
        let budget = AppendBudget::new(1 << 20, Duration::from_secs(1));
        let mut body = BudgetBody::new(Body::empty(), budget, Arc::default(), true);
        // Two messages: 3 bytes, then 70,000 bytes.
        let mut wire = vec![0, 0, 0, 0, 3, 1, 2, 3, 0];
        wire.extend_from_slice(&70_000u32.to_be_bytes());
        wire.extend(std::iter::repeat_n(7u8, 70_000));
        for split in [1, 2, 6, 9, 10, 13, 5000] {
            let (a, b) = wire.split_at(split);
            let total = body.messages_started(a) + body.messages_started(b);
            assert_eq!(total, 70_003, "split at {split}");
            assert_eq!((body.remaining, body.header_len), (0, 0));
        }
    }
}
