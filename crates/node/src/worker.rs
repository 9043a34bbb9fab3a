//! The worker thread: a single-threaded tokio runtime owning one [`Shard`].
//!
//! Tasks on a worker (all on one thread, sharing the shard through a `RefCell` that is never
//! borrowed across an `.await`):
//! - the accept loop of the worker's own native port (clients that know placement, and
//!   other nodes' workers);
//! - on worker 0 only, the accept loops of the shared front and RESP ports, which hand
//!   connections to workers round-robin through their inboxes;
//! - the inbox loop: forwarded ops, gossip and handed-over connections from this node;
//! - the view loop: switches the shard to each new cluster view the agent publishes;
//! - the gossip timer, and the anti-entropy timer;
//! - the subscription timer, while connections subscribe to keys (see [`crate::subscribe`]);
//! - one task per client connection.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use client::connection::Connection;
use lattice::Record;
use placement::{NodeKey, Replica};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::task::{spawn_local, LocalSet};
use wire::pb;

use crate::cluster::agent::{Agent, Snapshot};
use crate::config::NodeConfig;
use crate::durability::{self, Ack, Durability};
use crate::error::NodeError;
use crate::forward;
use crate::mesh::{Mesh, Protocol, WorkerMsg, WorkerStats};
use crate::op::{Op, OpResult};
use crate::shard::{GossipBatch, Outgoing, Route, Shard};
use crate::subscribe::{Subscriptions, Watched};

/// How long a stopping worker waits for its connections to finish.
pub const EXIT_DEADLINE: Duration = Duration::from_secs(5);

/// Most commands a connection runs before it writes their replies (bounds the reply queue).
pub const MAX_PIPELINE: usize = 1024;

/// Most replication batches a worker has in flight to other nodes at once.
const MAX_REMOTE_BATCHES: usize = 64;

/// Time allowed for a request to another node.
const PEER_TIMEOUT: Duration = Duration::from_secs(5);

/// Node-wide state shared read-only by all workers.
#[derive(Debug)]
pub struct Shared {
    /// The configuration the node started with.
    pub config: NodeConfig,
    /// This node's key (the hash of its id).
    pub me: NodeKey,
    /// Inboxes of all workers.
    pub mesh: Mesh,
    /// Native address of each worker.
    pub worker_addrs: Vec<SocketAddr>,
    /// The shared native front address.
    pub front_addr: SocketAddr,
    /// The RESP address.
    pub resp_addr: SocketAddr,
    /// The addresses published to peers and clients (bound ports, advertised host).
    pub published: crate::server::PublishedAddresses,
    /// When the node started.
    pub started: Instant,
    /// Open client connections on the whole node: only touched when a connection opens or
    /// closes, never on the request path.
    pub connections: AtomicUsize,
    /// Becomes `true` when the node must stop.
    pub shutdown: watch::Receiver<bool>,
    /// Stops the node (after a graceful leave).
    pub stop: watch::Sender<bool>,
    /// The cluster agent.
    pub agent: Agent,
    /// The agent's latest snapshot (view and members).
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
}

/// A slot in the node-wide connection limit, released when dropped.
#[derive(Debug)]
pub struct ConnectionPermit {
    shared: Arc<Shared>,
}

impl ConnectionPermit {
    /// Takes a slot, or `None` if the node is at `max_connections`.
    pub fn acquire(shared: &Arc<Shared>) -> Option<Self> {
        let max = shared.config.limits.max_connections;
        let prev = shared.connections.fetch_add(1, Ordering::Relaxed);
        if prev >= max {
            shared.connections.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(ConnectionPermit {
            shared: shared.clone(),
        })
    }
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.shared.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One worker's context, shared by the tasks of its thread.
pub struct WorkerCtx {
    /// Node-wide state.
    pub shared: Arc<Shared>,
    /// This worker's index.
    pub worker: u32,
    /// The keys. Never borrowed across an `.await`.
    pub shard: RefCell<Shard>,
    /// Open connections on this worker.
    connections: Cell<u64>,
    /// Signalled when a connection closes (shutdown waits on it).
    connection_closed: Notify,
    /// Signalled when the changeset is full and should go out before the timer.
    gossip_now: Notify,
    /// Connections to other nodes' workers, by address (bounded by the cluster's size).
    peers: RefCell<HashMap<String, Connection>>,
    /// Replication batches in flight to other nodes.
    remote_batches: Cell<usize>,
    /// What makes this worker's writes durable (its write-ahead log, the disk journal, or
    /// nothing).
    pub durability: Durability,
    /// Keys that connections on this worker subscribed to. Never borrowed across an
    /// `.await`.
    pub subscriptions: RefCell<Subscriptions>,
    /// Signalled when a connection subscribes (wakes the idle subscription timer).
    pub subscribed: Notify,
}

/// Counts a connection on its worker while alive.
pub struct LocalConnection {
    ctx: Rc<WorkerCtx>,
}

impl LocalConnection {
    /// Registers a connection on `ctx`'s worker.
    pub fn new(ctx: &Rc<WorkerCtx>) -> Self {
        ctx.connections.set(ctx.connections.get() + 1);
        LocalConnection { ctx: ctx.clone() }
    }
}

impl Drop for LocalConnection {
    fn drop(&mut self) {
        let ctx = &self.ctx;
        ctx.connections.set(ctx.connections.get().saturating_sub(1));
        ctx.connection_closed.notify_waiters();
    }
}

/// Results of a batch of ops, some computed here, some awaited from other workers.
pub struct Pending {
    /// One slot per op; `None` until its result is known.
    results: Vec<Option<OpResult>>,
    /// Batches forwarded elsewhere: the ops' positions and the reply.
    waits: Vec<(Vec<usize>, oneshot::Receiver<Vec<OpResult>>)>,
}

impl Pending {
    /// True if every result is already known.
    pub fn is_ready(&self) -> bool {
        self.waits.is_empty()
    }

    /// Waits for the forwarded results and returns all results in op order.
    pub async fn resolve(mut self) -> Vec<OpResult> {
        for (positions, rx) in std::mem::take(&mut self.waits) {
            match rx.await {
                Ok(results) if results.len() == positions.len() => {
                    for (pos, r) in positions.into_iter().zip(results) {
                        self.results[pos] = Some(r);
                    }
                }
                _ => {
                    for pos in positions {
                        self.results[pos] = Some(OpResult::Error(NodeError::Unavailable(
                            "the owning worker did not answer".into(),
                        )));
                    }
                }
            }
        }
        self.into_ready()
    }

    /// The results, if all are known (call only when [`is_ready`](Self::is_ready)).
    pub fn into_ready(self) -> Vec<OpResult> {
        self.results
            .into_iter()
            .map(|r| {
                r.unwrap_or(OpResult::Error(NodeError::Unavailable(
                    "result missing".into(),
                )))
            })
            .collect()
    }
}

impl WorkerCtx {
    /// True if writes that ask for no acknowledgement level wait for the disk (`ack =
    /// "durable"` in the node's configuration) or for other replicas (`ack_replicas`).
    pub fn durable_by_default(&self) -> bool {
        !self.default_ack().is_default()
    }

    /// The acknowledgement of writes that ask for none (the node's configuration).
    pub fn default_ack(&self) -> Ack {
        Ack {
            replicas: self.shared.config.ack_replicas as usize,
            durable: self.shared.config.ack == durability::AckLevel::Durable,
        }
    }

    /// Runs `op` on this worker's shard if it holds the key and the answer is final; gives
    /// the op back otherwise. The single-key fast path: no allocation beyond what the op
    /// itself needs.
    pub fn run_local<B: AsRef<[u8]>>(&self, op: Op<B>) -> Result<OpResult, Op<B>> {
        if op.is_write() && self.durable_by_default() {
            // Its answer waits for the disk: the slow path.
            return Err(op);
        }
        let mut shard = self.shard.borrow_mut();
        if shard.route(op.key()) != Route::Local {
            return Err(op);
        }
        // A read that may miss while keys are moving takes the slow path (which asks the
        // previous owners).
        if shard.settling().is_some() && matches!(op, Op::Get { .. }) {
            return Err(op);
        }
        let result = shard.execute(op);
        if shard.changeset_full() {
            self.gossip_now.notify_one();
        }
        Ok(result)
    }

    /// Reads `key` on this worker's shard without copying its value, if this worker holds
    /// the key (and no view change is settling); `None` otherwise.
    pub fn read_local<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(Result<Option<store::RecordRef<'_>>, NodeError>) -> R,
    ) -> Option<R> {
        let mut shard = self.shard.borrow_mut();
        if shard.route(key) != Route::Local || shard.settling().is_some() {
            return None;
        }
        Some(f(shard.read(key)))
    }

    /// Native addresses of the workers holding `key`.
    pub fn replica_addrs(&self, key: &[u8]) -> Vec<String> {
        self.shard.borrow().replica_addrs(key)
    }

    /// A connection to another node's worker (or front) at `addr`.
    pub async fn peer(&self, addr: &str) -> Result<Connection, NodeError> {
        if let Some(c) = self.peers.borrow().get(addr) {
            if !c.is_broken() {
                return Ok(c.clone());
            }
        }
        let c = tokio::time::timeout(PEER_TIMEOUT, Connection::open(addr))
            .await
            .map_err(|_| NodeError::Unavailable(format!("{addr} did not answer")))?
            .map_err(|e| NodeError::Unavailable(e.to_string()))?;
        let mut peers = self.peers.borrow_mut();
        if peers.len() > 4096 {
            peers.retain(|_, c| !c.is_broken());
        }
        peers.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    /// Sends one request to another node and returns its result.
    pub async fn call_peer(
        &self,
        addr: &str,
        op: pb::request::Op,
    ) -> Result<pb::response::Result, NodeError> {
        let conn = self.peer(addr).await?;
        let req = pb::Request {
            id: fastrand::u64(..),
            op: Some(op),
            ..Default::default()
        };
        let resp = tokio::time::timeout(PEER_TIMEOUT, conn.call(req))
            .await
            .map_err(|_| {
                // A peer cut off by a partition never breaks the socket: TCP retransmits
                // silently. Reusing the connection would queue every later request behind
                // it until long after the network is back; the next call reconnects.
                conn.abandon();
                NodeError::Unavailable(format!("{addr} timed out"))
            })?
            .map_err(|e| NodeError::Unavailable(e.to_string()))?;
        match resp.result {
            Some(pb::response::Result::Error(e)) => Err(forward::error_from_pb(e)),
            Some(r) => Ok(r),
            None => Err(NodeError::Unavailable(format!("{addr}: empty response"))),
        }
    }

    /// Runs `ops`: those whose key this worker holds right away, the others on a worker
    /// holding them — of this node through its inbox, of another node over the network —
    /// or, with `redirect`, answered with a redirect to those workers. Ops going to the
    /// same worker travel as one batch.
    pub async fn dispatch<B: AsRef<[u8]>>(
        self: &Rc<Self>,
        ops: Vec<Op<B>>,
        redirect: bool,
    ) -> Pending {
        let mut results: Vec<Option<OpResult>> = Vec::with_capacity(ops.len());
        let mut remote: HashMap<Replica, (Vec<usize>, Vec<Op<Bytes>>)> = HashMap::new();
        let mut misses: Vec<(usize, Bytes)> = Vec::new();
        {
            let mut shard = self.shard.borrow_mut();
            let settling = shard.settling().is_some();
            for (pos, op) in ops.into_iter().enumerate() {
                match shard.route(op.key()) {
                    Route::Local => {
                        let is_get = matches!(op, Op::Get { .. });
                        let key = op.key().to_vec();
                        let result = shard.execute(op);
                        if settling && is_get && result == OpResult::Value(None) {
                            misses.push((pos, Bytes::from(key)));
                        }
                        results.push(Some(result));
                    }
                    Route::Remote(_) if redirect => {
                        let addrs = shard.replica_addrs(op.key());
                        results.push(Some(OpResult::Error(NodeError::Redirect(addrs))));
                    }
                    Route::Remote(r) => {
                        results.push(None);
                        let entry = remote.entry(r).or_default();
                        entry.0.push(pos);
                        entry.1.push(op.to_owned_op());
                    }
                }
            }
            if shard.changeset_full() {
                self.gossip_now.notify_one();
            }
        }
        let mut waits = Vec::with_capacity(remote.len() + usize::from(!misses.is_empty()));
        for (replica, (positions, ops)) in remote {
            let (reply, rx) = oneshot::channel();
            if replica.node == self.shared.me {
                let msg = WorkerMsg::Exec {
                    ops,
                    ack: Ack::MERGED,
                    reply,
                };
                if self.shared.mesh.send(replica.worker, msg).await.is_err() {
                    for pos in positions {
                        results[pos] = Some(OpResult::Error(NodeError::ShuttingDown));
                    }
                    continue;
                }
            } else {
                // The chosen replica first, then the key's other replicas on other nodes
                // (all ops of a batch share their first key's replica set closely enough).
                let candidates: Vec<String> = {
                    let shard = self.shard.borrow();
                    let view = shard.view();
                    let mut addrs: Vec<String> =
                        view.addr(replica).map(str::to_string).into_iter().collect();
                    if let Some(first) = ops.first() {
                        for r in view.replicas(first.key()) {
                            if r.node != self.shared.me && r != replica {
                                if let Some(a) = view.addr(r) {
                                    addrs.push(a.to_string());
                                }
                            }
                        }
                    }
                    addrs
                };
                let ctx = self.clone();
                spawn_local(async move {
                    let n = ops.len();
                    let out = ctx.forward_any(&candidates, ops).await;
                    let _ = reply.send(match out {
                        Ok(results) => results,
                        Err(e) => vec![OpResult::Error(e); n],
                    });
                });
            }
            waits.push((positions, rx));
        }
        if !misses.is_empty() {
            // Keys may still be on their way here after a view change: ask their previous
            // owners, keep what they have, and answer from the merged state.
            let (reply, rx) = oneshot::channel();
            let positions: Vec<usize> = misses.iter().map(|(p, _)| *p).collect();
            for &p in &positions {
                results[p] = None;
            }
            let ctx = self.clone();
            spawn_local(async move {
                let keys: Vec<Bytes> = misses.into_iter().map(|(_, k)| k).collect();
                ctx.fetch_from_previous(&keys).await;
                let mut shard = ctx.shard.borrow_mut();
                let results = keys
                    .iter()
                    .map(|k| shard.execute(Op::Get { key: &k[..] }))
                    .collect();
                let _ = reply.send(results);
            });
            waits.push((positions, rx));
        }
        Pending { results, waits }
    }

    /// Runs `ops` like [`dispatch`](Self::dispatch), but answers a write only once it has
    /// the acknowledgement `ack` asks for: `ack.replicas` replicas of its key hold it
    /// (`Request.ack_replicas`), each on disk if `ack.durable` (`Request.durable`). Ops run
    /// one by one.
    pub async fn dispatch_acked<B: AsRef<[u8]>>(
        self: &Rc<Self>,
        ops: Vec<Op<B>>,
        redirect: bool,
        ack: Ack,
    ) -> Vec<OpResult> {
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            let route = self.shard.borrow().route(op.key());
            let result = match route {
                Route::Local => {
                    let owned = op.to_owned_op();
                    self.run_acked_here(vec![owned], ack).await.pop()
                }
                Route::Remote(_) if redirect => {
                    let addrs = self.replica_addrs(op.key());
                    Some(OpResult::Error(NodeError::Redirect(addrs)))
                }
                Route::Remote(r) if r.node == self.shared.me => {
                    let (reply, rx) = oneshot::channel();
                    let msg = WorkerMsg::Exec {
                        ops: vec![op.to_owned_op()],
                        ack,
                        reply,
                    };
                    if self.shared.mesh.send(r.worker, msg).await.is_err() {
                        Some(OpResult::Error(NodeError::ShuttingDown))
                    } else {
                        rx.await.ok().and_then(|mut v| v.pop())
                    }
                }
                Route::Remote(r) => {
                    let addr = self.shard.borrow().view().addr(r).map(str::to_string);
                    match addr {
                        Some(addr) => {
                            match self.forward_acked(&addr, vec![op.to_owned_op()], ack).await {
                                Ok(mut v) => v.pop(),
                                Err(e) => Some(OpResult::Error(e)),
                            }
                        }
                        None => Some(OpResult::Error(NodeError::Unavailable(
                            "replica left the cluster".into(),
                        ))),
                    }
                }
            };
            results.push(
                result.unwrap_or(OpResult::Error(NodeError::Unavailable("no result".into()))),
            );
        }
        results
    }

    /// Runs ops on this worker, then waits until each successful write has the
    /// acknowledgement `ack` asks for (on disk here first if durable, then on
    /// `ack.replicas` replicas). The ops may have been forwarded here under a view that has
    /// changed since: a write to a key this worker no longer replicates is also handed off
    /// to its current replicas (without that, the key would stay here for good).
    pub async fn run_acked_here(&self, ops: Vec<Op<Bytes>>, ack: Ack) -> Vec<OpResult> {
        let (results, written) = self.execute_acked_here(ops);
        self.finish_acked(results, written, ack).await
    }

    /// The first half of [`run_acked_here`](Self::run_acked_here), run at once (so requests
    /// behind it on a connection see its writes): executes the ops and returns their
    /// results and the successful writes (position, key).
    pub fn execute_acked_here(&self, ops: Vec<Op<Bytes>>) -> (Vec<OpResult>, Vec<(usize, Bytes)>) {
        let mut results = Vec::with_capacity(ops.len());
        let mut written: Vec<(usize, Bytes)> = Vec::new();
        let mut shard = self.shard.borrow_mut();
        for op in ops {
            let key = op.key_bytes().clone();
            let write = op.is_write();
            let result = shard.execute_forwarded(op);
            if write && !matches!(result, OpResult::Error(_)) {
                written.push((results.len(), key));
            }
            results.push(result);
        }
        (results, written)
    }

    /// The second half: waits until each successful write has the acknowledgement `ack`
    /// asks for (on disk here first if durable, then on `ack.replicas` replicas).
    pub async fn finish_acked(
        &self,
        mut results: Vec<OpResult>,
        written: Vec<(usize, Bytes)>,
        ack: Ack,
    ) -> Vec<OpResult> {
        if written.is_empty() {
            return results;
        }
        if ack.durable {
            if let Err(e) = durability::make_durable(&self.shard, &self.durability).await {
                if matches!(e, NodeError::Storage(_)) {
                    self.shard.borrow_mut().note_storage_errors(written.len());
                }
                for (i, _) in &written {
                    results[*i] = OpResult::Error(e.clone());
                }
                return results;
            }
        }
        for (i, key) in written {
            if let Err(e) = self.sync_replicas(&key, ack).await {
                results[i] = OpResult::Error(e);
            }
        }
        results
    }

    /// Reads `key` from every one of its replicas and merges their records (`GetAll`); a
    /// replica that does not answer fails the read. If this worker is a replica, what the
    /// others had is merged into it too (read repair).
    pub async fn get_all(&self, key: Bytes) -> Result<Option<lattice::Value>, NodeError> {
        let (mut merged, here, targets) = {
            let mut shard = self.shard.borrow_mut();
            let me = shard.me();
            let here = shard.is_replica(&key);
            let local = if here { shard.record_of(&key) } else { None };
            let targets: Vec<String> = shard
                .replicas(&key)
                .into_iter()
                .filter(|r| *r != me)
                .filter_map(|r| shard.view().addr(r).map(str::to_string))
                .collect();
            (local, here, targets)
        };
        for addr in targets {
            let op = pb::request::Op::Fetch(pb::Fetch {
                keys: vec![key.clone()],
            });
            match self.call_peer(&addr, op).await {
                Ok(pb::response::Result::Repair(r)) => {
                    for (_, record) in decode_entries(r.entries) {
                        match merged.as_mut() {
                            Some(m) => {
                                lattice::Lattice::merge(m, record);
                            }
                            None => merged = Some(record),
                        }
                    }
                }
                Ok(_) => {
                    return Err(NodeError::Unavailable(format!(
                        "{addr} answered a fetch with something else"
                    )))
                }
                Err(e) => {
                    return Err(NodeError::Unavailable(format!(
                        "replica {addr} did not answer: {e}"
                    )))
                }
            }
        }
        let Some(record) = merged else {
            return Ok(None);
        };
        if here {
            let mut shard = self.shard.borrow_mut();
            shard.merge_gossip(vec![(key, record.clone())]);
            shard.take_disk_error();
        }
        Ok(store::is_live(&record).then_some(record.value).flatten())
    }

    /// True if every op runs on this worker (its keys are all replicated here).
    pub fn all_local<B: AsRef<[u8]>>(&self, ops: &[Op<B>]) -> bool {
        let shard = self.shard.borrow();
        ops.iter().all(|op| shard.route(op.key()) == Route::Local)
    }

    /// Sends `key`'s record to `ack.replicas - 1` of its other replicas and waits for them
    /// to merge it (and make it durable, if `ack.durable`).
    async fn sync_replicas(&self, key: &Bytes, ack: Ack) -> Result<(), NodeError> {
        let durable = ack.durable;
        let ack = ack.replicas;
        if ack <= 1 {
            return Ok(());
        }
        let (record, targets) = {
            let shard = self.shard.borrow();
            let Some(record) = shard.store().get(key).map(|r| r.to_record()) else {
                return Ok(());
            };
            let me = shard.me();
            let targets: Vec<(Replica, Option<String>)> = shard
                .replicas(key)
                .into_iter()
                .filter(|r| *r != me)
                .map(|r| (r, shard.view().addr(r).map(str::to_string)))
                .collect();
            (record, targets)
        };
        if targets.len() + 1 < ack {
            return Err(NodeError::Unavailable(format!(
                "{ack} acknowledgements requested, the key has {} replicas",
                targets.len() + 1
            )));
        }
        let batch: GossipBatch = vec![(key.clone(), record)];
        let mut acked = 1;
        for (replica, addr) in targets {
            if acked >= ack {
                break;
            }
            let ok = if replica.node == self.shared.me {
                let (reply, rx) = oneshot::channel();
                let msg = WorkerMsg::Replicate(batch.clone(), durable, reply);
                self.shared.mesh.send(replica.worker, msg).await.is_ok() && rx.await == Ok(true)
            } else if let Some(addr) = addr {
                let op = pb::request::Op::Replicate(pb::Replicate {
                    entries: encode_entries(&batch),
                    sender: String::new(),
                    durable,
                });
                self.call_peer(&addr, op).await.is_ok()
            } else {
                false
            };
            acked += usize::from(ok);
        }
        if acked < ack {
            return Err(NodeError::Unavailable(format!(
                "only {acked} of {ack} replicas acknowledged the write"
            )));
        }
        Ok(())
    }

    /// Runs ops on another node's worker with an acknowledgement level.
    async fn forward_acked(
        &self,
        addr: &str,
        ops: Vec<Op<Bytes>>,
        ack: Ack,
    ) -> Result<Vec<OpResult>, NodeError> {
        let n = ops.len();
        let request = pb::request::Op::Forward(pb::Forward {
            ops: ops.iter().map(forward::op_to_pb).collect(),
            ack_replicas: ack.replicas as u32,
            durable: ack.durable,
        });
        match self.call_peer(addr, request).await? {
            pb::response::Result::Forwarded(f) if f.results.len() == n => {
                Ok(f.results.into_iter().map(forward::result_from_pb).collect())
            }
            _ => Err(NodeError::Unavailable(format!(
                "{addr} answered a forward with something else"
            ))),
        }
    }

    /// Runs ops on the first of `candidates` (replicas on other nodes) that answers. Reads
    /// move on after any failure; writes only when the replica could not be reached at all,
    /// so a write that may have run is never applied twice.
    async fn forward_any(
        &self,
        candidates: &[String],
        ops: Vec<Op<Bytes>>,
    ) -> Result<Vec<OpResult>, NodeError> {
        let writes = ops.iter().any(Op::is_write);
        let mut last = NodeError::Unavailable("no replica of the key is reachable".into());
        for addr in candidates {
            if writes && self.peer(addr).await.is_err() {
                last = NodeError::Unavailable(format!("cannot reach {addr}"));
                continue;
            }
            match self.forward(addr, ops.clone()).await {
                Ok(results) => return Ok(results),
                Err(e) if !writes => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// Runs ops on another node's worker.
    async fn forward(&self, addr: &str, ops: Vec<Op<Bytes>>) -> Result<Vec<OpResult>, NodeError> {
        self.forward_acked(addr, ops, Ack::default()).await
    }

    /// Asks where `keys` lived before the last view change for their records, and merges
    /// them here.
    async fn fetch_from_previous(&self, keys: &[Bytes]) {
        let mut by_addr: HashMap<String, Vec<Bytes>> = HashMap::new();
        {
            let shard = self.shard.borrow();
            let Some(views) = shard.settling() else {
                return;
            };
            for key in keys {
                for view in views {
                    for r in view.replicas(key) {
                        if r == shard.me() {
                            continue;
                        }
                        if let Some(addr) = view.addr(r) {
                            let entry = by_addr.entry(addr.to_string()).or_default();
                            if !entry.contains(key) {
                                entry.push(key.clone());
                            }
                        }
                    }
                }
            }
        }
        for (addr, keys) in by_addr {
            let op = pb::request::Op::Fetch(pb::Fetch { keys: keys.clone() });
            match self.call_peer(&addr, op).await {
                Ok(pb::response::Result::Repair(r)) => {
                    let batch = decode_entries(r.entries);
                    tracing::debug!(%addr, asked = keys.len(), found = batch.len(), "fetched");
                    let mut shard = self.shard.borrow_mut();
                    shard.merge_gossip(batch);
                    shard.take_disk_error();
                }
                other => tracing::debug!(%addr, ?other, "fetch failed"),
            }
        }
    }

    /// Counters of this worker.
    pub fn stats(&self) -> WorkerStats {
        WorkerStats {
            worker: self.worker,
            shard: self.shard.borrow().stats(),
            connections: self.connections.get(),
            batches_in_flight: self.remote_batches.get() as u64,
            subscriptions: self.subscriptions.borrow().len() as u64,
        }
    }

    /// One subscription round: pushes the keys that are due and changed (see
    /// [`Subscriptions::round`]).
    fn subscription_round(&self) {
        let mut subs = self.subscriptions.borrow_mut();
        if subs.is_empty() {
            return;
        }
        let mut shard = self.shard.borrow_mut();
        subs.round(Instant::now(), |key| {
            if shard.route(key) != Route::Local {
                return Watched::Moved;
            }
            // Right after a view change, a key moving here may read absent until its
            // hand-off arrives; that arrival is then pushed like any change.
            match shard.watched_value(key) {
                Ok(v) => Watched::Value(v.as_ref().map(wire::convert::value_to_pb)),
                Err(_) => Watched::Unknown,
            }
        });
    }

    /// A receiver that becomes `true` when the node stops.
    pub fn shutdown(&self) -> watch::Receiver<bool> {
        self.shared.shutdown.clone()
    }

    /// One gossip round: each destination gets its batch — through the inbox for this
    /// node's workers, over the network for other nodes; what cannot go is requeued.
    fn gossip_round(self: &Rc<Self>) {
        let outgoing = self.shard.borrow_mut().take_gossip();
        for out in outgoing {
            if out.to.node == self.shared.me {
                let keys: Vec<Bytes> = out.entries.iter().map(|(k, _)| k.clone()).collect();
                match self
                    .shared
                    .mesh
                    .try_send(out.to.worker, WorkerMsg::Gossip(out.entries))
                {
                    Ok(()) => self
                        .shard
                        .borrow_mut()
                        .delivered(keys.iter().map(|k| &k[..])),
                    Err(WorkerMsg::Gossip(entries)) => self.shard.borrow_mut().requeue(Outgoing {
                        to: out.to,
                        entries,
                    }),
                    Err(_) => {}
                }
            } else if self.remote_batches.get() >= MAX_REMOTE_BATCHES {
                self.shard.borrow_mut().requeue(out);
            } else {
                self.remote_batches.set(self.remote_batches.get() + 1);
                spawn_local(send_remote(self.clone(), out));
            }
        }
        self.shard
            .borrow_mut()
            .after_gossip(self.shared.config.tombstone_grace_secs * 1000);
    }

    /// Every other worker of the cluster.
    fn anti_entropy_peers(&self) -> Vec<Replica> {
        let shard = self.shard.borrow();
        let me = shard.me();
        shard
            .view()
            .view
            .nodes()
            .flat_map(|(&node, info)| {
                (0..info.workers.len() as u32).map(move |worker| Replica { node, worker })
            })
            .filter(|r| *r != me)
            .collect()
    }

    /// One anti-entropy exchange with a random other worker.
    async fn anti_entropy_round(&self) {
        let candidates = self.anti_entropy_peers();
        if candidates.is_empty() {
            return;
        }
        let peer = candidates[fastrand::usize(..candidates.len())];
        self.anti_entropy_with(peer).await;
    }

    /// Anti-entropy with every other worker: after a view change, so a worker that just
    /// became a replica (a restarted or new node, a key range that moved) pulls what its
    /// peers hold at once instead of waiting for random rounds to reach them.
    async fn anti_entropy_all(&self) {
        for peer in self.anti_entropy_peers() {
            self.anti_entropy_with(peer).await;
        }
    }

    /// One anti-entropy exchange with `peer`: it answers with its records of the buckets
    /// where our digests differ, and we send ours of those buckets.
    async fn anti_entropy_with(&self, peer: Replica) {
        let (addr, digest, me) = {
            let shard = self.shard.borrow();
            let Some(addr) = shard.view().addr(peer).map(str::to_string) else {
                return;
            };
            (addr, shard.digest(peer), shard.me())
        };
        let node_id = match self.shard.borrow().view().view.node(me.node) {
            Some(info) => info.id.clone(),
            None => return,
        };
        let op = pb::request::Op::AntiEntropy(pb::AntiEntropyDigest {
            sender_node: node_id,
            sender_worker: me.worker,
            buckets: digest,
        });
        let Ok(pb::response::Result::Repair(repair)) = self.call_peer(&addr, op).await else {
            return;
        };
        if repair.differing.is_empty() {
            return;
        }
        let theirs = decode_entries(repair.entries);
        tracing::debug!(
            buckets = repair.differing.len(),
            received = theirs.len(),
            "anti-entropy repair"
        );
        let mine = {
            let mut shard = self.shard.borrow_mut();
            shard.merge_gossip(theirs);
            shard.take_disk_error();
            shard.bucket_entries(peer, &repair.differing)
        };
        if !mine.is_empty() {
            let op = pb::request::Op::Replicate(pb::Replicate {
                entries: encode_entries(&mine),
                sender: String::new(),
                durable: false,
            });
            let _ = self.call_peer(&addr, op).await;
        }
    }
}

/// Sends a replication batch to another node; on failure it goes back to the changeset.
async fn send_remote(ctx: Rc<WorkerCtx>, out: Outgoing) {
    let addr = ctx.shard.borrow().view().addr(out.to).map(str::to_string);
    let result = match &addr {
        Some(addr) => {
            let op = pb::request::Op::Replicate(pb::Replicate {
                entries: encode_entries(&out.entries),
                sender: String::new(),
                durable: false,
            });
            ctx.call_peer(addr, op).await.map(|_| ())
        }
        // The destination left the view: the changeset re-sends to the current replicas.
        None => Err(NodeError::Unavailable("replica left".into())),
    };
    ctx.remote_batches
        .set(ctx.remote_batches.get().saturating_sub(1));
    let mut shard = ctx.shard.borrow_mut();
    match result {
        Ok(()) => shard.delivered(out.entries.iter().map(|(k, _)| &k[..])),
        Err(e) => {
            tracing::debug!(to = ?addr, error = %e, "replication batch requeued");
            shard.requeue(out);
        }
    }
}

/// Gossip entries on the wire.
pub fn encode_entries(batch: &GossipBatch) -> Vec<pb::gossip::Entry> {
    batch
        .iter()
        .map(|(key, record)| pb::gossip::Entry {
            key: key.clone(),
            record: Some(wire::convert::record_to_pb(record)),
        })
        .collect()
}

/// Gossip entries from the wire; entries that don't decode are dropped (and repaired by
/// anti-entropy if they mattered).
pub fn decode_entries(entries: Vec<pb::gossip::Entry>) -> GossipBatch {
    entries
        .into_iter()
        .filter_map(|e| {
            let record: Record = wire::convert::record_from_pb(e.record.as_ref()?).ok()?;
            Some((e.key, record))
        })
        .collect()
}

/// What one worker thread is given at start.
pub struct WorkerSetup {
    /// Node-wide state.
    pub shared: Arc<Shared>,
    /// This worker's index.
    pub worker: u32,
    /// This worker's shard.
    pub shard: Shard,
    /// This worker's inbox.
    pub inbox: mpsc::Receiver<WorkerMsg>,
    /// The listener of this worker's native port.
    pub listener: std::net::TcpListener,
    /// For the worker that accepts on the shared ports: the front and RESP listeners.
    pub shared_listeners: Option<(std::net::TcpListener, std::net::TcpListener)>,
    /// What makes this worker's writes durable.
    pub durability: Durability,
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
            worker,
            shard,
            inbox,
            listener,
            shared_listeners,
            durability,
        } = setup;
        let ctx = Rc::new(WorkerCtx {
            shared: shared.clone(),
            worker,
            shard: RefCell::new(shard),
            connections: Cell::new(0),
            connection_closed: Notify::new(),
            gossip_now: Notify::new(),
            peers: RefCell::new(HashMap::new()),
            remote_batches: Cell::new(0),
            durability,
            subscriptions: RefCell::new(Subscriptions::default()),
            subscribed: Notify::new(),
        });
        let listener = TcpListener::from_std(listener)?;
        spawn_local(accept_own(ctx.clone(), listener));
        if let Some((front, resp)) = shared_listeners {
            spawn_local(accept_shared(
                ctx.clone(),
                TcpListener::from_std(front)?,
                Protocol::NativeFront,
            ));
            spawn_local(accept_shared(
                ctx.clone(),
                TcpListener::from_std(resp)?,
                Protocol::Resp,
            ));
        }
        spawn_local(inbox_loop(ctx.clone(), inbox));
        spawn_local(view_loop(ctx.clone()));
        spawn_local(gossip_loop(ctx.clone()));
        spawn_local(anti_entropy_loop(ctx.clone()));
        spawn_local(subscription_loop(ctx.clone()));
        if matches!(ctx.durability, Durability::Wal(_)) {
            spawn_local(journal_loop(ctx.clone()));
        }

        let mut shutdown = ctx.shutdown();
        let _ = shutdown.wait_for(|stop| *stop).await;
        // Connections see the same signal and finish their current batch.
        let drained = tokio::time::timeout(EXIT_DEADLINE, async {
            while ctx.connections.get() > 0 {
                let closed = ctx.connection_closed.notified();
                if ctx.connections.get() == 0 {
                    break;
                }
                closed.await;
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                worker,
                open = ctx.connections.get(),
                "connections still open at exit"
            );
        }
        ctx.gossip_round();
        Ok(())
    })
}

/// Accepts clients and peers on this worker's own native port.
async fn accept_own(ctx: Rc<WorkerCtx>, listener: TcpListener) {
    let mut shutdown = ctx.shutdown();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        match accepted {
            Ok((stream, _)) => {
                let permit = ConnectionPermit::acquire(&ctx.shared);
                spawn_local(crate::native::serve(ctx.clone(), stream, false, permit));
            }
            Err(e) => accept_error(e).await,
        }
    }
}

/// Accepts clients on a shared port and spreads them over the workers round-robin.
async fn accept_shared(ctx: Rc<WorkerCtx>, listener: TcpListener, protocol: Protocol) {
    let mut shutdown = ctx.shutdown();
    let workers = ctx.shared.mesh.len() as u32;
    let mut next = 0u32;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                accept_error(e).await;
                continue;
            }
        };
        let permit = ConnectionPermit::acquire(&ctx.shared);
        let target = next % workers.max(1);
        next = next.wrapping_add(1);
        if target == ctx.worker || permit.is_none() {
            spawn_local(serve(ctx.clone(), stream, protocol, permit));
            continue;
        }
        match stream.into_std() {
            Ok(std_stream) => {
                let msg = WorkerMsg::Connection(std_stream, protocol, permit);
                if let Err(WorkerMsg::Connection(std_stream, protocol, permit)) =
                    ctx.shared.mesh.send(target, msg).await
                {
                    // The target worker is gone (shutting down): serve it here.
                    if let Ok(stream) = TcpStream::from_std(std_stream) {
                        spawn_local(serve(ctx.clone(), stream, protocol, permit));
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not hand over a connection"),
        }
    }
}

/// Serves one connection of a shared port on this worker.
async fn serve(
    ctx: Rc<WorkerCtx>,
    stream: TcpStream,
    protocol: Protocol,
    permit: Option<ConnectionPermit>,
) {
    match protocol {
        Protocol::NativeFront => crate::native::serve(ctx, stream, true, permit).await,
        Protocol::Resp => crate::resp::serve(ctx, stream, permit).await,
    }
}

/// Errors from `accept` (e.g. out of file descriptors) must not end the loop: log, back off.
async fn accept_error(e: std::io::Error) {
    tracing::warn!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Handles messages from this node's other workers and the acceptor.
async fn inbox_loop(ctx: Rc<WorkerCtx>, mut inbox: mpsc::Receiver<WorkerMsg>) {
    while let Some(msg) = inbox.recv().await {
        match msg {
            WorkerMsg::Exec { ops, ack, reply } if !ack.is_default() => {
                let ctx = ctx.clone();
                spawn_local(async move {
                    let results = ctx.run_acked_here(ops, ack).await;
                    let _ = reply.send(results);
                });
            }
            WorkerMsg::Exec { ops, reply, .. } => {
                let results = {
                    let mut shard = ctx.shard.borrow_mut();
                    let mut results = Vec::with_capacity(ops.len());
                    for op in ops {
                        // Routed here under a view that changed since, a write is passed on.
                        results.push(shard.execute_forwarded(op));
                    }
                    if shard.changeset_full() {
                        ctx.gossip_now.notify_one();
                    }
                    results
                };
                let _ = reply.send(results);
            }
            WorkerMsg::Replicate(batch, durable, reply) => {
                let merged = {
                    let mut shard = ctx.shard.borrow_mut();
                    shard.merge_gossip(batch);
                    shard.take_disk_error().is_none()
                };
                if durable && merged {
                    let ctx = ctx.clone();
                    spawn_local(async move {
                        let ok = durability::make_durable(&ctx.shard, &ctx.durability)
                            .await
                            .is_ok();
                        let _ = reply.send(ok);
                    });
                } else {
                    let _ = reply.send(merged);
                }
            }
            WorkerMsg::Gossip(batch) => {
                // No acknowledgement within a node: a record a disk error kept out comes
                // back with anti-entropy.
                let mut shard = ctx.shard.borrow_mut();
                shard.merge_gossip(batch);
                shard.take_disk_error();
            }
            WorkerMsg::Stats(reply) => {
                let _ = reply.send(ctx.stats());
            }
            WorkerMsg::Connection(std_stream, protocol, permit) => {
                match TcpStream::from_std(std_stream) {
                    Ok(stream) => {
                        spawn_local(serve(ctx.clone(), stream, protocol, permit));
                    }
                    Err(e) => tracing::warn!(error = %e, "could not adopt a connection"),
                }
            }
        }
    }
}

/// Switches the shard to every new view the cluster agent publishes.
async fn view_loop(ctx: Rc<WorkerCtx>) {
    let mut snapshots = ctx.shared.snapshots.clone();
    let mut shutdown = ctx.shutdown();
    loop {
        let view = snapshots.borrow_and_update().view.clone();
        let switched = {
            let mut shard = ctx.shard.borrow_mut();
            let switch = shard.view().version != view.version;
            if switch {
                shard.set_view(view);
            }
            switch
        };
        if switched {
            // Hand-offs go out now rather than at the next tick.
            ctx.gossip_now.notify_one();
        }
        tokio::select! {
            r = snapshots.changed() => if r.is_err() { return },
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// Sends the changeset every gossip period, or sooner when it fills up.
async fn gossip_loop(ctx: Rc<WorkerCtx>) {
    let mut shutdown = ctx.shutdown();
    let mut tick = tokio::time::interval(ctx.shared.config.gossip_period());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = ctx.gossip_now.notified() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        ctx.gossip_round();
        // A round takes a bounded share of the backlog (a hand-off of a million keys, a
        // burst of writes); while more is waiting, the next round follows shortly.
        while ctx.shard.borrow().has_gossip() {
            tokio::select! {
                _ = tokio::time::sleep(BACKLOG_ROUND_PAUSE) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            ctx.gossip_round();
            if ctx.remote_batches.get() >= MAX_REMOTE_BATCHES {
                // The network is the bottleneck (or a peer is down): back to the timer.
                break;
            }
        }
    }
}

/// Runs a subscription round every [`crate::subscribe::TICK`] while any connection of this
/// worker subscribes to keys; sleeps until one does otherwise.
async fn subscription_loop(ctx: Rc<WorkerCtx>) {
    let mut shutdown = ctx.shutdown();
    loop {
        let idle = ctx.subscriptions.borrow().is_empty();
        if idle {
            tokio::select! {
                _ = ctx.subscribed.notified() => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
        } else {
            tokio::select! {
                _ = tokio::time::sleep(crate::subscribe::TICK) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
        ctx.subscription_round();
    }
}

/// Pause between gossip rounds while a backlog drains.
const BACKLOG_ROUND_PAUSE: Duration = Duration::from_millis(2);

/// Moves the shard's pending changes to the write-ahead log every few milliseconds (one
/// record per flush: group commit at the worker), notices when a failed log accepts
/// appends again, and snapshots the shard once enough log has accumulated.
async fn journal_loop(ctx: Rc<WorkerCtx>) {
    let Durability::Wal(state) = &ctx.durability else {
        return;
    };
    let mut shutdown = ctx.shutdown();
    let mut tick = tokio::time::interval(durability::JOURNAL_FLUSH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|s| *s) => break,
        }
        let failed = ctx.shard.borrow().journal_failure().is_some();
        if failed {
            if state.log.health().is_err() {
                continue;
            }
            tracing::info!(worker = ctx.worker, "write-ahead log accepts appends again");
            ctx.shard.borrow_mut().set_journal_failure(None);
        }
        if ctx.shard.borrow().journal_pending() {
            let _ = durability::flush_journal(&ctx.shard, &ctx.durability).await;
        }
        if state.since_snapshot.get() >= state.snapshot_after && !state.snapshotting.get() {
            take_snapshot(&ctx, state).await;
        }
    }
    // Last changes, then close (waits for the writer to finish).
    let _ = durability::flush_journal(&ctx.shard, &ctx.durability).await;
    if let Err(e) = state.log.close().await {
        tracing::warn!(worker = ctx.worker, error = %e, "closing the write-ahead log");
    }
}

/// Writes a snapshot of the shard covering the log so far, so older segments can go.
/// Encoding runs on the worker (the store is its own); the fsync and rename off it.
async fn take_snapshot(ctx: &Rc<WorkerCtx>, state: &durability::WalState) {
    if durability::flush_journal(&ctx.shard, &ctx.durability)
        .await
        .is_err()
    {
        return;
    }
    let lsn = state.log.last_lsn();
    let started = std::time::Instant::now();
    let writer = {
        let shard = ctx.shard.borrow();
        durability::snapshot(&state.log, lsn, &shard)
    };
    let writer = match writer {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(worker = ctx.worker, error = %e, "snapshot failed");
            return;
        }
    };
    state.snapshotting.set(true);
    let done = tokio::task::spawn_blocking(move || writer.finish()).await;
    state.snapshotting.set(false);
    match done {
        Ok(Ok(info)) => {
            state.since_snapshot.set(0);
            tracing::info!(
                worker = ctx.worker,
                lsn,
                took_ms = started.elapsed().as_millis() as u64,
                ?info,
                "snapshot written"
            );
        }
        Ok(Err(e)) => tracing::warn!(worker = ctx.worker, error = %e, "snapshot failed"),
        Err(e) => tracing::warn!(worker = ctx.worker, error = %e, "snapshot task failed"),
    }
}

/// Compares digests with a random replica every anti-entropy period, and with every other
/// worker after a change of the rings.
async fn anti_entropy_loop(ctx: Rc<WorkerCtx>) {
    let period = ctx.shared.config.cluster.anti_entropy_period();
    let mut shutdown = ctx.shutdown();
    // Workers start their rounds at different times.
    let jitter = Duration::from_millis(fastrand::u64(0..=period.as_millis() as u64));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + jitter, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut views = ctx.shared.snapshots.clone();
    let mut rings = views.borrow_and_update().view.rings;
    loop {
        let view_changed = tokio::select! {
            _ = tick.tick() => false,
            changed = views.changed() => {
                if changed.is_err() {
                    return;
                }
                true
            }
            _ = shutdown.wait_for(|s| *s) => return,
        };
        if !view_changed {
            ctx.anti_entropy_round().await;
            continue;
        }
        let now = views.borrow_and_update().view.rings;
        if now == rings {
            continue;
        }
        rings = now;
        // Let hand-off move the bulk first; then pull what is still missing.
        tokio::select! {
            _ = tokio::time::sleep(AFTER_VIEW_CHANGE) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        ctx.anti_entropy_all().await;
    }
}

/// Delay between a change of the rings and the full anti-entropy round that follows it.
const AFTER_VIEW_CHANGE: Duration = Duration::from_millis(500);
