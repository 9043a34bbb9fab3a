//! Executing operations on a shard: type checks, epochs, limits, and each op's lattice delta.
//!
//! # Write path
//! Every write becomes a delta [`Record`] (see `docs/lattices.md` for the epoch convention):
//! - an LWW write carries `epoch = ts`, so deletes and LWW writes order by timestamp;
//! - a write of another type carries the key's current epoch if the key holds that type (or
//!   nothing), and a fresh epoch from the worker's clock otherwise (a new incarnation);
//! - a delete is a tombstone at a fresh epoch.
//!
//! The delta is merged into the store (in place for OR-sets and counters) and, if the key
//! has other replicas, into the changeset, which goes to them every gossip period, one
//! merged record per key per destination ("merge at sender").

use lattice::{Blob, Counter, Lattice, LatticeType, OrSet, Record, Timestamp, Value};
use placement::replication;
use store::RecordRef;

use super::expiry::expired_at;
use super::Shard;
use crate::error::NodeError;
use crate::op::{Op, OpResult};

impl Shard {
    /// Fails for keys a client may not use: longer than the key limit, or in the reserved
    /// metadata key space.
    pub fn check_key(&self, key: &[u8]) -> Result<(), NodeError> {
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

    pub(super) fn check_memory(&self, key: &[u8]) -> Result<(), NodeError> {
        if self.is_disk() {
            // The memory store is a cache: the limit is the disk's free space.
            return self.check_disk();
        }
        let used = self.store.bytes();
        if used < self.config.memory_budget {
            return Ok(());
        }
        // A key with disk replicas: RAM is a cache of clean records; writes go on while
        // dirty records wait for the disk's acknowledgement, up to the hard ceiling.
        let limit = if self.tiered(key) || self.backed(key).is_some() {
            self.hard_ceiling()
        } else {
            self.config.memory_budget
        };
        if used >= limit {
            return Err(NodeError::MemoryLimit {
                used,
                budget: self.config.memory_budget,
            });
        }
        Ok(())
    }

    /// The live record of `key` (an expired one is not live).
    pub(super) fn live(&self, key: &[u8]) -> Option<RecordRef<'_>> {
        self.store.get_live(key).filter(|r| !self.is_expired(r))
    }

    /// The value of `key`'s live full record (collections, counters, …); `None` for absent
    /// keys and LWW registers.
    pub(super) fn live_full(&self, key: &[u8]) -> Option<&Value> {
        self.live(key).and_then(|r| r.full_value())
    }

    /// The physical clock reading behind write timestamps: read once per batch of requests
    /// inside one (see [`Shard::begin_batch`]).
    pub(super) fn clock_ms(&self) -> u64 {
        if let Some(Some(now)) = self.batch_wall_ms.get() {
            return now;
        }
        let now = self.clock.wall_ms();
        self.last_wall_ms.set(now);
        if self.batch_wall_ms.get().is_some() {
            self.batch_wall_ms.set(Some(Some(now)));
        }
        now
    }

    /// Starts a batch of a connection's requests, run back to back without yielding: the
    /// wall clock behind their timestamps is read at most once for all of them (a batch runs
    /// in well under a millisecond; the hybrid logical clock still orders its writes). Must
    /// be ended by [`Shard::end_batch`] before the worker runs anything else.
    pub fn begin_batch(&self) {
        self.batch_wall_ms.set(Some(None));
    }

    /// Ends the batch [`Shard::begin_batch`] started: the next timestamp reads the clock.
    pub fn end_batch(&self) {
        self.batch_wall_ms.set(None);
    }

    /// The epoch a write of type `ty` to `key` carries (see the module docs).
    pub(super) fn write_epoch(&mut self, key: &[u8], ty: LatticeType) -> Timestamp {
        match self.store.get(key) {
            // A delete reclaimed moments ago still sets the incarnation (see `tombstones`).
            None => self.remembered(key).unwrap_or(Timestamp::ZERO),
            Some(r) => match r.lattice_type() {
                // A tombstone, or a value of the same type: the key's current incarnation.
                None => r.epoch(),
                Some(t) if t == ty => r.epoch(),
                // A non-live value of another type (an emptied OR-set): a new incarnation.
                Some(_) => self.hlc.tick(self.clock_ms()),
            },
        }
    }

    /// Fails with WRONGTYPE if `key` holds a live value of another type than `expected`.
    pub(super) fn check_type(&self, key: &[u8], expected: LatticeType) -> Result<(), NodeError> {
        match self.live(key).and_then(|r| r.lattice_type()) {
            Some(found) if found != expected => Err(NodeError::wrong_type(expected.name(), found)),
            _ => Ok(()),
        }
    }

    /// Reads the live record of `key` without copying it (a GET that stays on this worker).
    pub fn read(&mut self, key: &[u8]) -> Result<Option<RecordRef<'_>>, NodeError> {
        self.requests += 1;
        self.check_key(key)?;
        if self.is_disk() {
            self.maintain_memory();
            self.fault_in(key)?;
        }
        // The clock is read only for a record with a deadline.
        let clock = &self.clock;
        Ok(self
            .store
            .get_touched(key)
            .filter(|r| !expired_at(r, || clock.wall_ms())))
    }

    /// The live value of `key` as a `Get` reads it (`None`: absent or deleted), for
    /// subscriptions checking whether it changed: not counted as a request.
    pub fn watched_value(&mut self, key: &[u8]) -> Result<Option<Value>, NodeError> {
        if self.is_disk() {
            self.maintain_memory();
            self.fault_in(key)?;
        }
        Ok(self.live(key).and_then(|r| r.to_value()))
    }

    /// Executes one operation on this worker's replica.
    pub fn execute<B: AsRef<[u8]>>(&mut self, op: Op<B>) -> OpResult {
        // Keyspace notifications: one branch while they are off.
        if self.key_event_flags() != 0 {
            return self.execute_notified(op);
        }
        self.execute_plain(op)
    }

    /// [`execute`](Self::execute), without keyspace events if `quiet`.
    pub fn execute_acked<B: AsRef<[u8]>>(&mut self, op: Op<B>, quiet: bool) -> OpResult {
        if !quiet {
            return self.execute(op);
        }
        self.muted = true;
        let result = self.execute(op);
        self.muted = false;
        result
    }

    /// [`execute`](Self::execute) without keyspace events.
    pub(super) fn execute_plain<B: AsRef<[u8]>>(&mut self, op: Op<B>) -> OpResult {
        if self.audit.is_some() && op.is_write() {
            return self.execute_audited(op);
        }
        let result = self.execute_tiered(op);
        if matches!(result, OpResult::Error(NodeError::Storage(_))) {
            self.storage_errors += 1;
        }
        result
    }

    /// [`execute`](Self::execute), recording the write ([`super::Audit`]).
    fn execute_audited<B: AsRef<[u8]>>(&mut self, op: Op<B>) -> OpResult {
        let owned = op.to_owned_op();
        let key = owned.key_bytes().clone();
        let before = self.store.get(&key).map(|r| r.to_record());
        let actor = self.actor;
        let replica = self.is_replica(&key);
        let result = self.execute_tiered(op);
        if matches!(result, OpResult::Error(NodeError::Storage(_))) {
            self.storage_errors += 1;
        }
        let after = self.store.get(&key).map(|r| r.to_record());
        if let Some(log) = self.audit.as_mut() {
            log.push(super::Audit::Write {
                key,
                op: owned,
                before,
                after,
                actor,
                replica,
                result: result.clone(),
            });
        }
        result
    }

    /// Executes one operation: on the store, or on a disk-tier shard's cache with its key
    /// faulted in first and every change written through.
    fn execute_tiered<B: AsRef<[u8]>>(&mut self, op: Op<B>) -> OpResult {
        if !self.is_disk() {
            if !op.is_write() {
                self.store.touch(op.key());
                return self.execute_here(op);
            }
            // Room first (bounded steps), then the write; a blind write to a key not in
            // RAM leaves a partial record once this worker has evicted, or if the key is
            // backed (the store may hold the rest).
            self.maintain_memory();
            let absent = (self.tier.spilled || self.backed(op.key()).is_some())
                && self.store.get(op.key()).is_none();
            let key = absent.then(|| Blob::from(op.key()));
            let result = self.execute_here(op);
            if let Some(key) = key {
                self.note_blind_write(&key, true);
            }
            return result;
        }
        self.maintain_memory();
        if let Err(e) = self.fault_in(op.key()) {
            return OpResult::Error(e);
        }
        self.execute_here(op)
    }

    /// Executes one operation on the (cached) store.
    fn execute_here<B: AsRef<[u8]>>(&mut self, op: Op<B>) -> OpResult {
        self.requests += 1;
        if let Err(e) = self.check_key(op.key()) {
            return OpResult::Error(e);
        }
        if op.is_write() {
            if let Err(e) = self.check_journal() {
                return OpResult::Error(e);
            }
        }
        if op.is_write() && !matches!(op, Op::Delete { .. }) {
            if let Err(e) = self.check_memory(op.key()) {
                return OpResult::Error(e);
            }
        }
        if op.is_write() {
            if let Err(e) = self.check_backing(op.key()) {
                return OpResult::Error(e);
            }
            // An expired key is deleted (at its deadline) before anything writes to it.
            if let Err(e) = self.reap_if_expired(op.key()) {
                return OpResult::Error(e);
            }
            self.begin_client_write();
            let result = self.execute_op(op);
            self.end_client_write();
            return result;
        }
        if let Err(e) = self.check_backed_read(op.key()) {
            return OpResult::Error(e);
        }
        self.execute_op(op)
    }

    /// Executes one checked operation.
    fn execute_op<B: AsRef<[u8]>>(&mut self, op: Op<B>) -> OpResult {
        match op {
            Op::Get { key } => OpResult::Value(self.live(key.as_ref()).and_then(|r| r.to_value())),
            Op::GetMeta { key } => OpResult::Value(
                self.live(key.as_ref())
                    .and_then(|r| super::meta::metadata_of(&r)),
            ),
            Op::Exists { key } => OpResult::Int(self.live(key.as_ref()).is_some() as i64),
            Op::TypeOf { key } => {
                OpResult::Type(self.live(key.as_ref()).and_then(|r| r.lattice_type()))
            }
            Op::SetContains { key, member } => self.set_contains(key.as_ref(), member.as_ref()),
            Op::SetLen { key } => self.set_len(key.as_ref()),
            Op::Put { key, value } => self.put(key.as_ref(), value).into(),
            Op::Delete { key } => self.delete(key.as_ref()).into(),
            Op::Assign {
                key,
                value,
                condition,
            } => self.assign(key.as_ref(), value.as_ref(), condition).into(),
            Op::SetAdd { key, members } => self.set_add(key.as_ref(), &members).into(),
            Op::SetRemove { key, members } => self.set_remove(key.as_ref(), &members).into(),
            Op::CounterAdd { key, delta } => self.counter_add(key.as_ref(), delta).into(),
            Op::GetSet { key, value } => self.get_set(key.as_ref(), value.as_ref()).into(),
            Op::GetDel { key } => self.get_del(key.as_ref()).into(),
            Op::Append { key, value } => self.append(key.as_ref(), value.as_ref()).into(),
            Op::SetRange { key, offset, value } => {
                self.set_range(key.as_ref(), offset, value.as_ref()).into()
            }
            Op::IncrByFloat { key, by } => self.incr_by_float(key.as_ref(), by).into(),
            Op::IncrBy { key, delta } => self.incr_by(key.as_ref(), delta).into(),
            Op::AssignTtl {
                key,
                value,
                condition,
                deadline,
            } => self
                .assign_ttl(key.as_ref(), value.as_ref(), condition, deadline)
                .into(),
            Op::Expire {
                key,
                deadline,
                when,
            } => self.expire(key.as_ref(), deadline, when).into(),
            Op::Ttl { key } => self.ttl(key.as_ref()),
            Op::GetEx { key, deadline } => self.get_ex(key.as_ref(), deadline).into(),
            Op::Version { key } => self.version(key.as_ref()).into(),
            Op::Exec { guards, ops, .. } => self.exec(guards, ops).into(),
            // ---- lists (helper B) ----
            Op::List { key, op } => self.list_op(key.as_ref(), op).into(),
            // Redis hashes and sorted sets.
            Op::Hash { key, args } => self.hash_op(key.as_ref(), &args),
            Op::Zset { key, args } => self.zset_op(key.as_ref(), &args),
            Op::SetPop { key, count } => self.set_pop(key.as_ref(), count).into(),
            Op::ExpireTime { key } => self.expire_time(key.as_ref()),
            Op::Script {
                body,
                keys,
                args,
                read_only,
                resp3,
                ..
            } => self.script(super::ScriptCall {
                body: body.as_ref(),
                keys: keys.iter().map(AsRef::as_ref).collect(),
                args: args.iter().map(AsRef::as_ref).collect(),
                read_only,
                resp3,
            }),
        }
    }

    /// Executes an operation another worker sent here: a forward, or a write whose client
    /// asked for several acknowledgements. Like [`execute`](Self::execute), except that a
    /// write to a key this worker does not replicate — routed here under a view that has
    /// changed since — is queued for hand-off to the key's current replicas, so it reaches
    /// them and is dropped here once delivered, like any key handed off after a view change.
    /// `quiet`: without keyspace events (see [`crate::ack::Ack::quiet`]).
    pub fn execute_forwarded<B: AsRef<[u8]>>(&mut self, op: Op<B>, quiet: bool) -> OpResult {
        let misplaced = (op.is_write() && !self.is_replica(op.key())).then(|| Blob::from(op.key()));
        let result = self.execute_acked(op, quiet);
        if let Some(key) = misplaced {
            if let Err(e) = self.queue_handoff(&key) {
                return OpResult::Error(e);
            }
        }
        result
    }

    /// WRONGTYPE for a read needing a set on a key holding something else.
    pub(super) fn not_a_set(&self, key: &[u8]) -> OpResult {
        let found = self.live(key).and_then(|r| r.lattice_type());
        OpResult::Error(NodeError::wrong_type(
            "a set",
            found.unwrap_or(LatticeType::Lww),
        ))
    }

    pub(super) fn set_contains(&self, key: &[u8], member: &[u8]) -> OpResult {
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

    pub(super) fn set_len(&self, key: &[u8]) -> OpResult {
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

    pub(super) fn check_value_size(&self, key: &[u8], value: &Value) -> Result<(), NodeError> {
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

    pub(super) fn put(&mut self, key: &[u8], value: Value) -> Result<OpResult, NodeError> {
        let ty = value.lattice_type();
        self.check_type(key, ty)?;
        self.check_value_size(key, &value)?;
        let epoch = match &value {
            Value::Lww(l) => {
                self.check_client_timestamp(l.ts)?;
                l.ts
            }
            _ => self.write_epoch(key, ty),
        };
        self.apply(key, Record::new(epoch, Some(value)))?;
        Ok(OpResult::Done)
    }

    /// Refuses a client-supplied timestamp further ahead of this worker's clock than
    /// `limits.max_clock_ahead_ms`: it would win against every later write of its key and
    /// drag the worker's clock (and so every later timestamp it issues) along.
    fn check_client_timestamp(&self, ts: Timestamp) -> Result<(), NodeError> {
        let ahead = self.config.limits.max_clock_ahead_ms;
        // Within the bound of an earlier reading: within the bound of now (no clock read
        // per write). Only a reading of the clock raises the cached value, never a
        // timestamp, so accepted writes cannot ratchet the bound forward.
        if ts.physical_ms() <= self.last_wall_ms.get().saturating_add(ahead) {
            return Ok(());
        }
        let now = self.clock_ms();
        if ts.physical_ms() > now.saturating_add(ahead) {
            return Err(NodeError::InvalidArgument(format!(
                "timestamp {} ms is {} ms ahead of this node's clock (at most {ahead} ms: \
                 limits.max_clock_ahead_ms)",
                ts.physical_ms(),
                ts.physical_ms() - now
            )));
        }
        Ok(())
    }

    pub(super) fn delete(&mut self, key: &[u8]) -> Result<OpResult, NodeError> {
        if self.live(key).is_none() {
            return Ok(OpResult::Int(0));
        }
        let ts = self.hlc.tick(self.clock_ms());
        self.apply(key, Record::tombstone(ts))?;
        Ok(OpResult::Int(1))
    }

    /// True if `key` holds an OR-set at `epoch` (which in-place updates may then modify).
    pub(super) fn holds_orset_at(&self, key: &[u8], epoch: Timestamp) -> bool {
        match self.store.get(key) {
            Some(RecordRef::Full(r)) => {
                r.epoch == epoch && matches!(r.value, Some(Value::OrSet(_)))
            }
            _ => false,
        }
    }

    /// Applies an OR-set operation in place on the stored set (O(log n), no merge of a
    /// delta into the whole set) and returns its delta, which joins the changeset if the
    /// key is replicated here. `Ok(None)` if the key holds no OR-set at `epoch`.
    pub(super) fn update_orset(
        &mut self,
        key: &[u8],
        epoch: Timestamp,
        grown: usize,
        op: impl FnOnce(&mut OrSet<Blob>) -> OrSet<Blob>,
    ) -> Result<Option<OrSet<Blob>>, NodeError> {
        if !self.holds_orset_at(key, epoch) {
            return Ok(None);
        }
        let Some((delta, outcome)) =
            self.store
                .update(key, grown, |record| match &mut record.value {
                    Some(Value::OrSet(set)) => Some(op(set)),
                    _ => None,
                })
        else {
            return Ok(None);
        };
        self.track_liveness(key, outcome);
        self.write_through(key, outcome)?;
        self.note_backing_change(key);
        let Some(delta) = delta else {
            return Ok(None);
        };
        let replicated = self.gossips_writes(key);
        if replicated || self.journal_enabled() {
            let record = Record::new(epoch, Some(Value::OrSet(Box::new(delta.clone()))));
            self.log_change(key, &record);
            if replicated {
                self.add_to_changeset(key, record);
            }
        }
        Ok(Some(delta))
    }

    pub(super) fn set_add<B: AsRef<[u8]>>(
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
                self.update_orset(key, epoch, grown, |set| set.add(actor, Box::from(member)))?;
            if updated.is_none() {
                // First member of a new set (or of a new incarnation): a small merge.
                let delta = OrSet::new().add_delta(actor, Box::from(member));
                self.apply(key, Record::new(epoch, Some(Value::OrSet(Box::new(delta)))))?;
            }
        }
        Ok(OpResult::Int(added))
    }

    pub(super) fn set_remove<B: AsRef<[u8]>>(
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
                self.update_orset(key, epoch, 0, |set| set.remove(member))?;
            }
        }
        Ok(OpResult::Int(removed))
    }

    pub(super) fn counter_add(&mut self, key: &[u8], delta: i64) -> Result<OpResult, NodeError> {
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
            self.write_through(key, outcome)?;
            self.note_backing_change(key);
            let (new_value, counter_delta) = added.ok_or(NodeError::Overflow)?;
            let replicated = self.gossips_writes(key);
            if replicated || self.journal_enabled() {
                let record = Record::new(epoch, Some(Value::Counter(counter_delta)));
                self.log_change(key, &record);
                if replicated {
                    self.add_to_changeset(key, record);
                }
            }
            return Ok(OpResult::Int(new_value));
        }
        // First write of the counter (absent, deleted, or a new incarnation).
        self.check_type(key, LatticeType::Counter)?;
        let epoch = self.write_epoch(key, LatticeType::Counter);
        let counter_delta = Counter::new()
            .add_delta(actor, delta)
            .ok_or(NodeError::Overflow)?;
        self.apply(key, Record::new(epoch, Some(Value::Counter(counter_delta))))?;
        Ok(OpResult::Int(delta))
    }

    /// Merges a write's delta into the store and, for keys replicated on this node, into
    /// the changeset (a delete for every replica, a live value for those that take every
    /// write: see [`Shard::gossips_writes`]).
    pub(super) fn apply(&mut self, key: &[u8], delta: Record) -> Result<(), NodeError> {
        self.hlc.observe(delta.epoch);
        let gossiped = if delta.value.is_none() {
            self.replicated(key)
        } else {
            self.gossips_writes(key)
        };
        if gossiped {
            self.merge_into_store(key, delta.clone())?;
            self.add_to_changeset(key, delta);
        } else {
            // A key no other replica takes writes for: the store gets the delta itself.
            self.merge_into_store(key, delta)?;
        }
        Ok(())
    }

    /// Merges a delta of `key` into the changeset ("merge at sender").
    pub(super) fn add_to_changeset(&mut self, key: &[u8], delta: Record) {
        match self.changeset.get_mut(key) {
            Some(pending) => {
                pending.merge(delta);
            }
            None => {
                self.changeset.insert(Box::from(key), delta);
            }
        }
    }

    /// Merges a record into the store (and the disk, for a disk-tier shard), and queues it
    /// for the write-ahead log. Returns whether the stored record changed.
    pub(super) fn merge_into_store(
        &mut self,
        key: &[u8],
        record: Record,
    ) -> Result<bool, NodeError> {
        self.fault_in(key)?;
        self.log_change(key, &record);
        self.index_deadline(key, &record);
        let outcome = self.store.merge(key, record);
        self.track_liveness(key, outcome);
        if outcome.changed {
            self.write_through(key, outcome)?;
            self.note_backing_change(key);
        }
        Ok(outcome.changed)
    }

    /// Keeps the primary and metadata key counts in step with a write's outcome.
    pub(super) fn track_liveness(&mut self, key: &[u8], outcome: store::MergeOutcome) {
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
        } else if self.is_primary(key) {
            if outcome.is_live {
                self.primary_keys += 1;
            } else {
                self.primary_keys = self.primary_keys.saturating_sub(1);
            }
        }
    }

    // ---- gossip -------------------------------------------------------------------------
}
