//! The strict causal cut `C` of one cache (Def. 3): for every key in `C`, every dependency
//! of its version is superseded by the version of that key in `C`. Reading any set of keys
//! from a cut gives a (strict) snapshot (P:133).
//!
//! The cut only changes in three ways, each keeping the invariant (I3) at every moment the
//! caller can observe:
//! - `Cut::merge_staging` (in `staging`) merges a closed staging batch in one call: every dependency
//!   of the batch is superseded by `C ⊔ batch`, and merging is monotone, so `C ⊔ batch` is a
//!   cut;
//! - [`Cut::evict`] / [`Cut::evict_lru`] remove a key together with every key that
//!   transitively depends on it (P:127), found through a reverse-dependency index;
//! - the same eviction, done by `merge_staging` to make room, never touches the batch or
//!   anything the batch depends on.
//!
//! A key known not to exist in the store is cached as the bottom (an empty
//! `MultiKeyCausal`): it has no dependencies, supersedes only the empty clock, and lets the
//! shell subscribe to the key so it learns when it is created.
//!
//! Eviction order is least recently used, by a logical access counter (no clock): reads
//! ([`Cut::read`], [`Cut::touch`], protocol steps that bind keys) and merges count as uses.
//! Pinned versions are not in the cut but in [`crate::Pins`], so eviction never disturbs a
//! running request. The cut and the pins share a value's allocation ([`Shared`]): a pin or a
//! snapshot of a cached value is a reference count, not a copy of its payloads, and a value
//! that changes in the cut is replaced, never written in place.

use std::collections::BTreeMap;
use std::sync::Arc;

use lattice::{Lattice, MultiKeyCausal, VectorClock};
use thiserror::Error as ThisError;

use crate::gc::{Holdings, Stable};
use crate::{show, Error, Key, KeySet};

/// Fixed per-entry cost counted on top of the key, payloads and metadata (index nodes,
/// LRU slot, allocation headers): a rough figure that keeps tiny values from looking free.
pub const ENTRY_OVERHEAD: usize = 64;

/// The bytes one cached or pinned value is accounted for: key, payloads, clocks (16 bytes a
/// clock entry) and dependencies, plus [`ENTRY_OVERHEAD`].
pub fn value_bytes(key: &[u8], value: &MultiKeyCausal) -> usize {
    let clock = |c: &VectorClock| c.len() * 16;
    let versions: usize = value
        .versions()
        .iter()
        .map(|v| {
            let deps: usize = v.deps.iter().map(|(k, c)| k.len() + clock(c)).sum();
            v.value.len() + clock(&v.clock) + deps
        })
        .sum();
    key.len() + ENTRY_OVERHEAD + versions
}

/// A cached or pinned value, shared between the cut, the pins and the snapshots handed to
/// functions: cloning it does not copy the payloads. Values are immutable once shared.
pub type Shared = Arc<MultiKeyCausal>;

/// One cached key.
#[derive(Clone, Debug)]
struct Entry {
    value: Shared,
    /// The keys `value` depends on (its entries in the reverse index).
    dep_keys: KeySet,
    /// Accounted size ([`value_bytes`]).
    bytes: usize,
    /// Last use (position in `Cut::lru`).
    seq: u64,
}

/// The strict causal cut of one cache, with its reverse-dependency index, byte accounting
/// and capacity.
#[derive(Clone, Debug)]
pub struct Cut {
    entries: BTreeMap<Key, Entry>,
    /// `d` → the cached keys whose version depends on `d`: eviction of `d` follows it.
    rdeps: BTreeMap<Key, KeySet>,
    /// Last use → key, oldest first.
    lru: BTreeMap<u64, Key>,
    /// The logical access counter.
    seq: u64,
    /// Sum of the entries' bytes.
    bytes: usize,
    /// At most this many bytes are cached.
    capacity: usize,
    /// The dependency-GC rule's stable clocks as last learnt ([`Cut::advance_stable`]):
    /// every value is pruned with them when it enters the cut.
    stable: Stable,
}

/// What one [`Cut::merge_staging`] changed: the shell subscribes to `added` keys and drops
/// the subscriptions of `evicted` ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Merged {
    /// Keys newly in the cut (including keys cached as absent).
    pub added: Vec<Key>,
    /// Keys already cached whose version grew.
    pub updated: Vec<Key>,
    /// Keys evicted to make room (with their dependents).
    pub evicted: Vec<Key>,
}

/// Why [`Cut::check`] failed.
#[derive(Clone, Debug, PartialEq, Eq, ThisError)]
pub enum CutViolation {
    /// Def. 3: the version of `key` depends on `dep` at `needed`, and the cut holds `have`.
    #[error(
        "{} depends on {} at {needed:?}, the cut has {have:?}",
        show(key),
        show(dep)
    )]
    NotSuperseded {
        /// The dependent key.
        key: Key,
        /// The dependency.
        dep: Key,
        /// The clock needed.
        needed: VectorClock,
        /// What the cut holds for `dep` (`None`: not cached).
        have: Option<VectorClock>,
    },
    /// The reverse-dependency index or the LRU order does not match the entries.
    #[error("index out of sync at {}", show(key))]
    Index {
        /// A key where they disagree.
        key: Key,
    },
    /// The byte count does not match the entries.
    #[error("{counted} bytes counted, entries hold {actual}")]
    Bytes {
        /// The running count.
        counted: usize,
        /// The sum over the entries.
        actual: usize,
    },
}

impl Cut {
    /// An empty cut holding at most `capacity` bytes ([`value_bytes`]).
    pub fn new(capacity: usize) -> Self {
        Cut {
            entries: BTreeMap::new(),
            rdeps: BTreeMap::new(),
            lru: BTreeMap::new(),
            seq: 0,
            bytes: 0,
            capacity,
            stable: Stable::new(),
        }
    }

    /// The stable clocks this cut prunes with (`crate::gc`).
    pub fn stable(&self) -> &Stable {
        &self.stable
    }

    /// Learns newer stable clocks and prunes every cached value they cover (`crate::gc`);
    /// returns the number of values pruned. Def. 3 only loses constraints: the cut stays a
    /// cut, and an eviction group can only shrink.
    pub fn advance_stable(&mut self, stable: &Stable) -> usize {
        if !self.stable.advance_all(stable) {
            return 0;
        }
        let pruned: Vec<(Key, MultiKeyCausal)> = self
            .entries
            .iter()
            .filter(|(_, e)| self.stable.prunes(&e.value))
            .map(|(k, e)| (k.clone(), self.stable.prune(&e.value)))
            .collect();
        let n = pruned.len();
        for (k, v) in pruned {
            let seq = self.entries.get(&k).map(|e| e.seq);
            self.put(k.clone(), v);
            // Pruning is not a use: keep the key's place in the LRU order.
            if let (Some(old), Some(e)) = (seq, self.entries.get_mut(&k)) {
                self.lru.remove(&e.seq);
                self.lru.insert(old, k.clone());
                e.seq = old;
            }
        }
        n
    }

    /// What this cut holds, for a GC round's report (`crate::gc::Round`): every cached key
    /// at its clock (a key cached as absent at the empty clock).
    pub fn holdings(&self) -> Holdings {
        self.entries
            .iter()
            .map(|(k, e)| (k.clone(), e.value.clock()))
            .collect()
    }

    /// The capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The bytes cached now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Number of cached keys (absent keys included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The cached version of `key` without counting a use: `None` if not cached, the bottom
    /// (empty) if cached as absent.
    pub fn get(&self, key: &[u8]) -> Option<&MultiKeyCausal> {
        self.entries.get(key).map(|e| &*e.value)
    }

    /// [`Cut::get`], shared: a reference to the cached value's allocation (a snapshot or a
    /// pin of it copies no payload).
    pub fn get_shared(&self, key: &[u8]) -> Option<&Shared> {
        self.entries.get(key).map(|e| &e.value)
    }

    /// True if `key` is cached (possibly as absent).
    pub fn contains(&self, key: &[u8]) -> bool {
        self.entries.contains_key(key)
    }

    /// The cached keys, in key order: the keys the shell keeps subscriptions for.
    pub fn keys(&self) -> impl Iterator<Item = &Key> + '_ {
        self.entries.keys()
    }

    /// The cached version of `key`, counting a use for eviction.
    pub fn read(&mut self, key: &[u8]) -> Option<&MultiKeyCausal> {
        self.touch(key);
        self.get(key)
    }

    /// Counts a use of `key` (no-op if not cached).
    pub fn touch(&mut self, key: &[u8]) {
        self.seq += 1;
        let seq = self.seq;
        if let Some(entry) = self.entries.get_mut(key) {
            if let Some(k) = self.lru.remove(&entry.seq) {
                self.lru.insert(seq, k);
            }
            entry.seq = seq;
        }
    }

    /// Every cached key that transitively depends on `key` (not `key` itself, unless it is
    /// on a dependency cycle through itself).
    pub fn dependents(&self, key: &[u8]) -> KeySet {
        let mut out = KeySet::new();
        let mut work: Vec<&Key> = self.rdeps.get(key).into_iter().flatten().collect();
        while let Some(k) = work.pop() {
            if out.insert(k.clone()) {
                work.extend(self.rdeps.get(k).into_iter().flatten());
            }
        }
        out
    }

    /// Evicts `key` and every key that transitively depends on it (P:127); returns the keys
    /// removed, in key order (empty if `key` is not cached).
    pub fn evict(&mut self, key: &[u8]) -> Vec<Key> {
        if !self.contains(key) {
            return Vec::new();
        }
        let mut group = self.dependents(key);
        group.insert(Key::from(key));
        for k in &group {
            self.remove(k);
        }
        group.into_iter().collect()
    }

    /// Evicts least-recently-used keys (each with its dependents) until at least `bytes`
    /// bytes are freed or the cut is empty; returns the keys removed.
    pub fn evict_lru(&mut self, bytes: usize) -> Vec<Key> {
        let plan = self.plan_eviction(bytes, &KeySet::new());
        let keys = match plan {
            Ok(keys) | Err((keys, _)) => keys,
        };
        for k in &keys {
            self.remove(k);
        }
        keys.into_iter().collect()
    }

    /// Merges a batch whose dependencies are all superseded by `C ⊔ batch` (a closed
    /// staging batch: `Cut::merge_staging` checks that), atomically (I3): nothing
    /// observable happens between the first and the last key.
    ///
    /// If the merged cut would exceed the capacity, least-recently-used keys are evicted
    /// first, never one the batch (transitively) depends on or one whose eviction would drag
    /// a batch key along.
    ///
    /// # Errors
    /// [`Error::WouldExceedCapacity`]: even after evicting what may be evicted the batch
    /// does not fit; nothing changed.
    pub(crate) fn merge_batch(
        &mut self,
        batch: &BTreeMap<Key, MultiKeyCausal>,
    ) -> Result<Merged, Error> {
        let mut merged: BTreeMap<Key, MultiKeyCausal> = BTreeMap::new();
        for (key, staged) in batch {
            match self.get(key) {
                Some(cached) => {
                    let mut value = cached.clone();
                    if value.merge_ref(staged) {
                        let value = self.stable.prune(&value);
                        if value != *cached {
                            merged.insert(key.clone(), value);
                        }
                    }
                }
                None => {
                    merged.insert(key.clone(), self.stable.prune(staged));
                }
            }
        }
        let old: usize = merged
            .keys()
            .filter_map(|k| self.entries.get(k))
            .map(|e| e.bytes)
            .sum();
        let new: usize = merged.iter().map(|(k, v)| value_bytes(k, v)).sum();
        let after = self.bytes - old + new;
        let mut evicted = Vec::new();
        if after > self.capacity {
            let protect = self.closure(&merged);
            match self.plan_eviction(after - self.capacity, &protect) {
                Ok(keys) => {
                    for k in &keys {
                        self.remove(k);
                    }
                    evicted = keys.into_iter().collect();
                }
                Err((_, freed)) => {
                    return Err(Error::WouldExceedCapacity {
                        needed: after - freed,
                        capacity: self.capacity,
                    })
                }
            }
        }
        let mut out = Merged {
            evicted,
            ..Merged::default()
        };
        for (key, value) in merged {
            if self.contains(&key) {
                out.updated.push(key.clone());
            } else {
                out.added.push(key.clone());
            }
            self.put(key, value);
        }
        Ok(out)
    }

    /// Checks Def. 3 over the whole cut, and that the reverse index, the LRU order and the
    /// byte count match the entries. Meant for tests (it is linear in the cut's size).
    pub fn check(&self) -> Result<(), CutViolation> {
        let mut actual = 0;
        let mut rdeps: BTreeMap<Key, KeySet> = BTreeMap::new();
        for (key, entry) in &self.entries {
            actual += entry.bytes;
            if self.lru.get(&entry.seq) != Some(key)
                || entry.bytes != value_bytes(key, &entry.value)
            {
                return Err(CutViolation::Index { key: key.clone() });
            }
            let deps = entry.value.deps();
            if deps.keys().cloned().collect::<KeySet>() != entry.dep_keys {
                return Err(CutViolation::Index { key: key.clone() });
            }
            for (dep, needed) in deps {
                let have = self.get(&dep).map(MultiKeyCausal::clock);
                if !have.as_ref().is_some_and(|h| needed.leq(h)) && !needed.is_empty() {
                    return Err(CutViolation::NotSuperseded {
                        key: key.clone(),
                        dep,
                        needed,
                        have,
                    });
                }
                rdeps.entry(dep).or_default().insert(key.clone());
            }
        }
        if rdeps != self.rdeps {
            let key = rdeps
                .keys()
                .chain(self.rdeps.keys())
                .find(|k| rdeps.get(*k) != self.rdeps.get(*k))
                .cloned()
                .unwrap_or_default();
            return Err(CutViolation::Index { key });
        }
        if self.lru.len() != self.entries.len() {
            let key = self.lru.values().next().cloned().unwrap_or_default();
            return Err(CutViolation::Index { key });
        }
        if actual != self.bytes {
            return Err(CutViolation::Bytes {
                counted: self.bytes,
                actual,
            });
        }
        Ok(())
    }

    /// Inserts a value bypassing staging (tests build broken cuts with it).
    #[cfg(test)]
    pub(crate) fn insert_unchecked(&mut self, key: Key, value: MultiKeyCausal) {
        self.put(key, value);
    }

    /// Inserts or replaces `key`'s entry, keeping the index, LRU order and bytes in step.
    fn put(&mut self, key: Key, value: MultiKeyCausal) {
        self.remove(&key);
        let dep_keys: KeySet = value.deps().into_keys().collect();
        for d in &dep_keys {
            self.rdeps.entry(d.clone()).or_default().insert(key.clone());
        }
        self.seq += 1;
        let bytes = value_bytes(&key, &value);
        self.bytes += bytes;
        self.lru.insert(self.seq, key.clone());
        self.entries.insert(
            key,
            Entry {
                value: Arc::new(value),
                dep_keys,
                bytes,
                seq: self.seq,
            },
        );
    }

    /// Removes `key`'s entry alone (the caller removes its dependents).
    fn remove(&mut self, key: &[u8]) {
        let Some(entry) = self.entries.remove(key) else {
            return;
        };
        for d in &entry.dep_keys {
            if let Some(set) = self.rdeps.get_mut(d) {
                set.remove(key);
                if set.is_empty() {
                    self.rdeps.remove(d);
                }
            }
        }
        self.lru.remove(&entry.seq);
        self.bytes -= entry.bytes;
    }

    /// The batch keys and everything they transitively depend on, through the batch and the
    /// cut: what eviction must leave alone while the batch merges.
    fn closure(&self, batch: &BTreeMap<Key, MultiKeyCausal>) -> KeySet {
        let mut out: KeySet = batch.keys().cloned().collect();
        let mut work: Vec<Key> = batch.values().flat_map(|v| v.deps().into_keys()).collect();
        while let Some(k) = work.pop() {
            if !out.insert(k.clone()) {
                continue;
            }
            if let Some(v) = batch.get(&k).or_else(|| self.get(&k)) {
                work.extend(v.deps().into_keys());
            }
        }
        out
    }

    /// Chooses least-recently-used keys (with their dependents) to free `need` bytes,
    /// skipping any group that touches `protect`. `Err((chosen, freed))` if not enough.
    fn plan_eviction(&self, need: usize, protect: &KeySet) -> Result<KeySet, (KeySet, usize)> {
        let mut chosen = KeySet::new();
        let mut freed = 0;
        for key in self.lru.values() {
            if freed >= need {
                break;
            }
            if chosen.contains(key) || protect.contains(key) {
                continue;
            }
            let mut group = self.dependents(key);
            group.insert(key.clone());
            if group.iter().any(|k| protect.contains(k)) {
                continue;
            }
            for k in group {
                if let Some(e) = self.entries.get(&k) {
                    if chosen.insert(k) {
                        freed += e.bytes;
                    }
                }
            }
        }
        if freed >= need {
            Ok(chosen)
        } else {
            Err((chosen, freed))
        }
    }
}
