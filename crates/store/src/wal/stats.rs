//! Counters of a log, for metrics and status pages.

use std::sync::atomic::Ordering;

use serde::Serialize;

pub use crate::wal::counters::{fsync_bucket, BATCH_BUCKETS, FSYNC_BUCKETS_US};
use crate::wal::shared::{Shared, State};
use crate::wal::Lsn;

/// A snapshot of a log's counters. Counters are totals since the log was opened; gauges
/// (queue, LSNs, `failed`) are current values.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WalStats {
    /// Appends accepted.
    pub appends: u64,
    /// Payload bytes accepted.
    pub append_bytes: u64,
    /// Appends refused: failed state, closed, or too large.
    pub rejected_appends: u64,
    /// `try_append` calls that found the queue full (back-pressure events).
    pub queue_full: u64,
    /// Records waiting for the writer (gauge).
    pub queued_records: u64,
    /// Bytes waiting for the writer (gauge).
    pub queued_bytes: u64,
    /// Batches written (each fsynced once under `Always`).
    pub batches: u64,
    /// Records written in those batches.
    pub batch_records: u64,
    /// The largest batch, in records.
    pub max_batch_records: u64,
    /// Batch sizes: see [`BATCH_BUCKETS`].
    pub batch_histogram: [u64; BATCH_BUCKETS],
    /// Bytes written to segments (records with their headers).
    pub bytes_written: u64,
    /// Fsyncs of segments.
    pub fsyncs: u64,
    /// Total time in segment fsyncs, µs.
    pub fsync_micros: u64,
    /// The slowest fsync, µs.
    pub max_fsync_micros: u64,
    /// Fsyncs by duration: bucket `i` counts those of at most [`FSYNC_BUCKETS_US`]`[i]` µs
    /// (and more than the bound before); the last bucket the slower ones. Not cumulative.
    pub fsync_histogram: [u64; FSYNC_BUCKETS_US.len() + 1],
    /// Failed writes (including segment creation).
    pub write_errors: u64,
    /// Failed fsyncs.
    pub fsync_errors: u64,
    /// Records that were accepted but failed to be written or synced.
    pub failed_records: u64,
    /// Times the log entered its failed state.
    pub failures: u64,
    /// Retries of a failed log (successful or not).
    pub retries: u64,
    /// Segments started because the previous one was full.
    pub rotations: u64,
    /// Segments deleted because a snapshot covered them.
    pub segments_deleted: u64,
    /// Snapshots installed.
    pub snapshots: u64,
    /// Snapshots that failed to be written.
    pub snapshot_errors: u64,
    /// The last LSN handed out (gauge).
    pub last_lsn: Lsn,
    /// Highest LSN written to the OS (gauge).
    pub written_lsn: Lsn,
    /// Highest LSN fsynced (gauge).
    pub synced_lsn: Lsn,
    /// Highest LSN durable under the policy (gauge).
    pub durable_lsn: Lsn,
    /// True while appends are refused after a disk failure (gauge).
    pub failed: bool,
}

impl WalStats {
    pub(crate) fn collect(shared: &Shared) -> Self {
        let mut s = {
            let q = shared.queue();
            WalStats {
                appends: q.appends,
                append_bytes: q.append_bytes,
                rejected_appends: q.rejected,
                queue_full: q.queue_full,
                queued_records: q.entries.len() as u64,
                queued_bytes: q.bytes as u64,
                last_lsn: q.next_lsn - 1,
                failed: matches!(q.state, State::Failed(_)),
                ..WalStats::default()
            }
        };
        {
            let p = shared.progress.borrow();
            s.written_lsn = p.written;
            s.synced_lsn = p.synced;
            s.durable_lsn = p.durable;
        }
        let c = &shared.counters;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        s.batches = get(&c.batches);
        s.batch_records = get(&c.batch_records);
        s.max_batch_records = get(&c.max_batch_records);
        for (out, a) in s.batch_histogram.iter_mut().zip(&c.batch_histogram) {
            *out = get(a);
        }
        s.bytes_written = get(&c.bytes_written);
        s.fsyncs = get(&c.fsyncs);
        s.fsync_micros = get(&c.fsync_micros);
        s.max_fsync_micros = get(&c.max_fsync_micros);
        for (out, a) in s.fsync_histogram.iter_mut().zip(&c.fsync_histogram) {
            *out = get(a);
        }
        s.write_errors = get(&c.write_errors);
        s.fsync_errors = get(&c.fsync_errors);
        s.failed_records = get(&c.failed_records);
        s.failures = get(&c.failures);
        s.retries = get(&c.retries);
        s.rotations = get(&c.rotations);
        s.segments_deleted = get(&c.segments_deleted);
        s.snapshots = get(&c.snapshots);
        s.snapshot_errors = get(&c.snapshot_errors);
        s
    }
}
