//! Anti-entropy sessions: repairing whatever gossip lost, a range of buckets at a time.
//!
//! Every `anti_entropy_period_ms` a worker queues a session with one random other worker;
//! after a change of the rings it queues one with every other worker (a node that
//! restarted empty, or a key range that moved, pulls what its peers hold at once). One
//! session runs at a time. A session walks the 256 buckets in ranges sized so that a step
//! reads a bounded number of entries:
//!
//! 1. this worker sends its digests of the range (`Digest`);
//! 2. the peer answers with the buckets whose digests differ and its records of them, a
//!    bounded part at a time (`Repair`, then `RepairMore` from the cursor it returned);
//!    this worker merges them;
//! 3. this worker sends its own records of those buckets, a bounded part at a time
//!    (`Replicate`);
//! 4. on to the next range.
//!
//! Every message is paced so that a session moves at most `anti_entropy_bytes_per_sec`;
//! an exchange that fails ends the session (the next one starts over). Two replicas whose
//! data is equal exchange only digests.

use std::collections::VecDeque;

use foldhash::fast::FixedState;
use placement::Replica;

use super::serve::{MAX_DIGEST_BUCKETS, REPAIR_CHUNK_BYTES};
use super::{Core, PeerMsg, PeerReply, PeerResult, RepairCursor};
use crate::shard::BUCKETS;

/// Most entries one step's digest reads (the range shrinks to fit, down to one bucket).
/// About a millisecond of the worker's time in a release build: requests wait at most
/// that long behind a step (16,384 held them for tens of ms, `bench/background`).
const STEP_ENTRIES: usize = 2 * 1024;

/// Pause before the next session after one failed, ms.
const AFTER_FAILURE_MS: u64 = 1_000;

/// What an anti-entropy answer is for.
#[derive(Clone, Copy, Debug)]
pub(super) enum Step {
    /// The peer's records of the differing buckets.
    Repair,
    /// This worker's records sent to the peer.
    Push,
}

#[derive(Debug)]
enum Stage {
    /// Send the digests of the current range.
    Digest,
    /// Ask for more of the peer's records from the cursor.
    More(RepairCursor),
    /// Send this worker's records from the cursor.
    Push(RepairCursor),
    /// Waiting for an answer; then continue from the cursor if any.
    Awaiting(Option<RepairCursor>),
}

#[derive(Debug)]
struct Session {
    peer: Replica,
    /// The current range: `first .. first + count`.
    first: usize,
    count: usize,
    /// Buckets of the range whose digests differ.
    differing: Vec<u32>,
    stage: Stage,
}

/// Anti-entropy state of a core.
#[derive(Debug)]
pub(super) struct Entropy {
    /// Workers to run a session with, in order.
    queue: VecDeque<Replica>,
    /// When to queue every other worker (after a change of the rings).
    all_at: Option<u64>,
    session: Option<Session>,
    /// The next message not before this (pacing), monotonic ms.
    next: u64,
}

impl Entropy {
    pub(super) fn new(_hasher: FixedState) -> Entropy {
        Entropy {
            queue: VecDeque::new(),
            all_at: None,
            session: None,
            next: 0,
        }
    }

    /// When a step can next be taken, if any is pending.
    pub(super) fn next_step(&self) -> Option<u64> {
        let mut due = self.all_at;
        let ready = match &self.session {
            Some(s) => !matches!(s.stage, Stage::Awaiting(_)),
            None => !self.queue.is_empty(),
        };
        if ready {
            due = Some(due.map_or(self.next, |d| d.min(self.next)));
        }
        due
    }
}

impl Core {
    /// Every other storage worker of the cluster, in a fixed order.
    fn entropy_peers(&self) -> Vec<Replica> {
        let me = self.me();
        let mut peers: Vec<Replica> = self
            .shard
            .view()
            .view
            .nodes()
            .flat_map(|(&node, info)| {
                (0..info.workers.len() as u32).map(move |worker| Replica { node, worker })
            })
            .filter(|r| *r != me && !self.shard.declines_entropy_with(*r))
            .collect();
        peers.sort();
        peers
    }

    /// Queues a session with one random other worker.
    pub(super) fn entropy_with_random_peer(&mut self) {
        let peers = self.entropy_peers();
        if peers.is_empty() {
            return;
        }
        let peer = peers[self.rng.usize(..peers.len())];
        let busy = self
            .entropy
            .session
            .as_ref()
            .is_some_and(|s| s.peer == peer);
        if !busy && !self.entropy.queue.contains(&peer) {
            self.entropy.queue.push_back(peer);
        }
    }

    /// Queues a session with every other worker at `at` (after a change of the rings).
    pub(super) fn entropy_after_view(&mut self, at: u64) {
        self.entropy.all_at = Some(at);
    }

    /// Takes the next anti-entropy step, if one is due.
    pub(super) fn entropy_step(&mut self, now: u64) {
        if self.entropy.all_at.is_some_and(|at| now >= at) {
            self.entropy.all_at = None;
            for peer in self.entropy_peers() {
                if !self.entropy.queue.contains(&peer) {
                    self.entropy.queue.push_back(peer);
                }
            }
        }
        if now < self.entropy.next {
            return;
        }
        if self.entropy.session.is_none() {
            let Some(peer) = self.entropy.queue.pop_front() else {
                return;
            };
            self.entropy.session = Some(Session {
                peer,
                first: 0,
                count: 0,
                differing: Vec::new(),
                stage: Stage::Digest,
            });
        }
        let Some(session) = self.entropy.session.as_mut() else {
            return;
        };
        let peer = session.peer;
        if self.shard.declines_entropy_with(peer) && !matches!(session.stage, Stage::Awaiting(_)) {
            // Spilled since the session was queued.
            self.entropy.session = None;
            return;
        }
        match session.stage {
            Stage::Awaiting(_) => {}
            Stage::Digest => {
                let first = session.first;
                let mut count = 1;
                while first + count < BUCKETS
                    && count < MAX_DIGEST_BUCKETS
                    && self.shard.entries_in_buckets(first, count + 1) <= STEP_ENTRIES
                {
                    count += 1;
                }
                let digests = self.shard.digest_range(peer, first, count);
                if let Some(s) = self.entropy.session.as_mut() {
                    s.count = count;
                    s.stage = Stage::Awaiting(None);
                }
                let msg = PeerMsg::Digest {
                    first: first as u32,
                    digests,
                };
                self.send(peer, msg, super::gossip::Waiting::Entropy(Step::Repair));
            }
            Stage::More(cursor) => {
                let buckets = session.differing.clone();
                session.stage = Stage::Awaiting(None);
                let msg = PeerMsg::RepairMore { buckets, cursor };
                self.send(peer, msg, super::gossip::Waiting::Entropy(Step::Repair));
            }
            Stage::Push(cursor) => {
                let (entries, next) = self.shard.bucket_entries_from(
                    peer,
                    &session.differing,
                    cursor,
                    REPAIR_CHUNK_BYTES,
                );
                if entries.is_empty() {
                    self.entropy_advance();
                    return;
                }
                let bytes: usize = entries.iter().map(|(k, r)| k.len() + r.approx_size()).sum();
                if let Some(s) = self.entropy.session.as_mut() {
                    s.stage = Stage::Awaiting(next);
                }
                self.pace(now, bytes);
                let msg = PeerMsg::Replicate {
                    entries,
                    durable: false,
                };
                self.send(peer, msg, super::gossip::Waiting::Entropy(Step::Push));
            }
        }
    }

    /// Delays the next message by the time `bytes` take at the configured rate.
    fn pace(&mut self, now: u64, bytes: usize) {
        let rate = self.config.anti_entropy_bytes_per_sec.max(1);
        self.entropy.next = now + (bytes as u64).saturating_mul(1000) / rate;
    }

    /// On to the next range, or the end of the session.
    fn entropy_advance(&mut self) {
        let Some(s) = self.entropy.session.as_mut() else {
            return;
        };
        s.first += s.count.max(1);
        s.differing.clear();
        if s.first >= BUCKETS {
            self.entropy.session = None;
            self.entropy_sessions += 1;
        } else {
            s.stage = Stage::Digest;
        }
    }

    /// The answer to an anti-entropy message.
    pub(super) fn on_entropy_reply(&mut self, step: Step, result: PeerResult) {
        let now = self.now();
        let Some(session) = self.entropy.session.as_mut() else {
            return;
        };
        let peer = session.peer;
        match (step, result) {
            (
                Step::Repair,
                Ok(PeerReply::Repair {
                    differing,
                    entries,
                    next,
                }),
            ) => {
                let first_answer = session.differing.is_empty();
                let in_range = differing.iter().all(|&b| {
                    (b as usize) >= session.first && (b as usize) < session.first + session.count
                });
                if !in_range {
                    self.entropy_failed(peer, "an answer outside the range asked");
                    return;
                }
                if first_answer && !differing.is_empty() {
                    self.repairs += 1;
                    tracing::debug!(?peer, buckets = differing.len(), "anti-entropy repair");
                }
                session.differing = differing;
                session.stage = match next {
                    Some(cursor) => Stage::More(cursor),
                    None => match session.differing.first() {
                        Some(&bucket) => Stage::Push(RepairCursor { bucket, skip: 0 }),
                        None => Stage::Digest,
                    },
                };
                let advance = matches!(session.stage, Stage::Digest);
                let bytes: usize = entries.iter().map(|(k, r)| k.len() + r.approx_size()).sum();
                if let Err(e) = self.shard.merge_gossip(entries) {
                    self.entropy_failed(peer, &e.to_string());
                    return;
                }
                self.pace(now, bytes);
                if advance {
                    self.entropy_advance();
                }
            }
            (Step::Push, Ok(_)) => {
                let next = match &session.stage {
                    Stage::Awaiting(next) => *next,
                    _ => None,
                };
                match next {
                    Some(cursor) => session.stage = Stage::Push(cursor),
                    None => self.entropy_advance(),
                }
            }
            (_, Ok(_)) => self.entropy_failed(peer, "an unexpected answer"),
            (_, Err(e)) => self.entropy_failed(peer, &format!("{e:?}")),
        }
    }

    fn entropy_failed(&mut self, peer: Replica, why: &str) {
        tracing::debug!(?peer, why, "anti-entropy session ended");
        self.entropy.session = None;
        self.entropy.next = self.now() + AFTER_FAILURE_MS;
    }
}
