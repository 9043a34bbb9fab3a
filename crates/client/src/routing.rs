//! The client's copy of a node's layout: the same local ring the workers use, so the client
//! computes the worker of a key exactly as the node does (see `docs/protocol.md`).

use std::collections::HashMap;

use placement::{key_hash, Ring};
use wire::pb;

/// A node's workers and how keys map to them.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Native address of each worker.
    pub workers: Vec<String>,
    /// The local ring.
    ring: Ring<u32>,
    /// Local replication of keys without an explicit vector.
    default_local: u32,
    /// Explicit local replication per key.
    replication: HashMap<Vec<u8>, u32>,
}

impl Layout {
    /// Builds the layout from a node's `Topology` answer.
    pub fn from_topology(t: &pb::Topology) -> Layout {
        Layout {
            workers: t.workers.clone(),
            ring: Ring::<u32>::local(t.workers.len() as u32, t.vnodes),
            default_local: t.default_local_replication.max(1),
            replication: t
                .replication
                .iter()
                .map(|r| (r.key.to_vec(), r.local.max(1)))
                .collect(),
        }
    }

    /// The workers holding `key`, primary first.
    pub fn replicas(&self, key: &[u8]) -> Vec<u32> {
        let n = self
            .replication
            .get(key)
            .copied()
            .unwrap_or(self.default_local);
        self.ring.replicas(key_hash(key), n as usize)
    }

    /// The worker a request for `key` goes to: its primary, or a random replica for keys
    /// replicated on several workers (spreading hot keys).
    pub fn worker_for(&self, key: &[u8]) -> Option<u32> {
        let replicas = self.replicas(key);
        match replicas.len() {
            0 => None,
            1 => Some(replicas[0]),
            n => Some(replicas[fastrand::usize(..n)]),
        }
    }

    /// The address of worker `w`.
    pub fn addr(&self, w: u32) -> Option<&str> {
        self.workers.get(w as usize).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_nodes_ring() {
        let t = pb::Topology {
            protocol_version: 1,
            node_id: "n".into(),
            workers: vec!["a:1".into(), "b:2".into(), "c:3".into()],
            vnodes: 64,
            default_local_replication: 1,
            replication: vec![pb::SetReplication {
                key: bytes::Bytes::from_static(b"hot"),
                global: 1,
                local: 3,
            }],
        };
        let layout = Layout::from_topology(&t);
        let ring = Ring::<u32>::local(3, 64);
        for i in 0..100 {
            let key = format!("k{i}");
            let h = key_hash(key.as_bytes());
            assert_eq!(layout.worker_for(key.as_bytes()), ring.primary(h).copied());
        }
        assert_eq!(layout.replicas(b"hot").len(), 3);
    }
}
