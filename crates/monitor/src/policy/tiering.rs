//! Algorithm 1, DataMovement: promotion of keys without a memory replica, demotion of
//! unused keys with an explicit vector.
//!
//! Keys with the default vector are not demoted here: the memory node caches them and
//! spills the least recently used to the disk tier itself, so the policy needs no per-key
//! demotion for them (and could not list them all anyway).

use super::{Change, Round};
use crate::snapshot::{KeyStats, Replicas, Vector};

/// The promotion or demotion `key` gets this round, if any.
pub(super) fn movement(round: &Round<'_>, key: &KeyStats) -> Option<Change> {
    let cfg = round.cfg;
    let v = key.vector;
    let memory_nodes = round.nodes[0];
    let in_memory = v.memory.global.min(memory_nodes) > 0;
    if !in_memory {
        // Promotion is not grace-gated (the paper lists only demotion, hot-key replication
        // and elasticity as delayed). A single replica moves: the total stays.
        if key.accesses > cfg.promotion_threshold && memory_nodes > 0 {
            let target = Vector {
                memory: Replicas::new(1, v.memory.local.max(1)),
                disk: Replicas::new(v.disk.global.saturating_sub(1), v.disk.local),
            };
            return Some(Change {
                target,
                reason: format!(
                    "promoted: {} accesses > P = {} with no memory replica",
                    key.accesses, cfg.promotion_threshold
                ),
            });
        }
        return None;
    }
    if round.in_grace || !round.explicit(key) || key.accesses >= cfg.demotion_threshold {
        return None;
    }
    // Demotion to k + 1 disk replicas needs k + 1 disk nodes; with fewer, going to disk
    // only would break the k-fault guarantee, so the key goes back to the default vector
    // (which keeps its memory replica; the memory node's LRU then decides).
    if round.nodes_after(crate::Tier::Disk) >= round.k1 {
        Some(Change {
            target: Vector::new((0, 1), (round.k1, 1)),
            reason: format!(
                "demoted: {} accesses < D = {}",
                key.accesses, cfg.demotion_threshold
            ),
        })
    } else if key.vector != round.snap.default_vector {
        Some(Change {
            target: round.snap.default_vector,
            reason: format!(
                "unused ({} accesses < D = {}) but fewer than k+1 = {} disk nodes to demote to: default vector",
                key.accesses, cfg.demotion_threshold, round.k1
            ),
        })
    } else {
        None
    }
}
