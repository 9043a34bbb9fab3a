//! The worker thread: a single-threaded tokio runtime owning one [`Shard`].
//!
//! Tasks on a worker (all on one thread, sharing the shard through a `RefCell` that is never
//! borrowed across an `.await`):
//! - the accept loop of the worker's own native port (clients that know placement);
//! - on worker 0 only, the accept loops of the shared front and RESP ports, which hand
//!   connections to workers round-robin through their inboxes;
//! - the inbox loop: forwarded ops, gossip, replication changes, stats, handed-over
//!   connections;
//! - the gossip timer;
//! - one task per client connection.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use placement::Ring;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::task::{spawn_local, LocalSet};

use crate::config::NodeConfig;
use crate::error::NodeError;
use crate::mesh::{Mesh, Protocol, WorkerMsg, WorkerStats};
use crate::op::{Op, OpResult};
use crate::shard::{ReplicationChange, Route, Shard};

/// How long a stopping worker waits for its connections to finish.
pub const EXIT_DEADLINE: Duration = Duration::from_secs(5);

/// Most commands a connection runs before it writes their replies (bounds the reply queue).
pub const MAX_PIPELINE: usize = 1024;

/// Node-wide state shared read-only by all workers.
#[derive(Debug)]
pub struct Shared {
    /// The configuration the node started with.
    pub config: NodeConfig,
    /// Inboxes of all workers.
    pub mesh: Mesh,
    /// The local ring.
    pub ring: Arc<Ring<u32>>,
    /// Native address of each worker.
    pub worker_addrs: Vec<SocketAddr>,
    /// The shared native front address.
    pub front_addr: SocketAddr,
    /// The RESP address.
    pub resp_addr: SocketAddr,
    /// When the node started.
    pub started: Instant,
    /// Open client connections on the whole node: only touched when a connection opens or
    /// closes, never on the request path.
    pub connections: AtomicUsize,
    /// Becomes `true` when the node must stop.
    pub shutdown: watch::Receiver<bool>,
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
    /// Batches forwarded to other workers: the ops' positions and the reply.
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
    /// Runs `op` on this worker's shard if it holds the key; gives the op back otherwise.
    /// The single-key fast path: no allocation beyond what the op itself needs.
    pub fn run_local<B: AsRef<[u8]>>(&self, op: Op<B>) -> Result<OpResult, Op<B>> {
        let mut shard = self.shard.borrow_mut();
        if shard.route(op.key()) != Route::Local {
            return Err(op);
        }
        let result = shard.execute(op);
        if shard.changeset_full() {
            self.gossip_now.notify_one();
        }
        Ok(result)
    }

    /// Reads `key` on this worker's shard without copying its value, if this worker holds
    /// the key; `None` otherwise.
    pub fn read_local<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(Result<Option<store::RecordRef<'_>>, NodeError>) -> R,
    ) -> Option<R> {
        let mut shard = self.shard.borrow_mut();
        if shard.route(key) != Route::Local {
            return None;
        }
        Some(f(shard.read(key)))
    }

    /// Native addresses of the workers holding `key`.
    pub fn replica_addrs(&self, key: &[u8]) -> Vec<String> {
        self.shard
            .borrow()
            .replicas(key)
            .into_iter()
            .filter_map(|w| self.shared.worker_addrs.get(w as usize))
            .map(|a| a.to_string())
            .collect()
    }

    /// Runs `ops`: those whose key this worker holds right away, the others on a worker
    /// holding them (or, with `redirect`, answered with a redirect to those workers).
    /// Forwarded ops to one worker travel as one batch.
    pub async fn dispatch<B: AsRef<[u8]>>(&self, ops: Vec<Op<B>>, redirect: bool) -> Pending {
        let mut results: Vec<Option<OpResult>> = Vec::with_capacity(ops.len());
        let mut remote: HashMap<u32, (Vec<usize>, Vec<Op<Bytes>>)> = HashMap::new();
        {
            let mut shard = self.shard.borrow_mut();
            for (pos, op) in ops.into_iter().enumerate() {
                match shard.route(op.key()) {
                    Route::Local => results.push(Some(shard.execute(op))),
                    Route::Remote(_) if redirect => {
                        drop(shard);
                        let addrs = self.replica_addrs(op.key());
                        results.push(Some(OpResult::Error(NodeError::Redirect(addrs))));
                        shard = self.shard.borrow_mut();
                    }
                    Route::Remote(w) => {
                        results.push(None);
                        let entry = remote.entry(w).or_default();
                        entry.0.push(pos);
                        entry.1.push(op.to_owned_op());
                    }
                }
            }
            if shard.changeset_full() {
                self.gossip_now.notify_one();
            }
        }
        let mut waits = Vec::with_capacity(remote.len());
        for (worker, (positions, ops)) in remote {
            let (reply, rx) = oneshot::channel();
            let msg = WorkerMsg::Exec { ops, reply };
            if self.shared.mesh.send(worker, msg).await.is_err() {
                for pos in positions {
                    results[pos] = Some(OpResult::Error(NodeError::ShuttingDown));
                }
                continue;
            }
            waits.push((positions, rx));
        }
        Pending { results, waits }
    }

    /// Validates a replication change and broadcasts it to every worker.
    pub async fn set_replication(
        &self,
        key: Bytes,
        global: u32,
        local: u32,
    ) -> Result<(), NodeError> {
        let change = {
            let mut shard = self.shard.borrow_mut();
            shard.check_replication(&key, global, local)?;
            let vector = placement::ReplicationVector {
                memory: placement::Replication { global, local },
                disk: placement::Replication {
                    global: 0,
                    local: 0,
                },
            };
            ReplicationChange {
                key,
                vector,
                ts: shard.tick(),
            }
        };
        for w in 0..self.shared.mesh.len() as u32 {
            if self
                .shared
                .mesh
                .send(w, WorkerMsg::Replication(change.clone()))
                .await
                .is_err()
            {
                return Err(NodeError::ShuttingDown);
            }
        }
        Ok(())
    }

    /// Counters of this worker.
    pub fn stats(&self) -> WorkerStats {
        WorkerStats {
            worker: self.worker,
            shard: self.shard.borrow().stats(),
            connections: self.connections.get(),
        }
    }

    /// A receiver that becomes `true` when the node stops.
    pub fn shutdown(&self) -> watch::Receiver<bool> {
        self.shared.shutdown.clone()
    }

    /// One gossip round: send each destination its batch; requeue what could not go.
    fn gossip_round(&self) {
        let mut shard = self.shard.borrow_mut();
        let batches = shard.take_gossip();
        for (worker, batch) in batches.into_iter().enumerate() {
            if batch.is_empty() {
                continue;
            }
            if let Err(WorkerMsg::Gossip(batch)) = self
                .shared
                .mesh
                .try_send(worker as u32, WorkerMsg::Gossip(batch))
            {
                shard.requeue_gossip(batch);
            }
        }
        shard.after_gossip(self.shared.config.tombstone_grace_secs * 1000);
    }
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
        } = setup;
        let ctx = Rc::new(WorkerCtx {
            shared: shared.clone(),
            worker,
            shard: RefCell::new(shard),
            connections: Cell::new(0),
            connection_closed: Notify::new(),
            gossip_now: Notify::new(),
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
        spawn_local(gossip_loop(ctx.clone()));

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

/// Accepts clients on this worker's own native port.
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

/// Handles messages from other workers and the acceptor.
async fn inbox_loop(ctx: Rc<WorkerCtx>, mut inbox: mpsc::Receiver<WorkerMsg>) {
    while let Some(msg) = inbox.recv().await {
        match msg {
            WorkerMsg::Exec { ops, reply } => {
                let results = {
                    let mut shard = ctx.shard.borrow_mut();
                    let mut results = Vec::with_capacity(ops.len());
                    for op in ops {
                        let key = op.key().to_vec();
                        let write = op.is_write();
                        results.push(shard.execute(op));
                        if write && !shard.is_replica(&key) {
                            // Routed here under a replication vector that changed since.
                            shard.queue_handoff(&key);
                        }
                    }
                    if shard.changeset_full() {
                        ctx.gossip_now.notify_one();
                    }
                    results
                };
                let _ = reply.send(results);
            }
            WorkerMsg::Gossip(batch) => ctx.shard.borrow_mut().merge_gossip(batch),
            WorkerMsg::Replication(change) => {
                ctx.shard.borrow_mut().apply_replication(change);
                ctx.gossip_now.notify_one();
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
    }
}
