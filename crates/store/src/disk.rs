//! The disk engine: key → [`Record`] in an embedded LSM tree (fjall), for disk-tier nodes.
//!
//! # Layout
//! A node opens one [`DiskDb`] in its data directory (one fjall database: one journal, one
//! set of background flush and compaction threads) and every worker opens its own
//! [`DiskStore`] on it — a fjall *keyspace* named `b<worker>`, so workers never share a
//! tree and the shard-per-core design holds on disk too. Values are records encoded as the
//! protobuf `Record` message of the wire protocol (the same bytes gossip carries), so a
//! stored value can be read by any tool that reads the `.proto` file.
//!
//! Keys are stored behind one byte: their partition ([`crate::partition_of`], the top byte
//! of the placement hash, which is also the anti-entropy bucket). A pass over the store
//! walks it a partition at a time and resumes after any key ([`DiskStore::iter_partition`]),
//! and a question about a few buckets reads only those. Stores written by earlier versions
//! (keyspaces `w<worker>`, keys without the byte) are rewritten into this layout when first
//! opened.
//!
//! # Writes and durability
//! A write is a read-modify-write: the key's record is read, merged with the incoming one
//! and written back only if the merge changed it. When a write returns, its record is in
//! fjall's memtable and in the journal, in the OS's buffers: it survives a crash of the
//! process. [`DiskDb::persist`] with `sync = true` (`fdatasync` of the journal) makes
//! everything written so far survive a power loss; the node calls it periodically or
//! before acknowledging, according to its durability settings.
//!
//! # Failures
//! A full disk is refused before it is reached: [`DiskDb::check_space`] fails with
//! [`StoreError::DiskFull`] while the file system has less than the configured reserve
//! free, so writers get a clear error, reads keep working, and writes resume by themselves
//! once space is freed. An error the engine meets anyway (ENOSPC inside the reserve, EIO,
//! a read-only file system) is returned to the writer naming its cause; fjall then refuses
//! further writes in this process ([`StoreError::Poisoned`]: after a failed flush it cannot
//! tell what reached the disk) while reads keep working, until the node is restarted on a
//! healthy disk and the journal is recovered to its last good record. A write that failed
//! was not acknowledged, but like any write whose outcome is unknown it may still become
//! visible (it was merged in memory).
//!
//! # Counts
//! Live and total key counts are kept in memory, computed by one scan when the store is
//! opened and maintained by every write.

use std::io;
use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use lattice::{Lattice, Record};
use prost::Message;
use wire::convert::{record_from_pb, record_to_pb};
use wire::pb;

use crate::memory::{is_live, partition_of, MergeOutcome, RecordRef};

/// The stored form of `key`: its partition byte, then the key.
fn stored_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(partition_of(key) as u8);
    k.extend_from_slice(key);
    k
}

/// Why a disk operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file system is full (ENOSPC or EDQUOT).
    #[error("disk full: {0}")]
    DiskFull(io::Error),
    /// The file system is read-only (EROFS).
    #[error("file system is read-only: {0}")]
    ReadOnly(io::Error),
    /// Any other I/O error (EIO, …).
    #[error("disk I/O error: {0}")]
    Io(io::Error),
    /// An earlier write or sync failed, so the engine refuses writes until the node is
    /// restarted (what reached the disk cannot be known; recovery sorts it out).
    #[error("the disk engine refuses writes after an earlier disk failure; restart the node once the disk is healthy")]
    Poisoned,
    /// Another process holds the data directory.
    #[error("the data directory is in use by another process")]
    Locked,
    /// Stored bytes that do not decode (corruption the LSM's checksums did not catch, or a
    /// record written by a newer version).
    #[error("stored record of key {key:?} does not decode: {reason}")]
    Corrupt {
        /// The key, lossily as text.
        key: String,
        /// What failed.
        reason: String,
    },
    /// Anything else the LSM reported.
    #[error("disk engine error: {0}")]
    Engine(String),
}

impl StoreError {
    /// True for errors caused by the disk or file system (full, read-only, I/O, poisoned):
    /// writes fail, reads may still work.
    pub fn is_disk_failure(&self) -> bool {
        matches!(
            self,
            StoreError::DiskFull(_)
                | StoreError::ReadOnly(_)
                | StoreError::Io(_)
                | StoreError::Poisoned
        )
    }
}

/// Classifies an I/O error by its OS error code.
fn classify_io(e: io::Error) -> StoreError {
    match e.raw_os_error() {
        Some(code) if code == ENOSPC || code == EDQUOT => StoreError::DiskFull(e),
        Some(code) if code == EROFS => StoreError::ReadOnly(e),
        _ if e.kind() == io::ErrorKind::StorageFull => StoreError::DiskFull(e),
        _ if e.kind() == io::ErrorKind::ReadOnlyFilesystem => StoreError::ReadOnly(e),
        _ => StoreError::Io(e),
    }
}

use libc::{EDQUOT, ENOSPC, EROFS};

impl From<fjall::Error> for StoreError {
    fn from(e: fjall::Error) -> Self {
        match e {
            fjall::Error::Io(io) => classify_io(io),
            fjall::Error::Storage(lsm_error) => match find_io(&lsm_error) {
                Some(io) => classify_io(io),
                None => StoreError::Engine(lsm_error.to_string()),
            },
            fjall::Error::Poisoned => StoreError::Poisoned,
            fjall::Error::Locked => StoreError::Locked,
            other => StoreError::Engine(other.to_string()),
        }
    }
}

/// The first I/O error in an error's source chain, rebuilt (io::Error is not Clone).
fn find_io(e: &(dyn std::error::Error + 'static)) -> Option<io::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            return Some(match io.raw_os_error() {
                Some(code) => io::Error::from_raw_os_error(code),
                None => io::Error::new(io.kind(), io.to_string()),
            });
        }
        cur = err.source();
    }
    None
}

/// Settings of a node's disk engine.
#[derive(Clone, Debug)]
pub struct DiskOptions {
    /// Bytes of block cache shared by the node's workers.
    pub cache_bytes: u64,
    /// Background threads for flushes and compactions.
    pub background_threads: usize,
    /// Largest memtable of a worker's keyspace before it is flushed to a table, bytes
    /// (fjall's default, 64 MiB). Fixed when the keyspace is created: a store opened again
    /// keeps the size it was created with.
    pub memtable_bytes: u64,
}

impl Default for DiskOptions {
    fn default() -> Self {
        DiskOptions {
            cache_bytes: 64 << 20,
            background_threads: 2,
            memtable_bytes: 64 << 20,
        }
    }
}

/// A node's LSM database; cheap to clone and shared by the node's workers.
#[derive(Clone)]
pub struct DiskDb {
    db: Database,
    dir: std::path::PathBuf,
    memtable_bytes: u64,
    /// The workers' keyspaces opened so far, by worker (for [`DiskDb::table_counts`]; a
    /// worker's keyspace opened again replaces its entry).
    opened: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<u32, Keyspace>>>,
}

impl DiskDb {
    /// Opens (recovering) or creates the database in `dir`.
    pub fn open(dir: &Path, options: &DiskOptions) -> Result<DiskDb, StoreError> {
        let db = Database::builder(dir)
            .cache_size(options.cache_bytes)
            .worker_threads(options.background_threads.max(1))
            .open()?;
        Ok(DiskDb {
            db,
            dir: dir.to_path_buf(),
            memtable_bytes: options.memtable_bytes,
            opened: Default::default(),
        })
    }

    /// Opens worker `worker`'s store, counting its keys (and first rewriting a store of the
    /// earlier layout into this one).
    pub fn shard(&self, worker: u32) -> Result<DiskStore, StoreError> {
        let name = format!("b{worker}");
        let memtable = self.memtable_bytes;
        let ks = self.db.keyspace(&name, || {
            KeyspaceCreateOptions::default().max_memtable_size(memtable)
        })?;
        let old = format!("w{worker}");
        if self.db.keyspace_exists(&old) {
            let old = self.db.keyspace(&old, KeyspaceCreateOptions::default)?;
            let mut moved = 0u64;
            let mut batch = self.db.batch();
            for guard in old.iter() {
                let (key, value) = guard.into_inner()?;
                batch.insert(&ks, stored_key(&key), value);
                moved += 1;
                if moved.is_multiple_of(10_000) {
                    batch.commit()?;
                    batch = self.db.batch();
                }
            }
            batch.commit()?;
            self.db.persist(PersistMode::SyncAll)?;
            self.db.delete_keyspace(old)?;
            tracing::info!(
                worker,
                keys = moved,
                "disk store rewritten into the partitioned layout"
            );
        }
        self.opened
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(worker, ks.clone());
        let mut store = DiskStore {
            ks,
            live: 0,
            len: 0,
            slot: None,
        };
        let (mut len, mut live) = (0, 0);
        for item in store.iter() {
            let (_, record) = item?;
            len += 1;
            if is_live(&record) {
                live += 1;
            }
        }
        store.len = len;
        store.live = live;
        Ok(store)
    }

    /// Makes every write so far durable: `fdatasync` of the journal (`sync = true`), or a
    /// flush to OS buffers only (`sync = false`, survives a process crash, not a power
    /// loss).
    pub fn persist(&self, sync: bool) -> Result<(), StoreError> {
        let mode = if sync {
            PersistMode::SyncData
        } else {
            PersistMode::Buffer
        };
        self.db.persist(mode)?;
        Ok(())
    }

    /// Workers at or above `workers` that have a keyspace here (the node ran with more
    /// workers before).
    pub fn orphan_shards(&self, workers: u32) -> Vec<u32> {
        let mut out: Vec<u32> = self
            .db
            .list_keyspace_names()
            .iter()
            .filter_map(|name| {
                let name = name.strip_prefix('b').or_else(|| name.strip_prefix('w'))?;
                name.parse::<u32>().ok()
            })
            .filter(|&w| w >= workers)
            .collect();
        out.sort_unstable();
        out
    }

    /// Tables (SST files) of the workers' keyspaces opened so far: (all, in level 0). Flushes
    /// add level-0 tables and only compactions remove them, so a drop of the second shows a
    /// compaction.
    pub fn table_counts(&self) -> (u64, u64) {
        let opened = self
            .opened
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        opened.values().fold((0, 0), |(all, l0), ks| {
            (
                all + ks.table_count() as u64,
                l0 + ks.l0_table_count() as u64,
            )
        })
    }

    /// Bytes the database uses on disk (tables and journal).
    pub fn disk_bytes(&self) -> u64 {
        self.db.disk_space().unwrap_or(0)
    }

    /// Fails with [`StoreError::DiskFull`] if the file system holding the database has less
    /// than `reserve` bytes available to this process (checked with `statvfs`).
    pub fn check_space(&self, reserve: u64) -> Result<(), StoreError> {
        let free = free_bytes(&self.dir).map_err(classify_io)?;
        if free < reserve {
            return Err(StoreError::DiskFull(io::Error::other(format!(
                "{free} bytes free in {}, below the reserve of {reserve}",
                self.dir.display()
            ))));
        }
        Ok(())
    }
}

/// Bytes available to unprivileged users on the file system holding `path`.
pub fn free_bytes(path: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized out-parameter.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// One worker's keys on disk.
pub struct DiskStore {
    /// The worker's keyspace.
    ks: Keyspace,
    /// Keys holding a live value.
    live: usize,
    /// Keys stored, tombstones included.
    len: usize,
    /// The record last read by [`DiskStore::get`], which lends it out.
    slot: Option<Record>,
}

fn encode(record: &Record) -> Vec<u8> {
    record_to_pb(record).encode_to_vec()
}

/// A stored entry as (key, record), without its partition byte.
fn unstored(guard: fjall::Guard) -> Result<(Box<[u8]>, Record), StoreError> {
    let (key, value) = guard.into_inner()?;
    let key = key.get(1..).unwrap_or_default();
    let record = decode(key, &value)?;
    Ok((Box::from(key), record))
}

fn decode(key: &[u8], bytes: &[u8]) -> Result<Record, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        reason,
    };
    let pb = pb::Record::decode(bytes).map_err(|e| corrupt(e.to_string()))?;
    record_from_pb(&pb).map_err(|e| corrupt(e.to_string()))
}

impl DiskStore {
    /// The record of `key`, owned.
    pub fn get_owned(&self, key: &[u8]) -> Result<Option<Record>, StoreError> {
        match self.ks.get(stored_key(key))? {
            Some(bytes) => decode(key, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// The record of `key`, lent from the store (the same shape the memory engine returns,
    /// so the request path encodes replies from either without another copy).
    pub fn get(&mut self, key: &[u8]) -> Result<Option<RecordRef<'_>>, StoreError> {
        self.slot = self.get_owned(key)?;
        Ok(self.slot.as_ref().map(RecordRef::Full))
    }

    /// True if `key` has a record (tombstones included).
    pub fn contains(&self, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.ks.contains_key(stored_key(key))?)
    }

    /// Merges `record` into the record of `key` (inserting it if absent) and writes the
    /// result if it changed.
    pub fn merge(&mut self, key: &[u8], record: Record) -> Result<MergeOutcome, StoreError> {
        let current = self.get_owned(key)?;
        let was_present = current.is_some();
        let was_live = current.as_ref().is_some_and(is_live);
        let (merged, changed) = match current {
            Some(mut cur) => {
                let changed = cur.merge(record);
                (cur, changed)
            }
            None => (record, true),
        };
        let now_live = is_live(&merged);
        if changed {
            self.ks.insert(stored_key(key), encode(&merged))?;
            if !was_present {
                self.len += 1;
            }
            self.adjust_live(was_live, now_live);
        }
        Ok(MergeOutcome {
            changed,
            was_present,
            was_live,
            is_live: now_live,
        })
    }

    /// Stores `record` as the record of `key` without reading the stored one: for a caller
    /// that keeps a copy of the key's record which is at least the stored one (it was read
    /// from this store, or the key had none, and every change since was written through),
    /// so merging into the stored record would give `record` again. `before` says what the
    /// key held before the change (from merging into the caller's copy), for the counts.
    pub fn put_merged(
        &mut self,
        key: &[u8],
        record: &Record,
        before: MergeOutcome,
    ) -> Result<(), StoreError> {
        self.ks.insert(stored_key(key), encode(record))?;
        if !before.was_present {
            self.len += 1;
        }
        self.adjust_live(before.was_live, is_live(record));
        Ok(())
    }

    /// Applies `f` to the record of `key` (which must exist) and writes it back; `f` must
    /// only move the record up its lattice. Returns `None` if the key has no record.
    pub fn update<R>(
        &mut self,
        key: &[u8],
        f: impl FnOnce(&mut Record) -> R,
    ) -> Result<Option<(R, MergeOutcome)>, StoreError> {
        let Some(mut record) = self.get_owned(key)? else {
            return Ok(None);
        };
        let was_live = is_live(&record);
        let result = f(&mut record);
        let now_live = is_live(&record);
        self.ks.insert(stored_key(key), encode(&record))?;
        self.adjust_live(was_live, now_live);
        Ok(Some((
            result,
            MergeOutcome {
                changed: true,
                was_present: true,
                was_live,
                is_live: now_live,
            },
        )))
    }

    fn adjust_live(&mut self, was: bool, is: bool) {
        match (was, is) {
            (false, true) => self.live += 1,
            (true, false) => self.live = self.live.saturating_sub(1),
            _ => {}
        }
    }

    /// Removes `key` entirely (tombstone collection, hand-off). Returns the record it held.
    pub fn remove(&mut self, key: &[u8]) -> Result<Option<Record>, StoreError> {
        let Some(record) = self.get_owned(key)? else {
            return Ok(None);
        };
        self.ks.remove(stored_key(key))?;
        self.len = self.len.saturating_sub(1);
        self.adjust_live(is_live(&record), false);
        Ok(Some(record))
    }

    /// Removes every tombstone whose epoch is older than `before_ms` (physical ms). Returns
    /// the number removed. Scans the whole keyspace: call it rarely.
    pub fn collect_tombstones(&mut self, before_ms: u64) -> Result<usize, StoreError> {
        let mut doomed = Vec::new();
        for item in self.iter() {
            let (key, record) = item?;
            if record.value.is_none() && record.epoch.physical_ms() < before_ms {
                doomed.push(key);
            }
        }
        for key in &doomed {
            self.ks.remove(stored_key(key))?;
        }
        self.len = self.len.saturating_sub(doomed.len());
        Ok(doomed.len())
    }

    /// Number of keys with a live value.
    pub fn live_keys(&self) -> usize {
        self.live
    }

    /// Number of keys, tombstones included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the store holds no keys.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes this worker's tree uses on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.ks.disk_space()
    }

    /// Removes `key` if it holds exactly a tombstone at `epoch` (a reclaimed delete);
    /// returns true if it did.
    pub fn remove_tombstone(
        &mut self,
        key: &[u8],
        epoch: lattice::Timestamp,
    ) -> Result<bool, StoreError> {
        match self.get_owned(key)? {
            Some(r) if r.value.is_none() && r.epoch == epoch => {
                self.remove(key)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The keys and records of partition `partition` after `after` (from its first key if
    /// `None`), in key order: a cursor for passes over the store that proceed a slice at a
    /// time.
    pub fn iter_partition(
        &self,
        partition: usize,
        after: Option<&[u8]>,
    ) -> impl Iterator<Item = Result<(Box<[u8]>, Record), StoreError>> + '_ {
        use std::ops::Bound;
        let p = partition.min(255) as u8;
        let start = match after {
            Some(k) => {
                let mut s = vec![p];
                s.extend_from_slice(k);
                Bound::Excluded(s)
            }
            None => Bound::Included(vec![p]),
        };
        let end = match p.checked_add(1) {
            Some(next) => Bound::Excluded(vec![next]),
            None => Bound::Unbounded,
        };
        self.ks.range::<Vec<u8>, _>((start, end)).map(unstored)
    }

    /// Every key and record, partition by partition and in key order within one, from a
    /// consistent snapshot.
    pub fn iter(&self) -> impl Iterator<Item = Result<(Box<[u8]>, Record), StoreError>> + '_ {
        self.ks.iter().map(unstored)
    }
}

#[cfg(test)]
mod tests;
