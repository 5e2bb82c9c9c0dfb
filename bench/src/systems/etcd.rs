//! etcd 3.4, one member on loopback: an event is one Put of a key of its own
//! (`/bench/dNN/fINDEX`, so each Put is one revision), a subscriber is a Watch
//! of the `/bench/` prefix. Talks etcd's gRPC API through a client generated
//! from the few messages it uses (`bench/peers/proto/etcd.proto`).

use std::collections::VecDeque;
use std::ops::Range;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use hdrhistogram::Histogram;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use super::{
    closed_loop, free_ports, stamp, unstamp, wait_ready, Ack, Delivered, Durability, From, Kind,
    Process, ResumePoints, READY_TIMEOUT,
};
use crate::util::now_ns;

mod pb {
    tonic::include_proto!("etcdserverpb");
}

use pb::kv_client::KvClient;
use pb::watch_client::WatchClient;
use pb::watch_request::RequestUnion;

/// The keys of all events, and the end of that range: the prefix with its
/// last byte incremented, as etcd's prefix watches are written.
const PREFIX: &[u8] = b"/bench/";
const PREFIX_END: &[u8] = b"/bench0";

/// Written while waiting for etcd to start: outside `PREFIX`, so no
/// subscriber sees it, though it takes a revision (revision 2 of a fresh
/// member, whose first revision is 1).
const READY_KEY: &[u8] = b"/ready";

/// How long a subscriber waits for etcd to confirm its watch.
const WATCH_TIMEOUT: Duration = Duration::from_secs(30);

fn put(index: u64, payload: usize) -> pb::PutRequest {
    pb::PutRequest {
        key: format!("/bench/d{}/f{index}", index % 64).into_bytes(),
        value: stamp(index, now_ns(), payload),
    }
}

/// The revision etcd gave a Put.
fn revision(response: tonic::Response<pb::PutResponse>) -> Result<u64> {
    let header = response
        .into_inner()
        .header
        .ok_or_else(|| anyhow!("etcd answered a Put without a header"))?;
    u64::try_from(header.revision).context("etcd answered a Put with a negative revision")
}

pub struct Etcd {
    /// Boxed: an `Endpoint` is half a KiB, and `System` holds an `Etcd`.
    endpoint: Box<Endpoint>,
    resume: ResumePoints,
    processes: Vec<Process>,
}

impl Etcd {
    pub async fn start(binary: &Path, dir: &Path) -> Result<Etcd> {
        let ports = free_ports(2)?;
        let client_url = format!("http://127.0.0.1:{}", ports[0]);
        let peer_url = format!("http://127.0.0.1:{}", ports[1]);
        let mut command = Command::new(binary);
        command
            .arg("--name=bench")
            .arg(format!("--data-dir={}", dir.join("etcd").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=bench={peer_url}"))
            .arg("--initial-cluster-state=new");
        let log = dir.join("etcd.log");
        let mut process = Process::spawn("etcd", command, &log)?;
        let endpoint = Endpoint::from_shared(client_url)?.tcp_nodelay(true);
        wait_ready(
            std::slice::from_mut(&mut process),
            &log.display().to_string(),
            READY_TIMEOUT,
            || async {
                let mut kv = KvClient::new(endpoint.connect().await?);
                kv.put(pb::PutRequest {
                    key: READY_KEY.to_vec(),
                    value: Vec::new(),
                })
                .await?;
                Ok(())
            },
        )
        .await?;
        Ok(Etcd {
            endpoint: Box::new(endpoint),
            resume: ResumePoints::default(),
            processes: vec![process],
        })
    }

    async fn connect(&self) -> Result<Channel> {
        self.endpoint
            .connect()
            .await
            .with_context(|| format!("connecting to etcd at {}", self.endpoint.uri()))
    }
}

#[async_trait::async_trait]
impl super::System for Etcd {
    fn kind(&self) -> Kind {
        Kind::Etcd
    }

    fn durability(&self, durable: bool) -> Durability {
        let _ = durable;
        "WAL fsync before the ack"
    }

    fn processes(&self) -> &[Process] {
        &self.processes
    }

    /// etcd has no batched append short of a transaction (which would give
    /// all its Puts one revision), so each producer sends one Put at a time.
    async fn append(
        &self,
        events: Range<u64>,
        payload: usize,
        producers: usize,
        _batch: usize,
        _durable: bool,
    ) -> Result<Histogram<u64>> {
        let first = events.start;
        let (acks, lowest) = closed_loop(
            events,
            producers,
            1, // a Put is one key
            || async { Ok(KvClient::new(self.connect().await?)) },
            move |mut kv, request, sent| async move {
                let response = kv
                    .put(put(request.start, payload))
                    .await
                    .context("etcd Put")?;
                let ack = Ack::since(sent, Some(revision(response)?));
                Ok((kv, vec![ack]))
            },
        )
        .await?;
        if let Some(lowest) = lowest {
            self.resume.record(first, lowest);
        }
        Ok(acks)
    }

    fn appender(&self) -> Arc<dyn super::Appender> {
        Arc::new(Appender {
            // Connects on first use, then shared (HTTP/2 multiplexes the Puts).
            kv: KvClient::new(self.endpoint.connect_lazy()),
        })
    }

    async fn subscribe(&self, from: From) -> Result<Box<dyn super::Subscriber>> {
        let start_revision = match from {
            From::Beginning => 1,
            // 0: from the revision current when the watch is created.
            From::Now => 0,
            From::Resume { index, .. } => i64::try_from(self.resume.get("etcd", index)?)?,
        };
        // The request stream stays open for the subscription's life: the
        // sender lives in the Subscriber.
        let (requests, rx) = mpsc::channel(1);
        requests
            .send(pb::WatchRequest {
                request_union: Some(RequestUnion::CreateRequest(pb::WatchCreateRequest {
                    key: PREFIX.to_vec(),
                    range_end: PREFIX_END.to_vec(),
                    start_revision,
                    progress_notify: false,
                })),
            })
            .await
            .map_err(|_| anyhow!("watch request stream closed"))?;
        let mut client = WatchClient::new(self.connect().await?)
            // A catching-up watcher gets up to 1000 revisions per response.
            .max_decoding_message_size(usize::MAX);
        let responses = client
            .watch(ReceiverStream::new(rx))
            .await
            .context("etcd Watch")?
            .into_inner();
        let mut subscriber = Subscriber {
            _requests: requests,
            responses: Box::new(responses),
            events: VecDeque::new(),
        };
        // Established only once etcd says `created`: a From::Now watch's
        // revision is fixed then.
        let deadline = Instant::now() + WATCH_TIMEOUT;
        loop {
            let response = tokio::time::timeout_at(deadline.into(), subscriber.responses.message())
                .await
                .map_err(|_| anyhow!("etcd did not confirm a watch within {WATCH_TIMEOUT:?}"))?
                .context("etcd Watch")?
                .ok_or_else(|| anyhow!("etcd closed the watch before confirming it"))?;
            let created = response.created;
            subscriber.take(response)?;
            if created {
                return Ok(Box::new(subscriber));
            }
        }
    }
}

/// Appends single events over one shared connection.
#[derive(Clone)]
pub struct Appender {
    kv: KvClient<Channel>,
}

#[async_trait::async_trait]
impl super::Appender for Appender {
    async fn append_one(&self, index: u64, payload: usize) -> Result<()> {
        self.kv
            .clone()
            .put(put(index, payload))
            .await
            .context("etcd Put")?;
        Ok(())
    }
}

pub struct Subscriber {
    _requests: mpsc::Sender<pb::WatchRequest>,
    /// Boxed: a `Streaming` is 400 bytes, and `systems::Subscriber` holds this.
    responses: Box<tonic::Streaming<pb::WatchResponse>>,
    events: VecDeque<pb::Event>,
}

#[async_trait::async_trait]
impl super::Subscriber for Subscriber {
    async fn next(&mut self) -> Result<Option<Delivered>> {
        loop {
            if let Some(event) = self.events.pop_front() {
                let kv = event
                    .kv
                    .ok_or_else(|| anyhow!("etcd sent a watch event without its key-value"))?;
                return unstamp(&kv.value).map(Some).ok_or_else(|| {
                    anyhow!(
                        "an event without the bench's stamp at revision {}",
                        kv.mod_revision
                    )
                });
            }
            match self.responses.message().await.context("etcd Watch")? {
                Some(response) => self.take(response)?,
                None => return Ok(None),
            }
        }
    }

    /// A watch response's events together.
    async fn next_batch(&mut self, out: &mut Vec<Delivered>) -> Result<bool> {
        out.clear();
        while self.events.is_empty() {
            match self.responses.message().await.context("etcd Watch")? {
                Some(response) => self.take(response)?,
                None => return Ok(false),
            }
        }
        for event in self.events.drain(..) {
            let kv = event
                .kv
                .ok_or_else(|| anyhow!("etcd sent a watch event without its key-value"))?;
            out.push(unstamp(&kv.value).ok_or_else(|| {
                anyhow!(
                    "an event without the bench's stamp at revision {}",
                    kv.mod_revision
                )
            })?);
        }
        Ok(true)
    }
}

impl Subscriber {
    /// Queues a response's events; a cancelled watch is an error (etcd
    /// cancels one whose start revision was compacted away).
    fn take(&mut self, response: pb::WatchResponse) -> Result<()> {
        if response.canceled {
            bail!(
                "etcd cancelled the watch: {} (compact revision {})",
                response.cancel_reason,
                response.compact_revision
            );
        }
        self.events.extend(response.events);
        Ok(())
    }
}
