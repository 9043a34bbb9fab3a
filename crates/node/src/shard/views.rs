//! View changes: switching a shard to a new view of the cluster.
//!
//! [`Shard::set_view`] switches at once — requests route by the new view from then on —
//! and compares the keys' replicas under the old and the new view a partition at a time
//! ([`Shard::reconcile_step`], driven by the core between requests, so a change of the
//! rings never holds the worker for a pass over the whole store). A key this worker no
//! longer replicates is handed off (see `sync`). A key that gained replicas (a join, or a
//! dead node's keys re-replicated) is sent to the newcomers by the first of its old
//! replicas that is still in the view — one sender, not all of them. A partition not yet
//! compared when another view arrives is compared from the oldest view it has not been
//! compared against. For `settle_ms` after a view change, a read that misses here may
//! also ask the previous view's replicas ([`Shard::settling`]): a key may still be on its
//! way here.

use std::sync::Arc;

use lattice::{Blob, Lww, Record, Value};
use placement::{replication, Replica, Tier};

use super::Shard;
use crate::view::ViewState;

impl Shard {
    /// Switches to a new view and queues the moves it implies (see the module docs).
    pub fn set_view(&mut self, next: Arc<ViewState>) {
        let old = std::mem::replace(&mut self.view, next);
        self.single_worker = super::is_single_worker(&self.view, self.config.me);
        self.sole_memory = super::is_sole_memory_worker(&self.view, self.config.me);
        let new = self.view.clone();
        let me = self.config.me;

        // Explicit vectors that changed: store their metadata records (on the metadata
        // key's replicas), and they are the only keys to check if the rings did not change.
        // Only the parts of the two tables that are not shared are walked.
        let changed_keys: Vec<Blob> = new.replication.changed_keys(&old.replication);
        for key in &changed_keys {
            let Some(entry) = new.replication.entry(key) else {
                continue;
            };
            let meta = replication::replication_key(key);
            if new.is_replica(&meta, me) {
                // A return to the default is stored as an empty vector.
                let encoded = entry.vector.as_ref().map(encode_vector).unwrap_or_default();
                let ts = entry.ts;
                let record = Record::new(ts, Some(Value::Lww(Lww::new(ts, encoded))));
                // A disk error here loses nothing: the agent's table is the source, and
                // anti-entropy repairs the record.
                let _ = self.merge_into_store(&meta, record);
            }
        }

        let rings_changed = old.rings != new.rings;
        // The memory tier's members changed (a join moves ranges to the newcomer, a leave to
        // those who stay): this memory worker may come to answer for keys a previous owner
        // evicted to the disk tier. Hand-offs carry only what the previous owners held in
        // RAM, and the disk replicas send a key to a newcomer only when no old memory
        // replica is left to do it, so such a key would read as absent here: the worker is
        // marked spilled, and its misses fetch from the disk tier as after an eviction of
        // its own. Conservative — a worker that only lost ranges is marked too, and pays a
        // disk round trip for reads of keys that exist nowhere — but it needs no word from
        // the previous owners.
        let memory_changed = rings_changed && memory_members(&old) != memory_members(&new);
        if memory_changed && !self.is_disk() && new.view.tier_size(Tier::Disk) > 0 {
            self.mark_spilled();
        }
        let mut handoff: Vec<Blob> = Vec::new();
        let mut directed: Vec<(Replica, Blob)> = Vec::new();
        if rings_changed {
            // Every partition not already waiting is compared against the old view.
            for base in self.reconcile.iter_mut() {
                if base.is_none() {
                    *base = Some(old.clone());
                    self.reconcile_waiting += 1;
                }
            }
        } else {
            for key in &changed_keys {
                if self.stores(key) {
                    compare(key, &old, &new, me, &mut handoff, &mut directed);
                }
            }
        }
        // Keys handed off earlier that this worker replicates again are simply its own.
        let back: Vec<Blob> = self
            .handoff
            .keys()
            .filter(|k| self.is_replica(k))
            .cloned()
            .collect();
        for key in back {
            self.handoff.remove(&key);
        }
        self.apply_moves(handoff, directed);
        // For `settle_ms` a read that misses also asks the key's other replicas under `old`
        // and `new` (keeping reads off their fast path meanwhile): a key may be on its way
        // here. Not if only other tiers' members changed under a memory worker that never
        // evicted (as when `latticekv local`'s disk node joins its memory node): its keys'
        // memory replicas are where they were, and its log holds every key it replicates.
        let vectors_changed = !changed_keys.is_empty();
        if vectors_changed
            || (rings_changed && (self.is_disk() || self.spilled() || memory_changed))
        {
            let without_me = new.without_node(me.node);
            self.previous = vec![old, Arc::new(without_me)];
            self.settling_until_ms = self.clock.mono_ms().saturating_add(self.config.settle_ms);
        }
    }

    /// At start, before serving: the keys stored here (replayed from the log, or on disk)
    /// may have been placed under the other hash-tag rule — written before this version,
    /// under `hash_tags = false`, or while a cluster member did not advertise hash tags.
    /// Each key is compared against the current view as if the view had changed from this
    /// view under the other rule: a key whose placement differs is handed off to its
    /// replicas (dropped here once they acknowledged it durably, as after any view change).
    ///
    /// A memory-tier worker compares its tagged keys at once (only they can differ, and
    /// they are in RAM) and returns a copy of each key it hands off, for each of its new
    /// replicas on this node: merged there before the node serves (see
    /// `place_by_rule`), a key reads back at once from its new worker, while the hand-off
    /// still decides when the copy here is dropped. A disk-tier worker walks its store
    /// between requests instead, as after a change of the rings, and meanwhile
    /// (`settle_ms`) reads that miss also ask the replicas under the other rule — as do
    /// the misses of a memory-tier worker that evicted keys to the disk tier.
    pub fn check_rule_placement(&mut self) -> Vec<(Replica, Blob, Record)> {
        let other = Arc::new(self.view.under_rule(!self.view.view.hash_tags()));
        if self.is_disk() {
            for base in self.reconcile.iter_mut() {
                if base.is_none() {
                    *base = Some(other.clone());
                    self.reconcile_waiting += 1;
                }
            }
            self.previous = vec![other];
            self.settling_until_ms = self.clock.mono_ms().saturating_add(self.config.settle_ms);
            return Vec::new();
        }
        let (me, new) = (self.config.me, self.view.clone());
        let mut handoff: Vec<Blob> = Vec::new();
        let mut directed: Vec<(Replica, Blob)> = Vec::new();
        for p in 0..store::PARTITIONS {
            // Records lent, not copied: only the keys matter.
            self.for_each_ref_in_partition(p, |key, _| {
                if placement::hash_tag(key).is_some() {
                    compare(key, &other, &new, me, &mut handoff, &mut directed);
                }
                true
            });
        }
        let mut copies: Vec<(Replica, Blob, Record)> = Vec::new();
        let targets = handoff
            .iter()
            .flat_map(|key| new.replicas(key).into_iter().map(move |r| (r, key)))
            .chain(directed.iter().map(|(r, key)| (*r, key)));
        for (to, key) in targets {
            if let Some(record) = self.store.get(key) {
                copies.push((to, key.clone(), record.to_record()));
            }
        }
        // Keys this worker evicted are on the disk tier, where the disk node moves them in
        // the background: meanwhile its misses also fetch from the other rule's replicas.
        if self.spilled() || copies.iter().any(|(to, ..)| to.node != me.node) {
            self.previous = vec![other];
            self.settling_until_ms = self.clock.mono_ms().saturating_add(self.config.settle_ms);
        }
        copies.retain(|(to, ..)| to.node == me.node);
        self.apply_moves(handoff, directed);
        copies
    }

    /// [`set_view`](Self::set_view), then the whole comparison at once (unit tests).
    #[cfg(test)]
    pub(crate) fn set_view_now(&mut self, next: Arc<ViewState>) {
        self.set_view(next);
        while self.reconcile_step(usize::MAX) {}
    }

    /// True while partitions wait to be compared against the current view.
    pub fn reconciling(&self) -> bool {
        self.reconcile_waiting > 0
    }

    /// Compares waiting partitions against the current view, about `budget` keys' worth
    /// (at least one partition), queueing the moves they imply. Returns true while more
    /// wait.
    pub fn reconcile_step(&mut self, budget: usize) -> bool {
        let me = self.config.me;
        let new = self.view.clone();
        let mut done = 0usize;
        let mut handoff: Vec<Blob> = Vec::new();
        let mut directed: Vec<(Replica, Blob)> = Vec::new();
        for p in 0..self.reconcile.len() {
            let Some(old) = self.reconcile[p].take() else {
                continue;
            };
            self.reconcile_waiting -= 1;
            // Vector changes were compared when they came; only the rings are left.
            if old.rings != new.rings {
                self.for_each_in_partition(p, None, |key, _| {
                    compare(key, &old, &new, me, &mut handoff, &mut directed);
                    true
                });
            }
            done += self.partition_entries(p).max(1);
            if done >= budget {
                break;
            }
        }
        self.apply_moves(handoff, directed);
        self.reconciling()
    }

    /// Queues hand-offs and sends to newcomers.
    fn apply_moves(&mut self, handoff: Vec<Blob>, directed: Vec<(Replica, Blob)>) {
        for key in handoff {
            if self.queue_handoff(&key).is_err() {
                // The disk failed reading it: it stays here, unreplicated elsewhere until
                // anti-entropy (the key is still stored; nothing is lost).
                continue;
            }
        }
        for (to, key) in directed {
            // A live value copied on eviction does not go to a new disk replica now
            // (a delete does: see `tier`).
            let live = self.store.get(&key).is_some_and(|r| r.is_live());
            if live && self.copies_on_eviction() && self.tracks_disk_acks(to) {
                continue;
            }
            self.outbox.entry(to).or_default().insert(key);
        }
    }

    /// While keys may still be moving after a view change: the views whose replicas a read
    /// that misses here may ask.
    pub fn settling(&self) -> Option<&[Arc<ViewState>]> {
        if !self.previous.is_empty() && self.clock.mono_ms() < self.settling_until_ms {
            Some(&self.previous)
        } else {
            None
        }
    }

    /// The peer address of `node` in the current view or, while a view change settles, in
    /// the previous views (see [`settling`](Self::settling)): a node that left is in no
    /// current view, yet holds its keys until every one of them is handed off.
    pub fn settling_peer_addr(&self, node: placement::NodeKey) -> Option<&str> {
        self.view
            .peer_addr(node)
            .or_else(|| self.settling()?.iter().find_map(|v| v.peer_addr(node)))
    }
}

/// At a node's start, before its workers run: each worker's
/// [`check_rule_placement`](Shard::check_rule_placement), and the copies it returns merged
/// into their workers (journaled there). Returns how many copies moved.
pub fn place_by_rule(shards: &mut [Shard]) -> Result<usize, crate::error::NodeError> {
    let copies: Vec<(Replica, Blob, Record)> = shards
        .iter_mut()
        .flat_map(Shard::check_rule_placement)
        .collect();
    if !copies.is_empty() {
        tracing::info!(
            keys = copies.len(),
            "moving keys stored under the other hash-tag rule to their workers"
        );
    }
    for (to, key, record) in &copies {
        if let Some(shard) = shards.get_mut(to.worker as usize) {
            shard.merge_gossip(vec![(bytes::Bytes::from(key.to_vec()), record.clone())])?;
            if shard.spilled() {
                // As for a key replayed from the log of a node that evicted: what it holds
                // may be part of the key (the disk tier has the rest).
                shard.store.set_partial(key, true);
            }
        }
    }
    Ok(copies.len())
}

/// The memory tier's members of `view` (ids, worker counts, virtual nodes), sorted.
fn memory_members(view: &ViewState) -> Vec<(&str, usize, u32)> {
    let mut members: Vec<(&str, usize, u32)> = view
        .view
        .nodes()
        .filter(|(_, n)| n.tier == Tier::Memory)
        .map(|(_, n)| (n.id.as_str(), n.workers.len(), n.vnodes))
        .collect();
    members.sort_unstable();
    members
}

/// What a change from `old` to `new` means for `key` here: a hand-off if this worker
/// (`me`) is no longer a replica, sends to the newcomers if it is their sender.
fn compare(
    key: &[u8],
    old: &ViewState,
    new: &ViewState,
    me: Replica,
    handoff: &mut Vec<Blob>,
    directed: &mut Vec<(Replica, Blob)>,
) {
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
}

/// Encodes a replication vector as stored in metadata records: four little-endian u32s
/// (memory global, memory local, disk global, disk local); a key returned to the default
/// placement has an empty record value.
pub fn encode_vector(v: &placement::ReplicationVector) -> Blob {
    let mut out = Vec::with_capacity(16);
    for n in [v.memory.global, v.memory.local, v.disk.global, v.disk.local] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.into_boxed_slice()
}
