//! Connecting and reconnecting: a stream's responses as they come, where a
//! new stream starts, and backing off after a failure.

use ringfeed_core::{ClusterCursor, Cursor};
use ringfeed_proto::tonic::codegen::http::uri::PathAndQuery;
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::tonic::{self, Status};
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::wire::START_CURSOR_METADATA;

use super::{Connection, Follower};
use crate::backoff::retryable;
use crate::response::RawResponseCodec;
use crate::FollowError;

/// Largest response the follower accepts (a chunk is at most a window).
const MAX_RESPONSE_BYTES: usize = 256 << 20;

impl Follower {
    /// Waits for the next response (connecting or reconnecting first if
    /// needed) and takes it.
    pub(super) async fn receive(&mut self) -> Result<(), FollowError> {
        let result = match self.stream.as_mut() {
            Some(stream) => stream.message().await,
            None => match self.connect().await {
                Ok(()) => {
                    if self.failures > 0 {
                        let mut cursor = Vec::new();
                        self.checkpoint_bytes(&mut cursor);
                        let attempts = self.failures;
                        if let Some(observe) = self.on_connection.as_mut() {
                            observe(Connection::Back {
                                attempts,
                                cursor: &cursor,
                            });
                        }
                    }
                    return Ok(());
                }
                Err(status) => Err(status),
            },
        };
        match result {
            Ok(Some(response)) => {
                self.failures = 0;
                self.take(response)
            }
            // The server ends a stream OK only once until_ns is reached;
            // an OK end without it is a cut stream: resume.
            Ok(None) if self.request.until_ns != 0 => {
                self.ended = true;
                Ok(())
            }
            Ok(None) => {
                let status =
                    Status::unavailable("the stream ended without an error before any until_ns");
                self.failed(status).await
            }
            Err(status) => self.failed(status).await,
        }
    }

    async fn connect(&mut self) -> Result<(), Status> {
        let channel: Channel = self
            .endpoint
            .connect()
            .await
            .map_err(|e| Status::unavailable(format!("connecting to {}: {e}", self.server)))?;
        let mut request = self.request.clone();
        if let Some(cursor) = &self.checkpoint {
            request.start = Some(Start::Cursor(cursor.to_bytes().into()));
        }
        if let Some(cursor) = self.cluster.as_ref().and_then(|c| c.checkpoint.as_ref()) {
            request.start = Some(Start::Cursor(cursor.to_bytes().into()));
        }
        let mut grpc =
            tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES);
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(format!("connecting to {}: {e}", self.server)))?;
        let path = PathAndQuery::from_static("/ringfeed.v1.RingFeed/Subscribe");
        let mut request = tonic::Request::new(request);
        self.bearer.apply(&mut request);
        let response = grpc
            .server_streaming(request, path, RawResponseCodec)
            .await?;
        // Where the stream starts: the checkpoint until the first response
        // moves it, so a cut before any response resumes exactly too.
        let start = || {
            let start = response.metadata().get_bin(START_CURSOR_METADATA);
            start.and_then(|v| v.to_bytes().ok())
        };
        match self.cluster.as_mut() {
            Some(point) if point.checkpoint.is_none() => {
                point.checkpoint = start().and_then(|b| ClusterCursor::from_bytes(&b).ok());
            }
            Some(_) => {}
            None if self.checkpoint.is_none() => {
                self.checkpoint = start().and_then(|b| Cursor::from_bytes(&b).ok());
            }
            None => {}
        }
        self.stream = Some(response.into_inner());
        self.in_chunks = self.request.chunk_mode;
        Ok(())
    }

    /// Backs off and prepares a reconnect after `status`, or gives up.
    async fn failed(&mut self, status: Status) -> Result<(), FollowError> {
        self.stream = None;
        if !retryable(&status) {
            return Err(FollowError::Refused(status));
        }
        let random = self.random();
        let delay = self.backoff.delay(self.failures, random);
        if self.failures == 0 {
            if let Some(observe) = self.on_connection.as_mut() {
                observe(Connection::Lost {
                    error: &status,
                    retry_in: delay,
                });
            }
        }
        self.failures = self.failures.saturating_add(1);
        self.stats.reconnects += 1;
        self.request.client_epoch += 1;
        tokio::time::sleep(delay).await;
        Ok(())
    }

    /// A xorshift draw in [0, 1) for jitter.
    fn random(&mut self) -> f64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        (self.seed >> 11) as f64 / (1u64 << 53) as f64
    }
}
