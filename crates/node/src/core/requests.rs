//! Client operations: where each runs, and collecting their results.
//!
//! An op whose key this worker replicates runs here, at once. The others run on a worker
//! that holds the key — another worker of this node through the mesh, or another node's
//! over the peer plane — or, for a client that knows placement (a worker's own port), are
//! answered with a redirect naming the replicas. Ops going to the same worker travel as
//! one `Forward`; a forward to another node tries the key's other replicas if the chosen
//! one cannot be reached (a write only if it certainly did not run there).
//!
//! Reads that ask other workers for records — a read that misses while keys move, a read
//! from every replica, a read forwarded under another view — are in [`super::fetch`].
//!
//! A request's results are collected in a *job*: answered at once when every op ran here,
//! else when the last answer arrives ([`Effect::Complete`](super::Effect::Complete) for a
//! client, [`Effect::Respond`](super::Effect::Respond) for a forward from another worker).

use bytes::Bytes;
use foldhash::fast::FixedState;
use placement::Replica;

use super::fetch::FetchGroup;
use super::reply_limit::within_reply_limit;
use super::{Core, Map, PeerFailure, PeerMsg, PeerReply, PeerResult, Ticket, Token};
use crate::ack::Ack;
use crate::error::NodeError;
use crate::op::{Op, OpResult};
use crate::shard::Route;

/// What to do with ops for keys this worker does not hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// Run them on a worker that holds them (shared front port, RESP).
    Forward,
    /// Answer with a redirect naming the key's replicas (a worker's own port).
    Redirect,
}

/// The outcome of [`Core::submit`].
#[derive(Debug, PartialEq)]
pub enum Submitted {
    /// Every op ran; one result per op.
    Done(Vec<OpResult>),
    /// Some ops wait for other workers; the results come with
    /// [`Effect::Complete`](super::Effect::Complete).
    Pending(Ticket),
}

/// Who waits for a job's results.
#[derive(Clone, Copy, Debug)]
pub(super) enum Origin {
    /// A client request.
    Client(Ticket),
    /// A forward from another worker.
    Peer(Token),
}

/// One request's results in progress.
struct Job {
    origin: Origin,
    results: Vec<Option<OpResult>>,
    /// Results still missing.
    missing: usize,
    /// Still being submitted: results are collected, not yet delivered.
    open: bool,
    /// Bytes of the values collected so far (for the reply limit).
    reply_bytes: usize,
}

/// Client ops sent to another worker.
pub(super) struct Forwarding {
    job: u64,
    positions: Vec<usize>,
    /// The ops, kept while another candidate may be tried.
    ops: Vec<Op<Bytes>>,
    ack: Ack,
    /// Workers to try, in order; `next` is the one after the current.
    candidates: Vec<Replica>,
    next: usize,
}

/// Jobs and fetch groups in progress.
pub(super) struct Jobs {
    jobs: Map<u64, Job>,
    pub(super) fetches: Map<u64, FetchGroup>,
    /// Keys being fetched for reads that missed while keys move, and their group.
    pub(super) settling: Map<Bytes, u64>,
}

impl Jobs {
    pub(super) fn new(hasher: FixedState) -> Jobs {
        Jobs {
            jobs: Map::with_hasher(hasher.clone()),
            fetches: Map::with_hasher(hasher.clone()),
            settling: Map::with_hasher(hasher),
        }
    }

    /// Requests in progress.
    pub(super) fn len(&self) -> usize {
        self.jobs.len()
    }

    /// The id of the oldest request in progress (ids grow: see [`Core::next_id`]).
    pub(super) fn oldest(&self) -> Option<u64> {
        self.jobs.keys().min().copied()
    }
}

impl Core {
    // ---- the fast paths ------------------------------------------------------------------

    /// Runs one op at once if it needs nothing but this worker: its key is held here and
    /// its acknowledgement is the default (or it is a read), or it gets a redirect. Gives
    /// the op back otherwise ([`submit`](Self::submit) then takes it). No allocation
    /// beyond what the op itself needs.
    pub fn try_local<B: AsRef<[u8]>>(
        &mut self,
        op: Op<B>,
        ack: Ack,
        routing: Routing,
    ) -> Result<OpResult, Op<B>> {
        if op.is_write()
            && (!ack.at_least(self.config.default_ack).is_default()
                || self.shard.write_waits_for_store(op.key()))
        {
            return Err(op);
        }
        match self.shard.route(op.key()) {
            Route::Local => {
                // A read that may miss while keys are moving takes the general path, which
                // asks the previous owners; so does an op on an evicted key.
                if matches!(op, Op::Get { .. }) && self.shard.settling().is_some() {
                    return Err(op);
                }
                if self.must_wait(&op) {
                    return Err(op);
                }
                self.stats.access(op.key());
                let result = self.shard.execute_acked(op, ack.quiet);
                self.gossip_if_full();
                self.arm_journal();
                Ok(result)
            }
            Route::Remote(_) if routing == Routing::Redirect => Ok(OpResult::Error(
                NodeError::Redirect(self.shard.replica_addrs(op.key())),
            )),
            Route::Remote(_) => Err(op),
        }
    }

    /// Reads `key` here without copying its value, if this worker holds it and no view
    /// change is settling; `None` otherwise (then [`submit`](Self::submit) a `Get`).
    pub fn read_local<R>(
        &mut self,
        key: &[u8],
        f: impl FnOnce(Result<Option<store::RecordRef<'_>>, NodeError>) -> R,
    ) -> Option<R> {
        if self.shard.route(key) != Route::Local || self.shard.settling().is_some() {
            return None;
        }
        if self.must_wait(&Op::Get { key }) {
            return None;
        }
        self.stats.access(key);
        self.shard.note_read(key);
        Some(f(self.shard.read(key)))
    }

    // ---- the general path ----------------------------------------------------------------

    /// Runs `ops` wherever their keys live (see the module docs), each write answered once
    /// it has the acknowledgement `ack` asks for (or the node's default, if stronger).
    pub fn submit<B: AsRef<[u8]>>(
        &mut self,
        ops: Vec<Op<B>>,
        ack: Ack,
        routing: Routing,
    ) -> Submitted {
        let ticket = Ticket(self.next_id());
        let job = self.open_job(Origin::Client(ticket), ops.len());
        self.run_ops(job, ops, ack, routing);
        match self.close_job(job) {
            Some(results) => Submitted::Done(results),
            None => Submitted::Pending(ticket),
        }
    }

    /// Reads `key` from every one of its replicas and merges their records; a replica that
    /// does not answer fails the read. If this worker is a replica, what the others had is
    /// merged into it too (read repair).
    pub fn submit_get_all(&mut self, key: Bytes) -> Submitted {
        let ticket = Ticket(self.next_id());
        let job = self.open_job(Origin::Client(ticket), 1);
        match self.shard.check_key(&key) {
            Err(e) => self.fill(job, 0, OpResult::Error(e)),
            Ok(()) => {
                // One client access, counted where it was asked (the replicas it reads
                // from do not count it again).
                self.stats.access(&key);
                self.start_get_all(job, key);
            }
        }
        match self.close_job(job) {
            Some(results) => Submitted::Done(results),
            None => Submitted::Pending(ticket),
        }
    }

    /// Runs ops into `job`'s slots (client requests and forwards from other workers).
    pub(super) fn run_ops<B: AsRef<[u8]>>(
        &mut self,
        job: u64,
        ops: Vec<Op<B>>,
        ack: Ack,
        routing: Routing,
    ) {
        let ack = ack.at_least(self.config.default_ack);
        let settling = self.shard.settling().is_some();
        let mut remote: Vec<(Replica, Vec<usize>, Vec<Op<Bytes>>)> = Vec::new();
        let mut misses: Vec<(usize, Bytes)> = Vec::new();
        let mut syncs: Vec<u64> = Vec::new();
        for (pos, op) in ops.into_iter().enumerate() {
            match self.shard.route(op.key()) {
                Route::Local if self.defer_for_fetch(job, pos, &op, ack, false) => {}
                Route::Local
                    if op.is_write()
                        && (!ack.is_default() || self.shard.write_waits_for_store(op.key())) =>
                {
                    self.stats.access(op.key());
                    self.run_acked(job, pos, op.to_owned_op(), ack, false, &mut syncs);
                }
                Route::Local => {
                    self.stats.access(op.key());
                    // Only a read that may miss while keys move needs its key kept.
                    let get = settling && matches!(op, Op::Get { .. });
                    let key = get.then(|| Bytes::copy_from_slice(op.key()));
                    let result = self.shard.execute_acked(op, ack.quiet);
                    match key {
                        Some(key) if settling && result == OpResult::Value(None) => {
                            misses.push((pos, key));
                        }
                        _ => self.fill(job, pos, result),
                    }
                }
                Route::Remote(_) if routing == Routing::Redirect => {
                    let addrs = self.shard.replica_addrs(op.key());
                    self.fill(job, pos, OpResult::Error(NodeError::Redirect(addrs)));
                }
                Route::Remote(r) => match remote.iter_mut().find(|g| g.0 == r) {
                    Some(group) => {
                        group.1.push(pos);
                        group.2.push(op.to_owned_op());
                    }
                    None => remote.push((r, vec![pos], vec![op.to_owned_op()])),
                },
            }
        }
        self.sync_writes(syncs);
        for (to, positions, ops) in remote {
            self.forward(job, to, positions, ops, ack);
        }
        if !misses.is_empty() {
            self.settle_reads(job, misses);
        }
        self.start_tier_fetches();
        self.pump_backing();
        self.gossip_if_full();
        self.arm_journal();
    }

    // ---- jobs ----------------------------------------------------------------------------

    pub(super) fn open_job(&mut self, origin: Origin, n: usize) -> u64 {
        let id = match origin {
            Origin::Client(t) => t.0,
            Origin::Peer(_) => self.next_id(),
        };
        self.jobs.jobs.insert(
            id,
            Job {
                origin,
                results: vec![None; n],
                missing: n,
                open: true,
                reply_bytes: 0,
            },
        );
        id
    }

    /// Ends the submission of a job: its results if they are all known (the job is then
    /// gone), else `None` (they will be delivered as they complete).
    pub(super) fn close_job(&mut self, job: u64) -> Option<Vec<OpResult>> {
        let j = self.jobs.jobs.get_mut(&job)?;
        if j.missing > 0 {
            j.open = false;
            return None;
        }
        let j = self.jobs.jobs.remove(&job)?;
        Some(collect(j.results))
    }

    /// Fills one result of a job; delivers the job's results if it was the last one.
    pub(super) fn fill(&mut self, job: u64, pos: usize, result: OpResult) {
        let Some(j) = self.jobs.jobs.get_mut(&job) else {
            return;
        };
        let several = j.results.len() > 1;
        let Some(slot) = j.results.get_mut(pos) else {
            return;
        };
        if slot.is_none() {
            j.missing -= 1;
        }
        *slot = Some(within_reply_limit(
            several,
            &mut j.reply_bytes,
            self.config.max_reply_bytes,
            result,
        ));
        if j.missing > 0 || j.open {
            return;
        }
        let Some(j) = self.jobs.jobs.remove(&job) else {
            return;
        };
        let results = collect(j.results);
        match j.origin {
            Origin::Client(ticket) => self
                .effects
                .push(super::Effect::Complete { ticket, results }),
            Origin::Peer(token) => self.respond(token, Ok(PeerReply::Results(results))),
        }
    }

    // ---- forwarding ----------------------------------------------------------------------

    /// Sends ops to `to` (a worker holding their keys). Plain requests to another node may
    /// fall back to the first key's other replicas on other nodes.
    fn forward(
        &mut self,
        job: u64,
        to: Replica,
        positions: Vec<usize>,
        ops: Vec<Op<Bytes>>,
        ack: Ack,
    ) {
        let me = self.me();
        let mut candidates = vec![to];
        if to.node != me.node && ack.is_default() {
            if let Some(first) = ops.first() {
                for r in self.shard.replicas(first.key()) {
                    if r.node != me.node && r != to && !candidates.contains(&r) {
                        candidates.push(r);
                    }
                }
            }
        }
        let f = Forwarding {
            job,
            positions,
            ops,
            ack,
            candidates,
            next: 0,
        };
        self.send_forward(f);
    }

    fn send_forward(&mut self, mut f: Forwarding) {
        let Some(&to) = f.candidates.get(f.next) else {
            return;
        };
        f.next += 1;
        let ops = if f.next < f.candidates.len() {
            f.ops.clone()
        } else {
            std::mem::take(&mut f.ops)
        };
        let msg = PeerMsg::Forward { ops, ack: f.ack };
        self.send(to, msg, super::gossip::Waiting::Forward(f));
    }

    /// The answer to forwarded ops. Reads move on to the next candidate after any failure;
    /// writes only when the request certainly did not run (never applied twice).
    pub(super) fn on_forward_reply(&mut self, f: Forwarding, result: PeerResult) {
        let writes = f.ops.iter().any(Op::is_write) || f.ops.is_empty();
        let results = match result {
            Ok(PeerReply::Results(results)) if results.len() == f.positions.len() => results,
            Ok(_) => {
                let e = NodeError::Unavailable(
                    "a replica answered a forward with something else".into(),
                );
                vec![OpResult::Error(e); f.positions.len()]
            }
            Err(failure) => {
                let retry = f.next < f.candidates.len()
                    && (matches!(failure, PeerFailure::Unreachable(_)) || !writes);
                if retry {
                    self.send_forward(f);
                    return;
                }
                let e = failure.to_error("forwarded request");
                vec![OpResult::Error(e); f.positions.len()]
            }
        };
        for (pos, r) in f.positions.into_iter().zip(results) {
            self.fill(f.job, pos, r);
        }
    }
}

/// A job's results; a slot never filled (a bug) reads as unavailable.
fn collect(results: Vec<Option<OpResult>>) -> Vec<OpResult> {
    results
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| OpResult::Error(NodeError::Unavailable("result missing".into())))
        })
        .collect()
}
