//! The native protocol: length-prefixed protobuf frames (`proto/latticekv.proto`).
//!
//! A connection reads every complete frame it has, runs the requests (forwarding or
//! redirecting those for other workers' keys), then writes all responses in request order
//! with one write. On a worker's own port, requests for keys the worker does not hold get a
//! `REDIRECT` error naming the workers that do; on the shared front port they are forwarded.
//!
//! Subscriptions (`Subscribe`) are never forwarded, on any port: the connection's worker
//! must hold the keys. Their pushes (`id = 0`) are written between batches of responses —
//! behind the responses of the batch being answered, or on their own while the connection
//! waits for requests — so responses keep their order (see [`crate::subscribe`]).
//!
//! Bad input: an undecodable frame gets a `BAD_REQUEST` response (id 0) and the connection
//! goes on (framing is intact); a frame above `max_frame_size` gets `FRAME_TOO_LARGE` and the
//! connection is closed (the stream cannot be resynchronised). Other clients are unaffected.

use std::collections::VecDeque;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wire::convert::{value_from_pb, value_to_pb};
use wire::frame::{self, FrameError, HEADER_LEN};
use wire::pb::{self, request::Op as ReqOp, response::Result as RespResult};

use crate::durability::Ack;
use crate::error::NodeError;
use crate::forward;
use crate::op::{Condition, Op, OpResult};
use crate::subscribe::{value_version, ConnectionSubscriptions};
use crate::worker::{ConnectionPermit, LocalConnection, Pending, WorkerCtx, MAX_PIPELINE};
use placement::Replica;

/// How the results of a request's ops become its response.
enum Shape {
    /// One op answered with a `GetResult`.
    Get,
    /// One op answered with an `Ack`.
    Ack,
    /// Several ops answered with a `MultiResult`.
    Multi,
}

/// A response being produced, in request order.
enum Queued {
    /// Complete.
    Ready(pb::Response),
    /// Waiting for forwarded ops.
    Ops {
        id: u64,
        shape: Shape,
        pending: Pending,
    },
    /// Computed by a task of its own (a write waiting for the disk or for other replicas),
    /// so the requests behind it on the connection go on meanwhile: one fsync can then
    /// cover all of them.
    Later {
        id: u64,
        reply: tokio::sync::oneshot::Receiver<pb::Response>,
    },
}

/// Runs `work` in a task of its own and queues its response.
fn later(id: u64, work: impl std::future::Future<Output = pb::Response> + 'static) -> Queued {
    let (tx, reply) = tokio::sync::oneshot::channel();
    tokio::task::spawn_local(async move {
        let _ = tx.send(work.await);
    });
    Queued::Later { id, reply }
}

fn error_response(id: u64, e: &NodeError) -> pb::Response {
    pb::Response {
        id,
        result: Some(RespResult::Error(e.to_pb())),
    }
}

fn raw_error(id: u64, code: pb::ErrorCode, message: String) -> pb::Response {
    pb::Response {
        id,
        result: Some(RespResult::Error(pb::Error {
            code: code as i32,
            message,
            redirect: Vec::new(),
        })),
    }
}

fn key_result(r: OpResult) -> pb::KeyResult {
    use pb::key_result::Result as K;
    let result = match r {
        OpResult::Value(v) => K::Get(pb::GetResult {
            value: v.as_ref().map(value_to_pb),
        }),
        OpResult::Int(n) => K::Ack(pb::Ack { count: n }),
        OpResult::Done | OpResult::Type(_) => K::Ack(pb::Ack { count: 0 }),
        OpResult::Error(e) => K::Error(e.to_pb()),
    };
    pb::KeyResult {
        result: Some(result),
    }
}

fn build_response(id: u64, shape: Shape, results: Vec<OpResult>) -> pb::Response {
    let result = match shape {
        Shape::Multi => RespResult::Multi(pb::MultiResult {
            results: results.into_iter().map(key_result).collect(),
        }),
        Shape::Get | Shape::Ack => match results.into_iter().next() {
            Some(OpResult::Error(e)) => RespResult::Error(e.to_pb()),
            Some(OpResult::Value(v)) => RespResult::Get(pb::GetResult {
                value: v.as_ref().map(value_to_pb),
            }),
            Some(OpResult::Int(n)) => RespResult::Ack(pb::Ack { count: n }),
            Some(OpResult::Done | OpResult::Type(_)) => RespResult::Ack(pb::Ack { count: 0 }),
            None => RespResult::Error(NodeError::Unavailable("no result".into()).to_pb()),
        },
    };
    pb::Response {
        id,
        result: Some(result),
    }
}

/// Serves one native-protocol connection until the client closes it or the node stops.
/// `front`: forward requests for other workers' keys (shared port) instead of redirecting.
pub async fn serve(
    ctx: Rc<WorkerCtx>,
    mut stream: TcpStream,
    front: bool,
    permit: Option<ConnectionPermit>,
) {
    let _alive = LocalConnection::new(&ctx);
    let _ = stream.set_nodelay(true);
    let mut out = Vec::with_capacity(16 * 1024);
    if permit.is_none() {
        let resp = raw_error(
            0,
            pb::ErrorCode::TooManyConnections,
            "too many connections".into(),
        );
        frame::encode(&resp, &mut out);
        let _ = stream.write_all(&out).await;
        return;
    }
    let max_frame = ctx.shared.config.limits.max_frame_size;
    let mut inbuf = BytesMut::with_capacity(16 * 1024);
    let mut queue: VecDeque<Queued> = VecDeque::new();
    let mut shutdown = ctx.shutdown();
    // Dropped with the connection, which ends its subscriptions.
    let mut subs = ConnectionSubscriptions::new(&ctx);
    // False when the buffer may still hold complete requests (the pipeline bound stopped
    // the last round early): run those before waiting for more bytes.
    let mut need_read = true;
    loop {
        if need_read {
            // Read in large chunks: BytesMut only grows by 64 bytes when full.
            if inbuf.capacity() - inbuf.len() < 4096 {
                inbuf.reserve(16 * 1024);
            }
            // Pushes (subscriptions) go out while the connection waits for requests.
            let read = tokio::select! {
                r = stream.read_buf(&mut inbuf) => Some(r),
                push = subs.next_push() => {
                    frame::encode(&push, &mut out);
                    None
                }
                _ = shutdown.wait_for(|s| *s) => return,
            };
            match read {
                Some(Ok(0) | Err(_)) => return,
                Some(Ok(_)) => {}
                None => {
                    subs.drain_into(&mut out);
                    if stream.write_all(&out).await.is_err() {
                        return;
                    }
                    out.clear();
                    continue;
                }
            }
        }
        let mut close = false;
        let mut requests = 0;
        while requests < MAX_PIPELINE {
            let len = match frame::frame_len(&inbuf, max_frame) {
                Ok(None) => break,
                Ok(Some(len)) => len,
                Err(FrameError::TooLarge { len, max }) => {
                    queue.push_back(Queued::Ready(raw_error(
                        0,
                        pb::ErrorCode::FrameTooLarge,
                        format!("frame of {len} bytes exceeds the {max}-byte limit"),
                    )));
                    close = true;
                    break;
                }
            };
            requests += 1;
            let frame = inbuf.split_to(HEADER_LEN + len).freeze();
            let queued = match pb::Request::decode(frame.slice(HEADER_LEN..)) {
                Ok(req) => handle(&ctx, req, front, &mut subs).await,
                Err(e) => Queued::Ready(raw_error(
                    0,
                    pb::ErrorCode::BadRequest,
                    format!("undecodable request: {e}"),
                )),
            };
            match queued {
                Queued::Ready(resp) if queue.is_empty() => frame::encode(&resp, &mut out),
                q => queue.push_back(q),
            }
        }
        while let Some(q) = queue.pop_front() {
            let resp = match q {
                Queued::Ready(resp) => resp,
                Queued::Ops { id, shape, pending } => {
                    build_response(id, shape, pending.resolve().await)
                }
                Queued::Later { id, reply } => reply.await.unwrap_or_else(|_| {
                    error_response(
                        id,
                        &NodeError::Unavailable("the request was dropped".into()),
                    )
                }),
            };
            frame::encode(&resp, &mut out);
        }
        // Pushes waiting go out behind the responses (a Subscribe's answer comes before
        // its first push).
        subs.drain_into(&mut out);
        if stream.write_all(&out).await.is_err() || close {
            return;
        }
        need_read = requests < MAX_PIPELINE;
        out.clear();
        // Don't let one large request pin a large buffer for the connection's lifetime.
        if inbuf.capacity() > 1024 * 1024 && inbuf.is_empty() {
            inbuf = BytesMut::with_capacity(16 * 1024);
        }
    }
}

fn decode_put(put: pb::Put) -> Result<Op<Bytes>, NodeError> {
    let value = put
        .value
        .as_ref()
        .ok_or_else(|| NodeError::BadRequest("Put without a value".into()))?;
    let value = value_from_pb(value).map_err(|e| NodeError::BadRequest(e.to_string()))?;
    Ok(Op::Put {
        key: put.key,
        value,
    })
}

fn decode_update(update: pb::Update) -> Result<Op<Bytes>, NodeError> {
    use pb::update::Op as U;
    let key = update.key;
    match update.op {
        Some(U::Assign(a)) => Ok(Op::Assign {
            key,
            value: a.value,
            condition: match pb::update::Condition::try_from(a.condition) {
                Ok(pb::update::Condition::IfAbsent) => Condition::IfAbsent,
                Ok(pb::update::Condition::IfPresent) => Condition::IfPresent,
                Ok(pb::update::Condition::Always) => Condition::Always,
                Err(_) => {
                    return Err(NodeError::BadRequest(format!(
                        "unknown condition {}",
                        a.condition
                    )))
                }
            },
        }),
        Some(U::SetAdd(s)) => Ok(Op::SetAdd {
            key,
            members: s.members,
        }),
        Some(U::SetRemove(s)) => Ok(Op::SetRemove {
            key,
            members: s.members,
        }),
        Some(U::CounterAdd(c)) => Ok(Op::CounterAdd {
            key,
            delta: c.delta,
        }),
        None => Err(NodeError::BadRequest("Update without an operation".into())),
    }
}

async fn run_ops(
    ctx: &Rc<WorkerCtx>,
    id: u64,
    shape: Shape,
    ops: Vec<Op<Bytes>>,
    front: bool,
    ack: Ack,
) -> Queued {
    let max = ctx.shared.config.limits.max_request_items;
    if ops.len() > max {
        let e = NodeError::InvalidArgument(format!(
            "{} items exceed the {max}-item request limit",
            ops.len()
        ));
        return Queued::Ready(error_response(id, &e));
    }
    if !ack.is_default() && ops.iter().any(Op::is_write) {
        if ctx.all_local(&ops) {
            // Run now, in request order; wait for the acknowledgement in a task of its own,
            // so the requests behind it go on (one fsync covers them all).
            let (results, written) = ctx.execute_acked_here(ops);
            let ctx = ctx.clone();
            return later(id, async move {
                let results = ctx.finish_acked(results, written, ack).await;
                build_response(id, shape, results)
            });
        }
        let results = ctx.dispatch_acked(ops, !front, ack).await;
        return Queued::Ready(build_response(id, shape, results));
    }
    let pending = ctx.dispatch(ops, !front).await;
    if pending.is_ready() {
        Queued::Ready(build_response(id, shape, pending.into_ready()))
    } else {
        Queued::Ops { id, shape, pending }
    }
}

fn respond(id: u64, result: RespResult) -> Queued {
    Queued::Ready(pb::Response {
        id,
        result: Some(result),
    })
}

fn ack_response(id: u64, count: i64) -> Queued {
    respond(id, RespResult::Ack(pb::Ack { count }))
}

async fn handle(
    ctx: &Rc<WorkerCtx>,
    req: pb::Request,
    front: bool,
    subs: &mut ConnectionSubscriptions,
) -> Queued {
    let id = req.id;
    let default = ctx.default_ack();
    let ack = Ack {
        replicas: (req.ack_replicas as usize).max(default.replicas),
        durable: req.durable || default.durable,
    };
    let op = match req.op {
        Some(op) => op,
        None => {
            let e = NodeError::BadRequest("request without an operation".into());
            return Queued::Ready(error_response(id, &e));
        }
    };
    match op {
        ReqOp::Get(g) => {
            run_ops(
                ctx,
                id,
                Shape::Get,
                vec![Op::Get { key: g.key }],
                front,
                ack,
            )
            .await
        }
        ReqOp::Delete(d) => {
            run_ops(
                ctx,
                id,
                Shape::Ack,
                vec![Op::Delete { key: d.key }],
                front,
                ack,
            )
            .await
        }
        ReqOp::GetAll(g) => {
            if let Err(e) = ctx.shard.borrow().check_key(&g.key) {
                return Queued::Ready(error_response(id, &e));
            }
            let ctx = ctx.clone();
            later(id, async move {
                match ctx.get_all(g.key).await {
                    Ok(value) => pb::Response {
                        id,
                        result: Some(RespResult::Get(pb::GetResult {
                            value: value.as_ref().map(wire::convert::value_to_pb),
                        })),
                    },
                    Err(e) => error_response(id, &e),
                }
            })
        }
        ReqOp::PutAll(p) => {
            let put = pb::Put {
                key: p.key,
                value: p.value,
            };
            match decode_put(put) {
                Ok(op) => {
                    let replicas = ctx.shard.borrow().replicas(op.key()).len();
                    let ack = Ack {
                        replicas: replicas.max(1),
                        durable: ack.durable,
                    };
                    run_ops(ctx, id, Shape::Ack, vec![op], front, ack).await
                }
                Err(e) => Queued::Ready(error_response(id, &e)),
            }
        }
        ReqOp::GetDelta(d) => {
            let results = ctx
                .dispatch(vec![Op::Get { key: d.key }], !front)
                .await
                .resolve()
                .await;
            match results.into_iter().next() {
                Some(OpResult::Value(value)) => {
                    let encoded = value.as_ref().map(wire::convert::value_to_pb);
                    let version = encoded.as_ref().map_or(0, value_version);
                    let changed = version != d.version;
                    respond(
                        id,
                        RespResult::Delta(pb::GetDeltaResult {
                            changed,
                            value: if changed { encoded } else { None },
                            version,
                        }),
                    )
                }
                Some(OpResult::Error(e)) => Queued::Ready(error_response(id, &e)),
                _ => Queued::Ready(error_response(
                    id,
                    &NodeError::Unavailable("no result".into()),
                )),
            }
        }
        ReqOp::Subscribe(s) => match subs.subscribe(s) {
            Ok(n) => ack_response(id, n as i64),
            Err(e) => Queued::Ready(error_response(id, &e)),
        },
        ReqOp::Unsubscribe(u) => ack_response(id, subs.unsubscribe(&u) as i64),
        ReqOp::Put(p) => match decode_put(p) {
            Ok(op) => run_ops(ctx, id, Shape::Ack, vec![op], front, ack).await,
            Err(e) => Queued::Ready(error_response(id, &e)),
        },
        ReqOp::Update(u) => match decode_update(u) {
            Ok(op) => run_ops(ctx, id, Shape::Ack, vec![op], front, ack).await,
            Err(e) => Queued::Ready(error_response(id, &e)),
        },
        ReqOp::GetMany(g) => {
            let ops = g.keys.into_iter().map(|key| Op::Get { key }).collect();
            run_ops(ctx, id, Shape::Multi, ops, front, ack).await
        }
        ReqOp::DeleteMany(d) => {
            let ops = d.keys.into_iter().map(|key| Op::Delete { key }).collect();
            run_ops(ctx, id, Shape::Multi, ops, front, ack).await
        }
        ReqOp::PutMany(p) => {
            // A malformed item fails the whole request: nothing is written.
            let ops: Result<Vec<_>, _> = p.puts.into_iter().map(decode_put).collect();
            match ops {
                Ok(ops) => run_ops(ctx, id, Shape::Multi, ops, front, ack).await,
                Err(e) => Queued::Ready(error_response(id, &e)),
            }
        }
        ReqOp::SetReplication(r) => match set_replication(ctx, r).await {
            Ok(()) => ack_response(id, 1),
            Err(e) => Queued::Ready(error_response(id, &e)),
        },
        ReqOp::Topology(_) => respond(id, RespResult::Topology(topology(ctx))),
        ReqOp::Status(_) => respond(id, RespResult::Status(status(ctx).await)),
        ReqOp::Ping(_) => ack_response(id, 0),
        ReqOp::Locate(l) => {
            let shard = ctx.shard.borrow();
            let keys = l
                .keys
                .iter()
                .map(|k| pb::locations::KeyLocation {
                    replicas: shard.replica_addrs(k),
                })
                .collect();
            respond(id, RespResult::Locations(pb::Locations { keys }))
        }
        ReqOp::Holds(h) => {
            let shard = ctx.shard.borrow();
            let results = h
                .keys
                .iter()
                .map(|k| pb::KeyResult {
                    result: Some(pb::key_result::Result::Ack(pb::Ack {
                        count: i64::from(shard.stores(k)),
                    })),
                })
                .collect();
            respond(id, RespResult::Multi(pb::MultiResult { results }))
        }
        ReqOp::Replicate(r) => {
            let batch = crate::worker::decode_entries(r.entries);
            let n = batch.len() as i64;
            let failed = {
                let mut shard = ctx.shard.borrow_mut();
                shard.merge_gossip(batch);
                shard.take_disk_error()
            };
            match failed {
                // The sender keeps the batch and retries.
                Some(e) => Queued::Ready(error_response(id, &e)),
                None if r.durable => {
                    let ctx = ctx.clone();
                    later(id, async move {
                        match crate::durability::make_durable(&ctx.shard, &ctx.durability).await {
                            Ok(()) => pb::Response {
                                id,
                                result: Some(RespResult::Ack(pb::Ack { count: n })),
                            },
                            Err(e) => error_response(id, &e),
                        }
                    })
                }
                None => ack_response(id, n),
            }
        }
        ReqOp::Forward(f) if f.ack_replicas > 1 || f.durable => {
            let mut ops = Vec::with_capacity(f.ops.len());
            let mut bad = Vec::new();
            for (i, op) in f.ops.into_iter().enumerate() {
                match forward::op_from_pb(op) {
                    Ok(op) => ops.push(op),
                    Err(e) => bad.push((i, e)),
                }
            }
            let ack = Ack {
                replicas: f.ack_replicas as usize,
                durable: f.durable,
            };
            let (results, written) = ctx.execute_acked_here(ops);
            let ctx = ctx.clone();
            later(id, async move {
                let mut results = ctx.finish_acked(results, written, ack).await;
                for (i, e) in bad {
                    results.insert(i.min(results.len()), OpResult::Error(e));
                }
                pb::Response {
                    id,
                    result: Some(RespResult::Forwarded(pb::ForwardResults {
                        results: results.iter().map(forward::result_to_pb).collect(),
                    })),
                }
            })
        }
        ReqOp::Forward(f) => {
            let mut results = Vec::with_capacity(f.ops.len());
            let mut shard = ctx.shard.borrow_mut();
            for op in f.ops {
                let result = match forward::op_from_pb(op) {
                    // Sent under another view, a write is passed on to the current owners.
                    Ok(op) => shard.execute_forwarded(op),
                    Err(e) => OpResult::Error(e),
                };
                results.push(forward::result_to_pb(&result));
            }
            respond(id, RespResult::Forwarded(pb::ForwardResults { results }))
        }
        ReqOp::AntiEntropy(d) => {
            let shard = ctx.shard.borrow();
            let peer = Replica {
                node: placement::node_key(&d.sender_node),
                worker: d.sender_worker,
            };
            let differing = shard.differing(peer, &d.buckets);
            let entries = crate::worker::encode_entries(&shard.bucket_entries(peer, &differing));
            respond(
                id,
                RespResult::Repair(pb::AntiEntropyRepair { differing, entries }),
            )
        }
        ReqOp::Fetch(f) => {
            let mut shard = ctx.shard.borrow_mut();
            let found: crate::shard::GossipBatch = f
                .keys
                .into_iter()
                .filter_map(|k| {
                    let record = shard.record_of(&k)?;
                    Some((k, record))
                })
                .collect();
            respond(
                id,
                RespResult::Repair(pb::AntiEntropyRepair {
                    differing: Vec::new(),
                    entries: crate::worker::encode_entries(&found),
                }),
            )
        }
        ReqOp::SyncCluster(s) => match s.state {
            Some(state) => match ctx.shared.agent.sync(state).await {
                Some(mine) => respond(id, RespResult::Cluster(mine)),
                None => Queued::Ready(error_response(id, &NodeError::ShuttingDown)),
            },
            None => {
                let e = NodeError::BadRequest("SyncCluster without a state".into());
                Queued::Ready(error_response(id, &e))
            }
        },
        ReqOp::Leave(_) => {
            crate::server::leave(&ctx.shared).await;
            // Stop once this answer is out.
            let shared = ctx.shared.clone();
            tokio::task::spawn_local(async move {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                let _ = shared.stop.send(true);
            });
            ack_response(id, 1)
        }
    }
}

/// Validates a replication change and hands it to the cluster agent, which gossips it to
/// every node.
async fn set_replication(ctx: &WorkerCtx, r: pb::SetReplication) -> Result<(), NodeError> {
    ctx.shard.borrow().check_key(&r.key)?;
    let (nodes, disk_nodes, max_workers, default_disk) = {
        let shard = ctx.shard.borrow();
        let view = &shard.view().view;
        let max_workers = view
            .nodes()
            .map(|(_, n)| n.workers.len())
            .max()
            .unwrap_or(0);
        (
            view.tier_size(placement::Tier::Memory),
            view.tier_size(placement::Tier::Disk),
            max_workers,
            shard.view().default.disk,
        )
    };
    let disk_global = r.disk_global.unwrap_or(default_disk.global);
    if r.global > 0 && r.local == 0 {
        return Err(NodeError::InvalidArgument(
            "local replication must be at least 1".into(),
        ));
    }
    if r.global == 0 && (disk_global == 0 || disk_nodes == 0) {
        return Err(NodeError::InvalidArgument(
            "a key needs a replica: global replication 0 (out of memory) needs disk \
             replication of at least 1 and a disk-tier node"
                .into(),
        ));
    }
    if let Some(d) = r.disk_global {
        if d as usize > disk_nodes {
            return Err(NodeError::InvalidArgument(format!(
                "disk replication {d} exceeds the {disk_nodes} node(s) of the disk tier"
            )));
        }
    }
    if r.global as usize > nodes {
        return Err(NodeError::InvalidArgument(format!(
            "global replication {} exceeds the {nodes} node(s) of the memory tier",
            r.global
        )));
    }
    if r.local as usize > max_workers {
        return Err(NodeError::InvalidArgument(format!(
            "local replication {} exceeds the node's {max_workers} workers",
            r.local
        )));
    }
    let vector = placement::ReplicationVector {
        memory: placement::Replication {
            global: r.global,
            local: r.local.max(1),
        },
        disk: placement::Replication {
            global: disk_global,
            local: r.disk_local.unwrap_or(default_disk.local).max(1),
        },
    };
    ctx.shared.agent.set_replication(r.key, vector).await?;
    // Answer once this worker routes by the new vector (the others switch at the same time).
    let target = ctx.shared.snapshots.borrow().view.version;
    for _ in 0..400 {
        if ctx.shard.borrow().view().version >= target {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    Ok(())
}

/// Most explicit replication vectors returned in a topology.
const TOPOLOGY_VECTORS: usize = 10_000;

/// The node's layout, for clients computing placement.
pub fn topology(ctx: &WorkerCtx) -> pb::Topology {
    let shared = &ctx.shared;
    let snapshot = shared.snapshots.borrow().clone();
    let view = &snapshot.view;
    pb::Topology {
        protocol_version: wire::PROTOCOL_VERSION,
        node_id: shared.config.node_id.clone(),
        workers: shared.published.workers.clone(),
        vnodes: shared.config.vnodes,
        default_local_replication: view.default.memory.local,
        default_global_replication: view.default.memory.global,
        replication: view.topology_vectors(TOPOLOGY_VECTORS),
        members: snapshot.members.clone(),
        default_disk_replication: view.default.disk.global,
    }
}

/// Node statistics from every worker, and the cluster's members and ring ownership.
pub async fn status(ctx: &WorkerCtx) -> pb::Status {
    let shared = &ctx.shared;
    let workers = shared.mesh.stats().await;
    let snapshot = shared.snapshots.borrow().clone();
    let ownership = snapshot
        .view
        .view
        .ownership(placement::Tier::Memory)
        .into_iter()
        .filter_map(|(key, share)| {
            let node = snapshot.view.view.node(key)?;
            Some(pb::status::Ownership {
                node_id: node.id.clone(),
                share,
            })
        })
        .collect();
    pb::Status {
        node_id: shared.config.node_id.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        uptime_seconds: shared.started.elapsed().as_secs(),
        workers: workers
            .iter()
            .map(|w| pb::WorkerStatus {
                worker: w.worker,
                address: shared
                    .published
                    .workers
                    .get(w.worker as usize)
                    .cloned()
                    .unwrap_or_default(),
                keys: w.shard.live_keys,
                memory_bytes: w.shard.bytes,
                requests: w.shard.requests,
                connections: w.connections,
                storage_errors: w.shard.storage_errors,
                subscriptions: w.subscriptions,
            })
            .collect(),
        memory_budget_bytes: shared.config.limits.memory_budget_bytes(),
        resp_address: shared.published.resp.clone(),
        front_address: shared.published.front.clone(),
        members: snapshot.members.clone(),
        ownership,
    }
}
