//! Helpers of the cluster-manager tests: the `latticekv` binary, cluster membership as a
//! node sees it, and waiting for a condition with a deadline.

#![allow(dead_code)]

#[cfg(feature = "kubernetes")]
pub mod apiserver;

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use wire::pb;

/// The `latticekv` binary built by the `cli` crate (`cargo build -p latticekv --bin latticekv`):
/// `$LATTICEKV_BIN`, else next to this test's target directory, else under
/// `$CARGO_TARGET_DIR` or the workspace's `target/debug`. A missing binary fails the test.
pub fn latticekv_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LATTICEKV_BIN") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "LATTICEKV_BIN={} does not exist", p.display());
        return p;
    }
    let mut tried = Vec::new();
    // target/<profile>/deps/<this test> → target/<profile>/latticekv
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent().and_then(|deps| deps.parent()) {
            tried.push(dir.join("latticekv"));
        }
    }
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        tried.push(PathBuf::from(dir).join("debug").join("latticekv"));
    }
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    tried.push(workspace.join("target").join("debug").join("latticekv"));
    for p in &tried {
        if p.is_file() {
            return p.clone();
        }
    }
    panic!(
        "the latticekv binary was not found (tried {tried:?}); build it first with \
         `cargo build -p latticekv --bin latticekv` or set LATTICEKV_BIN"
    );
}

/// Flags of every node in these tests: one worker, fast membership gossip, quick failure
/// detection, one replica per key.
pub const NODE_FLAGS: [&str; 8] = [
    "--workers",
    "1",
    "--cluster-gossip-ms",
    "100",
    "--failure-timeout-ms",
    "3000",
    "--replication",
    "1",
];

/// The members node `addr` knows (empty if it cannot be asked).
pub async fn members(addr: &str) -> Vec<pb::Member> {
    match client::Client::connect(addr).await {
        Ok(c) => c.status().await.map(|s| s.members).unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

/// The member `id` as node `addr` sees it.
pub async fn member(addr: &str, id: &str) -> Option<pb::Member> {
    members(addr).await.into_iter().find(|m| m.node_id == id)
}

/// True if node `addr` sees member `id` with `status`.
pub async fn has_status(addr: &str, id: &str, status: pb::NodeStatus) -> bool {
    member(addr, id)
        .await
        .is_some_and(|m| m.status == status as i32)
}

/// Polls `f` every 50 ms until it is true or `timeout` passes; true if it became true.
pub async fn eventually<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if f().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes `n` keys `<prefix>:<i>` = `v<i>` through `addr`, each acknowledged once it is
/// on disk (the durable level) where the node has a data directory.
pub async fn write_keys(addr: &str, prefix: &str, n: usize) {
    let options = client::ClientOptions {
        durable: true,
        ..Default::default()
    };
    let c = client::Client::connect_with(addr, options)
        .await
        .expect("connect");
    for i in 0..n {
        c.assign(format!("{prefix}:{i}"), format!("v{i}"))
            .await
            .expect("write");
    }
}

/// The keys `<prefix>:<i>` that a read through `addr` does not return as `v<i>`.
pub async fn unreadable(addr: &str, prefix: &str, n: usize) -> Vec<usize> {
    let c = client::Client::connect(addr).await.expect("connect");
    let mut missing = Vec::new();
    for i in 0..n {
        let want = format!("v{i}");
        match c.get_lww(format!("{prefix}:{i}")).await {
            Ok(Some(v)) if v.as_ref() == want.as_bytes() => {}
            _ => missing.push(i),
        }
    }
    missing
}
