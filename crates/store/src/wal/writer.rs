//! The writer thread: takes everything queued, writes it as one batch, fsyncs per policy,
//! publishes progress, and handles disk failures.
//!
//! # Disk failures
//!
//! A failed write or fsync (or segment creation) puts the log in its failed state:
//!
//! 1. After a failed *write*, the writer tries one fsync so that what was written before
//!    the failure becomes durable. After a failed *fsync* it does not retry the fsync: on
//!    Linux a failed fsync may have dropped the dirty pages and a second one can report
//!    success without writing them.
//! 2. Every record above the last fsynced one fails: the rest of the batch, everything
//!    queued, and records written but not fsynced (acknowledged at the written level under
//!    `Periodic`/`Never`: that is those policies' loss window). Their LSNs are abandoned
//!    and never reused; waiters on them get [`WalError::Disk`].
//! 3. The segment is considered poisoned: it is cut back to its last fsynced record (best
//!    effort) and closed, and appends are refused with [`WalError::Unavailable`].
//! 4. The writer immediately, then every `retry_interval_ms`, tries to start a fresh
//!    segment whose base is the last fsynced LSN + 1 (created under a temporary name,
//!    preallocated, fsynced, renamed). When that works, the log accepts appends again.
//!
//! Recovery treats anything in the old segment at or above the new segment's base as
//! abandoned, so the poisoned tail can never hide the records written after it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::wal::config::FsyncPolicy;
use crate::wal::counters::batch_bucket;
use crate::wal::error::DiskError;
use crate::wal::format::{self, SEGMENT_HEADER_LEN};
use crate::wal::fsio::{self, SegmentFile};
use crate::wal::recovery::{self, Scan};
use crate::wal::shared::{Entry, Shared, State, SPENT_BUFFERS, SPENT_BUFFER_BYTES};
use crate::wal::Lsn;

/// Bytes buffered before a `write` call.
const WRITE_CHUNK: usize = 1 << 20;

/// Largest write buffer kept between batches.
const KEEP_BUFFER: usize = 4 << 20;

/// The writer's state; lives on its thread.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    /// The segment being appended to; `None` while failed.
    seg: Option<SegmentFile>,
    /// Encoded records not yet written.
    buf: Vec<u8>,
    /// Records in `buf`, and the LSN of the last one.
    buffered: u64,
    buffered_last: Lsn,
    /// Highest LSN written to the OS.
    written: Lsn,
    /// Highest LSN fsynced.
    synced: Lsn,
    /// Offset of the current segment up to which it is fsynced.
    synced_offset: u64,
    /// The last LSN of the newest failed range (LSNs up to it are never written again).
    burned: Lsn,
    last_sync: Instant,
    /// While failed: the error, and when to retry.
    failed: Option<(DiskError, Instant)>,
    /// Repairs recovery decided on but the disk refused at open; done before any segment
    /// is created.
    repair: Option<Scan>,
    /// Reused queue storage.
    spare: VecDeque<Entry>,
    /// Written payloads' buffers, handed to the queue's `spent` list after each batch.
    spent: Vec<Vec<u8>>,
}

impl Writer {
    /// A writer continuing after `last` (everything up to it is on disk), appending to
    /// `seg`, or failed if the recovery's repair (returned with the error, to be retried)
    /// or the first segment failed.
    pub fn new(
        shared: Arc<Shared>,
        seg: Result<SegmentFile, (DiskError, Option<Scan>)>,
        last: Lsn,
    ) -> Self {
        let now = Instant::now();
        let mut w = Writer {
            shared,
            seg: None,
            buf: Vec::new(),
            buffered: 0,
            buffered_last: 0,
            written: last,
            synced: last,
            synced_offset: SEGMENT_HEADER_LEN as u64,
            burned: last,
            last_sync: now,
            failed: None,
            repair: None,
            spare: VecDeque::new(),
            spent: Vec::new(),
        };
        match seg {
            Ok(seg) => w.seg = Some(seg),
            Err((e, repair)) => {
                tracing::error!(
                    "write-ahead log cannot start a segment, appends are refused until a \
                     retry succeeds: {e}"
                );
                w.repair = repair;
                w.shared
                    .counters
                    .write_errors
                    .fetch_add(1, Ordering::Relaxed);
                w.shared.counters.failures.fetch_add(1, Ordering::Relaxed);
                w.shared.queue().state = State::Failed(e.clone());
                w.failed = Some((e, now + w.shared.options.retry_interval()));
            }
        }
        w
    }

    /// Runs until the log is closed.
    pub fn run(mut self) {
        loop {
            let (mut batch, sync_requested, closing) = self.next_work();
            if !batch.is_empty() {
                self.shared.space.notify_waiters();
            }
            if self.failed.is_some() {
                // Queued before the failure: their LSNs are in the published failed range.
                self.count_failed(batch.len() as u64);
                batch.clear();
                if !closing
                    && self
                        .failed
                        .as_ref()
                        .is_some_and(|(_, at)| Instant::now() >= *at)
                {
                    self.retry();
                }
            } else if !batch.is_empty() {
                self.write_batch(&mut batch);
            }
            self.spare = batch;
            if self.failed.is_none() && self.written > self.synced {
                let due = match self.shared.options.fsync {
                    FsyncPolicy::Always => true,
                    FsyncPolicy::Periodic { interval } => self.last_sync.elapsed() >= interval,
                    FsyncPolicy::Never => false,
                };
                if due || sync_requested || closing {
                    if let Err(e) = self.sync() {
                        self.fail(e, true);
                    }
                }
            }
            self.publish();
            if closing && self.shared.queue().entries.is_empty() {
                self.finish();
                return;
            }
        }
    }

    /// Waits for something to do; returns the queued entries, whether an fsync was
    /// requested, and whether the log is closing.
    fn next_work(&mut self) -> (VecDeque<Entry>, bool, bool) {
        let shared = Arc::clone(&self.shared);
        let mut q = shared.queue();
        loop {
            let closing = matches!(q.state, State::Closing);
            let now = Instant::now();
            let periodic_at = match self.shared.options.fsync {
                FsyncPolicy::Periodic { interval }
                    if self.failed.is_none() && self.written > self.synced =>
                {
                    Some(self.last_sync + interval)
                }
                _ => None,
            };
            let retry_at = self.failed.as_ref().map(|(_, at)| *at);
            let due = |at: Option<Instant>| at.is_some_and(|at| now >= at);
            if !q.entries.is_empty()
                || q.sync_requested
                || closing
                || due(periodic_at)
                || due(retry_at)
            {
                let mut batch = std::mem::take(&mut self.spare);
                std::mem::swap(&mut q.entries, &mut batch);
                q.bytes = 0;
                let sync_requested = std::mem::take(&mut q.sync_requested);
                return (batch, sync_requested, closing);
            }
            let wake_at = [periodic_at, retry_at].into_iter().flatten().min();
            q.writer_waiting = true;
            q = match wake_at {
                Some(at) => {
                    let wait = at.saturating_duration_since(now);
                    shared
                        .work
                        .wait_timeout(q, wait)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0
                }
                None => shared
                    .work
                    .wait(q)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            };
            q.writer_waiting = false;
        }
    }

    /// Writes `batch` (rotating segments as they fill). On a failure, the rest of the batch
    /// is dropped (its records are in the failed range).
    fn write_batch(&mut self, batch: &mut VecDeque<Entry>) {
        let records = batch.len() as u64;
        let c = &self.shared.counters;
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.batch_records.fetch_add(records, Ordering::Relaxed);
        c.max_batch_records.fetch_max(records, Ordering::Relaxed);
        c.batch_histogram[batch_bucket(records)].fetch_add(1, Ordering::Relaxed);
        let limit = self.shared.options.segment_bytes;
        while let Some(entry) = batch.pop_front() {
            let Some(seg) = self.seg.as_ref() else {
                break;
            };
            let size = entry.cost() as u64;
            let filled = seg.offset + self.buf.len() as u64;
            if seg.records + self.buffered > 0 && filled + size > limit {
                if let Err(e) = self.flush().and_then(|()| self.rotate(entry.lsn)) {
                    batch.push_front(entry);
                    self.fail(e, false);
                    break;
                }
            }
            format::encode_record(&mut self.buf, entry.lsn, &entry.payload);
            self.keep_spent(entry.payload);
            self.buffered += 1;
            self.buffered_last = entry.lsn;
            if self.buf.len() >= WRITE_CHUNK {
                if let Err(e) = self.flush() {
                    self.fail(e, false);
                    break;
                }
            }
        }
        if self.failed.is_none() {
            if let Err(e) = self.flush() {
                self.fail(e, false);
            }
        }
        if self.failed.is_some() {
            self.count_failed(batch.len() as u64);
            batch.clear();
        }
        if self.buf.capacity() > KEEP_BUFFER {
            self.buf = Vec::new();
        }
        if !self.spent.is_empty() {
            // Before the batch's progress is published: whoever sees its records written
            // can find their buffers.
            let mut q = self.shared.queue();
            let room = SPENT_BUFFERS.saturating_sub(q.spent.len());
            q.spent.extend(self.spent.drain(..).take(room));
        }
    }

    /// Keeps a written payload's buffer for an appender to reuse, if it owns one (no other
    /// reference to it is left) and fewer than [`SPENT_BUFFERS`] are kept.
    fn keep_spent(&mut self, payload: Bytes) {
        if self.spent.len() >= SPENT_BUFFERS {
            return;
        }
        if let Ok(owned) = payload.try_into_mut() {
            let mut buf = Vec::from(owned);
            if buf.capacity() <= SPENT_BUFFER_BYTES {
                buf.clear();
                self.spent.push(buf);
            }
        }
    }

    /// Writes the buffered records to the segment.
    fn flush(&mut self) -> Result<(), DiskError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let Some(seg) = self.seg.as_mut() else {
            return Ok(());
        };
        #[cfg(test)]
        crate::wal::tests::Faults::check(&self.shared, "write", &seg.path)?;
        use std::os::unix::fs::FileExt;
        seg.file
            .write_all_at(&self.buf, seg.offset)
            .map_err(|e| DiskError::new("write", &seg.path, &e))?;
        seg.offset += self.buf.len() as u64;
        seg.records += self.buffered;
        self.written = self.buffered_last;
        self.shared
            .counters
            .bytes_written
            .fetch_add(self.buf.len() as u64, Ordering::Relaxed);
        self.buf.clear();
        self.buffered = 0;
        Ok(())
    }

    /// Fsyncs the current segment.
    fn sync(&mut self) -> Result<(), DiskError> {
        let Some(seg) = self.seg.as_ref() else {
            return Ok(());
        };
        let started = Instant::now();
        #[cfg(test)]
        let faulty = crate::wal::tests::Faults::check(&self.shared, "fsync", &seg.path);
        #[cfg(not(test))]
        let faulty = Ok(());
        let result = faulty.and_then(|()| {
            seg.file
                .sync_data()
                .map_err(|e| DiskError::new("fsync", &seg.path, &e))
        });
        let micros = started.elapsed().as_micros() as u64;
        let c = &self.shared.counters;
        c.fsyncs.fetch_add(1, Ordering::Relaxed);
        c.fsync_micros.fetch_add(micros, Ordering::Relaxed);
        c.max_fsync_micros.fetch_max(micros, Ordering::Relaxed);
        c.fsync_histogram[crate::wal::counters::fsync_bucket(micros)]
            .fetch_add(1, Ordering::Relaxed);
        result?;
        self.synced = self.written;
        self.synced_offset = seg.offset;
        self.last_sync = Instant::now();
        Ok(())
    }

    /// Closes the full segment (fsynced, preallocated tail cut) and starts one at `base`.
    fn rotate(&mut self, base: Lsn) -> Result<(), DiskError> {
        if let Some(seg) = self.seg.as_ref() {
            if self.shared.options.preallocate {
                seg.file
                    .set_len(seg.offset)
                    .map_err(|e| DiskError::new("truncate", &seg.path, &e))?;
            }
        }
        // The old segment must be complete on disk before a newer one exists: recovery reads
        // a gap before a later segment as loss.
        self.sync()?;
        let prealloc = self
            .shared
            .options
            .preallocate
            .then_some(self.shared.options.segment_bytes);
        let seg = self.create_segment(base, prealloc)?;
        self.seg = Some(seg);
        self.synced_offset = SEGMENT_HEADER_LEN as u64;
        self.shared
            .counters
            .rotations
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Enters the failed state after `err` (see the module docs). `fsync_failed` says the
    /// error came from an fsync, which must not be retried.
    fn fail(&mut self, err: DiskError, fsync_failed: bool) {
        let shared = Arc::clone(&self.shared);
        let c = &shared.counters;
        if fsync_failed || err.op == "fsync" {
            c.fsync_errors.fetch_add(1, Ordering::Relaxed);
        } else {
            c.write_errors.fetch_add(1, Ordering::Relaxed);
            if self.written > self.synced {
                // Make what was written before the failure durable, if the disk still can.
                if let Err(e) = self.sync() {
                    tracing::warn!("fsync after a failed write also failed: {e}");
                    c.fsync_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        c.failures.fetch_add(1, Ordering::Relaxed);
        // Poisoned: cut it back to what is known durable (best effort) and close it.
        if let Some(seg) = self.seg.take() {
            if let Err(e) = seg.file.set_len(self.synced_offset) {
                tracing::debug!(path = %seg.path.display(), "cannot cut a failed segment: {e}");
            }
        }
        self.count_failed(self.buffered);
        self.buf.clear();
        self.buffered = 0;
        let first = self.synced.max(self.burned) + 1;
        let last = {
            let mut q = self.shared.queue();
            if !matches!(q.state, State::Closing) {
                q.state = State::Failed(err.clone());
            }
            q.next_lsn - 1
        };
        let unsynced = self.written.saturating_sub(self.synced.max(self.burned));
        // Records written but not synced count now; those still queued count when drained.
        self.count_failed(unsynced);
        self.burned = last;
        self.written = self.synced;
        self.shared
            .progress
            .send_modify(|p| p.record_failure(first, last, err.clone()));
        self.shared.space.notify_waiters();
        tracing::error!(
            first_failed_lsn = first,
            last_failed_lsn = last,
            "write-ahead log disk failure, appends refused until a retry succeeds: {err}"
        );
        // Retried at once by the run loop (a fresh segment may well work), then every
        // retry interval.
        self.failed = Some((err, Instant::now()));
    }

    /// Tries to start a fresh segment after a failure.
    fn retry(&mut self) {
        self.shared.counters.retries.fetch_add(1, Ordering::Relaxed);
        let base = self.synced + 1;
        let prealloc = self
            .shared
            .options
            .preallocate
            .then_some(self.shared.options.segment_bytes);
        let repaired = match self.repair.as_ref() {
            Some(scan) => recovery::apply(&self.shared.dir, scan),
            None => Ok(()),
        };
        if repaired.is_ok() {
            self.repair = None;
        }
        match repaired.and_then(|()| self.create_segment(base, prealloc)) {
            Ok(seg) => {
                self.seg = Some(seg);
                self.synced_offset = SEGMENT_HEADER_LEN as u64;
                self.failed = None;
                {
                    let mut q = self.shared.queue();
                    if matches!(q.state, State::Failed(_)) {
                        q.state = State::Open;
                    }
                }
                self.shared.space.notify_waiters();
                tracing::info!(base, "write-ahead log recovered from a disk failure");
            }
            Err(e) => {
                self.shared
                    .counters
                    .write_errors
                    .fetch_add(1, Ordering::Relaxed);
                let interval = self.shared.options.retry_interval();
                tracing::warn!(
                    "write-ahead log still failing, next retry in {} ms: {e}",
                    interval.as_millis()
                );
                {
                    let mut q = self.shared.queue();
                    if matches!(q.state, State::Failed(_)) {
                        q.state = State::Failed(e.clone());
                    }
                }
                self.failed = Some((e, Instant::now() + interval));
            }
        }
    }

    fn create_segment(&self, base: Lsn, prealloc: Option<u64>) -> Result<SegmentFile, DiskError> {
        #[cfg(test)]
        crate::wal::tests::Faults::check(&self.shared, "create", &self.shared.dir)?;
        fsio::create_segment(&self.shared.dir, base, prealloc)
    }

    fn count_failed(&self, n: u64) {
        if n > 0 {
            self.shared
                .counters
                .failed_records
                .fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Publishes the watermarks (only if they moved).
    fn publish(&self) {
        let durable = match self.shared.options.fsync {
            FsyncPolicy::Always => self.synced,
            FsyncPolicy::Periodic { .. } | FsyncPolicy::Never => self.written,
        };
        let (written, synced) = (self.written, self.synced);
        self.shared.progress.send_if_modified(|p| {
            let before = (p.written, p.synced, p.durable);
            p.written = p.written.max(written);
            p.synced = p.synced.max(synced);
            p.durable = p.durable.max(durable);
            before != (p.written, p.synced, p.durable)
        });
    }

    /// Clean shutdown: everything written is fsynced and the preallocated tail cut.
    fn finish(&mut self) {
        if self.failed.is_none() {
            if let Some(seg) = self.seg.as_ref() {
                let cut = if self.shared.options.preallocate {
                    seg.file.set_len(seg.offset)
                } else {
                    Ok(())
                };
                let started = Instant::now();
                let result = cut
                    .and_then(|()| seg.file.sync_all())
                    .map_err(|e| DiskError::new("fsync", &seg.path, &e));
                match result {
                    Ok(()) => {
                        self.synced = self.written;
                        let micros = started.elapsed().as_micros() as u64;
                        let c = &self.shared.counters;
                        c.fsyncs.fetch_add(1, Ordering::Relaxed);
                        c.fsync_micros.fetch_add(micros, Ordering::Relaxed);
                        c.fsync_histogram[crate::wal::counters::fsync_bucket(micros)]
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        self.fail(e.clone(), true);
                        self.shared
                            .progress
                            .send_modify(|p| p.close_error = Some(e));
                    }
                }
            }
        }
        self.publish();
        self.seg = None;
        self.shared.unlock();
        self.shared.progress.send_modify(|p| p.stopped = true);
    }
}

/// Starts the writer thread.
pub(crate) fn spawn(writer: Writer) -> std::io::Result<std::thread::JoinHandle<()>> {
    let shared = Arc::clone(&writer.shared);
    std::thread::Builder::new()
        .name("wal-writer".into())
        .spawn(move || {
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer.run()));
            if let Err(panic) = run {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".into());
                tracing::error!("write-ahead log writer panicked: {why}");
                shared.queue().state = State::Crashed(why.clone());
                shared.unlock();
                shared.space.notify_waiters();
                shared.progress.send_modify(|p| {
                    p.stopped = true;
                    p.crash = Some(why);
                });
            }
        })
}
