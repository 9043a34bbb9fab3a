//! Ops run as one unit on this worker: RESP `WATCH` fingerprints and guarded units
//! (`EXEC` after `WATCH`, `MSETNX`).
//!
//! A worker runs one op at a time, so ops run back to back inside one [`Op::Exec`] see no
//! other client's write in between — as long as every key of the unit is held here and
//! nowhere else can take writes that this worker would only see later. So:
//! - every key of a unit must be held by this worker (else the unit is refused whole);
//! - a `WATCH` fingerprint ([`Op::Version`]) and a [`Guard::Version`] need this worker to
//!   be the only replica of the key that takes client writes: with another one a concurrent
//!   write there could go unseen until gossip brings it, and a check here would let a lost
//!   update through. A key's disk-tier replicas take no client writes while it has a
//!   memory-tier replica (they forward requests to it, [`Shard::route`]), so a key of the
//!   default `latticekv local` (one memory replica, one disk replica) qualifies at its
//!   memory worker. What reaches the disk replicas from here (demotions, deletes, gossip
//!   under `every_write`) and what comes back (a promotion after eviction: the record is
//!   fetched and merged before the fingerprint is read or compared, like any read) is this
//!   worker's own writes: a merge that changes the record changes the fingerprint (at worst
//!   a needless abort), one that does not leaves it as it was.

use prost::Message;

use super::Shard;
use crate::error::NodeError;
use crate::op::{Guard, Op, OpResult};

impl Shard {
    /// A fingerprint of `key`'s record (0 if there is none): it changes with every write
    /// that reaches the record, a delete included (tombstones carry their timestamp).
    pub(super) fn fingerprint(&self, key: &[u8]) -> u64 {
        match self.store.get(key) {
            None => 0,
            Some(r) => {
                let bytes = wire::convert::record_to_pb(&r.to_record()).encode_to_vec();
                xxhash_rust::xxh3::xxh3_64(&bytes) | 1
            }
        }
    }

    /// Fails unless this worker is the only replica of `key` that takes client writes (see
    /// the module docs).
    pub(super) fn check_sole_replica(&self, key: &[u8]) -> Result<(), NodeError> {
        if self.is_replica(key) && !self.other_writers(key) {
            return Ok(());
        }
        let n = self.writers(key);
        Err(NodeError::InvalidArgument(format!(
            "WATCH cannot be honoured for key '{}': it has {n} replicas taking writes, and a \
             write at another replica could go unseen (a lost update); WATCH needs keys with \
             one memory-tier replica (or, without one, one replica), see docs/protocol.md",
            String::from_utf8_lossy(key)
        )))
    }

    /// `WATCH`: the fingerprint of `key`'s record, read at its only replica.
    pub(super) fn version(&mut self, key: &[u8]) -> Result<OpResult, NodeError> {
        self.check_sole_replica(key)?;
        Ok(OpResult::Int(self.fingerprint(key) as i64))
    }

    /// Runs `ops` as one unit if every guard holds (see the module docs): their results,
    /// or `Int(0)` with nothing applied if a guard failed.
    pub(super) fn exec<B: AsRef<[u8]>>(
        &mut self,
        guards: Vec<(B, Guard)>,
        ops: Vec<Op<B>>,
    ) -> Result<OpResult, NodeError> {
        let keys = guards
            .iter()
            .map(|(k, _)| k.as_ref())
            .chain(ops.iter().map(Op::key));
        for key in keys {
            if !self.is_replica(key) {
                return Err(NodeError::InvalidArgument(
                    "CROSSSLOT the keys of a transaction with WATCH (or of MSETNX) must be \
                     held by one worker; these are not, and nothing was applied"
                        .into(),
                ));
            }
            self.fault_in(key)?;
            if self.must_fetch(&Op::Get { key }) {
                return Err(NodeError::Unavailable(
                    "a key of the unit is on the disk tier only; retry".into(),
                ));
            }
        }
        if ops.iter().any(|o| matches!(o, Op::Exec { .. })) {
            return Err(NodeError::BadRequest("nested exec".into()));
        }
        for (key, guard) in &guards {
            let key = key.as_ref();
            let holds = match *guard {
                Guard::Version(v) => {
                    self.check_sole_replica(key)?;
                    self.fingerprint(key) == v
                }
                Guard::Absent => self.live(key).is_none(),
            };
            if !holds {
                return Ok(OpResult::Int(0));
            }
        }
        let results = ops.into_iter().map(|op| self.execute(op)).collect();
        Ok(OpResult::Multi(results))
    }
}
