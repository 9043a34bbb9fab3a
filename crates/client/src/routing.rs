//! The client's copy of the cluster layout: the same rings the nodes route by, so the client
//! sends each key straight to a worker holding it (see `docs/protocol.md`).

use std::collections::HashMap;

use placement::{ClusterView, NodeInfo, Replica, Replication, ReplicationVector, Tier};
use wire::pb;

/// The cluster's storage workers and how keys map to them.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Native address of each worker of the node the topology came from (for status).
    pub workers: Vec<String>,
    /// The rings of the storage nodes of every tier.
    view: ClusterView,
    /// Replication of keys without an explicit vector.
    default: ReplicationVector,
    /// Explicit vectors.
    replication: HashMap<Vec<u8>, ReplicationVector>,
    /// Front addresses of the storage nodes in the rings (alive or suspect), in member order:
    /// where a request that any node can take (a commit batch) goes when the node the client
    /// connected to is unreachable.
    pub fronts: Vec<String>,
}

fn vector(global: u32, local: u32, disk_global: u32, disk_local: u32) -> ReplicationVector {
    ReplicationVector {
        // 0 memory nodes: a cold key, served by its disk replicas.
        memory: Replication {
            global,
            local: local.max(1),
        },
        disk: Replication {
            global: disk_global,
            local: disk_local.max(1),
        },
    }
}

impl Layout {
    /// Builds the layout from a node's `Topology` answer. Members in the rings (alive or
    /// suspect storage nodes) are used; a topology without members (an older node) is the
    /// answering node alone.
    pub fn from_topology(t: &pb::Topology) -> Layout {
        let mut nodes: Vec<NodeInfo> = t
            .members
            .iter()
            .filter(|m| {
                matches!(
                    pb::NodeStatus::try_from(m.status),
                    Ok(pb::NodeStatus::Alive | pb::NodeStatus::Suspect)
                ) && (m.role == "memory" || m.role == "disk")
            })
            .map(|m| NodeInfo {
                id: m.node_id.clone(),
                tier: if m.role == "disk" {
                    Tier::Disk
                } else {
                    Tier::Memory
                },
                workers: m.workers.clone(),
                front: m.front.clone(),
                resp: m.resp.clone(),
                peer: String::new(),
                vnodes: m.vnodes.max(1),
                placement: m.placement,
            })
            .collect();
        let fronts: Vec<String> = nodes
            .iter()
            .filter(|n| !n.front.is_empty())
            .map(|n| n.front.clone())
            .collect();
        if nodes.is_empty() && !t.workers.is_empty() {
            nodes.push(NodeInfo {
                id: t.node_id.clone(),
                tier: Tier::Memory,
                workers: t.workers.clone(),
                front: String::new(),
                resp: String::new(),
                peer: String::new(),
                vnodes: t.vnodes.max(1),
                // An older node, which places whole keys.
                placement: placement::PLACEMENT_WHOLE_KEY,
            });
        }
        Layout {
            workers: t.workers.clone(),
            view: ClusterView::new(nodes),
            default: vector(
                t.default_global_replication.max(1),
                t.default_local_replication,
                t.default_disk_replication,
                1,
            ),
            replication: t
                .replication
                .iter()
                .map(|r| {
                    let v = vector(
                        r.global,
                        r.local,
                        r.disk_global.unwrap_or(t.default_disk_replication),
                        r.disk_local.unwrap_or(1),
                    );
                    (r.key.to_vec(), v)
                })
                .collect(),
            fronts,
        }
    }

    /// The replication vector of `key`.
    pub fn vector(&self, key: &[u8]) -> ReplicationVector {
        *self.replication.get(key).unwrap_or(&self.default)
    }

    /// The replicas holding `key` (memory tier first), primary first.
    pub fn replicas(&self, key: &[u8]) -> Vec<Replica> {
        self.view.replicas(key, &self.vector(key))
    }

    /// The replicas requests for `key` go to: its memory-tier replicas, or its disk-tier
    /// ones for a key with none in memory.
    pub fn serving_replicas(&self, key: &[u8]) -> Vec<Replica> {
        self.view.serving_replicas(key, &self.vector(key))
    }

    /// The address of the worker a request for `key` goes to: its primary, or a random
    /// serving replica for keys with several (spreading hot keys).
    pub fn addr_for(&self, key: &[u8]) -> Option<&str> {
        let replicas = self.serving_replicas(key);
        let pick = match replicas.len() {
            0 => return None,
            1 => replicas[0],
            n => replicas[fastrand::usize(..n)],
        };
        self.view.addr(pick)
    }

    /// The address of a replica.
    pub fn addr(&self, replica: Replica) -> Option<&str> {
        self.view.addr(replica)
    }

    /// The native address of every worker of every storage node, sorted, without
    /// duplicates.
    pub fn worker_addrs(&self) -> Vec<&str> {
        let mut addrs: Vec<&str> = self
            .view
            .nodes()
            .flat_map(|(_, n)| n.workers.iter().map(String::as_str))
            .collect();
        addrs.sort_unstable();
        addrs.dedup();
        addrs
    }

    /// Number of storage nodes in the memory tier.
    pub fn nodes(&self) -> usize {
        self.view.tier_size(Tier::Memory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use placement::{key_hash, Ring};

    fn member(id: &str, workers: &[&str]) -> pb::Member {
        pb::Member {
            node_id: id.into(),
            incarnation: 1,
            status: pb::NodeStatus::Alive as i32,
            heartbeat: 1,
            role: "memory".into(),
            front: format!("{id}:front"),
            resp: format!("{id}:resp"),
            workers: workers.iter().map(|w| w.to_string()).collect(),
            vnodes: 64,
            peer: format!("{id}:peer"),
            placement: placement::PLACEMENT_HASH_TAGS,
        }
    }

    /// The client places keys by the rule the members advertise: tagged keys together when
    /// every storage member advertises hash tags, by the whole key otherwise (a member too
    /// old to say, or a topology without members).
    #[test]
    fn tagged_keys_follow_the_members_rule() {
        let workers = ["a:1", "a:2", "a:3", "a:4"];
        let with = |members: Vec<pb::Member>| {
            Layout::from_topology(&pb::Topology {
                members,
                default_global_replication: 1,
                default_local_replication: 1,
                ..Default::default()
            })
        };
        let tags = with(vec![member("a", &workers), member("b", &["b:1", "b:2"])]);
        let mut older = member("b", &["b:1", "b:2"]);
        older.placement = 0;
        let whole = with(vec![member("a", &workers), older]);
        let apart = |l: &Layout, t: usize| {
            l.replicas(format!("{{t{t}}}:a").as_bytes())
                != l.replicas(format!("{{t{t}}}:b").as_bytes())
        };
        assert!((0..50).all(|t| !apart(&tags, t)));
        assert!((0..50).any(|t| apart(&whole, t)));
        let bare = Layout::from_topology(&pb::Topology {
            node_id: "n".into(),
            workers: workers.iter().map(|w| w.to_string()).collect(),
            vnodes: 64,
            default_local_replication: 1,
            ..Default::default()
        });
        assert!(
            (0..50).any(|t| apart(&bare, t)),
            "an older node places whole keys"
        );
    }

    #[test]
    fn a_single_node_matches_its_local_ring() {
        let t = pb::Topology {
            protocol_version: 1,
            node_id: "n".into(),
            workers: vec!["a:1".into(), "b:2".into(), "c:3".into()],
            vnodes: 64,
            default_local_replication: 1,
            default_global_replication: 1,
            replication: vec![pb::SetReplication {
                key: bytes::Bytes::from_static(b"hot"),
                global: 1,
                local: 3,
                ..Default::default()
            }],
            members: vec![member("n", &["a:1", "b:2", "c:3"])],
            ..Default::default()
        };
        let layout = Layout::from_topology(&t);
        let ring = Ring::<u32>::local(3, 64);
        for i in 0..100 {
            let key = format!("k{i}");
            let w = *ring.primary(key_hash(key.as_bytes())).unwrap() as usize;
            assert_eq!(layout.addr_for(key.as_bytes()), Some(t.workers[w].as_str()));
        }
        assert_eq!(layout.replicas(b"hot").len(), 3);
    }

    #[test]
    fn dead_members_are_not_in_the_rings() {
        let mut dead = member("d", &["d:1"]);
        dead.status = pb::NodeStatus::Dead as i32;
        let t = pb::Topology {
            members: vec![member("a", &["a:1"]), member("b", &["b:1"]), dead],
            default_global_replication: 3,
            default_local_replication: 1,
            ..Default::default()
        };
        let layout = Layout::from_topology(&t);
        assert_eq!(layout.nodes(), 2);
        assert_eq!(layout.replicas(b"k").len(), 2);
    }

    #[test]
    fn disk_nodes_hold_replicas_but_requests_go_to_memory() {
        let mut disk = member("d", &["d:1"]);
        disk.role = "disk".into();
        let t = pb::Topology {
            members: vec![member("a", &["a:1"]), disk],
            default_global_replication: 1,
            default_local_replication: 1,
            default_disk_replication: 1,
            replication: vec![pb::SetReplication {
                key: bytes::Bytes::from_static(b"cold"),
                global: 1,
                local: 1,
                disk_global: Some(1),
                disk_local: Some(1),
                ..Default::default()
            }],
            ..Default::default()
        };
        let layout = Layout::from_topology(&t);
        assert_eq!(layout.replicas(b"k").len(), 2, "memory + disk");
        for _ in 0..20 {
            assert_eq!(layout.addr_for(b"k"), Some("a:1"));
        }
        assert_eq!(layout.vector(b"cold").disk.global, 1);
        let without_disk = Layout::from_topology(&pb::Topology {
            default_disk_replication: 0,
            ..t.clone()
        });
        assert_eq!(without_disk.replicas(b"k").len(), 1);
    }
}
