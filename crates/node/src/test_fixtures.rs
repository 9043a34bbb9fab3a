//! Fixtures shared by the node's unit tests: a node of the memory tier, a view of such
//! nodes, a shard's configuration.

use std::sync::Arc;

use placement::{NodeInfo, Replica, Replication, ReplicationVector, Tier};

use crate::config::Limits;
use crate::shard::ShardConfig;
use crate::view::{ReplicationTable, ViewState};

/// A memory node `id` with one worker, reached by peers at `peer` (empty: no address).
pub(crate) fn memory_node(id: &str, peer: &str) -> NodeInfo {
    NodeInfo {
        id: id.to_string(),
        tier: Tier::Memory,
        workers: vec![format!("{id}/0")],
        front: format!("{id}/front"),
        resp: format!("{id}/resp"),
        peer: peer.to_string(),
        vnodes: 32,
        placement: placement::PLACEMENT_HASH_TAGS,
    }
}

/// A view of `nodes` where every key has `global` replicas in the memory tier (one worker
/// each) and none in the disk tier.
pub(crate) fn memory_view(nodes: Vec<NodeInfo>, global: u32) -> Arc<ViewState> {
    Arc::new(ViewState::of(
        nodes,
        ReplicationTable::new(),
        ReplicationVector {
            memory: Replication { global, local: 1 },
            disk: Replication {
                global: 0,
                local: 1,
            },
        },
    ))
}

/// [`memory_view`] of memory nodes named `nodes`, each with the peer address `"{id}/peer"`.
pub(crate) fn memory_view_of(nodes: &[&str], global: u32) -> Arc<ViewState> {
    let nodes = nodes.iter().map(|n| memory_node(n, &format!("{n}/peer")));
    memory_view(nodes.collect(), global)
}

/// The configuration of worker `me`'s shard: 64 MiB of memory, a settle period of a
/// minute (longer than any test), default limits.
pub(crate) fn shard_config(me: Replica, limits: Limits) -> ShardConfig {
    ShardConfig {
        me,
        limits,
        memory_budget: 64 << 20,
        max_changeset_keys: 1 << 20,
        settle_ms: 60_000,
        tombstone_memory_ms: 1_000,
        disk_copy: Default::default(),
    }
}
