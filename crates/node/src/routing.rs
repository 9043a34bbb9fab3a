//! A routing node: a cluster member that holds no data and answers "where is key k".
//!
//! It runs a cluster agent (so it knows the membership and the replication table like
//! every storage node), a peer port where other agents exchange cluster metadata with it,
//! and one native-protocol port answering `GetTopology`, `Locate`, `GetStatus` (members and
//! ring ownership) and `Ping`. Data requests get a `REDIRECT` to the workers holding the
//! key, which placement-aware clients follow. With users configured, a connection must
//! send `Auth` first, as on a storage node. With TLS configured, both ports are TLS-only, as
//! on a storage node.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use prost::Message;
use tls::{Stream, TlsAcceptor};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use wire::frame::{self, HEADER_LEN};
use wire::pb::{self, request::Op as ReqOp, response::Result as RespResult};

use crate::cluster::agent::{self, Agent, AgentConfig, Snapshot};
use crate::cluster::membership::{Description, Role};
use crate::config::NodeConfig;
use crate::error::NodeError;
use crate::peer::listen::{self, Routes};
use crate::server::StartError;

/// A running routing node.
pub struct RoutingNode {
    addr: SocketAddr,
    tls: Option<Arc<crate::tls::NodeTls>>,
    published: String,
    stop: watch::Sender<bool>,
    thread: std::thread::JoinHandle<()>,
    agent_thread: std::thread::JoinHandle<()>,
}

impl RoutingNode {
    /// Binds `config.listen` and starts the agent and the server.
    pub fn start(config: NodeConfig) -> Result<RoutingNode, StartError> {
        let users = config
            .validate_routing()
            .map_err(|e| StartError::Config(e.to_string()))?;
        let tls = crate::tls::NodeTls::from_config(&config.tls)
            .map_err(|e| StartError::Config(e.to_string()))?;
        let listener =
            std::net::TcpListener::bind(config.listen).map_err(|source| StartError::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| StartError::Bind { addr, source })?;
        let published = config.published(addr)?;
        let peer_listener =
            std::net::TcpListener::bind(config.peer_addr()).map_err(|source| StartError::Bind {
                addr: config.peer_addr(),
                source,
            })?;
        let peer_addr = peer_listener
            .local_addr()
            .map_err(|source| StartError::Bind {
                addr: config.peer_addr(),
                source,
            })?;
        peer_listener
            .set_nonblocking(true)
            .map_err(|source| StartError::Bind {
                addr: peer_addr,
                source,
            })?;
        let published_peer = config.published(peer_addr)?;
        let (stop, shutdown) = watch::channel(false);
        let (agent, snapshots, agent_thread) = agent::spawn(
            AgentConfig::new(
                &config,
                Description {
                    role: Role::Routing,
                    front: published.clone(),
                    resp: String::new(),
                    workers: Vec::new(),
                    vnodes: config.vnodes,
                    peer: published_peer,
                    placement: config.placement_version(),
                },
                tls.as_ref().map(|t| t.peers_out.clone()),
            ),
            shutdown.clone(),
        )
        .map_err(StartError::Thread)?;
        let state = Arc::new(State {
            node_id: config.node_id.clone(),
            agent,
            snapshots,
            started: Instant::now(),
            max_frame: config.limits.max_frame_size,
            users,
            tls: tls.as_ref().map(|t| t.clients.clone()),
            handshake_timeout: config.limits.handshake_timeout(),
            open_membership: !config.peers_authenticated(),
            secret: config.cluster_secret.clone(),
        });
        let peer_tls = tls.as_ref().map(|t| t.peers_in.clone());
        let reload = tls.clone().filter(|_| config.tls.reload_secs > 0);
        let reload_every = Duration::from_secs(config.tls.reload_secs);
        let secret = config.cluster_secret.clone();
        let thread = std::thread::Builder::new()
            .name("lkv-routing".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                let routes = Arc::new(AgentRoutes {
                    node_id: state.node_id.clone(),
                    secret,
                    agent: state.agent.clone(),
                });
                rt.block_on(async move {
                    if let Ok(peer) = TcpListener::from_std(peer_listener) {
                        tokio::spawn(listen::accept(peer, routes, shutdown.clone(), peer_tls));
                    }
                    if let Some(tls) = reload {
                        let watch = crate::tls::watch_files(tls, reload_every, shutdown.clone());
                        tokio::spawn(watch);
                    }
                    accept(listener, state, shutdown).await
                });
            })
            .map_err(StartError::Thread)?;
        Ok(RoutingNode {
            addr,
            tls,
            published,
            stop,
            thread,
            agent_thread,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address clients and nodes are told to reach it at (the advertised host, if one
    /// is configured, with the bound port).
    pub fn published(&self) -> &str {
        &self.published
    }

    /// Reads the TLS certificate and key again, for new connections (`Ok` without TLS).
    pub fn reload_tls(&self) -> Result<(), tls::TlsError> {
        match &self.tls {
            Some(t) => t.reload(),
            None => Ok(()),
        }
    }

    /// Stops it and waits.
    pub fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.thread.join();
        let _ = self.agent_thread.join();
    }
}

/// Where peer connections go on a routing node: to its agent (it has no workers).
struct AgentRoutes {
    node_id: String,
    secret: Option<String>,
    agent: Agent,
}

impl Routes for AgentRoutes {
    fn node_id(&self) -> &str {
        &self.node_id
    }

    fn workers(&self) -> u32 {
        0
    }

    fn cluster_secret(&self) -> Option<&str> {
        self.secret.as_deref()
    }

    fn to_worker(&self, _worker: u32, _stream: tls::Detached, _from: placement::Replica) {}

    fn to_agent(&self, stream: tls::Detached) {
        self.agent.serve(stream);
    }
}

struct State {
    node_id: String,
    agent: Agent,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    started: Instant,
    max_frame: usize,
    users: crate::auth::Users,
    /// TLS handshakes of client connections, if configured.
    tls: Option<TlsAcceptor>,
    /// Time a client has to finish its TLS handshake.
    handshake_timeout: Duration,
    /// Peers are not authenticated (anyone may learn the members).
    open_membership: bool,
    /// The cluster secret a topology request before authentication may prove.
    secret: Option<String>,
}

async fn accept(
    listener: std::net::TcpListener,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Ok(listener) = TcpListener::from_std(listener) else {
        return;
    };
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    tokio::spawn(serve(stream, state.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

async fn serve(tcp: TcpStream, state: Arc<State>) {
    let _ = tcp.set_nodelay(true);
    let handshake = Stream::accept_maybe(state.tls.as_ref(), tcp);
    let Ok(Ok(mut stream)) = tokio::time::timeout(state.handshake_timeout, handshake).await else {
        return;
    };
    let node_certificate = stream.peer_verified();
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut out = Vec::new();
    let mut user = state.users.initial();
    loop {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        match stream.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        loop {
            let len = match frame::frame_len(&buf, state.max_frame) {
                Ok(Some(len)) => len,
                Ok(None) => break,
                Err(e) => {
                    let resp = error(0, &NodeError::BadRequest(e.to_string()));
                    frame::encode(&resp, &mut out);
                    if stream.write_all(&out).await.is_ok() {
                        let _ = stream.flush().await;
                    }
                    return;
                }
            };
            let body = buf.split_to(HEADER_LEN + len).freeze().slice(HEADER_LEN..);
            let resp = match pb::Request::decode(body) {
                Ok(req) => authenticated(&state, &mut user, node_certificate, req),
                Err(e) => error(
                    0,
                    &NodeError::BadRequest(format!("undecodable request: {e}")),
                ),
            };
            frame::encode(&resp, &mut out);
        }
        if stream.write_all(&out).await.is_err() || stream.flush().await.is_err() {
            return;
        }
        out.clear();
    }
}

fn error(id: u64, e: &NodeError) -> pb::Response {
    pb::Response {
        id,
        result: Some(RespResult::Error(e.to_pb())),
    }
}

fn redirect(state: &State, key: &[u8]) -> NodeError {
    let view = state.snapshots.borrow().view.clone();
    let addrs = view
        .serving_replicas(key)
        .into_iter()
        .filter_map(|r| view.addr(r).map(str::to_string))
        .collect();
    NodeError::Redirect(addrs)
}

/// Answers `Auth`, and refuses every other request before it succeeded (on a node with
/// users).
fn authenticated(
    state: &State,
    user: &mut Option<Arc<crate::auth::User>>,
    node_certificate: bool,
    req: pb::Request,
) -> pb::Response {
    if let Some(ReqOp::Auth(a)) = &req.op {
        return match state.users.authenticate(&a.user, a.password.as_bytes()) {
            Ok(u) => {
                *user = Some(u);
                pb::Response {
                    id: req.id,
                    result: Some(RespResult::Ack(pb::Ack { count: 1 })),
                }
            }
            Err(e) => error(req.id, &NodeError::from_auth(e)),
        };
    }
    let pre = crate::front::native::access::PreAuth {
        open_membership: state.open_membership,
        secret: state.secret.as_deref(),
        node_certificate,
    };
    let exempt = req
        .op
        .as_ref()
        .is_some_and(|op| crate::front::native::access::before_auth(op, &pre));
    if user.is_none() && !exempt {
        let e = NodeError::from_auth(crate::auth::AuthError::Required);
        return error(req.id, &e);
    }
    handle(state, req)
}

fn handle(state: &State, req: pb::Request) -> pb::Response {
    let id = req.id;
    let ok = |result| pb::Response {
        id,
        result: Some(result),
    };
    let Some(op) = req.op else {
        return error(
            id,
            &NodeError::BadRequest("request without an operation".into()),
        );
    };
    let snapshot = state.snapshots.borrow().clone();
    match op {
        ReqOp::Ping(_) => ok(RespResult::Ack(pb::Ack { count: 0 })),
        ReqOp::Topology(_) => ok(RespResult::Topology(pb::Topology {
            protocol_version: wire::PROTOCOL_VERSION,
            node_id: state.node_id.clone(),
            workers: Vec::new(),
            vnodes: 0,
            default_local_replication: snapshot.view.default.memory.local,
            default_global_replication: snapshot.view.default.memory.global,
            replication: snapshot.view.topology_vectors(10_000),
            members: snapshot.members.clone(),
            default_disk_replication: snapshot.view.default.disk.global,
        })),
        ReqOp::Locate(l) => ok(RespResult::Locations(pb::Locations {
            keys: l
                .keys
                .iter()
                .map(|k| pb::locations::KeyLocation {
                    replicas: snapshot
                        .view
                        .replicas(k)
                        .into_iter()
                        .filter_map(|r| snapshot.view.addr(r).map(str::to_string))
                        .collect(),
                })
                .collect(),
        })),
        ReqOp::Status(_) => ok(RespResult::Status(pb::Status {
            node_id: state.node_id.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            uptime_seconds: state.started.elapsed().as_secs(),
            members: snapshot.members.clone(),
            ownership: snapshot
                .view
                .view
                .ownership(placement::Tier::Memory)
                .into_iter()
                .filter_map(|(key, share)| {
                    Some(pb::status::Ownership {
                        node_id: snapshot.view.view.node(key)?.id.clone(),
                        share,
                    })
                })
                .collect(),
            ..Default::default()
        })),
        ReqOp::SyncCluster(_)
        | ReqOp::Replicate(_)
        | ReqOp::Forward(_)
        | ReqOp::AntiEntropy(_)
        | ReqOp::Fetch(_) => error(
            id,
            &NodeError::BadRequest(
                "a peer-plane message: nodes send it to each other's peer port; client ports \
                 refuse it"
                    .into(),
            ),
        ),
        ReqOp::Get(g) => error(id, &redirect(state, &g.key)),
        ReqOp::Put(p) => error(id, &redirect(state, &p.key)),
        ReqOp::Delete(d) => error(id, &redirect(state, &d.key)),
        ReqOp::Update(u) => error(id, &redirect(state, &u.key)),
        _ => error(
            id,
            &NodeError::BadRequest("a routing node holds no data; ask a storage node".into()),
        ),
    }
}
