//! Replication of a shard: gossip of the changeset, view changes, anti-entropy.
//!
//! - **Gossip.** Writes of keys with other replicas leave a delta in the changeset, merged
//!   per key. [`Shard::take_gossip`] turns it into one batch per destination replica; the
//!   worker ships the batches and reports back ([`Shard::delivered`] or
//!   [`Shard::requeue`]).
//! - **View changes.** [`Shard::set_view`] compares every key's replicas under the old and
//!   the new view. A key this worker no longer replicates is *handed off*: its full record
//!   goes to the new replicas and is dropped here once delivered. A key that gained replicas
//!   (a join, or a dead node's keys re-replicated) is sent to the newcomers by the first of
//!   its old replicas that is still in the view — one sender, not all of them.
//! - **Reads during a move.** For `settle_ms` after a view change, a read that misses here
//!   may also ask the previous view's replicas ([`Shard::settling`]).
//! - **Anti-entropy.** [`Shard::digest`] sums a hash of every (key, record) this worker
//!   shares with a peer replica into [`BUCKETS`] buckets; peers compare digests and exchange
//!   the records of the buckets that differ, so updates lost by gossip still converge.

use std::sync::Arc;

use bytes::Bytes;
use hashbrown::HashMap;
use lattice::{Blob, Lattice, Lww, Record, Value};
use placement::{key_hash, replication, Replica};
use prost::Message;

use super::{GossipBatch, Shard};
use crate::cluster::ViewState;

/// Most keys one gossip round takes from the changeset and the outbox.
pub const MAX_ROUND_KEYS: usize = 8192;

/// About the most bytes of records one gossip round takes (one record may exceed it).
pub const MAX_ROUND_BYTES: usize = 8 << 20;

/// Number of anti-entropy buckets (a key's bucket is the top 8 bits of its hash).
pub const BUCKETS: usize = 256;

/// Per-bucket digests of the keys shared with one peer.
pub type AntiEntropyDigest = Vec<u64>;

/// A batch of records for one destination replica.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// Where it goes.
    pub to: Replica,
    /// What to merge there.
    pub entries: GossipBatch,
}

/// The anti-entropy bucket of a key.
pub fn bucket_of(key: &[u8]) -> usize {
    (key_hash(key) >> 56) as usize
}

/// Hash of one (key, record): the record's canonical protobuf encoding (ordered maps), so
/// equal states hash equal on every replica.
fn entry_hash(key: &[u8], record: &Record) -> u64 {
    let mut bytes = key.to_vec();
    bytes.extend_from_slice(&wire::convert::record_to_pb(record).encode_to_vec());
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

impl Shard {
    /// True if the changeset is big enough that the worker should gossip before the timer.
    pub fn changeset_full(&self) -> bool {
        self.changeset.len() >= self.config.max_changeset_keys
    }

    /// True if there is anything to gossip.
    pub fn has_gossip(&self) -> bool {
        !self.changeset.is_empty() || !self.outbox.is_empty()
    }

    /// Takes up to [`MAX_ROUND_KEYS`] keys (and about [`MAX_ROUND_BYTES`]) of the changeset
    /// and the outbox, as one batch per destination; the rest stays for the next round
    /// ([`Shard::has_gossip`] says whether there is more). The changeset keeps its
    /// capacity: the same hot keys come back every period.
    pub fn take_gossip(&mut self) -> Vec<Outgoing> {
        let mut batches: HashMap<Replica, GossipBatch> = HashMap::new();
        let me = self.config.me;
        let view = self.view.clone();
        let mut budget_keys = MAX_ROUND_KEYS;
        let mut budget_bytes = MAX_ROUND_BYTES;
        let taken: Vec<(Blob, Record)> = if self.changeset.len() <= budget_keys {
            self.changeset.drain().collect()
        } else {
            let keys: Vec<Blob> = self.changeset.keys().take(budget_keys).cloned().collect();
            keys.into_iter()
                .filter_map(|k| self.changeset.remove_entry(&k))
                .collect()
        };
        budget_keys -= taken.len();
        let mut unsent: Vec<(Bytes, Record)> = Vec::new();
        for (key, record) in taken {
            budget_bytes = budget_bytes.saturating_sub(key.len() + record.approx_size());
            let key = Bytes::from(key.into_vec());
            let mut sent = false;
            for r in view.replicas(&key) {
                if r != me {
                    sent = true;
                    batches
                        .entry(r)
                        .or_default()
                        .push((key.clone(), record.clone()));
                }
            }
            if !sent {
                unsent.push((key, record));
            }
        }
        // Entries with no other replica to go to. Usually of a key this worker alone
        // replicates now, whose stored record already includes them; but an entry may be
        // the last copy of its writes: a hand-off retried after another recipient had
        // acknowledged it (so the key was dropped here) and crashed, until the view made
        // this worker the key's only replica. So it is kept here, never dropped.
        for (key, record) in unsent {
            if self.is_replica(&key) {
                self.handoff.remove(&key[..]);
                self.merge_into_store(&key, record);
            } else {
                // No replica at all in this view: wait for the next one.
                self.changeset.insert(Box::from(&key[..]), record);
            }
        }
        let mut outbox: Vec<(Replica, Vec<Blob>)> = self.outbox.drain().collect();
        for (to, keys) in outbox.iter_mut() {
            let to = *to;
            while budget_keys > 0 && budget_bytes > 0 {
                let Some(key) = keys.pop() else { break };
                budget_keys -= 1;
                // Still a replica there (views may have moved on), and still held here.
                if !view.is_replica(&key, to) {
                    continue;
                }
                self.fault_in(&key);
                if let Some(record) = self.store.get(&key) {
                    let record = record.to_record();
                    budget_bytes = budget_bytes.saturating_sub(key.len() + record.approx_size());
                    batches
                        .entry(to)
                        .or_default()
                        .push((Bytes::from(key.into_vec()), record));
                }
            }
        }
        // What did not fit waits for the next round.
        for (to, keys) in outbox {
            if !keys.is_empty() {
                self.outbox.entry(to).or_default().extend(keys);
            }
        }
        let out: Vec<Outgoing> = batches
            .into_iter()
            .map(|(to, entries)| Outgoing { to, entries })
            .collect();
        self.gossip_sent += out.iter().map(|o| o.entries.len() as u64).sum::<u64>();
        out
    }

    /// Puts back a batch that could not be delivered; it goes to the key's replicas with
    /// the next round.
    pub fn requeue(&mut self, out: Outgoing) {
        for (key, record) in out.entries {
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

    /// Records that a batch reached its destination: handed-off keys that are no longer
    /// replicated here and have nothing pending are dropped.
    ///
    /// Dropping a key forgets this worker's own contributions to it: its counter entry and
    /// the dots of its OR-set adds. If the key came back here later (the views changed
    /// back, e.g. after a partition healed) and took a write before its state arrived, the
    /// write would reuse them — a counter entry restarting from zero (the merge keeps the
    /// larger, older count: the new increments are lost) or an OR-set dot already used by
    /// another member (each replica then sees the other's member as removed). So once it
    /// has dropped keys, the worker writes under a new actor id: its old entries stay as
    /// they are everywhere, new writes add to a fresh one.
    pub fn delivered<'k>(&mut self, keys: impl IntoIterator<Item = &'k [u8]>) {
        if self.handoff.is_empty() {
            return;
        }
        let dropped_before = self.handed_off;
        for key in keys {
            if !self.handoff.contains(key) || self.changeset.contains_key(key) {
                continue;
            }
            if self.is_replica(key) {
                self.handoff.remove(key);
                continue;
            }
            let outcome_live = self.holds(key);
            self.store.remove(key);
            self.remove_from_disk(key);
            if outcome_live {
                self.track_liveness(
                    key,
                    store::MergeOutcome {
                        changed: true,
                        was_live: true,
                        is_live: false,
                    },
                );
            }
            self.handoff.remove(key);
            self.handed_off += 1;
        }
        if self.handed_off != dropped_before {
            self.actor = next_actor(self.actor);
        }
    }

    /// Merges records received from another replica (gossip, hand-off, repair).
    pub fn merge_gossip(&mut self, batch: GossipBatch) {
        self.evict_if_needed();
        for (key, record) in batch {
            self.gossip_received += 1;
            self.hlc.observe(record.epoch);
            if let Some(Value::Lww(l)) = &record.value {
                self.hlc.observe(l.ts);
            }
            self.merge_into_store(&key, record);
            if !self.is_replica(&key) {
                // Sent under another view: pass it on to the current replicas.
                self.queue_handoff(&key);
            }
        }
    }

    /// Queues the full state of `key` for its current replicas; once delivered, the key is
    /// dropped here unless this worker is one of them.
    pub fn queue_handoff(&mut self, key: &[u8]) {
        self.fault_in(key);
        if let Some(record) = self.store.get(key) {
            // The full state supersedes any pending delta of the key.
            self.changeset.insert(Box::from(key), record.to_record());
            self.handoff.insert(Box::from(key));
        }
    }

    /// Periodic housekeeping after a gossip round: collects tombstones older than
    /// `tombstone_grace_ms`.
    pub fn after_gossip(&mut self, tombstone_grace_ms: u64) {
        let now = (self.now_ms)();
        // A pass over the store's full entries: once a second is plenty for a grace period
        // of minutes.
        if now < self.next_tombstone_collect_ms {
            return;
        }
        self.next_tombstone_collect_ms = now.saturating_add(1_000);
        let before = now.saturating_sub(tombstone_grace_ms);
        self.store.collect_tombstones(before);
        self.collect_disk_tombstones(before);
    }

    // ---- views ----------------------------------------------------------------------------

    /// Switches to a new view and queues the moves it implies (see the module docs).
    pub fn set_view(&mut self, next: Arc<ViewState>) {
        let old = std::mem::replace(&mut self.view, next);
        self.single_worker = super::is_single_worker(&self.view, self.config.me);
        let new = self.view.clone();
        let me = self.config.me;

        // Explicit vectors that changed: store their metadata records (on the metadata
        // key's replicas), and they are the only keys to check if the rings did not change.
        let mut changed_keys: Vec<Blob> = Vec::new();
        for (key, (ts, vector)) in new.replication.iter() {
            if old.replication.get(key) != Some(&(*ts, *vector)) {
                changed_keys.push(key.clone());
                let meta = replication::replication_key(key);
                if new.is_replica(&meta, me) {
                    let encoded = encode_vector(vector);
                    let record = Record::new(*ts, Some(Value::Lww(Lww::new(*ts, encoded))));
                    self.merge_into_store(&meta, record);
                }
            }
        }
        for key in old.replication.keys() {
            if !new.replication.contains_key(key) {
                changed_keys.push(key.clone());
            }
        }

        let rings_changed = old.rings != new.rings;
        let mut handoff: Vec<Blob> = Vec::new();
        let mut directed: Vec<(Replica, Blob)> = Vec::new();
        let mut check = |key: &[u8]| {
            let old_set = old.replicas(key);
            let new_set = new.replicas(key);
            if old_set == new_set {
                return;
            }
            if !new_set.contains(&me) {
                handoff.push(Box::from(key));
                return;
            }
            // The first old replica still in the view sends the key to the newcomers.
            let sender = old_set.iter().find(|r| new.has_node(r.node)).copied();
            if sender == Some(me) || (sender.is_none() && old_set.contains(&me)) {
                for r in new_set.iter().filter(|r| !old_set.contains(r)) {
                    directed.push((*r, Box::from(key)));
                }
            }
        };
        if rings_changed {
            self.for_each_key(&mut check);
        } else {
            for key in &changed_keys {
                if self.stores(key) {
                    check(key);
                }
            }
        }
        for key in handoff {
            self.queue_handoff(&key);
        }
        for (to, key) in directed {
            self.outbox.entry(to).or_default().push(key);
        }
        if rings_changed || !changed_keys.is_empty() {
            let without_me = new.without_node(me.node);
            self.previous = vec![old, Arc::new(without_me)];
            self.settling_until_ms = (self.now_ms)().saturating_add(self.config.settle_ms);
        }
    }

    /// While keys may still be moving after a view change: the views whose replicas a read
    /// that misses here may ask.
    pub fn settling(&self) -> Option<&[Arc<ViewState>]> {
        if (self.now_ms)() < self.settling_until_ms && !self.previous.is_empty() {
            Some(&self.previous)
        } else {
            None
        }
    }

    // ---- anti-entropy ---------------------------------------------------------------------

    /// Keys stored here that `peer` should hold too.
    fn shared_with(&self, key: &[u8], peer: Replica) -> bool {
        self.view.is_replica(key, peer) && self.is_replica(key)
    }

    /// Per-bucket digests of the keys this worker shares with `peer`.
    pub fn digest(&self, peer: Replica) -> AntiEntropyDigest {
        let mut buckets = vec![0u64; BUCKETS];
        self.for_each_record(
            |key| self.shared_with(key, peer),
            |key, record| {
                buckets[bucket_of(key)] =
                    buckets[bucket_of(key)].wrapping_add(entry_hash(key, &record));
            },
        );
        buckets
    }

    /// The buckets where `theirs` (a peer's digest of the keys it shares with this worker)
    /// differs from this worker's digest for that peer.
    pub fn differing(&self, peer: Replica, theirs: &[u64]) -> Vec<u32> {
        let mine = self.digest(peer);
        (0..BUCKETS)
            .filter(|&b| theirs.get(b).copied().unwrap_or(0) != mine[b])
            .map(|b| b as u32)
            .collect()
    }

    /// This worker's records of the keys it shares with `peer` in `buckets`.
    pub fn bucket_entries(&self, peer: Replica, buckets: &[u32]) -> GossipBatch {
        let mut wanted = [false; BUCKETS];
        for &b in buckets {
            if let Some(w) = wanted.get_mut(b as usize) {
                *w = true;
            }
        }
        let mut out = GossipBatch::new();
        self.for_each_record(
            |key| wanted[bucket_of(key)] && self.shared_with(key, peer),
            |key, record| out.push((Bytes::copy_from_slice(key), record)),
        );
        out
    }
}

/// The writer id that follows `actor` (a splitmix64 step: as unlikely as a random id to
/// repeat an earlier one or another worker's; deterministic, so simulations replay).
fn next_actor(actor: u64) -> u64 {
    let mut z = actor.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Encodes a replication vector as stored in metadata records: four little-endian u32s
/// (memory global, memory local, disk global, disk local).
pub fn encode_vector(v: &placement::ReplicationVector) -> Blob {
    let mut out = Vec::with_capacity(16);
    for n in [v.memory.global, v.memory.local, v.disk.global, v.disk.local] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.into_boxed_slice()
}
