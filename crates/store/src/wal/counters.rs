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

/// Upper bounds (µs) of the fsync-latency histogram's buckets; a last, unbounded bucket
/// counts slower fsyncs.
pub const FSYNC_BUCKETS_US: [u64; 14] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000,
];

/// The bucket of an fsync that took `micros` µs: the first bound at or above it, else the
/// last (unbounded) bucket.
pub fn fsync_bucket(micros: u64) -> usize {
    FSYNC_BUCKETS_US
        .iter()
        .position(|&b| micros <= b)
        .unwrap_or(FSYNC_BUCKETS_US.len())
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
    pub fsync_histogram: [AtomicU64; FSYNC_BUCKETS_US.len() + 1],
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

    #[test]
    fn fsync_buckets() {
        assert_eq!(fsync_bucket(0), 0);
        assert_eq!(fsync_bucket(50), 0);
        assert_eq!(fsync_bucket(51), 1);
        assert_eq!(fsync_bucket(1_000_000), FSYNC_BUCKETS_US.len() - 1);
        assert_eq!(fsync_bucket(1_000_001), FSYNC_BUCKETS_US.len());
    }
}
