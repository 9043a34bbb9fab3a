//! One peer-plane connection, from the side that opens it.
//!
//! [`PeerConn::open`] connects to a node's peer port, sends a `PeerHello` (who is calling,
//! and which worker — or the cluster agent — the connection is for) and waits for the
//! `PeerWelcome`. Then callers send `PeerRequest`s through a writer task, which batches
//! what is queued into one write; a reader task matches each `PeerResponse` to its request
//! by id (the receiving worker answers in any order). Any I/O error fails every request in
//! flight; the connection is then broken and the pool opens a new one.
//!
//! A peer cut off by a partition produces no I/O error at all (TCP retransmits silently),
//! so a caller whose request timed out [`abandon`](PeerConn::abandon)s the connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use prost::Message;
use tls::{Stream, TlsConnector};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use wire::frame::{self, HEADER_LEN};
use wire::pb;

/// Version of the peer protocol this node speaks (in `PeerHello`).
pub const PEER_VERSION: u32 = 1;

/// Requests queued for the writer, per connection.
const QUEUE: usize = 1024;

/// Largest frame accepted from a peer.
pub const MAX_PEER_FRAME: usize = 64 * 1024 * 1024;

/// Why a request over the peer plane failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// No connection could be made, or the peer refused the hello: the request did not run.
    #[error("cannot reach {addr}: {reason}")]
    Unreachable {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The connection broke after the request was sent: it may have run.
    #[error("connection to {addr} lost: {reason}")]
    Lost {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
}

type Reply = oneshot::Sender<Result<pb::PeerResponse, PeerError>>;

/// A handle to a peer connection; cheap to clone.
#[derive(Clone, Debug)]
pub struct PeerConn {
    addr: Arc<str>,
    calls: mpsc::Sender<(pb::PeerRequest, Reply)>,
    broken: Arc<AtomicBool>,
    tasks: Arc<[tokio::task::AbortHandle; 2]>,
}

/// Writes `msg` as one frame (and flushes it).
pub(crate) async fn write_frame<M: Message>(
    stream: &mut (impl AsyncWrite + Unpin),
    msg: &M,
) -> std::io::Result<()> {
    let mut out = Vec::new();
    frame::encode(msg, &mut out);
    stream.write_all(&out).await?;
    stream.flush().await
}

/// Reads one frame and decodes it as `M`.
pub(crate) async fn read_frame<M: Message + Default>(
    stream: &mut (impl AsyncRead + Unpin),
    max: usize,
) -> Result<M, String> {
    let mut header = [0u8; HEADER_LEN];
    stream
        .read_exact(&mut header)
        .await
        .map_err(|e| e.to_string())?;
    let len = u32::from_be_bytes(header) as usize;
    if len > max {
        return Err(format!("frame of {len} bytes exceeds the {max}-byte limit"));
    }
    let mut body = vec![0u8; len];
    stream
        .read_exact(&mut body)
        .await
        .map_err(|e| e.to_string())?;
    M::decode(&body[..]).map_err(|e| format!("undecodable frame: {e}"))
}

impl PeerConn {
    /// Connects to the peer port at `addr` (with TLS if `tls` is given: the peer must prove
    /// it is `addr`'s host) and introduces this connection with `hello`; gives up after
    /// `timeout`.
    pub async fn open(
        addr: &str,
        hello: pb::PeerHello,
        timeout: Duration,
        tls: Option<&TlsConnector>,
    ) -> Result<PeerConn, PeerError> {
        let unreachable = |reason: String| PeerError::Unreachable {
            addr: addr.to_string(),
            reason,
        };
        let handshake = async {
            let tcp = TcpStream::connect(addr)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            let _ = tcp.set_nodelay(true);
            let mut stream = Stream::connect_maybe(tls, addr, tcp)
                .await
                .map_err(|e| unreachable(format!("TLS: {e}")))?;
            write_frame(&mut stream, &hello)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            let welcome: pb::PeerWelcome = read_frame(&mut stream, MAX_PEER_FRAME)
                .await
                .map_err(unreachable)?;
            if let Some(e) = welcome.error {
                return Err(unreachable(format!("refused: {}", e.message)));
            }
            Ok(stream)
        };
        let stream = tokio::time::timeout(timeout, handshake)
            .await
            .map_err(|_| unreachable("no answer".into()))??;
        let (read, write) = tokio::io::split(stream);
        let (calls, calls_rx) = mpsc::channel(QUEUE);
        let (waiters, waiters_rx) = mpsc::channel(QUEUE);
        let broken = Arc::new(AtomicBool::new(false));
        let addr: Arc<str> = Arc::from(addr);
        let writer = tokio::spawn(writer(
            write,
            calls_rx,
            waiters,
            broken.clone(),
            addr.clone(),
        ));
        let reader = tokio::spawn(reader(read, waiters_rx, broken.clone(), addr.clone()));
        Ok(PeerConn {
            addr,
            calls,
            broken,
            tasks: Arc::new([writer.abort_handle(), reader.abort_handle()]),
        })
    }

    /// Gives the connection up: requests waiting on it fail, the next call reconnects.
    pub fn abandon(&self) {
        self.broken.store(true, Ordering::Relaxed);
        for task in self.tasks.iter() {
            task.abort();
        }
    }

    /// True once the connection failed; it should be replaced.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed) || self.calls.is_closed()
    }

    /// Queues `req` now, behind every request queued before it (so requests are sent in
    /// the order of these calls), without waiting for room: a full queue refuses it. The
    /// answer arrives on the returned receiver (a broken connection drops it).
    pub fn try_call(
        &self,
        req: pb::PeerRequest,
    ) -> Result<oneshot::Receiver<Result<pb::PeerResponse, PeerError>>, PeerError> {
        let (tx, rx) = oneshot::channel();
        self.calls
            .try_send((req, tx))
            .map_err(|e| PeerError::Unreachable {
                addr: self.addr.to_string(),
                reason: match e {
                    mpsc::error::TrySendError::Full(_) => "request queue full".into(),
                    mpsc::error::TrySendError::Closed(_) => "connection closed".into(),
                },
            })?;
        Ok(rx)
    }

    /// Sends `req` and waits for its answer.
    pub async fn call(&self, req: pb::PeerRequest) -> Result<pb::PeerResponse, PeerError> {
        let (tx, rx) = oneshot::channel();
        let lost = || PeerError::Lost {
            addr: self.addr.to_string(),
            reason: "connection closed".into(),
        };
        self.calls.send((req, tx)).await.map_err(|_| lost())?;
        rx.await.map_err(|_| lost())?
    }
}

async fn writer(
    mut stream: tokio::io::WriteHalf<Stream>,
    mut calls: mpsc::Receiver<(pb::PeerRequest, Reply)>,
    waiters: mpsc::Sender<(u64, Reply)>,
    broken: Arc<AtomicBool>,
    addr: Arc<str>,
) {
    let mut out = Vec::with_capacity(16 * 1024);
    while let Some(first) = calls.recv().await {
        let mut batch = vec![first];
        while batch.len() < 256 {
            match calls.try_recv() {
                Ok(call) => batch.push(call),
                Err(_) => break,
            }
        }
        out.clear();
        for (req, reply) in batch {
            frame::encode(&req, &mut out);
            // Registered before the bytes go out, so the answer always finds its waiter.
            if let Err(mpsc::error::SendError((_, reply))) = waiters.send((req.id, reply)).await {
                let _ = reply.send(Err(PeerError::Lost {
                    addr: addr.to_string(),
                    reason: "reader stopped".into(),
                }));
            }
        }
        if stream.write_all(&out).await.is_err() || stream.flush().await.is_err() {
            broken.store(true, Ordering::Relaxed);
            return;
        }
    }
}

async fn reader(
    mut stream: tokio::io::ReadHalf<Stream>,
    mut waiters: mpsc::Receiver<(u64, Reply)>,
    broken: Arc<AtomicBool>,
    addr: Arc<str>,
) {
    let mut waiting: HashMap<u64, Reply> = HashMap::new();
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let failure = 'read: loop {
        loop {
            match frame::frame_len(&buf, MAX_PEER_FRAME) {
                Ok(None) => break,
                Err(e) => break 'read e.to_string(),
                Ok(Some(len)) => {
                    let body = buf.split_to(HEADER_LEN + len).freeze().slice(HEADER_LEN..);
                    let resp = match pb::PeerResponse::decode(body) {
                        Ok(r) => r,
                        Err(e) => break 'read format!("undecodable answer: {e}"),
                    };
                    // Waiters registered since the last answer.
                    while let Ok((id, reply)) = waiters.try_recv() {
                        waiting.insert(id, reply);
                    }
                    if let Some(reply) = waiting.remove(&resp.id) {
                        let _ = reply.send(Ok(resp));
                    }
                    // An answer nobody waits for (a request abandoned) is dropped.
                }
            }
        }
        tokio::select! {
            read = stream.read_buf(&mut buf) => match read {
                Ok(0) => break 'read "closed by the peer".to_string(),
                Ok(_) => {}
                Err(e) => break 'read e.to_string(),
            },
            w = waiters.recv() => match w {
                Some((id, reply)) => {
                    waiting.insert(id, reply);
                }
                None => return,
            },
        }
    };
    broken.store(true, Ordering::Relaxed);
    waiters.close();
    while let Ok((id, reply)) = waiters.try_recv() {
        waiting.insert(id, reply);
    }
    for (_, reply) in waiting {
        let _ = reply.send(Err(PeerError::Lost {
            addr: addr.to_string(),
            reason: failure.clone(),
        }));
    }
}
