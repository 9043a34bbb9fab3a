//! Disk-tier nodes (`latticekv server --tier disk`): keys survive `kill -9` and restarts
//! (the reference code's disk tier forgot them), also with a different worker count; a
//! memory node's writes reach a disk node of the same cluster.

mod common;

use std::time::Duration;

use client::Client;
use common::{eventually, NodeProc};
use testkit::rt;

fn disk_node(dir: &std::path::Path, workers: &str) -> NodeProc {
    NodeProc::server(
        "d1",
        None,
        &[
            "--tier",
            "disk",
            "--data-dir",
            dir.to_str().unwrap(),
            "--workers",
            workers,
        ],
    )
}

const N: usize = 3_000;

/// Waits (at most 10 s) until the node `c` talks to sees an alive disk-tier member.
async fn wait_for_disk_node(c: &Client) {
    for _ in 0..200 {
        let t = c.refresh_topology().await.unwrap();
        if t.members.iter().any(|m| m.role == "disk" && m.status == 0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the disk node never joined");
}

async fn write_everything(c: &Client) {
    for i in 0..N {
        c.assign(format!("reg{i}"), format!("value{i}"))
            .await
            .unwrap();
    }
    for i in 0..200 {
        c.counter_add(format!("ctr{}", i % 20), 3).await.unwrap();
        c.set_add(format!("set{}", i % 10), [format!("m{i}")])
            .await
            .unwrap();
    }
    for i in 0..100 {
        assert!(c.delete(format!("reg{i}")).await.unwrap());
    }
}

async fn check_everything(c: &Client) {
    for i in 0..N {
        let got = c.get_lww(format!("reg{i}")).await.unwrap();
        if i < 100 {
            assert_eq!(got, None, "reg{i} was deleted");
        } else {
            let want = format!("value{i}");
            assert_eq!(got.as_deref(), Some(want.as_bytes()), "reg{i}");
        }
    }
    for i in 0..20 {
        assert_eq!(
            c.counter_get(format!("ctr{i}")).await.unwrap(),
            30,
            "ctr{i}"
        );
    }
    for i in 0..10 {
        assert_eq!(
            c.set_members(format!("set{i}")).await.unwrap().len(),
            20,
            "set{i}"
        );
    }
}

#[test]
fn a_disk_node_keeps_every_key_across_kill_9_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    {
        let node = disk_node(dir.path(), "2");
        rt.block_on(async {
            let c = Client::connect(&node.native.to_string()).await.unwrap();
            write_everything(&c).await;
            check_everything(&c).await;
        });
        // `node` is dropped here: SIGKILL, no shutdown path runs.
    }
    {
        let node = disk_node(dir.path(), "2");
        rt.block_on(async {
            let c = Client::connect(&node.native.to_string()).await.unwrap();
            check_everything(&c).await;
            let status = c.status().await.unwrap();
            let keys: u64 = status.workers.iter().map(|w| w.keys).sum();
            assert_eq!(
                keys as usize,
                N - 100 + 20 + 10,
                "live keys counted from disk"
            );
        });
    }
    // Fewer workers than before: the former worker's keys are re-homed.
    let node = disk_node(dir.path(), "1");
    rt.block_on(async {
        let c = Client::connect(&node.native.to_string()).await.unwrap();
        check_everything(&c).await;
        // And still writable.
        c.counter_add("ctr0", 1).await.unwrap();
        assert_eq!(c.counter_get("ctr0").await.unwrap(), 31);
    });
}

#[test]
fn writes_to_a_memory_node_reach_the_disk_tier() {
    let dir = tempfile::tempdir().unwrap();
    let memory = NodeProc::server("m1", None, &["--workers", "1", "--anti-entropy-ms", "1000"]);
    let disk = NodeProc::server(
        "d1",
        Some(memory.native),
        &[
            "--tier",
            "disk",
            "--data-dir",
            dir.path().to_str().unwrap(),
            "--workers",
            "1",
            "--anti-entropy-ms",
            "1000",
        ],
    );
    let rt = rt();
    rt.block_on(async {
        let c = Client::connect(&memory.native.to_string()).await.unwrap();
        wait_for_disk_node(&c).await;
        for i in 0..500 {
            c.assign(format!("k{i}"), "v").await.unwrap();
        }
    });
    let disk_worker = disk.workers[0];
    let all_on_disk = eventually(Duration::from_secs(20), || {
        let mut n = common::Native::connect(disk_worker);
        let keys: Vec<bytes::Bytes> = (0..500).map(|i| format!("k{i}").into()).collect();
        let resp = n.call(wire::pb::request::Op::Holds(wire::pb::Holds { keys }));
        match resp.result {
            Some(wire::pb::response::Result::Multi(m)) => m.results.iter().all(|r| {
                matches!(r.result, Some(wire::pb::key_result::Result::Ack(ref a)) if a.count == 1)
            }),
            _ => false,
        }
    });
    assert!(all_on_disk, "the disk node does not hold every key");
}

/// Worker addresses of the members of `role` in a node's topology.
fn workers_of(front: std::net::SocketAddr, role: &str) -> Vec<std::net::SocketAddr> {
    let mut n = common::Native::connect(front);
    let resp = n.call(wire::pb::request::Op::Topology(
        wire::pb::GetTopology::default(),
    ));
    let Some(wire::pb::response::Result::Topology(t)) = resp.result else {
        panic!("{resp:?}")
    };
    t.members
        .iter()
        .filter(|m| m.role == role && m.status == wire::pb::NodeStatus::Alive as i32)
        .flat_map(|m| m.workers.iter().map(|w| w.parse().unwrap()))
        .collect()
}

/// How many of `keys` the workers at `addrs` hold, in all.
fn held(addrs: &[std::net::SocketAddr], keys: &[String]) -> usize {
    let mut total = 0;
    for addr in addrs {
        let mut n = common::Native::connect(*addr);
        let resp = n.call(wire::pb::request::Op::Holds(wire::pb::Holds {
            keys: keys.iter().map(|k| k.clone().into()).collect(),
        }));
        if let Some(wire::pb::response::Result::Multi(m)) = resp.result {
            total += m
                .results
                .iter()
                .filter(|r| {
                    matches!(r.result, Some(wire::pb::key_result::Result::Ack(ref a)) if a.count == 1)
                })
                .count();
        }
    }
    total
}

/// `local` with write-through to its disk node (`--disk-copy every-write`): the disk tier
/// gets every key, and after a restart the memory tier pulls its copy back from it.
#[test]
fn local_serves_every_key_right_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let keys: Vec<String> = (0..1_000).map(|i| format!("key{i}")).collect();
    let rt = rt();
    let flags = [
        "--data-dir",
        data,
        "--workers",
        "2",
        "--disk-copy",
        "every-write",
    ];
    {
        let node = NodeProc::start(&flags);
        rt.block_on(async {
            let c = Client::connect(&node.native.to_string()).await.unwrap();
            assign_all(&c, &keys).await;
        });
        let disk = workers_of(node.native, "disk");
        assert!(!disk.is_empty(), "local runs a disk node");
        assert!(
            eventually(Duration::from_secs(20), || held(&disk, &keys) == keys.len()),
            "the disk tier did not receive every key"
        );
        // Killed: the memory tier's copy is gone.
    }
    let node = NodeProc::start(&flags);
    // The same process starts both nodes; the memory node must see its disk node.
    rt.block_on(read_back(&node, &keys, true));
    // And the memory tier pulls its copy back from the disk tier.
    let memory = node.workers.clone();
    assert!(
        eventually(Duration::from_secs(20), || held(&memory, &keys)
            == keys.len()),
        "the memory tier did not recover its keys from the disk tier"
    );
}

#[test]
fn a_full_disk_gives_writers_an_error_and_reads_keep_working() {
    let fs = common::Tmpfs::mount("48m");
    let config = fs.path.join("node.toml");
    std::fs::write(&config, "[disk]\nreserve_bytes = 8388608\n").unwrap();
    let ballast = fs.path.join("ballast");
    let data = fs.path.join("data");
    let node = NodeProc::server(
        "full",
        None,
        &[
            "--tier",
            "disk",
            "--data-dir",
            data.to_str().unwrap(),
            "--workers",
            "1",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    // Fill the file system until writes are refused.
    std::fs::write(&ballast, vec![0u8; 24 << 20]).unwrap();
    let mut resp = common::Resp::connect(node.resp);
    let value = vec![b'x'; 64 * 1024];
    let mut written = 0;
    let error = loop {
        let key = format!("k{written}");
        resp.send(&[b"SET", key.as_bytes(), &value]);
        let line = resp.line().trim_end().to_string();
        if line != "+OK" {
            break line;
        }
        written += 1;
        assert!(written < 10_000, "the disk never filled up");
    };
    assert!(written > 10, "only {written} writes fit: {error}");
    assert!(
        error.starts_with("-MISCONF storage error: disk full"),
        "unexpected answer to a write on a full disk: {error}"
    );
    // Reads of acknowledged writes keep working, and so does the node.
    for i in [0, written / 2, written - 1] {
        let key = format!("k{i}");
        resp.send(&[b"GET", key.as_bytes()]);
        assert_eq!(resp.line().trim_end(), format!("${}", value.len()), "{key}");
        let mut body = vec![0u8; value.len() + 2];
        std::io::Read::read_exact(&mut resp.stream, &mut body).unwrap();
        assert_eq!(&body[..value.len()], &value[..], "{key}");
    }
    resp.roundtrip(&[b"PING"], b"+PONG\r\n");
    // Space comes back: writes resume without a restart.
    std::fs::remove_file(&ballast).unwrap();
    resp.roundtrip(&[b"SET", b"after", b"1"], b"+OK\r\n");
    resp.roundtrip(&[b"GET", b"after"], b"$1\r\n1\r\n");
}

/// A disk node reports what it could store — what it stores plus its file system's free
/// space beyond the reserve — and the monitor scales the disk tier against that when it is
/// given no `--disk-capacity`.
#[test]
fn a_disk_node_reports_its_capacity_and_the_monitor_uses_it() {
    let fs = common::Tmpfs::mount("48m");
    let config = fs.path.join("node.toml");
    std::fs::write(&config, "[disk]\nreserve_bytes = 8388608\n").unwrap();
    let data = fs.path.join("data");
    let node = NodeProc::server(
        "cap",
        None,
        &[
            "--tier",
            "disk",
            "--data-dir",
            data.to_str().unwrap(),
            "--workers",
            "1",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    let addr = node.native.to_string();
    let capacity = || {
        rt().block_on(async {
            let c = Client::connect(&addr).await.unwrap();
            c.status().await.unwrap().disk_capacity_bytes
        })
    };
    // 48 MiB of file system, 8 MiB reserved, a few hundred KiB of LSM files.
    const MIB: u64 = 1 << 20;
    let empty = capacity();
    assert!(
        (32 * MIB..=40 * MIB).contains(&empty),
        "{empty} bytes reported on a 48 MiB file system with 8 MiB reserved"
    );
    // Space taken by something else is space the node can no longer use.
    let ballast = fs.path.join("ballast");
    std::fs::write(&ballast, vec![0u8; 16 << 20]).unwrap();
    let squeezed = capacity();
    assert!(
        (empty - 17 * MIB..=empty - 15 * MIB).contains(&squeezed),
        "{squeezed} bytes after 16 MiB of ballast (was {empty})"
    );
    // The monitor's snapshot: the disk node's capacity is the one it reported.
    let out = std::process::Command::new(common::bin())
        .args([
            "monitor",
            "--addr",
            &addr,
            "--dry-run",
            "--rounds",
            "1",
            "--print-snapshot",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let snapshot: serde_json::Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v.get("now_ms").is_some())
        .unwrap_or_else(|| panic!("no snapshot printed: {text}"));
    let seen = snapshot["nodes"][0]["capacity_bytes"].as_u64().unwrap();
    assert!(
        seen.abs_diff(squeezed) < MIB,
        "the monitor saw {seen} bytes, the node reports {squeezed}: {snapshot}"
    );
}

#[test]
fn moving_a_key_between_tiers_is_an_edit_of_its_vector() {
    let dir = tempfile::tempdir().unwrap();
    let memory = NodeProc::server("m1", None, &["--workers", "1"]);
    let disk = NodeProc::server(
        "d1",
        Some(memory.native),
        &[
            "--tier",
            "disk",
            "--data-dir",
            dir.path().to_str().unwrap(),
            "--workers",
            "1",
        ],
    );
    let keys: Vec<String> = (0..100).map(|i| format!("cold{i}")).collect();
    let rt = rt();
    rt.block_on(async {
        let c = Client::connect(&memory.native.to_string()).await.unwrap();
        wait_for_disk_node(&c).await;
        for k in &keys {
            c.assign(k, "v1").await.unwrap();
        }
    });
    let on_disk = disk.workers.clone();
    let in_memory = memory.workers.clone();
    assert!(
        eventually(Duration::from_secs(20), || held(&on_disk, &keys)
            == keys.len()
            && held(&in_memory, &keys) == keys.len()),
        "every key in both tiers first"
    );
    // Demote: out of memory, on disk only.
    for k in &keys[..50] {
        memory.cli_ok(&["replicate", k, "--global", "0"]);
    }
    assert!(
        eventually(Duration::from_secs(20), || held(&in_memory, &keys[..50])
            == 0),
        "demoted keys are still in memory"
    );
    assert_eq!(
        held(&in_memory, &keys[50..]),
        50,
        "the others stay in memory"
    );
    assert_eq!(held(&on_disk, &keys), 100);
    rt.block_on(async {
        let c = Client::connect(&memory.native.to_string()).await.unwrap();
        // Served from the disk tier, through the memory node too, and writable.
        for k in &keys[..50] {
            assert_eq!(
                c.get_lww(k).await.unwrap().as_deref(),
                Some(&b"v1"[..]),
                "{k}"
            );
            c.assign(k, "v2").await.unwrap();
            assert_eq!(
                c.get_lww(k).await.unwrap().as_deref(),
                Some(&b"v2"[..]),
                "{k}"
            );
        }
    });
    // Promote back — half by an explicit vector, half by returning to the default
    // placement: the memory tier gets them again, with the latest values.
    for k in &keys[..25] {
        memory.cli_ok(&["replicate", k, "--global", "1"]);
    }
    for k in &keys[25..50] {
        memory.cli_ok(&["replicate", k, "--reset"]);
    }
    assert!(
        eventually(Duration::from_secs(20), || held(&in_memory, &keys[..50])
            == 50),
        "promoted keys did not come back to memory"
    );
    rt.block_on(async {
        let c = Client::connect(&memory.native.to_string()).await.unwrap();
        for k in &keys[..50] {
            assert_eq!(
                c.get_lww(k).await.unwrap().as_deref(),
                Some(&b"v2"[..]),
                "{k}"
            );
        }
    });
    // A vector with no replica at all is refused.
    let out = memory.cli(&["replicate", "nowhere", "--global", "0", "--disk", "0"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs a replica"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `local`'s default (`disk_copy = on_eviction`): nothing was evicted, so the disk tier
/// holds none of the keys; after a kill the memory node's log serves every one. The writes
/// are acknowledged at the durable level: at the default (`merged`) level a kill right
/// after the last write may lose that write's log window (docs/durability.md), which is
/// not what this test is about.
#[test]
fn local_default_serves_every_key_from_its_log_after_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let keys: Vec<String> = (0..1_000).map(|i| format!("key{i}")).collect();
    let rt = rt();
    let flags = ["--data-dir", data, "--workers", "2"];
    {
        let node = NodeProc::start(&flags);
        rt.block_on(async {
            let options = client::ClientOptions {
                durable: true,
                ..Default::default()
            };
            let c = Client::connect_with(&node.native.to_string(), options)
                .await
                .unwrap();
            wait_for_disk_node(&c).await;
            assign_all(&c, &keys).await;
        });
        let disk = workers_of(node.native, "disk");
        assert!(!disk.is_empty(), "local runs a disk node");
        assert_eq!(
            held(&disk, &keys),
            0,
            "live values were copied to the disk tier"
        );
        // Killed here (the process is killed when `node` drops).
    }
    let node = NodeProc::start(&flags);
    rt.block_on(read_back(&node, &keys, false));
    assert_eq!(held(&node.workers, &keys), keys.len());
}

/// Writes `v-<key>` to every key of `keys` through `c`.
async fn assign_all(c: &Client, keys: &[String]) {
    for k in keys {
        c.assign(k, format!("v-{k}")).await.unwrap();
    }
}

/// Asserts every key of `keys` reads `v-<key>` (after the disk node joined, with
/// `wait_disk`).
async fn read_back(node: &NodeProc, keys: &[String], wait_disk: bool) {
    let c = Client::connect(&node.native.to_string()).await.unwrap();
    if wait_disk {
        wait_for_disk_node(&c).await;
    }
    for k in keys {
        let want = format!("v-{k}");
        assert_eq!(
            c.get_lww(k).await.unwrap().as_deref(),
            Some(want.as_bytes()),
            "{k} after the restart"
        );
    }
}

/// `latticekv local`'s disk node runs its LSM's flush and compaction threads at a lower
/// priority than the workers, which answer requests and the memory tier's fetches: work
/// nobody waits for yields a shared core to them (`node::priority`).
#[test]
fn the_disk_node_runs_flushes_and_compactions_below_its_workers() {
    let node = NodeProc::start(&["--workers", "1"]);
    let rt = rt();
    rt.block_on(async {
        let c = Client::connect(&node.native.to_string()).await.unwrap();
        wait_for_disk_node(&c).await;
    });
    let pid = node.0.child.id();
    // (thread name, nice) of every thread of the process.
    let read_threads = || -> Vec<(String, i64)> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
            .map(|stat| {
                let (open, close) = (stat.find('(').unwrap(), stat.rfind(')').unwrap());
                // Fields after the name: state is field 3, nice field 19.
                let rest: Vec<&str> = stat[close + 2..].split(' ').collect();
                (stat[open + 1..close].to_string(), rest[16].parse().unwrap())
            })
            .collect()
    };
    let named = |threads: &[(String, i64)], prefix: &str| -> Vec<i64> {
        threads
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|&(_, nice)| nice)
            .collect()
    };
    // The disk node's workers start after it joined the cluster.
    let mut threads = read_threads();
    for _ in 0..200 {
        if named(&threads, "lkv-worker-").len() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        threads = read_threads();
    }
    let workers = named(&threads, "lkv-worker-");
    assert_eq!(workers.len(), 2, "a memory and a disk worker: {threads:?}");
    assert_eq!(
        workers[0], workers[1],
        "workers keep one priority: {threads:?}"
    );
    let lsm = named(&threads, "fjall");
    assert!(!lsm.is_empty(), "the LSM's threads: {threads:?}");
    // Nice values stop at 19: a node started at nice 10 or more (a niced test run) puts
    // its LSM threads at 19.
    assert!(
        lsm.iter().all(|&n| n == (workers[0] + 10).min(19)),
        "the LSM's threads run 10 nice steps below the workers: {threads:?}"
    );
}
