//! What a node's agent decides: its membership and replication table, the failure
//! detector, whom to exchange with, and the views it publishes. No I/O: the agent's thread
//! (`super`) carries out the exchanges this asks for and feeds back what peers said.

use std::sync::Arc;

use bytes::Bytes;
use lattice::{Lattice, Timestamp};
use placement::{ReplicationVector, Tier};
use tokio::sync::watch;
use wire::pb;

use super::super::membership::{self, Member, Membership, Status};
use super::super::state::{self, merge_members, merge_replication_pb, replication_digest};
use super::{AgentConfig, Snapshot};
use crate::clock::Clock;
use crate::error::NodeError;
use crate::view::ReplicationTable;

/// Every this many rounds, one member believed dead is contacted too (see
/// [`AgentState::targets`]).
const DEAD_PROBE_ROUNDS: u64 = 5;

/// Someone to exchange cluster metadata with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Target {
    /// A member, at its peer address.
    Peer(String),
    /// A seed, at its front address: ask it for the members first.
    Seed(String),
}

/// The agent's state.
pub(super) struct AgentState {
    pub(super) config: AgentConfig,
    membership: Membership,
    detector: membership::Detector,
    replication: Arc<ReplicationTable>,
    replication_digest: u64,
    leaving: bool,
    rounds: u64,
    /// Fingerprint of what the last published view was built from.
    published: u64,
    version: u64,
    snapshots: watch::Sender<Arc<Snapshot>>,
    hlc: lattice::Hlc,
    clock: Arc<dyn Clock + Send + Sync>,
    rng: fastrand::Rng,
}

impl AgentState {
    /// A node alone, with its first snapshot published.
    pub(super) fn new(
        config: AgentConfig,
        clock: Arc<dyn Clock + Send + Sync>,
        seed: u64,
    ) -> (AgentState, watch::Receiver<Arc<Snapshot>>) {
        let now = clock.wall_ms();
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
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut agent = AgentState {
            hlc: lattice::Hlc::new(rng.u64(..)),
            published: 0,
            config,
            membership,
            detector: membership::Detector::new(),
            replication,
            replication_digest: 0,
            leaving: false,
            rounds: 0,
            version: 0,
            snapshots,
            clock,
            rng,
        };
        agent.published = agent.fingerprint();
        (agent, watcher)
    }

    fn me(&self) -> &str {
        &self.config.node_id
    }

    /// This node's metadata as sent to a peer.
    pub(super) fn state(&self, with_replication: bool) -> pb::ClusterState {
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
    pub(super) fn absorb(&mut self, state: &pb::ClusterState) -> bool {
        let mut incoming = Membership::new();
        merge_members(
            &mut incoming,
            &state.members,
            &self.membership,
            self.clock.wall_ms(),
        );
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
            membership::beat(&mut self.membership, &me, self.clock.wall_ms(), false);
            changed = true;
        }
        if state.has_replication {
            let mut table = (*self.replication).clone();
            if merge_replication_pb(
                &mut table,
                &state.replication,
                self.config.max_replication_entries,
            ) {
                self.replication_digest = replication_digest(&table);
                self.replication = Arc::new(table);
                changed = true;
            }
        }
        changed
    }

    /// A peer's push (the serving half of push-pull): merge it, answer with this node's
    /// metadata (its replication table if the digests differ).
    pub(super) fn on_sync(&mut self, state: &pb::ClusterState) -> pb::ClusterState {
        let differs = state.replication_digest != self.replication_digest;
        self.absorb(state);
        let answer = self.state(differs);
        self.publish();
        answer
    }

    /// Sets a key's replication vector (published at once).
    pub(super) fn set_replication(
        &mut self,
        key: Bytes,
        vector: ReplicationVector,
    ) -> Result<(), NodeError> {
        if self.replication.len() >= self.config.max_replication_entries
            && !self.replication.contains_key(&key[..])
        {
            return Err(NodeError::InvalidArgument(format!(
                "too many explicit replication vectors (limit {})",
                self.config.max_replication_entries
            )));
        }
        let ts: Timestamp = self.hlc.tick(self.clock.wall_ms());
        let mut table = (*self.replication).clone();
        state::merge_replication(&mut table, Box::from(&key[..]), ts, vector);
        self.replication_digest = replication_digest(&table);
        self.replication = Arc::new(table);
        self.publish();
        Ok(())
    }

    /// Marks this node as leaving: out of its own rings at once. Returns everyone to tell.
    pub(super) fn leave(&mut self) -> Vec<Target> {
        self.leaving = true;
        let me = self.config.node_id.clone();
        membership::beat(&mut self.membership, &me, self.clock.wall_ms(), true);
        self.publish();
        self.targets(usize::MAX)
    }

    /// Removes a member declared dead for good (an operator's decision: it will not come
    /// back with its data). Its entry stays, as left, so no rumour revives it; tombstones
    /// held back for it can then be reclaimed.
    pub(super) fn forget(&mut self, id: &str) -> Result<(), NodeError> {
        let Some(m) = self.membership.get(id).cloned() else {
            return Err(NodeError::InvalidArgument(format!("no member {id:?}")));
        };
        if id == self.me() {
            return Err(NodeError::InvalidArgument(
                "a node cannot forget itself: use leave".into(),
            ));
        }
        if m.status != Status::Dead {
            return Err(NodeError::InvalidArgument(format!(
                "{id} is {:?}, not dead: only a member declared dead can be forgotten",
                m.status
            )));
        }
        let mut gone = m;
        gone.status = Status::Left;
        self.membership.insert_merge(id.to_string(), gone);
        self.publish();
        Ok(())
    }

    /// One gossip round: heartbeat, failure detection, and whom to exchange with.
    pub(super) fn round(&mut self) -> Vec<Target> {
        let now = self.clock.wall_ms();
        let me = self.config.node_id.clone();
        membership::beat(&mut self.membership, &me, now, self.leaving);
        let changes = self
            .detector
            .check(&self.membership, &me, now, self.config.detector);
        for (id, _, status) in &changes {
            tracing::info!(node = %id, ?status, "failure detector");
        }
        membership::apply_changes(&mut self.membership, changes);
        let mut targets = self.targets(self.config.fanout);
        self.rounds += 1;
        if self.rounds.is_multiple_of(DEAD_PROBE_ROUNDS) {
            targets.extend(self.probe_dead());
        }
        self.publish();
        targets
    }

    /// Up to `fanout` random members in the rings (none while none is known).
    pub(super) fn peers(&mut self, fanout: usize) -> Vec<Target> {
        self.targets(fanout)
            .into_iter()
            .filter(|t| matches!(t, Target::Peer(_)))
            .collect()
    }

    /// Up to `fanout` random members in the rings (or the seeds while none is known).
    fn targets(&mut self, fanout: usize) -> Vec<Target> {
        let mut peers: Vec<String> = self
            .membership
            .iter()
            .filter(|(id, m)| *id != self.me() && m.status.in_ring() && !m.desc.peer.is_empty())
            .map(|(_, m)| m.desc.peer.clone())
            .collect();
        peers.sort();
        self.rng.shuffle(&mut peers);
        peers.truncate(fanout);
        if !peers.is_empty() {
            return peers.into_iter().map(Target::Peer).collect();
        }
        let own = self
            .membership
            .get(self.me())
            .map(|m| m.desc.front.clone())
            .unwrap_or_default();
        self.config
            .seeds
            .iter()
            .filter(|s| **s != own)
            .cloned()
            .map(Target::Seed)
            .collect()
    }

    /// One random member believed dead. Without this a partition never heals: each side
    /// declares the other dead and then gossips only with the members it believes alive,
    /// and a node contacts its seeds only while it knows no live member — so once the
    /// network is back, nobody would ever talk across it again. A member that is really
    /// gone costs one failed connection attempt every few rounds; members that left are not
    /// contacted.
    fn probe_dead(&mut self) -> Option<Target> {
        let mut dead: Vec<String> = self
            .membership
            .iter()
            .filter(|(id, m)| {
                *id != self.me() && m.status == Status::Dead && !m.desc.peer.is_empty()
            })
            .map(|(_, m)| m.desc.peer.clone())
            .collect();
        if dead.is_empty() {
            return None;
        }
        dead.sort();
        Some(Target::Peer(dead[self.rng.usize(..dead.len())].clone()))
    }

    /// Members learned from a seed's topology (bootstrap): merged like any gossip.
    pub(super) fn learn(&mut self, members: &[pb::Member]) {
        let mut incoming = Membership::new();
        merge_members(
            &mut incoming,
            members,
            &self.membership,
            self.clock.wall_ms(),
        );
        if self.membership.merge(incoming) {
            self.publish();
        }
    }

    /// The peer addresses of every member, for the connection pool's bound.
    pub(super) fn peer_addrs(&self) -> Vec<String> {
        self.membership
            .iter()
            .map(|(_, m)| m.desc.peer.clone())
            .filter(|a| !a.is_empty())
            .collect()
    }

    /// Members known (the connection pool's bound).
    pub(super) fn members(&self) -> usize {
        self.membership.len()
    }

    /// What a view is built from: the ring members' descriptions, the members declared
    /// dead, and the replication table.
    fn fingerprint(&self) -> u64 {
        let nodes = state::ring_nodes(&self.membership);
        let dead = self
            .membership
            .iter()
            .filter(|(_, m)| m.status == Status::Dead)
            .count();
        let text = format!("{nodes:?} {dead}");
        xxhash_rust::xxh3::xxh3_64(text.as_bytes()) ^ self.replication_digest
    }

    /// Publishes a new snapshot: a new view if the rings, the dead or the vectors changed,
    /// and the members every time (heartbeats move).
    pub(super) fn publish(&mut self) {
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
                dead = v.dead,
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
