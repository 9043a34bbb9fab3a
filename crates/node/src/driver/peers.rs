//! A worker's requests to other workers: through the mesh to this node's, over peer
//! connections (opened on demand and kept) to other nodes'.

use std::rc::Rc;
use std::time::Duration;

use placement::Replica;
use tokio::task::spawn_local;
use wire::pb;

use super::worker::{Worker, WorkerMsg};
use crate::core::{PeerFailure, PeerMsg, ReqId};
use crate::peer::convert::{request_to_pb, response_from_pb};
use crate::peer::transport::{PeerConn, PeerError, PEER_VERSION};

/// Time allowed to open a connection to another node's peer port.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Most connections to other nodes' workers a worker keeps.
const MAX_PEER_CONNECTIONS: usize = 4096;

impl Worker {
    /// Sends a request to worker `to`: through the mesh if it is on this node, else over
    /// its node's peer port.
    pub(super) fn send(
        self: &Rc<Self>,
        req: ReqId,
        to: Replica,
        peer: Option<String>,
        msg: PeerMsg,
    ) {
        if to.node == self.me().node {
            let m = WorkerMsg::Peer {
                from: self.me(),
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
}
