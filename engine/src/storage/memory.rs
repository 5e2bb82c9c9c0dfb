//! An in-memory backend that models what survives a crash, and injects faults.
//!
//! Each file keeps two images: what reads see now, and what is durable (as of
//! its last `sync`). The directory keeps its current names and its durable
//! names (as of the last `sync_dir`). [`MemStorage::power_loss`] throws away
//! everything not durable, as a pessimistic disk and file system may;
//! [`MemStorage::power_loss_keeping`] keeps a seeded arbitrary subset of the
//! unsynced blocks, as real disks do.
//! Faults are counted in operations of one kind from the moment they are set:
//! fail the N-th write or sync, tear the N-th write after K bytes (the process
//! "dies" there: every later operation fails until `power_loss`), or halt after
//! N operations of any kind. Every future completes at once, except syncs
//! while [`MemStorage::stall_syncs`] holds them: drive them with [`block_on`]
//! or from any executor.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use super::{Storage, StorageFile};

/// Runs a future that never waits on anything but [`MemStorage`]: it may
/// yield (wake itself and return pending, as a sync does once), never wait.
pub fn block_on<F: Future>(future: F) -> F::Output {
    struct Woken(std::sync::atomic::AtomicBool);
    impl std::task::Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let mut future = pin!(future);
    let woken = Arc::new(Woken(false.into()));
    let waker = Waker::from(woken.clone());
    let mut cx = Context::from_waker(&waker);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(out) => return out,
            Poll::Pending if woken.0.swap(false, std::sync::atomic::Ordering::Relaxed) => {}
            Poll::Pending => {
                panic!("block_on: the future waited on something other than MemStorage")
            }
        }
    }
}

/// Faults to inject, counted from when they were set.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// The N-th write (0-based) fails and changes nothing.
    pub fail_write: Option<u64>,
    /// The N-th sync (0-based) fails and makes nothing durable.
    pub fail_sync: Option<u64>,
    /// The N-th write stores only its first K bytes, fails, and halts the storage.
    pub tear_write: Option<(u64, usize)>,
    /// After N operations of any kind, every operation fails (the process died).
    pub halt_after_ops: Option<u64>,
}

#[derive(Default)]
struct FileImage {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// The storage's `writes_ever` when the sync that made `durable` began.
    durable_as_of: u64,
}

#[derive(Default)]
struct State {
    files: Vec<FileImage>,
    names: BTreeMap<String, usize>,
    durable_names: BTreeMap<String, usize>,
    faults: Faults,
    writes: u64,
    /// Writes ever made (never reset, unlike `writes`): orders syncs.
    writes_ever: u64,
    syncs: u64,
    ops: u64,
    halted: bool,
    syncs_stalled: bool,
    stalled: Vec<Waker>,
    /// While set, growing a file fails with ENOSPC ([`MemStorage::fill_disk`]).
    disk_full: bool,
    /// What [`StorageFile::zero_ahead`] answers (0 unless set).
    zero_ahead: usize,
}

impl State {
    /// Counts an operation and fails it if the storage halted or the halt point is reached.
    fn op(&mut self) -> io::Result<()> {
        if self.faults.halt_after_ops.is_some_and(|n| self.ops >= n) {
            self.halted = true;
        }
        self.ops += 1;
        if self.halted {
            return Err(injected("storage halted"));
        }
        Ok(())
    }

    fn id(&self, name: &str) -> io::Result<usize> {
        self.names
            .get(name)
            .copied()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no file {name}")))
    }
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected fault: {what}"))
}

/// In-memory storage with crash modelling and fault injection. Clones share state.
#[derive(Clone, Default)]
pub struct MemStorage {
    state: Arc<Mutex<State>>,
}

/// A file of a [`MemStorage`].
pub struct MemFile {
    state: Arc<Mutex<State>>,
    id: usize,
}

impl MemStorage {
    pub fn new() -> MemStorage {
        MemStorage::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Replaces the pending faults and restarts their counters.
    pub fn set_faults(&self, faults: Faults) {
        let mut s = self.lock();
        s.faults = faults;
        s.writes = 0;
        s.syncs = 0;
        s.ops = 0;
    }

    /// Makes the log write `bytes` of zeros ahead of its end beside small
    /// rounds, as on a real file system (a multiple of 512; 0: never), so
    /// simulations and tests cover those writes and their faults.
    pub fn set_zero_ahead(&self, bytes: usize) {
        assert_eq!(bytes % MEM_ALIGNMENT, 0, "zero-ahead is whole blocks");
        self.lock().zero_ahead = bytes;
    }

    /// While stalled, every sync waits (the disk hangs); un-stalling releases them.
    pub fn stall_syncs(&self, stalled: bool) {
        let wakers = {
            let mut s = self.lock();
            s.syncs_stalled = stalled;
            std::mem::take(&mut s.stalled)
        };
        for waker in wakers {
            waker.wake();
        }
    }

    /// While full, every [`StorageFile::allocate`] that would grow a file
    /// fails with ENOSPC (`ErrorKind::StorageFull`) and changes nothing, as
    /// `fallocate` does on a full file system; writes into space already
    /// allocated still succeed. Emptying it lets allocations succeed again.
    pub fn fill_disk(&self, full: bool) {
        self.lock().disk_full = full;
    }

    /// Operations performed since the faults were last set.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Simulates power loss and restart: unsynced data and unsynced directory
    /// changes are gone, faults are cleared, and the storage works again.
    /// Handles opened before are stale; reopen files.
    pub fn power_loss(&self) {
        let mut s = self.lock();
        for file in &mut s.files {
            file.data = file.durable.clone();
        }
        s.names = s.durable_names.clone();
        s.faults = Faults::default();
        s.halted = false;
    }

    /// Simulates power loss on a real disk, which persists an arbitrary subset
    /// of the blocks written since their file's last sync, in any order: each
    /// such 512-byte block independently keeps its new contents or its
    /// durable ones (a block past the durable length: new contents or zeros),
    /// and an unsynced extension of a file's length survives or not, by a
    /// generator seeded with `seed` (the same seed, the same outcome).
    /// Unsynced directory changes survive all together or not at all, as a
    /// journaling file system commits them in order. Faults are cleared.
    pub fn power_loss_keeping(&self, seed: u64) {
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut coin = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng & 1 == 1
        };
        let mut s = self.lock();
        for file in &mut s.files {
            let len = if coin() {
                file.data.len()
            } else {
                file.durable.len()
            };
            let mut out = vec![0u8; len];
            for (i, block) in out.chunks_mut(MEM_ALIGNMENT).enumerate() {
                let at = i * MEM_ALIGNMENT;
                let take = |image: &[u8], block: &mut [u8]| {
                    let end = (at + block.len()).min(image.len());
                    if at < end {
                        block[..end - at].copy_from_slice(&image[at..end]);
                    }
                };
                let old = file
                    .durable
                    .get(at..(at + block.len()).min(file.durable.len()));
                let new = file.data.get(at..(at + block.len()).min(file.data.len()));
                if old != new && coin() {
                    take(&file.data, block);
                } else {
                    take(&file.durable, block);
                }
            }
            file.data = out;
            file.durable.clone_from(&file.data);
        }
        if !coin() {
            s.names = s.durable_names.clone();
        }
        s.durable_names = s.names.clone();
        s.faults = Faults::default();
        s.halted = false;
    }

    /// Simulates a process crash (not power loss): everything written stays,
    /// synced or not, the directory as it is; faults are cleared.
    pub fn process_crash(&self) {
        let mut s = self.lock();
        s.faults = Faults::default();
        s.halted = false;
    }

    /// Current contents of a file, or `None` if it does not exist.
    pub fn file_bytes(&self, name: &str) -> Option<Vec<u8>> {
        let s = self.lock();
        s.names.get(name).map(|&id| s.files[id].data.clone())
    }

    /// Replaces a file's contents, as durable (models damage at rest).
    pub fn set_file_bytes(&self, name: &str, bytes: Vec<u8>) {
        let mut s = self.lock();
        let id = match s.names.get(name) {
            Some(&id) => id,
            None => {
                s.files.push(FileImage::default());
                let id = s.files.len() - 1;
                s.names.insert(name.to_string(), id);
                s.durable_names.insert(name.to_string(), id);
                id
            }
        };
        s.files[id].durable = bytes.clone();
        s.files[id].data = bytes;
    }

    /// Flips one bit of a file, durably (bit rot).
    pub fn flip_bit(&self, name: &str, pos: usize, bit: u8) {
        let mut bytes = self.file_bytes(name).expect("flip_bit: no such file");
        bytes[pos] ^= 1 << bit;
        self.set_file_bytes(name, bytes);
    }

    /// File names that exist now, sorted.
    pub fn names(&self) -> Vec<String> {
        self.lock().names.keys().cloned().collect()
    }

    /// Loads every regular file of `dir` as durable files.
    pub fn load_dir(dir: &Path) -> io::Result<MemStorage> {
        let storage = MemStorage::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                let name = entry.file_name().to_string_lossy().into_owned();
                storage.set_file_bytes(&name, std::fs::read(entry.path())?);
            }
        }
        Ok(storage)
    }

    /// Writes the current files into `dir` (which must exist).
    pub fn save_dir(&self, dir: &Path) -> io::Result<()> {
        for name in self.names() {
            std::fs::write(dir.join(&name), self.file_bytes(&name).unwrap_or_default())?;
        }
        Ok(())
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock leaves the images consistent: keep going.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Readers see the current images (what a process would read), not the durable ones.
impl super::ReadFiles for MemStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.names())
    }

    fn map(&self, name: &str) -> io::Result<bytes::Bytes> {
        self.file_bytes(name)
            .map(bytes::Bytes::from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no file {name}")))
    }
}

impl Storage for MemStorage {
    type File = MemFile;

    fn reader(&self) -> Arc<dyn super::ReadFiles> {
        Arc::new(self.clone())
    }

    async fn list(&self) -> io::Result<Vec<String>> {
        let mut s = self.lock();
        s.op()?;
        Ok(s.names.keys().cloned().collect())
    }

    async fn create(&self, name: &str) -> io::Result<MemFile> {
        let mut s = self.lock();
        s.op()?;
        if s.names.contains_key(name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                name.to_string(),
            ));
        }
        s.files.push(FileImage::default());
        let id = s.files.len() - 1;
        s.names.insert(name.to_string(), id);
        Ok(MemFile {
            state: self.state.clone(),
            id,
        })
    }

    async fn open(&self, name: &str) -> io::Result<MemFile> {
        let mut s = self.lock();
        s.op()?;
        let id = s.id(name)?;
        Ok(MemFile {
            state: self.state.clone(),
            id,
        })
    }

    async fn remove(&self, name: &str) -> io::Result<()> {
        let mut s = self.lock();
        s.op()?;
        s.id(name)?;
        s.names.remove(name);
        Ok(())
    }

    async fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut s = self.lock();
        s.op()?;
        let id = s.id(from)?;
        s.names.remove(from);
        s.names.insert(to.to_string(), id);
        Ok(())
    }

    async fn sync_dir(&self) -> io::Result<()> {
        let mut s = self.lock();
        s.op()?;
        s.durable_names = s.names.clone();
        Ok(())
    }
}

/// Pends while syncs are stalled.
struct SyncGate<'a> {
    state: &'a Mutex<State>,
}

impl Future for SyncGate<'_> {
    type Output = ();

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = lock(self.state);
        if s.syncs_stalled {
            s.stalled.push(cx.waker().clone());
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }
}

/// Alignment the in-memory files demand, as a common device would.
const MEM_ALIGNMENT: usize = 512;

impl StorageFile for MemFile {
    type Buf = Vec<u8>;
    type ReadBuf = Vec<u8>;

    fn alignment(&self) -> usize {
        MEM_ALIGNMENT
    }

    fn zero_ahead(&self) -> usize {
        lock(&self.state).zero_ahead
    }

    fn alloc(&self, len: usize) -> Vec<u8> {
        vec![0; len]
    }

    async fn write_at(&self, buf: Vec<u8>, len: usize, pos: u64) -> io::Result<()> {
        let mut s = lock(&self.state);
        s.op()?;
        if !len.is_multiple_of(MEM_ALIGNMENT)
            || !pos.is_multiple_of(MEM_ALIGNMENT as u64)
            || len > buf.len()
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unaligned write: {len} bytes at {pos}"),
            ));
        }
        let index = s.writes;
        s.writes += 1;
        s.writes_ever += 1;
        if s.faults.fail_write == Some(index) {
            return Err(injected("write failed"));
        }
        let keep = match s.faults.tear_write {
            Some((n, keep)) if n == index => {
                s.halted = true;
                keep.min(len)
            }
            _ => len,
        };
        let pos = pos as usize;
        let data = &mut s.files[self.id].data;
        if data.len() < pos + keep {
            data.resize(pos + keep, 0);
        }
        data[pos..pos + keep].copy_from_slice(&buf[..keep]);
        if keep < len {
            return Err(injected("write torn"));
        }
        Ok(())
    }

    async fn read_at(&self, pos: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut s = lock(&self.state);
        s.op()?;
        let data = &s.files[self.id].data;
        let start = (pos as usize).min(data.len());
        let end = (pos as usize).saturating_add(len).min(data.len());
        Ok(data[start..end].to_vec())
    }

    /// Makes durable what was written when it began, not what is written
    /// while it runs (as a disk may): the writes are copied at its first poll,
    /// and it returns at a later one. A sync that began later and returned
    /// first is not undone.
    async fn sync(&self) -> io::Result<()> {
        let (covered, as_of) = {
            let s = lock(&self.state);
            (s.files[self.id].data.clone(), s.writes_ever)
        };
        futures_lite::future::yield_now().await;
        SyncGate { state: &self.state }.await;
        let mut s = lock(&self.state);
        s.op()?;
        let index = s.syncs;
        s.syncs += 1;
        if s.faults.fail_sync == Some(index) {
            return Err(injected("sync failed"));
        }
        let file = &mut s.files[self.id];
        if file.durable_as_of <= as_of {
            file.durable = covered;
            file.durable_as_of = as_of;
        }
        Ok(())
    }

    async fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = lock(&self.state);
        s.op()?;
        s.files[self.id].data.resize(len as usize, 0);
        Ok(())
    }

    async fn allocate(&self, len: u64) -> io::Result<()> {
        let mut s = lock(&self.state);
        s.op()?;
        if s.disk_full && s.files[self.id].data.len() < len as usize {
            return Err(io::Error::from_raw_os_error(28)); // ENOSPC
        }
        let data = &mut s.files[self.id].data;
        if data.len() < len as usize {
            data.resize(len as usize, 0);
        }
        Ok(())
    }

    async fn len(&self) -> io::Result<u64> {
        let mut s = lock(&self.state);
        s.op()?;
        Ok(s.files[self.id].data.len() as u64)
    }
}
