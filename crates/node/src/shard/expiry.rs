//! Key deadlines (RESP TTLs): setting them, reading them, and reclaiming expired keys.
//!
//! A deadline is an absolute time (ms since the Unix epoch) in the record's
//! [`lattice::Expiry`] register, stamped with the command's HLC timestamp, so every replica
//! agrees on it. A key whose deadline has passed reads as missing at once
//! ([`Shard::live`](super::Shard)); it is then deleted by a tombstone stamped *at its
//! deadline* — not at the moment a replica notices — so replicas that reclaim it at
//! slightly different moments write the same tombstone and converge, and a write issued
//! after the deadline (a later timestamp) wins over it. Reclamation happens before any write
//! to the key, and in the background: a per-worker index of deadlines is walked a bounded
//! number of keys per timer tick ([`Shard::expire_step`]), so a burst of expiring keys never
//! stalls the worker.

use lattice::{Blob, Expiry, LatticeType, Lww, Record, Timestamp, Value};
use store::RecordRef;

use super::Shard;
use crate::error::NodeError;
use crate::op::{Condition, Deadline, ExpireWhen, OpResult};

/// True if `r` has a deadline that has passed at `now()` (called only if it has one).
pub(super) fn expired_at(r: &RecordRef<'_>, now: impl FnOnce() -> u64) -> bool {
    deadline_of(r).is_some_and(|at| at <= now())
}

/// The deadline of a stored record.
pub(super) fn deadline_of(r: &RecordRef<'_>) -> Option<u64> {
    match r {
        RecordRef::Lww { .. } => None,
        RecordRef::Full(r) => r.deadline_ms(),
    }
}

/// Most expired keys reclaimed per timer tick.
pub const EXPIRE_STEP_KEYS: usize = 256;

impl Shard {
    /// True if the stored record `r` has expired (reads the clock only for a record with a
    /// deadline).
    pub(super) fn is_expired(&self, r: &RecordRef<'_>) -> bool {
        deadline_of(r).is_some_and(|at| at <= self.clock.wall_ms())
    }

    /// Notes a record entering the store: if it carries a deadline, the key is indexed
    /// under it (once: a key whose deadline is set again moves in the index, so refreshing
    /// a session's TTL on every request does not grow it).
    pub(super) fn index_deadline(&mut self, key: &[u8], record: &Record) {
        let Some(at) = record.deadline_ms() else {
            return;
        };
        match self.expiry_of.get_mut(key) {
            Some(old) if *old == at => {}
            Some(old) => {
                let key = Blob::from(key);
                self.expiries.remove(&(*old, key.clone()));
                *old = at;
                self.expiries.insert((at, key));
            }
            None => {
                let key = Blob::from(key);
                self.expiry_of.insert(key.clone(), at);
                self.expiries.insert((at, key));
            }
        }
    }

    /// Deletes `key` if its deadline has passed: a tombstone at the deadline (or just after
    /// the record's epoch, if a skewed clock set a deadline before it), the same on every
    /// replica. Not gossiped: every replica reclaims it itself.
    pub(super) fn reap_if_expired(&mut self, key: &[u8]) -> Result<bool, NodeError> {
        if self.expiries.is_empty() {
            // No key here has a deadline: no lookup on the write path.
            return Ok(false);
        }
        self.reap(key)
    }

    /// [`reap_if_expired`](Self::reap_if_expired) without the shortcut.
    fn reap(&mut self, key: &[u8]) -> Result<bool, NodeError> {
        let Some((epoch, at)) = self
            .store
            .get(key)
            .and_then(|r| Some((r.epoch(), deadline_of(&r)?)))
        else {
            return Ok(false);
        };
        if at > self.clock.wall_ms() {
            return Ok(false);
        }
        let at_deadline = Timestamp::new(at.saturating_mul(1 << 16), 0);
        let after_epoch = Timestamp::new(epoch.time.saturating_add(1), 0);
        let ts = at_deadline.max(after_epoch);
        self.hlc.observe(ts);
        self.merge_into_store(key, Record::tombstone(ts))?;
        // Every replica reclaims the key; one tells subscribers.
        if self.key_event_flags() & crate::notify::EXPIRED != 0 && self.is_primary(key) {
            self.note_event(crate::notify::EXPIRED, "expired", key);
        }
        Ok(true)
    }

    /// Reclaims up to `max` keys whose deadline has passed (the background part).
    pub fn expire_step(&mut self, max: usize) -> usize {
        let now = self.clock.wall_ms();
        let mut done = 0;
        while done < max {
            let Some((at, _)) = self.expiries.first() else {
                break;
            };
            if *at > now {
                break;
            }
            let Some((_, key)) = self.expiries.pop_first() else {
                break;
            };
            self.expiry_of.remove(&key);
            if self.store.get(&key).is_none() && !self.is_disk() {
                continue;
            }
            if let Err(e) = self.fault_in(&key) {
                tracing::debug!(error = %e, "expiry: cannot read a key; retried on access");
                continue;
            }
            // A stale entry (the deadline moved) changes nothing; the new one is indexed.
            match self.reap(&key) {
                Ok(true) => done += 1,
                Ok(false) => {}
                Err(e) => tracing::debug!(error = %e, "expiry: cannot reclaim a key"),
            }
        }
        done
    }

    /// Keys waiting in the deadline index.
    pub fn deadlines_indexed(&self) -> usize {
        self.expiries.len()
    }

    /// The absolute deadline `d` asks for, given the key's current one: `None` for none.
    fn resolve(&self, d: Deadline, current: Option<u64>) -> Option<u64> {
        match d {
            Deadline::In(ms) => Some(self.clock.wall_ms().saturating_add(ms)),
            Deadline::At(at) => Some(at),
            Deadline::Persist => None,
            Deadline::Keep => current,
        }
    }

    /// The live deadline of `key`: `Err` if the key is not live.
    fn live_deadline(&self, key: &[u8]) -> Option<Option<u64>> {
        self.live(key).map(|r| deadline_of(&r))
    }

    /// Sets (or clears) the deadline of live `key`: a delta in its current incarnation. A
    /// deadline already past deletes the key at once, as Redis does.
    fn write_deadline(&mut self, key: &[u8], at: Option<u64>) -> Result<(), NodeError> {
        let now = self.clock_ms();
        if at.is_some_and(|at| at <= now) {
            self.delete(key)?;
            return Ok(());
        }
        let Some(epoch) = self.store.get(key).map(|r| r.epoch()) else {
            return Ok(());
        };
        let ts = self.hlc.tick(now);
        let mut delta = Record::tombstone(epoch);
        delta.expiry = Some(Box::new(Expiry::new(ts, at)));
        self.apply(key, delta)
    }

    /// `SET … EX/PX/EXAT/PXAT/KEEPTTL`, `SETEX`, `PSETEX`: an LWW write whose record
    /// carries the deadline. → `Int(1)` if written, 0 if the condition failed.
    pub(super) fn assign_ttl(
        &mut self,
        key: &[u8],
        value: &[u8],
        condition: Condition,
        deadline: Deadline,
    ) -> Result<OpResult, NodeError> {
        self.check_type(key, LatticeType::Lww)?;
        if value.len() > self.config.limits.max_value_size {
            return Err(NodeError::ValueTooLarge {
                len: value.len(),
                max: self.config.limits.max_value_size,
            });
        }
        let current = self.live_deadline(key);
        let proceed = match condition {
            Condition::Always => true,
            Condition::IfAbsent => current.is_none(),
            Condition::IfPresent => current.is_some(),
        };
        if !proceed {
            return Ok(OpResult::Int(0));
        }
        let at = self.resolve(deadline, current.flatten());
        let now = self.clock_ms();
        if at.is_some_and(|at| at <= now) {
            // Written and expired at once: Redis deletes it.
            self.delete(key)?;
            return Ok(OpResult::Int(1));
        }
        let ts = self.hlc.tick(now);
        let mut record = Record::new(ts, Some(Value::Lww(Lww::new(ts, Box::from(value)))));
        if at.is_some() {
            record.expiry = Some(Box::new(Expiry::new(ts, at)));
        }
        self.apply(key, record)?;
        Ok(OpResult::Int(1))
    }

    /// `EXPIRE` family and `PERSIST`: → `Int(1)` if the deadline was set (or cleared), 0 if
    /// the key is missing or the condition failed.
    pub(super) fn expire(
        &mut self,
        key: &[u8],
        deadline: Deadline,
        when: ExpireWhen,
    ) -> Result<OpResult, NodeError> {
        let Some(current) = self.live_deadline(key) else {
            return Ok(OpResult::Int(0));
        };
        let new = self.resolve(deadline, current);
        let infinite = |d: Option<u64>| d.unwrap_or(u64::MAX);
        let proceed = match when {
            ExpireWhen::Always => true,
            ExpireWhen::Nx => current.is_none(),
            ExpireWhen::Xx => current.is_some(),
            ExpireWhen::Gt => infinite(new) > infinite(current),
            ExpireWhen::Lt => infinite(new) < infinite(current),
            ExpireWhen::LtXx => current.is_some() && infinite(new) < infinite(current),
        };
        // PERSIST on a key without a deadline changes nothing.
        if !proceed || (new.is_none() && current.is_none()) {
            return Ok(OpResult::Int(0));
        }
        self.write_deadline(key, new)?;
        Ok(OpResult::Int(1))
    }

    /// `PTTL`: ms left, -1 without a deadline, -2 if the key is missing.
    pub(super) fn ttl(&self, key: &[u8]) -> OpResult {
        match self.live_deadline(key) {
            None => OpResult::Int(-2),
            Some(None) => OpResult::Int(-1),
            Some(Some(at)) => {
                let left = at.saturating_sub(self.clock.wall_ms());
                OpResult::Int(i64::try_from(left).unwrap_or(i64::MAX))
            }
        }
    }

    /// `GETEX`: the string, its deadline changed if asked.
    pub(super) fn get_ex(
        &mut self,
        key: &[u8],
        deadline: Option<Deadline>,
    ) -> Result<OpResult, NodeError> {
        let Some(value) = self.live(key).and_then(|r| r.to_value()) else {
            return Ok(OpResult::Value(None));
        };
        match &value {
            Value::Lww(_) | Value::Counter(_) => {}
            other => return Err(NodeError::wrong_type("lww", other.lattice_type())),
        }
        if let Some(d) = deadline {
            let current = self.live_deadline(key).flatten();
            let new = self.resolve(d, current);
            if new != current {
                self.write_deadline(key, new)?;
            }
        }
        Ok(OpResult::Value(Some(value)))
    }
}

#[cfg(test)]
#[path = "expiry_tests.rs"]
mod tests;
