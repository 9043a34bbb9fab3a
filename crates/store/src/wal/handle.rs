//! The log handle a worker owns, and the watch its connection tasks await durability on.

use std::collections::VecDeque;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use bytes::Bytes;
use tokio::sync::{watch, Notify};

use crate::wal::config::WalOptions;
use crate::wal::counters::Counters;
use crate::wal::error::WalError;
use crate::wal::fsio::{self, DirLock};
use crate::wal::recovery::{self, Recovery, Replayed};
use crate::wal::shared::{self, Entry, Progress, Queue, Shared, State};
use crate::wal::snapshot::SnapshotWriter;
use crate::wal::stats::WalStats;
use crate::wal::writer::{self, Writer};
use crate::wal::Lsn;

/// A write-ahead log: one directory of segments and snapshots, one writer thread.
///
/// Appending is cheap and never blocks on the disk: [`try_append`](Self::try_append) and
/// [`append`](Self::append) take a short mutex, assign the record its LSN and queue it; the
/// writer thread writes and fsyncs whole batches. Durability is awaited separately, on the
/// LSN: [`wait_durable`](Self::wait_durable), or a [`WalWatch`] held by each connection
/// task. A worker acknowledging at the local level appends and replies at once; at the
/// durable level it appends, then awaits the LSN before replying.
///
/// The handle is `Send + Sync`; dropping it closes the log in the background (the writer
/// finishes what is queued and fsyncs it, then releases the directory) — await
/// [`close`](Self::close) to know when that is done.
pub struct Wal {
    shared: Arc<Shared>,
    watch: WalWatch,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.shared.dir)
            .field("options", &self.shared.options)
            .finish()
    }
}

/// Why [`Wal::enqueue`] did not queue a record.
enum Refused {
    /// No room; the payload is given back.
    Full(Bytes),
    /// Refused for good.
    Error(WalError),
}

impl Wal {
    /// Opens (creating it if needed) the log in `dir` and recovers it: `replay` gets the
    /// newest valid snapshot's records, then every good log record after it, in order
    /// (see [`Replayed`]). A torn or corrupt tail is cut off (see the crate docs,
    /// "Recovery"); the returned [`Recovery`] says what was found and done. Appends then
    /// continue after the last recovered LSN, in a new segment.
    ///
    /// Blocks on file I/O: call it before the worker's event loop starts, or on a blocking
    /// thread. If `replay` fails, nothing on disk is changed and the error is returned as
    /// [`WalError::Replay`].
    ///
    /// If the disk refuses the repair or the new segment (full, read-only), the log still
    /// opens, in its failed state: everything recovered was replayed, so the caller can
    /// serve reads; appends are refused until a retry (which first completes the repair)
    /// succeeds.
    pub fn open<F, E>(
        dir: impl AsRef<Path>,
        options: WalOptions,
        mut replay: F,
    ) -> Result<(Wal, Recovery), WalError>
    where
        F: FnMut(Replayed<'_>) -> Result<(), E>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        options.validate()?;
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| WalError::io("create directory", &dir, &e))?;
        let lock = DirLock::acquire(&dir)?;
        let mut replay =
            |item: Replayed<'_>| replay(item).map_err(|e| WalError::Replay(Arc::from(e.into())));
        let mut scan = recovery::scan(&dir, &mut replay)?;
        let recovered = std::mem::take(&mut scan.recovery);
        let last = recovered.last_lsn;
        let prealloc = options.preallocate.then_some(options.segment_bytes);
        // A disk that refuses the repair or the new segment (full, read-only) still lets
        // the caller serve what was recovered: the log starts failed, and the writer's
        // retries finish the repair before creating the segment.
        let start = match recovery::apply(&dir, &scan) {
            Ok(()) => fsio::create_segment(&dir, last + 1, prealloc).map_err(|e| (e, None)),
            Err(e) => Err((e, Some(scan))),
        };

        let (progress, rx) = watch::channel(Progress {
            written: last,
            synced: last,
            durable: last,
            ..Progress::default()
        });
        let shared = Arc::new(Shared {
            dir,
            options,
            queue: Mutex::new(Queue {
                entries: VecDeque::new(),
                bytes: 0,
                next_lsn: last + 1,
                state: State::Open,
                writer_waiting: false,
                sync_requested: false,
                appends: 0,
                append_bytes: 0,
                rejected: 0,
                queue_full: 0,
                spent: Vec::new(),
            }),
            work: Condvar::new(),
            space: Notify::new(),
            progress,
            counters: Counters::default(),
            snapshot_busy: AtomicBool::new(false),
            latest_snapshot: AtomicU64::new(recovered.snapshot_lsn.unwrap_or(0)),
            #[cfg(test)]
            faults: Mutex::new(crate::wal::tests::Faults::default()),
            lock: Mutex::new(Some(lock)),
        });
        let writer = Writer::new(Arc::clone(&shared), start, last);
        let thread = writer::spawn(writer)
            .map_err(|e| WalError::Internal(format!("cannot start the writer thread: {e}")))?;
        tracing::info!(
            dir = %shared.dir.display(),
            snapshot_lsn = recovered.snapshot_lsn.unwrap_or(0),
            records_replayed = recovered.records_replayed,
            last_lsn = last,
            millis = recovered.duration.as_millis() as u64,
            "write-ahead log recovered"
        );
        Ok((
            Wal {
                shared,
                watch: WalWatch { rx },
                thread: Some(thread),
            },
            recovered,
        ))
    }

    #[cfg(test)]
    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The directory of the log.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The options the log runs with.
    pub fn options(&self) -> &WalOptions {
        &self.shared.options
    }

    /// Queues `payload` as the next record and returns its LSN, or fails at once:
    /// [`WalError::QueueFull`] if the bounded queue has no room (the writer is behind),
    /// [`WalError::Unavailable`] while the log is failed, [`WalError::RecordTooLarge`],
    /// [`WalError::Closed`]. Never waits for the disk.
    pub fn try_append(&self, payload: Bytes) -> Result<Lsn, WalError> {
        self.try_append_or_keep(payload).map_err(|(e, _)| e)
    }

    /// Like [`try_append`](Self::try_append), but [`WalError::QueueFull`] comes with the
    /// payload given back, so a caller that queues it elsewhere when the log is behind need
    /// not keep a clone (which would keep the writer from handing the buffer back to
    /// [`reuse_buffer`](Self::reuse_buffer)).
    pub fn try_append_or_keep(&self, payload: Bytes) -> Result<Lsn, (WalError, Option<Bytes>)> {
        match self.enqueue(payload) {
            Ok(lsn) => Ok(lsn),
            Err(Refused::Full(back)) => Err((WalError::QueueFull, Some(back))),
            Err(Refused::Error(e)) => Err((e, None)),
        }
    }

    /// An empty buffer that held a payload the writer has written, if one is spare: an
    /// appender that builds its payloads in a `Vec` and hands them over with `Bytes::from`
    /// can build the next one in it, instead of allocating (and faulting in) fresh memory
    /// for every record. The writer keeps at most 2, of at most 1 MiB each.
    pub fn reuse_buffer(&self) -> Option<Vec<u8>> {
        self.shared.queue().spent.pop()
    }

    /// Queues `payload` as the next record and returns its LSN, waiting while the queue is
    /// full (back-pressure; the wait is for the writer to take the queue, not for an
    /// fsync). Fails like [`try_append`](Self::try_append) otherwise.
    pub async fn append(&self, payload: Bytes) -> Result<Lsn, WalError> {
        let mut payload = match self.enqueue(payload) {
            Ok(lsn) => return Ok(lsn),
            Err(Refused::Error(e)) => return Err(e),
            Err(Refused::Full(back)) => back,
        };
        // Slow path: register for the writer's "space freed" signal before trying again,
        // so a signal between the try and the wait is not missed.
        loop {
            let notified = self.shared.space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.enqueue(payload) {
                Ok(lsn) => return Ok(lsn),
                Err(Refused::Error(e)) => return Err(e),
                Err(Refused::Full(back)) => {
                    payload = back;
                    notified.await;
                }
            }
        }
    }

    fn enqueue(&self, payload: Bytes) -> Result<Lsn, Refused> {
        let len = payload.len();
        let max = self.shared.options.max_record_bytes;
        let mut q = self.shared.queue();
        let refused = match &q.state {
            State::Open if len > max => Some(WalError::RecordTooLarge { len, max }),
            State::Open => None,
            State::Failed(e) => Some(WalError::Unavailable(e.clone())),
            State::Closing => Some(WalError::Closed),
            State::Crashed(why) => Some(WalError::Internal(why.clone())),
        };
        if let Some(e) = refused {
            q.rejected += 1;
            return Err(Refused::Error(e));
        }
        let cost = shared::cost(len);
        if q.bytes + cost > self.shared.options.queue_bytes {
            q.queue_full += 1;
            return Err(Refused::Full(payload));
        }
        let lsn = q.next_lsn;
        q.next_lsn += 1;
        q.bytes += cost;
        q.appends += 1;
        q.append_bytes += len as u64;
        q.entries.push_back(Entry { lsn, payload });
        let wake = std::mem::take(&mut q.writer_waiting);
        drop(q);
        if wake {
            self.shared.work.notify_one();
        }
        Ok(lsn)
    }

    /// The LSN of the last record queued (0 if none since the log began).
    pub fn last_lsn(&self) -> Lsn {
        self.shared.queue().next_lsn - 1
    }

    /// The highest durable LSN (see [`FsyncPolicy`](crate::wal::FsyncPolicy) for what durable
    /// means under each policy).
    pub fn durable_lsn(&self) -> Lsn {
        self.watch.durable_lsn()
    }

    /// A watch on the log's progress, for tasks that await durability without the handle.
    pub fn watch(&self) -> WalWatch {
        self.watch.clone()
    }

    /// Waits until the record `lsn` is durable under the policy: `Ok` once it is, the disk
    /// error if its write or fsync failed (it never will be durable), [`WalError::Closed`]
    /// if the log closed first. `lsn` must have been returned by an append.
    pub async fn wait_durable(&self, lsn: Lsn) -> Result<(), WalError> {
        self.watch().wait_durable(lsn).await
    }

    /// Like [`wait_durable`](Self::wait_durable) but waits for an fsync whatever the policy
    /// (under `Never`, only segment rotation, [`sync`](Self::sync) and close fsync).
    pub async fn wait_synced(&self, lsn: Lsn) -> Result<(), WalError> {
        self.watch().wait_synced(lsn).await
    }

    /// Fsyncs everything appended so far, whatever the policy, and returns the last LSN
    /// it covers.
    pub async fn sync(&self) -> Result<Lsn, WalError> {
        let target = {
            let mut q = self.shared.queue();
            q.sync_requested = true;
            let wake = std::mem::take(&mut q.writer_waiting);
            let target = q.next_lsn - 1;
            drop(q);
            if wake {
                self.shared.work.notify_one();
            }
            target
        };
        if target == 0 {
            return Ok(0);
        }
        self.wait_synced(target).await.map(|()| target)
    }

    /// `Ok` while appends are accepted; the reason they are refused otherwise.
    pub fn health(&self) -> Result<(), WalError> {
        match &self.shared.queue().state {
            State::Open => Ok(()),
            State::Failed(e) => Err(WalError::Unavailable(e.clone())),
            State::Closing => Err(WalError::Closed),
            State::Crashed(why) => Err(WalError::Internal(why.clone())),
        }
    }

    /// The log's counters.
    pub fn stats(&self) -> WalStats {
        WalStats::collect(&self.shared)
    }

    /// Starts a snapshot of the caller's state covering every record up to `lsn` (the
    /// caller's state must include their effects). When it is
    /// [finished](SnapshotWriter::finish), older snapshots and the segments it covers are
    /// deleted, bounding the log and so the time recovery takes.
    ///
    /// Fails if `lsn` is beyond the last appended record or below the newest snapshot, or
    /// if another snapshot is being written.
    pub fn begin_snapshot(&self, lsn: Lsn) -> Result<SnapshotWriter, WalError> {
        let last = self.last_lsn();
        if lsn > last {
            return Err(WalError::InvalidArgument(format!(
                "snapshot LSN {lsn} is beyond the last appended record {last}"
            )));
        }
        let newest = self.shared.latest_snapshot.load(Ordering::Acquire);
        if lsn < newest {
            return Err(WalError::InvalidArgument(format!(
                "snapshot LSN {lsn} is below the newest snapshot's {newest}"
            )));
        }
        if self.shared.snapshot_busy.swap(true, Ordering::AcqRel) {
            return Err(WalError::InvalidArgument(
                "another snapshot is being written".into(),
            ));
        }
        // A writer that was never created cannot clear the flag when dropped.
        SnapshotWriter::create(Arc::clone(&self.shared), lsn).inspect_err(|_| {
            self.shared.snapshot_busy.store(false, Ordering::Release);
        })
    }

    /// Closes the log: refuses new appends, lets the writer write and fsync everything
    /// queued, and waits for the writer thread to stop. Returns an error if that final
    /// fsync failed or the writer had crashed (records that failed earlier were reported to
    /// their waiters then).
    pub async fn close(&self) -> Result<(), WalError> {
        self.request_close();
        let mut rx = self.watch.rx.clone();
        let stopped = rx.wait_for(|p| p.stopped).await;
        match stopped {
            Ok(p) => match (&p.crash, &p.close_error) {
                (Some(why), _) => Err(WalError::Internal(why.clone())),
                (None, Some(e)) => Err(WalError::Disk(e.clone())),
                (None, None) => Ok(()),
            },
            Err(_) => Ok(()),
        }
    }

    fn request_close(&self) {
        let mut q = self.shared.queue();
        if !matches!(q.state, State::Crashed(_)) {
            q.state = State::Closing;
        }
        q.writer_waiting = false;
        drop(q);
        self.shared.work.notify_one();
        self.shared.space.notify_waiters();
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.request_close();
        if let Some(thread) = self.thread.take() {
            if thread.is_finished() {
                let _ = thread.join();
            }
        }
    }
}

/// A watch on a log's durability progress: cheap to clone (one per connection task), `Send`,
/// and usable after the [`Wal`] is gone (waits then end with [`WalError::Closed`]).
///
/// One notification per batch wakes the waiting tasks; each checks its own LSN.
#[derive(Clone, Debug)]
pub struct WalWatch {
    rx: watch::Receiver<Progress>,
}

impl WalWatch {
    /// The highest durable LSN under the policy.
    pub fn durable_lsn(&self) -> Lsn {
        self.rx.borrow().durable
    }

    /// The highest fsynced LSN.
    pub fn synced_lsn(&self) -> Lsn {
        self.rx.borrow().synced
    }

    /// The highest LSN written to the OS.
    pub fn written_lsn(&self) -> Lsn {
        self.rx.borrow().written
    }

    /// The outcome of `lsn` at the durable level if already known, without waiting.
    pub fn durable_status(&self, lsn: Lsn) -> Option<Result<(), WalError>> {
        let p = self.rx.borrow();
        p.outcome(lsn, p.durable)
    }

    /// Waits until `lsn` is durable under the policy (see [`Wal::wait_durable`]).
    pub async fn wait_durable(&mut self, lsn: Lsn) -> Result<(), WalError> {
        self.wait(lsn, false).await
    }

    /// Waits until `lsn` is fsynced (see [`Wal::wait_synced`]).
    pub async fn wait_synced(&mut self, lsn: Lsn) -> Result<(), WalError> {
        self.wait(lsn, true).await
    }

    async fn wait(&mut self, lsn: Lsn, synced: bool) -> Result<(), WalError> {
        let mut outcome = None;
        let waited = self
            .rx
            .wait_for(|p| {
                outcome = p.outcome(lsn, if synced { p.synced } else { p.durable });
                outcome.is_some()
            })
            .await;
        match (waited, outcome) {
            (Ok(_), Some(result)) => result,
            _ => Err(WalError::Closed),
        }
    }
}

/// Reads the log in `dir` like [`Wal::open`] does — newest valid snapshot, then the good
/// records after it — without changing anything and without taking the directory's lock
/// (so it can inspect a live log; it then sees a moment of it). For tools, tests and
/// checking what a failed disk still holds.
pub fn inspect<F, E>(dir: impl AsRef<Path>, mut replay: F) -> Result<Recovery, WalError>
where
    F: FnMut(Replayed<'_>) -> Result<(), E>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let dir: PathBuf = dir.as_ref().to_path_buf();
    let mut replay =
        |item: Replayed<'_>| replay(item).map_err(|e| WalError::Replay(Arc::from(e.into())));
    Ok(recovery::scan(&dir, &mut replay)?.recovery)
}
