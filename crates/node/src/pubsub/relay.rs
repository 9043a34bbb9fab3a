//! Pub/sub between nodes: a message published on one node is sent, as a `PubSubRelay`
//! peer request, to worker 0 of every other live member (alive or suspect, with a peer
//! address, not a routing node), which hands it to its own [`Hub`](super::Hub). A relayed
//! message is never relayed again.
//!
//! Each node keeps one peer connection per other node for relays, shared by its workers
//! and opened at the first message; messages published while it opens wait (at most
//! [`MAX_PENDING`] per peer). Requests on a connection are sent in the order they were
//! queued, so messages from one publishing connection reach each subscriber in order.
//! At most once: a relay that cannot be queued (a full queue, more than
//! [`MAX_IN_FLIGHT`] unanswered), or whose connection fails, is dropped and counted,
//! never retried. Relays are authenticated like every peer connection (the hello's
//! cluster-secret proof, TLS if configured) and bounded by the peer frame limit.

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::task::spawn_local;
use wire::pb;

use super::Hub;
use crate::driver::worker::Worker;
use crate::peer::transport::PeerConn;

/// Most relays sent and not yet answered, per node.
pub(crate) const MAX_IN_FLIGHT: usize = 4096;
/// Most relays waiting for a peer connection to open, per peer.
pub(crate) const MAX_PENDING: usize = 1024;
/// Time a relay's answer may take before its connection is given up.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// A peer's relay connection.
pub(crate) enum PeerSlot {
    /// Being opened: relays queued meanwhile.
    Opening(Vec<pb::PeerRequest>),
    /// Open.
    Open(PeerConn),
}

/// The peer addresses of the other live members that can have RESP subscribers.
fn other_members(w: &Worker) -> Vec<String> {
    let me = &w.shared.config.node_id;
    let snapshot = w.shared.snapshots.borrow().clone();
    snapshot
        .members
        .iter()
        .filter(|m| &m.node_id != me && !m.peer.is_empty() && m.role != "routing")
        .filter(|m| {
            m.status == pb::NodeStatus::Alive as i32 || m.status == pb::NodeStatus::Suspect as i32
        })
        .map(|m| m.peer.clone())
        .collect()
}

/// Sends a message published here to every other live member (not waiting for them).
pub(crate) fn publish(w: &Rc<Worker>, channel: &Bytes, data: &Bytes, sharded: bool) {
    let peers = other_members(w);
    if peers.is_empty() {
        return;
    }
    let hub = &w.shared.pubsub;
    let req = pb::PeerRequest {
        id: 0,
        msg: Some(pb::peer_request::Msg::Publish(pb::PubSubRelay {
            channel: channel.clone(),
            message: data.clone(),
            sharded,
        })),
    };
    for addr in peers {
        let mut slots = hub.peers.lock().unwrap_or_else(|e| e.into_inner());
        match slots.get_mut(&addr) {
            Some(PeerSlot::Open(conn)) if !conn.is_broken() => {
                let conn = conn.clone();
                drop(slots);
                send(hub_of(w), &conn, req.clone());
            }
            Some(PeerSlot::Opening(waiting)) => {
                if waiting.len() < MAX_PENDING {
                    waiting.push(req.clone());
                } else {
                    hub.relays_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => {
                slots.insert(addr.clone(), PeerSlot::Opening(vec![req.clone()]));
                drop(slots);
                spawn_local(open(w.clone(), addr));
            }
        }
    }
}

fn hub_of(w: &Worker) -> Arc<Hub> {
    w.shared.pubsub.clone()
}

/// Queues one relay on `conn` and waits for its answer in a task of its own.
fn send(hub: Arc<Hub>, conn: &PeerConn, mut req: pb::PeerRequest) {
    if hub.relays_in_flight.load(Ordering::Acquire) >= MAX_IN_FLIGHT {
        hub.relays_dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    req.id = fastrand::u64(1..);
    let rx = match conn.try_call(req) {
        Ok(rx) => rx,
        Err(_) => {
            hub.relays_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    hub.relays_in_flight.fetch_add(1, Ordering::AcqRel);
    let conn = conn.clone();
    spawn_local(async move {
        let answered = tokio::time::timeout(ANSWER_TIMEOUT, rx).await;
        hub.relays_in_flight.fetch_sub(1, Ordering::AcqRel);
        match answered {
            Ok(Ok(Ok(_))) => {}
            Ok(_) => {
                hub.relays_dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                // A silent peer (partitioned): the next relay opens a new connection.
                hub.relays_dropped.fetch_add(1, Ordering::Relaxed);
                conn.abandon();
            }
        }
    });
}

/// Opens the relay connection to `addr`, then sends what waited for it.
async fn open(w: Rc<Worker>, addr: String) {
    let opened = w.open_peer(&addr, 0).await;
    let hub = hub_of(&w);
    let waiting = {
        let mut slots = hub.peers.lock().unwrap_or_else(|e| e.into_inner());
        let waiting = match slots.remove(&addr) {
            Some(PeerSlot::Opening(waiting)) => waiting,
            _ => Vec::new(),
        };
        if let Ok(conn) = &opened {
            slots.insert(addr.clone(), PeerSlot::Open(conn.clone()));
        }
        waiting
    };
    match opened {
        Ok(conn) => {
            for req in waiting {
                send(hub.clone(), &conn, req);
            }
        }
        Err(e) => {
            tracing::debug!(peer = %addr, error = %e, "pub/sub relay connection failed");
            hub.relays_dropped
                .fetch_add(waiting.len() as u64, Ordering::Relaxed);
        }
    }
}

/// Answers a relay from another node: delivers it to this node's subscribers.
pub(crate) fn receive(w: &Worker, id: u64, relay: pb::PubSubRelay) -> pb::PeerResponse {
    let n = w
        .shared
        .pubsub
        .publish(&relay.channel, &relay.message, relay.sharded);
    pb::PeerResponse {
        id,
        result: Some(pb::peer_response::Result::Ack(pb::Ack {
            count: n.min(i64::MAX as usize) as i64,
        })),
    }
}
