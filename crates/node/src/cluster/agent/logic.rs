//! What a node's agent decides: its membership and replication table, the failure
//! detector, whom to exchange with, and the views it publishes. No I/O: the agent's thread
//! (`super`) carries out the exchanges this asks for and feeds back what peers said.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use lattice::{Lattice, Timestamp};
use placement::{ReplicationVector, Tier};
use tokio::sync::watch;
use wire::pb;

use super::super::membership::{self, Member, Membership, Status};
use super::super::replication as sync;
use super::super::state::{self, merge_members};
use super::{AgentConfig, Snapshot};
use crate::clock::Clock;
use crate::error::NodeError;
use crate::vectors::{Entry, ReplicationTable};

/// Every this many rounds, one member believed dead is contacted too (see
/// [`AgentState::targets`]).
const DEAD_PROBE_ROUNDS: u64 = 5;
/// Every this many rounds, expired removals are dropped from the replication table.
const PURGE_ROUNDS: u64 = 64;

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
    replication: ReplicationTable,
    /// The bucket digests of each peer's table, from its last answer (by peer address):
    /// the next push to it carries the entries of the buckets that differ.
    peer_digests: HashMap<String, Vec<u64>>,
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
        let replication = ReplicationTable::new();
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
            peer_digests: HashMap::new(),
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

    /// This node's metadata as sent to a peer, with the given replication entries.
    fn state(&self, replication: Vec<pb::ReplicationEntry>) -> pb::ClusterState {
        pb::ClusterState {
            members: state::membership_to_pb(&self.membership),
            replication_digest: self.replication.digest(),
            has_replication: !replication.is_empty(),
            replication,
            replication_buckets: sync::buckets_to_pb(&self.replication),
        }
    }

    /// What this node pushes to the peer at `addr`: its metadata, with the replication
    /// entries of the buckets that differed in that peer's last answer.
    pub(super) fn push_state(&self, addr: &str) -> pb::ClusterState {
        let entries = match self.peer_digests.get(addr) {
            Some(theirs) => sync::entries_of(
                &self.replication,
                &sync::differing(&self.replication, theirs),
            ),
            None => Vec::new(),
        };
        self.state(entries)
    }

    /// A peer's answer to this node's push: merged, and its bucket digests kept for the
    /// next push to it.
    pub(super) fn absorb_answer(&mut self, addr: &str, state: &pb::ClusterState) {
        self.absorb(state);
        self.peer_digests
            .insert(addr.to_string(), state.replication_buckets.clone());
        if self.peer_digests.len() > self.membership.len() {
            let known = self.peer_addrs();
            self.peer_digests.retain(|a, _| known.contains(a));
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
        if !state.replication.is_empty() {
            changed |= sync::merge_pb(
                &mut self.replication,
                &state.replication,
                self.config.max_replication_entries,
                self.clock.wall_ms(),
            );
        }
        changed
    }

    /// A peer's push (the serving half of push-pull): merge it, answer with this node's
    /// metadata and its replication entries of the buckets that still differ.
    pub(super) fn on_sync(&mut self, state: &pb::ClusterState) -> pb::ClusterState {
        self.absorb(state);
        let differ = sync::differing(&self.replication, &state.replication_buckets);
        let answer = self.state(sync::entries_of(&self.replication, &differ));
        self.publish();
        answer
    }

    /// Sets a key's replication vector, or returns it to the default (`None`); published
    /// at once.
    pub(super) fn set_replication(
        &mut self,
        key: Bytes,
        vector: Option<ReplicationVector>,
        by_policy: bool,
    ) -> Result<(), NodeError> {
        if self.replication.stored() >= self.config.max_replication_entries
            && self.replication.entry(&key).is_none()
        {
            return Err(NodeError::InvalidArgument(format!(
                "too many explicit replication vectors (limit {})",
                self.config.max_replication_entries
            )));
        }
        let ts: Timestamp = self.hlc.tick(self.clock.wall_ms());
        self.replication.merge(
            &key,
            Entry {
                ts,
                vector,
                by_policy,
            },
        );
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
        if self.rounds.is_multiple_of(PURGE_ROUNDS) {
            self.replication.purge_removals(now);
        }
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
        xxhash_rust::xxh3::xxh3_64(text.as_bytes()) ^ self.replication.digest()
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prost::Message;

    use super::*;
    use crate::clock::ManualClock;
    use crate::cluster::membership::DetectorConfig;

    fn agent(id: &str) -> AgentState {
        let config = AgentConfig {
            cluster_secret: None,
            tls: None,
            node_id: id.into(),
            desc: super::super::storage_description(
                Tier::Memory,
                format!("{id}:7700"),
                format!("{id}:6380"),
                vec![format!("{id}:7701")],
                16,
                format!("{id}:17700"),
            ),
            seeds: Vec::new(),
            gossip_interval: Duration::from_millis(100),
            detector: DetectorConfig {
                suspect_after_ms: 1_000,
                dead_after_ms: 5_000,
            },
            fanout: 3,
            default: crate::view::default_vector(1, 1),
            max_replication_entries: usize::MAX,
        };
        let clock = Arc::new(ManualClock::new(1_000_000));
        AgentState::new(config, clock, 1).0
    }

    /// One push-pull exchange from `a` to `b`; returns the bytes both messages took.
    fn exchange(a: &mut AgentState, b: &mut AgentState) -> usize {
        let push = a.push_state("b:17700");
        let answer = b.on_sync(&push);
        a.absorb_answer("b:17700", &answer);
        a.publish();
        push.encoded_len() + answer.encoded_len()
    }

    fn vector(global: u32) -> ReplicationVector {
        crate::view::default_vector(global, 1)
    }

    #[test]
    fn a_change_among_many_vectors_travels_as_a_delta() {
        let (mut a, mut b) = (agent("a"), agent("b"));
        for i in 0..20_000u32 {
            a.set_replication(
                Bytes::copy_from_slice(&i.to_le_bytes()),
                Some(vector(2)),
                false,
            )
            .unwrap();
        }
        // The first exchanges carry the whole table (in bounded messages), then nothing.
        let mut first = 0;
        while a.replication.digest() != b.replication.digest() {
            exchange(&mut b, &mut a);
            exchange(&mut a, &mut b);
            first += 1;
            assert!(first < 10, "no convergence");
        }
        assert_eq!(b.replication.len(), 20_000);
        let quiet = exchange(&mut a, &mut b);
        assert!(quiet < 8_000, "{quiet} bytes for identical tables");
        // One key changes, and another goes back to the default: only their buckets
        // travel, and both nodes' views follow.
        a.set_replication(Bytes::from_static(b"hot"), Some(vector(3)), false)
            .unwrap();
        a.set_replication(Bytes::copy_from_slice(&7u32.to_le_bytes()), None, false)
            .unwrap();
        let before = b.snapshots.borrow().view.clone();
        exchange(&mut b, &mut a); // b learns a's digests, a learns b's
        let delta = exchange(&mut a, &mut b);
        assert!(delta < 20_000, "{delta} bytes for two changes");
        assert_eq!(a.replication.digest(), b.replication.digest());
        let after = b.snapshots.borrow().view.clone();
        assert_eq!(after.vector(b"hot"), vector(3));
        assert_eq!(after.vector(&7u32.to_le_bytes()), vector(1));
        let mut changed = after.replication.changed_keys(&before.replication);
        changed.sort();
        assert_eq!(changed.len(), 2, "{changed:?}");
    }
}
