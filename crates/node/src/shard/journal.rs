//! The shard's side of the write-ahead log: which changes to log, and replaying them.
//!
//! When the journal is enabled (a memory-tier worker with a data directory), every record
//! merged into the store — a client write's delta, an in-place OR-set or counter delta, a
//! record received by gossip, hand-off or repair — is also queued here, and so is every key
//! the worker removes (a hand-off completed, a tombstone reclaimed); the core moves the
//! queue to the log every few milliseconds as one log record. Replaying the log applies the
//! same changes in order: merges are idempotent and commutative, so replaying a record
//! twice, or after a snapshot that already contains it, changes nothing; a removal replayed
//! after a snapshot taken before it removes the key again, so a handed-off key does not
//! come back after a restart.

use bytes::Bytes;
use lattice::Record;

use super::Shard;
use crate::codec::JournalEntry;
use crate::codec_journal::JournalBuf;
use crate::error::NodeError;

/// Most changes waiting for the log before writes are refused. The worker moves them to the
/// log every 2 ms; this many wait only when the log's own queue is full.
pub const MAX_JOURNAL_PENDING: usize = 1 << 18;

impl Shard {
    /// Starts queueing every change to the store for the write-ahead log.
    pub fn enable_journal(&mut self) {
        if self.journal.is_none() {
            self.journal = Some(JournalBuf::new());
        }
    }

    /// True if changes are queued for a write-ahead log.
    pub fn journal_enabled(&self) -> bool {
        self.journal.is_some()
    }

    /// The changes queued since the last call, as log payloads (empty if the journal is
    /// off).
    pub fn take_journal(&mut self) -> Vec<Bytes> {
        match self.journal.as_mut() {
            Some(j) if !j.is_empty() => j.take(),
            _ => Vec::new(),
        }
    }

    /// Keeps `buf`, an emptied buffer of a payload the log has written, for the next
    /// payload (see [`JournalBuf::reuse`]).
    pub fn reuse_journal_buffer(&mut self, buf: Vec<u8>) {
        if let Some(j) = self.journal.as_mut() {
            j.reuse(buf);
        }
    }

    /// True if changes are waiting to be logged.
    pub fn journal_pending(&self) -> bool {
        self.journal.as_ref().is_some_and(|j| !j.is_empty())
    }

    /// Records that the log refuses appends (`Some(why)`) or accepts them again (`None`).
    /// While it refuses, writes fail with a STORAGE error; reads keep working.
    pub fn set_journal_failure(&mut self, why: Option<String>) {
        self.journal_failure = why;
    }

    /// Counts `n` writes whose acknowledgement failed because durable storage did.
    pub fn note_storage_errors(&mut self, n: usize) {
        self.storage_errors += n as u64;
    }

    /// Why the log refuses appends, if it does.
    pub fn journal_failure(&self) -> Option<&str> {
        self.journal_failure.as_deref()
    }

    /// For a write: fails while the log refuses appends, or while more changes wait for it
    /// than [`MAX_JOURNAL_PENDING`] (the disk is far behind: writers are slowed down with an
    /// error rather than the queue growing without bound).
    pub(super) fn check_journal(&self) -> Result<(), NodeError> {
        if let Some(why) = &self.journal_failure {
            return Err(NodeError::Storage(why.clone()));
        }
        match &self.journal {
            Some(j) if j.len() >= MAX_JOURNAL_PENDING => Err(NodeError::Storage(format!(
                "the write-ahead log is behind ({} changes waiting)",
                j.len()
            ))),
            _ => Ok(()),
        }
    }

    /// Queues a change of `key` for the log.
    pub(super) fn log_change(&mut self, key: &[u8], record: &Record) {
        if let Some(j) = self.journal.as_mut() {
            j.push_merge(key, record);
        }
    }

    /// Queues the removal of `key` for the log.
    pub(super) fn log_drop(&mut self, key: &[u8]) {
        if let Some(j) = self.journal.as_mut() {
            j.push_drop(key);
        }
    }

    /// Applies changes replayed from the log (or a snapshot) to the store, in order,
    /// without queueing them for gossip or for the log again.
    pub fn restore(&mut self, entries: Vec<JournalEntry>) {
        for entry in entries {
            match entry {
                JournalEntry::Merge(key, record) => {
                    self.hlc.observe(record.epoch);
                    if let Some(lattice::Value::Lww(l)) = &record.value {
                        self.hlc.observe(l.ts);
                    }
                    self.index_deadline(&key, &record);
                    let outcome = self.store.merge(&key, record);
                    self.track_liveness(&key, outcome);
                    if self.tier.spilled {
                        // The node evicted before this start: what the log holds of a key
                        // may be only part of it (the disk tier has the rest).
                        self.store.set_partial(&key, true);
                    }
                }
                JournalEntry::Drop(key) => {
                    if let Some(record) = self.store.remove(&key) {
                        if store::is_live(&record) {
                            self.track_liveness(
                                &key,
                                store::MergeOutcome {
                                    changed: true,
                                    was_present: true,
                                    was_live: true,
                                    is_live: false,
                                },
                            );
                        }
                    }
                }
            }
        }
    }

    /// The record stored here for `key` (from disk on a disk-tier shard), replica or not.
    pub fn record_of(&mut self, key: &[u8]) -> Result<Option<Record>, NodeError> {
        self.fault_in(key)?;
        Ok(self.store.get(key).map(|r| r.to_record()))
    }

    /// Every key of partition `partition` with its record, as log entries (a snapshot is
    /// written a partition at a time).
    pub fn partition_entries_for_log(&self, partition: usize) -> Vec<JournalEntry> {
        let mut out = Vec::new();
        self.for_each_in_partition(partition, None, |key, record| {
            out.push(JournalEntry::Merge(Bytes::copy_from_slice(key), record));
            true
        });
        out
    }
}
