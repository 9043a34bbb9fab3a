//! The in-memory engine: key → [`Record`] with approximate byte accounting.
//!
//! Sizes are estimates, kept per entry so a write never walks a whole collection: a merge or
//! in-place update adds the size of what it brought in (an upper bound of the growth), and
//! the exact size is recomputed only when the estimate has doubled since the last exact
//! count — amortised O(size of the write). Registers (LWW, max, priority, …) are always
//! counted exactly, which is O(1) for them.

use hashbrown::HashMap;
use lattice::{Lattice, Record, Value};

/// Fixed per-entry cost counted on top of key and value bytes: the hash-table slot, the key
/// allocation header and the record header. An estimate, used for memory budgets.
pub const ENTRY_OVERHEAD: usize = 64;

/// Below this size an entry is always recounted exactly (cheap for small collections).
const EXACT_BELOW: usize = 4096;

/// What a write did to the stored record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergeOutcome {
    /// The stored record changed (the write was not already known).
    pub changed: bool,
    /// The key held a live value (see [`is_live`]) before the write.
    pub was_live: bool,
    /// The key holds a live value after the write.
    pub is_live: bool,
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

/// True if the record's size is O(1) to compute.
fn cheap_to_size(record: &Record) -> bool {
    matches!(
        record.value,
        None | Some(
            Value::Lww(_) | Value::Max(_) | Value::Min(_) | Value::Bool(_) | Value::Priority(_)
        )
    )
}

/// A stored record and its size estimate.
#[derive(Debug)]
struct Entry {
    record: Record,
    /// Estimated bytes of key + record + overhead (an upper bound between recounts).
    size: usize,
    /// The exact size at the last recount.
    counted: usize,
}

impl Entry {
    fn new(key: &[u8], record: Record) -> Entry {
        let size = exact_size(key, &record);
        Entry {
            record,
            size,
            counted: size,
        }
    }

    /// Updates the estimate after the record grew by at most `grown` bytes; recounts when
    /// the estimate is no longer trustworthy. Returns the new estimate.
    fn resize(&mut self, key: &[u8], grown: usize) -> usize {
        let estimate = self.size + grown;
        self.size =
            if cheap_to_size(&self.record) || estimate < EXACT_BELOW || estimate > 2 * self.counted
            {
                let exact = exact_size(key, &self.record);
                self.counted = exact;
                exact
            } else {
                estimate
            };
        self.size
    }
}

fn exact_size(key: &[u8], record: &Record) -> usize {
    key.len() + record.approx_size() + ENTRY_OVERHEAD
}

/// One shard's keys in RAM.
#[derive(Default, Debug)]
pub struct MemStore {
    /// The records, tombstones included (until collected).
    map: HashMap<Box<[u8]>, Entry>,
    /// Sum of the entries' size estimates.
    bytes: usize,
    /// Number of keys holding a live value.
    live: usize,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The record of `key`, tombstones included.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<&Record> {
        self.map.get(key).map(|e| &e.record)
    }

    /// The record of `key` if it is live (see [`is_live`]).
    #[inline]
    pub fn get_live(&self, key: &[u8]) -> Option<&Record> {
        self.get(key).filter(|r| is_live(r))
    }

    /// Estimated bytes used by `key` (0 if absent).
    pub fn size_of(&self, key: &[u8]) -> usize {
        self.map.get(key).map_or(0, |e| e.size)
    }

    /// Merges `record` into the record of `key` (inserting it if absent).
    pub fn merge(&mut self, key: &[u8], record: Record) -> MergeOutcome {
        match self.map.get_mut(key) {
            Some(entry) => {
                let was_live = is_live(&entry.record);
                let grown = if cheap_to_size(&record) {
                    0
                } else {
                    record.approx_size()
                };
                let changed = entry.record.merge(record);
                let now_live = is_live(&entry.record);
                if changed {
                    let before = entry.size;
                    let after = entry.resize(key, grown);
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
                let entry = Entry::new(key, record);
                self.bytes += entry.size;
                self.map.insert(Box::from(key), entry);
                self.adjust_live(false, now_live);
                MergeOutcome {
                    changed: true,
                    was_live: false,
                    is_live: now_live,
                }
            }
        }
    }

    /// Updates the record of `key` in place with `f`, which must only move it up the
    /// lattice (e.g. an OR-set add applied directly instead of merging its delta) and add at
    /// most `grown` bytes. Returns `None` if the key is absent.
    pub fn update<R>(
        &mut self,
        key: &[u8],
        grown: usize,
        f: impl FnOnce(&mut Record) -> R,
    ) -> Option<(R, MergeOutcome)> {
        let entry = self.map.get_mut(key)?;
        let was_live = is_live(&entry.record);
        let result = f(&mut entry.record);
        let now_live = is_live(&entry.record);
        let before = entry.size;
        let after = entry.resize(key, grown);
        self.bytes = (self.bytes + after).saturating_sub(before);
        self.adjust_live(was_live, now_live);
        Some((
            result,
            MergeOutcome {
                changed: true,
                was_live,
                is_live: now_live,
            },
        ))
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
        let entry = self.map.remove(key)?;
        self.bytes = self.bytes.saturating_sub(entry.size);
        self.adjust_live(is_live(&entry.record), false);
        Some(entry.record)
    }

    /// Removes every tombstone whose epoch is older than `before_ms` (physical ms). Returns
    /// the number removed.
    pub fn collect_tombstones(&mut self, before_ms: u64) -> usize {
        let mut freed = 0;
        let mut removed = 0;
        self.map.retain(|_, entry| {
            let record = &entry.record;
            let drop = record.value.is_none() && record.epoch.physical_ms() < before_ms;
            if drop {
                freed += entry.size;
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
        self.map.iter().map(|(k, e)| (&**k, &e.record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lattice::{Lww, OrSet, Timestamp, Value};

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

    /// The size estimate of a growing collection stays within a factor of two of the exact
    /// size (and never below it), while the exact count runs only now and then.
    #[test]
    fn collection_estimates_stay_close() {
        let mut s = MemStore::new();
        let mut set: OrSet<Box<[u8]>> = OrSet::new();
        let first = set.add(1, Box::from(&b"m0"[..]));
        s.merge(
            b"s",
            Record::new(Timestamp::ZERO, Some(Value::OrSet(Box::new(first)))),
        );
        for i in 1..5000u32 {
            let member: Box<[u8]> = format!("member-{i}").into_bytes().into();
            let grown = member.len() + 64;
            s.update(b"s", grown, |r| match &mut r.value {
                Some(Value::OrSet(set)) => set.add(1, member),
                _ => unreachable!("an OR-set was stored"),
            })
            .expect("key exists");
            if i % 250 != 0 {
                continue;
            }
            let exact = exact_size(b"s", s.get(b"s").unwrap());
            let estimate = s.size_of(b"s");
            assert!(
                estimate >= exact / 2 && estimate <= 3 * exact,
                "{estimate} vs {exact}"
            );
        }
        assert_eq!(s.bytes(), s.size_of(b"s"));
        assert_eq!(s.live_keys(), 1);
    }
}
