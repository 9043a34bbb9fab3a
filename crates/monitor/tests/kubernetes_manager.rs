//! `KubernetesManager` against recorded API exchanges (`tests/fixtures/kubernetes`),
//! replayed by a local HTTP server (`common::apiserver`): each test asserts the exact
//! requests, in order, and how the manager takes the answers (409 Conflict read again,
//! 403 Forbidden named with its RBAC verb). A removal drains a real `latticekv server`.

#![cfg(feature = "kubernetes")]
// `testkit::serial()` is held across awaits on purpose: each test runs its own runtime on
// its own thread, and the lock only keeps two clusters from starting at once.
#![allow(clippy::await_holding_lock)]

mod common;

use std::time::Duration;

use common::apiserver::{fixture, ApiServer};
use common::{eventually, has_status, latticekv_bin, unreadable, write_keys, NODE_FLAGS};
use monitor::manager::kubernetes::{KubernetesConfig, KubernetesManager, PERMISSIONS};
use monitor::manager::{ClusterManager, ManagerError, ManagerEvent, NodeState};
use monitor::Tier;
use testkit::NodeProc;
use wire::pb::NodeStatus;

const SCALE: &str = "/apis/apps/v1/namespaces/latticekv/statefulsets/latticekv-memory/scale";

async fn manager(
    name: &str,
    vars: &[(&str, &str)],
    config: KubernetesConfig,
) -> (ApiServer, KubernetesManager) {
    let server = ApiServer::start(fixture(name, vars)).await;
    let manager = KubernetesManager::new(server.client(), config);
    (server, manager)
}

fn config() -> KubernetesConfig {
    KubernetesConfig::new("latticekv")
}

#[tokio::test]
async fn add_patches_the_replicas_with_the_version_it_read() {
    let (server, m) = manager("add", &[], config()).await;
    let pods = m.add(Tier::Memory, 2).await.expect("add");
    assert_eq!(pods, ["latticekv-memory-2", "latticekv-memory-3"]);
    assert_eq!(
        server.finish(),
        [format!("GET {SCALE}"), format!("PATCH {SCALE}?")]
    );
}

#[tokio::test]
async fn a_conflict_is_answered_by_reading_the_scale_again() {
    let (server, m) = manager("add_conflict", &[], config()).await;
    // The first patch meets a concurrent scale-up (409): the second read sees 3 replicas
    // and adds one to those.
    assert_eq!(
        m.add(Tier::Memory, 1).await.expect("add"),
        ["latticekv-memory-3"]
    );
    assert_eq!(server.finish().len(), 4);
}

#[tokio::test]
async fn conflicts_on_every_attempt_give_up() {
    let mut c = config();
    c.conflict_retries = 2;
    let (server, m) = manager("add_conflict_forever", &[], c).await;
    let err = m.add(Tier::Memory, 1).await.expect_err("conflicts");
    assert!(
        matches!(err, ManagerError::Conflict { attempts: 2, .. }),
        "{err}"
    );
    assert_eq!(server.finish().len(), 4);
}

#[tokio::test]
async fn forbidden_names_the_verb_and_resource_to_grant() {
    for (name, verb, resource) in [
        ("forbidden_get", "get", "statefulsets/scale"),
        ("forbidden_patch", "patch", "statefulsets/scale"),
    ] {
        let (server, m) = manager(name, &[], config()).await;
        let err = m.add(Tier::Memory, 1).await.expect_err("forbidden");
        match &err {
            ManagerError::Forbidden {
                verb: v,
                resource: r,
                namespace,
                message,
            } => {
                assert_eq!((*v, *r, namespace.as_str()), (verb, resource, "latticekv"));
                assert!(message.contains("cannot"), "{message}");
            }
            other => panic!("{name}: {other}"),
        }
        let text = err.to_string();
        assert!(
            text.contains(&format!("grant the verb \"{verb}\" on \"{resource}\""))
                && text.contains("monitor-rbac.yaml"),
            "{text}"
        );
        server.finish();
    }
    // Reading the pod to drain needs `get` on pods.
    let (server, m) = manager("forbidden_pod", &[], config()).await;
    let err = m
        .remove(Tier::Memory, "latticekv-memory-1")
        .await
        .expect_err("forbidden");
    assert!(
        matches!(
            err,
            ManagerError::Forbidden {
                verb: "get",
                resource: "pods",
                ..
            }
        ),
        "{err}"
    );
    server.finish();
}

#[tokio::test]
async fn removing_a_node_that_is_not_a_pod_is_refused_before_anything_changes() {
    let (server, m) = manager("remove_not_a_pod", &[], config()).await;
    let err = m.remove(Tier::Memory, "mem1").await.expect_err("not a pod");
    assert!(err.to_string().contains("metadata.name"), "{err}");
    server.finish();
    // A tier without a StatefulSet is refused without a request.
    let mut c = config();
    c.disk = None;
    let server = ApiServer::start(Vec::new()).await;
    let m = KubernetesManager::new(server.client(), c);
    assert!(matches!(
        m.add(Tier::Disk, 1).await,
        Err(ManagerError::TierNotManaged(Tier::Disk))
    ));
    assert!(server.finish().is_empty());
}

#[tokio::test]
async fn nodes_lists_the_pods_and_check_reports_kubernetes_restarts() {
    let mut c = config();
    c.disk = None;
    c.admin_address = "{pod_ip}:7700".into();
    let (server, m) = manager("nodes_and_restarts", &[], c).await;
    let nodes = m.nodes().await.expect("nodes");
    let summary: Vec<_> = nodes
        .iter()
        .map(|n| (n.id.as_str(), n.state, n.address.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(
        summary,
        [
            ("latticekv-memory-0", NodeState::Running, "10.1.0.10:7700"),
            ("latticekv-memory-1", NodeState::Starting, "10.1.0.11:7700"),
        ]
    );
    assert!(
        m.check().await.unwrap().is_empty(),
        "the first look reports nothing"
    );
    assert_eq!(
        m.check().await.unwrap(),
        [ManagerEvent::Restarted {
            id: "latticekv-memory-1".into(),
            restarts: 1
        }]
    );
    server.finish();
}

/// The policy asks to remove pod 0; the StatefulSet can only lose pod 1, so pod 1's node
/// (a real `latticekv server`) leaves, handing its keys to pod 0's, and only then is the
/// StatefulSet scaled to 1 — after a 409 from a status update in between.
#[tokio::test]
async fn remove_drains_the_highest_ordinal_then_scales_down() {
    let _serial = testkit::serial();
    let data = tempfile::tempdir().unwrap();
    let dirs = [0, 1].map(|i| data.path().join(format!("pod{i}")).display().to_string());
    let flags = |i: usize| {
        let mut f = NODE_FLAGS.to_vec();
        f.extend(["--data-dir", dirs[i].as_str()]);
        f
    };
    let pod0 = NodeProc::server_bin(latticekv_bin(), "latticekv-memory-0", None, &flags(0));
    let pod1 = NodeProc::server_bin(
        latticekv_bin(),
        "latticekv-memory-1",
        Some(pod0.native),
        &flags(1),
    );
    let addr0 = pod0.native.to_string();
    assert!(
        eventually(Duration::from_secs(30), || has_status(
            &addr0,
            "latticekv-memory-1",
            NodeStatus::Alive
        ))
        .await
    );
    write_keys(&addr0, "k", 300).await;

    let mut c = config();
    c.admin_address = format!("{{pod_ip}}:{}", pod1.native.port());
    let (server, m) = manager("remove", &[("POD_IP", "127.0.0.1")], c).await;
    let removed = m
        .remove(Tier::Memory, "latticekv-memory-0")
        .await
        .expect("remove");
    assert_eq!(removed, "latticekv-memory-1");
    let seen = server.finish();
    assert_eq!(seen.len(), 6);
    assert_eq!(
        seen[1],
        "GET /api/v1/namespaces/latticekv/pods/latticekv-memory-1"
    );
    // The leave was complete before the scale-down: pod 1's node is gone from the rings
    // and every key is on pod 0's.
    assert!(has_status(&addr0, "latticekv-memory-1", NodeStatus::Left).await);
    assert_eq!(unreadable(&addr0, "k", 300).await, Vec::<usize>::new());
    drop(pod1);
}

/// The RBAC manifest users apply grants exactly the permissions the manager uses, to the
/// service account it binds.
#[test]
fn the_rbac_manifest_grants_exactly_what_the_manager_uses() {
    use std::collections::BTreeSet;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/kubernetes/monitor-rbac.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"] == k)
            .unwrap_or_else(|| panic!("no {k}"))
    };
    let (role, binding, account) = (kind("Role"), kind("RoleBinding"), kind("ServiceAccount"));
    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        for group in rule["apiGroups"].as_array().unwrap() {
            for resource in rule["resources"].as_array().unwrap() {
                for verb in rule["verbs"].as_array().unwrap() {
                    granted.insert((
                        group.as_str().unwrap().to_string(),
                        resource.as_str().unwrap().to_string(),
                        verb.as_str().unwrap().to_string(),
                    ));
                }
            }
        }
    }
    let needed: BTreeSet<_> = PERMISSIONS
        .iter()
        .map(|p| {
            (
                p.api_group.to_string(),
                p.resource.to_string(),
                p.verb.to_string(),
            )
        })
        .collect();
    assert_eq!(granted, needed);
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["name"], account["metadata"]["name"]);
    // The StatefulSets named are the defaults.
    let names = &role["rules"][0]["resourceNames"];
    let config = KubernetesConfig::new("latticekv");
    assert_eq!(
        names,
        &serde_json::json!([
            config.memory.unwrap().statefulset,
            config.disk.unwrap().statefulset
        ])
    );
}
