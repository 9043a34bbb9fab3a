//! [`ManagerError`]: everything a cluster manager can fail at.

use std::time::Duration;

use crate::snapshot::Tier;

/// A cluster manager's failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManagerError {
    /// The manager does not manage a node of that id (in that tier).
    #[error("no {tier} node {id} is managed here")]
    UnknownNode {
        /// The tier asked for.
        tier: Tier,
        /// The id asked for.
        id: String,
    },
    /// The node is not running (it is leaving, or waiting for a restart).
    #[error("node {id} is {state}, not running")]
    NotRunning {
        /// The node.
        id: String,
        /// Its state.
        state: super::NodeState,
    },
    /// The manager's configuration is unusable.
    #[error("cluster manager configuration: {0}")]
    InvalidConfig(String),
    /// The manager's node limit would be exceeded.
    #[error("adding {asked} node(s) would exceed the limit of {limit} managed nodes")]
    TooManyNodes {
        /// Nodes asked for.
        asked: u32,
        /// The limit.
        limit: usize,
    },
    /// This backend manages no nodes of that tier.
    #[error("no {0} tier is configured for this cluster manager")]
    TierNotManaged(Tier),
    /// A node process could not be started.
    #[error("starting node {id}: {detail}")]
    Start {
        /// The node.
        id: String,
        /// What went wrong (the spawn error, or the process ending before it listened).
        detail: String,
    },
    /// The node did not answer its leave request.
    #[error("node {id} at {addr}: leave failed: {source}")]
    Leave {
        /// The node.
        id: String,
        /// Where the request went.
        addr: String,
        /// Why.
        #[source]
        source: super::admin::LeaveError,
    },
    /// The node was still handing its keys off when the leave timeout passed. It goes on
    /// leaving; `check` reports it gone once it exits.
    #[error("node {id} was still leaving after {after:?} (it goes on handing keys off)")]
    LeaveTimeout {
        /// The node.
        id: String,
        /// The timeout.
        after: Duration,
    },
    /// Kubernetes refused a request for lack of permission: the monitor's service account
    /// misses an RBAC rule.
    #[error(
        "Kubernetes forbids the monitor to {verb} {resource} in namespace {namespace}: grant \
         the verb \"{verb}\" on \"{resource}\" to its service account (see \
         deploy/kubernetes/monitor-rbac.yaml); the API server said: {message}"
    )]
    Forbidden {
        /// The missing verb (`get`, `list`, `patch`).
        verb: &'static str,
        /// The resource (`statefulsets/scale`, `pods`).
        resource: &'static str,
        /// The namespace.
        namespace: String,
        /// The API server's message.
        message: String,
    },
    /// The StatefulSet kept changing under the manager (409 Conflict on every attempt).
    #[error("{resource} {name} changed under every one of {attempts} attempts (409 Conflict)")]
    Conflict {
        /// The resource.
        resource: &'static str,
        /// Its name.
        name: String,
        /// Attempts made.
        attempts: u32,
    },
    /// A decision could not be made from what the cluster reported.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Any other Kubernetes API failure.
    #[cfg(feature = "kubernetes")]
    #[error("Kubernetes API: {0}")]
    Kubernetes(#[from] kube::Error),
    /// A local file-system operation (data directories) failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// A removal or scaling that cannot be planned from the state the backend reported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The StatefulSet has no replicas: there is nothing to remove.
    #[error("StatefulSet {0} has no replicas: nothing to remove")]
    NothingToRemove(String),
    /// The node id is not the name of a pod of the tier's StatefulSet.
    #[error(
        "node {id} is not a pod of StatefulSet {statefulset}: node ids must be pod names \
         (set LATTICEKV_NODE_ID from metadata.name)"
    )]
    NotAPod {
        /// The id.
        id: String,
        /// The StatefulSet.
        statefulset: String,
    },
    /// The StatefulSet was resized while a node was leaving: scaling it to the drained
    /// ordinal now would remove other pods too.
    #[error(
        "StatefulSet {statefulset} has {found} replicas, not {expected}, after {pod} left: \
         not scaling it down (another pod would go); scale it by hand"
    )]
    ScaleChanged {
        /// The StatefulSet.
        statefulset: String,
        /// The pod that left.
        pod: String,
        /// Replicas expected (the drained ordinal + 1).
        expected: u32,
        /// Replicas found.
        found: u32,
    },
    /// Scaling up would exceed the configured maximum of replicas.
    #[error("StatefulSet {statefulset}: {current} + {count} replicas exceed the maximum {max}")]
    TooManyReplicas {
        /// The StatefulSet.
        statefulset: String,
        /// Its replicas now.
        current: u32,
        /// Replicas asked for.
        count: u32,
        /// The configured maximum.
        max: u32,
    },
    /// The pod has no IP address yet (not scheduled), so it cannot be asked to leave.
    #[error("pod {0} has no IP address")]
    NoPodIp(String),
}
