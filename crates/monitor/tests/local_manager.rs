//! `LocalManager` against real `latticekv server` processes: a node added joins the
//! cluster, a node removed hands its keys off before it stops, a node killed is replaced
//! under its own id, and a node that cannot start is reported and not kept.
//!
//! Needs the binary: `cargo build -p latticekv --bin latticekv` first (see `common`).

// `testkit::serial()` is held across awaits on purpose: each test runs its own runtime on
// its own thread, and the lock only keeps two clusters from starting at once.
#![allow(clippy::await_holding_lock)]

mod common;

use std::time::Duration;

use common::{eventually, has_status, latticekv_bin, member, unreadable, write_keys, NODE_FLAGS};
use monitor::manager::local::{LocalConfig, LocalManager};
use monitor::manager::{ClusterManager, ManagerError, ManagerEvent, NodeState};
use monitor::Tier;
use testkit::NodeProc;
use wire::pb::NodeStatus;

const JOIN: Duration = Duration::from_secs(30);

/// A seed node started by the test (not managed) and a manager whose nodes join it.
fn cluster(data: &std::path::Path) -> (NodeProc, LocalManager) {
    let seed_dir = data.join("seed").display().to_string();
    let mut flags = NODE_FLAGS.to_vec();
    flags.extend(["--data-dir", seed_dir.as_str()]);
    let seed = NodeProc::server_bin(latticekv_bin(), "seed", None, &flags);
    let mut config = LocalConfig::new(latticekv_bin(), data);
    config.seeds = vec![seed.native.to_string()];
    config.args = NODE_FLAGS.iter().map(|s| s.to_string()).collect();
    config.env = vec![("LATTICEKV_LOG".into(), "warn".into())];
    config.restart.initial_backoff = Duration::from_millis(200);
    (seed, LocalManager::new(config).expect("manager"))
}

#[tokio::test]
async fn an_added_node_joins_and_a_removed_one_hands_its_keys_off_first() {
    let _serial = testkit::serial();
    let data = tempfile::tempdir().unwrap();
    let (seed, manager) = cluster(data.path());
    let seed_addr = seed.native.to_string();
    write_keys(&seed_addr, "before", 200).await;

    let ids = manager.add(Tier::Memory, 1).await.expect("add");
    assert_eq!(ids, ["mem1"]);
    assert!(data.path().join("mem1").is_dir(), "its data directory");
    assert!(
        eventually(JOIN, || has_status(&seed_addr, "mem1", NodeStatus::Alive)).await,
        "the seed never saw mem1 alive"
    );
    let nodes = manager.nodes().await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(
        (nodes[0].id.as_str(), nodes[0].state),
        ("mem1", NodeState::Running)
    );
    let mem1_addr = nodes[0].address.clone().expect("its address");
    // It serves: writes through it land on both nodes by placement.
    write_keys(&mem1_addr, "after", 200).await;
    let held = |addr: String| async move {
        let c = client::Client::connect(&addr).await.unwrap();
        c.status()
            .await
            .unwrap()
            .workers
            .iter()
            .map(|w| w.keys)
            .sum::<u64>()
    };
    assert!(
        eventually(JOIN, || async { held(mem1_addr.clone()).await > 0 }).await,
        "mem1 never held a key"
    );

    assert_eq!(
        manager.remove(Tier::Memory, "mem1").await.expect("remove"),
        "mem1"
    );
    assert!(manager.nodes().await.unwrap().is_empty());
    assert!(
        !data.path().join("mem1").exists(),
        "data directory removed after the leave"
    );
    assert!(
        eventually(JOIN, || has_status(&seed_addr, "mem1", NodeStatus::Left)).await,
        "the seed never saw mem1 leave"
    );
    // Every key, including those mem1 owned, is on the seed now.
    assert_eq!(
        unreadable(&seed_addr, "before", 200).await,
        Vec::<usize>::new()
    );
    assert_eq!(
        unreadable(&seed_addr, "after", 200).await,
        Vec::<usize>::new()
    );
    // Ids are never reused.
    assert_eq!(manager.add(Tier::Memory, 1).await.unwrap(), ["mem2"]);
    assert!(matches!(
        manager.remove(Tier::Disk, "mem2").await,
        Err(ManagerError::UnknownNode { .. })
    ));
    assert_eq!(manager.shutdown().await, 1);
}

#[tokio::test]
async fn a_killed_node_is_replaced_with_its_id_and_data() {
    let _serial = testkit::serial();
    let data = tempfile::tempdir().unwrap();
    let (seed, manager) = cluster(data.path());
    let seed_addr = seed.native.to_string();
    manager.add(Tier::Memory, 1).await.expect("add");
    assert!(eventually(JOIN, || has_status(&seed_addr, "mem1", NodeStatus::Alive)).await);
    let mem1_addr = manager.nodes().await.unwrap()[0].address.clone().unwrap();
    write_keys(&mem1_addr, "k", 100).await;
    let before = member(&seed_addr, "mem1").await.unwrap().incarnation;

    let pid = manager.pid("mem1").expect("running");
    // SAFETY: kill(2) on the manager's child.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);

    // `check` notices the death and restarts the node after the back-off (200 ms here).
    let mut events = Vec::new();
    let deadline = std::time::Instant::now() + JOIN;
    let mut replaced = false;
    while !replaced && std::time::Instant::now() < deadline {
        events.extend(manager.check().await.expect("check"));
        replaced = events
            .iter()
            .any(|e| matches!(e, ManagerEvent::Replaced { .. }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(replaced, "not replaced; events: {events:?}");
    assert!(
        matches!(&events[0], ManagerEvent::Died { id, .. } if id == "mem1"),
        "{events:?}"
    );
    assert_ne!(manager.pid("mem1"), Some(pid));
    let node = &manager.nodes().await.unwrap()[0];
    assert_eq!(
        (node.id.as_str(), node.state, node.restarts),
        ("mem1", NodeState::Running, 1)
    );

    // The same id is back in the membership, with a new incarnation (a restart).
    assert!(
        eventually(JOIN, || async {
            member(&seed_addr, "mem1")
                .await
                .is_some_and(|m| m.status == NodeStatus::Alive as i32 && m.incarnation > before)
        })
        .await,
        "mem1 never came back: {:?}",
        member(&seed_addr, "mem1").await
    );
    // Its data directory (write-ahead log) brought its keys back.
    assert_eq!(unreadable(&seed_addr, "k", 100).await, Vec::<usize>::new());
    assert_eq!(manager.shutdown().await, 1);
}

#[tokio::test]
async fn a_node_that_cannot_start_is_an_error_and_not_kept() {
    let data = tempfile::tempdir().unwrap();
    let mut config = LocalConfig::new(latticekv_bin(), data.path());
    config.args = vec!["--workers".into(), "lots".into()];
    let manager = LocalManager::new(config).unwrap();
    let err = manager.add(Tier::Disk, 1).await.expect_err("bad flag");
    assert!(
        matches!(&err, ManagerError::Start { id, detail } if id == "disk1" && detail.contains("exited")),
        "{err}"
    );
    assert!(manager.nodes().await.unwrap().is_empty());
    assert!(manager.check().await.unwrap().is_empty());
}

#[tokio::test]
async fn restarts_that_keep_failing_back_off_and_a_later_one_succeeds() {
    let _serial = testkit::serial();
    let data = tempfile::tempdir().unwrap();
    let (_seed, manager) = cluster(data.path());
    manager.add(Tier::Memory, 1).await.expect("add");
    let pid = manager.pid("mem1").expect("running");
    // SAFETY: kill(2) on the manager's child.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);
    // Its data directory becomes a file: every restart fails before a process starts.
    let dir = data.path().join("mem1");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"not a directory").unwrap();

    let mut events = Vec::new();
    let failed = |events: &[ManagerEvent]| {
        events
            .iter()
            .filter(|e| matches!(e, ManagerEvent::RestartFailed { .. }))
            .count()
    };
    let deadline = std::time::Instant::now() + JOIN;
    while failed(&events) < 3 && std::time::Instant::now() < deadline {
        events.extend(manager.check().await.expect("check"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Initial back-off 200 ms, doubling with every failure in a row.
    let waits: Vec<u64> = events
        .iter()
        .map(|e| match e {
            ManagerEvent::Died { restart_in_ms, .. } => *restart_in_ms,
            ManagerEvent::RestartFailed {
                retry_in_ms, error, ..
            } => {
                assert!(error.contains("creating"), "{error}");
                *retry_in_ms
            }
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(waits, [200, 400, 800, 1600], "{events:?}");
    let node = &manager.nodes().await.unwrap()[0];
    assert_eq!((node.state, node.restarts), (NodeState::Restarting, 0));

    std::fs::remove_file(&dir).unwrap();
    let mut replaced = false;
    while !replaced && std::time::Instant::now() < deadline {
        replaced = manager
            .check()
            .await
            .expect("check")
            .iter()
            .any(|e| matches!(e, ManagerEvent::Replaced { id, .. } if id == "mem1"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(replaced, "never restarted once the directory could be made");
    let node = &manager.nodes().await.unwrap()[0];
    assert_eq!((node.state, node.restarts), (NodeState::Running, 1));
    assert!(dir.is_dir());
    assert_eq!(manager.shutdown().await, 1);
}
