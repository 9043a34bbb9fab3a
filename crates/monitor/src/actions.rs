//! What a policy round decides: a list of [`Action`]s, each with a short reason for humans
//! (`latticekv status` shows them).

use serde::Serialize;

use crate::snapshot::{escaped, Tier, Vector};

/// One decision of a policy round.
///
/// JSON: an object tagged by `"action"` (`set_replication`, `reset_replication`, `add_nodes`,
/// `remove_node`); keys are strings with non-printable bytes escaped (`\x00`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Give `key` this explicit vector (promotion, demotion, hot-key replication, or a factor
    /// cut to the nodes left before a removal).
    SetReplication {
        /// The key.
        #[serde(serialize_with = "escaped")]
        key: Vec<u8>,
        /// Its new vector.
        vector: Vector,
        /// Why.
        reason: String,
    },
    /// Drop `key`'s explicit vector: it goes back to the cluster default.
    ResetReplication {
        /// The key.
        #[serde(serialize_with = "escaped")]
        key: Vec<u8>,
        /// Why.
        reason: String,
    },
    /// Ask the cluster manager for `count` more nodes of `tier`.
    AddNodes {
        /// The tier.
        tier: Tier,
        /// How many.
        count: u32,
        /// Why.
        reason: String,
    },
    /// Ask node `node_id` of `tier` to leave (it hands its keys off first).
    RemoveNode {
        /// The tier.
        tier: Tier,
        /// The node.
        node_id: String,
        /// Why.
        reason: String,
    },
}

impl Action {
    /// The key a replication action is about.
    pub fn key(&self) -> Option<&[u8]> {
        match self {
            Action::SetReplication { key, .. } | Action::ResetReplication { key, .. } => Some(key),
            Action::AddNodes { .. } | Action::RemoveNode { .. } => None,
        }
    }

    /// The human reason.
    pub fn reason(&self) -> &str {
        match self {
            Action::SetReplication { reason, .. }
            | Action::ResetReplication { reason, .. }
            | Action::AddNodes { reason, .. }
            | Action::RemoveNode { reason, .. } => reason,
        }
    }

    /// Whether it changes the cluster's resources (starts a grace period).
    pub fn is_elastic(&self) -> bool {
        matches!(self, Action::AddNodes { .. } | Action::RemoveNode { .. })
    }
}
