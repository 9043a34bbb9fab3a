//! One worker: a thread with a single-threaded tokio runtime, driving a replica core.
//!
//! The [`Worker`] owns the core (in a `RefCell` never borrowed across an `.await`) and does
//! what its effects ask: messages to other workers (through the mesh, or over the peer
//! plane), answers to requests, finished client requests, log appends and disk syncs. Its
//! tasks, all on this thread:
//! - the inbox: requests and answers from this node's other workers, work handed over
//!   (connections accepted on shared ports);
//! - the timer: ticks the core at its deadline;
//! - the view: switches the core to each view the agent publishes;
//! - the journal (a memory-tier worker with a data directory): the log's health, snapshots;
//! - subscriptions, while connections have any;
//! - whatever the node started on it: accept loops and the connections they serve.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use placement::Replica;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::{spawn_local, LocalSet};
use wire::pb;

use super::conns::LocalConnections;
use super::journal::{Journal, JournalSetup};
use super::shared::Shared;
use crate::ack::Ack;
use crate::core::{
    Core, CoreStats, Effect, PeerFailure, PeerMsg, PeerResult, ReqId, Routing, Submitted, Token,
};
use crate::error::NodeError;
use crate::op::{Op, OpResult};
use crate::peer::convert::{request_to_pb, response_from_pb, response_to_pb};
use crate::peer::transport::{PeerConn, PeerError, PEER_VERSION};
use crate::subscribe::{Subscriptions, Watched};

/// How long a stopping worker waits for its connections to finish.
pub const EXIT_DEADLINE: Duration = Duration::from_secs(5);

/// Time allowed to open a connection to another node's peer port.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Most connections to other nodes' workers a worker keeps.
const MAX_PEER_CONNECTIONS: usize = 4096;

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
enum Responder {
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
    core: RefCell<Core>,
    /// Client requests waiting for their results, by ticket.
    tickets: RefCell<HashMap<u64, oneshot::Sender<Vec<OpResult>>>>,
    /// Requests from other workers being answered, by token.
    tokens: RefCell<HashMap<u64, Responder>>,
    next_token: Cell<u64>,
    /// Connections to other nodes' workers.
    peers: RefCell<HashMap<Replica, PeerConn>>,
    /// The log (or the disk tier's journal) this worker's writes go to.
    pub(crate) journal: Journal,
    /// Wakes the timer when the core's deadline moved earlier.
    wake: Notify,
    /// The deadline the timer sleeps until (monotonic ms of the core's clock).
    sleeping_until: Cell<u64>,
    /// Connections served by this worker.
    pub conns: Rc<LocalConnections>,
    /// Keys that connections on this worker subscribed to.
    pub subscriptions: RefCell<Subscriptions>,
    /// Signalled when a connection subscribes (wakes the idle subscription task).
    pub subscribed: Notify,
    /// Signalled when the core leaves memory pressure (see [`Worker::wait_memory_room`]).
    memory_room: Notify,
    /// A connection waits on `memory_room`.
    memory_waiting: Cell<bool>,
    /// The node's spill marker is written (or not needed).
    spill_marked: Cell<bool>,
    /// Latencies of served client requests since the worker started (metrics).
    latency_total: RefCell<crate::stats::latency::Cumulative>,
    /// Client requests and error replies, by protocol and command.
    requests: RefCell<crate::stats::requests::RequestCounts>,
    /// Where its shard's keyspace events go (the pub/sub fan-out, set at start; `None`:
    /// dropped).
    key_event_sink: Cell<Option<KeyEventSink>>,
    /// Durations of backing-store batches since the worker started (metrics).
    backing_latency: RefCell<crate::stats::latency::Cumulative>,
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

/// Work to start on a worker when it starts (accept loops).
pub type Service = Box<dyn FnOnce(Rc<Worker>) + Send>;

/// What one worker thread is given at start.
pub struct WorkerSetup {
    /// Node-wide state.
    pub shared: Arc<Shared>,
    /// This worker's index.
    pub index: u32,
    /// Its core.
    pub core: Core,
    /// Its inbox.
    pub inbox: mpsc::Receiver<WorkerMsg>,
    /// What makes its writes durable.
    pub journal: JournalSetup,
    /// Services to start on it.
    pub services: Vec<Service>,
}

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

    /// Writes the node's spill marker (once per process; a failure is logged: the cost is
    /// a restart that trusts its log for keys it evicted before).
    fn mark_spilled(&self) {
        if self.shared.config.tier.tier() != placement::Tier::Memory {
            return;
        }
        let Some(dir) = &self.shared.config.data_dir else {
            return;
        };
        let path = dir.join(SPILL_MARKER);
        if path.exists() {
            return;
        }
        if let Err(e) = std::fs::write(&path, b"evicted keys: they live on the disk tier\n") {
            tracing::warn!(error = %e, path = %path.display(), "cannot write the spill marker");
        }
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
    fn on_peer(self: &Rc<Self>, from: Replica, msg: PeerMsg, responder: Responder) {
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

    // ---- effects -------------------------------------------------------------------------

    fn run_effects(self: &Rc<Self>) {
        loop {
            // Keyspace events first: they reach subscribers before the replies go out.
            let events = self.core.borrow_mut().shard_mut().take_key_events();
            if let (false, Some(sink)) = (events.is_empty(), self.key_event_sink.get()) {
                sink(self, events);
            }
            let effects = {
                let mut core = self.core.borrow_mut();
                if !core.has_effects() {
                    break;
                }
                core.take_effects()
            };
            for e in effects {
                self.execute(e);
            }
        }
        let (deadline, pressure, spilled) = {
            let core = self.core.borrow();
            let shard = core.shard();
            (
                core.next_deadline(),
                shard.memory_pressure(),
                shard.spilled(),
            )
        };
        if self.memory_waiting.get() && !pressure {
            self.memory_waiting.set(false);
            self.memory_room.notify_waiters();
        }
        if spilled && !self.spill_marked.get() {
            self.spill_marked.set(true);
            self.mark_spilled();
        }
        if deadline < self.sleeping_until.get() {
            self.sleeping_until.set(deadline);
            self.wake.notify_one();
        }
    }

    fn execute(self: &Rc<Self>, e: Effect) {
        match e {
            Effect::Send { req, to, peer, msg } => self.send(req, to, peer, msg),
            Effect::Respond { token, result } => {
                let Some(responder) = self.tokens.borrow_mut().remove(&token.0) else {
                    return;
                };
                match responder {
                    Responder::Mesh { worker, req } => {
                        let result = result.map_err(PeerFailure::Refused);
                        // A full inbox loses the answer: the asker times out and retries.
                        let _ = self
                            .shared
                            .mesh
                            .try_send(worker, WorkerMsg::Reply { req, result });
                    }
                    Responder::Conn { tx, id, crash } => {
                        let acked = result.is_ok();
                        let _ = tx.try_send(response_to_pb(id, result));
                        if crash && acked {
                            // The answer is on its way; die as a `kill -9` would.
                            spawn_local(async {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                tracing::warn!("LATTICEKV_FAULT: aborting right after a hand-off acknowledgement");
                                std::process::abort();
                            });
                        }
                    }
                }
            }
            Effect::Complete { ticket, results } => {
                let tx = self.tickets.borrow_mut().remove(&ticket.0);
                // Every ticket is registered before the effects that can complete it run
                // (`Worker::answer`); one missing is a client left waiting forever.
                debug_assert!(tx.is_some(), "no one waits for the results of {ticket:?}");
                if let Some(tx) = tx {
                    let _ = tx.send(results);
                }
            }
            Effect::Journal(entries) => {
                if let Err(why) = self.journal.append(self, entries) {
                    self.core.borrow_mut().set_journal_failure(Some(why));
                }
            }
            Effect::Sync { id, strict } => {
                let sync = self.journal.sync(strict);
                let w = self.clone();
                spawn_local(async move {
                    let result = sync.await;
                    w.with_core(|c| c.on_synced(id, result));
                });
            }
            Effect::Unreachable { to } => {
                if let Some(conn) = self.peers.borrow_mut().remove(&to) {
                    conn.abandon();
                }
            }
            Effect::BackingApply { id, batch } => {
                let store = self.shared.backing.clone();
                let w = self.clone();
                spawn_local(async move {
                    let started = std::time::Instant::now();
                    let ping = batch.is_empty();
                    let result = match store {
                        Some(s) => s.apply(batch).await,
                        None => Err("the node has no backing store".into()),
                    };
                    if !ping {
                        let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                        w.backing_latency.borrow_mut().record(ns, 1);
                    }
                    w.with_core(|c| c.on_backing_applied(id, result));
                });
            }
            Effect::BackingFetch { id, keys } => {
                let store = self.shared.backing.clone();
                let w = self.clone();
                spawn_local(async move {
                    let result = match store {
                        Some(s) => s.fetch(keys).await,
                        None => Err("the node has no backing store".into()),
                    };
                    w.with_core(|c| c.on_backing_fetched(id, result));
                });
            }
        }
    }

    /// Sends a request to worker `to`: through the mesh if it is on this node, else over
    /// its node's peer port.
    fn send(self: &Rc<Self>, req: ReqId, to: Replica, peer: Option<String>, msg: PeerMsg) {
        if to.node == self.me.node {
            let m = WorkerMsg::Peer {
                from: self.me,
                msg,
                req,
            };
            if self.shared.mesh.try_send(to.worker, m).is_err() {
                let why = PeerFailure::Unreachable(format!("worker {}'s inbox is full", to.worker));
                self.core.borrow_mut().on_reply(req, Err(why));
            }
            return;
        }
        let Some(addr) = peer else {
            let why = PeerFailure::Unreachable("no peer address for the node".into());
            self.core.borrow_mut().on_reply(req, Err(why));
            return;
        };
        let cached = self
            .peers
            .borrow()
            .get(&to)
            .filter(|c| !c.is_broken())
            .cloned();
        let w = self.clone();
        spawn_local(async move {
            let conn = match cached {
                Some(c) => c,
                None => match w.connect(&addr, to).await {
                    Ok(c) => c,
                    Err(e) => {
                        let why = PeerFailure::Unreachable(e.to_string());
                        w.with_core(|c| c.on_reply(req, Err(why)));
                        return;
                    }
                },
            };
            let result = match conn.call(request_to_pb(req.0, msg)).await {
                Ok(resp) => response_from_pb(resp).1,
                Err(PeerError::Unreachable { reason, .. }) => Err(PeerFailure::Unreachable(reason)),
                // Sent, and no answer: it may have run.
                Err(PeerError::Lost { .. }) => Err(PeerFailure::TimedOut),
            };
            w.with_core(|c| c.on_reply(req, result));
        });
    }

    /// Opens a peer connection from this worker to worker `to_worker` of the node whose
    /// peer port is `addr`: the hello signed with the cluster secret, TLS as configured.
    /// Not cached: [`Worker::connect`] keeps the replication connections; the pub/sub relay
    /// and the key listing keep their own.
    pub(crate) async fn open_peer(
        &self,
        addr: &str,
        to_worker: u32,
    ) -> Result<PeerConn, PeerError> {
        let mut hello = pb::PeerHello {
            version: PEER_VERSION,
            node_id: self.shared.config.node_id.clone(),
            from_worker: Some(self.index),
            to_worker: Some(to_worker),
            ..Default::default()
        };
        let secret = self.shared.config.cluster_secret.as_deref();
        let now_ms = self.core.borrow().shard().clock().wall_ms();
        crate::peer::secret::sign(&mut hello, secret, now_ms);
        let tls = self.shared.tls.as_ref().map(|t| &t.peers_out);
        PeerConn::open(addr, hello, CONNECT_TIMEOUT, tls).await
    }

    /// Opens a connection to worker `to` of the node whose peer port is `addr`, and keeps it.
    async fn connect(self: &Rc<Self>, addr: &str, to: Replica) -> Result<PeerConn, PeerError> {
        let conn = self.open_peer(addr, to.worker).await?;
        let mut peers = self.peers.borrow_mut();
        if peers.len() >= MAX_PEER_CONNECTIONS {
            peers.retain(|_, c| !c.is_broken());
        }
        if peers.len() < MAX_PEER_CONNECTIONS {
            peers.insert(to, conn.clone());
        }
        Ok(conn)
    }

    // ---- the worker's tasks --------------------------------------------------------------

    /// Handles messages from this node's other workers and work handed over.
    async fn inbox(self: Rc<Self>, mut inbox: mpsc::Receiver<WorkerMsg>) {
        while let Some(msg) = inbox.recv().await {
            match msg {
                WorkerMsg::Peer { from, msg, req } => {
                    self.journal.wait_room().await;
                    self.on_peer(
                        from,
                        msg,
                        Responder::Mesh {
                            worker: from.worker,
                            req,
                        },
                    );
                }
                WorkerMsg::Reply { req, result } => self.with_core(|c| c.on_reply(req, result)),
                WorkerMsg::Run(f) => f(&self),
            }
        }
    }

    /// Ticks the core at its deadline.
    async fn timer(self: Rc<Self>) {
        let mut shutdown = self.shared.shutdown();
        let origin = Instant::now();
        let clock_origin = self.core.borrow().shard().clock().mono_ms();
        loop {
            let deadline = self.core.borrow().next_deadline();
            self.sleeping_until.set(deadline);
            let wait = Duration::from_millis(deadline.saturating_sub(clock_origin));
            tokio::select! {
                _ = tokio::time::sleep_until((origin + wait).into()) => {}
                _ = self.wake.notified() => continue,
                _ = shutdown.wait_for(|s| *s) => return,
            }
            self.sleeping_until.set(u64::MAX);
            self.with_core(Core::tick);
        }
    }

    /// Switches the core to every new view the agent publishes.
    async fn views(self: Rc<Self>) {
        let mut snapshots = self.shared.snapshots.clone();
        let mut shutdown = self.shared.shutdown();
        loop {
            let view = snapshots.borrow_and_update().view.clone();
            self.with_core(|c| c.set_view(view));
            tokio::select! {
                r = snapshots.changed() => if r.is_err() { return },
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }

    /// Runs a subscription round every [`crate::subscribe::TICK`] while connections of this
    /// worker subscribe to keys; sleeps until one does otherwise.
    async fn subscription_rounds(self: Rc<Self>) {
        let mut shutdown = self.shared.shutdown();
        loop {
            let idle = self.subscriptions.borrow().is_empty();
            if idle {
                tokio::select! {
                    _ = self.subscribed.notified() => {}
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            } else {
                tokio::select! {
                    _ = tokio::time::sleep(crate::subscribe::TICK) => {}
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            }
            self.subscription_round();
        }
    }

    /// One subscription round: pushes the keys that are due and changed.
    fn subscription_round(&self) {
        let mut subs = self.subscriptions.borrow_mut();
        if subs.is_empty() {
            return;
        }
        let mut core = self.core.borrow_mut();
        let shard = core.shard_mut();
        subs.round_with(Instant::now(), |key, seen| {
            if shard.route(key) != crate::shard::Route::Local {
                return (Watched::Moved, None);
            }
            // An unchanged value is not copied and encoded again to find its version.
            let fingerprint = shard.watched_fingerprint(key);
            if fingerprint.is_some() && fingerprint == seen {
                return (Watched::Unchanged, fingerprint);
            }
            // Right after a view change, a key moving here may read absent until its
            // hand-off arrives; that arrival is then pushed like any change.
            match shard.watched_value(key) {
                Ok(v) => (
                    Watched::Value(v.as_ref().map(wire::convert::value_to_pb)),
                    fingerprint,
                ),
                Err(_) => (Watched::Unknown, None),
            }
        });
    }
}

/// Spawns `fut` on the current worker's thread.
pub fn spawn_on_worker(fut: impl Future<Output = ()> + 'static) {
    spawn_local(fut);
}

impl Worker {
    fn new(shared: Arc<Shared>, index: u32, core: Core, journal: Journal) -> Rc<Worker> {
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

    /// A worker without a log whose only task is its inbox, spawned on the current
    /// `LocalSet`; whoever holds it ticks its core (the fuzz targets, `crate::fuzzing`,
    /// with a manual clock).
    pub(crate) fn in_memory(
        shared: Arc<Shared>,
        index: u32,
        core: Core,
        inbox: mpsc::Receiver<WorkerMsg>,
    ) -> Rc<Worker> {
        let w = Worker::new(shared, index, core, Journal::None);
        spawn_local(w.clone().inbox(inbox));
        w
    }
}

/// Runs a worker until the node stops. Call on the worker's own thread.
pub fn run(setup: WorkerSetup) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = LocalSet::new();
    local.block_on(&rt, async move {
        let WorkerSetup {
            shared,
            index,
            core,
            inbox,
            journal,
            services,
        } = setup;
        let mut core = core;
        // Occupancy: the time this thread's runtime spent running tasks rather than
        // waiting for events (one runtime, one thread: its worker 0).
        let metrics = tokio::runtime::Handle::current().metrics();
        core.set_busy_meter(Box::new(move || {
            u64::try_from(metrics.worker_total_busy_duration(0).as_nanos()).unwrap_or(u64::MAX)
        }));
        let w = Worker::new(shared.clone(), index, core, journal.build());
        spawn_local(w.clone().inbox(inbox));
        spawn_local(w.clone().views());
        spawn_local(w.clone().timer());
        spawn_local(w.clone().subscription_rounds());
        spawn_local(super::journal::run(w.clone()));
        for service in services {
            service(w.clone());
        }

        let mut shutdown = shared.shutdown();
        let _ = shutdown.wait_for(|stop| *stop).await;
        // Connections see the same signal and finish their current batch.
        if tokio::time::timeout(EXIT_DEADLINE, w.conns.all_closed())
            .await
            .is_err()
        {
            tracing::warn!(
                worker = index,
                open = w.conns.open(),
                "connections still open at exit"
            );
        }
        // A last gossip round, and what is queued for the log.
        w.with_core(Core::flush);
        super::journal::close(&w).await;
        Ok(())
    })
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
