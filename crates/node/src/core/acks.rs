//! Acknowledgement levels: the one place a write waits before it is answered.
//!
//! A write runs at once (so requests behind it on a connection see it); its answer then
//! waits for what its [`Ack`] asks: with `durable`, until the log record (or the disk-tier
//! store's journal) holding it is on disk — one sync covers every write of a request, and
//! the driver's group commit covers concurrent requests; with `replicas = N > 1`, until
//! N − 1 other replicas of its key merged its record (each durably, with `durable`). The
//! copies go to N − 1 replicas at once; one that fails is replaced by the next replica, and
//! when there is none left the write is answered UNAVAILABLE stating how many
//! acknowledged — never a silent downgrade (the write itself stays applied and converges
//! by gossip).

use bytes::Bytes;
use foldhash::fast::FixedState;
use placement::Replica;

use super::{Core, Map, PeerMsg, PeerReply, PeerResult, SyncId, Token};
use crate::ack::Ack;
use crate::error::NodeError;
use crate::op::{Op, OpResult};

/// What a finished disk sync lets go on.
pub(super) enum SyncWaiter {
    /// Writes waiting for the disk (then for other replicas).
    Writes(Vec<u64>),
    /// A `Replicate` from another worker that asked for a durable answer: its token and
    /// the number of entries merged.
    Replicate(Token, u64),
}

/// A write waiting for its acknowledgement level.
struct Write {
    job: u64,
    pos: usize,
    /// The write's own result (what the client gets if the level is reached).
    result: OpResult,
    key: Bytes,
    ack: Ack,
    /// Other replicas that acknowledged.
    acked: usize,
    /// The key's other replicas, in order; those before `next` were asked.
    targets: Vec<Replica>,
    next: usize,
    /// Copies sent and not yet answered.
    outstanding: usize,
    /// Then wait for the backing store to have it.
    wait_store: bool,
}

/// Writes in progress.
pub(super) struct Writes {
    map: Map<u64, Write>,
}

impl Writes {
    pub(super) fn new(hasher: FixedState) -> Writes {
        Writes {
            map: Map::with_hasher(hasher),
        }
    }
}

impl Core {
    /// Runs a write here for `job`'s slot `pos` and carries out `ack`. A write that needs
    /// the disk is added to `syncs` (the caller asks for one sync for all of them).
    /// `forwarded`: the op came from another worker, possibly routed under an older view.
    pub(super) fn run_acked(
        &mut self,
        job: u64,
        pos: usize,
        op: Op<Bytes>,
        ack: Ack,
        forwarded: bool,
        syncs: &mut Vec<u64>,
    ) {
        let key = op.key_bytes().clone();
        let write = op.is_write();
        let wait_store = write && self.shard.write_waits_for_store(&key);
        let result = if forwarded {
            self.shard.execute_forwarded(op, ack.quiet)
        } else {
            self.shard.execute_acked(op, ack.quiet)
        };
        if !write || matches!(result, OpResult::Error(_)) {
            self.fill(job, pos, result);
            return;
        }
        if ack.is_default() {
            if wait_store {
                self.await_store(job, pos, result, key);
            } else {
                self.fill(job, pos, result);
            }
            return;
        }
        let id = self.next_id();
        self.writes.map.insert(
            id,
            Write {
                job,
                pos,
                result,
                key,
                ack,
                acked: 0,
                targets: Vec::new(),
                next: 0,
                outstanding: 0,
                wait_store,
            },
        );
        if ack.durable {
            syncs.push(id);
        } else {
            self.fan_out(id);
        }
    }

    /// Asks for one sync covering `writes` (nothing if empty).
    pub(super) fn sync_writes(&mut self, writes: Vec<u64>) {
        if !writes.is_empty() {
            self.request_sync(true, SyncWaiter::Writes(writes));
        }
    }

    /// A disk sync finished.
    pub fn on_synced(&mut self, id: SyncId, result: Result<(), NodeError>) {
        let Some(waiter) = self.syncs.remove(&id) else {
            return;
        };
        match waiter {
            SyncWaiter::Writes(writes) => {
                if let Err(e) = &result {
                    if matches!(e, NodeError::Storage(_)) {
                        self.shard.note_storage_errors(writes.len());
                    }
                }
                for w in writes {
                    match &result {
                        Ok(()) => self.fan_out(w),
                        Err(e) => self.finish_write(w, Err(e.clone())),
                    }
                }
            }
            SyncWaiter::Replicate(token, n) => {
                self.respond(token, result.map(|()| PeerReply::Ack(n)));
            }
        }
        self.arm_journal();
    }

    /// Sends the write's record to as many other replicas as its level needs.
    fn fan_out(&mut self, id: u64) {
        let Some(w) = self.writes.map.get_mut(&id) else {
            return;
        };
        let needed = w.ack.replicas.saturating_sub(1);
        if needed == 0 {
            self.finish_write(id, Ok(()));
            return;
        }
        let me = self.shard.me();
        let key = w.key.clone();
        let targets: Vec<Replica> = self
            .shard
            .replicas(&key)
            .into_iter()
            .filter(|r| *r != me)
            .collect();
        if targets.len() < needed {
            let e = NodeError::Unavailable(format!(
                "{} acknowledgements requested, the key has {} replicas",
                needed + 1,
                targets.len() + 1
            ));
            self.finish_write(id, Err(e));
            return;
        }
        if let Some(w) = self.writes.map.get_mut(&id) {
            w.targets = targets;
        }
        for _ in 0..needed {
            self.send_copy(id);
        }
    }

    /// Sends the write's current record to its next untried replica; false if none is left.
    fn send_copy(&mut self, id: u64) -> bool {
        let Some(w) = self.writes.map.get_mut(&id) else {
            return false;
        };
        let Some(&to) = w.targets.get(w.next) else {
            return false;
        };
        w.next += 1;
        w.outstanding += 1;
        let (key, durable) = (w.key.clone(), w.ack.durable);
        let record = match self.shard.record_of(&key) {
            Ok(Some(r)) => r,
            // Removed meanwhile (a delete's record is a tombstone, so this is a key handed
            // away): nothing left to copy; its new replicas have it.
            Ok(None) => {
                self.finish_write(id, Ok(()));
                return true;
            }
            Err(e) => {
                self.finish_write(id, Err(e));
                return true;
            }
        };
        let msg = PeerMsg::Replicate {
            entries: vec![(key, record)],
            durable,
        };
        self.send(to, msg, super::gossip::Waiting::FanOut(id));
        true
    }

    /// A replica's answer to a write's copy.
    pub(super) fn on_fan_out_reply(&mut self, id: u64, result: PeerResult) {
        let Some(w) = self.writes.map.get_mut(&id) else {
            return;
        };
        w.outstanding -= 1;
        if result.is_ok() {
            w.acked += 1;
            if w.acked + 1 >= w.ack.replicas {
                self.finish_write(id, Ok(()));
            }
            return;
        }
        if self.send_copy(id) {
            return;
        }
        let Some(w) = self.writes.map.get(&id) else {
            return;
        };
        if w.outstanding == 0 {
            let e = NodeError::Unavailable(format!(
                "only {} of {} replicas acknowledged the write",
                w.acked + 1,
                w.ack.replicas
            ));
            self.finish_write(id, Err(e));
        }
    }

    /// Answers a write: its own result if its level was reached, else the error.
    fn finish_write(&mut self, id: u64, outcome: Result<(), NodeError>) {
        let Some(w) = self.writes.map.remove(&id) else {
            return;
        };
        match outcome {
            Ok(()) if w.wait_store => self.await_store(w.job, w.pos, w.result, w.key),
            Ok(()) => self.fill(w.job, w.pos, w.result),
            Err(e) => self.fill(w.job, w.pos, OpResult::Error(e)),
        }
    }
}
