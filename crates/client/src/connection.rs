//! One pipelined connection to one address.
//!
//! Callers hand requests to a writer task through a bounded channel; the writer sends every
//! request it has queued with one write and passes the reply slots, in order, to the reader
//! task, which matches responses (the server answers in request order, and each response's
//! id is checked). Any I/O error fails every request in flight on this connection; the next
//! request opens a new connection.
//!
//! A peer cut off by the network (a partition, a host gone) produces no I/O error at all:
//! TCP retransmits silently for many minutes. Callers that time a request out therefore
//! [`abandon`](Connection::abandon) the connection, so that later requests open a new one
//! instead of queueing behind a silent socket.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use prost::Message;
use tls::{Stream, TlsConnector, TlsError};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use wire::frame::{self, HEADER_LEN};
use wire::pb;

use crate::error::ClientError;

/// Requests queued for the writer (per connection).
const QUEUE: usize = 1024;
/// Requests written but not yet answered (per connection).
const IN_FLIGHT: usize = 4096;
/// Largest response frame accepted.
const MAX_FRAME: usize = 64 * 1024 * 1024;

type Reply = oneshot::Sender<Result<pb::Response, ClientError>>;

/// TLS settings of a client: whom it trusts, and the name the server must prove.
#[derive(Clone)]
pub struct ClientTls {
    connector: TlsConnector,
    server_name: Option<String>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Trusts the CA certificates in the PEM file `ca`, or the system's CAs if `None`. The
    /// server's certificate must name the host of each address the client connects to.
    pub fn new(ca: Option<&std::path::Path>) -> Result<ClientTls, TlsError> {
        let config = tls::client_config(tls::roots(ca)?, None)?;
        Ok(ClientTls {
            connector: TlsConnector::from(config),
            server_name: None,
        })
    }

    /// Requires the certificate to name `name` instead of each address's host (for nodes
    /// reached by an address their certificate does not hold).
    pub fn with_server_name(mut self, name: impl Into<String>) -> ClientTls {
        self.server_name = Some(name.into());
        self
    }
}

/// Opens a TCP connection to `addr`, then TLS over it if `tls` is given.
pub(crate) async fn dial(addr: &str, tls: Option<&ClientTls>) -> Result<Stream, ClientError> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|source| ClientError::Connect {
            addr: addr.to_string(),
            source,
        })?;
    let _ = tcp.set_nodelay(true);
    let Some(t) = tls else {
        return Ok(Stream::Tcp(tcp));
    };
    let failed = |reason: String| ClientError::Tls {
        addr: addr.to_string(),
        reason,
    };
    let name = tls::server_name(t.server_name.as_deref().unwrap_or(addr))
        .map_err(|e| failed(e.to_string()))?;
    Stream::connect(&t.connector, name, tcp)
        .await
        .map_err(|e| failed(e.to_string()))
}

/// A user and password, sent as an `Auth` request on every connection the client opens (a
/// node with users refuses everything else before it). Its `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name; empty or `default` for the user of the node's `--password`.
    pub user: String,
    /// The password.
    pub password: String,
}

impl Credentials {
    /// Credentials for `user` (empty: `default`) with `password`.
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Credentials {
        Credentials {
            user: user.into(),
            password: password.into(),
        }
    }

    /// The `Auth` request carrying these credentials.
    pub fn request(&self) -> pb::request::Op {
        pb::request::Op::Auth(pb::Auth {
            user: self.user.clone(),
            password: self.password.clone(),
        })
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// A handle to a connection; cheap to clone.
#[derive(Clone, Debug)]
pub struct Connection {
    addr: String,
    calls: mpsc::Sender<(pb::Request, Reply)>,
    broken: Arc<AtomicBool>,
    /// The writer and reader tasks (aborted by `abandon`).
    tasks: Arc<[tokio::task::AbortHandle; 2]>,
}

impl Connection {
    /// Connects to `addr` (with TLS if `tls` is given), starts the connection's tasks and,
    /// with `credentials`, authenticates (an `Auth` request answered before the connection
    /// is returned; a refusal is the server's `UNAUTHENTICATED` error).
    pub async fn open_with(
        addr: &str,
        tls: Option<&ClientTls>,
        credentials: Option<&Credentials>,
    ) -> Result<Connection, ClientError> {
        let conn = Connection::open(addr, tls).await?;
        if let Some(c) = credentials {
            let req = pb::Request {
                id: 0,
                op: Some(c.request()),
                ..Default::default()
            };
            let resp = conn.call(req).await;
            let refused = match resp {
                Ok(pb::Response {
                    result: Some(pb::response::Result::Ack(_)),
                    ..
                }) => None,
                Ok(pb::Response {
                    result: Some(pb::response::Result::Error(e)),
                    ..
                }) => Some(ClientError::from_pb(e)),
                Ok(other) => Some(ClientError::Protocol(format!(
                    "unexpected answer to Auth: {other:?}"
                ))),
                Err(e) => Some(e),
            };
            if let Some(e) = refused {
                conn.abandon();
                return Err(e);
            }
        }
        Ok(conn)
    }

    /// Connects to `addr` (with TLS if `tls` is given) and starts the connection's tasks.
    pub async fn open(addr: &str, tls: Option<&ClientTls>) -> Result<Connection, ClientError> {
        let stream = dial(addr, tls).await?;
        let (read, write) = tokio::io::split(stream);
        let (calls, calls_rx) = mpsc::channel(QUEUE);
        let (order_tx, order_rx) = mpsc::channel(IN_FLIGHT);
        let broken = Arc::new(AtomicBool::new(false));
        let writer = tokio::spawn(writer(
            write,
            calls_rx,
            order_tx,
            broken.clone(),
            addr.to_string(),
        ));
        let reader = tokio::spawn(reader(read, order_rx, broken.clone(), addr.to_string()));
        Ok(Connection {
            addr: addr.to_string(),
            calls,
            broken,
            tasks: Arc::new([writer.abort_handle(), reader.abort_handle()]),
        })
    }

    /// Gives the connection up: it is marked broken and closed, and requests still waiting
    /// on it fail. For a caller whose request timed out — the peer may be unreachable
    /// without the socket ever reporting an error.
    pub fn abandon(&self) {
        self.broken.store(true, Ordering::Relaxed);
        for task in self.tasks.iter() {
            task.abort();
        }
    }

    /// The address this connection talks to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// True once the connection failed; it should be replaced.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed) || self.calls.is_closed()
    }

    /// Sends `req` and waits for its response.
    pub async fn call(&self, req: pb::Request) -> Result<pb::Response, ClientError> {
        let (tx, rx) = oneshot::channel();
        let lost = || ClientError::ConnectionLost {
            addr: self.addr.clone(),
            reason: "connection closed".into(),
        };
        self.calls.send((req, tx)).await.map_err(|_| lost())?;
        rx.await.map_err(|_| lost())?
    }
}

async fn writer(
    mut stream: WriteHalf<Stream>,
    mut calls: mpsc::Receiver<(pb::Request, Reply)>,
    order: mpsc::Sender<(u64, Reply)>,
    broken: Arc<AtomicBool>,
    addr: String,
) {
    let mut out = Vec::with_capacity(16 * 1024);
    while let Some((req, reply)) = calls.recv().await {
        let mut batch = vec![(req, reply)];
        while batch.len() < 256 {
            match calls.try_recv() {
                Ok(call) => batch.push(call),
                Err(_) => break,
            }
        }
        out.clear();
        let mut slots = Vec::with_capacity(batch.len());
        for (req, reply) in batch {
            frame::encode(&req, &mut out);
            slots.push((req.id, reply));
        }
        for slot in slots {
            if let Err(mpsc::error::SendError((_, reply))) = order.send(slot).await {
                let _ = reply.send(Err(ClientError::ConnectionLost {
                    addr: addr.clone(),
                    reason: "reader stopped".into(),
                }));
            }
        }
        if stream.write_all(&out).await.is_err() || stream.flush().await.is_err() {
            // Callers waiting on this connection get an error from the reader when the
            // connection closes, or time out.
            broken.store(true, Ordering::Relaxed);
            return;
        }
    }
}

async fn reader(
    mut stream: ReadHalf<Stream>,
    mut order: mpsc::Receiver<(u64, Reply)>,
    broken: Arc<AtomicBool>,
    addr: String,
) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let failure = 'read: loop {
        // Deliver every complete response in the buffer.
        loop {
            match frame::frame_len(&buf, MAX_FRAME) {
                Ok(None) => break,
                Err(e) => {
                    broken.store(true, Ordering::Relaxed);
                    fail_all(&mut order, &addr, &e.to_string()).await;
                    return;
                }
                Ok(Some(len)) => {
                    let body = buf.split_to(HEADER_LEN + len).freeze().slice(HEADER_LEN..);
                    let resp = match pb::Response::decode(body) {
                        Ok(r) => r,
                        Err(e) => break 'read format!("undecodable response: {e}"),
                    };
                    let Some((id, reply)) = order.recv().await else {
                        return;
                    };
                    if resp.id != id {
                        let msg = match resp.result {
                            Some(pb::response::Result::Error(e)) => {
                                format!("server error for an unknown request: {}", e.message)
                            }
                            _ => format!("response id {} does not match request {id}", resp.id),
                        };
                        let _ = reply.send(Err(ClientError::Protocol(msg.clone())));
                        broken.store(true, Ordering::Relaxed);
                        fail_all(&mut order, &addr, &msg).await;
                        return;
                    }
                    let _ = reply.send(Ok(resp));
                }
            }
        }
        match stream.read_buf(&mut buf).await {
            Ok(0) => break 'read "closed by the server".to_string(),
            Ok(_) => {}
            Err(e) => break 'read e.to_string(),
        }
    };
    broken.store(true, Ordering::Relaxed);
    fail_all(&mut order, &addr, &failure).await;
}

async fn fail_all(order: &mut mpsc::Receiver<(u64, Reply)>, addr: &str, reason: &str) {
    order.close();
    while let Some((_, reply)) = order.recv().await {
        let _ = reply.send(Err(ClientError::ConnectionLost {
            addr: addr.to_string(),
            reason: reason.to_string(),
        }));
    }
}
