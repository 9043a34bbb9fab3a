//! State shared by the appenders and the writer thread: the bounded queue, the progress
//! watermarks that durability waiters watch, and the writer's [`Counters`].

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use tokio::sync::{watch, Notify};

use crate::wal::config::WalOptions;
use crate::wal::counters::Counters;
use crate::wal::error::{DiskError, WalError};
use crate::wal::format::RECORD_HEADER_LEN;
use crate::wal::fsio::DirLock;
use crate::wal::Lsn;

/// How many failed LSN ranges [`Progress`] remembers; a waiter on an older failure gets
/// [`WalError::OutcomeUnknown`].
pub(crate) const FAILURE_HISTORY: usize = 64;

/// One record waiting for the writer.
pub(crate) struct Entry {
    pub lsn: Lsn,
    pub payload: Bytes,
}

impl Entry {
    /// What the entry counts against the queue bound.
    pub fn cost(&self) -> usize {
        cost(self.payload.len())
    }
}

/// Queue cost of a payload of `len` bytes.
pub(crate) fn cost(len: usize) -> usize {
    len + RECORD_HEADER_LEN
}

/// Whether the log accepts appends.
#[derive(Clone, Debug)]
pub(crate) enum State {
    /// Appends are queued.
    Open,
    /// A disk failure happened and no retry has succeeded yet: appends are refused.
    Failed(DiskError),
    /// [`Wal::close`](crate::wal::Wal::close) was called, or the handle dropped.
    Closing,
    /// The writer thread panicked (a bug): appends are refused.
    Crashed(String),
}

/// The queue between appenders and the writer, under one mutex.
pub(crate) struct Queue {
    pub entries: VecDeque<Entry>,
    /// Sum of the entries' costs.
    pub bytes: usize,
    /// The LSN the next append gets.
    pub next_lsn: Lsn,
    pub state: State,
    /// The writer is waiting on the condition variable (appenders wake it only then).
    pub writer_waiting: bool,
    /// An fsync of everything queued so far was requested ([`Wal::sync`](crate::wal::Wal::sync)).
    pub sync_requested: bool,
    /// Appends accepted.
    pub appends: u64,
    /// Payload bytes accepted.
    pub append_bytes: u64,
    /// Appends refused (failed state, closed, too large).
    pub rejected: u64,
    /// `try_append` calls that found the queue full.
    pub queue_full: u64,
    /// Emptied payload buffers the writer is done with, for appenders to reuse (at most
    /// [`SPENT_BUFFERS`]).
    pub spent: Vec<Vec<u8>>,
}

/// Most written payload buffers kept for reuse.
pub(crate) const SPENT_BUFFERS: usize = 2;

/// Largest written payload buffer kept for reuse: the payloads of steady traffic are far
/// smaller, and a burst of large ones (a bulk load, a hand-off) should not leave every log
/// holding megabytes for good.
pub(crate) const SPENT_BUFFER_BYTES: usize = 1 << 20;

/// What the writer has done, published to durability waiters.
#[derive(Clone, Debug, Default)]
pub(crate) struct Progress {
    /// Highest LSN written to the OS.
    pub written: Lsn,
    /// Highest LSN fsynced.
    pub synced: Lsn,
    /// Highest LSN durable under the policy (`synced` for `Always`, else `written`).
    pub durable: Lsn,
    /// Recent LSN ranges whose records failed (inclusive), oldest first.
    pub failures: VecDeque<(Lsn, Lsn, DiskError)>,
    /// End of the newest failed range no longer in `failures` (0: none forgotten).
    pub forgotten_upto: Lsn,
    /// The writer thread has stopped (closed, or crashed with `crash`).
    pub stopped: bool,
    /// Why the writer stopped, if not by a clean close.
    pub crash: Option<String>,
    /// The final fsync at close failed.
    pub close_error: Option<DiskError>,
}

impl Progress {
    /// The outcome of `lsn` against the watermark `mark` (`durable` or `synced`), if known.
    pub fn outcome(&self, lsn: Lsn, mark: Lsn) -> Option<Result<(), WalError>> {
        if let Some((_, _, err)) = self
            .failures
            .iter()
            .rev()
            .find(|(first, last, _)| (*first..=*last).contains(&lsn))
        {
            return Some(Err(WalError::Disk(err.clone())));
        }
        if lsn <= self.forgotten_upto {
            return Some(Err(WalError::OutcomeUnknown(lsn)));
        }
        if lsn <= mark {
            return Some(Ok(()));
        }
        if self.stopped {
            return Some(Err(match &self.crash {
                Some(why) => WalError::Internal(why.clone()),
                None => WalError::Closed,
            }));
        }
        None
    }

    /// Records that the records `first..=last` failed with `err`.
    pub fn record_failure(&mut self, first: Lsn, last: Lsn, err: DiskError) {
        if first > last {
            return;
        }
        if self.failures.len() == FAILURE_HISTORY {
            if let Some((_, old_last, _)) = self.failures.pop_front() {
                self.forgotten_upto = self.forgotten_upto.max(old_last);
            }
        }
        self.failures.push_back((first, last, err));
    }
}

/// Everything shared between the [`Wal`](crate::wal::Wal) handle, the writer thread and
/// snapshot writers.
pub(crate) struct Shared {
    pub dir: PathBuf,
    pub options: WalOptions,
    pub queue: Mutex<Queue>,
    /// Wakes the writer when work arrives (only signalled if it waits).
    pub work: Condvar,
    /// Wakes appenders waiting for queue space or a state change.
    pub space: Notify,
    pub progress: watch::Sender<Progress>,
    pub counters: Counters,
    /// A snapshot writer is open.
    pub snapshot_busy: AtomicBool,
    /// LSN of the newest installed snapshot.
    pub latest_snapshot: AtomicU64,
    /// Faults to inject (tests only).
    #[cfg(test)]
    pub faults: Mutex<crate::wal::tests::Faults>,
    /// The directory lock: held until the writer thread stops (it is released before the
    /// writer reports it has stopped, so a closed log can be reopened at once).
    pub lock: Mutex<Option<DirLock>>,
}

impl Shared {
    /// Locks the queue (a poisoned lock is still used: the queue's invariants hold
    /// between statements that could panic).
    pub fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Releases the directory lock.
    pub fn unlock(&self) {
        self.lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}
