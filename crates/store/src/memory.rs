//! The in-memory engine: key → [`Record`], with approximate byte accounting.
//!
//! # Layout
//! Most keys of a key-value store hold a plain LWW register, so those are stored *packed*:
//! one heap block holding the key, the timestamp and the value
//! (`[meta u32 LE][key_len u16 LE][key][time u64 LE][writer u64 LE][value]`), referenced from a
//! hash table of 16-byte slots. A live LWW record's epoch is its timestamp (the node's convention), so
//! nothing else is needed. Every other record (collections, counters, causal values,
//! tombstones) is a *full* entry: the key, the [`Record`] and its size estimate, inline in a
//! second table. A key is in at most one of the two tables, and moves between them when its
//! record changes form. Both tables are probed with one hash of the key.
//!
//! The store is split into [`PARTITIONS`] partitions, each with its own pair of tables: a
//! key's partition is the top byte of its placement hash ([`placement::key_hash`]), which is
//! also its anti-entropy bucket, the same on every node. Passes over the whole store — view
//! changes, anti-entropy digests, snapshots, tombstone sweeps — proceed one partition at a
//! time ([`MemStore::iter_partition`]) and never hold the worker for long, and a peer's
//! question about a range of buckets touches only those partitions. Within a partition the
//! tables hash keys with a seeded hasher ([`MemStore::with_seed`]): random in a node (so
//! keys chosen by clients cannot be made to collide), the run's seed in the simulation (so
//! iteration order is reproducible there).
//!
//! # Recency and partial records
//! Every entry carries a 32-bit *meta* word: the store's access clock at the entry's last
//! read or write (30 bits, see [`MemStore::age`]), a *partial* flag the owner may set
//! ([`MemStore::set_partial`]: a memory-tier worker marks a record that holds only the deltas
//! written since the key was evicted) and a *synced* flag ([`MemStore::set_synced`]: the
//! owner's copy elsewhere — the disk tier — holds this record), which every change of the
//! record clears. Reads that should count as accesses go through
//! [`MemStore::get_touched`]; every merge and update counts as one. [`MemStore::sample`] reads
//! a few entries from consecutive buckets of one partition, for an owner evicting by
//! approximate LRU (as Redis's `allkeys-lru` does): O(1) bookkeeping per access, no
//! allocation, and no ordered list to maintain.
//!
//! # Sizes
//! Packed entries are sized exactly (O(1)). Full entries keep an estimate so a write never
//! walks a whole collection: a merge or in-place update adds the size of what it brought in
//! (an upper bound of the growth), and the exact size is recounted only when the estimate
//! has doubled since the last count — amortised O(size of the write).

use std::hash::BuildHasher;

use foldhash::fast::FixedState;
use hashbrown::HashTable;
use lattice::{Lattice, LatticeType, Lww, Record, Timestamp, Value};

mod packed;
pub use packed::PACKED_OVERHEAD;
use packed::*;

/// Fixed per-entry cost counted on top of key and value bytes for full entries: the table
/// slot, the key allocation and the record header. An estimate, used for memory budgets.
pub const ENTRY_OVERHEAD: usize = 64;

/// Number of partitions of a store (see the module docs).
pub const PARTITIONS: usize = 256;

/// Below this size a full entry is always recounted exactly (cheap for small collections).
const EXACT_BELOW: usize = 4096;

/// The partial flag of a meta word.
const PARTIAL: u32 = 1 << 31;
/// The synced flag of a meta word: cleared by every change of the record.
const SYNCED: u32 = 1 << 30;
/// The flags a read (an access that changes nothing) keeps.
const FLAGS: u32 = PARTIAL | SYNCED;
/// The access-tick bits of a meta word.
const TICK_MASK: u32 = SYNCED - 1;

/// Where a key would be stored in a [`MemStore`] (see [`MemStore::locate`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Slot {
    part: usize,
    hash: u64,
}

/// What a write did to the stored record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergeOutcome {
    /// The stored record changed (the write was not already known).
    pub changed: bool,
    /// The key had a record (tombstones included) before the write.
    pub was_present: bool,
    /// The key held a live value (see [`is_live`]) before the write.
    pub was_live: bool,
    /// The key holds a live value after the write.
    pub is_live: bool,
}

/// True if `record` holds a value a user can see: not absent, not a tombstone, and not an
/// OR-set whose members were all removed (such a set keeps its causal context so later
/// merges stay correct, but, as in Redis, an empty set does not exist for users) — nor a
/// hash or sorted set whose fields or members were all removed.
#[inline]
pub fn is_live(record: &Record) -> bool {
    match &record.value {
        None => false,
        Some(Value::OrSet(set)) => !set.is_empty(),
        // ---- lists (helper B) ----
        Some(Value::List(list)) => !list.is_empty(),
        // Redis hashes and sorted sets: removed fields and members stay as tombstones.
        Some(Value::Hash(h)) => !h.is_empty(),
        Some(Value::SortedSet(z)) => !z.is_empty(),
        Some(_) => true,
    }
}

/// A borrowed view of a stored record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RecordRef<'a> {
    /// A live LWW register whose epoch is its timestamp (stored packed).
    Lww {
        /// The write's timestamp (also the record's epoch).
        ts: Timestamp,
        /// The value.
        value: &'a [u8],
    },
    /// Any other record, tombstones included.
    Full(&'a Record),
}

impl<'a> RecordRef<'a> {
    /// The record's epoch.
    pub fn epoch(&self) -> Timestamp {
        match self {
            RecordRef::Lww { ts, .. } => *ts,
            RecordRef::Full(r) => r.epoch,
        }
    }

    /// The lattice type of the value; `None` for a tombstone.
    pub fn lattice_type(&self) -> Option<LatticeType> {
        match self {
            RecordRef::Lww { .. } => Some(LatticeType::Lww),
            RecordRef::Full(r) => r.value.as_ref().map(Value::lattice_type),
        }
    }

    /// True if a user can see the value (see [`is_live`]).
    pub fn is_live(&self) -> bool {
        match self {
            RecordRef::Lww { .. } => true,
            RecordRef::Full(r) => is_live(r),
        }
    }

    /// The value of a full record (`None` for packed LWW registers and tombstones).
    pub fn full_value(&self) -> Option<&'a Value> {
        match self {
            RecordRef::Lww { .. } => None,
            RecordRef::Full(r) => r.value.as_ref(),
        }
    }

    /// An owned copy of the value (`None` for a tombstone).
    pub fn to_value(&self) -> Option<Value> {
        match self {
            RecordRef::Lww { ts, value } => Some(Value::Lww(Lww::new(*ts, Box::from(*value)))),
            RecordRef::Full(r) => r.value.clone(),
        }
    }

    /// An owned copy of the record.
    pub fn to_record(&self) -> Record {
        match self {
            RecordRef::Lww { ts, .. } => Record::new(*ts, self.to_value()),
            RecordRef::Full(r) => (*r).clone(),
        }
    }
}

// ---- full entries ----------------------------------------------------------------------------

/// A record stored in full, with its size estimate.
#[derive(Debug)]
struct FullEntry {
    key: Box<[u8]>,
    record: Record,
    /// Estimated bytes of key + record + overhead (an upper bound between recounts).
    size: usize,
    /// The exact size at the last recount.
    counted: usize,
    /// Access tick and flags (see the module docs).
    meta: u32,
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

fn exact_size(key: &[u8], record: &Record) -> usize {
    key.len() + record.approx_size() + ENTRY_OVERHEAD
}

impl FullEntry {
    fn new(meta: u32, key: &[u8], record: Record) -> FullEntry {
        let size = exact_size(key, &record);
        FullEntry {
            key: Box::from(key),
            record,
            size,
            counted: size,
            meta,
        }
    }

    /// Updates the estimate after the record grew by at most `grown` bytes; recounts when
    /// the estimate is no longer trustworthy. Returns the new estimate.
    fn resize(&mut self, grown: usize) -> usize {
        let estimate = self.size + grown;
        self.size =
            if cheap_to_size(&self.record) || estimate < EXACT_BELOW || estimate > 2 * self.counted
            {
                let exact = exact_size(&self.key, &self.record);
                self.counted = exact;
                exact
            } else {
                estimate
            };
        self.size
    }
}

// ---- the store -------------------------------------------------------------------------------

/// One partition: a pair of tables.
#[derive(Default)]
struct Part {
    /// Live LWW registers, packed.
    packed: HashTable<Box<[u8]>>,
    /// Every other record, tombstones included (until removed).
    full: HashTable<FullEntry>,
}

/// One shard's keys in RAM.
pub struct MemStore {
    /// The partitions, [`PARTITIONS`] of them.
    parts: Box<[Part]>,
    /// Hashes keys for every table (and picks their partition).
    hasher: FixedState,
    /// Sum of the entries' sizes (exact for packed, estimates for full entries).
    bytes: usize,
    /// Number of keys holding a live value.
    live: usize,
    /// The access clock: advances with every access that counts (30 bits, wrapping).
    clock: std::cell::Cell<u32>,
    /// Changes to stored records so far (see [`MemStore::changes`]).
    changes: u64,
}

/// What [`MemStore::sample`] reports of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampled {
    /// Accesses to the store since the entry's last one (see [`MemStore::age`]).
    pub age: u32,
    /// The owner marked the record partial.
    pub partial: bool,
    /// The owner marked the record synced, and it has not changed since.
    pub synced: bool,
}

impl std::fmt::Debug for MemStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemStore")
            .field("entries", &self.len())
            .field("bytes", &self.bytes)
            .field("live", &self.live)
            .finish()
    }
}

impl Default for MemStore {
    fn default() -> Self {
        Self::new()
    }
}

/// The partition of a key: the top byte of its placement hash (its anti-entropy bucket).
#[inline]
pub fn partition_of(key: &[u8]) -> usize {
    (placement::key_hash(key) >> 56) as usize
}

impl MemStore {
    /// An empty store with a random hash seed.
    pub fn new() -> Self {
        Self::with_seed(random_seed())
    }

    /// An empty store whose hasher is seeded with `seed` (same seed, same iteration order).
    pub fn with_seed(seed: u64) -> Self {
        MemStore {
            parts: (0..PARTITIONS).map(|_| Part::default()).collect(),
            hasher: FixedState::with_seed(seed),
            bytes: 0,
            live: 0,
            clock: std::cell::Cell::new(0),
            changes: 0,
        }
    }

    /// The next access tick (advances the clock).
    #[inline]
    fn tick(&self) -> u32 {
        let t = self.clock.get().wrapping_add(1) & TICK_MASK;
        self.clock.set(t);
        t
    }

    /// Accesses since `meta`'s tick. Ticks wrap after 2^31 accesses: an entry untouched for
    /// longer may look young again (an approximation an LRU sample tolerates).
    #[inline]
    fn age_of(&self, meta: u32) -> u32 {
        self.clock.get().wrapping_sub(meta & TICK_MASK) & TICK_MASK
    }

    #[inline]
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The record of `key`, tombstones included.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<RecordRef<'_>> {
        let hash = self.hash(key);
        let part = &self.parts[partition_of(key)];
        if let Some(block) = part.packed.find(hash, |b| packed_key(b) == key) {
            let p = unpack(block);
            return Some(RecordRef::Lww {
                ts: p.ts,
                value: p.value,
            });
        }
        part.full
            .find(hash, |e| &*e.key == key)
            .map(|e| RecordRef::Full(&e.record))
    }

    /// Where `key` would be stored: what [`MemStore::prefetch`] needs, computed apart so a
    /// caller can hash a batch's keys first and then prefetch them in a tight loop.
    #[inline]
    pub fn locate(&self, key: &[u8]) -> Slot {
        Slot {
            part: partition_of(key),
            hash: self.hash(key),
        }
    }

    /// Starts loading the entry at `slot` (from [`MemStore::locate`]) into the CPU's cache,
    /// without waiting for it: a connection calls this for the keys of the next requests of
    /// a pipelined batch, so their cache misses overlap instead of each stalling its own
    /// request (the first lookup of a random key is the largest single cost of a pipelined
    /// SET). Changes nothing; an absent key costs the probe.
    ///
    /// Only the packed table (plain strings, the common case) is probed: probing both would
    /// miss on the other table's control bytes for every key.
    #[inline]
    pub fn prefetch(&self, slot: Slot) {
        let Some(part) = self.parts.get(slot.part) else {
            return;
        };
        // hashbrown has no prefetch of its own: a probe whose test matches nothing reads the
        // control bytes and the candidate slots, and asks for each candidate's block (the
        // line the key comparison would miss on) without waiting for it. Issued for several
        // keys back to back, the probes' own misses overlap too.
        let _ = part.packed.find(slot.hash, |block| {
            prefetch_line(block.as_ptr());
            false
        });
    }

    /// The record of `key` if it is live (see [`is_live`]).
    #[inline]
    pub fn get_live(&self, key: &[u8]) -> Option<RecordRef<'_>> {
        self.get(key).filter(RecordRef::is_live)
    }

    /// The record of `key` if it is live, counting the read as an access (for recency).
    #[inline]
    pub fn get_touched(&mut self, key: &[u8]) -> Option<RecordRef<'_>> {
        let hash = self.hash(key);
        let tick = self.tick();
        let part = &mut self.parts[partition_of(key)];
        if let Some(block) = part.packed.find_mut(hash, |b| packed_key(b) == key) {
            let meta = (packed_meta(block) & FLAGS) | tick;
            set_packed_meta(block, meta);
            let p = unpack(block);
            return Some(RecordRef::Lww {
                ts: p.ts,
                value: p.value,
            });
        }
        let e = part.full.find_mut(hash, |e| &*e.key == key)?;
        e.meta = (e.meta & FLAGS) | tick;
        Some(RecordRef::Full(&e.record)).filter(RecordRef::is_live)
    }

    /// Counts an access to `key` (for recency); false if it is absent.
    pub fn touch(&mut self, key: &[u8]) -> bool {
        self.update_meta(key, |m| m).is_some()
    }

    /// True if `key` is stored and marked partial.
    pub fn is_partial(&self, key: &[u8]) -> bool {
        self.meta(key).is_some_and(|m| m & PARTIAL != 0)
    }

    /// Marks `key`'s record partial or not (see the module docs); false if it is absent.
    /// Counts as an access.
    pub fn set_partial(&mut self, key: &[u8], partial: bool) -> bool {
        let flag = if partial { PARTIAL } else { 0 };
        self.update_meta(key, |m| (m & SYNCED) | flag).is_some()
    }

    /// True if `key` is stored and marked synced, unchanged since.
    pub fn is_synced(&self, key: &[u8]) -> bool {
        self.meta(key).is_some_and(|m| m & SYNCED != 0)
    }

    /// Marks `key`'s record synced: the owner's copy elsewhere holds it as it is now (see
    /// the module docs). Not an access (the entry keeps its age); false if it is absent.
    pub fn set_synced(&mut self, key: &[u8]) -> bool {
        let hash = self.hash(key);
        let part = &mut self.parts[partition_of(key)];
        if let Some(block) = part.packed.find_mut(hash, |b| packed_key(b) == key) {
            let meta = packed_meta(block) | SYNCED;
            set_packed_meta(block, meta);
            return true;
        }
        match part.full.find_mut(hash, |e| &*e.key == key) {
            Some(e) => {
                e.meta |= SYNCED;
                true
            }
            None => false,
        }
    }

    /// Accesses to the store since `key`'s last one; `None` if absent.
    pub fn age(&self, key: &[u8]) -> Option<u32> {
        self.meta(key).map(|m| self.age_of(m))
    }

    fn meta(&self, key: &[u8]) -> Option<u32> {
        let hash = self.hash(key);
        let part = &self.parts[partition_of(key)];
        if let Some(block) = part.packed.find(hash, |b| packed_key(b) == key) {
            return Some(packed_meta(block));
        }
        part.full.find(hash, |e| &*e.key == key).map(|e| e.meta)
    }

    /// Sets `key`'s meta word to `flags(old) | a new tick`.
    fn update_meta(&mut self, key: &[u8], flags: impl FnOnce(u32) -> u32) -> Option<u32> {
        let hash = self.hash(key);
        let tick = self.tick();
        let part = &mut self.parts[partition_of(key)];
        if let Some(block) = part.packed.find_mut(hash, |b| packed_key(b) == key) {
            let meta = (flags(packed_meta(block)) & FLAGS) | tick;
            set_packed_meta(block, meta);
            return Some(meta);
        }
        let e = part.full.find_mut(hash, |e| &*e.key == key)?;
        e.meta = (flags(e.meta) & FLAGS) | tick;
        Some(e.meta)
    }

    /// Calls `f` on up to `n` entries of partition `p`, read from consecutive buckets of its
    /// two tables from bucket `start` on (wrapping; `start` is reduced modulo the table
    /// size), looking at most at `4 * n + 16` buckets per table: a bounded, allocation-free
    /// sample for approximate LRU. `f` returns false to stop.
    pub fn sample(
        &self,
        p: usize,
        start: usize,
        n: usize,
        mut f: impl FnMut(&[u8], Sampled) -> bool,
    ) {
        let Some(part) = self.parts.get(p) else {
            return;
        };
        let mut left = n;
        let scan = 4 * n + 16;
        let buckets = part.packed.num_buckets();
        if !part.packed.is_empty() && buckets > 0 {
            for i in 0..scan.min(buckets) {
                if left == 0 {
                    return;
                }
                if let Some(block) = part.packed.get_bucket((start + i) % buckets) {
                    left -= 1;
                    let meta = packed_meta(block);
                    let s = Sampled {
                        age: self.age_of(meta),
                        partial: meta & PARTIAL != 0,
                        synced: meta & SYNCED != 0,
                    };
                    if !f(packed_key(block), s) {
                        return;
                    }
                }
            }
        }
        let buckets = part.full.num_buckets();
        if !part.full.is_empty() && buckets > 0 {
            for i in 0..scan.min(buckets) {
                if left == 0 {
                    return;
                }
                if let Some(e) = part.full.get_bucket((start + i) % buckets) {
                    left -= 1;
                    let s = Sampled {
                        age: self.age_of(e.meta),
                        partial: e.meta & PARTIAL != 0,
                        synced: e.meta & SYNCED != 0,
                    };
                    if !f(&e.key, s) {
                        return;
                    }
                }
            }
        }
    }

    /// Estimated bytes used by `key` (0 if absent).
    pub fn size_of(&self, key: &[u8]) -> usize {
        let hash = self.hash(key);
        let part = &self.parts[partition_of(key)];
        if let Some(block) = part.packed.find(hash, |b| packed_key(b) == key) {
            return packed_size(block);
        }
        part.full
            .find(hash, |e| &*e.key == key)
            .map_or(0, |e| e.size)
    }

    /// Merges `record` into the record of `key` (inserting it if absent).
    pub fn merge(&mut self, key: &[u8], record: Record) -> MergeOutcome {
        let outcome = self.merge_record(key, record);
        if outcome.changed {
            self.changes += 1;
        }
        outcome
    }

    /// How many times a stored record changed or left so far (merges that changed it,
    /// updates in place, removals): equal at two moments only if no read of any key could
    /// tell them apart, apart from deadlines passing. A reader that remembers something of a
    /// value can skip reading it again while this stays the same.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    fn merge_record(&mut self, key: &[u8], record: Record) -> MergeOutcome {
        let hash = self.hash(key);
        let tick = self.tick();
        let part = &mut self.parts[partition_of(key)];
        // Fast path: an LWW write onto a packed LWW register.
        if let Ok(mut entry) = part.packed.find_entry(hash, |b| packed_key(b) == key) {
            if let Some((ts, value)) = packable(key, &record) {
                let block = entry.get_mut();
                let current = unpack(block);
                let changed = (ts, value) > (current.ts, current.value);
                // A change clears the synced flag; a write already known keeps it.
                let kept = if changed { PARTIAL } else { FLAGS };
                let meta = (packed_meta(block) & kept) | tick;
                if changed && block.len() == packed_len(key, value) {
                    // As long as the block (a value overwritten by one of the same length,
                    // the usual case of a register written again): rewritten in place, no
                    // allocation, in memory the lookup just brought into the cache.
                    repack(block, meta, ts, value);
                } else if changed {
                    let before = packed_size(block);
                    *block = pack(meta, key, ts, value);
                    self.bytes = (self.bytes + packed_size(block)).saturating_sub(before);
                } else {
                    set_packed_meta(block, meta);
                }
                return MergeOutcome {
                    changed,
                    was_present: true,
                    was_live: true,
                    is_live: true,
                };
            }
            // Another form: unpack and merge in full.
            let (block, _) = entry.remove();
            self.bytes = self.bytes.saturating_sub(packed_size(&block));
            let meta = (packed_meta(&block) & PARTIAL) | tick;
            let p = unpack(&block);
            let lww = Lww::new(p.ts, Box::from(p.value));
            let mut current = Record::new(p.ts, Some(Value::Lww(lww)));
            let changed = current.merge(record);
            let now_live = is_live(&current);
            self.insert_new(hash, meta, key, current);
            self.adjust_live(true, now_live);
            return MergeOutcome {
                changed,
                was_present: true,
                was_live: true,
                is_live: now_live,
            };
        }
        if let Ok(mut entry) = part.full.find_entry(hash, |e| &*e.key == key) {
            let e = entry.get_mut();
            e.meta = (e.meta & PARTIAL) | tick;
            let was_live = is_live(&e.record);
            let grown = if cheap_to_size(&record) {
                0
            } else {
                record.approx_size()
            };
            let changed = e.record.merge(record);
            let now_live = is_live(&e.record);
            if changed {
                if packable(key, &e.record).is_some() {
                    // Now a plain LWW register (e.g. a write newer than a tombstone): pack it.
                    let (e, _) = entry.remove();
                    self.bytes = self.bytes.saturating_sub(e.size);
                    self.insert_new(hash, e.meta, key, e.record);
                } else {
                    let before = e.size;
                    let after = e.resize(grown);
                    self.bytes = (self.bytes + after).saturating_sub(before);
                }
                self.adjust_live(was_live, now_live);
            }
            return MergeOutcome {
                changed,
                was_present: true,
                was_live,
                is_live: now_live,
            };
        }
        let now_live = is_live(&record);
        self.insert_new(hash, tick, key, record);
        self.adjust_live(false, now_live);
        MergeOutcome {
            changed: true,
            was_present: false,
            was_live: false,
            is_live: now_live,
        }
    }

    /// Inserts a record for a key in neither table, packed if it can be.
    fn insert_new(&mut self, hash: u64, meta: u32, key: &[u8], record: Record) {
        let hasher = &self.hasher;
        let part = &mut self.parts[partition_of(key)];
        if let Some((ts, value)) = packable(key, &record) {
            let block = pack(meta, key, ts, value);
            self.bytes += packed_size(&block);
            part.packed
                .insert_unique(hash, block, |b| hasher.hash_one(packed_key(b)));
        } else {
            let entry = FullEntry::new(meta, key, record);
            self.bytes += entry.size;
            part.full
                .insert_unique(hash, entry, |e| hasher.hash_one(&*e.key));
        }
    }

    /// Updates a full record of `key` in place with `f`, which must only move it up the
    /// lattice (e.g. an OR-set add applied directly instead of merging its delta) and add at
    /// most `grown` bytes. Returns `None` if the key has no full record (absent or a packed
    /// LWW register).
    pub fn update<R>(
        &mut self,
        key: &[u8],
        grown: usize,
        f: impl FnOnce(&mut Record) -> R,
    ) -> Option<(R, MergeOutcome)> {
        let hash = self.hash(key);
        let tick = self.tick();
        let entry = self.parts[partition_of(key)]
            .full
            .find_mut(hash, |e| &*e.key == key)?;
        self.changes += 1;
        entry.meta = (entry.meta & PARTIAL) | tick;
        let was_live = is_live(&entry.record);
        let result = f(&mut entry.record);
        let now_live = is_live(&entry.record);
        let before = entry.size;
        let after = entry.resize(grown);
        self.bytes = (self.bytes + after).saturating_sub(before);
        self.adjust_live(was_live, now_live);
        Some((
            result,
            MergeOutcome {
                changed: true,
                was_present: true,
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
        let removed = self.remove_record(key);
        if removed.is_some() {
            self.changes += 1;
        }
        removed
    }

    fn remove_record(&mut self, key: &[u8]) -> Option<Record> {
        let hash = self.hash(key);
        let part = &mut self.parts[partition_of(key)];
        if let Ok(entry) = part.packed.find_entry(hash, |b| packed_key(b) == key) {
            let (block, _) = entry.remove();
            self.bytes = self.bytes.saturating_sub(packed_size(&block));
            self.adjust_live(true, false);
            let p = unpack(&block);
            return Some(Record::new(
                p.ts,
                Some(Value::Lww(Lww::new(p.ts, Box::from(p.value)))),
            ));
        }
        let entry = part.full.find_entry(hash, |e| &*e.key == key).ok()?;
        let (e, _) = entry.remove();
        self.bytes = self.bytes.saturating_sub(e.size);
        self.adjust_live(is_live(&e.record), false);
        Some(e.record)
    }

    /// Removes every tombstone whose epoch is older than `before_ms` (physical ms). Returns
    /// the number removed.
    pub fn collect_tombstones(&mut self, before_ms: u64) -> usize {
        let mut freed = 0;
        let mut removed = 0;
        for part in self.parts.iter_mut() {
            part.full.retain(|e| {
                let drop = e.record.value.is_none() && e.record.epoch.physical_ms() < before_ms;
                if drop {
                    freed += e.size;
                    removed += 1;
                }
                !drop
            });
        }
        self.bytes = self.bytes.saturating_sub(freed);
        if removed > 0 {
            self.changes += 1;
        }
        removed
    }

    /// Removes `key` if it holds exactly a tombstone at `epoch` (a reclaimed delete);
    /// returns true if it did.
    pub fn remove_tombstone(&mut self, key: &[u8], epoch: Timestamp) -> bool {
        let is_it = matches!(self.get(key), Some(RecordRef::Full(r)) if r.value.is_none() && r.epoch == epoch);
        is_it && self.remove(key).is_some()
    }

    /// Number of keys with a live value.
    pub fn live_keys(&self) -> usize {
        self.live
    }

    /// Number of entries, tombstones included.
    pub fn len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| p.packed.len() + p.full.len())
            .sum()
    }

    /// Number of entries of partition `p`.
    pub fn partition_len(&self, p: usize) -> usize {
        self.parts
            .get(p)
            .map_or(0, |p| p.packed.len() + p.full.len())
    }

    /// True if the store holds no entries at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate bytes used.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// All entries, in no particular order (partition by partition).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], RecordRef<'_>)> {
        (0..PARTITIONS).flat_map(|p| self.iter_partition(p))
    }

    /// The entries of partition `p` (none if out of range), in no particular order.
    pub fn iter_partition(&self, p: usize) -> impl Iterator<Item = (&[u8], RecordRef<'_>)> {
        let part = self.parts.get(p);
        let packed = part
            .into_iter()
            .flat_map(|part| part.packed.iter())
            .map(|b| {
                let p = unpack(b);
                (
                    p.key,
                    RecordRef::Lww {
                        ts: p.ts,
                        value: p.value,
                    },
                )
            });
        let full = part
            .into_iter()
            .flat_map(|part| part.full.iter())
            .map(|e| (&*e.key, RecordRef::Full(&e.record)));
        packed.chain(full)
    }
}

/// A random seed for a store's hasher (so keys chosen by clients cannot be made to collide).
fn random_seed() -> u64 {
    use std::hash::{BuildHasher as _, RandomState};
    RandomState::new().hash_one(std::time::Instant::now())
}

#[cfg(test)]
mod tests;
