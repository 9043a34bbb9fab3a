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
//!   if the key is warm ([`Frequency`]: read more than [`PROMOTE_AFTER`] times while cold,
//!   within the window);
//! - a worker that never evicted answers misses at once (small datasets pay no round trip).
//!
//! Eviction runs in bounded steps ([`EVICT_STEP`] records at most, each chosen among
//! [`EVICT_SAMPLE`] sampled entries) before writes and after disk acknowledgements, from the
//! high watermark (the budget share) down to the low one ([`LOW_WATERMARK_PERCENT`]). When
//! nothing is evictable (everything dirty) writes keep succeeding up to
//! [`HARD_CEILING_FACTOR`] × the share while the core gossips early and the driver slows
//! client connections down; beyond it they get the out-of-memory error. Keys without disk
//! replicas (or a cluster without a disk tier) keep the plain budget: the error at the share.

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

/// A cold key is kept in RAM after a fetch (promoted) once it was fetched more than this
/// many times within the frequency window.
pub const PROMOTE_AFTER: u8 = 1;

/// Counters per row of the frequency sketch.
const SKETCH_WIDTH: usize = 1024;
/// Rows of the frequency sketch.
const SKETCH_ROWS: usize = 4;
/// Counts after which every counter is halved (the window, in fetches).
const SKETCH_WINDOW: u32 = 8 * SKETCH_WIDTH as u32;

/// A count-min sketch of how often keys were fetched from the disk tier, halved every
/// [`SKETCH_WINDOW`] counts (TinyLFU's reset): 4 KiB, no allocation per count. Minimal on
/// purpose, self-contained so a statistics module can replace it.
pub(crate) struct Frequency {
    rows: Box<[[u8; SKETCH_WIDTH]; SKETCH_ROWS]>,
    counted: u32,
}

impl Default for Frequency {
    fn default() -> Self {
        Frequency {
            rows: Box::new([[0; SKETCH_WIDTH]; SKETCH_ROWS]),
            counted: 0,
        }
    }
}

impl Frequency {
    /// Counts one fetch of the key with placement hash `hash`; returns its estimate after.
    pub(crate) fn count(&mut self, hash: u64) -> u8 {
        self.counted += 1;
        if self.counted >= SKETCH_WINDOW {
            self.counted = 0;
            for row in self.rows.iter_mut() {
                for c in row.iter_mut() {
                    *c /= 2;
                }
            }
        }
        let mut min = u8::MAX;
        for (i, row) in self.rows.iter_mut().enumerate() {
            let slot = &mut row[index(hash, i)];
            *slot = slot.saturating_add(1);
            min = min.min(*slot);
        }
        min
    }
}

/// The counter of `hash` in row `row`: 16 bits of the hash per row (rows are independent
/// enough for 1,024 counters).
fn index(hash: u64, row: usize) -> usize {
    ((hash >> (16 * row)) as usize) % SKETCH_WIDTH
}

/// A shard's tiering state (see the module docs).
pub(crate) struct Tiering {
    /// This worker evicted keys (since it started, or before: the node's marker).
    pub(crate) spilled: bool,
    /// Evicting down to the low watermark.
    evicting: bool,
    /// Per key, batches to disk replicas carrying it that are not yet acknowledged.
    unacked: Map<Blob, u32>,
    /// How often cold keys were fetched.
    frequency: Frequency,
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
            unacked: Map::with_hasher(hasher),
            frequency: Frequency::default(),
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
    pub fn declines_entropy_with(&self, peer: Replica) -> bool {
        self.tier.spilled && self.tracks_disk_acks(peer)
    }

    /// True if `op` must wait for its key's record from the disk tier: this worker spilled,
    /// the key is tiered, not in RAM (or only partially), and `op` needs its state.
    pub fn must_fetch<B: AsRef<[u8]>>(&self, op: &Op<B>) -> bool {
        if !self.tier.spilled || is_blind(op) {
            return false;
        }
        let key = op.key();
        let absent = match self.store.get(key) {
            None => true,
            Some(_) => self.store.is_partial(key),
        };
        absent && self.tiered(key)
    }

    /// The workers a record of `key` may be fetched from: its disk replicas and, while a
    /// view change settles, its replicas under the previous views (not this worker).
    pub fn fetch_targets(&self, key: &[u8]) -> Vec<Replica> {
        let me = self.config.me;
        let vector = self.view.vector(key);
        let mut out = Vec::new();
        self.view
            .view
            .for_each_replica(key_hash(key), Tier::Disk, vector.disk, |r| out.push(r));
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

    /// Merges a record fetched from the disk tier (`None`: none there) into RAM: the record
    /// is complete afterwards. Not logged, not gossiped (the disk tier holds it), and not
    /// counted as a new key. Returns whether to keep it in RAM after the ops waiting for it
    /// ran (the key is warm).
    pub fn merge_fetched(&mut self, key: &[u8], record: Option<Record>) -> bool {
        self.tier.disk_fetches += 1;
        if let Some(record) = record {
            self.hlc.observe(record.epoch);
            if let Some(lattice::Value::Lww(l)) = &record.value {
                self.hlc.observe(l.ts);
            }
            self.store.merge(key, record);
        }
        self.store.set_partial(key, false);
        let warm = self.tier.frequency.count(key_hash(key)) > PROMOTE_AFTER;
        if warm {
            self.tier.promotions += 1;
        }
        warm
    }

    /// After the ops waiting for a fetched key ran: drops it from RAM again unless it is
    /// warm (`keep`) or dirty.
    pub fn settle_fetched(&mut self, key: &[u8], keep: bool) {
        if !keep && self.evictable(key) {
            self.store.remove(key);
        }
    }

    /// Marks a record written blind to a key that was not in RAM as partial.
    pub(super) fn note_blind_write(&mut self, key: &[u8], was_absent: bool) {
        if was_absent && self.tier.spilled && self.tiered(key) {
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
        }
        self.maintain_memory();
    }

    /// True if this worker's changes to `key` may not all be durable on its disk replicas.
    fn is_dirty(&self, key: &[u8]) -> bool {
        self.changeset.contains_key(key)
            || self.tier.unacked.contains_key(key)
            || self.handoff.contains_key(key)
            || self.retiring.contains_key(key)
            || self.outbox.values().any(|q| q.contains(key))
    }

    /// True if `key` may be evicted: every change is on disk.
    fn evictable(&self, key: &[u8]) -> bool {
        if self.is_disk() {
            // Written through: the disk holds every record (keys being handed off are
            // read from disk too).
            return true;
        }
        !replication::is_metadata_key(key) && self.tiered(key) && !self.is_dirty(key)
    }

    /// True if the store is above its budget share with nothing evictable: the core should
    /// gossip now and the driver slow writers down.
    pub fn memory_pressure(&self) -> bool {
        self.tier.stuck && self.store.bytes() > self.config.memory_budget
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
        let mut evicted = 0;
        while self.store.bytes() > low && evicted < EVICT_STEP {
            if self.evict_one() {
                evicted += 1;
            } else {
                misses += 1;
                if misses >= EVICT_MISSES {
                    break;
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
    /// evictable one; false if the sample had none.
    fn evict_one(&mut self) -> bool {
        let mut victim: Option<(u32, Blob)> = None;
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
                if older && self.evictable(key) {
                    victim = Some((info.age, Box::from(key)));
                }
                true
            });
        }
        let Some((_, key)) = victim else {
            return false;
        };
        self.store.remove(&key);
        self.tier.evictions += 1;
        if !self.is_disk() {
            // The log must not bring it back at a restart (over the budget, and behind
            // a newer copy on disk).
            self.log_drop(&key);
            self.tier.spilled = true;
        }
        true
    }
}
