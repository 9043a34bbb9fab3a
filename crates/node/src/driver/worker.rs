//! One worker: a thread with a single-threaded tokio runtime, driving a replica core.
//!
//! The [`Worker`] owns the core (in a `RefCell` never borrowed across an `.await`) and does
//! what its effects ask: messages to other workers (through the mesh, or over the peer
//! plane), answers to requests, finished client requests, log appends and disk syncs.
//!
//! This module holds the worker itself and what its connections call: client requests
//! (each answered through a ticket), requests from other workers (through a token), its
//! counters. The rest, one concern a module, adds to it:
//! - [`super::effects`]: carrying out the core's effects;
//! - [`super::peers`]: requests to other workers, and the peer connections they travel on;
//! - [`super::thread`]: the worker's thread and its tasks — the inbox (requests and answers
//!   from this node's other workers, work handed over), the timer, the views, the journal,
//!   subscriptions, and whatever the node started on it (accept loops and the connections
//!   they serve).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use placement::Replica;
use tokio::sync::{mpsc, oneshot, Notify};
use wire::pb;

use super::conns::LocalConnections;
use super::journal::Journal;
use super::shared::Shared;
use crate::ack::Ack;
use crate::core::{Core, CoreStats, PeerMsg, PeerResult, ReqId, Routing, Submitted, Token};
use crate::error::NodeError;
use crate::op::{Op, OpResult};
use crate::peer::transport::PeerConn;
use crate::subscribe::Subscriptions;

/// A message to a worker.
pub enum WorkerMsg {
    /// A request from another worker of this node.
    Peer {
        /// The sender.
        from: Replica,
        /// The request.
        msg: PeerMsg,
        /// The sender's id for it.
        req: ReqId,
    },
    /// The answer to a request this worker sent to another worker of this node.
    Reply {
        /// The request.
        req: ReqId,
        /// Its outcome.
        result: PeerResult,
    },
    /// Something to run on this worker's thread (a connection handed over, a question).
    Run(WorkerTask),
}

/// A closure run on a worker's thread.
pub(crate) type WorkerTask = Box<dyn FnOnce(&Rc<Worker>) + Send>;

impl std::fmt::Debug for WorkerMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerMsg::Peer { from, msg, req } => {
                write!(f, "Peer({from:?}, {}, {req:?})", msg.name())
            }
            WorkerMsg::Reply { req, .. } => write!(f, "Reply({req:?})"),
            WorkerMsg::Run(_) => write!(f, "Run"),
        }
    }
}

/// Where the answer to a request from another worker goes.
pub(super) enum Responder {
    /// A worker of this node: back through the mesh.
    Mesh { worker: u32, req: ReqId },
    /// A peer connection: the answer frame with this id. `crash`: testing only, abort
    /// the process right after this answer goes out (`LATTICEKV_FAULT`).
    Conn {
        tx: mpsc::Sender<pb::PeerResponse>,
        id: u64,
        crash: bool,
    },
}

/// The answer to a client request handed to the worker.
pub enum Answer {
    /// Known now.
    Ready(Vec<OpResult>),
    /// Known later.
    Wait(oneshot::Receiver<Vec<OpResult>>),
}

impl Answer {
    /// The results, waiting if need be.
    pub async fn results(self) -> Vec<OpResult> {
        match self {
            Answer::Ready(r) => r,
            Answer::Wait(rx) => rx.await.unwrap_or_else(|_| {
                vec![OpResult::Error(NodeError::Unavailable(
                    "the request was dropped".into(),
                ))]
            }),
        }
    }
}

/// Counters of one worker.
#[derive(Clone, Debug, Default)]
pub struct WorkerStats {
    /// Worker index.
    pub worker: u32,
    /// The core's counters.
    pub core: CoreStats,
    /// Open client connections on this worker.
    pub connections: u64,
    /// Keys subscribed by connections on this worker.
    pub subscriptions: u64,
    /// The statistics of its last completed window.
    pub window: Arc<crate::stats::Window>,
    /// Its side of the backing store, if the node has one.
    pub backing: Option<pb::BackingStatus>,
    /// Latencies of served client requests since it started.
    pub latency_total: crate::stats::latency::Cumulative,
    /// Its write-ahead log, if it has one.
    pub wal: Option<super::journal::WalMetrics>,
    /// The node's LSM journal's fsyncs (the same on every worker of a disk-tier node).
    pub lsm: Option<super::journal::LsmMetrics>,
    /// Durations of the batches it applied to the backing store since it started.
    pub backing_latency: crate::stats::latency::Cumulative,
    /// Client requests and error replies since it started, by protocol and command.
    pub requests: crate::stats::requests::RequestCounts,
}

/// One worker (see the module docs).
pub struct Worker {
    /// Node-wide state.
    pub shared: Arc<Shared>,
    /// This worker's index.
    pub index: u32,
    me: Replica,
    pub(super) core: RefCell<Core>,
    /// Client requests waiting for their results, by ticket.
    pub(super) tickets: RefCell<HashMap<u64, oneshot::Sender<Vec<OpResult>>>>,
    /// Requests from other workers being answered, by token.
    pub(super) tokens: RefCell<HashMap<u64, Responder>>,
    next_token: Cell<u64>,
    /// Connections to other nodes' workers.
    pub(super) peers: RefCell<HashMap<Replica, PeerConn>>,
    /// The log (or the disk tier's journal) this worker's writes go to.
    pub(crate) journal: Journal,
    /// Wakes the timer when the core's deadline moved earlier.
    pub(super) wake: Notify,
    /// The deadline the timer sleeps until (monotonic ms of the core's clock).
    pub(super) sleeping_until: Cell<u64>,
    /// Connections served by this worker.
    pub conns: Rc<LocalConnections>,
    /// Keys that connections on this worker subscribed to.
    pub subscriptions: RefCell<Subscriptions>,
    /// Signalled when a connection subscribes (wakes the idle subscription task).
    pub subscribed: Notify,
    /// Signalled when the core leaves memory pressure (see [`Worker::wait_memory_room`]).
    pub(super) memory_room: Notify,
    /// A connection waits on `memory_room`.
    pub(super) memory_waiting: Cell<bool>,
    /// The node's spill marker is written (or not needed).
    pub(super) spill_marked: Cell<bool>,
    /// Latencies of served client requests since the worker started (metrics).
    latency_total: RefCell<crate::stats::latency::Cumulative>,
    /// Client requests and error replies, by protocol and command.
    requests: RefCell<crate::stats::requests::RequestCounts>,
    /// Where its shard's keyspace events go (the pub/sub fan-out, set at start; `None`:
    /// dropped).
    pub(super) key_event_sink: Cell<Option<KeyEventSink>>,
    /// Durations of backing-store batches since the worker started (metrics).
    pub(super) backing_latency: RefCell<crate::stats::latency::Cumulative>,
}

/// Publishes a worker's keyspace events (`crate::pubsub::events::publish`, given at start
/// so this module does not depend on the pub/sub one, which depends on it).
pub type KeyEventSink = fn(&Rc<Worker>, Vec<crate::notify::KeyEvent>);

/// Longest a client connection waits for memory before its next batch runs anyway (and
/// may get the out-of-memory error at the hard ceiling): a disk tier that stopped
/// acknowledging must not hang clients.
const MEMORY_WAIT: Duration = Duration::from_millis(200);

/// File in a memory-tier node's data directory saying that its workers evicted keys: after
/// a restart its log no longer holds every key, so they start as caches (`shard::tier`).
pub const SPILL_MARKER: &str = "spilled";

impl Worker {
    /// Runs `f` on the core, then carries out the effects it produced.
    pub fn with_core<R>(self: &Rc<Self>, f: impl FnOnce(&mut Core) -> R) -> R {
        let out = f(&mut self.core.borrow_mut());
        self.run_effects();
        out
    }

    /// Back-pressure of a memory-tier worker above its budget with nothing evictable
    /// (every record waits for the disk tier's acknowledgement): a client connection waits
    /// here before each batch of requests until records are clean again, at most
    /// [`MEMORY_WAIT`].
    pub(crate) async fn wait_memory_room(&self) {
        if !self.core.borrow().shard().memory_pressure() {
            return;
        }
        let room = self.memory_room.notified();
        self.memory_waiting.set(true);
        let _ = tokio::time::timeout(MEMORY_WAIT, room).await;
    }

    /// The core, read-only.
    pub fn core(&self) -> std::cell::Ref<'_, Core> {
        self.core.borrow()
    }

    /// A connection starts running a batch of requests back to back (see
    /// [`crate::shard::Shard::begin_batch`]); [`Worker::end_batch`] must follow before it
    /// yields.
    pub(crate) fn begin_batch(&self) {
        self.core.borrow().shard().begin_batch();
    }

    /// Ends the batch [`Worker::begin_batch`] started.
    pub(crate) fn end_batch(&self) {
        self.core.borrow().shard().end_batch();
    }

    /// Which replica this worker is.
    pub fn me(&self) -> Replica {
        self.me
    }

    /// Counters.
    pub fn stats(&self) -> WorkerStats {
        WorkerStats {
            worker: self.index,
            core: self.core.borrow().stats(),
            connections: self.conns.open(),
            subscriptions: self.subscriptions.borrow().len() as u64,
            window: self.core.borrow().window(),
            backing: self.backing_status(),
            latency_total: self.latency_total.borrow().clone(),
            wal: self.journal.wal_metrics(),
            lsm: self.journal.lsm_metrics(),
            backing_latency: self.backing_latency.borrow().clone(),
            requests: self.requests.borrow().clone(),
        }
    }

    /// The worker's write-back state, if the node has a backing store.
    fn backing_status(&self) -> Option<pb::BackingStatus> {
        self.shared.backing.as_ref()?;
        let core = self.core.borrow();
        let s = core.shard().backing_stats();
        let m = core.backing_machine();
        Some(pb::BackingStatus {
            mode: s.mode,
            dirty_keys: s.dirty_keys,
            dirty_bytes: s.dirty_bytes,
            failed_keys: s.failed_keys,
            applied_keys: s.applied_keys,
            apply_failures: s.apply_failures,
            fetched_keys: s.fetched_keys,
            refused_reads: s.refused_reads,
            refused_writes: s.refused_writes,
            failures: m.failures(),
            mode_ms: core.shard().clock().mono_ms().saturating_sub(m.since()),
            last_error: m.last_error().unwrap_or_default().to_string(),
            applied_per_sec: core.backing_rate(),
        })
    }

    /// Counts a client request of `command`, an error reply if `error`.
    pub fn count_request(&self, command: crate::stats::requests::Command, error: bool) {
        self.requests.borrow_mut().record(command, error);
    }

    /// `requests` client requests were answered `elapsed` after they arrived (the
    /// connection pipeline measures, a batch at a time).
    pub fn record_latency(&self, elapsed: Duration, requests: usize) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let n = u32::try_from(requests).unwrap_or(u32::MAX);
        self.core.borrow_mut().record_latency(ns, n);
        self.latency_total.borrow_mut().record(ns, u64::from(n));
    }

    // ---- client requests -----------------------------------------------------------------

    /// Runs ops (see [`Core::submit`]).
    pub fn submit<B: AsRef<[u8]>>(
        self: &Rc<Self>,
        ops: Vec<Op<B>>,
        ack: Ack,
        routing: Routing,
    ) -> Answer {
        let submitted = self.core.borrow_mut().submit(ops, ack, routing);
        self.answer(submitted)
    }

    /// Reads a key from every replica (see [`Core::submit_get_all`]).
    pub fn get_all(self: &Rc<Self>, key: bytes::Bytes) -> Answer {
        let submitted = self.core.borrow_mut().submit_get_all(key);
        self.answer(submitted)
    }

    /// The answer to a request just submitted to the core: its ticket is registered
    /// *before* the core's effects are carried out. A send can fail on the spot — a node
    /// with no peer address in the view (one that left, or was declared dead, asked by a
    /// read while keys move), another worker's full inbox — and its failure goes to the
    /// core at once, in the middle of `run_effects`: the request may then complete there,
    /// and its results must find the ticket. Registered afterwards, the results were
    /// dropped and the client waited forever.
    fn answer(self: &Rc<Self>, submitted: Submitted) -> Answer {
        let answer = match submitted {
            Submitted::Done(results) => Answer::Ready(results),
            Submitted::Pending(ticket) => {
                let (tx, rx) = oneshot::channel();
                self.tickets.borrow_mut().insert(ticket.0, tx);
                Answer::Wait(rx)
            }
        };
        self.run_effects();
        answer
    }

    /// Runs one op at once if it needs only this worker (see [`Core::try_local`]).
    pub fn try_local<B: AsRef<[u8]>>(
        self: &Rc<Self>,
        op: Op<B>,
        ack: Ack,
        routing: Routing,
    ) -> Result<OpResult, Op<B>> {
        self.with_core(|c| c.try_local(op, ack, routing))
    }

    /// Reads a key here without copying its value (see [`Core::read_local`]).
    pub fn read_local<R>(
        self: &Rc<Self>,
        key: &[u8],
        f: impl FnOnce(Result<Option<store::RecordRef<'_>>, NodeError>) -> R,
    ) -> Option<R> {
        self.with_core(|c| c.read_local(key, f))
    }

    // ---- requests from other workers -----------------------------------------------------

    /// A request from another worker, answered through `responder`.
    pub(super) fn on_peer(self: &Rc<Self>, from: Replica, msg: PeerMsg, responder: Responder) {
        let token = self.next_token.get() + 1;
        self.next_token.set(token);
        self.tokens.borrow_mut().insert(token, responder);
        self.with_core(|c| c.on_peer(from, msg, Token(token)));
    }

    /// A request from another node's worker, arriving on a peer connection whose answers
    /// go to `tx`.
    pub fn on_peer_request(
        self: &Rc<Self>,
        from: Replica,
        msg: PeerMsg,
        id: u64,
        tx: mpsc::Sender<pb::PeerResponse>,
    ) {
        let crash = self.shared.faults.abort_after_handoff_ack
            && matches!(msg, PeerMsg::Replicate { durable: true, .. });
        self.on_peer(from, msg, Responder::Conn { tx, id, crash });
    }
}

impl Worker {
    pub(super) fn new(shared: Arc<Shared>, index: u32, core: Core, journal: Journal) -> Rc<Worker> {
        Rc::new(Worker {
            shared,
            index,
            me: core.me(),
            core: RefCell::new(core),
            tickets: RefCell::new(HashMap::new()),
            tokens: RefCell::new(HashMap::new()),
            next_token: Cell::new(0),
            peers: RefCell::new(HashMap::new()),
            journal,
            wake: Notify::new(),
            sleeping_until: Cell::new(u64::MAX),
            conns: Rc::new(LocalConnections::default()),
            subscriptions: RefCell::new(Subscriptions::default()),
            subscribed: Notify::new(),
            memory_room: Notify::new(),
            memory_waiting: Cell::new(false),
            spill_marked: Cell::new(false),
            latency_total: RefCell::new(Default::default()),
            requests: RefCell::new(Default::default()),
            key_event_sink: Cell::new(None),
            backing_latency: RefCell::new(Default::default()),
        })
    }

    /// Sends the shard's keyspace events to `sink` from now on.
    pub(crate) fn set_key_event_sink(&self, sink: KeyEventSink) {
        self.key_event_sink.set(Some(sink));
    }
}

/// Every worker's counters (workers that are gone are skipped).
pub async fn all_stats(shared: &Shared) -> Vec<WorkerStats> {
    let mut out = Vec::with_capacity(shared.mesh.len());
    for i in 0..shared.mesh.len() as u32 {
        let (tx, rx) = oneshot::channel();
        let ask = WorkerMsg::Run(Box::new(move |w: &Rc<Worker>| {
            let _ = tx.send(w.stats());
        }));
        if shared.mesh.send(i, ask).await.is_ok() {
            if let Ok(s) = rx.await {
                out.push(s);
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "worker_tests.rs"]
mod tests;
