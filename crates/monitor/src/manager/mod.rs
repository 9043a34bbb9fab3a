//! Cluster managers: they carry out the policy's [`Action::AddNodes`] and
//! [`Action::RemoveNode`] by starting and stopping real storage nodes.
//!
//! [`ClusterManager`] is the interface the monitor drives; two backends implement it:
//!
//! - [`local::LocalManager`] spawns `latticekv server` child processes on this machine,
//!   removes one by asking it to leave (its keys are handed off) and waiting for it to exit,
//!   and replaces a child that died without being asked (same id, same data directory,
//!   restarts paced by [`restart::Backoff`]).
//! - `kubernetes::KubernetesManager` (feature `kubernetes`) scales one StatefulSet per tier
//!   through its `scale` subresource; a removal drains the highest ordinal's node first.
//!   Kubernetes itself replaces pods that die.
//!
//! The decisions that need no I/O are pure and tested on their own: the restart back-off
//! ([`restart`]) and, for Kubernetes, which pod to drain and which replica counts to ask
//! for (`kubernetes::plan`). `docs/elasticity.md` ("Cluster managers") describes both
//! backends and their parameters.
//!
//! [`Action::AddNodes`]: crate::Action::AddNodes
//! [`Action::RemoveNode`]: crate::Action::RemoveNode

mod admin;
mod error;
#[cfg(feature = "kubernetes")]
pub mod kubernetes;
pub mod local;
mod process;
pub mod restart;

use std::fmt;

use async_trait::async_trait;

use crate::snapshot::Tier;

pub use admin::{AdminAccess, LeaveError};
pub use error::{ManagerError, PlanError};

/// What a manager knows about one of its nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagedNode {
    /// The node id (its label in the membership; for Kubernetes, the pod name).
    pub id: String,
    /// Its tier.
    pub tier: Tier,
    /// Its state as the manager sees it.
    pub state: NodeState,
    /// Its native front address, if known.
    pub address: Option<String>,
    /// How often it was restarted after dying (by the manager, or by Kubernetes).
    pub restarts: u32,
}

/// The state of a managed node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// Starting, or (Kubernetes) not ready yet.
    Starting,
    /// Running (Kubernetes: ready).
    Running,
    /// Asked to leave; handing its keys off.
    Leaving,
    /// Died; waiting for its restart (local), or being replaced (Kubernetes).
    Restarting,
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeState::Starting => "starting",
            NodeState::Running => "running",
            NodeState::Leaving => "leaving",
            NodeState::Restarting => "restarting",
        })
    }
}

/// Something [`ClusterManager::check`] noticed or did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManagerEvent {
    /// A node stopped without being asked to; it will be restarted.
    Died {
        /// The node.
        id: String,
        /// How it ended (exit status).
        how: String,
        /// Milliseconds until the restart is attempted.
        restart_in_ms: u64,
    },
    /// A node that had died was started again with its id and data.
    Replaced {
        /// The node.
        id: String,
        /// Its new native front address.
        address: String,
    },
    /// A restart failed; it is retried after a back-off.
    RestartFailed {
        /// The node.
        id: String,
        /// Why.
        error: String,
        /// Milliseconds until the next attempt.
        retry_in_ms: u64,
    },
    /// A node asked to leave has exited and is no longer managed.
    Gone {
        /// The node.
        id: String,
    },
    /// Kubernetes restarted a node's container (its restart count grew).
    Restarted {
        /// The node (pod).
        id: String,
        /// The container's restart count now.
        restarts: u32,
    },
}

/// Adds and removes storage nodes; the monitor calls it with the policy's node actions.
///
/// Methods take `&self`: a removal waits for the node's hand-off, which can take minutes,
/// while [`check`](ClusterManager::check) keeps replacing failed nodes meanwhile. Share the
/// manager with an `Arc`.
#[async_trait]
pub trait ClusterManager: Send + Sync {
    /// Starts `count` new nodes of `tier` and returns their ids. They join the cluster on
    /// their own (through the seeds); the call returns once they run, not once every member
    /// has seen them. On an error, nodes started before it stay managed
    /// ([`nodes`](ClusterManager::nodes) lists them).
    async fn add(&self, tier: Tier, count: u32) -> Result<Vec<String>, ManagerError>;

    /// Removes a node of `tier` gracefully: the node leaves the cluster (hands its keys to
    /// their new replicas) and only then does its process or pod go away. Returns the id of
    /// the node removed, which is `node_id` except where the backend can only remove a
    /// particular node (a StatefulSet shrinks from its highest ordinal).
    async fn remove(&self, tier: Tier, node_id: &str) -> Result<String, ManagerError>;

    /// The nodes this manager manages.
    async fn nodes(&self) -> Result<Vec<ManagedNode>, ManagerError>;

    /// Detects nodes that died and replaces them (or reports Kubernetes' replacements).
    /// Call it regularly, e.g. every second.
    async fn check(&self) -> Result<Vec<ManagerEvent>, ManagerError>;
}
