//! A shard of a disk-tier node: its keys live in the disk engine, with the memory store as
//! a write-through cache in front of it.
//!
//! Every operation first *faults in* the key it touches (loads its record from disk into
//! the cache if it is not there), then runs on the cache exactly as on a memory-tier shard,
//! and every change is written through to disk before the operation returns. So the
//! request path, the lattice code and replication are the same for both tiers, and the
//! disk always holds every key's latest merged record: evicting a key from the cache is
//! free. The cache keeps the most recently used records (approximate LRU, see `tier`). Whole-store passes (view changes, anti-entropy digests) read the disk.
//!
//! A disk error makes the operation fail with [`NodeError::Storage`] (returned, like every
//! other error); the cache entry of a key whose write failed is dropped, so reads show what
//! the disk holds.

use lattice::Record;
use store::{DiskDb, DiskStore, StoreError};

use super::Shard;
use crate::error::NodeError;

/// The disk side of a disk-tier shard.
pub(crate) struct DiskSide {
    /// The node's database (free-space checks, persistence).
    pub(crate) db: DiskDb,
    /// This worker's keys.
    pub(crate) store: DiskStore,
    /// Bytes that must stay free on the file system; writes are refused below it.
    pub(crate) reserve: u64,
    /// Disk errors since start (a metric).
    pub(crate) errors: u64,
    /// Until when (ms) the last free-space check stands: `statvfs` on every write would be
    /// a system call on the request path; the reserve absorbs what is written in between.
    pub(crate) space_ok_until_ms: std::cell::Cell<u64>,
}

/// How long a successful free-space check stands.
const SPACE_CHECK_MS: u64 = 10;

impl Shard {
    /// Makes this a disk-tier shard over `store` (this worker's keyspace of `db`), keeping
    /// `reserve` bytes free on the file system. Counts primary and metadata keys from disk.
    pub fn attach_disk(
        &mut self,
        db: DiskDb,
        store: DiskStore,
        reserve: u64,
    ) -> Result<(), StoreError> {
        let mut primary = 0;
        let mut metadata = 0;
        for item in store.iter() {
            let (key, record) = item?;
            if !store::is_live(&record) {
                continue;
            }
            if placement::replication::is_metadata_key(&key) {
                metadata += 1;
            } else if self.is_primary(&key) {
                primary += 1;
            }
        }
        self.primary_keys = primary;
        self.metadata_keys = metadata;
        self.disk = Some(DiskSide {
            db,
            store,
            reserve,
            errors: 0,
            space_ok_until_ms: std::cell::Cell::new(0),
        });
        Ok(())
    }

    /// True if this shard keeps its keys on disk.
    pub fn is_disk(&self) -> bool {
        self.disk.is_some()
    }

    /// Bytes this worker's keys take on disk (a disk-tier shard; the LSM's tables, from its
    /// current version: no I/O).
    pub fn disk_bytes(&self) -> Option<u64> {
        self.disk.as_ref().map(|d| d.store.disk_bytes())
    }

    /// The node's disk database, for a disk-tier shard.
    pub fn disk_db(&self) -> Option<&DiskDb> {
        self.disk.as_ref().map(|d| &d.db)
    }

    /// Disk errors met since start (0 for a memory-tier shard).
    pub fn disk_errors(&self) -> u64 {
        self.disk.as_ref().map_or(0, |d| d.errors)
    }

    /// Loads `key`'s record from disk into the cache if it is not cached.
    pub(super) fn fault_in(&mut self, key: &[u8]) -> Result<(), NodeError> {
        let Some(disk) = self.disk.as_mut() else {
            return Ok(());
        };
        if self.store.get(key).is_some() {
            return Ok(());
        }
        match disk.store.get_owned(key) {
            Ok(Some(record)) => {
                self.index_deadline(key, &record);
                self.store.merge(key, record);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => Err(Self::failed(disk, e)),
        }
    }

    /// Writes the cached record of `key` through to disk (after a change whose effect on
    /// the cache was `outcome`). The cache holds the disk's record of every key it has (an
    /// operation faults the key in first, and every change is written through), so the
    /// cached record is stored as it is, without reading the disk's back to merge it.
    pub(super) fn write_through(
        &mut self,
        key: &[u8],
        outcome: store::MergeOutcome,
    ) -> Result<(), NodeError> {
        let Some(disk) = self.disk.as_mut() else {
            return Ok(());
        };
        let Some(record) = self.store.get(key).map(|r| r.to_record()) else {
            return Ok(());
        };
        if let Err(e) = disk.store.put_merged(key, &record, outcome) {
            // The cache must not show what the disk does not hold.
            self.store.remove(key);
            return Err(Self::failed(disk, e));
        }
        Ok(())
    }

    /// Removes `key` from disk too (hand-off completed, tombstone reclaimed).
    pub(super) fn remove_from_disk(&mut self, key: &[u8]) -> Result<(), NodeError> {
        match self.disk.as_mut() {
            Some(disk) => disk
                .store
                .remove(key)
                .map(|_| ())
                .map_err(|e| Self::failed(disk, e)),
            None => Ok(()),
        }
    }

    /// Counts a disk error and turns it into the error the operation fails with.
    fn failed(disk: &mut DiskSide, e: StoreError) -> NodeError {
        disk.errors += 1;
        tracing::warn!(error = %e, "disk error");
        NodeError::Storage(e.to_string())
    }

    /// For a write on a disk-tier shard: fails if the file system is below its reserve (or
    /// the engine stopped after a failure).
    pub(super) fn check_disk(&self) -> Result<(), NodeError> {
        let Some(d) = &self.disk else {
            return Ok(());
        };
        let now = self.clock.mono_ms();
        if now < d.space_ok_until_ms.get() {
            return Ok(());
        }
        d.db.check_space(d.reserve)
            .map_err(|e| NodeError::Storage(e.to_string()))?;
        d.space_ok_until_ms.set(now.saturating_add(SPACE_CHECK_MS));
        Ok(())
    }

    /// Every key stored here in partition `partition` (after `after`, on disk), with its
    /// record, until `f` returns false. The partitions of the memory store and of the disk
    /// store are the same: a key's anti-entropy bucket.
    pub(super) fn for_each_in_partition(
        &self,
        partition: usize,
        after: Option<&[u8]>,
        mut f: impl FnMut(&[u8], Record) -> bool,
    ) {
        match &self.disk {
            Some(d) => {
                for (key, record) in d.store.iter_partition(partition, after).flatten() {
                    if !f(&key, record) {
                        return;
                    }
                }
            }
            None => {
                for (key, record) in self.store.iter_partition(partition) {
                    if !f(key, record.to_record()) {
                        return;
                    }
                }
            }
        }
    }

    /// Like [`for_each_in_partition`](Self::for_each_in_partition) from the start of the
    /// partition, lending each record instead of copying those held in RAM.
    pub(super) fn for_each_ref_in_partition(
        &self,
        partition: usize,
        mut f: impl FnMut(&[u8], store::RecordRef<'_>) -> bool,
    ) {
        match &self.disk {
            Some(d) => {
                for (key, record) in d.store.iter_partition(partition, None).flatten() {
                    if !f(&key, store::RecordRef::Full(&record)) {
                        return;
                    }
                }
            }
            None => {
                for (key, record) in self.store.iter_partition(partition) {
                    if !f(key, record) {
                        return;
                    }
                }
            }
        }
    }

    /// Entries in partition `partition` (an estimate on disk: the store's share).
    pub(super) fn partition_entries(&self, partition: usize) -> usize {
        match &self.disk {
            Some(d) => d.store.len() / store::PARTITIONS + 1,
            None => self.store.partition_len(partition),
        }
    }

    /// Keys stored here, tombstones included (on disk for a disk-tier shard).
    pub(super) fn stored_count(&self) -> usize {
        match &self.disk {
            Some(d) => d.store.len(),
            None => self.store.len(),
        }
    }

    /// Live keys stored here.
    pub(super) fn live_key_count(&self) -> usize {
        match &self.disk {
            Some(d) => d.store.live_keys(),
            None => self.store.live_keys(),
        }
    }
}
