//! Per-shard storage engines.
//!
//! A shard is owned by exactly one worker thread, so engines are plain single-threaded data
//! structures: no locks, no atomics. Every write is a lattice merge of a [`Record`] into the
//! key's current record, which makes replaying, re-sending and reordering writes harmless
//! (the property the write-ahead log replay and the disk tier rely on). Keys are split into
//! [`PARTITIONS`] partitions by key hash, so whole-store passes (snapshots, hand-off,
//! anti-entropy) can walk one partition at a time.
//!
//! # Layout
//! - [`memory`]: the in-memory engine: packed LWW registers and full records, with byte
//!   accounting.
//! - [`disk`]: the disk engine of disk-tier nodes: records in an embedded LSM tree (fjall),
//!   one keyspace per worker.
//! - [`wal`]: the per-worker write-ahead log of memory-tier workers: segmented,
//!   checksummed records, group commit on a writer thread, snapshots, recovery.
//!
//! Depends on `lattice` and `wire` (records are stored in their protobuf form); used by
//! `node`.
#![warn(missing_docs)]

pub mod disk;
pub mod memory;
pub mod wal;

pub use disk::{DiskDb, DiskOptions, DiskStore, StoreError};
pub use lattice::Record;
pub use memory::{is_live, partition_of, MemStore, MergeOutcome, RecordRef, Slot, PARTITIONS};
