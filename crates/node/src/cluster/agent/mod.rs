//! The cluster agent: one per node (storage or routing), on its own thread.
//!
//! Every gossip interval it increments its own heartbeat, runs the failure detector, and
//! exchanges cluster metadata (push-pull `SyncCluster` over the peer plane) with a few
//! random members — or, while it knows none, asks its seeds (front addresses) for the
//! members. When the rings, the members declared dead or the replication table change, it
//! publishes a new [`Snapshot`] on a watch channel; every worker of the node switches to the
//! new view (and moves keys accordingly).
//!
//! Requests from other agents (exchanges, on connections the peer listener hands over),
//! from operators (replication changes, leave, forget) reach it through its mailbox, a
//! bounded channel.
//!
//! # Layout
//! - this module: the handle, the thread and its loop;
//! - `logic`: the agent's decisions (no I/O);
//! - `net`: exchanges, bootstrap from seeds, answering other agents.

mod logic;
mod net;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use placement::{ReplicationVector, Tier};
use tokio::sync::{mpsc, oneshot, watch};
use wire::pb;

use super::membership::{Description, DetectorConfig, Role};
use crate::clock::SystemClock;
use crate::error::NodeError;
use crate::peer::transport::PeerConn;
use crate::view::ViewState;
use logic::{AgentState, Target};

/// Capacity of the agent's mailbox.
const MAILBOX: usize = 1024;

/// Settings of a node's agent.
#[derive(Clone)]
pub struct AgentConfig {
    /// The cluster secret its hellos prove (see `peer::secret`).
    pub cluster_secret: Option<String>,
    /// TLS of its connections to peers and seeds, if the node has TLS.
    pub tls: Option<tls::TlsConnector>,
    /// This node's id.
    pub node_id: String,
    /// Role and addresses.
    pub desc: Description,
    /// Front addresses of nodes to ask for the members while no other member is known.
    pub seeds: Vec<String>,
    /// Period of heartbeats and metadata exchanges.
    pub gossip_interval: Duration,
    /// Failure detection timeouts.
    pub detector: DetectorConfig,
    /// Members contacted per round.
    pub fanout: usize,
    /// Vector of keys without an explicit one.
    pub default: ReplicationVector,
    /// Most explicit replication vectors.
    pub max_replication_entries: usize,
}

impl AgentConfig {
    /// The agent settings of a node configured by `config`, described by `desc`, opening
    /// its peer connections with `tls` if given.
    pub fn new(
        config: &crate::config::NodeConfig,
        desc: Description,
        tls: Option<tls::TlsConnector>,
    ) -> AgentConfig {
        let cluster = &config.cluster;
        AgentConfig {
            cluster_secret: config.cluster_secret.clone(),
            tls,
            node_id: config.node_id.clone(),
            desc,
            seeds: cluster.seeds.clone(),
            gossip_interval: Duration::from_millis(cluster.gossip_interval_ms.max(10)),
            detector: DetectorConfig {
                suspect_after_ms: cluster.suspect_after_ms,
                dead_after_ms: cluster.failure_timeout_ms.max(cluster.suspect_after_ms),
            },
            fanout: cluster.fanout.max(1),
            default: config.default_vector(),
            max_replication_entries: config.limits.max_replication_entries,
        }
    }
}

/// What the agent publishes: the view to route by and the members, for status and topology.
#[derive(Debug)]
pub struct Snapshot {
    /// The view.
    pub view: Arc<ViewState>,
    /// Every known member, as sent on the wire.
    pub members: Vec<pb::Member>,
}

/// A message to the agent.
pub(crate) enum AgentMsg {
    Sync {
        state: pb::ClusterState,
        reply: oneshot::Sender<pb::ClusterState>,
    },
    SetReplication {
        key: Bytes,
        vector: Option<ReplicationVector>,
        by_policy: bool,
        reply: oneshot::Sender<Result<(), NodeError>>,
    },
    Leave {
        reply: oneshot::Sender<()>,
    },
    Forget {
        id: String,
        reply: oneshot::Sender<Result<(), NodeError>>,
    },
    /// A peer connection for the agent (its hello accepted).
    Connection(tls::Detached),
}

/// A handle to the agent: send it requests. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Agent {
    tx: mpsc::Sender<AgentMsg>,
}

impl Agent {
    /// Sets a key's replication vector, or returns the key to the default placement
    /// (`None`), cluster-wide (gossiped to every node); `by_policy` when the elasticity
    /// policy sets it rather than an operator.
    pub async fn set_replication(
        &self,
        key: Bytes,
        vector: Option<ReplicationVector>,
        by_policy: bool,
    ) -> Result<(), NodeError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(AgentMsg::SetReplication {
                key,
                vector,
                by_policy,
                reply,
            })
            .await
            .map_err(|_| NodeError::ShuttingDown)?;
        rx.await.map_err(|_| NodeError::ShuttingDown)?
    }

    /// Marks this node as leaving: it leaves the rings (its workers hand their keys off)
    /// and tells its peers at once.
    pub async fn leave(&self) {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(AgentMsg::Leave { reply }).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// Removes a member declared dead for good (see `docs/cluster.md`).
    pub async fn forget(&self, id: String) -> Result<(), NodeError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(AgentMsg::Forget { id, reply })
            .await
            .map_err(|_| NodeError::ShuttingDown)?;
        rx.await.map_err(|_| NodeError::ShuttingDown)?
    }

    /// Hands the agent a peer connection whose hello asked for it.
    pub fn serve(&self, stream: tls::Detached) {
        if self.tx.try_send(AgentMsg::Connection(stream)).is_err() {
            tracing::debug!("agent mailbox full: a peer connection is dropped");
        }
    }
}

/// An exchange that finished.
struct Done {
    target: Target,
    conn: Option<PeerConn>,
    state: Option<pb::ClusterState>,
    members: Option<Vec<pb::Member>>,
}

/// The agent's loop state: its decisions, and the connections it keeps.
struct Runner {
    agent: AgentState,
    conns: HashMap<String, PeerConn>,
    in_flight: HashSet<Target>,
    done: mpsc::Sender<Done>,
    mailbox: mpsc::Sender<AgentMsg>,
}

impl std::hash::Hash for Target {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            Target::Peer(a) | Target::Seed(a) => a.hash(state),
        }
    }
}

/// Starts the agent on its own thread. Returns its handle and the snapshot channel workers
/// watch. The first snapshot (this node alone) is already published.
pub fn spawn(
    config: AgentConfig,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<(
    Agent,
    watch::Receiver<Arc<Snapshot>>,
    std::thread::JoinHandle<()>,
)> {
    let interval = config.gossip_interval;
    let (agent, watcher) =
        AgentState::new(config, Arc::new(SystemClock::default()), fastrand::u64(..));
    let (tx, mut rx) = mpsc::channel(MAILBOX);
    let (done, mut done_rx) = mpsc::channel(MAILBOX);
    let mut runner = Runner {
        agent,
        conns: HashMap::new(),
        in_flight: HashSet::new(),
        done,
        mailbox: tx.clone(),
    };
    let thread = std::thread::Builder::new()
        .name("lkv-cluster".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the cluster agent");
                    return;
                }
            };
            rt.block_on(async move {
                let mut tick = tokio::time::interval(interval);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = tick.tick() => {
                            let targets = runner.agent.round();
                            runner.start(targets);
                        }
                        msg = rx.recv() => match msg {
                            Some(msg) => runner.handle(msg),
                            None => return,
                        },
                        Some(d) = done_rx.recv() => runner.on_done(d),
                        _ = shutdown.wait_for(|s| *s) => return,
                    }
                }
            });
        })?;
    Ok((Agent { tx }, watcher, thread))
}

impl Runner {
    fn handle(&mut self, msg: AgentMsg) {
        match msg {
            AgentMsg::Sync { state, reply } => {
                let _ = reply.send(self.agent.on_sync(&state));
            }
            AgentMsg::SetReplication {
                key,
                vector,
                by_policy,
                reply,
            } => {
                // Published before answering, so the caller can wait for its workers.
                let _ = reply.send(self.agent.set_replication(key, vector, by_policy));
            }
            AgentMsg::Leave { reply } => {
                let targets = self.agent.leave();
                self.start(targets);
                // Give the announcements a moment to go out.
                let wait = 3 * self.agent.config.gossip_interval;
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    let _ = reply.send(());
                });
            }
            AgentMsg::Forget { id, reply } => {
                let _ = reply.send(self.agent.forget(&id));
            }
            AgentMsg::Connection(stream) => match stream.attach() {
                Ok(stream) => {
                    tokio::spawn(net::serve(stream, self.mailbox.clone()));
                }
                Err(e) => tracing::debug!(error = %e, "could not adopt a peer connection"),
            },
        }
    }

    /// Starts an exchange with each target that has none under way. Never waits on the
    /// network: each runs in its own task and reports back, so heartbeats keep their pace
    /// however slow a peer is.
    fn start(&mut self, targets: Vec<Target>) {
        for target in targets {
            if !self.in_flight.insert(target.clone()) {
                // The previous exchange with it has not finished: don't pile up.
                continue;
            }
            let done = self.done.clone();
            let node_id = self.agent.config.node_id.clone();
            let secret = self.agent.config.cluster_secret.clone();
            let tls = self.agent.config.tls.clone();
            match target.clone() {
                Target::Seed(addr) => {
                    tokio::spawn(async move {
                        let members =
                            net::fetch_members(&addr, tls.as_ref(), secret.as_deref()).await;
                        let _ = done
                            .send(Done {
                                target,
                                conn: None,
                                state: None,
                                members,
                            })
                            .await;
                    });
                }
                Target::Peer(addr) => {
                    let cached = self.conns.get(&addr).filter(|c| !c.is_broken()).cloned();
                    let request = self.agent.push_state(&addr);
                    tokio::spawn(async move {
                        let conn = match cached {
                            Some(c) => Some(c),
                            None => {
                                net::connect(&addr, &node_id, secret.as_deref(), tls.as_ref()).await
                            }
                        };
                        let state = match &conn {
                            Some(c) => net::exchange(c, request).await,
                            None => None,
                        };
                        let _ = done
                            .send(Done {
                                target,
                                conn,
                                state,
                                members: None,
                            })
                            .await;
                    });
                }
            }
        }
    }

    /// An exchange finished: keep its connection, merge what the peer said.
    fn on_done(&mut self, d: Done) {
        self.in_flight.remove(&d.target);
        if let Target::Peer(addr) = &d.target {
            match d.conn {
                Some(c) if !c.is_broken() => {
                    self.conns.insert(addr.clone(), c);
                }
                _ => {
                    self.conns.remove(addr);
                }
            }
        }
        if let (Some(state), Target::Peer(addr)) = (d.state, &d.target) {
            self.agent.absorb_answer(addr, &state);
            self.agent.publish();
        }
        if let Some(members) = d.members {
            // Learned from a seed: introduce this node to them now rather than next round.
            self.agent.learn(&members);
            let targets = self.agent.peers(self.agent.config.fanout);
            self.start(targets);
        }
        // Connections to members that are gone are dropped (bounded by the membership).
        if self.conns.len() > self.agent.members() {
            let known = self.agent.peer_addrs();
            self.conns.retain(|addr, _| known.contains(addr));
        }
    }
}

impl Agent {
    /// A handle whose agent is gone: every request fails as on a stopping node (the
    /// in-memory nodes of the fuzz targets, `crate::fuzzing`).
    pub(crate) fn detached() -> Agent {
        let (tx, _) = mpsc::channel(1);
        Agent { tx }
    }
}

/// An agent's decisions without its thread or sockets, driven by the caller: what the peer
/// port's `SyncCluster` exchanges do to a node's membership, replication table and views
/// (the fuzz targets, `crate::fuzzing`).
pub(crate) struct OfflineAgent {
    state: AgentState,
    snapshots: watch::Receiver<Arc<Snapshot>>,
}

impl OfflineAgent {
    /// A node alone, as at start.
    pub(crate) fn new(
        config: AgentConfig,
        clock: Arc<dyn crate::clock::Clock + Send + Sync>,
        seed: u64,
    ) -> OfflineAgent {
        let (state, snapshots) = AgentState::new(config, clock, seed);
        OfflineAgent { state, snapshots }
    }

    /// A peer's `SyncCluster` push, as the agent thread answers it.
    pub(crate) fn on_sync(&mut self, state: &pb::ClusterState) -> pb::ClusterState {
        self.state.on_sync(state)
    }

    /// One gossip round (heartbeat, failure detection); returns how many exchanges it
    /// would start.
    pub(crate) fn round(&mut self) -> usize {
        self.state.round().len()
    }

    /// The latest snapshot published.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshots.borrow().clone()
    }
}

/// A storage node's description for its agent.
pub fn storage_description(
    tier: Tier,
    front: String,
    resp: String,
    workers: Vec<String>,
    vnodes: u32,
    peer: String,
) -> Description {
    Description {
        role: Role::Storage(tier),
        front,
        resp,
        workers,
        vnodes,
        peer,
        placement: placement::PLACEMENT_HASH_TAGS,
    }
}
