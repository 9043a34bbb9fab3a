//! Tiering: a memory-tier shard as a recency cache over the disk tier, and the recency
//! eviction of a disk-tier shard's cache.
//!
//! A memory-tier worker holds the keys whose vector also has disk replicas as a *cache*:
//! above its share of the memory budget it *evicts* (demotes) records by approximate LRU,
//! but only *clean* ones — records whose every change this worker made has been
//! acknowledged durably by the key's disk replicas (nothing in the changeset or the outbox,
//! no batch to a disk replica unacknowledged, no hand-off pending). Nothing about a cold key
//! stays behind: no per-key metadata, no change of its replication vector.
//!
//! Once it has evicted anything (it is *spilled*), the worker no longer knows every key:
//! - a write that needs no current state (an LWW put, an unconditional assign) to a key not
//!   in RAM is merged into an empty local state and the record marked *partial* (it holds
//!   only the deltas written since);
//! - any other op on a key not in RAM or partial first fetches the key's record from a disk
//!   replica (the core's `tier` module), merges it, then runs; the record stays in RAM only
//!   if the key is warm ([`Doorkeeper`]: fetched a second time within the window), and a
//!   promotion evicts like a write, so reads keep the store within its budget too;
//! - a worker that never evicted answers misses at once (small datasets pay no round trip).
//!
//! Eviction runs in bounded steps ([`EVICT_STEP`] records at most, each chosen among
//! [`EVICT_SAMPLE`] sampled entries) before writes and after disk acknowledgements, from the
//! high watermark (the budget share) down to the low one ([`LOW_WATERMARK_PERCENT`]). When
//! nothing is evictable (everything dirty) writes keep succeeding up to
//! [`HARD_CEILING_FACTOR`] × the share while the core gossips early and the driver slows
//! client connections down; beyond it they get the out-of-memory error. Keys without disk
//! replicas (or a cluster without a disk tier) keep the plain budget: the error at the share.
//!
//! How a record gets to the disk tier depends on the node's `disk_copy` setting. With
//! `every_write` (write-through) every change is gossiped to the key's disk replicas, so a
//! record is clean once those batches are acknowledged. With `on_eviction` (spill) live
//! values stay in RAM and the write-ahead log; a record is *synced* (the store's flag,
//! cleared by every change) once the disk replicas acknowledged it as it is, and only a
//! synced record is evicted. Evicting an unsynced one first *demotes* it: its whole record
//! goes to its disk replicas in the next gossip round (the eviction step picks it by LRU
//! like any victim), and it is evicted when they acknowledge it, unless written since.
//! Deletes still reach the disk replicas at once (an older copy there must not come back
//! when the tombstone is reclaimed), and so do hand-offs.

use bytes::Bytes;
use lattice::{Blob, Record};
use placement::{key_hash, replication, Replica, Tier};

use super::{Map, Shard};
use crate::op::{Condition, Op};

/// Eviction stops once the store is at or below this percentage of the budget share.
pub const LOW_WATERMARK_PERCENT: usize = 90;

/// Most records one eviction step removes.
pub const EVICT_STEP: usize = 32;

/// Entries sampled to pick one record to evict (Redis's `maxmemory-samples` is 5; more
/// samples approximate LRU more closely, 16 is close to exact at a few hundred ns).
pub const EVICT_SAMPLE: usize = 16;

/// Samples without an evictable record before a step gives up (everything dirty).
const EVICT_MISSES: usize = 4;

/// Writes to keys with disk replicas are refused only above this many times the share.
pub const HARD_CEILING_FACTOR: usize = 2;

/// Most keys being demoted (queued or in flight to the disk tier) at once.
const MAX_DEMOTING: usize = 1 << 16;

/// What one eviction step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Evicted {
    /// A record left RAM.
    One,
    /// A record was queued for the disk tier, to leave RAM once it is acknowledged.
    Demoted,
    /// The sample had nothing to evict or demote.
    Nothing,
}

/// Bits of the fetch doorkeeper (128 KiB per worker).
const DOORKEEPER_BITS: usize = 1 << 20;
/// Bits set per fetched key.
const DOORKEEPER_HASHES: usize = 4;
/// Fetches after which the doorkeeper is cleared (the window): at this fill a key fetched
/// for the first time looks seen before with probability ≈ (1 − e^(−4·⅛))⁴ ≈ 2.4 %.
const DOORKEEPER_WINDOW: u32 = (DOORKEEPER_BITS / 8) as u32;

/// Which cold keys were fetched from the disk tier within the window: a Bloom filter
/// (TinyLFU's doorkeeper), cleared every [`DOORKEEPER_WINDOW`] fetches. A key fetched a
/// second time within the window is *warm* and kept in RAM (promoted); a key read once (a
/// scan) is not. Bits instead of counters so that a window of 128k fetches stays accurate
/// in 128 KiB: a count-min sketch of a few KiB saturates after a few thousand distinct keys
/// and then promotes everything a scan reads.
pub(crate) struct Doorkeeper {
    bits: Box<[u64]>,
    fetches: u32,
}

impl Default for Doorkeeper {
    fn default() -> Self {
        Doorkeeper {
            bits: vec![0; DOORKEEPER_BITS / 64].into_boxed_slice(),
            fetches: 0,
        }
    }
}

impl Doorkeeper {
    /// Notes one fetch of the key with placement hash `hash`; true if it was (probably)
    /// fetched before within the window.
    pub(crate) fn fetched(&mut self, hash: u64) -> bool {
        self.fetches += 1;
        if self.fetches > DOORKEEPER_WINDOW {
            self.fetches = 1;
            self.bits.fill(0);
        }
        let mut seen = true;
        // Double hashing (Kirsch–Mitzenmacher): bit i at h1 + i·h2.
        let (h1, h2) = (hash as u32 as usize, ((hash >> 32) as usize) | 1);
        for i in 0..DOORKEEPER_HASHES {
            let bit = h1.wrapping_add(i.wrapping_mul(h2)) % DOORKEEPER_BITS;
            let (word, mask) = (bit / 64, 1u64 << (bit % 64));
            seen &= self.bits[word] & mask != 0;
            self.bits[word] |= mask;
        }
        seen
    }
}

/// A shard's tiering state (see the module docs).
pub(crate) struct Tiering {
    /// This worker evicted keys (since it started, or before: the node's marker).
    pub(crate) spilled: bool,
    /// Evicting down to the low watermark.
    evicting: bool,
    /// Per key, batches to disk replicas carrying it that are not yet acknowledged.
    unacked: Map<Blob, u32>,
    /// Keys being demoted (`on_eviction`), with their size when queued.
    demoting: Map<Blob, usize>,
    /// Sum of the sizes in `demoting`: RAM that will be freed once they are acknowledged.
    demoting_bytes: usize,
    /// Records demoted.
    pub(crate) demotions: u64,
    /// Demotions were queued since the last gossip round.
    queued: bool,
    /// Which cold keys were fetched recently.
    doorkeeper: Doorkeeper,
    /// Records evicted.
    pub(crate) evictions: u64,
    /// Keys fetched from the disk tier.
    pub(crate) disk_fetches: u64,
    /// Fetched keys kept in RAM.
    pub(crate) promotions: u64,
    /// The last eviction step found nothing evictable above the budget.
    pub(crate) stuck: bool,
}

impl Tiering {
    pub(crate) fn new(hasher: foldhash::fast::FixedState) -> Tiering {
        Tiering {
            spilled: false,
            evicting: false,
            unacked: Map::with_hasher(hasher.clone()),
            demoting: Map::with_hasher(hasher),
            demoting_bytes: 0,
            demotions: 0,
            queued: false,
            doorkeeper: Doorkeeper::default(),
            evictions: 0,
            disk_fetches: 0,
            promotions: 0,
            stuck: false,
        }
    }
}

/// True if `op` can run on a key without its current state: a write whose result does not
/// depend on it (an LWW put, an unconditional assign).
pub(crate) fn is_blind<B: AsRef<[u8]>>(op: &Op<B>) -> bool {
    matches!(
        op,
        Op::Put {
            value: lattice::Value::Lww(_),
            ..
        } | Op::Assign {
            condition: Condition::Always,
            ..
        }
    )
}

impl Shard {
    /// True if this worker has evicted keys (it is a cache over the disk tier since).
    pub fn spilled(&self) -> bool {
        self.tier.spilled
    }

    /// Marks this worker spilled (at start, when the node evicted before it restarted: its
    /// log no longer holds every key it replicates).
    pub fn mark_spilled(&mut self) {
        self.tier.spilled = true;
    }

    /// True if `key` is cached in RAM over disk replicas: this is a memory-tier shard and
    /// the key's vector has replicas in a disk tier the view has.
    pub fn tiered(&self, key: &[u8]) -> bool {
        !self.is_disk()
            && self.view.view.tier_size(Tier::Disk) > 0
            && self.view.vector(key).disk.global > 0
    }

    /// True if this memory-tier worker copies live values to the disk tier only when it
    /// evicts them (`disk_copy = on_eviction`, see the module docs).
    pub(crate) fn copies_on_eviction(&self) -> bool {
        self.config.disk_copy == crate::config::DiskCopy::OnEviction && !self.is_disk()
    }

    /// True if a changeset entry of `key` (`record`) skips the disk replica `to` now: this
    /// worker copies on eviction, the entry is a live value, not a demotion or a hand-off.
    pub(super) fn defers_to_eviction(&self, key: &[u8], record: &Record, to: Replica) -> bool {
        self.copies_on_eviction()
            && record.value.is_some()
            && !self.tier.demoting.contains_key(key)
            && !self.handoff.contains_key(key)
            && self.tracks_disk_acks(to)
    }

    /// A demotion's changeset entry was taken for gossip without reaching a disk replica
    /// (the key has none in this view): it is no longer being demoted.
    pub(super) fn demotion_unsent(&mut self, key: &[u8]) {
        if let Some(size) = self.tier.demoting.remove(key) {
            self.tier.demoting_bytes = self.tier.demoting_bytes.saturating_sub(size);
        }
    }

    /// True if `to` is a disk-tier worker and this a memory-tier one: batches to it are
    /// sent durable and tracked (see [`Shard::sent_to_disk`]).
    pub fn tracks_disk_acks(&self, to: Replica) -> bool {
        !self.is_disk()
            && self
                .view
                .view
                .node(to.node)
                .is_some_and(|n| n.tier == Tier::Disk)
    }

    /// True if anti-entropy with `peer` is skipped: this memory-tier worker spilled and
    /// `peer` is a disk-tier worker. Its digests cover only what it caches, so they would
    /// differ from the disk replica's forever, and a repair would pull every evicted
    /// record back into RAM. What it wrote reaches the disk tier by acknowledged gossip
    /// (a record is evicted only once acknowledged durably), and what it lacks is fetched.
    ///
    /// A worker that copies on eviction declines it always: its disk replicas hold only
    /// what it evicted, by design.
    pub fn declines_entropy_with(&self, peer: Replica) -> bool {
        (self.tier.spilled || self.copies_on_eviction()) && self.tracks_disk_acks(peer)
    }

    /// True if `op` must wait for its key's record from the disk tier: this worker spilled,
    /// the key is tiered, not in RAM (or only partially), and `op` needs its state.
    pub fn must_fetch<B: AsRef<[u8]>>(&self, op: &Op<B>) -> bool {
        if is_blind(op) {
            return false;
        }
        let key = op.key();
        let backed = self.backed(key).is_some();
        if !backed && !self.tier.spilled {
            return false;
        }
        let absent = match self.store.get(key) {
            None => true,
            Some(_) => self.store.is_partial(key),
        };
        absent && (backed || self.tiered(key))
    }

    /// True if a record of `key` fetched for a read comes from the disk tier too (not only
    /// from the backing store).
    pub fn fetches_from_disk(&self, key: &[u8]) -> bool {
        self.tier.spilled && self.tiered(key)
    }

    /// The workers a record of `key` may be fetched from: its disk replicas and, while a
    /// view change settles, its replicas under the previous views (not this worker).
    pub fn fetch_targets(&self, key: &[u8]) -> Vec<Replica> {
        let me = self.config.me;
        let vector = self.view.vector(key);
        let mut out = Vec::new();
        self.view.view.for_each_replica(
            self.view.view.key_hash(key),
            Tier::Disk,
            vector.disk,
            |r| out.push(r),
        );
        if let Some(views) = self.settling() {
            for view in views {
                for r in view.replicas(key) {
                    if r != me && !out.contains(&r) {
                        out.push(r);
                    }
                }
            }
        }
        out
    }

    /// Merges a record fetched from the disk tier (`from_disk`) or the backing store
    /// (`None`: none there) into RAM. Not logged, not gossiped (those tiers hold it), and
    /// not counted as a new key. The record is complete afterwards unless the backing store
    /// could not be read (`complete` false: it stays partial). Returns whether to keep it
    /// in RAM after the ops waiting for it ran (the key is warm, backed, or was cached).
    pub fn merge_fetched(
        &mut self,
        key: &[u8],
        record: Option<Record>,
        from_disk: bool,
        complete: bool,
    ) -> bool {
        if from_disk {
            self.tier.disk_fetches += 1;
        }
        // A partial record was cached (written recently): completed, it stays.
        let cached = self.store.get(key).is_some();
        if let Some(record) = record {
            self.hlc.observe(record.epoch);
            if let Some(lattice::Value::Lww(l)) = &record.value {
                self.hlc.observe(l.ts);
            }
            self.index_deadline(key, &record);
            self.store.merge(key, record);
        }
        self.store.set_partial(key, !complete);
        if from_disk && complete && !cached && self.copies_on_eviction() {
            // RAM now holds exactly what the disk tier has: evictable without a demotion.
            self.store.set_synced(key);
        }
        // A backed key read through is a cache fill: it stays (eviction makes room).
        let backed = self.backed(key).is_some();
        let warm = backed || self.tier.doorkeeper.fetched(key_hash(key));
        if warm && !cached {
            self.tier.promotions += 1;
        }
        warm || cached
    }

    /// After the ops waiting for a fetched key ran: drops it from RAM again unless it is
    /// warm (`keep`) or dirty; a promoted key makes room for itself by eviction.
    pub fn settle_fetched(&mut self, key: &[u8], keep: bool) {
        if keep {
            self.maintain_memory();
        } else if self.evictable(key) {
            self.store.remove(key);
        }
    }

    /// Marks a record written blind to a key that was not in RAM as partial.
    pub(super) fn note_blind_write(&mut self, key: &[u8], was_absent: bool) {
        if was_absent && ((self.tier.spilled && self.tiered(key)) || self.backed(key).is_some()) {
            self.store.set_partial(key, true);
        }
    }

    /// Counts `keys` as sent to a disk replica in a durable batch.
    pub fn sent_to_disk(&mut self, keys: &[Bytes]) {
        for key in keys {
            match self.tier.unacked.get_mut(&key[..]) {
                Some(n) => *n += 1,
                None => {
                    self.tier.unacked.insert(Box::from(&key[..]), 1);
                }
            }
        }
    }

    /// A durable batch to a disk replica was answered (acknowledged, or failed: its keys
    /// are then requeued, and dirty through the outbox). Evicts if over the budget.
    pub fn disk_answered(&mut self, keys: &[Bytes]) {
        for key in keys {
            if let Some(n) = self.tier.unacked.get_mut(&key[..]) {
                *n -= 1;
                if *n == 0 {
                    self.tier.unacked.remove(&key[..]);
                }
            }
            if let Some(size) = self.tier.demoting.remove(&key[..]) {
                self.tier.demoting_bytes = self.tier.demoting_bytes.saturating_sub(size);
                // Chosen by LRU when it was demoted: evicted now, unless written since (or
                // the batch failed: then it is queued again, dirty until acknowledged).
                if self.tier.evicting && self.evictable(key) {
                    self.evict(key);
                }
            }
        }
        self.maintain_memory();
    }

    /// True if this worker's changes to `key` may not all be durable on its disk replicas.
    fn is_dirty(&self, key: &[u8]) -> bool {
        self.backing_dirty(key)
            || self.changeset.contains_key(key)
            || self.tier.unacked.contains_key(key)
            || self.handoff.contains_key(key)
            || self.retiring.contains_key(key)
            || self.outbox.values().any(|q| q.contains(key))
    }

    /// True if `key` may be evicted: every change is on disk.
    pub(super) fn evictable(&self, key: &[u8]) -> bool {
        if self.is_disk() {
            // Written through: the disk holds every record (keys being handed off are
            // read from disk too).
            return true;
        }
        !replication::is_metadata_key(key)
            && (self.tiered(key) || self.backed(key).is_some())
            && !self.is_dirty(key)
            && (self.store.is_synced(key) || !(self.copies_on_eviction() && self.tiered(key)))
    }

    /// True if `key` would be evictable once demoted: copied on eviction, clean, and its
    /// record not on the disk tier as it is.
    fn demotable(&self, key: &[u8], synced: bool) -> bool {
        !synced
            && self.copies_on_eviction()
            && self.tiered(key)
            && !replication::is_metadata_key(key)
            && !self.tier.demoting.contains_key(key)
            && !self.is_dirty(key)
    }

    /// Queues `key`'s whole record for its disk replicas (the next gossip round) and marks
    /// it synced: evicted once they acknowledge it, unless written before.
    fn demote(&mut self, key: &[u8]) {
        let Some(record) = self.store.get(key).map(|r| r.to_record()) else {
            return;
        };
        let size = self.store.size_of(key);
        self.changeset.insert(Box::from(key), record);
        self.store.set_synced(key);
        self.tier.demoting.insert(Box::from(key), size);
        self.tier.demoting_bytes += size;
        self.tier.demotions += 1;
        self.tier.queued = true;
    }

    /// Removes `key` from RAM (its every change is on disk).
    fn evict(&mut self, key: &[u8]) {
        self.store.remove(key);
        self.tier.evictions += 1;
        if !self.is_disk() {
            // The log must not bring it back at a restart (over the budget, and behind
            // a newer copy on disk).
            self.log_drop(key);
            self.tier.spilled = true;
        }
    }

    /// True if the store is above its budget share with nothing evictable: the core should
    /// gossip now and the driver slow writers down.
    ///
    /// Demotions in flight free RAM once acknowledged, so they alone do not slow writers
    /// down — until the store is halfway from the budget to the hard ceiling: past it,
    /// writers wait for the acknowledgements instead of running into the ceiling's error.
    pub fn memory_pressure(&self) -> bool {
        let bytes = self.store.bytes();
        let budget = self.config.memory_budget;
        let halfway = budget.saturating_add(self.hard_ceiling().saturating_sub(budget) / 2);
        bytes > budget && (self.tier.stuck || (!self.tier.demoting.is_empty() && bytes > halfway))
    }

    /// True if records were demoted since the last gossip round: the core should gossip
    /// now, so they leave RAM soon.
    pub fn demotions_queued(&self) -> bool {
        self.tier.queued
    }

    /// A gossip round took the changeset (and with it the demotions queued).
    pub(super) fn demotions_taken(&mut self) {
        self.tier.queued = false;
    }

    /// Bytes beyond which writes of tiered keys are refused.
    pub(super) fn hard_ceiling(&self) -> usize {
        self.config
            .memory_budget
            .saturating_mul(HARD_CEILING_FACTOR)
    }

    /// Evicts while the store is above its budget share, down to the low watermark, at
    /// most [`EVICT_STEP`] records per call.
    pub fn maintain_memory(&mut self) {
        let budget = self.config.memory_budget;
        let bytes = self.store.bytes();
        if bytes > budget {
            self.tier.evicting = true;
        }
        if !self.tier.evicting {
            return;
        }
        let low = budget / 100 * LOW_WATERMARK_PERCENT;
        let mut misses = 0;
        let mut done = 0;
        // Records being demoted will leave: count them as gone, so a step demotes only
        // what is still needed.
        while self.store.bytes().saturating_sub(self.tier.demoting_bytes) > low && done < EVICT_STEP
        {
            match self.evict_one() {
                Evicted::One | Evicted::Demoted => done += 1,
                Evicted::Nothing => {
                    misses += 1;
                    if misses >= EVICT_MISSES {
                        break;
                    }
                }
            }
        }
        self.tier.stuck = misses >= EVICT_MISSES;
        if self.store.bytes() <= low || self.store.is_empty() {
            self.tier.evicting = false;
            self.tier.stuck = false;
        }
    }

    /// Samples entries from a random partition and evicts the least recently used
    /// evictable one, or demotes it if it must reach the disk tier first.
    fn evict_one(&mut self) -> Evicted {
        let mut victim: Option<(u32, Blob)> = None;
        let room = self.tier.demoting.len() < MAX_DEMOTING;
        let start = self.rng.usize(..);
        let first = self.rng.usize(..store::PARTITIONS);
        let mut left = EVICT_SAMPLE;
        // Small stores have empty partitions: look at the next ones (an empty one costs a
        // length check), at most every partition once.
        for step in 0..store::PARTITIONS {
            if left == 0 {
                break;
            }
            let p = (first + step) % store::PARTITIONS;
            self.store.sample(p, start, left, |key, info| {
                left -= 1;
                let older = victim.as_ref().is_none_or(|(age, _)| info.age > *age);
                if older && (self.evictable(key) || (room && self.demotable(key, info.synced))) {
                    victim = Some((info.age, Box::from(key)));
                }
                true
            });
        }
        let Some((_, key)) = victim else {
            return Evicted::Nothing;
        };
        if self.evictable(&key) {
            self.evict(&key);
            Evicted::One
        } else {
            self.demote(&key);
            Evicted::Demoted
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_doorkeeper_promotes_keys_fetched_twice_and_few_of_a_scan() {
        let mut d = Doorkeeper::default();
        let hash = |i: u64| key_hash(format!("key:{i}").as_bytes());
        // A scan of as many distinct keys as the window holds: ≈ 2.4 % false positives
        // at the end of the window, fewer on average.
        let scan = u64::from(DOORKEEPER_WINDOW);
        let warm = (0..scan).filter(|&i| d.fetched(hash(i))).count();
        assert!(
            warm < scan as usize / 50,
            "{warm} of {scan} scanned keys looked warm"
        );
        // A key fetched again within the window is warm.
        let mut d = Doorkeeper::default();
        assert!(!d.fetched(hash(7)));
        assert!(d.fetched(hash(7)));
        // The window clears it.
        for i in 0..scan {
            d.fetched(hash(1_000_000 + i));
        }
        assert!(
            !d.fetched(hash(7)),
            "the window did not clear the doorkeeper"
        );
    }
}
