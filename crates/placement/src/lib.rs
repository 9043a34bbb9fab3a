//! Placement: which nodes of each tier, and which workers of each node, hold a key.
//!
//! Everything here is a pure function of the key bytes and the membership, so every worker,
//! every client and every other-language client computes the same answer without asking.
//!
//! # Layout
//! - [`hash`]: the stable key hash (xxh3-64 with a fixed seed; specified in `docs/protocol.md`)
//!   and Redis Cluster's hash tags.
//! - [`ring`]: a consistent-hash ring with virtual nodes, used as the local ring (workers of a
//!   node) and, with the cluster, as the global ring (nodes of a tier).
//! - [`replication`]: per-key replication vectors and the reserved metadata key space they are
//!   stored under.
//! - [`view`]: a cluster view: the global ring of each tier over nodes and each node's local
//!   ring, giving every key's replicas (node, worker).
//!
//! Depends on nothing but `xxhash-rust`; used by `store`, `node` and `client`.
#![warn(missing_docs)]

pub mod hash;
pub mod replication;
pub mod ring;
pub mod view;

pub use hash::{
    hash_tag, key_hash, placement_hash, KeyHasher, HASH_SEED, PLACEMENT_HASH_TAGS,
    PLACEMENT_WHOLE_KEY,
};
pub use replication::{Replication, ReplicationVector, Tier, METADATA_PREFIX};
pub use ring::Ring;
pub use view::{hash_tags_in_force, node_key, ClusterView, NodeInfo, NodeKey, Replica};
