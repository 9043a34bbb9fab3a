//! A shard of a disk-tier node: its keys live in the disk engine, with the memory store as
//! a write-through cache in front of it.
//!
//! Every operation first *faults in* the key it touches (loads its record from disk into
//! the cache if it is not there), then runs on the cache exactly as on a memory-tier shard,
//! and every change is written through to disk before the operation returns. So the
//! request path, the lattice code and replication are the same for both tiers, and the
//! disk always holds every key's latest merged record: evicting a key from the cache is
//! free. Whole-store passes (view changes, anti-entropy digests) read the disk.
//!
//! A disk error makes the operation fail with [`NodeError::Storage`]; the cache entry of
//! a key whose write failed is dropped, so reads show what the disk holds.

use lattice::{Blob, Record};
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
    /// The first disk error of the current operation, reported when it returns.
    pub(crate) error: Option<StoreError>,
    /// Physical ms of the last tombstone collection (a full scan on disk: done rarely).
    pub(crate) last_collect_ms: u64,
    /// Disk errors since start (a metric).
    pub(crate) errors: u64,
    /// Until when (ms) the last free-space check stands: `statvfs` on every write would be
    /// a system call on the request path; the reserve absorbs what is written in between.
    pub(crate) space_ok_until_ms: std::cell::Cell<u64>,
}

/// How long a successful free-space check stands.
const SPACE_CHECK_MS: u64 = 10;

/// Least time between two tombstone collections of a disk store.
const COLLECT_EVERY_MS: u64 = 60_000;

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
            error: None,
            last_collect_ms: (self.now_ms)(),
            errors: 0,
            space_ok_until_ms: std::cell::Cell::new(0),
        });
        Ok(())
    }

    /// True if this shard keeps its keys on disk.
    pub fn is_disk(&self) -> bool {
        self.disk.is_some()
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
    pub(super) fn fault_in(&mut self, key: &[u8]) {
        let Some(disk) = self.disk.as_mut() else {
            return;
        };
        if self.store.get(key).is_some() {
            return;
        }
        match disk.store.get_owned(key) {
            Ok(Some(record)) => {
                self.store.merge(key, record);
            }
            Ok(None) => {}
            Err(e) => Self::note_error(disk, e),
        }
    }

    /// Writes the cached record of `key` through to disk (after a change).
    pub(super) fn write_through(&mut self, key: &[u8]) {
        let Some(disk) = self.disk.as_mut() else {
            return;
        };
        let Some(record) = self.store.get(key).map(|r| r.to_record()) else {
            return;
        };
        if let Err(e) = disk.store.merge(key, record) {
            Self::note_error(disk, e);
            // The cache must not show what the disk does not hold.
            self.store.remove(key);
        }
    }

    /// Removes `key` from disk too (hand-off completed).
    pub(super) fn remove_from_disk(&mut self, key: &[u8]) {
        if let Some(disk) = self.disk.as_mut() {
            if let Err(e) = disk.store.remove(key) {
                Self::note_error(disk, e);
            }
        }
    }

    fn note_error(disk: &mut DiskSide, e: StoreError) {
        disk.errors += 1;
        tracing::warn!(error = %e, "disk error");
        if disk.error.is_none() {
            disk.error = Some(e);
        }
    }

    /// The disk error met by the last operation or merge, if any (then cleared).
    pub fn take_disk_error(&mut self) -> Option<NodeError> {
        self.disk
            .as_mut()
            .and_then(|d| d.error.take())
            .map(|e| NodeError::Storage(e.to_string()))
    }

    /// For a write on a disk-tier shard: fails if the file system is below its reserve (or
    /// the engine stopped after a failure).
    pub(super) fn check_disk(&self) -> Result<(), NodeError> {
        let Some(d) = &self.disk else {
            return Ok(());
        };
        let now = (self.now_ms)();
        if now < d.space_ok_until_ms.get() {
            return Ok(());
        }
        d.db.check_space(d.reserve)
            .map_err(|e| NodeError::Storage(e.to_string()))?;
        d.space_ok_until_ms.set(now.saturating_add(SPACE_CHECK_MS));
        Ok(())
    }

    /// Keeps the cache of a disk-tier shard within the worker's memory budget by dropping
    /// entries (they are all on disk).
    pub(super) fn evict_if_needed(&mut self) {
        if self.disk.is_none() || self.store.bytes() <= self.config.memory_budget {
            return;
        }
        let target = self.config.memory_budget / 2;
        let victims: Vec<Blob> = self
            .store
            .iter()
            .map(|(k, _)| Box::from(k))
            .take(self.store.len() / 2 + 1)
            .collect();
        for key in victims {
            if self.store.bytes() <= target {
                break;
            }
            self.store.remove(&key);
        }
    }

    /// Collects old tombstones on disk (at most once a minute: a full scan).
    pub(super) fn collect_disk_tombstones(&mut self, before_ms: u64) {
        let now = (self.now_ms)();
        let Some(disk) = self.disk.as_mut() else {
            return;
        };
        if now.saturating_sub(disk.last_collect_ms) < COLLECT_EVERY_MS {
            return;
        }
        disk.last_collect_ms = now;
        if let Err(e) = disk.store.collect_tombstones(before_ms) {
            Self::note_error(disk, e);
        }
    }

    /// Every key stored here (disk for a disk-tier shard), for whole-store passes.
    pub(super) fn for_each_key(&self, mut f: impl FnMut(&[u8])) {
        match &self.disk {
            Some(d) => {
                for (key, _) in d.store.iter().flatten() {
                    f(&key);
                }
            }
            None => {
                for (key, _) in self.store.iter() {
                    f(key);
                }
            }
        }
    }

    /// Every key stored here that `want`s, with its record (disk for a disk-tier shard).
    pub(super) fn for_each_record(
        &self,
        want: impl Fn(&[u8]) -> bool,
        mut f: impl FnMut(&[u8], Record),
    ) {
        match &self.disk {
            Some(d) => {
                for (key, record) in d.store.iter().flatten() {
                    if want(&key) {
                        f(&key, record);
                    }
                }
            }
            None => {
                for (key, record) in self.store.iter() {
                    if want(key) {
                        f(key, record.to_record());
                    }
                }
            }
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
