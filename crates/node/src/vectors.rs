//! Explicit replication vectors: the keys whose placement differs from the default.
//!
//! Most keys have the default vector and cost nothing here. The exceptions (hot keys
//! replicated by the policy engine, keys an operator placed with `latticekv replicate`)
//! live in a [`ReplicationTable`], a *persistent* map (structural sharing, `imbl`): a
//! change costs O(log n) and shares the rest with the previous table, so a view per change
//! is cheap at any size, and two tables are compared by walking only the parts that differ
//! ([`ReplicationTable::changed_keys`]).
//!
//! Entries are ordered by the key's stable hash (xxh3-64, no seed), so the table splits into
//! [`BUCKETS`] contiguous ranges by the hash's top byte. Each bucket has an order-free
//! digest kept up to date on every change; nodes gossip the 256 digests and send each other
//! only the entries of the buckets that differ (see `cluster::state`), never the whole
//! table.
//!
//! Returning a key to the default placement leaves a *removal* (a tombstone entry with its
//! timestamp), so an older setting arriving later by gossip cannot bring the vector back.
//! Removals are dropped after [`REMOVAL_TTL_MS`]: every node has learnt them by then.

use std::sync::Arc;

use imbl::OrdMap;
use lattice::{Blob, Timestamp};
use placement::ReplicationVector;

/// Buckets of the table (by the top byte of the key's hash), each with its own digest.
pub const BUCKETS: usize = 256;

/// How long a removal is kept before it is dropped (its timestamp's wall-clock time plus
/// this): ten minutes, far longer than gossip needs to reach every member.
pub const REMOVAL_TTL_MS: u64 = 10 * 60 * 1000;

/// One explicit setting of a key: when it was made and the vector, or `None` for a return
/// to the default placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// When it was set (newest wins).
    pub ts: Timestamp,
    /// The vector; `None`: back to the default.
    pub vector: Option<ReplicationVector>,
    /// Set by the elasticity policy rather than an operator (the policy leaves operators'
    /// vectors alone; this travels with the entry so a restarted monitor knows its own).
    pub by_policy: bool,
}

impl Entry {
    /// The total order of settings: by timestamp, ties broken by the vector (a removal
    /// before any vector), then the policy's before an operator's, so every node resolves
    /// them alike.
    fn rank(&self) -> (Timestamp, [u32; 6]) {
        let v = match &self.vector {
            None => [0; 5],
            Some(v) => [
                1,
                v.memory.global,
                v.memory.local,
                v.disk.global,
                v.disk.local,
            ],
        };
        let operator = u32::from(!self.by_policy);
        (self.ts, [v[0], v[1], v[2], v[3], v[4], operator])
    }

    /// This entry's share of its bucket's digest.
    fn digest(&self, key: &[u8]) -> u64 {
        let (ts, v) = self.rank();
        let mut bytes = Vec::with_capacity(key.len() + 40);
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(&ts.time.to_le_bytes());
        bytes.extend_from_slice(&ts.writer.to_le_bytes());
        for n in v {
            bytes.extend_from_slice(&n.to_le_bytes());
        }
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }
}

/// The keys sharing one hash (almost always one) and their entries.
type Slot = Vec<(Blob, Entry)>;

/// The explicit replication vectors (see the module docs). Cloning is O(1).
#[derive(Clone)]
pub struct ReplicationTable {
    entries: OrdMap<u64, Slot>,
    live: usize,
    removals: usize,
    buckets: Arc<[u64; BUCKETS]>,
}

impl Default for ReplicationTable {
    fn default() -> ReplicationTable {
        ReplicationTable {
            entries: OrdMap::new(),
            live: 0,
            removals: 0,
            buckets: Arc::new([0; BUCKETS]),
        }
    }
}

impl std::fmt::Debug for ReplicationTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicationTable")
            .field("live", &self.live)
            .field("removals", &self.removals)
            .field("digest", &self.digest())
            .finish()
    }
}

/// The stable hash a key is ordered and bucketed by.
#[inline]
pub fn table_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// The bucket of a key's hash.
#[inline]
pub fn bucket_of(hash: u64) -> usize {
    (hash >> 56) as usize
}

impl ReplicationTable {
    /// An empty table.
    pub fn new() -> ReplicationTable {
        ReplicationTable::default()
    }

    /// Keys with an explicit vector (removals not counted).
    pub fn len(&self) -> usize {
        self.live
    }

    /// True if no key has an explicit vector (the fast path of every placement lookup).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Entries held, removals included (what the table's bound counts).
    pub fn stored(&self) -> usize {
        self.live + self.removals
    }

    /// The explicit vector of `key`, if it has one.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<ReplicationVector> {
        self.entry(key).and_then(|e| e.vector)
    }

    /// The entry of `key` (a vector or a removal), if any.
    pub fn entry(&self, key: &[u8]) -> Option<Entry> {
        self.entries
            .get(&table_hash(key))?
            .iter()
            .find(|(k, _)| &k[..] == key)
            .map(|(_, e)| *e)
    }

    /// Merges a setting: kept if it is newer than the key's entry (see [`Entry`]).
    /// Returns true if the table changed.
    pub fn merge(&mut self, key: &[u8], entry: Entry) -> bool {
        let hash = table_hash(key);
        let bucket = bucket_of(hash);
        let mut slot = self.entries.get(&hash).cloned().unwrap_or_default();
        let old = match slot.iter_mut().find(|(k, _)| &k[..] == key) {
            Some((_, current)) if entry.rank() <= current.rank() => return false,
            Some((_, current)) => Some(std::mem::replace(current, entry)),
            None => {
                slot.push((Box::from(key), entry));
                None
            }
        };
        let mut digest = entry.digest(key);
        if let Some(old) = old {
            digest ^= old.digest(key);
            self.count(&old, false);
        }
        Arc::make_mut(&mut self.buckets)[bucket] ^= digest;
        self.count(&entry, true);
        self.entries.insert(hash, slot);
        true
    }

    /// Sets `key`'s vector (tests, and tables built by hand): [`merge`](Self::merge).
    pub fn insert(&mut self, key: Blob, (ts, vector): (Timestamp, ReplicationVector)) -> bool {
        self.merge(
            &key,
            Entry {
                ts,
                vector: Some(vector),
                by_policy: false,
            },
        )
    }

    fn count(&mut self, entry: &Entry, add: bool) {
        let counter = if entry.vector.is_some() {
            &mut self.live
        } else {
            &mut self.removals
        };
        if add {
            *counter += 1;
        } else {
            *counter -= 1;
        }
    }

    /// Every entry (removals included), by hash.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry)> {
        self.entries
            .values()
            .flat_map(|slot| slot.iter().map(|(k, e)| (&k[..], e)))
    }

    /// Every key with an explicit vector, and the vector.
    pub fn vectors(&self) -> impl Iterator<Item = (&[u8], ReplicationVector)> {
        self.iter().filter_map(|(k, e)| e.vector.map(|v| (k, v)))
    }

    /// The entries of one bucket.
    pub fn bucket(&self, bucket: usize) -> impl Iterator<Item = (&[u8], &Entry)> {
        let low = (bucket as u64) << 56;
        let high = low | ((1u64 << 56) - 1);
        self.entries
            .range(low..=high)
            .flat_map(|(_, slot)| slot.iter().map(|(k, e)| (&k[..], e)))
    }

    /// The digest of each bucket.
    pub fn buckets(&self) -> &[u64; BUCKETS] {
        &self.buckets
    }

    /// Order-free digest of the whole table: equal tables have equal digests.
    pub fn digest(&self) -> u64 {
        self.buckets.iter().fold(0, |acc, d| acc ^ d)
    }

    /// Keys whose entry differs between `old` and this table. Walks only the parts of the
    /// two maps that are not shared: cheap when one was derived from the other.
    pub fn changed_keys(&self, old: &ReplicationTable) -> Vec<Blob> {
        use imbl::ordmap::DiffItem;
        let mut keys: Vec<Blob> = Vec::new();
        for item in old.entries.diff(&self.entries) {
            match item {
                DiffItem::Add(_, slot) | DiffItem::Remove(_, slot) => {
                    keys.extend(slot.iter().map(|(k, _)| k.clone()));
                }
                DiffItem::Update {
                    old: (_, before),
                    new: (_, after),
                } => {
                    for (k, e) in after {
                        if !before.iter().any(|(bk, be)| bk == k && be == e) {
                            keys.push(k.clone());
                        }
                    }
                    for (k, _) in before {
                        if !after.iter().any(|(ak, _)| ak == k) {
                            keys.push(k.clone());
                        }
                    }
                }
            }
        }
        keys
    }

    /// Drops removals made more than [`REMOVAL_TTL_MS`] before `now_ms`. Returns how many.
    pub fn purge_removals(&mut self, now_ms: u64) -> usize {
        if self.removals == 0 {
            return 0;
        }
        let expired: Vec<Blob> = self
            .iter()
            .filter(|(_, e)| e.vector.is_none() && expired(e, now_ms))
            .map(|(k, _)| Box::from(k))
            .collect();
        for key in &expired {
            let hash = table_hash(key);
            let Some(mut slot) = self.entries.get(&hash).cloned() else {
                continue;
            };
            if let Some(i) = slot.iter().position(|(k, _)| k == key) {
                let (_, entry) = slot.swap_remove(i);
                Arc::make_mut(&mut self.buckets)[bucket_of(hash)] ^= entry.digest(key);
                self.removals -= 1;
            }
            if slot.is_empty() {
                self.entries.remove(&hash);
            } else {
                self.entries.insert(hash, slot);
            }
        }
        expired.len()
    }
}

/// True if a removal is older than [`REMOVAL_TTL_MS`] at `now_ms` (such removals are not
/// taken from peers either: every node has dropped or is about to drop them).
pub fn expired(entry: &Entry, now_ms: u64) -> bool {
    entry.vector.is_none() && entry.ts.physical_ms().saturating_add(REMOVAL_TTL_MS) < now_ms
}

impl FromIterator<(Blob, (Timestamp, ReplicationVector))> for ReplicationTable {
    fn from_iter<I: IntoIterator<Item = (Blob, (Timestamp, ReplicationVector))>>(
        iter: I,
    ) -> ReplicationTable {
        let mut table = ReplicationTable::new();
        for (key, setting) in iter {
            table.insert(key, setting);
        }
        table
    }
}

#[cfg(test)]
mod tests;
