//! The peer port: where other nodes' workers and agents connect.
//!
//! A connection starts with a `PeerHello`: who is calling (its node and worker) and which
//! of this node's workers the connection is for — or its cluster agent. The acceptor checks
//! it, answers with a `PeerWelcome` (or an error, and closes), and hands the connection to
//! that worker's thread or to the agent, which serve it from then on. A hello must arrive
//! within [`HELLO_TIMEOUT`] (after the TLS handshake, when the node has TLS: with a CA,
//! the peer's certificate must be signed by it); anything else on this port is refused. Client ports never see
//! peer messages, and this port never sees client requests.

use std::sync::Arc;
use std::time::Duration;

use placement::{node_key, Replica};
use tls::{Detached, Stream, TlsAcceptor};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use wire::pb;

use super::transport::{read_frame, PEER_VERSION};
use crate::error::NodeError;

/// Time a new peer connection has to introduce itself.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest hello accepted.
const MAX_HELLO: usize = 64 * 1024;

/// Where accepted peer connections go.
pub trait Routes: Send + Sync {
    /// This node's id (in welcomes).
    fn node_id(&self) -> &str;
    /// Number of workers (0 on a routing node).
    fn workers(&self) -> u32;
    /// The cluster secret hellos must prove, if any.
    fn cluster_secret(&self) -> Option<&str>;
    /// Hands over a connection from worker `from` for worker `worker`.
    fn to_worker(&self, worker: u32, stream: Detached, from: Replica);
    /// Hands over a connection for the cluster agent.
    fn to_agent(&self, stream: Detached);
}

/// Accepts peer connections until the node stops (TLS handshakes by `tls`, if given).
pub async fn accept(
    listener: TcpListener,
    routes: Arc<dyn Routes>,
    mut shutdown: watch::Receiver<bool>,
    tls: Option<TlsAcceptor>,
) {
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        match accepted {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                let routes = routes.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let handshake = Stream::accept_maybe(tls.as_ref(), stream);
                    match tokio::time::timeout(HELLO_TIMEOUT, handshake).await {
                        Ok(Ok(stream)) => welcome(stream, routes).await,
                        Ok(Err(e)) => tracing::debug!(error = %e, "peer TLS handshake failed"),
                        Err(_) => tracing::debug!("peer TLS handshake timed out"),
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept on the peer port failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Reads a connection's hello and hands it over, or refuses it.
async fn welcome(mut stream: Stream, routes: Arc<dyn Routes>) {
    let hello = match tokio::time::timeout(
        HELLO_TIMEOUT,
        read_frame::<pb::PeerHello>(&mut stream, MAX_HELLO),
    )
    .await
    {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => {
            return refuse(stream, routes.node_id(), &format!("not a peer hello: {e}")).await
        }
        Err(_) => return refuse(stream, routes.node_id(), "no hello in time").await,
    };
    if hello.version != PEER_VERSION {
        let why = format!(
            "peer protocol version {} (this node speaks {PEER_VERSION})",
            hello.version
        );
        return refuse(stream, routes.node_id(), &why).await;
    }
    if hello.node_id.is_empty() || hello.node_id.len() > 1024 {
        return refuse(stream, routes.node_id(), "a hello without a valid node id").await;
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    if let Err(e) = super::secret::verify(&hello, routes.cluster_secret(), now_ms) {
        tracing::debug!(node = %hello.node_id.chars().take(64).collect::<String>(), error = %e, "peer connection refused");
        return refuse(stream, routes.node_id(), &e.to_string()).await;
    }
    let target = match (hello.to_worker, hello.from_worker) {
        (None, _) => None,
        (Some(w), _) if w >= routes.workers() => {
            let why = format!("no worker {w} here ({} workers)", routes.workers());
            return refuse(stream, routes.node_id(), &why).await;
        }
        (Some(w), Some(from)) => Some((w, from)),
        (Some(_), None) => {
            let why = "a worker connection must say which worker calls";
            return refuse(stream, routes.node_id(), why).await;
        }
    };
    let ok = pb::PeerWelcome {
        node_id: routes.node_id().to_string(),
        error: None,
    };
    let mut out = Vec::new();
    wire::frame::encode(&ok, &mut out);
    if stream.write_all(&out).await.is_err() || stream.flush().await.is_err() {
        return;
    }
    let Ok(stream) = stream.detach() else {
        return;
    };
    match target {
        Some((worker, from)) => {
            let from = Replica {
                node: node_key(&hello.node_id),
                worker: from,
            };
            routes.to_worker(worker, stream, from);
        }
        None => routes.to_agent(stream),
    }
}

async fn refuse(mut stream: Stream, node_id: &str, why: &str) {
    tracing::debug!(why, "peer connection refused");
    let resp = pb::PeerWelcome {
        node_id: node_id.to_string(),
        error: Some(NodeError::BadRequest(why.to_string()).to_pb()),
    };
    let mut out = Vec::new();
    wire::frame::encode(&resp, &mut out);
    if stream.write_all(&out).await.is_ok() {
        let _ = stream.flush().await;
    }
}
