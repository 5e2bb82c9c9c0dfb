//! Workaround for shard executors that sleep through pending work: a kicker
//! thread interrupts each shard thread's `io_uring_enter` wait with a signal
//! every [`KICK_PERIOD`], so glommio re-reads all its rings.
//!
//! Why: in the test suite and in benchmarks (kernel 6.18, glommio 0.9) a shard
//! executor sometimes went to sleep on its main ring and never woke although
//! work was pending (an I/O completion, a timer, a cross-thread wake-up); see
//! docs/engine.md. glommio treats EINTR from its sleep as a normal wake-up.
//! The signal is SIGURG (ignored by default) with a no-op handler installed
//! without SA_RESTART. A thread is kicked only while it is registered, and it
//! unregisters under the same lock before it exits, so a kicked thread is
//! always alive.
#![allow(unsafe_code)]

use std::sync::{Mutex, Once};
use std::time::Duration;

/// How often every shard thread is interrupted.
pub(crate) const KICK_PERIOD: Duration = Duration::from_millis(50);

extern "C" fn on_kick(_signal: libc::c_int) {}

/// Installs the no-op SIGURG handler once per process.
pub(crate) fn install_handler() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: a zeroed sigaction is a valid value to fill in; the handler
        // does nothing, so it is async-signal-safe; no SA_RESTART, so waits
        // return EINTR.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_kick as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            action.sa_flags = 0;
            libc::sigaction(libc::SIGURG, &action, std::ptr::null_mut());
        }
    });
}

/// The thread to kick, while it is alive.
#[derive(Default)]
pub(crate) struct KickTarget {
    thread: Mutex<Option<libc::pthread_t>>,
}

impl KickTarget {
    /// Registers the calling thread until the returned guard is dropped; call
    /// it on the shard thread and keep the guard for the thread's whole run.
    pub(crate) fn register_current(&self) -> Registration<'_> {
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        *self.lock() = Some(me);
        Registration { target: self }
    }

    pub(crate) fn kick(&self) {
        let guard = self.lock();
        if let Some(thread) = *guard {
            // SAFETY: the thread is registered, and it unregisters under this
            // lock before exiting, so it is alive while we hold the lock.
            unsafe {
                libc::pthread_kill(thread, libc::SIGURG);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<libc::pthread_t>> {
        self.thread.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Keeps a thread registered; unregisters it when dropped (also on unwind),
/// before the thread can exit.
pub(crate) struct Registration<'a> {
    target: &'a KickTarget,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        *self.target.lock() = None;
    }
}
