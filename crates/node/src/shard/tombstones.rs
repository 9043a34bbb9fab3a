//! A shard's side of reclaiming tombstones (the protocol is the core's, `core::reclaim`).
//!
//! A delete leaves a tombstone, so that an older write arriving later (from a replica that
//! was cut off, a requeued batch) cannot bring the key back. It is reclaimed only once
//! every replica holds it: the key's primary finds tombstones older than the grace period
//! ([`Shard::tombstone_candidates`]), asks every other replica whether it holds the key at
//! that epoch or later ([`Shard::check_tombstones`], which also marks an exact match as
//! *retiring*: kept, but no longer offered to anti-entropy, so it cannot travel back to a
//! replica that already dropped it), and once all have, tells them to drop it
//! ([`Shard::reclaim_tombstones`]). A removal is journaled like any change.
//!
//! A replica then remembers the delete for `tombstone_memory_ms` more, by key hash (a few
//! bytes, not the key): a write to the key meanwhile starts its new incarnation at the
//! tombstone's epoch — the epoch replicas that have not dropped it yet give it too, so
//! writes racing with the reclamation merge instead of one losing to the other — and a
//! record older than the delete arriving meanwhile (a hand-off that took long) is refused
//! as the tombstone would have refused it.

use bytes::Bytes;
use lattice::Timestamp;
use store::RecordRef;

use super::Shard;

/// How long a tombstone stays retiring without the second phase arriving (the primary
/// crashed in between): then it is an ordinary tombstone again.
pub const RETIRING_MS: u64 = 60_000;

impl Shard {
    /// Appends to `out` the tombstones of partition `partition` older than `grace_ms` whose
    /// primary replica is this worker, at most `max` in all.
    pub fn tombstone_candidates(
        &self,
        partition: usize,
        grace_ms: u64,
        max: usize,
        out: &mut Vec<(Bytes, Timestamp)>,
    ) {
        let before = self.clock.wall_ms().saturating_sub(grace_ms);
        self.for_each_in_partition(partition, None, |key, record| {
            if out.len() >= max {
                return false;
            }
            if record.value.is_none() && record.epoch.physical_ms() < before && self.is_primary(key)
            {
                out.push((Bytes::copy_from_slice(key), record.epoch));
            }
            true
        });
    }

    /// The first phase, answered for another worker: for each (key, epoch), whether this
    /// worker holds the key at that epoch or a later one. A key holding exactly that
    /// tombstone becomes retiring.
    pub fn check_tombstones(&mut self, entries: &[(Bytes, Timestamp)]) -> Vec<bool> {
        let until = self.clock.mono_ms().saturating_add(RETIRING_MS);
        entries
            .iter()
            .map(|(key, epoch)| {
                let Ok(Some(record)) = self.record_of(key) else {
                    // Reclaimed already (a repeated first phase): covered.
                    return self.remembered(key).is_some_and(|t| t >= *epoch);
                };
                if record.value.is_none() && record.epoch == *epoch {
                    self.retiring.insert(Box::from(&key[..]), (*epoch, until));
                }
                record.epoch >= *epoch
            })
            .collect()
    }

    /// The second phase: removes each key holding exactly the given tombstone (a later
    /// write since is kept). Returns how many were removed.
    pub fn reclaim_tombstones(&mut self, entries: &[(Bytes, Timestamp)]) -> u64 {
        let mut removed = 0;
        for (key, epoch) in entries {
            self.retiring.remove(&key[..]);
            let exact = match self.store.get(key) {
                Some(RecordRef::Full(r)) => r.value.is_none() && r.epoch == *epoch,
                Some(RecordRef::Lww { .. }) => false,
                None => {
                    self.disk.is_some()
                        && self.fault_in(key).is_ok()
                        && self.is_tombstone_at(key, *epoch)
                }
            };
            if !exact {
                continue;
            }
            if self.remove_from_disk(key).is_err() {
                continue;
            }
            self.store.remove(key);
            self.log_drop(key);
            self.handoff.remove(&key[..]);
            let until = self
                .clock
                .mono_ms()
                .saturating_add(self.config.tombstone_memory_ms);
            self.reclaimed
                .insert(placement::key_hash(key), (*epoch, until));
            if let Some(log) = self.audit.as_mut() {
                log.push(super::Audit::Reclaimed {
                    key: key.clone(),
                    epoch: *epoch,
                });
            }
            removed += 1;
        }
        removed
    }

    /// Ends the retiring of tombstones a round could not reclaim (a replica did not have
    /// them yet): anti-entropy offers them again.
    pub fn release_tombstones(&mut self, entries: &[(Bytes, Timestamp)]) {
        for (key, epoch) in entries {
            if self.retiring.get(&key[..]).is_some_and(|(e, _)| e == epoch) {
                self.retiring.remove(&key[..]);
            }
        }
    }

    fn is_tombstone_at(&self, key: &[u8], epoch: Timestamp) -> bool {
        matches!(self.store.get(key), Some(RecordRef::Full(r)) if r.value.is_none() && r.epoch == epoch)
    }

    /// True if `key` holds a tombstone being reclaimed (kept out of anti-entropy).
    pub(crate) fn is_retiring(&self, key: &[u8]) -> bool {
        if self.retiring.is_empty() {
            return false;
        }
        let now = self.clock.mono_ms();
        self.retiring
            .get(key)
            .is_some_and(|(_, until)| now < *until)
    }

    /// The epoch of a delete of `key` reclaimed recently, if it is still remembered.
    pub(super) fn remembered(&self, key: &[u8]) -> Option<lattice::Timestamp> {
        if self.reclaimed.is_empty() {
            return None;
        }
        let now = self.clock.mono_ms();
        self.reclaimed
            .get(&placement::key_hash(key))
            .filter(|(_, until)| now < *until)
            .map(|(epoch, _)| *epoch)
    }

    /// True if this worker stores at least one tombstone (entries stored outnumber live
    /// ones): a sweep for tombstones to reclaim can find something.
    pub(crate) fn holds_tombstones(&self) -> bool {
        self.stored_count() > self.live_key_count()
    }

    /// Forgets retiring marks and reclaimed deletes whose time is up.
    pub fn expire_retiring(&mut self) {
        let now = self.clock.mono_ms();
        if !self.retiring.is_empty() {
            self.retiring.retain(|_, (_, until)| now < *until);
        }
        if !self.reclaimed.is_empty() {
            self.reclaimed.retain(|_, (_, until)| now < *until);
        }
    }
}
