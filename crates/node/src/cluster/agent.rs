//! The cluster agent: one per node (storage or routing), on its own thread.
//!
//! Every gossip interval it increments its own heartbeat, runs the failure detector, and
//! exchanges cluster metadata (push-pull) with a few random members — or the seeds while it
//! knows nobody. When the rings or the replication table change, it publishes a new
//! [`Snapshot`] on a watch channel; every worker of the node switches to the new view (and
//! moves keys accordingly).
//!
//! Requests from peers (`SyncCluster`) and from clients (`SetReplication`, `Leave`) reach it
//! through its mailbox, a bounded channel.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use client::connection::Connection;
use lattice::{Lattice, Timestamp};
use placement::{ReplicationVector, Tier};
use tokio::sync::{mpsc, oneshot, watch};
use wire::pb;

use super::membership::{self, Description, DetectorConfig, Member, Membership, Role, Status};
use super::state::{self, merge_members, merge_replication_pb, replication_digest};
use super::{ReplicationTable, ViewState};
use crate::error::NodeError;
use crate::shard::system_now_ms;

/// Capacity of the agent's mailbox.
const MAILBOX: usize = 1024;
/// Time allowed for one metadata exchange with a peer.
const SYNC_TIMEOUT: Duration = Duration::from_secs(1);
/// Every this many rounds, one member believed dead is contacted too (see
/// [`AgentState::probe_dead`]).
const DEAD_PROBE_ROUNDS: u64 = 5;

/// Settings of a node's agent.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// This node's id.
    pub node_id: String,
    /// Role and addresses.
    pub desc: Description,
    /// Front addresses of nodes to contact while no other member is known.
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

/// What the agent publishes: the view to route by and the members, for status and topology.
#[derive(Debug)]
pub struct Snapshot {
    /// The view.
    pub view: Arc<ViewState>,
    /// Every known member, as sent on the wire.
    pub members: Vec<pb::Member>,
}

/// The outcome of one exchange with a peer.
struct Reply {
    addr: String,
    conn: Option<Connection>,
    state: Option<pb::ClusterState>,
}

enum AgentMsg {
    Sync {
        state: pb::ClusterState,
        reply: oneshot::Sender<pb::ClusterState>,
    },
    SetReplication {
        key: Bytes,
        vector: ReplicationVector,
        reply: oneshot::Sender<Result<(), NodeError>>,
    },
    Leave {
        reply: oneshot::Sender<()>,
    },
}

/// A handle to the agent: send it requests. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Agent {
    tx: mpsc::Sender<AgentMsg>,
}

impl Agent {
    /// Merges a peer's metadata and returns this node's (the pull half of push-pull).
    pub async fn sync(&self, state: pb::ClusterState) -> Option<pb::ClusterState> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(AgentMsg::Sync { state, reply }).await.ok()?;
        rx.await.ok()
    }

    /// Sets a key's replication vector, cluster-wide (gossiped to every node).
    pub async fn set_replication(
        &self,
        key: Bytes,
        vector: ReplicationVector,
    ) -> Result<(), NodeError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(AgentMsg::SetReplication { key, vector, reply })
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
}

struct AgentState {
    config: AgentConfig,
    membership: Membership,
    detector: membership::Detector,
    replication: Arc<ReplicationTable>,
    replication_digest: u64,
    leaving: bool,
    /// Gossip rounds run so far.
    rounds: u64,
    /// Fingerprint of what the last published view was built from.
    published: u64,
    version: u64,
    peers: HashMap<String, Connection>,
    /// Peers with an exchange under way.
    in_flight: std::collections::HashSet<String>,
    /// Where finished exchanges report.
    replies: mpsc::Sender<Reply>,
    snapshots: watch::Sender<Arc<Snapshot>>,
    hlc: lattice::Hlc,
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
    let now = system_now_ms();
    let mut membership = Membership::new();
    membership.insert_merge(
        config.node_id.clone(),
        Member {
            // A restart gets a higher incarnation, so it overrides "dead" and rejoins.
            incarnation: now,
            status: Status::Alive,
            heartbeat: 0,
            desc: config.desc.clone(),
        },
    );
    let replication = Arc::new(ReplicationTable::new());
    let view = Arc::new(state::build_view(
        0,
        &membership,
        &replication,
        config.default,
    ));
    let snapshot = Arc::new(Snapshot {
        view,
        members: state::membership_to_pb(&membership),
    });
    let (snapshots, watcher) = watch::channel(snapshot);
    let (tx, mut rx) = mpsc::channel(MAILBOX);
    let (replies, mut replies_rx) = mpsc::channel(MAILBOX);
    let mut agent = AgentState {
        in_flight: std::collections::HashSet::new(),
        replies,
        hlc: lattice::Hlc::new(fastrand::u64(..)),
        published: 0,
        config,
        membership,
        detector: membership::Detector::new(),
        replication,
        replication_digest: 0,
        leaving: false,
        rounds: 0,
        version: 0,
        peers: HashMap::new(),
        snapshots,
    };
    agent.published = agent.fingerprint();
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
                let mut tick = tokio::time::interval(agent.config.gossip_interval);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = tick.tick() => agent.round().await,
                        msg = rx.recv() => match msg {
                            Some(msg) => agent.handle(msg).await,
                            None => return,
                        },
                        Some(reply) = replies_rx.recv() => agent.on_reply(reply),
                        _ = shutdown.wait_for(|s| *s) => return,
                    }
                }
            });
        })?;
    Ok((Agent { tx }, watcher, thread))
}

impl AgentState {
    fn me(&self) -> &str {
        &self.config.node_id
    }

    /// This node's metadata as sent to a peer.
    fn state(&self, with_replication: bool) -> pb::ClusterState {
        pb::ClusterState {
            members: state::membership_to_pb(&self.membership),
            replication_digest: self.replication_digest,
            replication: if with_replication {
                state::replication_to_pb(&self.replication)
            } else {
                Vec::new()
            },
            has_replication: with_replication,
        }
    }

    /// Merges a peer's metadata. Returns true if anything changed.
    fn absorb(&mut self, state: &pb::ClusterState) -> bool {
        let mut incoming = Membership::new();
        merge_members(&mut incoming, &state.members);
        // A peer cannot change what this node says about itself, except to suspect it or
        // declare it dead (at its latest heartbeat: this node stalled) — refuted at once
        // with a new incarnation, before anything is published: a view without this node
        // would make its workers hand every key away.
        let mut changed = self.membership.merge(incoming);
        let me = self.config.node_id.clone();
        if !self.leaving
            && self
                .membership
                .get(&me)
                .is_some_and(|m| m.status != Status::Alive)
        {
            membership::beat(&mut self.membership, &me, system_now_ms(), false);
            changed = true;
        }
        if state.has_replication {
            let mut table = (*self.replication).clone();
            if merge_replication_pb(&mut table, &state.replication) {
                self.replication_digest = replication_digest(&table);
                self.replication = Arc::new(table);
                changed = true;
            }
        }
        changed
    }

    async fn handle(&mut self, msg: AgentMsg) {
        match msg {
            AgentMsg::Sync { state, reply } => {
                let differs = state.replication_digest != self.replication_digest;
                self.absorb(&state);
                let _ = reply.send(self.state(differs));
                self.publish();
            }
            AgentMsg::SetReplication { key, vector, reply } => {
                let result = self.set_replication(key, vector);
                // Published before answering, so the caller can wait for its workers.
                self.publish();
                let _ = reply.send(result);
            }
            AgentMsg::Leave { reply } => {
                self.leaving = true;
                membership::beat(
                    &mut self.membership,
                    &self.config.node_id,
                    system_now_ms(),
                    true,
                );
                self.publish();
                // Tell everyone now rather than at the next rounds.
                self.exchange(usize::MAX);
                // Give the announcements a moment to go out.
                tokio::time::sleep(3 * self.config.gossip_interval).await;
                let _ = reply.send(());
            }
        }
    }

    fn set_replication(&mut self, key: Bytes, vector: ReplicationVector) -> Result<(), NodeError> {
        if self.replication.len() >= self.config.max_replication_entries
            && !self.replication.contains_key(&key[..])
        {
            return Err(NodeError::InvalidArgument(format!(
                "too many explicit replication vectors (limit {})",
                self.config.max_replication_entries
            )));
        }
        let ts: Timestamp = self.hlc.tick(system_now_ms());
        let mut table = (*self.replication).clone();
        state::merge_replication(&mut table, Box::from(&key[..]), ts, vector);
        self.replication_digest = replication_digest(&table);
        self.replication = Arc::new(table);
        Ok(())
    }

    async fn round(&mut self) {
        let now = system_now_ms();
        let me = self.config.node_id.clone();
        membership::beat(&mut self.membership, &me, now, self.leaving);
        let changes = self
            .detector
            .check(&self.membership, &me, now, self.config.detector);
        for (id, _, status) in &changes {
            tracing::info!(node = %id, ?status, "failure detector");
        }
        membership::apply_changes(&mut self.membership, changes);
        self.exchange(self.config.fanout);
        self.rounds += 1;
        if self.rounds.is_multiple_of(DEAD_PROBE_ROUNDS) {
            self.probe_dead();
        }
        self.publish();
    }

    /// Contacts one random member believed dead. Without this a partition never heals:
    /// each side declares the other dead and then gossips only with the members it
    /// believes alive, and a node contacts its seeds only while it knows no live member —
    /// so once the network is back, nobody would ever talk across it again (e.g. a
    /// bootstrap node, which has no seeds, cut off from the rest). A member that is really
    /// gone costs one failed connection attempt every few rounds; members that left
    /// gracefully are not contacted.
    fn probe_dead(&mut self) {
        let dead: Vec<String> = self
            .membership
            .iter()
            .filter(|(id, m)| {
                *id != self.me() && m.status == Status::Dead && !m.desc.front.is_empty()
            })
            .map(|(_, m)| m.desc.front.clone())
            .collect();
        if dead.is_empty() {
            return;
        }
        let target = dead[fastrand::usize(..dead.len())].clone();
        self.sync_with(vec![target]);
    }

    /// Push-pull with up to `fanout` random members (or the seeds while none is known).
    /// Never waits on the network: each exchange runs in its own task and the answer comes
    /// back through the `replies` channel, so heartbeats keep their pace however slow a
    /// peer is.
    fn exchange(&mut self, fanout: usize) {
        let mut targets: Vec<String> = self
            .membership
            .iter()
            .filter(|(id, m)| *id != self.me() && m.status.in_ring() && !m.desc.front.is_empty())
            .map(|(_, m)| m.desc.front.clone())
            .collect();
        fastrand::shuffle(&mut targets);
        targets.truncate(fanout);
        if targets.is_empty() {
            let own = self
                .membership
                .get(self.me())
                .map(|m| m.desc.front.clone())
                .unwrap_or_default();
            targets = self
                .config
                .seeds
                .iter()
                .filter(|s| **s != own)
                .cloned()
                .collect();
        }
        self.sync_with(targets);
    }

    /// Starts a push-pull exchange with each of `targets` (front addresses) that has none
    /// under way.
    fn sync_with(&mut self, targets: Vec<String>) {
        let request = self.state(false);
        for addr in targets {
            if self.in_flight.contains(&addr) {
                // The previous exchange with it has not finished: don't pile up.
                continue;
            }
            self.in_flight.insert(addr.clone());
            let cached = self.peers.get(&addr).filter(|c| !c.is_broken()).cloned();
            let replies = self.replies.clone();
            let request = request.clone();
            tokio::spawn(async move {
                let conn = match cached {
                    Some(c) => Some(c),
                    None => tokio::time::timeout(SYNC_TIMEOUT, Connection::open(&addr))
                        .await
                        .ok()
                        .and_then(Result::ok),
                };
                let mut state = None;
                if let Some(conn) = &conn {
                    let req = pb::Request {
                        id: fastrand::u64(..),
                        op: Some(pb::request::Op::SyncCluster(pb::SyncCluster {
                            state: Some(request),
                        })),
                        ..Default::default()
                    };
                    match tokio::time::timeout(SYNC_TIMEOUT, conn.call(req)).await {
                        Ok(Ok(resp)) => {
                            if let Some(pb::response::Result::Cluster(s)) = resp.result {
                                state = Some(s);
                            }
                        }
                        Ok(Err(_)) => {}
                        // A silent peer (partitioned away) never breaks the socket; keeping
                        // it would make every later exchange wait on it, long after the
                        // network is back. The next exchange reconnects.
                        Err(_) => conn.abandon(),
                    }
                }
                let _ = replies.send(Reply { addr, conn, state }).await;
            });
        }
    }

    /// An exchange finished: keep its connection, merge what the peer said.
    fn on_reply(&mut self, reply: Reply) {
        self.in_flight.remove(&reply.addr);
        match reply.conn {
            Some(c) if !c.is_broken() => {
                self.peers.insert(reply.addr, c);
            }
            _ => {
                self.peers.remove(&reply.addr);
            }
        }
        if let Some(state) = reply.state {
            self.absorb(&state);
            self.publish();
        }
        // Connections to members that are gone are dropped (bounded by the membership).
        if self.peers.len() > self.membership.len() + self.config.seeds.len() {
            let known: Vec<String> = self
                .membership
                .iter()
                .map(|(_, m)| m.desc.front.clone())
                .chain(self.config.seeds.iter().cloned())
                .collect();
            self.peers.retain(|addr, _| known.contains(addr));
        }
    }

    /// What a view is built from: the ring members' descriptions and the replication table.
    fn fingerprint(&self) -> u64 {
        let nodes = state::ring_nodes(&self.membership);
        let text = format!("{nodes:?}");
        xxhash_rust::xxh3::xxh3_64(text.as_bytes()) ^ self.replication_digest
    }

    /// Publishes a new snapshot: a new view if the rings or vectors changed, and the
    /// members every time (heartbeats move).
    fn publish(&mut self) {
        let fingerprint = self.fingerprint();
        let current = self.snapshots.borrow().view.clone();
        let view = if fingerprint != self.published {
            self.published = fingerprint;
            self.version += 1;
            let v = state::build_view(
                self.version,
                &self.membership,
                &self.replication,
                self.config.default,
            );
            tracing::info!(
                version = v.version,
                nodes = v.view.tier_size(Tier::Memory),
                "new cluster view"
            );
            Arc::new(v)
        } else {
            current
        };
        let members = state::membership_to_pb(&self.membership);
        self.snapshots
            .send_replace(Arc::new(Snapshot { view, members }));
    }
}

/// A storage node's description for its agent.
pub fn storage_description(
    tier: Tier,
    front: String,
    resp: String,
    workers: Vec<String>,
    vnodes: u32,
) -> Description {
    Description {
        role: Role::Storage(tier),
        front,
        resp,
        workers,
        vnodes,
    }
}
