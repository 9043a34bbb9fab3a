//! The elasticity loop end to end on real processes: `latticekv monitor` polls two
//! `latticekv server` nodes, replicates the key a skewed load hammers onto both, and
//! returns it to the default once the load has moved to another key; every node's status
//! shows what the monitor did.

mod common;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::Client;
use common::cluster::*;
use common::{bin, eventually};

/// Node flags: one worker each, fast gossip, statistics every 200 ms over a 2 s window.
const FLAGS: &[&str] = &[
    "--workers",
    "1",
    "--cluster-gossip-ms",
    "100",
    "--failure-timeout-ms",
    "5000",
    "--stats-period-ms",
    "200",
    "--stats-window-ms",
    "2000",
];

/// The policy: a round every 500 ms, no grace to wait out at start, a latency objective
/// every request exceeds and a compute band no node reaches, so the latency branch always
/// takes the "replicate hot keys" path (the rule under test) and never adds nodes. The
/// cluster keeps one copy of a key (replication 1, no disk tier): k = 0, else the policy
/// would keep every key it touches on two nodes.
const POLICY: &str = r#"
fault_tolerance = 0
period_ms = 500
grace_ms = 500
key_cooldown_ms = 2000
latency_objective_us = 1
min_latency_samples = 10
compute_band = { lower = 0.0, upper = 1.0 }
"#;

struct Monitor(Child);

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads `key` from many tasks until `stop`, with a sprinkle of cold keys.
fn load(addr: String, key: &'static str, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = rt();
        rt.block_on(async move {
            let c = Client::connect(&addr).await.unwrap();
            let mut tasks = Vec::new();
            for t in 0..8 {
                let c = c.clone();
                let stop = stop.clone();
                tasks.push(tokio::spawn(async move {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let k = if i.is_multiple_of(10) {
                            format!("cold{}", (i / 10 + t) % 500)
                        } else {
                            key.to_string()
                        };
                        let _ = c.get(&k).await;
                        i += 1;
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
        });
    })
}

/// The memory-tier node count of `key`'s vector, as the cluster publishes it.
fn memory_replicas(addr: &str, key: &str) -> u32 {
    rt().block_on(async {
        let c = Client::connect(addr).await.unwrap();
        c.refresh_topology().await.unwrap();
        c.layout().vector(key.as_bytes()).memory.global
    })
}

#[test]
fn a_hot_key_is_replicated_within_seconds_and_returns_to_the_default_when_the_load_moves() {
    let nodes = cluster(&["e1", "e2"], FLAGS, &[]);
    let addr = nodes[0].native.to_string();
    write_all(nodes[0].native, &["hot".into(), "next".into()]);
    assert_eq!(memory_replicas(&addr, "hot"), 1);

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("policy.toml");
    std::fs::File::create(&config)
        .unwrap()
        .write_all(POLICY.as_bytes())
        .unwrap();
    let log = dir.path().join("monitor.log");
    let log2 = dir.path().join("monitor2.log");
    let start_monitor = |log: &std::path::Path| {
        Monitor(
            Command::new(bin())
                .args(["monitor", "--addr", &addr, "--config"])
                .arg(&config)
                .stdout(std::fs::File::create(log).unwrap())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let monitor = start_monitor(&log);
    let actions = || {
        std::fs::read_to_string(&log).unwrap_or_default()
            + "--- the second monitor:\n"
            + &std::fs::read_to_string(&log2).unwrap_or_default()
    };

    // The hot key gets a replica on the other node within seconds (the paper: ~10 s).
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let hot = load(addr.clone(), "hot", stop.clone());
    assert!(
        eventually(Duration::from_secs(10), || memory_replicas(&addr, "hot")
            == 2),
        "the hot key was not replicated within 10 s; the monitor's actions:\n{}",
        actions()
    );
    let took = started.elapsed();
    // Both nodes' statuses show the action (the monitor reports after acting).
    for node in &nodes {
        let addr = node.native.to_string();
        let reported = || {
            let status = rt().block_on(async {
                Client::connect(&addr)
                    .await
                    .unwrap()
                    .status()
                    .await
                    .unwrap()
            });
            status.policy.is_some_and(|p| {
                p.actions.iter().any(|a| {
                    a.kind == "set_replication" && &a.key[..] == b"hot" && a.memory_global == 2
                })
            })
        };
        assert!(
            eventually(Duration::from_secs(5), reported),
            "{addr}'s status does not show the replication"
        );
    }
    stop.store(true, Ordering::Relaxed);
    hot.join().unwrap();

    // A new monitor takes over: the vector the first one set is marked as the policy's on
    // the entry, so the new one treats it as its own (not as an operator's, pinned).
    drop(monitor);
    let _monitor = start_monitor(&log2);

    // The load moves: the formerly hot key cools below the mean and goes back to the
    // default, and the new one is replicated.
    let stop = Arc::new(AtomicBool::new(false));
    let next = load(addr.clone(), "next", stop.clone());
    assert!(
        eventually(Duration::from_secs(20), || memory_replicas(&addr, "hot")
            == 1
            && memory_replicas(&addr, "next") == 2),
        "hot: {} replicas, next: {}; the monitor's actions:\n{}\nwhat it sees now:\n{}",
        memory_replicas(&addr, "hot"),
        memory_replicas(&addr, "next"),
        actions(),
        dry_run(&addr, &config)
    );
    stop.store(true, Ordering::Relaxed);
    next.join().unwrap();
    eprintln!("hot key replicated {took:?} after the load started");
    drop(nodes);
}

/// One `--dry-run` round with its snapshot (for failure messages).
fn dry_run(addr: &str, config: &std::path::Path) -> String {
    let out = Command::new(bin())
        .args([
            "monitor",
            "--addr",
            addr,
            "--dry-run",
            "--rounds",
            "1",
            "--print-snapshot",
        ])
        .arg("--config")
        .arg(config)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn dry_run_prints_actions_and_changes_nothing() {
    let nodes = cluster(&["d1", "d2"], FLAGS, &[]);
    let addr = nodes[0].native.to_string();
    write_all(nodes[0].native, &["hot".into()]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("policy.toml");
    std::fs::write(&config, POLICY).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let hot = load(addr.clone(), "hot", stop.clone());
    // Give the nodes one statistics window of load before the monitor looks.
    assert!(eventually(Duration::from_secs(10), || {
        let status = rt().block_on(async {
            Client::connect(&addr)
                .await
                .unwrap()
                .status()
                .await
                .unwrap()
        });
        status.workers.iter().any(|w| {
            w.stats
                .as_ref()
                .is_some_and(|s| s.hot_keys.iter().any(|h| &h.key[..] == b"hot"))
        })
    }));
    let out = Command::new(bin())
        .args([
            "monitor",
            "--addr",
            &addr,
            "--dry-run",
            "--rounds",
            "3",
            "--config",
        ])
        .arg(&config)
        .output()
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    hot.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert!(
        lines.iter().any(|a| a.to_string().contains("hot")),
        "no action for the hot key: {text}"
    );
    assert_eq!(
        memory_replicas(&addr, "hot"),
        1,
        "--dry-run changed the vector"
    );
}

/// Every node of the growth test blocks its worker 1 ms per request it answers
/// (`LATTICEKV_FAULT`, testing only): a node of known capacity, about 1,000 requests/s
/// whatever the machine, so one node can be driven to a known occupancy.
const SLOW: (&str, &str) = ("LATTICEKV_FAULT", "slow-request-us=1000");

/// The offered load of the growth test, requests per second (open loop): 60 % of one slow
/// node in blocking alone (≈ 90 % busy measured, with the debug build's own work), 30 % of
/// each of two.
const OFFERED: u64 = 600;

/// The growth test's latency objective, µs. On one node the servers' latency, corrected
/// for queueing (mean / (1 − ρ), docs/elasticity.md), measured 12–60 ms, above f_upper ·
/// L_obj = 4.5 ms: the policy adds a node. Split over two nodes it measured 2.2–2.5 ms:
/// under the objective again, with room for a slower machine.
const OBJECTIVE_US: f64 = 6_000.0;

/// A policy with a real latency objective, the default bands, one node per addition, then
/// holding still (a long grace period after the membership changes).
const GROW: &str = r#"
fault_tolerance = 0
period_ms = 500
grace_ms = 600000
latency_objective_us = 6000
min_latency_samples = 10
node_addition_batch = 1
"#;

/// The ids of the alive members `addr` knows.
fn alive_ids(addr: &str) -> Vec<String> {
    let t = rt().block_on(async {
        let c = Client::connect(addr).await.unwrap();
        c.refresh_topology().await.unwrap()
    });
    t.members
        .iter()
        .filter(|m| m.status == wire::pb::NodeStatus::Alive as i32)
        .map(|m| m.node_id.clone())
        .collect()
}

/// The pids of `latticekv server` processes whose command line contains every one of
/// `parts`.
fn server_pids(parts: &[&str]) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            (cmd.contains(" server ") && parts.iter().all(|p| cmd.contains(p))).then_some(pid)
        })
        .collect()
}

/// The pid of the `latticekv server` whose command line names `data_dir`.
fn server_pid(data_dir: &std::path::Path) -> Option<i32> {
    server_pids(&[&data_dir.display().to_string()])
        .first()
        .copied()
}

/// The queueing-corrected mean latency (µs) of every round `--print-snapshot` logged, in
/// order (rounds without a measured latency are left out).
fn logged_latencies(log: &str) -> Vec<f64> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("now_ms").is_some())
        .filter_map(|v| v["latency"]["mean_us"].as_f64())
        .collect()
}

/// Sends `OFFERED` requests a second to `addr` (writes over 2,000 keys), without waiting
/// for answers (open loop: a slow server makes requests queue, not the load drop), until
/// `stop`; at most 500 in flight.
fn paced_load(addr: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        rt().block_on(async move {
            let c = Client::connect(&addr).await.unwrap();
            let in_flight = Arc::new(tokio::sync::Semaphore::new(500));
            // Spread evenly (a request every 1.3 ms, not bursts every 10 ms): a burst
            // arrives as one batch and every request in it waits for the whole batch.
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let start = Instant::now();
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let due = (start.elapsed().as_secs_f64() * OFFERED as f64) as u64;
                while sent < due {
                    sent += 1;
                    let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                        continue;
                    };
                    let c = c.clone();
                    let key = format!("u{}", sent % 2_000);
                    tokio::spawn(async move {
                        let _ = c.assign(key, "v").await;
                        drop(permit);
                    });
                }
            }
            let _ = in_flight.acquire_many(500).await;
        })
    })
}

#[test]
fn a_loaded_node_gets_a_new_node_latency_returns_under_the_objective_and_a_killed_node_is_replaced()
{
    let nodes = cluster(&["g1"], FLAGS, &[SLOW]);
    let addr = nodes[0].native.to_string();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("policy.toml");
    std::fs::write(&config, GROW).unwrap();
    let root = dir.path().join("nodes");
    let mut args: Vec<String> = vec![
        "monitor".into(),
        "--addr".into(),
        addr.clone(),
        "--manager".into(),
        "local".into(),
        "--data-root".into(),
        root.display().to_string(),
        "--config".into(),
        config.display().to_string(),
        "--print-snapshot".into(),
    ];
    for f in FLAGS {
        args.push(format!("--server-arg={f}"));
    }
    let log = dir.path().join("monitor.log");
    let mut monitor = Monitor(
        Command::new(bin())
            .args(&args)
            // The nodes it starts inherit the fault: they are as slow as g1.
            .env(SLOW.0, SLOW.1)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let output = || std::fs::read_to_string(&log).unwrap_or_default();
    let actions = || {
        output()
            .lines()
            .filter(|l| !l.contains("\"now_ms\""))
            .collect::<Vec<_>>()
            .join("\n")
    };
    // A uniform load at three quarters of the node's capacity: no key is hot, requests
    // queue on the one worker.
    let stop = Arc::new(AtomicBool::new(false));
    let load = paced_load(addr.clone(), stop.clone());
    assert!(
        eventually(Duration::from_secs(30), || alive_ids(&addr)
            .contains(&"mem1".to_string())),
        "no node added; the monitor's actions:\n{}",
        actions()
    );
    // The monitor prints a round's actions once they are done: the node may answer in
    // the membership a moment before its round's line is written.
    assert!(
        eventually(Duration::from_secs(10), || actions().contains("add_nodes")),
        "{}",
        actions()
    );
    let before = logged_latencies(&output());
    assert!(
        before.iter().any(|&l| l > 0.75 * OBJECTIVE_US),
        "a node was added although latency never passed f_upper · L_obj: {before:?}"
    );
    // Under the same load, once the new node holds its share and the statistics window
    // (2 s) has forgotten the single-node rounds, latency is back under the objective.
    let rounds = before.len();
    let under = eventually(Duration::from_secs(30), || {
        let after = logged_latencies(&output());
        after.len() >= rounds + 4 && after[after.len() - 4..].iter().all(|&l| l < OBJECTIVE_US)
    });
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    assert!(
        under,
        "latency did not return under {OBJECTIVE_US} µs after the node was added: {:?}",
        &logged_latencies(&output())[rounds..]
    );
    // Only one: the grace period holds the policy still after the membership changed.
    assert_eq!(alive_ids(&addr).len(), 2, "{}", actions());

    // kill -9 the node the manager started: it comes back with its id.
    let data = root.join("mem1");
    let pid = server_pid(&data).expect("the managed node's process");
    // SAFETY: kill(2) on a pid read from /proc just now.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    assert!(
        eventually(Duration::from_secs(30), || server_pid(&data)
            .is_some_and(|p| p != pid)
            && alive_ids(&addr).contains(&"mem1".to_string())),
        "mem1 was not replaced"
    );

    // The monitor dies outright: its node stops with it (no unmanaged leftovers).
    let replaced = server_pid(&data).unwrap();
    let _ = monitor.0.kill();
    let _ = monitor.0.wait();
    assert!(
        eventually(Duration::from_secs(10), || server_pid(&data)
            != Some(replaced)),
        "the managed node outlived its monitor"
    );
    drop(nodes);
}

/// The pids of `latticekv server` processes with `--node-id id` that mention `dir`.
fn node_pids(dir: &std::path::Path, id: &str) -> Vec<i32> {
    server_pids(&[&format!(" --node-id {id} "), &dir.display().to_string()])
}

#[test]
fn local_with_nodes_starts_a_killed_node_again_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut local = Monitor(
        Command::new(bin())
            .args([
                "local",
                "--nodes",
                "2",
                "--disk-nodes",
                "0",
                "--listen",
                "127.0.0.1:0",
                "--resp",
                "127.0.0.1:0",
                "--cluster-gossip-ms",
                "100",
                "--data-dir",
            ])
            .arg(&data)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = local.0.stdout.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(out));
    let mut first = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("node1 native ") {
            first = rest.split_whitespace().next().map(str::to_string);
        }
        if line.starts_with("press") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let first = first.expect("node1's address");
    assert!(eventually(Duration::from_secs(20), || {
        alive_ids(&first).contains(&"node2".to_string())
    }));
    let old = node_pids(&data, "node2");
    assert_eq!(old.len(), 1, "{old:?}");
    // SAFETY: kill(2) on a pid read from /proc just now.
    assert_eq!(unsafe { libc::kill(old[0], libc::SIGKILL) }, 0);
    assert!(
        eventually(Duration::from_secs(20), || {
            let now = node_pids(&data, "node2");
            now.len() == 1 && now[0] != old[0] && alive_ids(&first).contains(&"node2".to_string())
        }),
        "node2 was not started again"
    );
    // Killed outright, `local` takes its nodes with it.
    let _ = local.0.kill();
    let _ = local.0.wait();
    assert!(
        eventually(Duration::from_secs(10), || node_pids(&data, "node1")
            .is_empty()
            && node_pids(&data, "node2").is_empty()),
        "nodes outlived `latticekv local`"
    );
}
