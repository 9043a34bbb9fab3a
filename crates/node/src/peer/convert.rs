//! The peer plane's messages on the wire: [`PeerMsg`] ⇄ `PeerRequest`, a worker's answer ⇄
//! `PeerResponse`. What arrives is untrusted: anything malformed decodes to an error (the
//! request is answered BAD_REQUEST, a malformed answer counts as a refusal), never a panic.

use bytes::Bytes;
use lattice::Timestamp;
use wire::convert::{timestamp_from_pb, timestamp_to_pb};
use wire::pb::{self, peer_request::Msg as Req, peer_response::Result as Resp};

use crate::ack::Ack;
use crate::codec::{self, decode_entries, encode_entries};
use crate::core::{PeerFailure, PeerMsg, PeerReply, PeerResult, RepairCursor};
use crate::error::NodeError;

/// Most tombstone entries one request may carry.
const MAX_TOMBSTONES: usize = 65_536;

fn tombstones_to_pb(entries: Vec<(Bytes, Timestamp)>) -> Vec<pb::TombstoneEntry> {
    entries
        .into_iter()
        .map(|(key, epoch)| pb::TombstoneEntry {
            key,
            epoch: Some(timestamp_to_pb(epoch)),
        })
        .collect()
}

fn tombstones_from_pb(
    entries: Vec<pb::TombstoneEntry>,
) -> Result<Vec<(Bytes, Timestamp)>, NodeError> {
    if entries.len() > MAX_TOMBSTONES {
        return Err(NodeError::BadRequest(format!(
            "{} tombstones exceed the limit of {MAX_TOMBSTONES}",
            entries.len()
        )));
    }
    entries
        .into_iter()
        .map(|e| {
            let epoch = e
                .epoch
                .as_ref()
                .map(timestamp_from_pb)
                .ok_or_else(|| NodeError::BadRequest("a tombstone without its epoch".into()))?;
            Ok((e.key, epoch))
        })
        .collect()
}

fn cursor_to_pb(c: RepairCursor) -> pb::RepairCursor {
    pb::RepairCursor {
        bucket: c.bucket,
        skip: c.skip,
    }
}

fn cursor_from_pb(c: &pb::RepairCursor) -> RepairCursor {
    RepairCursor {
        bucket: c.bucket,
        skip: c.skip,
    }
}

/// A request as a `PeerRequest` frame with id `id`.
pub fn request_to_pb(id: u64, msg: PeerMsg) -> pb::PeerRequest {
    let msg = match msg {
        PeerMsg::Replicate { entries, durable } => Req::Replicate(pb::Replicate {
            entries: encode_entries(&entries),
            sender: String::new(),
            durable,
        }),
        PeerMsg::Forward { ops, ack } => Req::Forward(pb::Forward {
            ops: ops.iter().map(codec::op_to_pb).collect(),
            ack_replicas: ack.replicas.min(u32::MAX as usize) as u32,
            durable: ack.durable,
            quiet: ack.quiet,
        }),
        PeerMsg::Digest { first, digests } => Req::Digest(pb::AntiEntropyDigest {
            first,
            buckets: digests,
            ..Default::default()
        }),
        PeerMsg::RepairMore { buckets, cursor } => Req::RepairMore(pb::RepairMore {
            buckets,
            cursor: Some(cursor_to_pb(cursor)),
        }),
        PeerMsg::Fetch { keys } => Req::Fetch(pb::Fetch { keys }),
        PeerMsg::CheckTombstones { entries } => Req::CheckTombstones(pb::TombstoneCheck {
            entries: tombstones_to_pb(entries),
        }),
        PeerMsg::Reclaim { entries, released } => Req::Reclaim(pb::TombstoneReclaim {
            entries: tombstones_to_pb(entries),
            released: tombstones_to_pb(released),
        }),
    };
    pb::PeerRequest { id, msg: Some(msg) }
}

/// What a decoded `PeerRequest` asks.
#[derive(Debug)]
pub enum Incoming {
    /// A request for a worker's core.
    Worker(PeerMsg),
    /// Cluster metadata for the agent.
    SyncCluster(pb::ClusterState),
}

/// Decodes a `PeerRequest` for a worker: its id and message. A cluster-metadata exchange
/// (for the agent, not a worker) and anything malformed are errors.
pub fn request_from_pb(req: pb::PeerRequest) -> Result<(u64, PeerMsg), NodeError> {
    let id = req.id;
    match incoming_from_pb(req)? {
        (_, Incoming::Worker(msg)) => Ok((id, msg)),
        (_, Incoming::SyncCluster(_)) => Err(NodeError::BadRequest(
            "a cluster exchange sent to a worker".into(),
        )),
    }
}

/// Decodes a `PeerRequest` of either kind.
pub fn incoming_from_pb(req: pb::PeerRequest) -> Result<(u64, Incoming), NodeError> {
    let bad = |what: &str| NodeError::BadRequest(format!("peer request: {what}"));
    let msg = match req.msg.ok_or_else(|| bad("no message"))? {
        Req::Replicate(r) => PeerMsg::Replicate {
            entries: decode_entries(r.entries),
            durable: r.durable,
        },
        Req::Forward(f) => {
            let ops = f
                .ops
                .into_iter()
                .map(codec::op_from_pb)
                .collect::<Result<Vec<_>, _>>()?;
            PeerMsg::Forward {
                ops,
                ack: Ack {
                    replicas: f.ack_replicas as usize,
                    durable: f.durable,
                    quiet: f.quiet,
                },
            }
        }
        Req::Digest(d) => PeerMsg::Digest {
            first: d.first,
            digests: d.buckets,
        },
        Req::RepairMore(m) => PeerMsg::RepairMore {
            buckets: m.buckets,
            cursor: m
                .cursor
                .as_ref()
                .map(cursor_from_pb)
                .ok_or_else(|| bad("repair-more without a cursor"))?,
        },
        Req::Fetch(f) => PeerMsg::Fetch { keys: f.keys },
        Req::CheckTombstones(c) => PeerMsg::CheckTombstones {
            entries: tombstones_from_pb(c.entries)?,
        },
        Req::Reclaim(r) => PeerMsg::Reclaim {
            entries: tombstones_from_pb(r.entries)?,
            released: tombstones_from_pb(r.released)?,
        },
        Req::SyncCluster(s) => {
            let state = s
                .state
                .ok_or_else(|| bad("a cluster exchange without a state"))?;
            return Ok((req.id, Incoming::SyncCluster(state)));
        }
        // Pub/sub: answered by the peer connection itself (`crate::pubsub::relay`).
        Req::Publish(_) => return Err(bad("a pub/sub relay outside a worker connection")),
        // Keys: answered by the peer connection itself (`crate::front::resp::listing`).
        Req::KeyScan(_) => return Err(bad("a key listing outside a worker connection")),
    };
    Ok((req.id, Incoming::Worker(msg)))
}

/// A worker's answer as a `PeerResponse` frame with id `id`.
pub fn response_to_pb(id: u64, result: Result<PeerReply, NodeError>) -> pb::PeerResponse {
    let result = match result {
        Err(e) => Resp::Error(e.to_pb()),
        Ok(PeerReply::Ack(n)) => Resp::Ack(pb::Ack {
            count: n.min(i64::MAX as u64) as i64,
        }),
        Ok(PeerReply::Results(results)) => Resp::Forwarded(pb::ForwardResults {
            results: results.iter().map(codec::result_to_pb).collect(),
        }),
        Ok(PeerReply::Repair {
            differing,
            entries,
            next,
        }) => Resp::Repair(pb::AntiEntropyRepair {
            differing,
            entries: encode_entries(&entries),
            next: next.map(cursor_to_pb),
        }),
        Ok(PeerReply::Records(batch)) => Resp::Records(pb::Records {
            entries: encode_entries(&batch),
        }),
        Ok(PeerReply::Covered(covered)) => Resp::Covered(pb::Covered { covered }),
    };
    pb::PeerResponse {
        id,
        result: Some(result),
    }
}

/// Decodes a `PeerResponse`: its id and the answer (an error answer, or a malformed one,
/// is a refusal).
pub fn response_from_pb(resp: pb::PeerResponse) -> (u64, PeerResult) {
    let refused = |what: &str| {
        Err(PeerFailure::Refused(NodeError::Unavailable(format!(
            "a malformed answer from a peer: {what}"
        ))))
    };
    let result = match resp.result {
        None => refused("empty"),
        Some(Resp::Error(e)) => Err(PeerFailure::Refused(codec::error_from_pb(e))),
        Some(Resp::Ack(a)) => Ok(PeerReply::Ack(a.count.max(0) as u64)),
        Some(Resp::Forwarded(f)) => Ok(PeerReply::Results(
            f.results.into_iter().map(codec::result_from_pb).collect(),
        )),
        Some(Resp::Repair(r)) => Ok(PeerReply::Repair {
            differing: r.differing,
            entries: decode_entries(r.entries),
            next: r.next.as_ref().map(cursor_from_pb),
        }),
        Some(Resp::Records(r)) => Ok(PeerReply::Records(decode_entries(r.entries))),
        Some(Resp::Covered(c)) => Ok(PeerReply::Covered(c.covered)),
        Some(Resp::Cluster(_)) => refused("cluster state where a worker's answer was expected"),
        // Keys: read by the listing's caller (`crate::front::resp::listing`), not a worker.
        Some(Resp::KeyPage(_)) => refused("a key page where a worker's answer was expected"),
    };
    (resp.id, result)
}
