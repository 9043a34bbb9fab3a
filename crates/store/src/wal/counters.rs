//! The writer thread's counters (relaxed atomics) and the buckets of its batch-size
//! histogram: updated by the writer, read into [`WalStats`](crate::wal::WalStats).
//!
//! Uses nothing else of the log, so the shared state (which holds the counters) and `stats`
//! (which reads them) both depend on it, one way.

use std::sync::atomic::AtomicU64;

/// Buckets of the batch-size histogram: bucket `i` counts batches of `2^i ..< 2^(i+1)`
/// records, the last bucket everything larger.
pub const BATCH_BUCKETS: usize = 16;

/// The bucket of a batch of `records` records.
pub(crate) fn batch_bucket(records: u64) -> usize {
    (63 - records.max(1).leading_zeros() as usize).min(BATCH_BUCKETS - 1)
}

/// Counters updated by the writer thread (relaxed atomics; read by
/// [`Wal::stats`](crate::wal::Wal::stats)).
#[derive(Default)]
pub(crate) struct Counters {
    pub batches: AtomicU64,
    pub batch_records: AtomicU64,
    pub max_batch_records: AtomicU64,
    pub batch_histogram: [AtomicU64; BATCH_BUCKETS],
    pub bytes_written: AtomicU64,
    pub fsyncs: AtomicU64,
    pub fsync_micros: AtomicU64,
    pub max_fsync_micros: AtomicU64,
    pub write_errors: AtomicU64,
    pub fsync_errors: AtomicU64,
    pub failed_records: AtomicU64,
    pub failures: AtomicU64,
    pub retries: AtomicU64,
    pub rotations: AtomicU64,
    pub segments_deleted: AtomicU64,
    pub snapshots: AtomicU64,
    pub snapshot_errors: AtomicU64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        assert_eq!(batch_bucket(0), 0);
        assert_eq!(batch_bucket(1), 0);
        assert_eq!(batch_bucket(2), 1);
        assert_eq!(batch_bucket(3), 1);
        assert_eq!(batch_bucket(1024), 10);
        assert_eq!(batch_bucket(u64::MAX), BATCH_BUCKETS - 1);
    }
}
