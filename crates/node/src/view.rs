//! What a worker routes by: the [`ViewState`] — the rings of the storage nodes, the
//! explicit replication vectors and the defaults — immutable and shared by every worker of
//! a node; a membership or replication change produces a new one.

use placement::{ClusterView, NodeKey, Replica, Replication, ReplicationVector};

pub use crate::vectors::ReplicationTable;

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
    /// Explicit vectors (a persistent map: cloning it is O(1)).
    pub replication: ReplicationTable,
    /// The vector of keys without an explicit one.
    pub default: ReplicationVector,
    /// Storage members declared dead (not those that left): they may come back with old
    /// data for any key, so no tombstone is reclaimed while there are any.
    pub dead: usize,
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
            replication: ReplicationTable::new(),
            default: default_vector(default_global, default_local),
            dead: 0,
        }
    }

    /// The replication vector of `key`.
    #[inline]
    pub fn vector(&self, key: &[u8]) -> ReplicationVector {
        if !self.replication.is_empty() {
            if let Some(v) = self.replication.get(key) {
                return v;
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
            .filter_map(|(key, e)| e.vector.map(|v| (key, v, e.by_policy)))
            .take(max)
            .map(|(key, v, by_policy)| wire::pb::SetReplication {
                key: bytes::Bytes::copy_from_slice(key),
                global: v.memory.global,
                local: v.memory.local,
                disk_global: Some(v.disk.global),
                disk_local: Some(v.disk.local),
                reset: false,
                by_policy,
            })
            .collect()
    }

    /// True if `replica` holds `key`.
    pub fn is_replica(&self, key: &[u8], replica: Replica) -> bool {
        self.view.is_replica(key, &self.vector(key), replica)
    }

    /// The native (client) address of a replica.
    pub fn addr(&self, replica: Replica) -> Option<&str> {
        self.view.addr(replica)
    }

    /// The peer address of a node (where replication between nodes goes).
    pub fn peer_addr(&self, node: NodeKey) -> Option<&str> {
        self.view
            .node(node)
            .map(|n| n.peer.as_str())
            .filter(|a| !a.is_empty())
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
            replication,
            default,
            dead: 0,
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
            peer: String::new(),
            vnodes,
            placement: placement::PLACEMENT_HASH_TAGS,
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
            dead: 0,
        }
    }

    /// This view with the hash-tag rule in force or not (whatever its members advertise):
    /// where keys were placed under the other rule. Its `rings` differs from this view's
    /// when the rule does, so comparing the two moves the keys whose placement differs.
    pub fn under_rule(&self, hash_tags: bool) -> ViewState {
        /// Marks a fingerprint whose rule was flipped ("hashtags", little-endian).
        const RULE_FLIPPED: u64 = 0x7367_6174_6873_6168;
        let flipped = hash_tags != self.view.hash_tags();
        ViewState {
            version: self.version,
            rings: if flipped {
                self.rings ^ RULE_FLIPPED
            } else {
                self.rings
            },
            view: self.view.clone().with_hash_tags(hash_tags),
            replication: self.replication.clone(),
            default: self.default,
            dead: self.dead,
        }
    }

    /// True if `node` is in the rings.
    pub fn has_node(&self, node: NodeKey) -> bool {
        self.view.node(node).is_some()
    }

    /// Every worker that must hold a tombstone of `key` before it is reclaimed: its
    /// replicas. `None` while a member is declared dead (it may come back with an older
    /// write of the key).
    pub fn reclaim_replicas(&self, key: &[u8]) -> Option<Vec<Replica>> {
        (self.dead == 0).then(|| self.replicas(key))
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

/// Fingerprint of a set of ring members: ids, tiers, worker counts and vnodes, order-free,
/// and whether the hash-tag rule is in force among them (a change of rule moves keys as a
/// change of members does; the fingerprint of members without the rule is the one of
/// versions before it).
pub fn rings_fingerprint(nodes: &[placement::NodeInfo]) -> u64 {
    let mut parts: Vec<String> = nodes
        .iter()
        .map(|n| format!("{}|{:?}|{}|{}", n.id, n.tier, n.workers.len(), n.vnodes))
        .collect();
    parts.sort();
    if placement::hash_tags_in_force(nodes) {
        parts.push("hash-tags".to_string());
    }
    xxhash_rust::xxh3::xxh3_64(parts.join("\n").as_bytes())
}

/// The replication vector a `SetReplication` asks for, checked against `view`: factors
/// within the tiers' sizes, at least one replica somewhere.
pub fn requested_vector(
    view: &ViewState,
    r: &wire::pb::SetReplication,
) -> Result<ReplicationVector, crate::error::NodeError> {
    use crate::error::NodeError;
    let nodes = view.view.tier_size(placement::Tier::Memory);
    let disk_nodes = view.view.tier_size(placement::Tier::Disk);
    let max_workers = view
        .view
        .nodes()
        .map(|(_, n)| n.workers.len())
        .max()
        .unwrap_or(0);
    let default_disk = view.default.disk;
    let disk_global = r.disk_global.unwrap_or(default_disk.global);
    if r.global > 0 && r.local == 0 {
        return Err(NodeError::InvalidArgument(
            "local replication must be at least 1".into(),
        ));
    }
    if r.global == 0 && (disk_global == 0 || disk_nodes == 0) {
        return Err(NodeError::InvalidArgument(
            "a key needs a replica: global replication 0 (out of memory) needs disk \
             replication of at least 1 and a disk-tier node"
                .into(),
        ));
    }
    // The cluster's own default disk factor is always accepted (placement caps it at the
    // disk nodes there are, as for keys with the default vector): a client that sends a
    // key's whole vector back with one factor changed (`latticekv replicate --global 2`)
    // sends it even on a cluster without a disk tier.
    if let Some(d) = r.disk_global.filter(|&d| d != default_disk.global) {
        if d as usize > disk_nodes {
            return Err(NodeError::InvalidArgument(format!(
                "disk replication {d} exceeds the {disk_nodes} node(s) of the disk tier"
            )));
        }
    }
    if r.global as usize > nodes {
        return Err(NodeError::InvalidArgument(format!(
            "global replication {} exceeds the {nodes} node(s) of the memory tier",
            r.global
        )));
    }
    if r.local as usize > max_workers {
        return Err(NodeError::InvalidArgument(format!(
            "local replication {} exceeds the node's {max_workers} workers",
            r.local
        )));
    }
    Ok(ReplicationVector {
        memory: Replication {
            global: r.global,
            local: r.local.max(1),
        },
        disk: Replication {
            global: disk_global,
            local: r.disk_local.unwrap_or(default_disk.local).max(1),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(global: u32, disk_global: Option<u32>) -> wire::pb::SetReplication {
        wire::pb::SetReplication {
            key: bytes::Bytes::from_static(b"k"),
            global,
            local: 1,
            disk_global,
            disk_local: Some(1),
            ..Default::default()
        }
    }

    #[test]
    fn the_default_disk_factor_is_accepted_without_a_disk_tier() {
        let mut default = default_vector(1, 1);
        default.disk.global = 1;
        let node = |id: &str| placement::NodeInfo {
            id: id.into(),
            tier: placement::Tier::Memory,
            workers: vec![format!("{id}/0")],
            front: String::new(),
            resp: String::new(),
            peer: String::new(),
            vnodes: 16,
            placement: placement::PLACEMENT_HASH_TAGS,
        };
        let view = ViewState::of(vec![node("a"), node("b")], ReplicationTable::new(), default);
        let v = requested_vector(&view, &request(2, Some(1))).unwrap();
        assert_eq!((v.memory.global, v.disk.global), (2, 1));
        // Any other disk factor beyond the disk tier is still refused.
        let e = requested_vector(&view, &request(2, Some(2))).unwrap_err();
        assert!(e.to_string().contains("disk replication 2"), "{e}");
    }
}
