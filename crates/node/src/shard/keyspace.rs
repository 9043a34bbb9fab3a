//! The key space of a worker as RESP's `KEYS`, `SCAN`, `RANDOMKEY`, `FLUSHDB` and `INFO`'s
//! keyspace line see it, and `SPOP`.
//!
//! A node lists the keys it holds a replica of, each at exactly one worker: the first of the
//! key's replicas on this node (so a key replicated on several of its workers is listed
//! once). Keys are visited in
//! the order of the hash of the whole key (`placement::key_hash`, whatever the hash-tag
//! rule): a scan cursor is a position in that order, the same on every worker and node, so
//! a key that moves between workers during a scan is still visited where it is when the
//! scan passes its hash.
//!
//! Internal keys (the metadata prefix `\x00lkv\x00`) are never listed. Only records in
//! memory are visited: keys a memory-tier worker evicted to the disk tier are listed by
//! the disk tier's workers (on their node), not here.

use lattice::{Blob, LatticeType, Set, Value};
use placement::{key_hash, replication};
use store::RecordRef;

use super::Shard;
use crate::error::NodeError;
use crate::op::OpResult;

/// One page of a scan over a worker's keys.
#[derive(Debug, Default)]
pub struct ScanPage {
    /// Listed keys with their hash, in hash order.
    pub keys: Vec<(u64, Blob)>,
    /// Where the next page starts (every key with a smaller hash was visited); `None`:
    /// the worker's key space is exhausted.
    pub next: Option<u64>,
}

/// What a scan lists besides being a live user key this worker is primary for.
pub type KeyFilter<'a> = &'a dyn Fn(&[u8], Option<LatticeType>) -> bool;

impl Shard {
    /// True if this worker lists `key`: it is the first of the key's replicas on this node.
    fn lists(&self, key: &[u8]) -> bool {
        if self.single_worker {
            return true;
        }
        let me = self.config.me;
        let mut first = None;
        let vector = self.view.vector(key);
        self.view
            .view
            .for_each_replica_all(self.view.view.key_hash(key), &vector, |r| {
                if r.node == me.node && first.is_none() {
                    first = Some(r);
                }
            });
        first == Some(me)
    }

    /// Live user keys this worker lists (see `Shard::lists`), with a hash at least `from`,
    /// in hash order: keys are visited until at least `count` were visited (keys sharing a
    /// hash are never split across pages), and those passing `keep` are listed.
    pub fn scan_keys(&self, from: u64, count: usize, keep: KeyFilter<'_>) -> ScanPage {
        let now = self.clock.wall_ms();
        let mut page = ScanPage::default();
        let mut visited = 0usize;
        let first = (from >> 56) as usize;
        for p in first..store::PARTITIONS {
            let mut part: Vec<(u64, &[u8], Option<LatticeType>)> = self
                .store
                .iter_partition(p)
                .filter(|(key, r)| {
                    r.is_live()
                        && !super::expiry::expired_at(r, || now)
                        && !replication::is_metadata_key(key)
                })
                .map(|(key, r)| (key_hash(key), key, r.lattice_type()))
                .filter(|(h, key, _)| *h >= from && self.lists(key))
                .collect();
            part.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
            let mut last = None;
            for (h, key, ty) in part {
                if visited >= count && last != Some(h) {
                    page.next = Some(h);
                    return page;
                }
                visited += 1;
                last = Some(h);
                if keep(key, ty) {
                    page.keys.push((h, key.into()));
                }
            }
        }
        page
    }

    /// Live user keys this worker lists, and how many of them have a deadline (`DBSIZE`,
    /// `INFO`'s keyspace line).
    pub fn keyspace_counts(&self) -> (u64, u64) {
        let now = self.clock.wall_ms();
        let mut keys = 0;
        let mut expires = 0;
        for (key, r) in self.store.iter() {
            if !r.is_live() || replication::is_metadata_key(key) || !self.lists(key) {
                continue;
            }
            let deadline = match &r {
                RecordRef::Lww { .. } => None,
                RecordRef::Full(r) => r.deadline_ms(),
            };
            match deadline {
                Some(at) if at <= now => {}
                Some(_) => {
                    keys += 1;
                    expires += 1;
                }
                None => keys += 1,
            }
        }
        (keys, expires)
    }

    /// `SPOP key count`: removes up to `count` random members of the OR-set at `key` (as
    /// `SREM` of them, so a concurrent add of one on another replica wins) → the removed
    /// members as a grow-only set; `None` if the key is absent.
    pub(super) fn set_pop(&mut self, key: &[u8], count: u64) -> Result<OpResult, NodeError> {
        self.check_type(key, LatticeType::OrSet)?;
        let members: Vec<Blob> = match self.live_full(key) {
            Some(Value::OrSet(s)) => s.iter().cloned().collect(),
            _ => return Ok(OpResult::Value(None)),
        };
        let take = usize::try_from(count)
            .unwrap_or(usize::MAX)
            .min(members.len());
        let mut chosen: Vec<Blob> = members;
        // A partial Fisher-Yates shuffle: the first `take` are a uniform sample.
        for i in 0..take {
            let j = self.rng.usize(i..chosen.len());
            chosen.swap(i, j);
        }
        chosen.truncate(take);
        if !chosen.is_empty() {
            self.set_remove(key, &chosen)?;
        }
        Ok(OpResult::Value(Some(Value::Set(
            chosen.into_iter().collect::<Set<Blob>>(),
        ))))
    }

    /// `key`'s absolute deadline in ms, -1 without one, -2 if missing (`PEXPIRETIME`).
    pub(super) fn expire_time(&self, key: &[u8]) -> OpResult {
        match self.live(key) {
            None => OpResult::Int(-2),
            Some(RecordRef::Full(r)) => match r.deadline_ms() {
                Some(at) => OpResult::Int(i64::try_from(at).unwrap_or(i64::MAX)),
                None => OpResult::Int(-1),
            },
            Some(RecordRef::Lww { .. }) => OpResult::Int(-1),
        }
    }
}
