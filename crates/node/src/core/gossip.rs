//! Gossip rounds, and the bookkeeping of every request the core has in flight.
//!
//! Every gossip period (sooner when the changeset fills up or a view change queued
//! hand-offs) the shard's changeset and outbox become one `Replicate` per destination
//! worker. At most `max_batches_in_flight` are out at once, holding at most
//! `max_bytes_in_flight` of records between them (one batch always may go, however large);
//! what does not fit waits for the next round. The byte bound is what keeps a memory-tier
//! worker's RAM bounded while it writes faster than its disk replicas acknowledge: a batch's
//! records are in memory twice (the batch, and its encoding queued on the connection) until
//! the answer comes. An acknowledged batch is reported to the shard ([`Shard::delivered`]: a
//! hand-off is complete once every new replica acknowledged it durably); a batch that
//! fails or times out goes back to the shard to be sent again ([`Shard::requeue_keys`]).
//! While a backlog remains (a hand-off of a million keys), rounds follow each other every
//! `backlog_pause_ms` instead of every period.
//!
//! [`Shard::delivered`]: crate::shard::Shard::delivered
//! [`Shard::requeue_keys`]: crate::shard::Shard::requeue_keys

use bytes::Bytes;
use placement::Replica;

use super::{entropy, reclaim, requests, Core, PeerMsg, PeerResult, ReqId};

/// A request in flight to another worker.
pub(super) struct Pending {
    /// Where it went.
    pub to: Replica,
    /// When it times out (monotonic ms).
    pub deadline: u64,
    /// What its answer is for.
    pub waiting: Waiting,
}

/// What the answer to a request is for.
pub(super) enum Waiting {
    /// A gossip batch.
    Gossip(SentBatch),
    /// Records of evicted keys asked for from the disk tier.
    TierFetch(Vec<Bytes>),
    /// Client ops forwarded to the worker holding their keys.
    Forward(requests::Forwarding),
    /// Records asked for (reads that miss while keys move; reads from every replica).
    Fetch(u64),
    /// A write's copy sent to another replica for its acknowledgement level.
    FanOut(u64),
    /// A step of an anti-entropy session.
    Entropy(entropy::Step),
    /// A phase of tombstone reclamation.
    Reclaim(reclaim::Phase),
}

/// A gossip batch waiting for its answer.
#[derive(Debug)]
pub(super) struct SentBatch {
    /// Its keys.
    keys: Vec<Bytes>,
    /// The hand-offs it carried (key, generation).
    handoffs: Vec<(Bytes, u64)>,
    /// It went durable to a disk replica whose acknowledgement makes its keys clean.
    to_disk: bool,
    /// Estimated bytes of its records (counted in [`GossipState::bytes_in_flight`]).
    bytes: usize,
}

/// Gossip round state.
#[derive(Debug, Default)]
pub(super) struct GossipState {
    /// Batches in flight.
    pub in_flight: usize,
    /// Estimated bytes of the records of the batches in flight.
    pub bytes_in_flight: usize,
    /// A round is wanted before the timer: the changeset is full, a view change queued
    /// hand-offs, or a backlog remains.
    pub urgent: bool,
    /// Not before this (monotonic ms): the pause between backlog rounds.
    pub soonest: u64,
}

impl Core {
    /// One gossip round: a batch per destination, within the in-flight bound.
    pub(super) fn gossip_round(&mut self, now: u64) {
        self.timers.gossip = now + self.config.gossip_period_ms;
        self.gossip.urgent = false;
        for out in self.shard.take_gossip() {
            let bytes = out.bytes;
            let too_many = self.gossip.in_flight >= self.config.max_batches_in_flight;
            let too_big = self.gossip.in_flight > 0
                && self.gossip.bytes_in_flight.saturating_add(bytes)
                    > self.config.max_bytes_in_flight;
            if too_many || too_big {
                self.shard.requeue(out);
                continue;
            }
            self.gossip.in_flight += 1;
            self.gossip.bytes_in_flight += bytes;
            let keys: Vec<Bytes> = out.entries.iter().map(|(k, _)| k.clone()).collect();
            // A memory-tier worker's batches to disk replicas are durable: their
            // acknowledgement makes the records clean, so evictable (see `shard::tier`).
            let to_disk = self.shard.tracks_disk_acks(out.to);
            if to_disk {
                self.shard.sent_to_disk(&keys);
            }
            let msg = PeerMsg::Replicate {
                durable: out.durable() || to_disk,
                entries: out.entries,
            };
            let sent = SentBatch {
                keys,
                handoffs: out.handoffs,
                to_disk,
                bytes,
            };
            self.send(out.to, msg, Waiting::Gossip(sent));
        }
        self.continue_backlog(now);
    }

    /// Whether another batch may go out now (within both in-flight bounds).
    fn room_in_flight(&self) -> bool {
        self.gossip.in_flight < self.config.max_batches_in_flight
            && self.gossip.bytes_in_flight < self.config.max_bytes_in_flight
    }

    /// While a backlog remains and batches can go out, the next round follows shortly.
    fn continue_backlog(&mut self, now: u64) {
        if self.shard.has_gossip() && self.room_in_flight() {
            self.gossip.urgent = true;
            self.gossip.soonest = now + self.config.backlog_pause_ms;
        }
    }

    /// Asks for a round soon if the changeset filled up (after client writes).
    pub(super) fn gossip_if_full(&mut self) {
        // Above the memory budget with nothing clean to evict, or records demoted: get
        // them to the disk tier now.
        let wanted = self.shard.changeset_full()
            || self.shard.memory_pressure()
            || self.shard.demotions_queued();
        if wanted && !self.gossip.urgent {
            self.gossip.urgent = true;
            self.gossip.soonest = 0;
        }
    }

    /// The answer to a gossip batch to `to`.
    fn on_gossip_reply(&mut self, to: Replica, sent: SentBatch, result: PeerResult) {
        let SentBatch {
            keys,
            handoffs,
            to_disk,
            bytes,
        } = sent;
        self.gossip.in_flight = self.gossip.in_flight.saturating_sub(1);
        self.gossip.bytes_in_flight = self.gossip.bytes_in_flight.saturating_sub(bytes);
        match result {
            Ok(_) => {
                self.shard.delivered(to, &handoffs);
                if to_disk {
                    // Acknowledged durably: clean, unless written since.
                    self.shard.disk_answered(&keys);
                }
                let now = self.now();
                self.continue_backlog(now);
            }
            Err(e) => {
                tracing::debug!(?to, error = ?e, keys = keys.len(), "gossip batch requeued");
                if to_disk {
                    // Requeued first: dirty through the outbox until a later batch is
                    // acknowledged.
                    self.shard.requeue_keys(to, keys.to_vec());
                    self.shard.disk_answered(&keys);
                } else {
                    self.shard.requeue_keys(to, keys);
                }
            }
        }
    }

    /// The answer to a request this core sent (or its failure: unreachable, timed out,
    /// refused). Answers to requests the core no longer waits for (timed out before the
    /// answer came) are ignored.
    pub fn on_reply(&mut self, req: ReqId, result: PeerResult) {
        let Some(pending) = self.pending.remove(&req) else {
            return;
        };
        let to = pending.to;
        match pending.waiting {
            Waiting::Gossip(sent) => self.on_gossip_reply(to, sent, result),
            Waiting::TierFetch(keys) => self.on_tier_fetch_reply(keys, result),
            Waiting::Forward(f) => self.on_forward_reply(f, result),
            Waiting::Fetch(group) => self.on_fetch_reply(group, to, result),
            Waiting::FanOut(write) => self.on_fan_out_reply(write, result),
            Waiting::Entropy(step) => self.on_entropy_reply(step, result),
            Waiting::Reclaim(phase) => self.on_reclaim_reply(to, phase, result),
        }
        self.arm_journal();
    }
}
