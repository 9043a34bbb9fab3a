//! The agent's I/O: push-pull exchanges with members over the peer plane, asking a seed for
//! the members (through its front port, the address users know), and answering other
//! agents' exchanges on connections the peer listener hands over.

use std::time::Duration;

use tls::{Stream, TlsConnector};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use wire::pb;

use super::AgentMsg;
use crate::peer::convert::{incoming_from_pb, Incoming};
use crate::peer::transport::{read_frame, write_frame, PeerConn, MAX_PEER_FRAME, PEER_VERSION};

/// Time allowed for one exchange.
pub(super) const SYNC_TIMEOUT: Duration = Duration::from_secs(1);

/// Opens a connection to the agent of the node whose peer port is `addr`.
pub(super) async fn connect(
    addr: &str,
    node_id: &str,
    secret: Option<&str>,
    tls: Option<&TlsConnector>,
) -> Option<PeerConn> {
    let mut hello = pb::PeerHello {
        version: PEER_VERSION,
        node_id: node_id.to_string(),
        from_worker: None,
        to_worker: None,
        ..Default::default()
    };
    let now_ms = crate::clock::Clock::wall_ms(&crate::clock::SystemClock::default());
    crate::peer::secret::sign(&mut hello, secret, now_ms);
    PeerConn::open(addr, hello, SYNC_TIMEOUT, tls).await.ok()
}

/// One push-pull exchange over `conn`: sends `state`, returns the peer's. A silent peer
/// (partitioned away) never breaks the socket: on a timeout the connection is abandoned,
/// so later exchanges do not queue behind it.
pub(super) async fn exchange(conn: &PeerConn, state: pb::ClusterState) -> Option<pb::ClusterState> {
    let req = pb::PeerRequest {
        id: fastrand::u64(..),
        msg: Some(pb::peer_request::Msg::SyncCluster(pb::SyncCluster {
            state: Some(state),
        })),
    };
    match tokio::time::timeout(SYNC_TIMEOUT, conn.call(req)).await {
        Ok(Ok(resp)) => match resp.result {
            Some(pb::peer_response::Result::Cluster(s)) => Some(s),
            _ => None,
        },
        Ok(Err(_)) => None,
        Err(_) => {
            conn.abandon();
            None
        }
    }
}

/// Asks the node at front address `seed` for the cluster's members (its topology), with
/// one native-protocol request (over TLS if `tls` is given).
/// The request proves the cluster secret, if there is one (the seed may require it before
/// authentication), and a TLS connection presents this node's certificate.
pub(super) async fn fetch_members(
    seed: &str,
    tls: Option<&TlsConnector>,
    secret: Option<&str>,
) -> Option<Vec<pb::Member>> {
    let mut topology = pb::GetTopology::default();
    let now_ms = crate::clock::Clock::wall_ms(&crate::clock::SystemClock::default());
    crate::peer::secret::sign_topology(&mut topology, secret, now_ms);
    let ask = async {
        let tcp = TcpStream::connect(seed).await.ok()?;
        let mut stream = Stream::connect_maybe(tls, seed, tcp).await.ok()?;
        let req = pb::Request {
            id: 1,
            op: Some(pb::request::Op::Topology(topology)),
            ..Default::default()
        };
        write_frame(&mut stream, &req).await.ok()?;
        let resp: pb::Response = read_frame(&mut stream, MAX_PEER_FRAME).await.ok()?;
        match resp.result {
            Some(pb::response::Result::Topology(t)) => Some(t.members),
            _ => None,
        }
    };
    tokio::time::timeout(SYNC_TIMEOUT, ask).await.ok().flatten()
}

/// Answers the exchanges another agent sends on `stream` (after its hello was accepted),
/// one at a time, until it closes.
pub(super) async fn serve(mut stream: Stream, mailbox: mpsc::Sender<AgentMsg>) {
    loop {
        let req: pb::PeerRequest = match read_frame(&mut stream, MAX_PEER_FRAME).await {
            Ok(r) => r,
            Err(_) => return,
        };
        let id = req.id;
        let result = match incoming_from_pb(req) {
            Ok((_, Incoming::SyncCluster(state))) => {
                let (reply, rx) = oneshot::channel();
                if mailbox.send(AgentMsg::Sync { state, reply }).await.is_err() {
                    return;
                }
                match rx.await {
                    Ok(mine) => pb::peer_response::Result::Cluster(mine),
                    Err(_) => return,
                }
            }
            Ok((_, Incoming::Worker(msg))) => pb::peer_response::Result::Error(
                crate::error::NodeError::BadRequest(format!(
                    "{} is for a worker, not the cluster agent",
                    msg.name()
                ))
                .to_pb(),
            ),
            Err(e) => pb::peer_response::Result::Error(e.to_pb()),
        };
        let resp = pb::PeerResponse {
            id,
            result: Some(result),
        };
        if write_frame(&mut stream, &resp).await.is_err() {
            return;
        }
    }
}
