//! One worker's state and the execution of operations on it.
//!
//! A [`Shard`] is owned by exactly one worker thread and does no I/O: the worker feeds it
//! operations, gossip and control messages, and ships what it returns. This keeps every
//! decision about types, epochs, limits and replication in one place that unit tests (and the
//! in-process benchmarks) drive directly.
//!
//! # Write path
//! Every write becomes a delta [`Record`] (see `docs/lattices.md` for the epoch convention):
//! - an LWW write carries `epoch = ts`, so deletes and LWW writes order by timestamp;
//! - a write of another type carries the key's current epoch if the key holds that type (or
//!   nothing), and a fresh epoch from the worker's clock otherwise (a new incarnation);
//! - a delete is a tombstone at a fresh epoch.
//!
//! The delta is merged into the store and, if the key has other replicas on this node, into
//! the changeset, which the worker sends to them every gossip period, one merged record per
//! key per destination ("merge at sender").

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hashbrown::{HashMap, HashSet};
use lattice::{Blob, Counter, Hlc, Lattice, LatticeType, Lww, OrSet, Record, Timestamp, Value};
use placement::{key_hash, replication, Replication, ReplicationVector, Ring};
use store::{MemStore, RecordRef};

use crate::config::Limits;
use crate::error::NodeError;
use crate::op::{Condition, Op, OpResult};

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
    /// Another worker holds a replica (a random one among the key's replicas).
    Remote(u32),
}

/// Static settings of a shard.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// This worker's index on the local ring.
    pub worker: u32,
    /// Local replication of keys without an explicit vector.
    pub default_local_replication: u32,
    /// Size limits.
    pub limits: Limits,
    /// This worker's share of the node's memory budget, in bytes.
    pub memory_budget: usize,
    /// Most changeset keys before the worker should gossip early.
    pub max_changeset_keys: usize,
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
}

/// A replication change to broadcast to every worker of the node.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicationChange {
    /// The user key.
    pub key: Bytes,
    /// Its new vector.
    pub vector: ReplicationVector,
    /// When the change was made (the newest change wins on every worker).
    pub ts: Timestamp,
}

/// One batch of gossip for one destination worker.
pub type GossipBatch = Vec<(Bytes, Record)>;

/// One worker's keys, clock, replication knowledge and changeset.
pub struct Shard {
    /// Static settings.
    config: ShardConfig,
    /// The writer id of this worker's timestamps, OR-set dots and counter entries: random per
    /// process start, so a restarted worker never reuses an old incarnation's dots.
    actor: u64,
    /// Hybrid logical clock; observes every epoch merged here, so a delete or write issued
    /// here is newer than everything this worker has seen.
    hlc: Hlc,
    /// Physical clock source (milliseconds); injectable for tests.
    now_ms: fn() -> u64,
    /// The keys.
    store: MemStore,
    /// The node's local ring (shared read-only by all workers).
    ring: Arc<Ring<u32>>,
    /// Explicit replication vectors, newest change per key.
    replication: HashMap<Blob, (Timestamp, ReplicationVector)>,
    /// Deltas of replicated keys written here since the last gossip, merged per key.
    changeset: HashMap<Blob, Record>,
    /// Keys whose replication changed: dropped after the next gossip if this worker is no
    /// longer one of their replicas.
    handoff: HashSet<Blob>,
    /// Live user keys this worker is primary for.
    primary_keys: u64,
    /// Live metadata keys stored here (excluded from user key counts).
    metadata_keys: u64,
    /// Operation, gossip counters.
    requests: u64,
    gossip_sent: u64,
    gossip_received: u64,
}

impl Shard {
    /// A shard with an empty store.
    pub fn new(config: ShardConfig, ring: Arc<Ring<u32>>) -> Self {
        Self::with_clock(config, ring, fastrand::u64(..), system_now_ms)
    }

    /// A shard with a given actor id and clock (tests, simulation).
    pub fn with_clock(
        config: ShardConfig,
        ring: Arc<Ring<u32>>,
        actor: u64,
        now_ms: fn() -> u64,
    ) -> Self {
        Shard {
            config,
            actor,
            hlc: Hlc::new(actor),
            now_ms,
            store: MemStore::new(),
            ring,
            replication: HashMap::new(),
            changeset: HashMap::new(),
            handoff: HashSet::new(),
            primary_keys: 0,
            metadata_keys: 0,
            requests: 0,
            gossip_sent: 0,
            gossip_received: 0,
        }
    }

    /// This worker's index.
    pub fn worker(&self) -> u32 {
        self.config.worker
    }

    /// The store (read-only), for status and tests.
    pub fn store(&self) -> &MemStore {
        &self.store
    }

    // ---- placement ----------------------------------------------------------------------

    /// The key's memory-tier replication on this node.
    fn replication_of(&self, key: &[u8]) -> Replication {
        if !self.replication.is_empty() {
            if let Some((_, v)) = self.replication.get(key) {
                return v.memory;
            }
        }
        Replication {
            global: 1,
            local: self.config.default_local_replication,
        }
    }

    /// Number of workers of this node holding `key`.
    pub fn local_replication(&self, key: &[u8]) -> usize {
        (self.replication_of(key).local.max(1) as usize).min(self.ring.len())
    }

    /// The workers holding `key`, primary first.
    pub fn replicas(&self, key: &[u8]) -> Vec<u32> {
        self.ring
            .replicas(key_hash(key), self.local_replication(key))
    }

    /// True if this worker holds a replica of `key`.
    pub fn is_replica(&self, key: &[u8]) -> bool {
        let n = self.local_replication(key);
        if n == 1 {
            return self.ring.primary(key_hash(key)) == Some(&self.config.worker);
        }
        self.ring.is_replica(key_hash(key), n, &self.config.worker)
    }

    /// Where a request for `key` should run.
    pub fn route(&self, key: &[u8]) -> Route {
        if self.ring.len() == 1 {
            return Route::Local;
        }
        let hash = key_hash(key);
        let n = self.local_replication(key);
        if n == 1 {
            return match self.ring.primary(hash) {
                Some(&w) if w != self.config.worker => Route::Remote(w),
                _ => Route::Local,
            };
        }
        let replicas = self.ring.replicas(hash, n);
        if replicas.contains(&self.config.worker) {
            Route::Local
        } else {
            // Spread reads and writes of replicated (hot) keys over their replicas.
            let pick = replicas[fastrand::usize(..replicas.len())];
            Route::Remote(pick)
        }
    }

    // ---- operations ---------------------------------------------------------------------

    fn check_key(&self, key: &[u8]) -> Result<(), NodeError> {
        if key.len() > self.config.limits.max_key_size {
            return Err(NodeError::KeyTooLarge {
                len: key.len(),
                max: self.config.limits.max_key_size,
            });
        }
        if replication::is_metadata_key(key) {
            return Err(NodeError::ReservedKey);
        }
        Ok(())
    }

    fn check_memory(&self) -> Result<(), NodeError> {
        if self.store.bytes() >= self.config.memory_budget {
            return Err(NodeError::MemoryLimit {
                used: self.store.bytes(),
                budget: self.config.memory_budget,
            });
        }
        Ok(())
    }

    /// The live record of `key`.
    fn live(&self, key: &[u8]) -> Option<RecordRef<'_>> {
        self.store.get_live(key)
    }

    /// The value of `key`'s live full record (collections, counters, …); `None` for absent
    /// keys and LWW registers.
    fn live_full(&self, key: &[u8]) -> Option<&Value> {
        self.live(key).and_then(|r| r.full_value())
    }

    /// The epoch a write of type `ty` to `key` carries (see the module docs).
    fn write_epoch(&mut self, key: &[u8], ty: LatticeType) -> Timestamp {
        match self.store.get(key) {
            None => Timestamp::ZERO,
            Some(r) => match r.lattice_type() {
                // A tombstone, or a value of the same type: the key's current incarnation.
                None => r.epoch(),
                Some(t) if t == ty => r.epoch(),
                // A non-live value of another type (an emptied OR-set): a new incarnation.
                Some(_) => self.hlc.tick((self.now_ms)()),
            },
        }
    }

    /// Fails with WRONGTYPE if `key` holds a live value of another type than `expected`.
    fn check_type(&self, key: &[u8], expected: LatticeType) -> Result<(), NodeError> {
        match self.live(key).and_then(|r| r.lattice_type()) {
            Some(found) if found != expected => Err(NodeError::wrong_type(expected.name(), found)),
            _ => Ok(()),
        }
    }

    /// Reads the live record of `key` without copying it (a GET that stays on this worker).
    pub fn read(&mut self, key: &[u8]) -> Result<Option<RecordRef<'_>>, NodeError> {
        self.requests += 1;
        self.check_key(key)?;
        Ok(self.live(key))
    }

    /// Executes one operation on this worker's replica.
    pub fn execute<B: AsRef<[u8]>>(&mut self, op: Op<B>) -> OpResult {
        self.requests += 1;
        if let Err(e) = self.check_key(op.key()) {
            return OpResult::Error(e);
        }
        if op.is_write() && !matches!(op, Op::Delete { .. }) {
            if let Err(e) = self.check_memory() {
                return OpResult::Error(e);
            }
        }
        match op {
            Op::Get { key } => OpResult::Value(self.live(key.as_ref()).and_then(|r| r.to_value())),
            Op::Exists { key } => OpResult::Int(self.live(key.as_ref()).is_some() as i64),
            Op::TypeOf { key } => {
                OpResult::Type(self.live(key.as_ref()).and_then(|r| r.lattice_type()))
            }
            Op::SetContains { key, member } => self.set_contains(key.as_ref(), member.as_ref()),
            Op::SetLen { key } => self.set_len(key.as_ref()),
            Op::Put { key, value } => self.put(key.as_ref(), value).into(),
            Op::Delete { key } => self.delete(key.as_ref()),
            Op::Assign {
                key,
                value,
                condition,
            } => self.assign(key.as_ref(), value.as_ref(), condition).into(),
            Op::SetAdd { key, members } => self.set_add(key.as_ref(), &members).into(),
            Op::SetRemove { key, members } => self.set_remove(key.as_ref(), &members).into(),
            Op::CounterAdd { key, delta } => self.counter_add(key.as_ref(), delta).into(),
        }
    }

    /// WRONGTYPE for a read needing a set on a key holding something else.
    fn not_a_set(&self, key: &[u8]) -> OpResult {
        let found = self.live(key).and_then(|r| r.lattice_type());
        OpResult::Error(NodeError::wrong_type(
            "a set",
            found.unwrap_or(LatticeType::Lww),
        ))
    }

    fn set_contains(&self, key: &[u8], member: &[u8]) -> OpResult {
        if self.live(key).is_none() {
            return OpResult::Int(0);
        }
        match self.live_full(key) {
            Some(Value::OrSet(s)) => OpResult::Int(s.contains(member) as i64),
            Some(Value::Set(s)) => OpResult::Int(s.contains(member) as i64),
            Some(Value::OrderedSet(s)) => OpResult::Int(s.contains(member) as i64),
            _ => self.not_a_set(key),
        }
    }

    fn set_len(&self, key: &[u8]) -> OpResult {
        if self.live(key).is_none() {
            return OpResult::Int(0);
        }
        match self.live_full(key) {
            Some(Value::OrSet(s)) => OpResult::Int(s.len() as i64),
            Some(Value::Set(s)) => OpResult::Int(s.len() as i64),
            Some(Value::OrderedSet(s)) => OpResult::Int(s.len() as i64),
            _ => self.not_a_set(key),
        }
    }

    fn check_value_size(&self, key: &[u8], value: &Value) -> Result<(), NodeError> {
        let max = self.config.limits.max_value_size;
        let incoming = value.approx_size();
        // Registers replace their value; collections grow by (at most) the incoming value.
        let replaces = matches!(
            value.lattice_type(),
            LatticeType::Lww
                | LatticeType::Max
                | LatticeType::Min
                | LatticeType::Bool
                | LatticeType::Priority
        );
        let total = if replaces {
            incoming
        } else {
            incoming + self.store.size_of(key)
        };
        if total > max {
            return Err(NodeError::ValueTooLarge { len: total, max });
        }
        Ok(())
    }

    fn put(&mut self, key: &[u8], value: Value) -> Result<OpResult, NodeError> {
        let ty = value.lattice_type();
        self.check_type(key, ty)?;
        self.check_value_size(key, &value)?;
        let epoch = match &value {
            Value::Lww(l) => l.ts,
            _ => self.write_epoch(key, ty),
        };
        self.apply(key, Record::new(epoch, Some(value)));
        Ok(OpResult::Done)
    }

    fn delete(&mut self, key: &[u8]) -> OpResult {
        if self.live(key).is_none() {
            return OpResult::Int(0);
        }
        let ts = self.hlc.tick((self.now_ms)());
        self.apply(key, Record::tombstone(ts));
        OpResult::Int(1)
    }

    fn assign(
        &mut self,
        key: &[u8],
        value: &[u8],
        condition: Condition,
    ) -> Result<OpResult, NodeError> {
        self.check_type(key, LatticeType::Lww)?;
        if value.len() > self.config.limits.max_value_size {
            return Err(NodeError::ValueTooLarge {
                len: value.len(),
                max: self.config.limits.max_value_size,
            });
        }
        let exists = self.live(key).is_some();
        let proceed = match condition {
            Condition::Always => true,
            Condition::IfAbsent => !exists,
            Condition::IfPresent => exists,
        };
        if !proceed {
            return Ok(OpResult::Int(0));
        }
        let ts = self.hlc.tick((self.now_ms)());
        let record = Record::new(ts, Some(Value::Lww(Lww::new(ts, Box::from(value)))));
        self.apply(key, record);
        Ok(OpResult::Int(1))
    }

    /// True if `key` holds an OR-set at `epoch` (which in-place updates may then modify).
    fn holds_orset_at(&self, key: &[u8], epoch: Timestamp) -> bool {
        match self.store.get(key) {
            Some(RecordRef::Full(r)) => {
                r.epoch == epoch && matches!(r.value, Some(Value::OrSet(_)))
            }
            _ => false,
        }
    }

    /// Applies an OR-set operation in place on the stored set (O(log n), no merge of a
    /// delta into the whole set) and returns its delta, which joins the changeset if the
    /// key is replicated here. `None` if the key holds no OR-set at `epoch`.
    fn update_orset(
        &mut self,
        key: &[u8],
        epoch: Timestamp,
        grown: usize,
        op: impl FnOnce(&mut OrSet<Blob>) -> OrSet<Blob>,
    ) -> Option<OrSet<Blob>> {
        if !self.holds_orset_at(key, epoch) {
            return None;
        }
        let (delta, outcome) = self
            .store
            .update(key, grown, |record| match &mut record.value {
                Some(Value::OrSet(set)) => Some(op(set)),
                _ => None,
            })?;
        self.track_liveness(key, outcome);
        let delta = delta?;
        if self.local_replication(key) > 1 {
            let record = Record::new(epoch, Some(Value::OrSet(Box::new(delta.clone()))));
            self.add_to_changeset(key, record);
        }
        Some(delta)
    }

    fn set_add<B: AsRef<[u8]>>(
        &mut self,
        key: &[u8],
        members: &[B],
    ) -> Result<OpResult, NodeError> {
        self.check_type(key, LatticeType::OrSet)?;
        let incoming: usize = members.iter().map(|m| m.as_ref().len()).sum();
        let total = incoming + self.store.size_of(key);
        if total > self.config.limits.max_value_size {
            return Err(NodeError::ValueTooLarge {
                len: total,
                max: self.config.limits.max_value_size,
            });
        }
        let epoch = self.write_epoch(key, LatticeType::OrSet);
        let mut added = 0;
        for member in members {
            let member = member.as_ref();
            let present =
                matches!(self.live_full(key), Some(Value::OrSet(s)) if s.contains(member));
            added += i64::from(!present);
            let actor = self.actor;
            // Per member: its bytes, its dot and the tree entry, as the size estimate grows.
            let grown = member.len() + 64;
            let updated =
                self.update_orset(key, epoch, grown, |set| set.add(actor, Box::from(member)));
            if updated.is_none() {
                // First member of a new set (or of a new incarnation): a small merge.
                let delta = OrSet::new().add_delta(actor, Box::from(member));
                self.apply(key, Record::new(epoch, Some(Value::OrSet(Box::new(delta)))));
            }
        }
        Ok(OpResult::Int(added))
    }

    fn set_remove<B: AsRef<[u8]>>(
        &mut self,
        key: &[u8],
        members: &[B],
    ) -> Result<OpResult, NodeError> {
        self.check_type(key, LatticeType::OrSet)?;
        if self.live(key).is_none() {
            return Ok(OpResult::Int(0));
        }
        let epoch = self.write_epoch(key, LatticeType::OrSet);
        let mut removed = 0;
        for member in members {
            let member = member.as_ref();
            let present =
                matches!(self.live_full(key), Some(Value::OrSet(s)) if s.contains(member));
            if present {
                removed += 1;
                self.update_orset(key, epoch, 0, |set| set.remove(member));
            }
        }
        Ok(OpResult::Int(removed))
    }

    fn counter_add(&mut self, key: &[u8], delta: i64) -> Result<OpResult, NodeError> {
        // Hot path of counter workloads: one lookup finds the counter, checks the bound and
        // adds in place.
        let actor = self.actor;
        let in_place = self.store.update(key, 0, |record| match &mut record.value {
            Some(Value::Counter(c)) => {
                let new_value = i64::try_from(c.value() + i128::from(delta));
                let added = new_value.ok().and_then(|v| Some((v, c.add(actor, delta)?)));
                Some((record.epoch, added))
            }
            _ => None,
        });
        if let Some((Some((epoch, added)), outcome)) = in_place {
            self.track_liveness(key, outcome);
            let (new_value, counter_delta) = added.ok_or(NodeError::Overflow)?;
            if self.local_replication(key) > 1 {
                let record = Record::new(epoch, Some(Value::Counter(counter_delta)));
                self.add_to_changeset(key, record);
            }
            return Ok(OpResult::Int(new_value));
        }
        // First write of the counter (absent, deleted, or a new incarnation).
        self.check_type(key, LatticeType::Counter)?;
        let epoch = self.write_epoch(key, LatticeType::Counter);
        let counter_delta = Counter::new()
            .add_delta(actor, delta)
            .ok_or(NodeError::Overflow)?;
        self.apply(key, Record::new(epoch, Some(Value::Counter(counter_delta))));
        Ok(OpResult::Int(delta))
    }

    /// Merges a write's delta into the store and, for keys replicated on this node, into
    /// the changeset.
    fn apply(&mut self, key: &[u8], delta: Record) {
        self.hlc.observe(delta.epoch);
        if self.local_replication(key) > 1 {
            self.add_to_changeset(key, delta.clone());
        }
        self.merge_into_store(key, delta);
    }

    /// Merges a delta of `key` into the changeset ("merge at sender").
    fn add_to_changeset(&mut self, key: &[u8], delta: Record) {
        match self.changeset.get_mut(key) {
            Some(pending) => {
                pending.merge(delta);
            }
            None => {
                self.changeset.insert(Box::from(key), delta);
            }
        }
    }

    fn merge_into_store(&mut self, key: &[u8], record: Record) {
        let outcome = self.store.merge(key, record);
        self.track_liveness(key, outcome);
    }

    /// Keeps the primary and metadata key counts in step with a write's outcome.
    fn track_liveness(&mut self, key: &[u8], outcome: store::MergeOutcome) {
        if outcome.was_live == outcome.is_live {
            return;
        }
        if replication::is_metadata_key(key) {
            // Metadata is not user data: keep it out of key counts.
            if outcome.is_live {
                self.metadata_keys += 1;
            } else {
                self.metadata_keys = self.metadata_keys.saturating_sub(1);
            }
        } else if self.ring.primary(key_hash(key)) == Some(&self.config.worker) {
            if outcome.is_live {
                self.primary_keys += 1;
            } else {
                self.primary_keys = self.primary_keys.saturating_sub(1);
            }
        }
    }

    // ---- gossip -------------------------------------------------------------------------

    /// True if the changeset is big enough that the worker should gossip before the timer.
    pub fn changeset_full(&self) -> bool {
        self.changeset.len() >= self.config.max_changeset_keys
    }

    /// Drains the changeset into one batch per destination worker (indexed by worker). The
    /// changeset keeps its capacity: the same hot keys come back every period.
    pub fn take_gossip(&mut self) -> Vec<GossipBatch> {
        let mut batches: Vec<GossipBatch> = vec![Vec::new(); self.ring.len()];
        if self.changeset.is_empty() {
            return batches;
        }
        let me = self.config.worker;
        let (ring, replication, default) = (
            &self.ring,
            &self.replication,
            self.config.default_local_replication,
        );
        for (key, record) in self.changeset.drain() {
            let local = replication
                .get(&key)
                .map_or(default, |(_, v)| v.memory.local);
            let key = Bytes::from(key.into_vec());
            ring.for_each_replica(key_hash(&key), local.max(1) as usize, |&worker| {
                if worker != me {
                    if let Some(batch) = batches.get_mut(worker as usize) {
                        batch.push((key.clone(), record.clone()));
                        self.gossip_sent += 1;
                    }
                }
            });
        }
        batches
    }

    /// Puts back a batch that could not be delivered (the destination's inbox was full), so
    /// it goes out with the next round.
    pub fn requeue_gossip(&mut self, batch: GossipBatch) {
        for (key, record) in batch {
            self.gossip_sent = self.gossip_sent.saturating_sub(1);
            match self.changeset.get_mut(&key[..]) {
                Some(pending) => {
                    pending.merge(record);
                }
                None => {
                    self.changeset.insert(Box::from(&key[..]), record);
                }
            }
        }
    }

    /// Merges gossip received from another worker.
    pub fn merge_gossip(&mut self, batch: GossipBatch) {
        for (key, record) in batch {
            self.gossip_received += 1;
            self.hlc.observe(record.epoch);
            self.merge_into_store(&key, record);
            if !self.is_replica(&key) {
                // Sent under an older replication vector: pass it on to the current replicas.
                self.queue_handoff(&key);
            }
        }
    }

    /// Queues the full state of `key` for its current replicas; after that gossip round the
    /// key is dropped here unless this worker is one of them.
    pub fn queue_handoff(&mut self, key: &[u8]) {
        if let Some(record) = self.store.get(key) {
            // The full state supersedes any pending delta of the key.
            self.changeset.insert(Box::from(key), record.to_record());
            self.handoff.insert(Box::from(key));
        }
    }

    /// After a gossip round: drops keys this worker no longer replicates once their state
    /// went out, and collects tombstones older than `tombstone_grace_ms`.
    pub fn after_gossip(&mut self, tombstone_grace_ms: u64) {
        if !self.handoff.is_empty() {
            for key in std::mem::take(&mut self.handoff) {
                if self.is_replica(&key) {
                    continue;
                }
                if self.changeset.contains_key(&key) {
                    // Not delivered yet (the destination was full): wait for the next round.
                    self.handoff.insert(key);
                } else {
                    self.store.remove(&key);
                }
            }
        }
        let now = (self.now_ms)();
        self.store
            .collect_tombstones(now.saturating_sub(tombstone_grace_ms));
    }

    // ---- replication vectors ------------------------------------------------------------

    /// Validates a replication change requested by a client.
    pub fn check_replication(&self, key: &[u8], global: u32, local: u32) -> Result<(), NodeError> {
        self.check_key(key)?;
        if global == 0 || local == 0 {
            return Err(NodeError::InvalidArgument(
                "replication factors must be at least 1".into(),
            ));
        }
        if global > 1 {
            return Err(NodeError::InvalidArgument(format!(
                "global replication {global} exceeds the 1 node of this deployment"
            )));
        }
        if local as usize > self.ring.len() {
            return Err(NodeError::InvalidArgument(format!(
                "local replication {local} exceeds the node's {} workers",
                self.ring.len()
            )));
        }
        if self.replication.len() >= self.config.limits.max_replication_entries
            && !self.replication.contains_key(key)
        {
            return Err(NodeError::InvalidArgument(format!(
                "too many explicit replication vectors (limit {})",
                self.config.limits.max_replication_entries
            )));
        }
        Ok(())
    }

    /// A timestamp for a replication change made on this worker.
    pub fn tick(&mut self) -> Timestamp {
        self.hlc.tick((self.now_ms)())
    }

    /// Applies a replication change broadcast by some worker: the newest change per key
    /// wins. The metadata key's owner also stores it as an LWW record under the reserved
    /// prefix. If this worker holds the key, its full state is queued for the key's (new)
    /// replicas, and the key is dropped after that gossip if this worker is no longer one.
    pub fn apply_replication(&mut self, change: ReplicationChange) {
        self.hlc.observe(change.ts);
        let key: Blob = Box::from(&change.key[..]);
        if let Some((ts, _)) = self.replication.get(&key) {
            if *ts >= change.ts {
                return;
            }
        }
        self.replication
            .insert(key.clone(), (change.ts, change.vector));
        let meta_key = replication::replication_key(&change.key);
        if self.ring.primary(key_hash(&meta_key)) == Some(&self.config.worker) {
            let encoded = encode_vector(&change.vector);
            let record = Record::new(change.ts, Some(Value::Lww(Lww::new(change.ts, encoded))));
            self.merge_into_store(&meta_key, record);
        }
        self.queue_handoff(&key);
    }

    /// Explicit replication vectors known here (at most `limit`).
    pub fn replication_vectors(&self, limit: usize) -> Vec<(Bytes, ReplicationVector)> {
        self.replication
            .iter()
            .take(limit)
            .map(|(k, (_, v))| (Bytes::copy_from_slice(k), *v))
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
        }
    }

    /// True if `key` holds a live value here (tests).
    pub fn holds(&self, key: &[u8]) -> bool {
        self.store.get(key).is_some_and(|r| r.is_live())
    }
}

/// Encodes a replication vector as stored in metadata records: four little-endian u32s
/// (memory global, memory local, disk global, disk local).
pub fn encode_vector(v: &ReplicationVector) -> Blob {
    let mut out = Vec::with_capacity(16);
    for n in [v.memory.global, v.memory.local, v.disk.global, v.disk.local] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(worker: u32) -> ShardConfig {
        ShardConfig {
            worker,
            default_local_replication: 1,
            limits: Limits::default(),
            memory_budget: 1 << 30,
            max_changeset_keys: 1024,
        }
    }

    fn fixed_now() -> u64 {
        1_700_000_000_000
    }

    fn shard(worker: u32, workers: u32) -> Shard {
        let ring = Arc::new(Ring::<u32>::local(workers, 64));
        Shard::with_clock(config(worker), ring, 100 + worker as u64, fixed_now)
    }

    fn get(s: &mut Shard, key: &[u8]) -> Option<Value> {
        match s.execute(Op::Get { key }) {
            OpResult::Value(v) => v,
            other => panic!("unexpected {other:?}"),
        }
    }

    fn int(r: OpResult) -> i64 {
        match r {
            OpResult::Int(n) => n,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn assign_get_delete() {
        let mut s = shard(0, 1);
        assert_eq!(get(&mut s, b"k"), None);
        let r = s.execute(Op::Assign {
            key: &b"k"[..],
            value: &b"v1"[..],
            condition: Condition::Always,
        });
        assert_eq!(int(r), 1);
        match get(&mut s, b"k") {
            Some(Value::Lww(l)) => assert_eq!(&*l.value, b"v1"),
            other => panic!("{other:?}"),
        }
        // NX fails on an existing key, XX succeeds.
        let nx = Op::Assign {
            key: &b"k"[..],
            value: &b"v2"[..],
            condition: Condition::IfAbsent,
        };
        assert_eq!(int(s.execute(nx)), 0);
        let xx = Op::Assign {
            key: &b"k"[..],
            value: &b"v3"[..],
            condition: Condition::IfPresent,
        };
        assert_eq!(int(s.execute(xx)), 1);
        assert_eq!(int(s.execute(Op::Delete { key: &b"k"[..] })), 1);
        assert_eq!(int(s.execute(Op::Delete { key: &b"k"[..] })), 0);
        assert_eq!(get(&mut s, b"k"), None);
        assert_eq!(s.stats().live_keys, 0);
        // Re-create after delete, with another type.
        let add = Op::SetAdd {
            key: &b"k"[..],
            members: vec![&b"x"[..]],
        };
        assert_eq!(int(s.execute(add)), 1);
        assert_eq!(s.stats().live_keys, 1);
    }

    #[test]
    fn wrong_type_is_an_error() {
        let mut s = shard(0, 1);
        s.execute(Op::CounterAdd {
            key: &b"c"[..],
            delta: 5,
        });
        let r = s.execute(Op::Assign {
            key: &b"c"[..],
            value: &b"x"[..],
            condition: Condition::Always,
        });
        assert!(matches!(
            r,
            OpResult::Error(NodeError::WrongType {
                found: LatticeType::Counter,
                ..
            })
        ));
        let r = s.execute(Op::SetAdd {
            key: &b"c"[..],
            members: vec![&b"x"[..]],
        });
        assert!(matches!(r, OpResult::Error(NodeError::WrongType { .. })));
        // The counter is untouched.
        assert_eq!(
            int(s.execute(Op::CounterAdd {
                key: &b"c"[..],
                delta: -7
            })),
            -2
        );
    }

    #[test]
    fn counter_overflow_is_refused() {
        let mut s = shard(0, 1);
        let add = |d| Op::CounterAdd {
            key: &b"c"[..],
            delta: d,
        };
        assert_eq!(int(s.execute(add(i64::MAX))), i64::MAX);
        assert_eq!(s.execute(add(1)), OpResult::Error(NodeError::Overflow));
        assert_eq!(int(s.execute(add(-1))), i64::MAX - 1);
    }

    #[test]
    fn orset_add_remove_and_emptied_set_is_absent() {
        let mut s = shard(0, 1);
        let members = vec![&b"a"[..], &b"b"[..], &b"a"[..]];
        assert_eq!(
            int(s.execute(Op::SetAdd {
                key: &b"s"[..],
                members
            })),
            2
        );
        assert_eq!(int(s.execute(Op::SetLen { key: &b"s"[..] })), 2);
        let rm = Op::SetRemove {
            key: &b"s"[..],
            members: vec![&b"a"[..], &b"zz"[..]],
        };
        assert_eq!(int(s.execute(rm)), 1);
        assert_eq!(
            int(s.execute(Op::SetContains {
                key: &b"s"[..],
                member: &b"b"[..]
            })),
            1
        );
        let rm = Op::SetRemove {
            key: &b"s"[..],
            members: vec![&b"b"[..]],
        };
        assert_eq!(int(s.execute(rm)), 1);
        assert_eq!(int(s.execute(Op::Exists { key: &b"s"[..] })), 0);
        assert_eq!(s.stats().live_keys, 0);
        // An emptied set does not pin the key's type.
        let r = s.execute(Op::Assign {
            key: &b"s"[..],
            value: &b"now a string"[..],
            condition: Condition::Always,
        });
        assert_eq!(int(r), 1);
        assert_eq!(int(s.execute(Op::Exists { key: &b"s"[..] })), 1);
    }

    #[test]
    fn limits_are_enforced() {
        let mut cfg = config(0);
        cfg.limits.max_key_size = 4;
        cfg.limits.max_value_size = 8;
        let ring = Arc::new(Ring::<u32>::local(1, 8));
        let mut s = Shard::with_clock(cfg, ring, 1, fixed_now);
        let r = s.execute(Op::Get { key: &b"12345"[..] });
        assert!(matches!(
            r,
            OpResult::Error(NodeError::KeyTooLarge { len: 5, max: 4 })
        ));
        let r = s.execute(Op::Assign {
            key: &b"k"[..],
            value: &b"123456789"[..],
            condition: Condition::Always,
        });
        assert!(matches!(
            r,
            OpResult::Error(NodeError::ValueTooLarge { .. })
        ));
        let mut s = shard(0, 1);
        let meta = replication::replication_key(b"k");
        let r = s.execute(Op::Get { key: &meta[..] });
        assert_eq!(r, OpResult::Error(NodeError::ReservedKey));
    }

    #[test]
    fn memory_budget_refuses_writes_but_not_reads_or_deletes() {
        let mut cfg = config(0);
        cfg.memory_budget = 300;
        let ring = Arc::new(Ring::<u32>::local(1, 8));
        let mut s = Shard::with_clock(cfg, ring, 1, fixed_now);
        let mut refused = None;
        for i in 0..100u32 {
            let key = i.to_be_bytes();
            let r = s.execute(Op::Assign {
                key: &key[..],
                value: &b"0123456789"[..],
                condition: Condition::Always,
            });
            if let OpResult::Error(e) = r {
                refused = Some((i, e));
                break;
            }
        }
        let (i, e) = refused.expect("the budget must be hit");
        assert!(matches!(e, NodeError::MemoryLimit { .. }));
        assert!(get(&mut s, &0u32.to_be_bytes()).is_some());
        assert_eq!(
            int(s.execute(Op::Delete {
                key: &0u32.to_be_bytes()[..]
            })),
            1
        );
        assert!(i > 0);
    }

    /// Two workers replicating a key converge through take_gossip/merge_gossip.
    #[test]
    fn replicated_key_converges_by_gossip() {
        let mut a = shard(0, 2);
        let mut b = shard(1, 2);
        let change = ReplicationChange {
            key: Bytes::from_static(b"hot"),
            vector: ReplicationVector {
                memory: Replication {
                    global: 1,
                    local: 2,
                },
                disk: Replication::default(),
            },
            ts: Timestamp::new(1 << 16, 9),
        };
        a.apply_replication(change.clone());
        b.apply_replication(change);
        assert!(a.is_replica(b"hot") && b.is_replica(b"hot"));
        a.execute(Op::SetAdd {
            key: &b"hot"[..],
            members: vec![&b"x"[..]],
        });
        b.execute(Op::SetAdd {
            key: &b"hot"[..],
            members: vec![&b"y"[..]],
        });
        let to_b = a.take_gossip().swap_remove(1);
        let to_a = b.take_gossip().swap_remove(0);
        assert_eq!(to_b.len(), 1);
        b.merge_gossip(to_b);
        a.merge_gossip(to_a);
        assert_eq!(get(&mut a, b"hot"), get(&mut b, b"hot"));
        assert_eq!(int(a.execute(Op::SetLen { key: &b"hot"[..] })), 2);
        // Unreplicated keys never enter the changeset.
        a.execute(Op::CounterAdd {
            key: &b"cold"[..],
            delta: 1,
        });
        assert!(a.take_gossip().iter().all(Vec::is_empty));
    }
}
