//! Topology, status, locations, holds and operator requests of the native protocol.

use std::rc::Rc;

use wire::pb::{self, request::Op as ReqOp, response::Result as RespResult};

use super::{encode, error, error_response, respond};
use crate::driver::worker::{all_stats, Worker, WorkerStats};
use crate::error::NodeError;
use crate::front::pipeline::Replies;
use crate::stats::Window;

/// Most explicit replication vectors returned in a topology.
const TOPOLOGY_VECTORS: usize = 10_000;

/// Most bytes of hot keys in one status reply, shared evenly by the workers: a node's
/// defaults (32 hot keys a worker) stay far below it; the largest settings (1,024 hot keys
/// of 256 bytes on each of 1,024 workers) would not.
const STATUS_HOT_KEY_BYTES: usize = 1 << 20;

/// An informational or operator request.
pub(super) fn handle(w: &Rc<Worker>, id: u64, op: ReqOp, replies: &mut Replies) {
    match op {
        ReqOp::Topology(_) => respond(replies, id, RespResult::Topology(topology(w))),
        ReqOp::Ping(_) => respond(replies, id, RespResult::Ack(pb::Ack { count: 0 })),
        ReqOp::Status(_) => {
            let w = w.clone();
            replies.later(async move {
                let status = status(&w).await;
                let mut out = Vec::new();
                encode(
                    &pb::Response {
                        id,
                        result: Some(RespResult::Status(status)),
                    },
                    &mut out,
                );
                out
            });
        }
        ReqOp::Locate(l) => {
            let core = w.core();
            let keys = l
                .keys
                .iter()
                .map(|k| pb::locations::KeyLocation {
                    replicas: core.shard().replica_addrs(k),
                })
                .collect();
            respond(replies, id, RespResult::Locations(pb::Locations { keys }));
        }
        ReqOp::Holds(h) => {
            let core = w.core();
            let results = h
                .keys
                .iter()
                .map(|k| pb::KeyResult {
                    result: Some(pb::key_result::Result::Ack(pb::Ack {
                        count: i64::from(core.shard().stores(k)),
                    })),
                })
                .collect();
            respond(replies, id, RespResult::Multi(pb::MultiResult { results }));
        }
        ReqOp::Admin(a) => admin(w, id, a, replies),
        _ => error(
            replies,
            id,
            &NodeError::BadRequest("not an informational request".into()),
        ),
    }
}

/// An operator request: answered by a task of its own (it waits on the agent, or on the
/// whole node leaving).
fn admin(w: &Rc<Worker>, id: u64, a: pb::Admin, replies: &mut Replies) {
    let w = w.clone();
    replies.later(async move {
        let result = match a.op {
            Some(pb::admin::Op::SetReplication(r)) => set_replication(&w, r).await.map(|()| 1),
            Some(pb::admin::Op::Forget(f)) => w.shared.agent.forget(f.node_id).await.map(|()| 1),
            Some(pb::admin::Op::PolicyReport(r)) => policy_report(&w, r).map(|()| 1),
            Some(pb::admin::Op::Leave(l)) => match crate::leave::leave(&w.shared, l.force).await {
                Ok(()) => {
                    // Stop once this answer is out.
                    let shared = w.shared.clone();
                    tokio::task::spawn_local(async move {
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                        let _ = shared.stop.send(true);
                    });
                    Ok(1)
                }
                Err(e) => Err(e),
            },
            None => Err(NodeError::BadRequest(
                "an admin request without an operation".into(),
            )),
        };
        let resp = match result {
            Ok(n) => pb::Response {
                id,
                result: Some(RespResult::Ack(pb::Ack { count: n })),
            },
            Err(e) => error_response(id, &e),
        };
        let mut out = Vec::new();
        encode(&resp, &mut out);
        out
    });
}

/// Most actions a policy report may carry.
const MAX_POLICY_ACTIONS: usize = 64;
/// Longest key in a policy report's action, in bytes.
const MAX_POLICY_KEY: usize = 256;
/// Longest text (kind, tier, node id, reason, error) in a policy report's action, in bytes.
const MAX_POLICY_TEXT: usize = 512;

/// Keeps the monitor's report (bounded: it comes from the network) for `Status.policy`.
fn policy_report(w: &Worker, r: pb::PolicyReport) -> Result<(), NodeError> {
    if r.actions.len() > MAX_POLICY_ACTIONS {
        return Err(NodeError::InvalidArgument(format!(
            "a policy report carries at most {MAX_POLICY_ACTIONS} actions, not {}",
            r.actions.len()
        )));
    }
    for a in &r.actions {
        let texts = [&a.kind, &a.tier, &a.node_id, &a.reason, &a.error];
        if a.key.len() > MAX_POLICY_KEY || texts.iter().any(|t| t.len() > MAX_POLICY_TEXT) {
            return Err(NodeError::InvalidArgument(format!(
                "a policy report's action has a key over {MAX_POLICY_KEY} bytes or a text \
                 over {MAX_POLICY_TEXT} bytes"
            )));
        }
    }
    w.shared.policy.send_replace(Some(std::sync::Arc::new(r)));
    Ok(())
}

/// Validates a replication change against the cluster and hands it to the agent, which
/// gossips it to every node; answers once this worker routes by it.
async fn set_replication(w: &Rc<Worker>, r: pb::SetReplication) -> Result<(), NodeError> {
    w.core().shard().check_key(&r.key)?;
    let vector = if r.reset {
        None
    } else {
        let core = w.core();
        let view = core.shard().view();
        Some(crate::view::requested_vector(view, &r)?)
    };
    w.shared
        .agent
        .set_replication(r.key, vector, r.by_policy)
        .await?;
    // The agent published the new view before answering: switch to it now (the other
    // workers switch as their view tasks run).
    let view = w.shared.snapshots.borrow().view.clone();
    w.with_core(|c| c.set_view(view));
    Ok(())
}

/// The node's layout, for clients computing placement.
pub(crate) fn topology(w: &Worker) -> pb::Topology {
    let shared = &w.shared;
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
async fn status(w: &Worker) -> pb::Status {
    let shared = &w.shared;
    let workers = all_stats(shared).await;
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
    let policy = shared.policy.borrow().as_deref().cloned();
    let disk_capacity_bytes = disk_capacity(&shared.config, &workers);
    pb::Status {
        policy,
        disk_capacity_bytes,
        node_id: shared.config.node_id.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        uptime_seconds: shared.started.elapsed().as_secs(),
        workers: workers
            .iter()
            .map(|s| pb::WorkerStatus {
                worker: s.worker,
                address: shared
                    .published
                    .workers
                    .get(s.worker as usize)
                    .cloned()
                    .unwrap_or_default(),
                keys: s.core.shard.live_keys,
                memory_bytes: s.core.shard.bytes,
                requests: s.core.shard.requests,
                connections: s.connections,
                storage_errors: s.core.shard.storage_errors,
                subscriptions: s.subscriptions,
                stats: Some(stats_to_pb(
                    &s.window,
                    shared.config.stats.period_ms,
                    STATUS_HOT_KEY_BYTES / workers.len().max(1),
                )),
                evictions: s.core.shard.evictions,
                disk_fetches: s.core.shard.disk_fetches,
                backing: s.backing.clone(),
            })
            .collect(),
        memory_budget_bytes: shared.config.limits.memory_budget_bytes(),
        resp_address: shared.published.resp.clone(),
        front_address: shared.published.front.clone(),
        members: snapshot.members.clone(),
        ownership,
        tier: shared.config.tier.name().to_string(),
    }
}

/// What a disk-tier node's workers could store (`Status.disk_capacity_bytes`): the bytes
/// they store now plus what the data directory's file system has free for this process
/// beyond the reserve. 0 on a memory node, or when the file system cannot be read (the
/// monitor then treats the capacity as unknown).
fn disk_capacity(config: &crate::config::NodeConfig, workers: &[WorkerStats]) -> u64 {
    let (crate::config::NodeTier::Disk, Some(dir)) = (config.tier, &config.data_dir) else {
        return 0;
    };
    let free = match store::disk::free_bytes(dir) {
        Ok(free) => free,
        Err(e) => {
            tracing::debug!(error = %e, dir = %dir.display(), "statvfs of the data directory");
            return 0;
        }
    };
    let stored: u64 = workers.iter().filter_map(|w| w.window.disk_bytes).sum();
    stored.saturating_add(free.saturating_sub(config.disk.reserve_bytes))
}

/// A worker's window on the wire, with at most `hot_key_bytes` bytes of hot keys (the most
/// accessed first).
fn stats_to_pb(w: &Window, period_ms: u64, hot_key_bytes: usize) -> pb::WorkerStats {
    let mut room = hot_key_bytes;
    let hot_keys = w
        .hot_keys
        .iter()
        .take_while(|h| match room.checked_sub(h.key.len()) {
            Some(left) => {
                room = left;
                true
            }
            None => false,
        })
        .map(|h| pb::worker_stats::HotKey {
            key: h.key.clone(),
            accesses: h.accesses,
        })
        .collect();
    let l = &w.latency;
    pb::WorkerStats {
        window_seq: w.seq,
        window_ms: w.window_ms,
        period_ms,
        accesses: w.accesses,
        accessed_keys: w.accessed_keys,
        reused_keys: Some(w.reused_keys),
        access_sum_squares: w.access_sum_squares,
        hot_keys,
        occupancy: w.occupancy,
        latency_buckets: l.trimmed().to_vec(),
        latency_count: l.count(),
        latency_sum_ns: l.sum_ns,
        latency_max_ns: l.max_ns,
        latency_p50_ns: l.quantile_ns(0.5),
        latency_p99_ns: l.quantile_ns(0.99),
        latency_p999_ns: l.quantile_ns(0.999),
        memory_bytes: w.memory_bytes,
        disk_bytes: w.disk_bytes.unwrap_or(0),
    }
}
