//! The write-ahead log of a latticekv worker.
//!
//! Each worker (one thread, one single-threaded tokio runtime, one shard) owns one [`Wal`]
//! in its own directory. The worker merges a write locally, encodes it (the log treats
//! payloads as opaque bytes) and appends it; a dedicated writer thread writes whatever has
//! queued up as one batch and fsyncs it once (group commit), so the event loop never waits
//! on the disk. The worker acknowledges at the level the request asked for: at once (local
//! merge), or after awaiting the record's LSN with [`Wal::wait_durable`] / a [`WalWatch`].
//! Snapshots of the worker's state let old segments be deleted, so recovery time stays
//! bounded.
//!
//! ```no_run
//! # async fn demo() -> Result<(), store::wal::WalError> {
//! use store::wal::{Replayed, Wal, WalOptions};
//!
//! let (log, recovery) = Wal::open("/var/lib/latticekv/wal/worker-0", WalOptions::default(),
//!     |item: Replayed<'_>| -> Result<(), std::convert::Infallible> {
//!         // merge the snapshot record or log record into the shard
//!         Ok(())
//!     })?;
//! let lsn = log.append(bytes::Bytes::from_static(b"encoded write")).await?;
//! log.wait_durable(lsn).await?; // now acknowledge at the durable level
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`wal`](crate::wal::Wal): the handle ([`Wal`]), the progress watch ([`WalWatch`]),
//!   [`inspect`];
//! - `writer`: the writer thread — batching, fsync policy, rotation, disk failures;
//! - `recovery`: reading a log back and repairing its tail ([`Recovery`], [`Replayed`]);
//! - `snapshot`: [`SnapshotWriter`] and reading snapshots back;
//! - `format`: the on-disk format (below); `fsio`: atomic file creation, directory
//!   fsync, preallocation, the directory lock;
//! - `shared`: the state the handle, the writer and snapshot writers share (queue,
//!   progress watermarks); `counters`: the writer's counters and the batch-size buckets;
//! - [`config`]: [`WalOptions`] and [`FsyncPolicy`]; [`error`]: [`WalError`];
//!   [`stats`]: [`WalStats`].
//!
//! Uses nothing else of the store crate; used by `node`.
//!
//! # On-disk format (version 1)
//!
//! A log directory holds segments `wal-<base>.log`, snapshots `snap-<lsn>.snap` (numbers
//! zero-padded to 20 digits, so names sort by LSN), a `LOCK` file, and, after a crash,
//! leftover `*.tmp` files (deleted on open). All integers are little-endian. Checksums are
//! CRC-32C (Castagnoli), masked as in LevelDB: `((crc >> 15) | (crc << 17)) + 0xa282ead8`.
//!
//! Every segment and snapshot starts with a 32-byte header:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic: `LKV-WAL\0` (segment) or `LKV-SNP\0` (snapshot) |
//! | 8 | 4 | format version: 1 |
//! | 12 | 4 | flags: 0 |
//! | 16 | 8 | LSN: the segment's base, or the LSN the snapshot covers |
//! | 24 | 4 | reserved: 0 |
//! | 28 | 4 | masked CRC-32C of bytes 0..28 |
//!
//! Then records, back to back, each a 16-byte header and the payload:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | payload length `n` (at most 2^30) |
//! | 4 | 4 | masked CRC-32C of the length field, the LSN field and the payload |
//! | 8 | 8 | LSN (never 0) |
//! | 16 | `n` | payload |
//!
//! In a segment, LSNs are consecutive; the first is at least the segment's base. A segment
//! may be preallocated: an all-zero record header followed only by zeros is the end of the
//! written data. Every record of a segment has an LSN below the next segment's base.
//!
//! A snapshot's records carry sequence numbers 1, 2, … in the LSN field; the last record
//! is a trailer with LSN field `u64::MAX` and a 16-byte payload: the record count and the
//! total payload bytes. A snapshot without a valid trailer, or with anything after it, is
//! invalid.
//!
//! LSNs are assigned in append order, start at 1 and are never reused; records that failed
//! to reach the disk leave gaps between segments (never inside one).
//!
//! # Recovery
//!
//! [`Wal::open`] loads the newest snapshot that checks out (a damaged one is skipped with a
//! warning; an incomplete one never got its final name), then reads the segments in order,
//! replaying records above the snapshot's LSN, and stops at the first bad record: a short
//! header or payload (torn write), a length beyond the limit, a checksum mismatch, an LSN
//! out of sequence, or data after an all-zero header. The segment is cut there, later
//! segments are deleted, a warning gives the counts, and [`Recovery`] reports them
//! (`corruption`, `bytes_discarded`, `segments_discarded`). Appends continue after the
//! last good record, in a new segment.
//!
//! This is deliberately also what happens when the damage is in a *middle* segment: the
//! records after the damage cannot be ordered against what was lost, so they are cut too
//! (the node's replicas hold them; anti-entropy brings them back). The one exception is a
//! tail abandoned after a disk failure: if the next segment's base is exactly the last good
//! LSN + 1, the writer started it after that failure and the bad tail (or any record at or
//! above that base) is cut without ending the log (`bytes_abandoned`). If the oldest
//! remaining segment starts after what the snapshot covers, records are missing at the
//! start of the log and `open` fails with [`WalError::Corrupt`] rather than silently
//! serving an empty or partial state.
//!
//! Segments wholly covered by the snapshot and segments with no records are deleted.
//! Before the new segment is created, the remaining segments are fsynced: recovered records
//! may have been in the page cache only.
//!
//! # Disk failures
//!
//! A failed write, fsync or segment creation (`ENOSPC`, `EIO`, `EROFS`, …) is never a panic
//! and never a silent loss. Waiters on the records it affects get [`WalError::Disk`];
//! appends get [`WalError::Unavailable`] until the writer's retry (immediately, then every
//! `retry_interval_ms`) starts a fresh segment; [`WalStats`] counts errors and failures.
//! After a failed fsync the segment is treated as poisoned (Linux may have dropped its dirty
//! pages) and abandoned; see the `writer` module for the exact rules. Recovery and
//! [`inspect`] only read, so a full or read-only disk still lets the caller serve what it
//! recovered.
//!
//! # Defaults
//!
//! - **`fsync = "always"`**, with group commit. This is what PostgreSQL, etcd,
//!   FoundationDB and SQLite's `FULL` mode do by default: "durable" then means on disk,
//!   with no window to explain. Its usual cost — every acknowledgement waits for an fsync —
//!   is paid here only by requests that ask for the durable level: local-level writes are
//!   acknowledged at once whatever the policy, and one fsync covers everything queued
//!   meanwhile, so throughput scales with the batch size rather than with fsyncs per
//!   second. Systems that default to `periodic` (Redis `everysec`, Cassandra's 10 s) do so
//!   because every write waits on their log; ours don't. `periodic` (100 ms when no
//!   interval is given, MongoDB's journal interval) and `never` are there for disks where
//!   fsync is slow and a bounded loss on power failure is acceptable.
//! - **64 MiB segments, preallocated** (etcd's segment size): few files, cheap deletion
//!   after a snapshot, and a full disk shows up when a segment is opened.
//! - **64 MiB queue, 32 MiB records**: the queue only fills when the disk cannot keep up;
//!   the record limit is above the node's 16 MiB value limit plus key and encoding.
//! - **1 s retry interval** after a disk failure: quick to recover once space is freed,
//!   slow enough not to flood the logs.

pub mod config;
mod counters;
pub mod error;
mod format;
mod fsio;
mod handle;
mod recovery;
mod shared;
mod snapshot;
pub mod stats;
mod writer;

#[cfg(test)]
mod tests;

/// A log sequence number: records get 1, 2, 3, … in append order; 0 means "none".
pub type Lsn = u64;

pub use config::{FsyncPolicy, WalOptions, DEFAULT_PERIODIC_INTERVAL};
pub use error::{DiskError, DiskErrorKind, WalError};
pub use handle::{inspect, Wal, WalWatch};
pub use recovery::{Corruption, Recovery, Replayed};
pub use snapshot::{SnapshotInfo, SnapshotWriter};
pub use stats::WalStats;

/// The on-disk format's constants, for tools and tests that write or damage log files.
pub mod layout {
    pub use crate::wal::format::{
        segment_name, snapshot_name, FORMAT_VERSION, MAX_RECORD_LEN, RECORD_HEADER_LEN,
        SEGMENT_HEADER_LEN,
    };
}
