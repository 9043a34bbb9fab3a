//! Reclaiming tombstones once every replica holds them.
//!
//! A tombstone is what stops an older write from bringing a deleted key back, so it may be
//! dropped only when no replica could still send such a write. The key's primary replica
//! (the only one that starts this, so replicas do not race each other) sweeps its store a
//! few partitions at a time for tombstones older than `tombstone_grace_ms`, then:
//!
//! Nothing is reclaimed while a member is declared dead — it may come back (a partition
//! heals, a node restarts with its disk) with an older write of any key — nor until the view
//! has been stable for the grace period, so that hand-offs the last change started (a node
//! that was a replica passing on what it held) have delivered.
//!
//! 1. **Check.** For each tombstone, it asks every other replica of the key whether it holds
//!    the key at the tombstone's epoch or later. Replicas holding exactly the tombstone mark
//!    it retiring: kept, but no longer offered to anti-entropy, so it cannot travel back to
//!    a replica that drops it first.
//! 2. **Reclaim.** Keys every replica confirmed are dropped by the primary and, on its
//!    word, by every other replica — only if they still hold exactly that tombstone (a
//!    write since is kept). Each drop is journaled.
//!
//! Replicas then remember the delete for another grace period (see `shard::tombstones`):
//! a write to the key meanwhile takes the tombstone's epoch, as on replicas that have not
//! dropped it yet, and a late record older than the delete is refused. What remains is in
//! `docs/consistency.md`.

use bytes::Bytes;
use lattice::Timestamp;
use placement::Replica;

use super::{Core, PeerMsg, PeerReply, PeerResult};
use crate::shard::BUCKETS;

/// Most tombstones one round checks.
const ROUND_TOMBSTONES: usize = 512;

/// Partitions swept per tick while looking for candidates.
const SWEEP_PARTITIONS: usize = 8;

/// Pause between sweeps of the whole store, ms.
const SWEEP_EVERY_MS: u64 = 1_000;

/// Pause between two sweep steps of a pass, ms: a pass of the 256 partitions takes about a
/// third of a second instead of every turn of the worker's loop (on a disk-tier worker each
/// step is a range scan of the LSM).
const SWEEP_STEP_MS: u64 = 10;

/// Pause after a round before the next sweep step, ms: at most [`ROUND_TOMBSTONES`] per
/// this long (about 10,000 a second per worker), so a mass delete is reclaimed at a pace
/// that leaves the worker to its requests (`bench/background`'s tombstone phase).
const ROUND_PAUSE_MS: u64 = 50;

/// Times a `Reclaim` that got no answer is sent again.
const RECLAIM_RETRIES: u8 = 3;

/// What a reclamation answer is for.
#[derive(Debug)]
pub(super) enum Phase {
    /// The first phase: entries sent, as indexes into the round's list.
    Check(Vec<usize>),
    /// The second phase: the entries to remove and to release, and retries left.
    Reclaim(Vec<(Bytes, Timestamp)>, Vec<(Bytes, Timestamp)>, u8),
}

/// A round of reclamation in progress.
#[derive(Debug)]
struct Round {
    entries: Vec<(Bytes, Timestamp)>,
    /// Per entry: replicas that must confirm, and how many did.
    needed: Vec<usize>,
    confirmed: Vec<usize>,
    /// Check answers awaited.
    waiting: usize,
}

/// Tombstone reclamation state of a core.
#[derive(Debug, Default)]
pub(super) struct Reclaimer {
    /// The next partition to sweep.
    cursor: usize,
    /// When the next sweep may start (monotonic ms).
    next_sweep: u64,
    /// Candidates found so far by the sweep under way.
    found: Vec<(Bytes, Timestamp)>,
    round: Option<Round>,
}

impl Reclaimer {
    /// When a sweep step is next due.
    pub(super) fn next_step(&self) -> Option<u64> {
        (self.round.is_none()).then_some(self.next_sweep)
    }
}

impl Core {
    /// Sweeps a few partitions for tombstones to reclaim, and starts a round when it has
    /// enough (or swept the whole store).
    pub(super) fn reclaim_step(&mut self, now: u64) {
        if self.reclaim.round.is_some() || now < self.reclaim.next_sweep {
            return;
        }
        // Hand-offs a view change started have had the grace period to complete.
        // Saturating: a grace too long to add (tombstone_grace_secs near u64::MAX) means
        // never, not a wrapped sum in the past (reclamation at once).
        let stable_at = self
            .view_since
            .saturating_add(self.config.tombstone_grace_ms);
        if now < stable_at || self.shard.view().dead > 0 {
            self.reclaim.next_sweep = stable_at.max(now + SWEEP_EVERY_MS);
            return;
        }
        self.shard.expire_retiring();
        if self.reclaim.cursor == 0
            && self.reclaim.found.is_empty()
            && !self.shard.holds_tombstones()
        {
            // Nothing a pass could find: on a disk-tier shard a pass reads the whole LSM.
            self.reclaim.next_sweep = now + SWEEP_EVERY_MS;
            return;
        }
        let grace = self.config.tombstone_grace_ms;
        self.reclaim.next_sweep = now + SWEEP_STEP_MS;
        for _ in 0..SWEEP_PARTITIONS {
            let p = self.reclaim.cursor;
            self.shard
                .tombstone_candidates(p, grace, ROUND_TOMBSTONES, &mut self.reclaim.found);
            self.reclaim.cursor = (p + 1) % BUCKETS;
            if self.reclaim.cursor == 0 {
                // A whole pass: rest before the next one.
                self.reclaim.next_sweep = now + SWEEP_EVERY_MS;
                break;
            }
            if self.reclaim.found.len() >= ROUND_TOMBSTONES {
                break;
            }
        }
        let full = self.reclaim.found.len() >= ROUND_TOMBSTONES;
        if full || (self.reclaim.cursor == 0 && !self.reclaim.found.is_empty()) {
            let entries = std::mem::take(&mut self.reclaim.found);
            self.start_round(entries);
        }
    }

    /// Phase one: asks every other replica of each key whether it holds the tombstone.
    fn start_round(&mut self, candidates: Vec<(Bytes, Timestamp)>) {
        let me = self.me();
        let view = self.shard.view().clone();
        let mut entries = Vec::with_capacity(candidates.len());
        let mut needed = Vec::with_capacity(candidates.len());
        let mut asks: Vec<(Replica, Vec<usize>)> = Vec::new();
        for (key, epoch) in candidates {
            let Some(replicas) = view.reclaim_replicas(&key) else {
                // A member declared dead: not now.
                continue;
            };
            let i = entries.len();
            let others: Vec<Replica> = replicas.into_iter().filter(|r| *r != me).collect();
            needed.push(others.len());
            entries.push((key, epoch));
            for r in others {
                match asks.iter_mut().find(|a| a.0 == r) {
                    Some(a) => a.1.push(i),
                    None => asks.push((r, vec![i])),
                }
            }
        }
        if entries.is_empty() {
            return;
        }
        let n = entries.len();
        self.reclaim.round = Some(Round {
            entries,
            needed,
            confirmed: vec![0; n],
            waiting: asks.len(),
        });
        if asks.is_empty() {
            self.finish_check();
            return;
        }
        for (to, indexes) in asks {
            let Some(round) = self.reclaim.round.as_ref() else {
                return;
            };
            let msg = PeerMsg::CheckTombstones {
                entries: indexes.iter().map(|&i| round.entries[i].clone()).collect(),
            };
            self.send(
                to,
                msg,
                super::gossip::Waiting::Reclaim(Phase::Check(indexes)),
            );
        }
    }

    /// An answer to either phase.
    pub(super) fn on_reclaim_reply(&mut self, to: Replica, phase: Phase, result: PeerResult) {
        match phase {
            Phase::Check(indexes) => {
                let Some(round) = self.reclaim.round.as_mut() else {
                    return;
                };
                round.waiting = round.waiting.saturating_sub(1);
                if let Ok(PeerReply::Covered(covered)) = result {
                    for (i, ok) in indexes.iter().zip(covered) {
                        if ok {
                            if let Some(c) = round.confirmed.get_mut(*i) {
                                *c += 1;
                            }
                        }
                    }
                }
                if round.waiting == 0 {
                    self.finish_check();
                }
            }
            Phase::Reclaim(entries, released, retries) => {
                if result.is_err() && retries > 0 && self.shard.view().has_node(to.node) {
                    let msg = PeerMsg::Reclaim {
                        entries: entries.clone(),
                        released: released.clone(),
                    };
                    let waiting = super::gossip::Waiting::Reclaim(Phase::Reclaim(
                        entries,
                        released,
                        retries - 1,
                    ));
                    self.send(to, msg, waiting);
                }
            }
        }
    }

    /// Phase two: drops the keys every replica confirmed, here and there, and releases the
    /// others (their retiring marks end).
    fn finish_check(&mut self) {
        let Some(round) = self.reclaim.round.take() else {
            return;
        };
        let pause_until = self.now() + ROUND_PAUSE_MS;
        self.reclaim.next_sweep = self.reclaim.next_sweep.max(pause_until);
        let me = self.me();
        let view = self.shard.view().clone();
        let mut mine = Vec::new();
        // Per replica: (to remove, to release).
        type Tell = (Vec<(Bytes, Timestamp)>, Vec<(Bytes, Timestamp)>);
        let mut tells: Vec<(Replica, Tell)> = Vec::new();
        for (i, (key, epoch)) in round.entries.into_iter().enumerate() {
            let confirmed = round.confirmed[i] >= round.needed[i];
            let replicas = view.replicas(&key);
            for r in replicas.into_iter().filter(|r| *r != me) {
                let t = match tells.iter_mut().find(|t| t.0 == r) {
                    Some(t) => t,
                    None => {
                        tells.push((r, (Vec::new(), Vec::new())));
                        tells.last_mut().expect("just pushed")
                    }
                };
                if confirmed {
                    t.1 .0.push((key.clone(), epoch));
                } else {
                    t.1 .1.push((key.clone(), epoch));
                }
            }
            if confirmed {
                mine.push((key, epoch));
            }
        }
        let removed = self.shard.reclaim_tombstones(&mine);
        if removed > 0 {
            tracing::debug!(removed, "tombstones reclaimed");
        }
        for (to, (entries, released)) in tells {
            let msg = PeerMsg::Reclaim {
                entries: entries.clone(),
                released: released.clone(),
            };
            let waiting =
                super::gossip::Waiting::Reclaim(Phase::Reclaim(entries, released, RECLAIM_RETRIES));
            self.send(to, msg, waiting);
        }
    }
}
