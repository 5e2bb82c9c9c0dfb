//! Connected subscription streams and client identities.
//!
//! A client that names itself with a non-zero `client_id` has at most one
//! stream per `(client_name, client_id)`: a new stream with a higher
//! `client_epoch` cancels the old one at once (the old stream's task is woken
//! through its [`Notify`] and ends with CANCELLED), and one with an equal or
//! lower epoch is refused. Anonymous clients (`client_id` 0) are never
//! superseded. The registry also holds what `ListSubscribers` shows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use ringfeed_proto::tonic::Status;
use ringfeed_proto::v1::SubscriberInfo;
use tokio::sync::Notify;

/// The subscription streams connected now, by client identity.
#[derive(Default)]
pub struct Registry {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    streams: HashMap<u64, Stream>,
    /// `(client_name, client_id)` → `(epoch, stream id)` of its connected stream.
    clients: HashMap<ClientKey, (u64, u64)>,
}

/// A stream's entry. Its info has a lock of its own, so a stream refreshing
/// its position on every response never contends with other streams.
struct Stream {
    info: Arc<Mutex<SubscriberInfo>>,
    client: ClientKey,
    cancel: Arc<Notify>,
}

pub use ringfeed_proto::wire::SUPERSEDED;

/// A client's identity: whose token it presents (empty on an open server),
/// its name and id. Only the same identity supersedes a stream, so a
/// token cannot end (or learn the epoch of) another token's streams.
type ClientKey = (String, String, u64);

/// What a superseded stream learns: the epoch that replaced it.
pub(crate) struct Superseded(pub u64);

/// A stream's place in the registry; dropping it (however the stream ends)
/// removes the stream and, if it still owns it, its client identity.
pub(crate) struct Registered {
    registry: Arc<Registry>,
    id: u64,
    info: Arc<Mutex<SubscriberInfo>>,
    cancel: Arc<Notify>,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Registers a stream, superseding an older stream of the same client.
    /// Returns the superseded stream's epoch, if any, with the registration.
    /// `owner`: who presents the stream (a token's id; empty on an open
    /// server).
    pub(crate) fn register(
        self: &Arc<Self>,
        info: SubscriberInfo,
        owner: &str,
    ) -> Result<(Registered, Option<u64>), Status> {
        let mut state = self.lock();
        let id = state.next_id;
        let key = (owner.to_owned(), info.client_name.clone(), info.client_id);
        let mut superseded = None;
        if info.client_id != 0 {
            if let Some(&(epoch, old)) = state.clients.get(&key) {
                if info.client_epoch <= epoch {
                    return Err(Status::already_exists(format!(
                        "client {:?} id {} is connected with epoch {epoch}; \
                         reconnect with a higher client_epoch to replace that stream",
                        info.client_name, info.client_id
                    )));
                }
                if let Some(stream) = state.streams.get(&old) {
                    stream.cancel.notify_one();
                    superseded = Some(epoch);
                }
            }
            state.clients.insert(key.clone(), (info.client_epoch, id));
        }
        state.next_id += 1;
        let cancel = Arc::new(Notify::new());
        let info = Arc::new(Mutex::new(info));
        state.streams.insert(
            id,
            Stream {
                info: info.clone(),
                client: key,
                cancel: cancel.clone(),
            },
        );
        Ok((
            Registered {
                registry: self.clone(),
                id,
                info,
                cancel,
            },
            superseded,
        ))
    }

    pub fn len(&self) -> usize {
        self.lock().streams.len()
    }

    /// Every connected stream, oldest first.
    /// The largest lag among connected subscribers as of each one's last
    /// response; 0 with none connected.
    pub fn max_lag_seconds(&self) -> f64 {
        self.list()
            .iter()
            .map(|s| s.lag_seconds)
            .fold(0.0, f64::max)
    }

    pub fn list(&self) -> Vec<SubscriberInfo> {
        let infos: Vec<_> = self
            .lock()
            .streams
            .values()
            .map(|s| s.info.clone())
            .collect();
        let mut all: Vec<SubscriberInfo> = infos.iter().map(|i| lock(i).clone()).collect();
        all.sort_by_key(|s| s.connected_since_ns);
        all
    }
}

impl Registered {
    /// Updates what `ListSubscribers` shows for this stream.
    pub fn update<T>(&self, f: impl FnOnce(&mut SubscriberInfo) -> T) -> T {
        f(&mut lock(&self.info))
    }

    /// Completes when a newer epoch of the same client replaced this stream.
    pub async fn superseded(&self) -> Superseded {
        self.cancel.notified().await;
        let state = self.registry.lock();
        let epoch = state
            .streams
            .get(&self.id)
            .and_then(|s| state.clients.get(&s.client))
            .map_or(0, |&(epoch, _)| epoch);
        Superseded(epoch)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut state = self.registry.lock();
        if let Some(stream) = state.streams.remove(&self.id) {
            let owned = state.clients.get(&stream.client);
            if owned.is_some_and(|&(_, id)| id == self.id) {
                state.clients.remove(&stream.client);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
