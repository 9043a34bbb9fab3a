//! Replication of a shard: gossip of the changeset and hand-off.
//!
//! - **Gossip.** Writes of keys with other replicas leave a delta in the changeset, merged
//!   per key. [`Shard::take_gossip`] turns it into one batch per destination replica; the
//!   core ships the batches and reports back ([`Shard::delivered`] or
//!   [`Shard::requeue`]).
//! - **Hand-off.** A key this worker no longer replicates (after a view change, or a write
//!   that reached it under an older view) is *handed off*: its full record goes to its
//!   replicas, and it is dropped here (and the drop journaled) only once *every* one of
//!   them has acknowledged it durably ([`Shard::delivered`]).

use bytes::Bytes;
use lattice::{Blob, Lattice, Record, Value};
use placement::Replica;

use super::{GossipBatch, Map, Shard};
use crate::error::NodeError;

/// Most keys one gossip round takes from the changeset and the outbox. A round, its
/// encoding, the merge at its destination and the drops its acknowledgement allows each
/// hold their worker for about a millisecond at this size; rounds of 8,192 keys held them
/// for ~5-15 ms each, back to back through a hand-off (issue 14).
pub const MAX_ROUND_KEYS: usize = 2048;

/// About the most bytes of records one gossip round takes (one record may exceed it).
pub const MAX_ROUND_BYTES: usize = 2 << 20;

/// A batch being filled: its records, hand-offs (key, generation) and estimated bytes.
type BatchBuilding = (GossipBatch, Vec<(Bytes, u64)>, usize);

/// A batch of records for one destination replica.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// Where it goes.
    pub to: Replica,
    /// What to merge there.
    pub entries: GossipBatch,
    /// The hand-offs it carries, with their generations: the destination must
    /// acknowledge the batch only once the records are durable there (as durable as its
    /// storage allows), and the acknowledgement counts for those generations only.
    pub handoffs: Vec<(Bytes, u64)>,
    /// Estimated bytes of its keys and records (what the core bounds in flight).
    pub bytes: usize,
}

impl Outgoing {
    /// True if the destination must answer only once the records are durable.
    pub fn durable(&self) -> bool {
        !self.handoffs.is_empty()
    }
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

    /// Takes up to `MAX_ROUND_KEYS` keys (and about `MAX_ROUND_BYTES`) of the changeset
    /// and the outbox, as one batch per destination; the rest stays for the next round
    /// ([`Shard::has_gossip`] says whether there is more). The changeset keeps a round's
    /// worth of capacity — the same hot keys come back every period — but not what a
    /// bulk load grew it to: iterating a map walks its whole capacity, so every later round
    /// would pay for the load's size.
    pub fn take_gossip(&mut self) -> Vec<Outgoing> {
        let mut batches: Map<Replica, BatchBuilding> =
            Map::with_hasher(self.changeset.hasher().clone());
        let me = self.config.me;
        let view = self.view.clone();
        let mut budget_keys = MAX_ROUND_KEYS;
        let mut budget_bytes = MAX_ROUND_BYTES;
        self.demotions_taken();
        let taken: Vec<(Blob, Record)> = if self.changeset.len() <= budget_keys {
            self.changeset.drain().collect()
        } else {
            let keys: Vec<Blob> = self.changeset.keys().take(budget_keys).cloned().collect();
            keys.into_iter()
                .filter_map(|k| self.changeset.remove_entry(&k))
                .collect()
        };
        budget_keys -= taken.len();
        if self.changeset.is_empty() && self.changeset.capacity() > 4 * MAX_ROUND_KEYS {
            self.changeset.shrink_to(MAX_ROUND_KEYS);
        }
        let mut unsent: Vec<(Bytes, Record)> = Vec::new();
        let mut all_acked: Vec<Bytes> = Vec::new();
        for (key, record) in taken {
            let size = key.len() + record.approx_size();
            budget_bytes = budget_bytes.saturating_sub(size);
            let key = Bytes::from(key.into_vec());
            let handoff = self.handoff.get(&key[..]);
            let mut others = false;
            let mut sent = false;
            // Disk replicas skipped: the value reaches them when the key is evicted.
            let mut deferred = false;
            for r in view.replicas(&key) {
                if r == me {
                    continue;
                }
                if self.defers_to_eviction(&key, &record, r) {
                    deferred = true;
                    continue;
                }
                others = true;
                // A hand-off goes to each replica until it has acknowledged it.
                if handoff.is_some_and(|h| h.acked.contains(&r)) {
                    continue;
                }
                sent = true;
                let batch = batches.entry(r).or_default();
                batch.0.push((key.clone(), record.clone()));
                batch.2 += size;
                if let Some(h) = handoff {
                    batch.1.push((key.clone(), h.generation));
                }
            }
            if !sent {
                // A demotion that found no disk replica in this view: no longer one.
                self.demotion_unsent(&key);
            }
            if !others && deferred {
                // Already in the store (and the log); nothing else to send.
            } else if !others {
                unsent.push((key, record));
            } else if !sent {
                all_acked.push(key);
            }
        }
        // Hand-offs every replica already acknowledged (a requeued batch to some of them):
        // nothing left to send.
        for key in all_acked {
            self.try_drop(&key);
        }
        // Entries with no other replica to go to. Usually of a key this worker alone
        // replicates now, whose stored record already includes them; but an entry may be
        // the last copy of its writes: a hand-off retried after another recipient had
        // acknowledged it (so the key was dropped here) and crashed, until the view made
        // this worker the key's only replica. So it is kept here, never dropped.
        for (key, record) in unsent {
            if self.is_replica(&key) {
                self.handoff.remove(&key[..]);
                if self.merge_into_store(&key, record.clone()).is_err() {
                    // A disk error: keep it for the next round.
                    self.changeset.insert(Box::from(&key[..]), record);
                }
            } else {
                // No replica at all in this view: wait for the next one.
                self.changeset.insert(Box::from(&key[..]), record);
            }
        }
        // The outbox, destination by destination (in the map's seeded order), within what
        // is left of the round's budget; the rest stays queued.
        let destinations: Vec<Replica> = self.outbox.keys().copied().collect();
        for to in destinations {
            if budget_keys == 0 || budget_bytes == 0 {
                break;
            }
            let Some(queue) = self.outbox.get_mut(&to) else {
                continue;
            };
            let quota = budget_keys;
            let mut n = 0;
            let taken: Vec<Blob> = queue
                .extract_if(|_| {
                    n += 1;
                    n <= quota
                })
                .collect();
            if queue.is_empty() {
                self.outbox.remove(&to);
            }
            for key in taken {
                budget_keys = budget_keys.saturating_sub(1);
                // Still a replica there (views may have moved on), and still held here.
                if !view.is_replica(&key, to) {
                    continue;
                }
                if self.fault_in(&key).is_err() {
                    // A disk error: try again next round.
                    self.outbox.entry(to).or_default().insert(key);
                    continue;
                }
                if let Some(record) = self.store.get(&key) {
                    let record = record.to_record();
                    let size = key.len() + record.approx_size();
                    budget_bytes = budget_bytes.saturating_sub(size);
                    let generation = self.handoff.get(&key).map(|h| h.generation);
                    let key = Bytes::from(key.into_vec());
                    let batch = batches.entry(to).or_default();
                    batch.0.push((key.clone(), record));
                    batch.2 += size;
                    if let Some(g) = generation {
                        batch.1.push((key, g));
                    }
                }
            }
        }
        let out: Vec<Outgoing> = batches
            .into_iter()
            .map(|(to, (entries, handoffs, bytes))| Outgoing {
                to,
                entries,
                handoffs,
                bytes,
            })
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

    /// The keys being handed off, with the replicas that acknowledged them (introspection
    /// for status and the simulation's diagnostics).
    pub fn pending_handoffs(&self) -> Vec<(Bytes, Vec<Replica>)> {
        let mut out: Vec<(Bytes, Vec<Replica>)> = self
            .handoff
            .iter()
            .map(|(k, h)| (Bytes::copy_from_slice(k), h.acked.clone()))
            .collect();
        out.sort();
        out
    }

    /// Puts back the keys of a batch to `to` that failed (no answer, or an error): their
    /// current records go to `to` with the next round, unless `to` has stopped being their
    /// replica by then (the view change then sends them to whoever replaced it).
    pub fn requeue_keys(&mut self, to: Replica, keys: impl IntoIterator<Item = Bytes>) {
        let queue = self.outbox.entry(to).or_default();
        for key in keys {
            queue.insert(Box::from(&key[..]));
        }
    }

    /// Records that a batch reached `to` durably, with the hand-offs it carried (key,
    /// generation): a handed-off key that every one of its current replicas has now
    /// acknowledged at its current generation, with nothing newer pending, is dropped here,
    /// and the drop journaled. (An ordinary gossip batch acknowledges no hand-off.)
    ///
    /// Dropping a key forgets this worker's own contributions to it: its counter entry and
    /// the dots of its OR-set adds. If the key came back here later (the views changed
    /// back, e.g. after a partition healed) and took a write before its state arrived, the
    /// write would reuse them — a counter entry restarting from zero (the merge keeps the
    /// larger, older count: the new increments are lost) or an OR-set dot already used by
    /// another member (each replica then sees the other's member as removed). So once it
    /// has dropped keys, the worker writes under a new actor id: its old entries stay as
    /// they are everywhere, new writes add to a fresh one.
    pub fn delivered(&mut self, to: Replica, handoffs: &[(Bytes, u64)]) {
        if self.handoff.is_empty() {
            return;
        }
        let dropped_before = self.handed_off;
        for (key, generation) in handoffs {
            let Some(h) = self.handoff.get_mut(&key[..]) else {
                continue;
            };
            if h.generation != *generation {
                // A newer record of the key was queued since: this acknowledges an old one.
                continue;
            }
            if !h.acked.contains(&to) {
                h.acked.push(to);
            }
            self.try_drop(key);
        }
        if self.handed_off != dropped_before {
            self.actor = next_actor(self.actor);
        }
    }

    /// Drops a handed-off key if its hand-off is complete: nothing newer is pending, this
    /// worker is not a replica again, and every current replica acknowledged it.
    pub(super) fn try_drop(&mut self, key: &[u8]) {
        if self.changeset.contains_key(key) {
            return;
        }
        if self.is_replica(key) {
            self.handoff.remove(key);
            return;
        }
        let Some(h) = self.handoff.get(key) else {
            return;
        };
        let replicas = self.view.replicas(key);
        let complete = if self.break_handoff {
            !h.acked.is_empty()
        } else {
            !replicas.is_empty() && replicas.iter().all(|r| h.acked.contains(r))
        };
        if !complete {
            return;
        }
        let was_live = self.holds(key);
        if self.remove_from_disk(key).is_err() {
            // Kept (and still in the hand-off set): the next acknowledgement tries again.
            return;
        }
        let record = self.store.remove(key);
        if let (Some(log), Some(record)) = (self.audit.as_mut(), record) {
            log.push(super::Audit::Dropped {
                key: bytes::Bytes::copy_from_slice(key),
                record,
            });
        }
        self.log_drop(key);
        if was_live {
            self.track_liveness(
                key,
                store::MergeOutcome {
                    changed: true,
                    was_present: true,
                    was_live: true,
                    is_live: false,
                },
            );
        }
        self.handoff.remove(key);
        self.handed_off += 1;
    }

    /// Merges records received from another replica (gossip, repair, a write's copy) whose
    /// sender keeps them: it asked for no durable answer. Stops at the first record the
    /// disk refuses (the sender keeps the batch and retries).
    pub fn merge_gossip(&mut self, batch: GossipBatch) -> Result<(), NodeError> {
        self.merge_batch(batch, false)
    }

    /// Merges a batch whose sender asked for a durable answer: it may carry hand-offs,
    /// which the sender drops once this worker has acknowledged them, so this worker now
    /// answers for those records.
    ///
    /// A key this worker is itself handing off starts a new hand-off generation even if
    /// the record changed nothing here: the acknowledgements it collected, and those still
    /// on their way, are for records sent before it took this one over, and their senders
    /// may have passed the key on since — back here. Two workers whose views disagree
    /// (each thinks the other replicates the key, as during a leave) otherwise hand the
    /// key to each other, each acknowledges the other's copy and drops its own, and the
    /// record is gone from both.
    pub fn merge_handoff(&mut self, batch: GossipBatch) -> Result<(), NodeError> {
        self.merge_batch(batch, true)
    }

    /// Merges received records; `taken_over`: the sender may drop them once acknowledged.
    fn merge_batch(&mut self, batch: GossipBatch, taken_over: bool) -> Result<(), NodeError> {
        self.maintain_memory();
        for (key, record) in batch {
            self.gossip_received += 1;
            self.hlc.observe(record.epoch);
            if let Some(Value::Lww(l)) = &record.value {
                self.hlc.observe(l.ts);
            }
            if record.epoch < self.remembered(&key).unwrap_or(lattice::Timestamp::ZERO)
                && self.store.get(&key).is_none()
            {
                // Older than a delete reclaimed moments ago: the tombstone would have won.
                continue;
            }
            let changed = self.merge_into_store(&key, record)?;
            if !self.is_replica(&key)
                && (changed || taken_over || !self.handoff.contains_key(&key[..]))
            {
                // Sent under another view: pass it on to the current replicas (again, with
                // a new generation, if this worker now answers for it: see
                // `merge_handoff`).
                self.queue_handoff(&key)?;
            }
        }
        Ok(())
    }

    /// Queues the full state of `key` for its current replicas; once every one of them has
    /// acknowledged it, the key is dropped here unless this worker is one of them.
    pub fn queue_handoff(&mut self, key: &[u8]) -> Result<(), NodeError> {
        self.fault_in(key)?;
        if let Some(record) = self.store.get(key) {
            // The full state supersedes any pending delta of the key, and must reach every
            // replica again.
            self.changeset.insert(Box::from(key), record.to_record());
            self.next_handoff += 1;
            let generation = self.next_handoff;
            self.handoff.insert(
                Box::from(key),
                super::Handoff {
                    generation,
                    acked: Vec::new(),
                },
            );
        }
        Ok(())
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
