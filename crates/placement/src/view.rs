//! A cluster view: the storage nodes of each tier and where every key lives among them.
//!
//! Two levels, as in Anna: a *global ring* per tier over nodes (label: the node id, with
//! virtual nodes) picks a key's nodes, and each node's *local ring* over its workers picks
//! the workers on that node. A key's replicas in a tier are the first `global` distinct nodes
//! clockwise from its hash on the tier's global ring and, on each of them, the first `local`
//! distinct workers on that node's local ring. Factors above the member counts are capped.
//!
//! Nodes are identified by [`NodeKey`], the stable hash of their id, so replica sets computed
//! under two views can be compared.
//!
//! Both rings place a key by [`placement_hash`]: the hash of its Redis hash tag (`{…}`) when
//! the view's hash-tag rule is in force, else of the whole key. The rule is in force when
//! every storage node of the view advertises [`PLACEMENT_HASH_TAGS`] (a view with an older
//! node keeps the whole-key rule, which that node applies).

use std::collections::HashMap;
use std::sync::Arc;

use crate::hash::{placement_hash, HASH_SEED, PLACEMENT_HASH_TAGS};
use crate::replication::{Replication, ReplicationVector, Tier};
use crate::ring::Ring;

/// Stable numeric identity of a node: `xxh3_64(node id, HASH_SEED)`.
pub type NodeKey = u64;

/// The key of the node named `id`.
pub fn node_key(id: &str) -> NodeKey {
    xxhash_rust::xxh3::xxh3_64_with_seed(id.as_bytes(), HASH_SEED)
}

/// One worker of one node: where a replica lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Replica {
    /// The node.
    pub node: NodeKey,
    /// The worker on that node.
    pub worker: u32,
}

/// What a view knows about one storage node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's id (its global-ring label).
    pub id: String,
    /// Its tier.
    pub tier: Tier,
    /// Native address of each worker.
    pub workers: Vec<String>,
    /// Native front address.
    pub front: String,
    /// RESP address.
    pub resp: String,
    /// Peer address: where other nodes send replication, hand-off, anti-entropy and
    /// membership (empty if unknown, e.g. to a client).
    pub peer: String,
    /// Virtual nodes per worker on its local ring (and per node on the global ring).
    pub vnodes: u32,
    /// The placement version the node advertises ([`crate::hash::PLACEMENT_WHOLE_KEY`],
    /// [`PLACEMENT_HASH_TAGS`]; 0 from a node too old to advertise one: whole keys).
    pub placement: u32,
}

/// The storage nodes of the cluster and the rings built from them.
#[derive(Clone, Debug)]
pub struct ClusterView {
    /// Nodes by key.
    nodes: HashMap<NodeKey, Arc<NodeInfo>>,
    /// Global ring per tier.
    global: HashMap<Tier, Ring<NodeKey>>,
    /// Local rings, shared between nodes with the same worker count and vnodes.
    local: HashMap<NodeKey, Arc<Ring<u32>>>,
    /// The hash-tag rule is in force: every node advertises [`PLACEMENT_HASH_TAGS`].
    hash_tags: bool,
}

impl ClusterView {
    /// A view of the given storage nodes.
    pub fn new(nodes: impl IntoIterator<Item = NodeInfo>) -> ClusterView {
        let mut view = ClusterView {
            nodes: HashMap::new(),
            global: HashMap::new(),
            local: HashMap::new(),
            hash_tags: false,
        };
        let mut shapes: HashMap<(usize, u32), Arc<Ring<u32>>> = HashMap::new();
        let mut sorted: Vec<NodeInfo> = nodes.into_iter().collect();
        // Insertion order does not change ring positions, but keep views built from the
        // same members identical anyway.
        sorted.sort_by(|a, b| a.id.cmp(&b.id));
        view.hash_tags = hash_tags_in_force(&sorted);
        for info in sorted {
            let key = node_key(&info.id);
            let shape = (info.workers.len(), info.vnodes);
            let local = shapes
                .entry(shape)
                .or_insert_with(|| Arc::new(Ring::<u32>::local(shape.0 as u32, shape.1)))
                .clone();
            view.global
                .entry(info.tier)
                .or_default()
                .add(key, info.id.as_bytes(), info.vnodes);
            view.local.insert(key, local);
            view.nodes.insert(key, Arc::new(info));
        }
        view
    }

    /// A view of one node (a standalone server).
    pub fn single(info: NodeInfo) -> ClusterView {
        ClusterView::new([info])
    }

    /// True if the hash-tag rule is in force: keys with a `{tag}` are placed by the tag.
    pub fn hash_tags(&self) -> bool {
        self.hash_tags
    }

    /// This view with the hash-tag rule in force or not, whatever its nodes advertise (the
    /// placement a node's data may have been written under; tests).
    pub fn with_hash_tags(mut self, hash_tags: bool) -> ClusterView {
        self.hash_tags = hash_tags;
        self
    }

    /// Position of `key` on this view's rings ([`placement_hash`] under its rule).
    #[inline]
    pub fn key_hash(&self, key: &[u8]) -> u64 {
        placement_hash(key, self.hash_tags)
    }

    /// The node with key `node`.
    pub fn node(&self, node: NodeKey) -> Option<&Arc<NodeInfo>> {
        self.nodes.get(&node)
    }

    /// All nodes, in no particular order.
    pub fn nodes(&self) -> impl Iterator<Item = (&NodeKey, &Arc<NodeInfo>)> {
        self.nodes.iter()
    }

    /// Number of nodes of `tier`.
    pub fn tier_size(&self, tier: Tier) -> usize {
        self.global.get(&tier).map_or(0, Ring::len)
    }

    /// The native address of a replica.
    pub fn addr(&self, replica: Replica) -> Option<&str> {
        self.nodes
            .get(&replica.node)?
            .workers
            .get(replica.worker as usize)
            .map(String::as_str)
    }

    /// Calls `f` on each replica of the key with hash `hash` in `tier` under `replication`,
    /// node by node in ring order, primary first. A `global` factor of 0 means no replica
    /// in that tier.
    pub fn for_each_replica(
        &self,
        hash: u64,
        tier: Tier,
        replication: Replication,
        mut f: impl FnMut(Replica),
    ) {
        if replication.global == 0 {
            return;
        }
        let Some(ring) = self.global.get(&tier) else {
            return;
        };
        ring.for_each_replica(hash, replication.global as usize, |&node| {
            if let Some(local) = self.local.get(&node) {
                local.for_each_replica(hash, replication.local.max(1) as usize, |&worker| {
                    f(Replica { node, worker })
                });
            }
        });
    }

    /// Calls `f` on every replica of the key with hash `hash` under `vector`: the memory
    /// tier's first (primary first), then the disk tier's.
    pub fn for_each_replica_all(
        &self,
        hash: u64,
        vector: &ReplicationVector,
        mut f: impl FnMut(Replica),
    ) {
        self.for_each_replica(hash, Tier::Memory, vector.memory, &mut f);
        self.for_each_replica(hash, Tier::Disk, vector.disk, &mut f);
    }

    /// The first replica [`for_each_replica_all`](Self::for_each_replica_all) would give:
    /// the key's primary (its first memory-tier replica, or its first disk-tier replica if
    /// it has none in memory). Walks only what it needs to: asked once per key a write
    /// brings to life.
    pub fn first_replica(&self, hash: u64, vector: &ReplicationVector) -> Option<Replica> {
        self.first_in_tier(hash, Tier::Memory, vector.memory)
            .or_else(|| self.first_in_tier(hash, Tier::Disk, vector.disk))
    }

    /// The first replica of `hash` in `tier` under `replication`.
    fn first_in_tier(&self, hash: u64, tier: Tier, replication: Replication) -> Option<Replica> {
        if replication.global == 0 {
            return None;
        }
        let ring = self.global.get(&tier)?;
        let mut first = None;
        // A node without a local ring places nothing there: the next node's first worker is
        // then the first replica, as in `for_each_replica`.
        ring.for_each_replica(hash, replication.global as usize, |&node| {
            if first.is_none() {
                first = self
                    .local
                    .get(&node)
                    .and_then(|local| local.primary(hash))
                    .map(|&worker| Replica { node, worker });
            }
        });
        first
    }

    /// Every replica of `key` under `vector`, memory tier first: the workers that store it
    /// and that its writes are gossiped to.
    pub fn replicas(&self, key: &[u8], vector: &ReplicationVector) -> Vec<Replica> {
        let mut out = Vec::new();
        self.for_each_replica_all(self.key_hash(key), vector, |r| out.push(r));
        out
    }

    /// The replicas that serve requests for `key`: its memory-tier replicas, or its
    /// disk-tier replicas if it has none in memory (a cold key).
    pub fn serving_replicas(&self, key: &[u8], vector: &ReplicationVector) -> Vec<Replica> {
        let hash = self.key_hash(key);
        let mut out = Vec::new();
        self.for_each_replica(hash, Tier::Memory, vector.memory, |r| out.push(r));
        if out.is_empty() {
            self.for_each_replica(hash, Tier::Disk, vector.disk, |r| out.push(r));
        }
        out
    }

    /// True if `replica` is one of `key`'s replicas (any tier) under `vector`.
    pub fn is_replica(&self, key: &[u8], vector: &ReplicationVector, replica: Replica) -> bool {
        let mut found = false;
        self.for_each_replica_all(self.key_hash(key), vector, |r| found |= r == replica);
        found
    }

    /// The fraction of the hash space each node of `tier` is primary for (ring ownership,
    /// for status output).
    pub fn ownership(&self, tier: Tier) -> Vec<(NodeKey, f64)> {
        let Some(ring) = self.global.get(&tier) else {
            return Vec::new();
        };
        ring.ownership()
    }
}

/// True if the hash-tag rule is in force among `nodes`: there is one, and every one
/// advertises [`PLACEMENT_HASH_TAGS`] or later.
pub fn hash_tags_in_force(nodes: &[NodeInfo]) -> bool {
    !nodes.is_empty() && nodes.iter().all(|n| n.placement >= PLACEMENT_HASH_TAGS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(id: &str, workers: usize) -> NodeInfo {
        NodeInfo {
            id: id.to_string(),
            tier: Tier::Memory,
            workers: (0..workers).map(|w| format!("{id}:{w}")).collect(),
            front: format!("{id}:front"),
            resp: format!("{id}:resp"),
            peer: String::new(),
            vnodes: 64,
            placement: PLACEMENT_HASH_TAGS,
        }
    }

    fn vector(global: u32, local: u32) -> ReplicationVector {
        ReplicationVector {
            memory: Replication { global, local },
            disk: Replication::default(),
        }
    }

    fn disk_node(id: &str, workers: usize) -> NodeInfo {
        NodeInfo {
            tier: Tier::Disk,
            ..node(id, workers)
        }
    }

    #[test]
    fn tiers_memory_replicas_first_then_disk_and_cold_keys_served_from_disk() {
        let view = ClusterView::new([
            node("m1", 2),
            node("m2", 2),
            disk_node("d1", 2),
            disk_node("d2", 2),
        ]);
        let is_disk = |r: &Replica| view.node(r.node).unwrap().tier == Tier::Disk;
        let both = ReplicationVector {
            memory: Replication::ONE,
            disk: Replication {
                global: 2,
                local: 1,
            },
        };
        for i in 0..200 {
            let key = format!("key{i}");
            let all = view.replicas(key.as_bytes(), &both);
            assert_eq!(all.len(), 3, "{key}");
            let hash = view.key_hash(key.as_bytes());
            assert_eq!(view.first_replica(hash, &both), Some(all[0]), "{key}");
            assert!(!is_disk(&all[0]) && is_disk(&all[1]) && is_disk(&all[2]));
            // Requests go to memory; the disk replicas still count as replicas.
            assert_eq!(view.serving_replicas(key.as_bytes(), &both), vec![all[0]]);
            assert!(all
                .iter()
                .all(|r| view.is_replica(key.as_bytes(), &both, *r)));
        }
        let cold = ReplicationVector {
            memory: Replication {
                global: 0,
                local: 1,
            },
            disk: Replication::ONE,
        };
        let r = view.serving_replicas(b"cold", &cold);
        assert_eq!(r.len(), 1);
        assert!(is_disk(&r[0]));
        assert_eq!(view.replicas(b"cold", &cold), r);
        assert_eq!(
            view.first_replica(view.key_hash(b"cold"), &cold),
            Some(r[0])
        );
        // No disk nodes: a disk factor places nothing.
        let memory_only = ClusterView::new([node("m1", 2)]);
        assert_eq!(memory_only.replicas(b"k", &both).len(), 1);
        assert!(memory_only.replicas(b"cold", &cold).is_empty());
        let hash = memory_only.key_hash(b"cold");
        assert_eq!(memory_only.first_replica(hash, &cold), None);
    }

    #[test]
    fn replicas_are_distinct_nodes_then_workers() {
        let view = ClusterView::new([node("a", 2), node("b", 2), node("c", 2)]);
        let r = view.replicas(b"key", &vector(2, 2));
        assert_eq!(r.len(), 4);
        let nodes: std::collections::BTreeSet<_> = r.iter().map(|x| x.node).collect();
        assert_eq!(nodes.len(), 2);
        // Capped at the cluster's size.
        assert_eq!(view.replicas(b"key", &vector(9, 9)).len(), 6);
        for rep in &r {
            assert!(view.is_replica(b"key", &vector(2, 2), *rep));
            assert!(view.addr(*rep).is_some());
        }
    }

    #[test]
    fn views_agree_whatever_the_order_and_spread_keys() {
        let v1 = ClusterView::new([node("a", 1), node("b", 1), node("c", 1)]);
        let v2 = ClusterView::new([node("c", 1), node("a", 1), node("b", 1)]);
        let mut counts: HashMap<NodeKey, usize> = HashMap::new();
        for i in 0..30_000 {
            let k = format!("k{i}");
            let a = v1.replicas(k.as_bytes(), &vector(1, 1));
            assert_eq!(a, v2.replicas(k.as_bytes(), &vector(1, 1)));
            *counts.entry(a[0].node).or_default() += 1;
        }
        for c in counts.values() {
            assert!((7_000..=13_000).contains(c), "{counts:?}");
        }
        let total: f64 = v1.ownership(Tier::Memory).iter().map(|(_, f)| f).sum();
        assert!((total - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_joining_node_takes_only_its_share() {
        let before = ClusterView::new([node("a", 1), node("b", 1), node("c", 1)]);
        let after = ClusterView::new([node("a", 1), node("b", 1), node("c", 1), node("d", 1)]);
        let d = node_key("d");
        let mut moved = 0;
        for i in 0..20_000 {
            let k = format!("k{i}");
            let old = before.replicas(k.as_bytes(), &vector(1, 1))[0];
            let new = after.replicas(k.as_bytes(), &vector(1, 1))[0];
            if old != new {
                assert_eq!(new.node, d, "keys only move to the new node");
                moved += 1;
            }
        }
        assert!((3_500..=6_500).contains(&moved), "{moved}");
    }

    /// A key whose bytes between `{` and `}` are `tag`, with arbitrary text around.
    fn tagged(prefix: &[u8], tag: &[u8], suffix: &[u8]) -> Vec<u8> {
        let mut k = prefix
            .iter()
            .copied()
            .filter(|&b| b != b'{')
            .collect::<Vec<u8>>();
        k.push(b'{');
        k.extend_from_slice(tag);
        k.push(b'}');
        k.extend_from_slice(suffix);
        k
    }

    proptest! {
        /// `first_replica` is the first of `for_each_replica_all`, for any factors (zero
        /// included) in a view with both tiers.
        #[test]
        fn first_replica_is_the_first_of_all(
            key in proptest::collection::vec(any::<u8>(), 0..12),
            memory in (0u32..4, 0u32..4),
            disk in (0u32..3, 0u32..3),
        ) {
            let view = ClusterView::new([
                node("a", 4), node("b", 3), node("c", 1), disk_node("d1", 2), disk_node("d2", 2),
            ]);
            let v = ReplicationVector {
                memory: Replication { global: memory.0, local: memory.1 },
                disk: Replication { global: disk.0, local: disk.1 },
            };
            let hash = view.key_hash(&key);
            prop_assert_eq!(view.first_replica(hash, &v), view.replicas(&key, &v).first().copied());
        }

        /// Under the rule, keys sharing a tag have the same replicas (nodes and workers), in
        /// every tier and with any replication; a view with one older node keeps the
        /// whole-key rule.
        #[test]
        fn tagged_keys_share_nodes_and_workers(
            tag in proptest::collection::vec(any::<u8>().prop_filter("no }", |b| *b != b'}'), 1..8),
            keys in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..6),
                 proptest::collection::vec(any::<u8>(), 0..6)), 2..6),
            global in 1u32..3,
            local in 1u32..3,
        ) {
            let view = ClusterView::new([
                node("a", 4), node("b", 3), node("c", 4), disk_node("d1", 2), disk_node("d2", 2),
            ]);
            prop_assert!(view.hash_tags());
            let v = ReplicationVector {
                memory: Replication { global, local },
                disk: Replication { global: 1, local: 1 },
            };
            let first = view.replicas(&tagged(&keys[0].0, &tag, &keys[0].1), &v);
            prop_assert!(!first.is_empty());
            for (prefix, suffix) in &keys[1..] {
                let key = tagged(prefix, &tag, suffix);
                prop_assert_eq!(&view.replicas(&key, &v), &first);
                prop_assert_eq!(view.serving_replicas(&key, &v), view.serving_replicas(&tag_only(&tag), &v));
            }
            // One node without the version: whole keys, as that node places them.
            let mixed = ClusterView::new([
                node("a", 4), NodeInfo { placement: 0, ..node("b", 3) }, node("c", 4),
            ]);
            prop_assert!(!mixed.hash_tags());
            for (prefix, suffix) in &keys {
                let key = tagged(prefix, &tag, suffix);
                prop_assert_eq!(mixed.key_hash(&key), crate::hash::key_hash(&key));
            }
        }
    }

    /// The key `tag` itself: under the rule a tagged key lives with it (as in Redis, where
    /// `{t}x` and `t` share a slot).
    fn tag_only(tag: &[u8]) -> Vec<u8> {
        tag.to_vec()
    }

    #[test]
    fn tagged_keys_spread_by_tag_and_rule_is_all_or_nothing() {
        let view = ClusterView::new([node("a", 4), node("b", 4)]);
        assert!(view.hash_tags());
        let v = vector(1, 1);
        // Keys of different tags still spread over every node and worker.
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..2_000 {
            let k = format!("bull:{{q{i}}}:wait");
            let r = view.replicas(k.as_bytes(), &v);
            assert_eq!(
                r,
                view.replicas(format!("bull:{{q{i}}}:active").as_bytes(), &v)
            );
            seen.insert(r[0]);
        }
        assert_eq!(seen.len(), 8, "{seen:?}");
        // Without the rule, the two keys of one tag are placed apart somewhere.
        let whole = view.clone().with_hash_tags(false);
        assert!((0..200).any(|i| {
            whole.replicas(format!("{{t{i}}}:a").as_bytes(), &v)
                != whole.replicas(format!("{{t{i}}}:b").as_bytes(), &v)
        }));
        assert!(!ClusterView::new([]).hash_tags());
        let old = NodeInfo {
            placement: crate::hash::PLACEMENT_WHOLE_KEY,
            ..node("c", 1)
        };
        assert!(!ClusterView::new([node("a", 4), old]).hash_tags());
    }
}
