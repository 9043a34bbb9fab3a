//! Answering other workers: everything a [`PeerMsg`] asks of this worker.
//!
//! The sender is untrusted input like any other: every message is checked by the shard as
//! it applies it (key sizes, types, budgets), and a malformed one gets an error answer.

use placement::Replica;

use super::acks::SyncWaiter;
use super::requests::Origin;
use super::{Core, PeerMsg, PeerReply, Token};
use crate::codec::GossipBatch;
use crate::error::NodeError;
use crate::op::{Op, OpResult};
use crate::shard::Route;

/// Most bytes of records in one anti-entropy answer.
pub(super) const REPAIR_CHUNK_BYTES: usize = 1 << 20;

/// Most buckets one anti-entropy digest may cover.
pub(super) const MAX_DIGEST_BUCKETS: usize = 64;

impl Core {
    /// A request from worker `from`; its answer goes out as [`super::Effect::Respond`] with
    /// `token` — at once, or once what it waits for (the disk, other replicas) is done.
    pub fn on_peer(&mut self, from: Replica, msg: PeerMsg, token: Token) {
        match msg {
            PeerMsg::Replicate { entries, durable } => {
                self.serve_replicate(entries, durable, token)
            }
            PeerMsg::Forward { ops, ack } => {
                // Routed here under a view that may have changed since: run here anyway (a
                // write to a key this worker no longer replicates is handed off).
                let job = self.open_job(Origin::Peer(token), ops.len());
                let ack = ack.at_least(self.config.default_ack);
                let settling = self.shard.settling().is_some();
                let mut syncs = Vec::new();
                let mut misses = Vec::new();
                for (pos, op) in ops.into_iter().enumerate() {
                    // Served here: the worker that forwarded it did not count it.
                    self.stats.access(op.key());
                    if self.defer_for_fetch(job, pos, &op, ack, true) {
                        continue;
                    }
                    let Op::Get { key } = op else {
                        self.run_acked(job, pos, op, ack, true, &mut syncs);
                        continue;
                    };
                    let local = self.shard.route(&key) == Route::Local;
                    let result = self
                        .shard
                        .execute_forwarded(Op::Get { key: &key[..] }, ack.quiet);
                    match result {
                        // A miss while keys move asks their previous owners, as a client's
                        // read does (`run_ops`): the key may still be on its way here.
                        OpResult::Value(None) if local && settling => misses.push((pos, key)),
                        // Forwarded under another view: the key is where this one puts it.
                        OpResult::Value(None) if !local => self.relay_read(job, pos, key),
                        result => self.fill(job, pos, result),
                    }
                }
                self.sync_writes(syncs);
                if !misses.is_empty() {
                    self.settle_reads(job, misses);
                }
                self.start_tier_fetches();
                if let Some(results) = self.close_job(job) {
                    self.respond(token, Ok(PeerReply::Results(results)));
                }
            }
            PeerMsg::Digest { first, digests } => {
                let result = if digests.len() > MAX_DIGEST_BUCKETS {
                    Err(NodeError::BadRequest(format!(
                        "a digest of {} buckets exceeds the limit of {MAX_DIGEST_BUCKETS}",
                        digests.len()
                    )))
                } else if self.shard.declines_entropy_with(from) {
                    // Nothing to compare (see `Shard::declines_entropy_with`).
                    Ok(self.repair_answer(from, Vec::new(), None))
                } else {
                    let differing = self.shard.differing_range(from, first as usize, &digests);
                    Ok(self.repair_answer(from, differing, None))
                };
                self.respond(token, result);
            }
            PeerMsg::RepairMore { buckets, cursor } => {
                let mut buckets = buckets;
                if self.shard.declines_entropy_with(from) {
                    buckets.clear();
                }
                buckets.sort_unstable();
                buckets.dedup();
                let answer = self.repair_answer(from, buckets, Some(cursor));
                self.respond(token, Ok(answer));
            }
            PeerMsg::Fetch { keys } => {
                let mut found = GossipBatch::new();
                let mut failed = None;
                for key in keys {
                    match self.shard.record_of(&key) {
                        Ok(Some(record)) => found.push((key, record)),
                        Ok(None) => {}
                        Err(e) => failed = Some(e),
                    }
                }
                let result = match failed {
                    Some(e) if found.is_empty() => Err(e),
                    _ => Ok(PeerReply::Records(found)),
                };
                self.respond(token, result);
            }
            PeerMsg::CheckTombstones { entries } => {
                let covered = self.shard.check_tombstones(&entries);
                self.respond(token, Ok(PeerReply::Covered(covered)));
            }
            PeerMsg::Reclaim { entries, released } => {
                self.shard.release_tombstones(&released);
                let removed = self.shard.reclaim_tombstones(&entries);
                self.respond(token, Ok(PeerReply::Ack(removed)));
            }
        }
        self.gossip_if_full();
        self.arm_journal();
    }

    /// Merges records from another worker; answers once they are as durable as this
    /// worker's storage allows, if asked.
    fn serve_replicate(&mut self, entries: GossipBatch, durable: bool, token: Token) {
        let n = entries.len() as u64;
        let merged = if durable {
            // Possibly a hand-off: the sender drops what this worker acknowledges.
            self.shard.merge_handoff(entries)
        } else {
            self.shard.merge_gossip(entries)
        };
        match merged {
            // The sender keeps the batch and retries.
            Err(e) => self.respond(token, Err(e)),
            Ok(()) if durable => self.request_sync(false, SyncWaiter::Replicate(token, n)),
            Ok(()) => self.respond(token, Ok(PeerReply::Ack(n))),
        }
    }

    /// This worker's records of `buckets` shared with `peer`, a bounded part from `cursor`
    /// (the start if `None`).
    fn repair_answer(
        &self,
        peer: Replica,
        buckets: Vec<u32>,
        cursor: Option<super::RepairCursor>,
    ) -> PeerReply {
        let Some(&first) = buckets.first() else {
            return PeerReply::Repair {
                differing: buckets,
                entries: GossipBatch::new(),
                next: None,
            };
        };
        let cursor = cursor.unwrap_or(super::RepairCursor {
            bucket: first,
            skip: 0,
        });
        let (entries, next) =
            self.shard
                .bucket_entries_from(peer, &buckets, cursor, REPAIR_CHUNK_BYTES);
        PeerReply::Repair {
            differing: buckets,
            entries,
            next,
        }
    }
}
