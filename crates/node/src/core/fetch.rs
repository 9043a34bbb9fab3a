//! Reads that ask other workers for records.
//!
//! For `settle_ms` after a view change, a read that misses here also asks the key's
//! replicas under the previous views — the key may still be on its way here — merges what
//! they hold and answers from the merged state. A read forwarded here under another view,
//! of a key this worker does not replicate under its own, that misses asks where this
//! view and the ones settling put the key, and answers from what they hold without storing
//! it. A read from every replica (`GetAll`) asks all of them and fails if one does not
//! answer.

use bytes::Bytes;
use lattice::{Lattice, Record};
use placement::Replica;

use super::{Core, PeerMsg, PeerReply, PeerResult};
use crate::error::NodeError;
use crate::op::{Op, OpResult};

/// Records asked for from several workers.
pub(super) struct FetchGroup {
    /// Answers still awaited.
    waiting: usize,
    purpose: FetchPurpose,
}

enum FetchPurpose {
    /// Reads that missed while keys move: re-read them once the records arrived. Reads
    /// of the same keys that miss meanwhile join the group (one fetch per key, however
    /// many reads wait for it).
    Settle {
        /// (job, slot, key) of each read.
        reads: Vec<(u64, usize, Bytes)>,
        /// The keys asked for.
        keys: Vec<Bytes>,
    },
    /// A read from every replica (`GetAll`), or — `lenient` — a forwarded read relayed to
    /// where the views put its key ([`Core::relay_read`]), answered from the replicas that
    /// answered (failing only if none did).
    All {
        job: u64,
        pos: usize,
        key: Bytes,
        merged: Option<Record>,
        here: bool,
        failed: Option<String>,
        lenient: bool,
        answered: usize,
    },
}

impl Core {
    /// Asks where `reads`' keys lived before the last view change for their records; the
    /// reads are answered once those arrive (or fail).
    pub(super) fn settle_reads(&mut self, job: u64, reads: Vec<(usize, Bytes)>) {
        // Reads of keys already being fetched wait for that fetch (a hot key replicated
        // to this worker is missed by every read until its record arrives: one fetch of
        // it, not one per read).
        let mut reads_new: Vec<(u64, usize, Bytes)> = Vec::new();
        for (pos, key) in reads {
            let joined = match self.jobs.settling.get(&key) {
                Some(group) => match self.jobs.fetches.get_mut(group) {
                    Some(FetchGroup {
                        purpose: FetchPurpose::Settle { reads, .. },
                        ..
                    }) => {
                        reads.push((job, pos, key.clone()));
                        true
                    }
                    _ => false,
                },
                None => false,
            };
            if !joined {
                reads_new.push((job, pos, key));
            }
        }
        if reads_new.is_empty() {
            return;
        }
        let reads = reads_new;
        let me = self.me();
        let mut keys: Vec<Bytes> = Vec::new();
        let mut targets: Vec<(Replica, Vec<Bytes>)> = Vec::new();
        if let Some(views) = self.shard.settling() {
            for (_, _, key) in &reads {
                if !keys.contains(key) {
                    keys.push(key.clone());
                }
                for view in views {
                    for r in view.replicas(key) {
                        if r == me {
                            continue;
                        }
                        match targets.iter_mut().find(|t| t.0 == r) {
                            Some(t) if !t.1.contains(key) => t.1.push(key.clone()),
                            Some(_) => {}
                            None => targets.push((r, vec![key.clone()])),
                        }
                    }
                }
            }
        }
        let group = self.next_id();
        let waiting = targets.len();
        for key in &keys {
            self.jobs.settling.insert(key.clone(), group);
        }
        self.jobs.fetches.insert(
            group,
            FetchGroup {
                waiting,
                purpose: FetchPurpose::Settle { reads, keys },
            },
        );
        if waiting == 0 {
            self.finish_fetch(group);
            return;
        }
        for (to, keys) in targets {
            self.send(
                to,
                PeerMsg::Fetch { keys },
                super::gossip::Waiting::Fetch(group),
            );
        }
    }

    pub(super) fn start_get_all(&mut self, job: u64, key: Bytes) {
        let me = self.me();
        let here = self.shard.is_replica(&key);
        let (merged, failed) = if here {
            match self.shard.record_of(&key) {
                Ok(r) => (r, None),
                Err(e) => (None, Some(e.to_string())),
            }
        } else {
            (None, None)
        };
        let others: Vec<Replica> = self
            .shard
            .replicas(&key)
            .into_iter()
            .filter(|r| *r != me)
            .collect();
        let purpose = FetchPurpose::All {
            job,
            pos: 0,
            key: key.clone(),
            merged,
            here,
            failed,
            lenient: false,
            answered: 0,
        };
        self.fetch_from(&key, others, purpose);
    }

    /// Asks each of `targets` for `key`'s record, as one fetch group for `purpose`
    /// (finished at once without targets).
    fn fetch_from(&mut self, key: &Bytes, targets: Vec<Replica>, purpose: FetchPurpose) {
        let group = self.next_id();
        self.jobs.fetches.insert(
            group,
            FetchGroup {
                waiting: targets.len(),
                purpose,
            },
        );
        if targets.is_empty() {
            self.finish_fetch(group);
            return;
        }
        for to in targets {
            let msg = PeerMsg::Fetch {
                keys: vec![key.clone()],
            };
            self.send(to, msg, super::gossip::Waiting::Fetch(group));
        }
    }

    /// A read forwarded here that misses, of a key this worker does not replicate under its
    /// view: the worker that forwarded it routed by another view — an older one (this
    /// worker has handed the key off since, as a leaving node does) or a newer one (the key
    /// is on its way here). Its record is where the views put it: the key's replicas under
    /// this view and under the views still settling are asked, and the read answers from
    /// what they hold merged with what is here, without storing it (this worker is no
    /// replica).
    pub(super) fn relay_read(&mut self, job: u64, pos: usize, key: Bytes) {
        let me = self.me();
        let mut targets: Vec<Replica> = Vec::new();
        let settling = self.shard.settling().unwrap_or_default();
        let views = std::iter::once(self.shard.view()).chain(settling);
        for r in views.flat_map(|v| v.replicas(&key)) {
            if r != me && !targets.contains(&r) {
                targets.push(r);
            }
        }
        let merged = self.shard.record_of(&key).ok().flatten();
        let purpose = FetchPurpose::All {
            job,
            pos,
            key: key.clone(),
            merged,
            here: false,
            failed: None,
            lenient: true,
            answered: 0,
        };
        self.fetch_from(&key, targets, purpose);
    }

    /// Records from one worker of a fetch group.
    pub(super) fn on_fetch_reply(&mut self, group: u64, from: Replica, result: PeerResult) {
        let Some(g) = self.jobs.fetches.get_mut(&group) else {
            return;
        };
        g.waiting = g.waiting.saturating_sub(1);
        match (&mut g.purpose, result) {
            (FetchPurpose::Settle { .. }, Ok(PeerReply::Records(batch))) => {
                tracing::debug!(?from, found = batch.len(), "fetched records of moving keys");
                // A disk error leaves the read to answer from what is here.
                let _ = self.shard.merge_gossip(batch);
            }
            (FetchPurpose::Settle { .. }, _) => {}
            (
                FetchPurpose::All {
                    merged, answered, ..
                },
                Ok(PeerReply::Records(batch)),
            ) => {
                *answered += 1;
                for (_, record) in batch {
                    match merged.as_mut() {
                        Some(m) => {
                            m.merge(record);
                        }
                        None => *merged = Some(record),
                    }
                }
            }
            (FetchPurpose::All { failed, .. }, Ok(_)) => {
                *failed = Some("a replica answered a fetch with something else".into());
            }
            (FetchPurpose::All { failed, .. }, Err(e)) => {
                *failed = Some(e.to_error("read from every replica").to_string());
            }
        }
        if self
            .jobs
            .fetches
            .get(&group)
            .is_some_and(|g| g.waiting == 0)
        {
            self.finish_fetch(group);
        }
    }

    fn finish_fetch(&mut self, group: u64) {
        let Some(g) = self.jobs.fetches.remove(&group) else {
            return;
        };
        match g.purpose {
            FetchPurpose::Settle { reads, keys } => {
                for key in &keys {
                    if self.jobs.settling.get(key) == Some(&group) {
                        self.jobs.settling.remove(key);
                    }
                }
                for (job, pos, key) in reads {
                    let result = self.shard.execute(Op::Get { key: &key[..] });
                    self.fill(job, pos, result);
                }
            }
            FetchPurpose::All {
                job,
                pos,
                key,
                merged,
                here,
                failed,
                lenient,
                answered,
            } => {
                if let Some(why) = failed.filter(|_| !lenient || answered == 0) {
                    self.fill(job, pos, OpResult::Error(NodeError::Unavailable(why)));
                    return;
                }
                let mut merged = merged;
                if lenient {
                    // The key may have reached this worker meanwhile (handed back to it by a
                    // worker whose view was older), and left the ones asked.
                    if let Ok(Some(here)) = self.shard.record_of(&key) {
                        match merged.as_mut() {
                            Some(m) => {
                                m.merge(here);
                            }
                            None => merged = Some(here),
                        }
                    }
                }
                let value = merged
                    .as_ref()
                    .and_then(|r| store::is_live(r).then(|| r.value.clone()).flatten());
                if here {
                    if let Some(record) = merged {
                        // Read repair; a disk error loses nothing (the others hold it).
                        let _ = self.shard.merge_gossip(vec![(key, record)]);
                    }
                }
                self.fill(job, pos, OpResult::Value(value));
            }
        }
    }
}
