//! One worker's state, and everything it does to it.
//!
//! A [`Shard`] is owned by exactly one worker thread and does no I/O: the worker feeds it
//! operations, gossip, views and anti-entropy digests, and ships what it returns. Every
//! decision about types, epochs, limits, placement and replication is made here, so unit
//! tests, the in-process benchmarks and the cluster simulation drive it directly.
//!
//! # Layout
//! - this module: the shard's state, placement (which replicas hold a key) and counters;
//! - [`ops`]: executing client operations;
//! - [`sync`]: replication — the changeset and gossip, view changes (hand-off and
//!   re-replication), anti-entropy digests and repair.

mod ops;
mod sync;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hashbrown::{HashMap, HashSet};
use lattice::{Blob, Hlc, Record};
use placement::{key_hash, Replica, Tier};
use store::MemStore;

use crate::cluster::ViewState;
use crate::config::Limits;

pub use sync::{AntiEntropyDigest, Outgoing, BUCKETS};

/// Milliseconds since the Unix epoch from the system clock (0 if the clock is before 1970).
pub fn system_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Where a request for a key should run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// This worker holds a replica.
    Local,
    /// Another worker (of this node or another) holds one: a random one among the key's
    /// replicas.
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
    /// Entries stored, of every kind: live values, tombstones, metadata.
    pub stored_keys: u64,
    /// Replication not yet sent: changeset and outbox entries (including batches that
    /// failed and were requeued), and keys kept only until their hand-off is delivered.
    pub pending_replication: u64,
}

/// One batch of replication for one destination: keys and records to merge there.
pub type GossipBatch = Vec<(Bytes, Record)>;

/// One worker's keys, clock, view of the cluster and outgoing replication.
pub struct Shard {
    /// Static settings.
    config: ShardConfig,
    /// The writer id of this worker's OR-set dots and counter entries: random per process
    /// start, so a restarted worker never reuses an old incarnation's dots, and renewed
    /// whenever the worker drops keys it handed off (see [`Shard::delivered`]). Its
    /// timestamps keep the first one (the clock's writer).
    actor: u64,
    /// Hybrid logical clock; observes every epoch merged here, so a delete or write issued
    /// here is newer than everything this worker has seen.
    hlc: Hlc,
    /// Physical clock source (milliseconds); injectable for tests and simulation.
    now_ms: fn() -> u64,
    /// The keys.
    store: MemStore,
    /// Where keys live now.
    view: Arc<ViewState>,
    /// Where keys may have been before the last view change, while they may still be
    /// moving (see `settle_ms`): the previous view, and the current view without this node
    /// (where a key that moved here lived — the previous view of a node that just joined
    /// is only itself).
    previous: Vec<Arc<ViewState>>,
    /// Until when (ms) reads that miss also ask `previous`'s replicas.
    settling_until_ms: u64,
    /// True if the current view has a single worker in all (every key is local).
    single_worker: bool,
    /// Deltas of replicated keys written here since the last gossip, merged per key; also
    /// full records of keys being handed off.
    changeset: HashMap<Blob, Record>,
    /// Keys whose full record must go to one specific new replica (re-replication after a
    /// view change), sent with the next gossip round.
    outbox: HashMap<Replica, Vec<Blob>>,
    /// Keys this worker no longer replicates: dropped once their record was delivered.
    handoff: HashSet<Blob>,
    /// Live user keys this worker is primary for.
    primary_keys: u64,
    /// Live metadata keys stored here (excluded from user key counts).
    metadata_keys: u64,
    /// Counters.
    requests: u64,
    gossip_sent: u64,
    gossip_received: u64,
    handed_off: u64,
}

impl Shard {
    /// A shard with an empty store.
    pub fn new(config: ShardConfig, view: Arc<ViewState>) -> Self {
        Self::with_clock(config, view, fastrand::u64(..), system_now_ms)
    }

    /// A shard with a given actor id and clock (tests, simulation).
    pub fn with_clock(
        config: ShardConfig,
        view: Arc<ViewState>,
        actor: u64,
        now_ms: fn() -> u64,
    ) -> Self {
        let single_worker = is_single_worker(&view, config.me);
        Shard {
            config,
            actor,
            hlc: Hlc::new(actor),
            now_ms,
            store: MemStore::new(),
            view,
            previous: Vec::new(),
            settling_until_ms: 0,
            single_worker,
            changeset: HashMap::new(),
            outbox: HashMap::new(),
            handoff: HashSet::new(),
            primary_keys: 0,
            metadata_keys: 0,
            requests: 0,
            gossip_sent: 0,
            gossip_received: 0,
            handed_off: 0,
        }
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
        self.single_worker || self.view.is_replica(key, self.config.me)
    }

    /// True if this worker is `key`'s primary (first) replica.
    fn is_primary(&self, key: &[u8]) -> bool {
        if self.single_worker {
            return true;
        }
        let mut first = None;
        let vector = self.view.vector(key);
        self.view
            .view
            .for_each_replica(key_hash(key), Tier::Memory, vector.memory, |r| {
                first.get_or_insert(r);
            });
        first == Some(self.config.me)
    }

    /// True if `key` has replicas other than this worker.
    fn replicated(&self, key: &[u8]) -> bool {
        if self.single_worker {
            return false;
        }
        let mut count = 0;
        let vector = self.view.vector(key);
        self.view
            .view
            .for_each_replica(key_hash(key), Tier::Memory, vector.memory, |_| count += 1);
        count > 1
    }

    /// Where a request for `key` should run.
    pub fn route(&self, key: &[u8]) -> Route {
        if self.single_worker {
            return Route::Local;
        }
        let vector = self.view.vector(key);
        let hash = key_hash(key);
        let view = &self.view.view;
        let me = self.config.me;
        let mut local = false;
        let mut count = 0usize;
        view.for_each_replica(hash, Tier::Memory, vector.memory, |r| {
            local |= r == me;
            count += 1;
        });
        if local || count == 0 {
            return Route::Local;
        }
        // Spread requests for keys with several replicas (hot keys) over them.
        let pick = fastrand::usize(..count);
        let mut chosen = None;
        let mut i = 0;
        view.for_each_replica(hash, Tier::Memory, vector.memory, |r| {
            if i == pick {
                chosen = Some(r);
            }
            i += 1;
        });
        chosen.map_or(Route::Local, Route::Remote)
    }

    /// The native addresses of `key`'s replicas.
    pub fn replica_addrs(&self, key: &[u8]) -> Vec<String> {
        self.replicas(key)
            .into_iter()
            .filter_map(|r| self.view.addr(r).map(str::to_string))
            .collect()
    }

    // ---- status -------------------------------------------------------------------------

    /// Current counters.
    pub fn stats(&self) -> ShardStats {
        ShardStats {
            live_keys: (self.store.live_keys() as u64).saturating_sub(self.metadata_keys),
            primary_keys: self.primary_keys,
            bytes: self.store.bytes() as u64,
            requests: self.requests,
            gossip_sent: self.gossip_sent,
            gossip_received: self.gossip_received,
            handed_off: self.handed_off,
            stored_keys: self.store.len() as u64,
            pending_replication: (self.changeset.len()
                + self.outbox.values().map(Vec::len).sum::<usize>()
                + self.handoff.len()) as u64,
        }
    }

    /// True if `key` holds a live value here.
    pub fn holds(&self, key: &[u8]) -> bool {
        self.store.get(key).is_some_and(|r| r.is_live())
    }

    /// True if this worker stores anything for `key` (tombstones included), replica or not.
    pub fn stores(&self, key: &[u8]) -> bool {
        self.store.get(key).is_some()
    }
}

/// True if every key is local under a view: its only memory-tier worker is `me` (or it has
/// none). A view whose one worker is another node's — this node just left a cluster of
/// two — does not make this worker the replica of everything.
fn is_single_worker(view: &ViewState, me: Replica) -> bool {
    let mut workers = 0;
    for (_, node) in view.view.nodes() {
        if node.tier == Tier::Memory {
            workers += node.workers.len();
        }
    }
    workers == 0 || (workers == 1 && view.has_node(me.node))
}

#[cfg(test)]
mod tests;
