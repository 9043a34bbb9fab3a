//! [`KubernetesManager`]: one StatefulSet per tier, scaled through its `scale` subresource.
//!
//! - **add** reads the StatefulSet's scale and patches `spec.replicas` to `replicas +
//!   count` (a JSON merge patch carrying the `resourceVersion` read, so a concurrent change
//!   is a 409 Conflict, answered by reading again; at most `conflict_retries` attempts).
//!   The new pods are `<statefulset>-<ordinal>`; they join through the seeds in their
//!   manifest.
//! - **remove**: a StatefulSet only removes its highest ordinal. The manager drains that
//!   pod's node (`Admin.leave` to its admin address; if the policy asked for another node it
//!   logs the substitution), waits until the leave is complete (every key handed off), and
//!   only then patches `replicas` to the drained ordinal — refusing if the StatefulSet was
//!   resized meanwhile, which would remove other pods too.
//! - **failures**: Kubernetes restarts crashed containers and reschedules lost pods with
//!   the same name and volume, so the node comes back with its id and data. `check` only
//!   reports restarts it sees in the pods' container restart counts.
//!
//! Node ids must be pod names (`LATTICEKV_NODE_ID` from `metadata.name`). A 403 from the
//! API server is [`ManagerError::Forbidden`], naming the verb and resource to grant
//! (`deploy/kubernetes/monitor-rbac.yaml` has the minimal Role).

pub mod plan;

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};

use super::admin::{self, AdminAccess};
use super::{ClusterManager, ManagedNode, ManagerError, ManagerEvent, NodeState};
use crate::snapshot::Tier;
use plan::{Drain, RestartWatch};

/// The StatefulSet of one tier and the headless Service that names its pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierSet {
    /// The StatefulSet's name.
    pub statefulset: String,
    /// Its governing (headless) Service: pods resolve as `<pod>.<service>`.
    pub service: String,
}

impl TierSet {
    /// A StatefulSet whose Service has the same name.
    pub fn named(name: &str) -> TierSet {
        TierSet {
            statefulset: name.into(),
            service: name.into(),
        }
    }
}

/// Settings of a [`KubernetesManager`].
#[derive(Clone, Debug)]
pub struct KubernetesConfig {
    /// The namespace of the StatefulSets.
    pub namespace: String,
    /// The memory tier's StatefulSet. Default: `latticekv-memory`.
    pub memory: Option<TierSet>,
    /// The disk tier's StatefulSet. Default: `latticekv-disk`.
    pub disk: Option<TierSet>,
    /// Where a pod's node takes admin requests (its native front port): a template with
    /// `{pod}`, `{service}`, `{namespace}` and `{pod_ip}`. Default:
    /// `{pod}.{service}.{namespace}.svc:7700` (the pod's stable DNS name).
    pub admin_address: String,
    /// How long a leave (the hand-off of every key) may take. Default: 30 min.
    pub leave_timeout: Duration,
    /// Attempts at a scale change that meets 409 Conflicts. Default: 5.
    pub conflict_retries: u32,
    /// Most replicas a StatefulSet is scaled to. Default: 256.
    pub max_replicas: u32,
    /// Credentials and TLS for the leave request.
    pub admin: AdminAccess,
}

impl KubernetesConfig {
    /// Defaults, in `namespace`.
    pub fn new(namespace: impl Into<String>) -> KubernetesConfig {
        KubernetesConfig {
            namespace: namespace.into(),
            memory: Some(TierSet::named("latticekv-memory")),
            disk: Some(TierSet::named("latticekv-disk")),
            admin_address: "{pod}.{service}.{namespace}.svc:7700".into(),
            leave_timeout: Duration::from_secs(30 * 60),
            conflict_retries: 5,
            max_replicas: 256,
            admin: AdminAccess::default(),
        }
    }
}

/// Scales StatefulSets; see the [module docs](self).
pub struct KubernetesManager {
    client: kube::Client,
    config: KubernetesConfig,
    restarts: Mutex<RestartWatch>,
}

/// One RBAC permission the manager uses: `verb` on `resource` of `api_group` ("" is the
/// core group). A 403 on the request is reported with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Permission {
    /// The API group.
    pub api_group: &'static str,
    /// The resource (with its subresource).
    pub resource: &'static str,
    /// The verb.
    pub verb: &'static str,
}

const GET_SCALE: Permission = Permission {
    api_group: "apps",
    resource: "statefulsets/scale",
    verb: "get",
};
const PATCH_SCALE: Permission = Permission {
    api_group: "apps",
    resource: "statefulsets/scale",
    verb: "patch",
};
const GET_POD: Permission = Permission {
    api_group: "",
    resource: "pods",
    verb: "get",
};
const LIST_PODS: Permission = Permission {
    api_group: "",
    resource: "pods",
    verb: "list",
};

/// Every permission the manager needs (`deploy/kubernetes/monitor-rbac.yaml` grants these
/// and no others).
pub const PERMISSIONS: [Permission; 4] = [GET_SCALE, PATCH_SCALE, GET_POD, LIST_PODS];

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// A scale's desired replicas (spec, else status).
fn replicas_of(scale: &Scale) -> u32 {
    let n = scale
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .or_else(|| scale.status.as_ref().map(|s| s.replicas))
        .unwrap_or(0);
    u32::try_from(n).unwrap_or(0)
}

impl KubernetesManager {
    /// A manager using the in-cluster client (or `~/.kube/config`), in `namespace` or the
    /// client's default namespace, with the default StatefulSet names.
    pub async fn connect(
        namespace: Option<String>,
        admin: AdminAccess,
    ) -> Result<KubernetesManager, ManagerError> {
        let client = kube::Client::try_default().await?;
        let namespace = namespace.unwrap_or_else(|| client.default_namespace().to_string());
        let mut config = KubernetesConfig::new(namespace);
        config.admin = admin;
        Ok(KubernetesManager::new(client, config))
    }

    /// A manager using `client` (its own namespace setting is ignored: `config.namespace`
    /// is used).
    pub fn new(client: kube::Client, config: KubernetesConfig) -> KubernetesManager {
        KubernetesManager {
            client,
            config,
            restarts: Mutex::new(RestartWatch::default()),
        }
    }

    /// A manager with the client configured from the environment: the pod's service
    /// account inside a cluster, else `~/.kube/config`.
    pub async fn infer(config: KubernetesConfig) -> Result<KubernetesManager, ManagerError> {
        Ok(KubernetesManager::new(
            kube::Client::try_default().await?,
            config,
        ))
    }

    /// Its settings.
    pub fn config(&self) -> &KubernetesConfig {
        &self.config
    }

    fn set(&self, tier: Tier) -> Result<&TierSet, ManagerError> {
        match tier {
            Tier::Memory => self.config.memory.as_ref(),
            Tier::Disk => self.config.disk.as_ref(),
        }
        .ok_or(ManagerError::TierNotManaged(tier))
    }

    fn error(&self, call: Permission, e: kube::Error) -> ManagerError {
        match e {
            kube::Error::Api(s) if s.code == 403 => ManagerError::Forbidden {
                verb: call.verb,
                resource: call.resource,
                namespace: self.config.namespace.clone(),
                message: s.message,
            },
            other => ManagerError::Kubernetes(other),
        }
    }

    fn statefulsets(&self) -> Api<StatefulSet> {
        Api::namespaced(self.client.clone(), &self.config.namespace)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.config.namespace)
    }

    async fn get_scale(&self, name: &str) -> Result<Scale, ManagerError> {
        self.statefulsets()
            .get_scale(name)
            .await
            .map_err(|e| self.error(GET_SCALE, e))
    }

    /// Reads the scale of `name` and sets its replicas to `target(current)`, again on a
    /// 409 Conflict. Returns (replicas before, replicas after).
    async fn rescale(
        &self,
        name: &str,
        target: impl Fn(u32) -> Result<u32, super::error::PlanError>,
    ) -> Result<(u32, u32), ManagerError> {
        let attempts = self.config.conflict_retries.max(1);
        for attempt in 1..=attempts {
            let scale = self.get_scale(name).await?;
            let current = replicas_of(&scale);
            let wanted = target(current)?;
            if wanted == current {
                return Ok((current, wanted));
            }
            let patch = serde_json::json!({
                "metadata": { "resourceVersion": scale.metadata.resource_version },
                "spec": { "replicas": wanted },
            });
            match self
                .statefulsets()
                .patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    tracing::info!(statefulset = %name, from = current, to = wanted, "scaled");
                    return Ok((current, wanted));
                }
                Err(e) if status_code(&e) == Some(409) => {
                    tracing::info!(statefulset = %name, attempt,
                        "the StatefulSet changed meanwhile (409 Conflict); reading it again");
                }
                Err(e) => return Err(self.error(PATCH_SCALE, e)),
            }
        }
        Err(ManagerError::Conflict {
            resource: "statefulsets/scale",
            name: name.to_string(),
            attempts,
        })
    }

    /// The pods of one tier's StatefulSet, by ordinal.
    async fn tier_pods(&self, tier: Tier, set: &TierSet) -> Result<Vec<ManagedNode>, ManagerError> {
        let scale = self.get_scale(&set.statefulset).await?;
        let mut params = ListParams::default().limit(self.config.max_replicas);
        if let Some(selector) = scale.status.as_ref().and_then(|s| s.selector.as_deref()) {
            params = params.labels(selector);
        }
        let pods = self
            .pods()
            .list(&params)
            .await
            .map_err(|e| self.error(LIST_PODS, e))?;
        let mut nodes: Vec<(u32, ManagedNode)> = pods
            .items
            .iter()
            .filter_map(|pod| {
                let name = pod.metadata.name.as_deref()?;
                let ordinal = plan::pod_ordinal(&set.statefulset, name)?;
                Some((ordinal, self.managed(tier, set, name, pod)))
            })
            .collect();
        nodes.sort_by_key(|(ordinal, _)| *ordinal);
        Ok(nodes.into_iter().map(|(_, n)| n).collect())
    }

    fn managed(&self, tier: Tier, set: &TierSet, name: &str, pod: &Pod) -> ManagedNode {
        let status = pod.status.as_ref();
        let containers = status
            .and_then(|s| s.container_statuses.as_deref())
            .unwrap_or_default();
        let restarts: i64 = containers
            .iter()
            .map(|c| i64::from(c.restart_count.max(0)))
            .sum();
        let ready = status
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let state = if pod.metadata.deletion_timestamp.is_some() {
            NodeState::Leaving
        } else if ready {
            NodeState::Running
        } else if restarts > 0 {
            NodeState::Restarting
        } else {
            NodeState::Starting
        };
        let ip = status.and_then(|s| s.pod_ip.as_deref());
        let address = plan::admin_address(
            &self.config.admin_address,
            name,
            &set.service,
            &self.config.namespace,
            ip,
        )
        .ok();
        ManagedNode {
            id: name.to_string(),
            tier,
            state,
            address,
            restarts: u32::try_from(restarts).unwrap_or(u32::MAX),
        }
    }

    /// Asks the drained pod's node to leave and waits for the hand-off to complete.
    async fn drain(&self, set: &TierSet, drain: &Drain) -> Result<(), ManagerError> {
        let pod = self
            .pods()
            .get(&drain.pod)
            .await
            .map_err(|e| self.error(GET_POD, e))?;
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref());
        let addr = plan::admin_address(
            &self.config.admin_address,
            &drain.pod,
            &set.service,
            &self.config.namespace,
            ip,
        )?;
        tracing::info!(pod = %drain.pod, %addr, "asking the node to leave");
        match tokio::time::timeout(
            self.config.leave_timeout,
            admin::leave(&addr, &self.config.admin),
        )
        .await
        {
            Err(_) => Err(ManagerError::LeaveTimeout {
                id: drain.pod.clone(),
                after: self.config.leave_timeout,
            }),
            Ok(Err(source)) => Err(ManagerError::Leave {
                id: drain.pod.clone(),
                addr,
                source,
            }),
            Ok(Ok(())) => Ok(()),
        }
    }
}

#[async_trait]
impl ClusterManager for KubernetesManager {
    async fn add(&self, tier: Tier, count: u32) -> Result<Vec<String>, ManagerError> {
        let set = self.set(tier)?;
        let name = &set.statefulset;
        let max = self.config.max_replicas;
        let (from, to) = self
            .rescale(name, |current| plan::scale_up_to(name, current, count, max))
            .await?;
        Ok((from..to).map(|i| plan::pod_name(name, i)).collect())
    }

    async fn remove(&self, tier: Tier, node_id: &str) -> Result<String, ManagerError> {
        let set = self.set(tier)?;
        let name = &set.statefulset;
        let scale = self.get_scale(name).await?;
        let drain = plan::plan_removal(name, replicas_of(&scale), node_id)?;
        if drain.substituted {
            tracing::warn!(asked = %node_id, draining = %drain.pod, statefulset = %name,
                "a StatefulSet removes only its highest ordinal: draining that pod instead");
        }
        self.drain(set, &drain).await?;
        self.rescale(name, |current| plan::scale_down_to(&drain, name, current))
            .await?;
        tracing::info!(pod = %drain.pod, "node left the cluster; its pod is being removed");
        Ok(drain.pod)
    }

    async fn nodes(&self) -> Result<Vec<ManagedNode>, ManagerError> {
        let mut nodes = Vec::new();
        for tier in Tier::ALL {
            if let Ok(set) = self.set(tier) {
                nodes.extend(self.tier_pods(tier, set).await?);
            }
        }
        Ok(nodes)
    }

    async fn check(&self) -> Result<Vec<ManagerEvent>, ManagerError> {
        let pods: Vec<(String, u32)> = self
            .nodes()
            .await?
            .into_iter()
            .map(|n| (n.id, n.restarts))
            .collect();
        let events = self
            .restarts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .update(&pods);
        for e in &events {
            if let ManagerEvent::Restarted { id, restarts } = e {
                tracing::warn!(pod = %id, restarts, "Kubernetes restarted a node's container");
            }
        }
        Ok(events)
    }
}
