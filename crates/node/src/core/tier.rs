//! Ops on keys a memory-tier worker evicted: fetching their records from the disk tier.
//!
//! Once a worker has evicted keys (see `shard::tier`), an op that needs a key's current
//! state — a read, a delete, a conditional or collection write — on a key not in RAM (or
//! held only partially) waits while the key's record is fetched from its disk replicas (a
//! `Fetch`, as reads do while keys move). The record is merged into RAM, then every op that
//! waited for the key runs, in arrival order; an op on a key being fetched waits too, even
//! one that would not need it, so ops on a key keep their order. Concurrent ops on one key
//! share one fetch. A key asked of several workers (several disk replicas, or previous
//! owners while a view change settles) is complete once every one answered; if none could,
//! its ops fail as unavailable. The record then stays in RAM only if the key is warm.

use bytes::Bytes;
use lattice::{Lattice, Record};
use placement::Replica;

use super::{Core, Map, PeerMsg, PeerReply, PeerResult};
use crate::ack::Ack;
use crate::error::NodeError;
use crate::op::Op;

/// Most ops waiting for one key's record; beyond it an op fails as unavailable (memory
/// stays bounded while a disk replica is slow).
const MAX_WAITING_PER_KEY: usize = 1024;

/// An op waiting for its key's record.
struct Deferred {
    job: u64,
    pos: usize,
    op: Op<Bytes>,
    ack: Ack,
    forwarded: bool,
}

/// One key being fetched.
struct KeyFetch {
    /// Answers still awaited.
    left: usize,
    /// Some worker answered.
    answered: bool,
    /// What the answers held, merged.
    record: Option<Record>,
    /// The key is backed: the backing store's part in the fetch.
    store: StorePart,
    /// Disk-tier workers were asked.
    from_disk: bool,
    /// Ops waiting, in arrival order.
    ops: Vec<Deferred>,
}

/// A backed key's fetch from the backing store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StorePart {
    /// Not a backed key.
    None,
    /// Asked.
    Waiting,
    /// The store answered.
    Answered,
    /// The store failed, or may not be read now (failed mode; recovery under TAR or DIS).
    Unavailable,
}

/// Fetches of evicted keys in progress.
pub(super) struct TierFetches {
    keys: Map<Bytes, KeyFetch>,
    /// Keys deferred by the current call and not yet asked for.
    new: Vec<Bytes>,
}

impl TierFetches {
    pub(super) fn new(hasher: foldhash::fast::FixedState) -> TierFetches {
        TierFetches {
            keys: Map::with_hasher(hasher),
            new: Vec::new(),
        }
    }

    /// True if `key` is being fetched.
    pub(super) fn fetching(&self, key: &[u8]) -> bool {
        !self.keys.is_empty() && self.keys.contains_key(key)
    }
}

impl Core {
    /// True if `op` must wait for its key's record (see the module docs).
    pub(super) fn must_wait<B: AsRef<[u8]>>(&self, op: &Op<B>) -> bool {
        (self.shard.spilled() || self.shard.has_backing())
            && (self.tier.fetching(op.key()) || self.shard.must_fetch(op))
    }

    /// Defers `op` until its key's record arrived, if it must wait; false if it can run
    /// now. Fetches start with [`Core::start_tier_fetches`].
    pub(super) fn defer_for_fetch<B: AsRef<[u8]>>(
        &mut self,
        job: u64,
        pos: usize,
        op: &Op<B>,
        ack: Ack,
        forwarded: bool,
    ) -> bool {
        if !self.must_wait(op) {
            return false;
        }
        let deferred = Deferred {
            job,
            pos,
            op: op.to_owned_op(),
            ack,
            forwarded,
        };
        let key = deferred.op.key_bytes().clone();
        match self.tier.keys.get_mut(&key) {
            Some(f) if f.ops.len() >= MAX_WAITING_PER_KEY => {
                let e = NodeError::Unavailable("too many requests wait for this key".into());
                self.fill(job, pos, crate::op::OpResult::Error(e));
            }
            Some(f) => f.ops.push(deferred),
            None => {
                self.tier.keys.insert(
                    key.clone(),
                    KeyFetch {
                        left: 0,
                        answered: false,
                        record: None,
                        store: StorePart::None,
                        from_disk: false,
                        ops: vec![deferred],
                    },
                );
                self.tier.new.push(key);
            }
        }
        true
    }

    /// Asks the disk tier for the keys deferred since the last call: one `Fetch` per
    /// target worker.
    pub(super) fn start_tier_fetches(&mut self) {
        if self.tier.new.is_empty() {
            return;
        }
        let keys = std::mem::take(&mut self.tier.new);
        let mut targets: Vec<(Replica, Vec<Bytes>)> = Vec::new();
        let mut unreachable: Vec<Bytes> = Vec::new();
        let mut from_store: Vec<Bytes> = Vec::new();
        for key in keys {
            let backed = self.shard.backed(&key).is_some();
            // A backed key's record comes from the store; from the disk tier too when this
            // worker evicted, or when the store cannot be read now (what the disk tier has
            // may then be served).
            let from_disk = self.shard.fetches_from_disk(&key)
                || (backed && !self.shard.reads_through() && self.shard.tiered(&key));
            let to = if from_disk {
                self.shard.fetch_targets(&key)
            } else {
                Vec::new()
            };
            if backed {
                from_store.push(key.clone());
            }
            if to.is_empty() && !backed {
                unreachable.push(key);
                continue;
            }
            if let Some(f) = self.tier.keys.get_mut(&key) {
                f.left = to.len() + backed as usize;
                f.from_disk = !to.is_empty();
                if backed {
                    f.store = StorePart::Waiting;
                }
            }
            for r in to {
                match targets.iter_mut().find(|t| t.0 == r) {
                    Some(t) => t.1.push(key.clone()),
                    None => targets.push((r, vec![key.clone()])),
                }
            }
        }
        for key in unreachable {
            // No disk replica in the view (it left): what RAM holds is all there is.
            if let Some(f) = self.tier.keys.get_mut(&key) {
                f.answered = true;
            }
            self.finish_tier_fetch(key);
        }
        for (to, keys) in targets {
            let msg = PeerMsg::Fetch { keys: keys.clone() };
            self.send(to, msg, super::gossip::Waiting::TierFetch(keys));
        }
        if !from_store.is_empty() && !self.fetch_from_store(from_store.clone()) {
            self.shard.note_backing_reads(0, from_store.len());
            self.on_store_records(from_store, None);
        }
    }

    /// The backing store's answer for `keys` (`None`: it failed, or was not asked).
    pub(super) fn on_store_records(
        &mut self,
        keys: Vec<Bytes>,
        records: Option<Vec<Option<Record>>>,
    ) {
        let answered = records.is_some();
        let mut records = records.map(Vec::into_iter);
        for key in keys {
            let record = records.as_mut().and_then(Iterator::next).flatten();
            let Some(f) = self.tier.keys.get_mut(&key) else {
                continue;
            };
            f.store = if answered {
                StorePart::Answered
            } else {
                StorePart::Unavailable
            };
            if let Some(record) = record {
                match f.record.as_mut() {
                    Some(r) => {
                        r.merge(record);
                    }
                    None => f.record = Some(record),
                }
            }
            f.left = f.left.saturating_sub(1);
            if f.left == 0 {
                self.finish_tier_fetch(key);
            }
        }
        self.start_tier_fetches();
        self.gossip_if_full();
    }

    /// One worker's answer to a fetch of `keys`.
    pub(super) fn on_tier_fetch_reply(&mut self, keys: Vec<Bytes>, result: PeerResult) {
        let found = match result {
            Ok(PeerReply::Records(batch)) => Some(batch),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(error = ?e, keys = keys.len(), "fetch from the disk tier failed");
                None
            }
        };
        let ok = found.is_some();
        for (key, record) in found.into_iter().flatten() {
            if let Some(f) = self.tier.keys.get_mut(&key) {
                match f.record.as_mut() {
                    Some(r) => {
                        r.merge(record);
                    }
                    None => f.record = Some(record),
                }
            }
        }
        for key in keys {
            let Some(f) = self.tier.keys.get_mut(&key) else {
                continue;
            };
            f.left = f.left.saturating_sub(1);
            f.answered |= ok;
            if f.left == 0 {
                self.finish_tier_fetch(key);
            }
        }
        self.start_tier_fetches();
        self.gossip_if_full();
    }

    /// Every answer for `key` arrived: merge, run the ops that waited, keep or drop.
    fn finish_tier_fetch(&mut self, key: Bytes) {
        let Some(f) = self.tier.keys.remove(&key) else {
            return;
        };
        let refused = match f.store {
            // The store was the authority on a backed key: without it, only what the disk
            // tier found, or what RAM holds (a partial record: the latest blind writes made
            // here, as the thesis's failed-mode writes update the cache), may be served.
            StorePart::Unavailable
                if f.record.is_none() && self.shard.store().get(&key).is_none() =>
            {
                Some("the backing store is unavailable and the key is not in the cache".to_string())
            }
            StorePart::None if !f.answered => {
                Some("the key is on the disk tier, which could not be reached".to_string())
            }
            _ => None,
        };
        if let Some(why) = refused {
            let e = NodeError::Unavailable(why);
            for d in f.ops {
                self.fill(d.job, d.pos, crate::op::OpResult::Error(e.clone()));
            }
            return;
        }
        // Without the store, what the disk tier found is merged but the record stays
        // partial (the store may hold more).
        let complete = f.store != StorePart::Unavailable;
        let keep = self
            .shard
            .merge_fetched(&key, f.record, f.from_disk, complete);
        let mut syncs = Vec::new();
        for d in f.ops {
            if d.forwarded || d.op.is_write() {
                self.run_acked(d.job, d.pos, d.op, d.ack, d.forwarded, &mut syncs);
            } else {
                let result = self.shard.execute(d.op);
                self.fill(d.job, d.pos, result);
            }
        }
        self.sync_writes(syncs);
        self.shard.settle_fetched(&key, keep);
        self.arm_journal();
    }
}
