//! One worker's keys, and everything done to them.
//!
//! A [`Shard`] is owned by exactly one worker and does no network or log I/O: the replica
//! core (`crate::core`) feeds it operations, records from other replicas, views and
//! anti-entropy digests, and ships what it returns. Every decision about types, epochs,
//! limits, placement and replication of a key is made here; time and randomness come from
//! an injected [`Clock`] and a seeded random generator, so the simulation replays a run
//! from its seed. Its storage engines (the memory map; the LSM of a disk-tier shard) are
//! local and synchronous, part of its state.
//!
//! # Layout
//! - this module: the shard's state, placement (which replicas hold a key) and counters;
//! - `ops`: executing client operations;
//! - `sync`: replication — the changeset and gossip, hand-off, view changes,
//!   anti-entropy digests and repair;
//! - `journal`: which changes go to the write-ahead log, and replaying them;
//! - `disk`: disk-tier shards — the disk engine behind the memory store as a
//!   write-through cache;
//! - `tier`: tiering — a memory-tier shard as a recency cache over the disk tier (eviction
//!   of clean records, partial records, fetches), and the disk cache's recency eviction.

mod backing;
mod disk;
mod entropy;
mod exec;
mod expiry;
mod journal;
// ---- lists (helper B) ----
mod keyspace;
mod lists;
mod meta;
mod ops;
mod script;
mod strings;
mod sync;
mod tier;
mod tombstones;
mod views;
// Redis hashes and sorted sets.
mod coll;
mod hash;
mod zset;
mod zset_parse;
// Keyspace notifications.
mod notify;

use std::sync::Arc;

pub use expiry::EXPIRE_STEP_KEYS;
pub(crate) use strings::{parse_float, parse_strict_i64};
// Redis hashes and sorted sets.
pub(crate) use hash::{parse_hash, HashCmd};
pub(crate) use zset_parse::{parse_zset, ZsetCmd};

use foldhash::fast::FixedState;
use lattice::{Blob, Hlc, Record};
use placement::{Replica, Tier};
use store::MemStore;

use crate::clock::Clock;
use crate::config::Limits;
use crate::view::ViewState;

pub use crate::codec::GossipBatch;
pub use backing::{BackingStats, Taken};
pub use entropy::{bucket_of, AntiEntropyDigest, RepairCursor, BUCKETS};
pub use keyspace::{KeyFilter, ScanPage};
pub use script::{install_script_runner, ScriptCall, ScriptRunner};
pub use sync::Outgoing;
pub use tier::{EVICT_STEP, HARD_CEILING_FACTOR, LOW_WATERMARK_PERCENT};
pub(crate) use views::place_by_rule;

/// Hash maps of a shard: seeded from the shard's seed, so their iteration order (which
/// decides the order batches go out in) is the same in every run of a simulation seed.
pub(crate) type Map<K, V> = hashbrown::HashMap<K, V, FixedState>;

/// A set of keys with a seeded hasher (see [`Map`]).
pub(crate) type KeySet = hashbrown::HashSet<Blob, FixedState>;

/// The clock a shard reads (shared with its core; `Send` so a shard can be built on one
/// thread and run on its worker's).
pub type SharedClock = Arc<dyn Clock + Send + Sync>;

/// A key being handed off: which record went out (its generation: every new record
/// queued for hand-off gets a new one) and which replicas acknowledged that record.
#[derive(Clone, Debug, Default)]
pub(crate) struct Handoff {
    pub(crate) generation: u64,
    pub(crate) acked: Vec<Replica>,
}

/// What a shard did, recorded only when [`Shard::audit`] is on: the deterministic
/// simulation checks every write it made against the cluster's final state.
#[derive(Clone, Debug, PartialEq)]
// Recorded only in simulation runs, where a write's full context matters more than size.
#[allow(clippy::large_enum_variant)]
pub enum Audit {
    /// A write this shard executed.
    Write {
        /// The key.
        key: bytes::Bytes,
        /// The op.
        op: crate::op::Op<bytes::Bytes>,
        /// The key's record here before it.
        before: Option<Record>,
        /// The key's record here after it.
        after: Option<Record>,
        /// The writer id it used (OR-set dots, counter entries).
        actor: u64,
        /// This worker replicated the key (else the write reached it under an old view).
        replica: bool,
        /// Its result.
        result: crate::op::OpResult,
    },
    /// A handed-off key dropped here.
    Dropped {
        /// The key.
        key: bytes::Bytes,
        /// Its record when dropped.
        record: Record,
    },
    /// A tombstone reclaimed here.
    Reclaimed {
        /// The key.
        key: bytes::Bytes,
        /// The tombstone's epoch.
        epoch: lattice::Timestamp,
    },
}

/// Where a request for a key should run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// This worker holds a replica.
    Local,
    /// Another worker holds one: a random one among the key's replicas on this node if
    /// there are any, else among all its replicas.
    Remote(Replica),
}

/// Static settings of a shard.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// Which replica this shard is: its node and worker index.
    pub me: Replica,
    /// Size limits.
    pub limits: Limits,
    /// This worker's share of the node's memory budget, in bytes.
    pub memory_budget: usize,
    /// Most changeset keys before the worker should gossip early.
    pub max_changeset_keys: usize,
    /// After a view change, how long reads that miss also ask the previous view's replicas
    /// (keys may still be on their way here), in ms.
    pub settle_ms: u64,
    /// How long a reclaimed delete is remembered, in ms (see `tombstones`).
    pub tombstone_memory_ms: u64,
    /// When a memory-tier shard copies live values to disk replicas (see `tier`).
    pub disk_copy: crate::config::DiskCopy,
}

/// Counters reported in status output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardStats {
    /// Keys with a live value held by this worker.
    pub live_keys: u64,
    /// Live keys for which this worker is the primary replica (summed for DBSIZE).
    pub primary_keys: u64,
    /// Approximate bytes of stored data.
    pub bytes: u64,
    /// Operations executed.
    pub requests: u64,
    /// Gossip entries sent to other workers.
    pub gossip_sent: u64,
    /// Gossip entries merged from other workers.
    pub gossip_received: u64,
    /// Keys handed to new owners after view changes.
    pub handed_off: u64,
    /// Operations refused because durable storage failed (a metric).
    pub storage_errors: u64,
    /// Entries stored, of every kind: live values, tombstones, metadata.
    pub stored_keys: u64,
    /// Replication not yet sent: changeset and outbox entries (including batches that
    /// failed and were requeued), and keys kept only until their hand-off is delivered.
    pub pending_replication: u64,
    /// Keys kept only until every new replica acknowledged their hand-off.
    pub handoff_keys: u64,
    /// Records evicted from RAM (memory tier: demoted to the disk tier; disk tier: dropped
    /// from the cache).
    pub evictions: u64,
    /// Keys fetched from the disk tier by a memory-tier worker (reads of evicted keys).
    pub disk_fetches: u64,
    /// Records a memory-tier worker copying on eviction sent to the disk tier to evict them.
    pub demotions: u64,
}

/// One worker's keys, clock, view of the cluster and outgoing replication.
pub struct Shard {
    /// Static settings.
    config: ShardConfig,
    /// The writer id of this worker's OR-set dots and counter entries: random per process
    /// start, so a restarted worker never reuses an old incarnation's dots — and replaced
    /// whenever the worker drops keys it handed off (see [`Shard::delivered`]), so a key
    /// that comes back never reuses them either. (Its timestamps' writer id stays the one
    /// `hlc` started with.)
    actor: u64,
    /// Hybrid logical clock; observes every epoch merged here, so a delete or write issued
    /// here is newer than everything this worker has seen.
    hlc: Hlc,
    /// Wall clock (timestamps) and monotonic clock (windows, rate limits).
    clock: SharedClock,
    /// The latest wall-clock reading (ms) taken through `clock_ms`: a client timestamp
    /// within the skew bound of it needs no new reading (see `check_client_timestamp`).
    last_wall_ms: std::cell::Cell<u64>,
    /// Set between [`Shard::begin_batch`] and [`Shard::end_batch`]: the wall clock is read once
    /// per batch of a connection's requests (as Redis reads it once per event-loop turn),
    /// then kept here. `None` until the batch's first reading.
    batch_wall_ms: std::cell::Cell<Option<Option<u64>>>,
    /// Randomness (replica choice), seeded.
    rng: fastrand::Rng,
    /// The keys.
    store: MemStore,
    /// Where keys live now.
    view: Arc<ViewState>,
    /// Where keys may have been before the last view change, while they may still be
    /// moving (see `settle_ms`): the previous view, and the current view without this node
    /// (where a key that moved here lived — the previous view of a node that just joined
    /// is only itself).
    previous: Vec<Arc<ViewState>>,
    /// Until when (monotonic ms) reads that miss also ask `previous`'s replicas.
    settling_until_ms: u64,
    /// True if the current view has a single worker in all (every key is local).
    single_worker: bool,
    /// True if this worker is the memory tier's only worker: every key with a memory
    /// replica has it here (as in `latticekv local`, a memory node beside a disk node).
    sole_memory: bool,
    /// Deltas of replicated keys written here since the last gossip, merged per key; also
    /// full records of keys being handed off.
    changeset: Map<Blob, Record>,
    /// Keys with a deadline, by deadline (ms since the epoch), for background reclamation
    /// (`expiry`): one entry per key (`expiry_of`), possibly stale (the key was rewritten
    /// without one since), checked when due.
    expiries: std::collections::BTreeSet<(u64, Blob)>,
    /// The deadline each key of `expiries` is indexed under.
    expiry_of: Map<Blob, u64>,
    /// Keys whose full record must go to one specific new replica (re-replication after a
    /// view change), sent with the next gossip round.
    outbox: Map<Replica, KeySet>,
    /// Per partition, the view it has not yet been compared against since the rings
    /// changed (`None`: up to date); see `views`.
    reconcile: Vec<Option<Arc<ViewState>>>,
    /// How many entries of `reconcile` are `Some` (asked between every two requests).
    reconcile_waiting: usize,
    /// Keys this worker no longer replicates: a key is dropped once every current replica
    /// has acknowledged holding its current record durably.
    handoff: Map<Blob, Handoff>,
    /// Numbers hand-offs: an acknowledgement counts only for the record it carried.
    next_handoff: u64,
    /// Live user keys this worker is primary for.
    primary_keys: u64,
    /// Live metadata keys stored here (excluded from user key counts).
    metadata_keys: u64,
    /// Counters.
    requests: u64,
    gossip_sent: u64,
    gossip_received: u64,
    handed_off: u64,
    /// The disk engine of a disk-tier shard (the memory store is then its cache).
    disk: Option<disk::DiskSide>,
    /// Tiering: eviction, partial records, fetch counters.
    tier: tier::Tiering,
    /// Keys under a write policy: dirty keys, batches, the mode.
    backing: backing::Backing,
    /// Changes waiting to be written to the write-ahead log (`None`: no log).
    journal: Option<crate::codec_journal::JournalBuf>,
    /// Why the write-ahead log refuses appends, while it does: writes are refused too.
    journal_failure: Option<String>,
    /// Operations refused because durable storage failed.
    storage_errors: u64,
    /// Tombstones being reclaimed: the epoch, and until when (monotonic ms) the mark holds.
    retiring: Map<Blob, (lattice::Timestamp, u64)>,
    /// Deletes reclaimed recently, by key hash: the tombstone's epoch, and until when
    /// (monotonic ms) it is remembered (see `tombstones`).
    reclaimed: Map<u64, (lattice::Timestamp, u64)>,
    /// What this shard did, while auditing is on.
    audit: Option<Vec<Audit>>,
    /// Testing only: drop a handed-off key after the first replica acknowledged it
    /// instead of all of them (a deliberate break that the simulation and an integration
    /// test must catch).
    break_handoff: bool,
    /// The node's `notify-keyspace-events` (`None`: never notify, as in simulations).
    keyspace_flags: Option<Arc<crate::notify::Flags>>,
    /// Keyspace events recorded and not yet taken by the worker (see `notify`).
    key_events: Vec<crate::notify::KeyEvent>,
    /// Running a quiet op ([`crate::ack::Ack::quiet`]): no keyspace events.
    muted: bool,
    /// The node's running scripts, which `SCRIPT KILL` stops (`None`: not registered).
    script_runs: Option<Arc<crate::script::Runs>>,
}

impl Shard {
    /// A shard with an empty store. Everything random about it (its writer id, replica
    /// choices, hash-map order) follows from `seed`.
    pub fn new(config: ShardConfig, view: Arc<ViewState>, seed: u64, clock: SharedClock) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let actor = rng.u64(..);
        let hasher = FixedState::with_seed(rng.u64(..));
        let single_worker = is_single_worker(&view, config.me);
        let sole_memory = is_sole_memory_worker(&view, config.me);
        Shard {
            config,
            actor,
            hlc: Hlc::new(actor),
            clock,
            last_wall_ms: std::cell::Cell::new(0),
            batch_wall_ms: std::cell::Cell::new(None),
            store: MemStore::with_seed(rng.u64(..)),
            rng,
            view,
            previous: Vec::new(),
            settling_until_ms: 0,
            single_worker,
            sole_memory,
            reconcile: vec![None; store::PARTITIONS],
            reconcile_waiting: 0,
            changeset: Map::with_hasher(hasher.clone()),
            expiries: std::collections::BTreeSet::new(),
            expiry_of: Map::with_hasher(hasher.clone()),
            outbox: Map::with_hasher(hasher.clone()),
            handoff: Map::with_hasher(hasher.clone()),
            next_handoff: 0,
            retiring: Map::with_hasher(hasher.clone()),
            tier: tier::Tiering::new(hasher.clone()),
            backing: backing::Backing::new(hasher.clone()),
            reclaimed: Map::with_hasher(hasher),
            primary_keys: 0,
            metadata_keys: 0,
            requests: 0,
            gossip_sent: 0,
            gossip_received: 0,
            handed_off: 0,
            disk: None,
            journal: None,
            journal_failure: None,
            storage_errors: 0,
            break_handoff: false,
            audit: None,
            keyspace_flags: None,
            key_events: Vec::new(),
            muted: false,
            script_runs: None,
        }
    }

    /// Starts recording what this shard does ([`Audit`]): for the simulation's checks.
    pub fn audit(&mut self) {
        self.audit.get_or_insert_with(Vec::new);
    }

    /// What was recorded since the last call.
    pub fn take_audit(&mut self) -> Vec<Audit> {
        self.audit.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Testing only: drop handed-off keys after the first acknowledgement (see
    /// `break_handoff`).
    pub fn break_handoff(&mut self) {
        self.break_handoff = true;
    }

    /// The clock this shard reads.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// The writer id of this worker's next OR-set dots and counter entries.
    pub fn actor(&self) -> u64 {
        self.actor
    }

    /// Which replica this shard is.
    pub fn me(&self) -> Replica {
        self.config.me
    }

    /// This worker's index.
    pub fn worker(&self) -> u32 {
        self.config.me.worker
    }

    /// The store (read-only), for status, tests and simulation.
    pub fn store(&self) -> &MemStore {
        &self.store
    }

    /// The limits this worker enforces.
    pub fn limits(&self) -> &Limits {
        &self.config.limits
    }

    /// The current view.
    pub fn view(&self) -> &Arc<ViewState> {
        &self.view
    }

    // ---- placement ----------------------------------------------------------------------

    /// The replicas of `key`, primary first.
    pub fn replicas(&self, key: &[u8]) -> Vec<Replica> {
        self.view.replicas(key)
    }

    /// True if this worker holds a replica of `key` under the current view.
    pub fn is_replica(&self, key: &[u8]) -> bool {
        self.single_worker
            || self.holds_memory_replica(key)
            || self.view.is_replica(key, self.config.me)
    }

    /// True if `key` has a memory-tier replica and this worker is the memory tier's only
    /// worker, so that replica is here: no walk of the rings.
    #[inline]
    fn holds_memory_replica(&self, key: &[u8]) -> bool {
        self.sole_memory && self.view.vector(key).memory.global > 0
    }

    /// True if this worker is `key`'s primary (first) replica.
    pub(crate) fn is_primary(&self, key: &[u8]) -> bool {
        if self.single_worker {
            return true;
        }
        let vector = self.view.vector(key);
        let hash = self.view.view.key_hash(key);
        self.view.view.first_replica(hash, &vector) == Some(self.config.me)
    }

    /// True if `key` has replicas other than this worker.
    fn replicated(&self, key: &[u8]) -> bool {
        self.has_other_replicas(key, false)
    }

    /// True if a replica of `key` other than this worker may take client writes: any other
    /// replica for a disk-tier worker; for a memory-tier worker its other memory-tier
    /// replicas only, since a disk-tier worker forwards the clients' requests for a key
    /// with a memory-tier replica to that tier ([`Shard::route`]) and only receives its
    /// writes by replication.
    pub(super) fn other_writers(&self, key: &[u8]) -> bool {
        if self.is_disk() {
            return self.replicated(key);
        }
        self.has_other_replicas(key, true)
    }

    /// How many replicas of `key` may take client writes (see [`Shard::other_writers`]).
    pub(super) fn writers(&self, key: &[u8]) -> usize {
        if self.is_disk() {
            return self.replicas(key).len();
        }
        let mut count = 0;
        let vector = self.view.vector(key);
        self.view.view.for_each_replica(
            self.view.view.key_hash(key),
            Tier::Memory,
            vector.memory,
            |_| count += 1,
        );
        count
    }

    /// True if every live write to `key` is gossiped to other replicas: it has replicas
    /// other than this worker that take every write — all of them, unless this memory-tier
    /// worker copies live values to the disk tier on eviction only (then its memory-tier
    /// replicas). Deletes go to every replica ([`Shard::replicated`]).
    fn gossips_writes(&self, key: &[u8]) -> bool {
        self.has_other_replicas(key, self.copies_on_eviction())
    }

    /// True if `key` has replicas other than this worker (in the memory tier only, with
    /// `memory_only`).
    fn has_other_replicas(&self, key: &[u8], memory_only: bool) -> bool {
        if self.single_worker || (memory_only && self.sole_memory) {
            return false;
        }
        let mut count = 0;
        let vector = self.view.vector(key);
        let view = &self.view.view;
        let hash = view.key_hash(key);
        if memory_only {
            view.for_each_replica(hash, Tier::Memory, vector.memory, |_| count += 1);
        } else {
            view.for_each_replica_all(hash, &vector, |_| count += 1);
        }
        count > 1
    }

    /// Where a request for `key` should run: here if this worker holds a replica (in any
    /// tier), else a random one of the key's serving replicas (memory tier first).
    pub fn route(&mut self, key: &[u8]) -> Route {
        if self.single_worker || self.holds_memory_replica(key) {
            return Route::Local;
        }
        let vector = self.view.vector(key);
        let view = &self.view.view;
        let hash = view.key_hash(key);
        let me = self.config.me;
        let mut local = false;
        let mut memory = 0usize;
        let mut disk = 0usize;
        let mut memory_here = 0usize;
        let mut disk_here = 0usize;
        view.for_each_replica(hash, Tier::Memory, vector.memory, |r| {
            local |= r == me;
            memory += 1;
            memory_here += usize::from(r.node == me.node);
        });
        view.for_each_replica(hash, Tier::Disk, vector.disk, |r| {
            local |= r == me;
            disk += 1;
            disk_here += usize::from(r.node == me.node);
        });
        // A disk-tier worker serves a key only if the key has no memory-tier replica: the
        // memory tier is the one that takes its clients' writes (with `disk_copy =
        // on_eviction` the disk tier does not even hold its newest values), so a `WATCH`
        // honoured there sees every write (see `shard::exec`).
        let serves_here = local && (memory == 0 || !self.is_disk());
        if serves_here || memory + disk == 0 {
            return Route::Local;
        }
        // Requests go to the serving tier: memory, or disk for a key with no memory replica.
        // Within it, a replica on this node first: no network hop, and a node cut off from
        // the others keeps serving the keys it holds (a random remote replica would send
        // requests into the partition until the failure detector takes the others out of
        // the view). Requests for keys with several replicas here (hot keys) are spread over
        // them; across nodes, load spreads by clients connecting to different nodes
        // (placement-aware clients pick a random replica themselves).
        let (tier, replication, count, here) = if memory > 0 {
            (Tier::Memory, vector.memory, memory, memory_here)
        } else {
            (Tier::Disk, vector.disk, disk, disk_here)
        };
        let (pool, this_node_only) = if here > 0 {
            (here, true)
        } else {
            (count, false)
        };
        let pick = self.rng.usize(..pool);
        let mut chosen = None;
        let mut i = 0;
        view.for_each_replica(hash, tier, replication, |r| {
            if this_node_only && r.node != me.node {
                return;
            }
            if i == pick {
                chosen = Some(r);
            }
            i += 1;
        });
        chosen.map_or(Route::Local, Route::Remote)
    }

    /// The native addresses of the replicas requests for `key` go to (a redirect's list):
    /// its memory-tier replicas, or its disk-tier ones for a key with none in memory.
    pub fn replica_addrs(&self, key: &[u8]) -> Vec<String> {
        self.view
            .serving_replicas(key)
            .into_iter()
            .filter_map(|r| self.view.addr(r).map(str::to_string))
            .collect()
    }

    // ---- status -------------------------------------------------------------------------

    /// Current counters.
    pub fn stats(&self) -> ShardStats {
        ShardStats {
            live_keys: (self.live_key_count() as u64).saturating_sub(self.metadata_keys),
            primary_keys: self.primary_keys,
            bytes: self.store.bytes() as u64,
            requests: self.requests,
            gossip_sent: self.gossip_sent,
            gossip_received: self.gossip_received,
            handed_off: self.handed_off,
            storage_errors: self.storage_errors,
            stored_keys: self.stored_count() as u64,
            pending_replication: (self.changeset.len()
                + self.outbox.values().map(KeySet::len).sum::<usize>()
                + self.handoff.len()
                + self.reconcile_waiting) as u64,
            handoff_keys: self.handoff.len() as u64,
            evictions: self.tier.evictions,
            demotions: self.tier.demotions,
            disk_fetches: self.tier.disk_fetches,
        }
    }

    /// Approximate bytes of data held in memory (the cache, for a disk-tier shard).
    pub fn memory_bytes(&self) -> u64 {
        self.store.bytes() as u64
    }

    /// True if `key` holds a live value here.
    pub fn holds(&self, key: &[u8]) -> bool {
        if let Some(r) = self.store.get(key) {
            return r.is_live();
        }
        self.disk.as_ref().is_some_and(|d| {
            d.store
                .get_owned(key)
                .ok()
                .flatten()
                .is_some_and(|r| store::is_live(&r))
        })
    }

    /// True if this worker stores anything for `key` (tombstones included), replica or not.
    pub fn stores(&self, key: &[u8]) -> bool {
        self.store.get(key).is_some()
            || self
                .disk
                .as_ref()
                .is_some_and(|d| d.store.contains(key).unwrap_or(false))
    }
}

/// True if `me` is the only storage worker of a view (or the view has none): every key
/// is then local. A view whose one worker is another node's is not that case.
fn is_single_worker(view: &ViewState, me: Replica) -> bool {
    let workers: usize = view.view.nodes().map(|(_, node)| node.workers.len()).sum();
    workers == 0 || (workers == 1 && view.has_node(me.node) && me.worker == 0)
}

/// True if `me` is the only worker of `view`'s memory tier.
fn is_sole_memory_worker(view: &ViewState, me: Replica) -> bool {
    let mut workers = 0;
    let mut mine = false;
    for (key, node) in view.view.nodes() {
        if node.tier == Tier::Memory {
            workers += node.workers.len();
            mine |= *key == me.node;
        }
    }
    workers == 1 && mine && me.worker == 0
}

#[cfg(test)]
mod backlog_tests;
#[cfg(test)]
mod disk_tests;
#[cfg(test)]
mod gossip_tests;
#[cfg(test)]
mod handoff_tests;
#[cfg(test)]
mod keyspace_tests;
#[cfg(test)]
mod rule_tests;
#[cfg(test)]
mod sole_tests;
#[cfg(test)]
mod tests;
// ---- lists (helper B) ----
#[cfg(test)]
mod lists_tests;
