//! The cluster: membership, the views workers route by, and the agent that gossips them.
//!
//! # Layout
//! - [`membership`]: the membership lattice and the failure detector (pure).
//! - [`state`]: cluster metadata as gossiped — membership plus the replication table — and
//!   its protobuf form.
//! - [`agent`]: the per-node task that gossips cluster metadata with peers, detects failures
//!   and hands every worker a fresh [`ViewState`] when the rings change.
//!
//! A [`ViewState`] is what a worker routes by: the [`ClusterView`] (rings of the storage
//! nodes in the memory tier), the explicit replication vectors, the defaults, and which
//! replica this worker is.

pub mod agent;
pub mod membership;
pub mod state;

use std::sync::Arc;

use hashbrown::HashMap;
use lattice::{Blob, Timestamp};
use placement::{ClusterView, NodeKey, Replica, Replication, ReplicationVector};

/// Explicit replication vectors: key → (when set, vector). The newest setting wins.
pub type ReplicationTable = HashMap<Blob, (Timestamp, ReplicationVector)>;

/// Everything a worker needs to place keys, immutable and shared (`Arc`) by all workers; a
/// membership or replication change produces a new one.
#[derive(Debug)]
pub struct ViewState {
    /// Increases with every new view a node builds (local to the node).
    pub version: u64,
    /// Fingerprint of the rings' members (ids, workers, vnodes): equal fingerprints mean
    /// the same placement of every key with the same vector.
    pub rings: u64,
    /// The rings.
    pub view: ClusterView,
    /// Explicit vectors.
    pub replication: Arc<ReplicationTable>,
    /// The vector of keys without an explicit one.
    pub default: ReplicationVector,
}

impl ViewState {
    /// A view of one node with `workers` workers and no explicit vectors.
    pub fn standalone(
        node: placement::NodeInfo,
        default_local: u32,
        default_global: u32,
    ) -> ViewState {
        ViewState {
            version: 0,
            rings: 0,
            view: ClusterView::single(node),
            replication: Arc::new(ReplicationTable::new()),
            default: default_vector(default_global, default_local),
        }
    }

    /// The replication vector of `key`.
    #[inline]
    pub fn vector(&self, key: &[u8]) -> ReplicationVector {
        if !self.replication.is_empty() {
            if let Some((_, v)) = self.replication.get(key) {
                return *v;
            }
        }
        self.default
    }

    /// Every replica of `key` (memory tier first, primary first): where it is stored and
    /// gossiped.
    pub fn replicas(&self, key: &[u8]) -> Vec<Replica> {
        self.view.replicas(key, &self.vector(key))
    }

    /// The replicas that serve requests for `key` (memory tier, or disk for a key with no
    /// memory replica).
    pub fn serving_replicas(&self, key: &[u8]) -> Vec<Replica> {
        self.view.serving_replicas(key, &self.vector(key))
    }

    /// The explicit vectors as they appear in a `Topology` (at most `max`).
    pub fn topology_vectors(&self, max: usize) -> Vec<wire::pb::SetReplication> {
        self.replication
            .iter()
            .take(max)
            .map(|(key, (_, v))| wire::pb::SetReplication {
                key: bytes::Bytes::copy_from_slice(key),
                global: v.memory.global,
                local: v.memory.local,
                disk_global: Some(v.disk.global),
                disk_local: Some(v.disk.local),
            })
            .collect()
    }

    /// True if `replica` holds `key`.
    pub fn is_replica(&self, key: &[u8], replica: Replica) -> bool {
        self.view.is_replica(key, &self.vector(key), replica)
    }

    /// The native address of a replica.
    pub fn addr(&self, replica: Replica) -> Option<&str> {
        self.view.addr(replica)
    }

    /// A view of the given storage nodes, with explicit vectors (tests, simulation).
    pub fn of(
        nodes: Vec<placement::NodeInfo>,
        replication: ReplicationTable,
        default: ReplicationVector,
    ) -> ViewState {
        let rings = rings_fingerprint(&nodes);
        ViewState {
            version: 0,
            rings,
            view: ClusterView::new(nodes),
            replication: Arc::new(replication),
            default,
        }
    }

    /// A view of one node with `workers` workers and no explicit vectors (benchmarks, tests:
    /// worker addresses are placeholders).
    pub fn single_node(
        node_id: &str,
        workers: usize,
        vnodes: u32,
        default: ReplicationVector,
    ) -> ViewState {
        let node = placement::NodeInfo {
            id: node_id.to_string(),
            tier: placement::Tier::Memory,
            workers: (0..workers)
                .map(|w| format!("{node_id}/worker/{w}"))
                .collect(),
            front: String::new(),
            resp: String::new(),
            vnodes,
        };
        ViewState::of(vec![node], ReplicationTable::new(), default)
    }

    /// This view without `node` (where its keys lived before it joined).
    pub fn without_node(&self, node: NodeKey) -> ViewState {
        let nodes: Vec<placement::NodeInfo> = self
            .view
            .nodes()
            .filter(|(key, _)| **key != node)
            .map(|(_, info)| (**info).clone())
            .collect();
        ViewState {
            version: self.version,
            rings: rings_fingerprint(&nodes),
            view: ClusterView::new(nodes),
            replication: self.replication.clone(),
            default: self.default,
        }
    }

    /// True if `node` is in the rings.
    pub fn has_node(&self, node: NodeKey) -> bool {
        self.view.node(node).is_some()
    }
}

/// The default vector: `global` nodes × `local` workers in memory, nothing on disk.
pub fn default_vector(global: u32, local: u32) -> ReplicationVector {
    ReplicationVector {
        memory: Replication {
            global: global.max(1),
            local: local.max(1),
        },
        disk: Replication {
            global: 0,
            local: 0,
        },
    }
}

/// The cluster's default vector from a node's configuration: memory factors as
/// [`default_vector`], plus `default_disk_replication` disk nodes (one worker each).
pub fn configured_vector(config: &crate::config::NodeConfig) -> ReplicationVector {
    let mut v = default_vector(
        config.cluster.default_global_replication,
        config.default_local_replication,
    );
    v.disk = Replication {
        global: config.cluster.default_disk_replication,
        local: 1,
    };
    v
}

/// Fingerprint of a set of ring members: ids, tiers, worker counts and vnodes, order-free.
pub fn rings_fingerprint(nodes: &[placement::NodeInfo]) -> u64 {
    let mut parts: Vec<String> = nodes
        .iter()
        .map(|n| format!("{}|{:?}|{}|{}", n.id, n.tier, n.workers.len(), n.vnodes))
        .collect();
    parts.sort();
    xxhash_rust::xxh3::xxh3_64(parts.join("\n").as_bytes())
}
