//! What every worker of a node shares: configuration, addresses, the mesh, the agent's
//! snapshots, the stop signal. Read-only after start, but for counters that only change
//! when a connection opens or closes.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;

use super::conns::ConnectionLimit;
use super::mesh::Mesh;
use super::worker::WorkerMsg;
use crate::cluster::agent::{Agent, Snapshot};
use crate::config::{Faults, NodeConfig};

/// The addresses a node publishes — in its membership entry, topologies, redirects and
/// status: the ports it bound, with the advertised host if one is configured
/// ([`NodeConfig::advertise`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishedAddresses {
    /// Native front address.
    pub front: String,
    /// RESP address.
    pub resp: String,
    /// Native address of each worker.
    pub workers: Vec<String>,
    /// Peer-plane address.
    pub peer: String,
}

/// Node-wide state shared read-only by all workers.
#[derive(Debug)]
pub struct Shared {
    /// The configuration the node started with.
    pub config: NodeConfig,
    /// The users of the client ports (from `config.users`).
    pub users: Arc<crate::auth::Users>,
    /// TLS of every port, if configured.
    pub tls: Option<Arc<crate::tls::NodeTls>>,
    /// Inboxes of all workers.
    pub mesh: Mesh<WorkerMsg>,
    /// The addresses published to peers and clients.
    pub published: PublishedAddresses,
    /// The RESP port actually bound (INFO reports it).
    pub resp_port: u16,
    /// When the node started.
    pub started: Instant,
    /// Open client connections on the whole node, against the limit.
    pub connections: Arc<ConnectionLimit>,
    /// Becomes `true` when the node must stop.
    pub shutdown: watch::Receiver<bool>,
    /// Stops the node (after a leave).
    pub stop: watch::Sender<bool>,
    /// Becomes `true` while the node is leaving: its ports stop taking new work once the
    /// leave is complete.
    pub leaving: watch::Sender<bool>,
    /// Faults injected on purpose (testing only).
    pub faults: Faults,
    /// The cluster agent.
    pub agent: Agent,
    /// The agent's latest snapshot (view and members).
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    /// The elasticity monitor's latest report (`Admin.policy_report`), shown in status.
    pub policy: watch::Sender<Option<Arc<wire::pb::PolicyReport>>>,
    /// The backing store, if the node has one (`[backing]`).
    pub backing: Option<super::backing::BackingHandle>,
    /// Pub/sub: the node's RESP subscribers (one registry for all workers).
    pub pubsub: Arc<crate::pubsub::Hub>,
    // ---- keys and server ----
    /// The node's RESP connections (one registry for all workers: `CLIENT LIST`/`KILL`).
    pub clients: Arc<crate::clients::Clients>,
    /// The node's Lua scripts by SHA1 (`EVALSHA`, `SCRIPT LOAD`), for all workers.
    pub scripts: Arc<crate::script::ScriptCache>,
    // ---- metrics ----
    /// Metrics of parts running beside the node in its process, appended to `/metrics`.
    pub metrics_sources: MetricsSources,
}

/// Renders the Prometheus text of a part running beside a node (`latticekv local --faas`
/// adds its scheduler's and compute host's). Called on a worker's thread at each scrape:
/// it must be quick and never block for long.
pub type MetricsSource = Arc<dyn Fn() -> String + Send + Sync>;

/// The [`MetricsSource`]s of a node (registered once, read at each scrape).
#[derive(Default)]
pub struct MetricsSources(std::sync::Mutex<Vec<MetricsSource>>);

impl MetricsSources {
    /// Adds `source`.
    pub fn add(&self, source: MetricsSource) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(source);
    }

    /// Every source's text, in the order they were added.
    pub fn render(&self) -> String {
        let sources = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        sources.iter().map(|f| f()).collect()
    }
}

impl std::fmt::Debug for MetricsSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsSources")
    }
}

impl Shared {
    /// A receiver that becomes `true` when the node stops.
    pub fn shutdown(&self) -> watch::Receiver<bool> {
        self.shutdown.clone()
    }
}
