//! The in-memory engine: key → [`Record`] with approximate byte accounting.

use hashbrown::HashMap;
use lattice::{Lattice, Record, Value};

/// Fixed per-entry cost counted on top of key and value bytes: the hash-table slot, the key
/// allocation header and the record header. An estimate, used for memory budgets.
pub const ENTRY_OVERHEAD: usize = 64;

/// What a merge did to the stored record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergeOutcome {
    /// The stored record changed (the write was not already known).
    pub changed: bool,
    /// The key held a live value (not absent, not a tombstone) before the merge.
    pub was_live: bool,
    /// The key holds a live value after the merge.
    pub is_live: bool,
}

/// One shard's keys in RAM.
#[derive(Default, Debug)]
pub struct MemStore {
    /// The records, tombstones included (until collected).
    map: HashMap<Box<[u8]>, Record>,
    /// Approximate bytes used by keys, records and per-entry overhead.
    bytes: usize,
    /// Number of keys holding a live value.
    live: usize,
}

/// True if `record` holds a value a user can see: not absent, not a tombstone, and not an
/// OR-set whose members were all removed (such a set keeps its causal context so later
/// merges stay correct, but, as in Redis, an empty set does not exist for users).
#[inline]
pub fn is_live(record: &Record) -> bool {
    match &record.value {
        None => false,
        Some(Value::OrSet(set)) => !set.is_empty(),
        Some(_) => true,
    }
}

fn entry_size(key: &[u8], record: &Record) -> usize {
    key.len() + record.approx_size() + ENTRY_OVERHEAD
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The record of `key`, tombstones included.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<&Record> {
        self.map.get(key)
    }

    /// The record of `key` if it is live (see [`is_live`]).
    #[inline]
    pub fn get_live(&self, key: &[u8]) -> Option<&Record> {
        self.map.get(key).filter(|r| is_live(r))
    }

    /// Merges `record` into the record of `key` (inserting it if absent).
    pub fn merge(&mut self, key: &[u8], record: Record) -> MergeOutcome {
        match self.map.get_mut(key) {
            Some(current) => {
                let was_live = is_live(current);
                let before = entry_size(key, current);
                let changed = current.merge(record);
                let now_live = is_live(current);
                if changed {
                    let after = entry_size(key, current);
                    self.bytes = (self.bytes + after).saturating_sub(before);
                    self.adjust_live(was_live, now_live);
                }
                MergeOutcome {
                    changed,
                    was_live,
                    is_live: now_live,
                }
            }
            None => {
                let now_live = is_live(&record);
                self.bytes += entry_size(key, &record);
                self.map.insert(Box::from(key), record);
                self.adjust_live(false, now_live);
                MergeOutcome {
                    changed: true,
                    was_live: false,
                    is_live: now_live,
                }
            }
        }
    }

    fn adjust_live(&mut self, was: bool, is: bool) {
        match (was, is) {
            (false, true) => self.live += 1,
            (true, false) => self.live -= 1,
            _ => {}
        }
    }

    /// Removes `key` entirely (tombstone collection, hand-off of keys this shard no longer
    /// replicates). Returns the record it held.
    pub fn remove(&mut self, key: &[u8]) -> Option<Record> {
        let record = self.map.remove(key)?;
        self.bytes = self.bytes.saturating_sub(entry_size(key, &record));
        self.adjust_live(is_live(&record), false);
        Some(record)
    }

    /// Removes every tombstone whose epoch is older than `before` (physical ms). Returns the
    /// number removed.
    pub fn collect_tombstones(&mut self, before_ms: u64) -> usize {
        let mut freed = 0;
        let mut removed = 0;
        self.map.retain(|key, record| {
            let drop = record.value.is_none() && record.epoch.physical_ms() < before_ms;
            if drop {
                freed += entry_size(key, record);
                removed += 1;
            }
            !drop
        });
        self.bytes = self.bytes.saturating_sub(freed);
        removed
    }

    /// Number of keys with a live value.
    pub fn live_keys(&self) -> usize {
        self.live
    }

    /// Number of entries, tombstones included.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if the store holds no entries at all.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Approximate bytes used.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// All entries, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Record)> {
        self.map.iter().map(|(k, r)| (&**k, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lattice::{Lww, Timestamp, Value};

    fn lww(time: u64, v: &[u8]) -> Record {
        let ts = Timestamp::new(time << 16, 1);
        Record::new(ts, Some(Value::Lww(Lww::new(ts, Box::from(v)))))
    }

    #[test]
    fn merge_tracks_liveness_and_bytes() {
        let mut s = MemStore::new();
        let o = s.merge(b"k", lww(1, b"a"));
        assert!(o.changed && !o.was_live && o.is_live);
        assert_eq!(s.live_keys(), 1);
        let b1 = s.bytes();
        assert!(b1 >= 1 + 1 + ENTRY_OVERHEAD);
        // An older write changes nothing.
        let o = s.merge(b"k", lww(0, b"zzzz"));
        assert!(!o.changed);
        assert_eq!(s.bytes(), b1);
        // A bigger newer value grows the accounting.
        s.merge(b"k", lww(2, &[7u8; 100]));
        assert!(s.bytes() >= b1 + 99);
        // A tombstone kills the key but keeps the entry.
        let o = s.merge(b"k", Record::tombstone(Timestamp::new(3 << 16, 1)));
        assert!(o.changed && o.was_live && !o.is_live);
        assert_eq!(s.live_keys(), 0);
        assert_eq!(s.len(), 1);
        assert!(s.get_live(b"k").is_none());
        assert_eq!(s.collect_tombstones(2), 0);
        assert_eq!(s.collect_tombstones(4), 1);
        assert!(s.is_empty());
        assert_eq!(s.bytes(), 0);
    }

    #[test]
    fn remove_returns_the_record() {
        let mut s = MemStore::new();
        s.merge(b"k", lww(1, b"a"));
        assert!(s.remove(b"k").is_some());
        assert_eq!(s.live_keys(), 0);
        assert_eq!(s.bytes(), 0);
        assert!(s.remove(b"k").is_none());
    }
}
