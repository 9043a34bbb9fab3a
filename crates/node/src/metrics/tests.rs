use std::sync::Arc;

use super::*;
use crate::core::CoreStats;
use wire::pb;

fn worker(i: u32, requests: u64, latencies_us: &[u64]) -> WorkerStats {
    let mut core = CoreStats::default();
    core.shard.requests = requests;
    core.shard.live_keys = 10 + u64::from(i);
    let mut latency_total = Cumulative::default();
    for us in latencies_us {
        latency_total.record(us * 1000, 1);
    }
    WorkerStats {
        worker: i,
        core,
        connections: 2,
        subscriptions: 0,
        window: Arc::new(crate::stats::Window::default()),
        backing: None,
        latency_total,
        wal: None,
        lsm: None,
        backing_latency: Cumulative::default(),
        requests: Default::default(),
    }
}

/// The text of a node `node_id` of `tier` with `workers`, no members, no monitor report.
fn render_one(node_id: &str, tier: &str, workers: &[WorkerStats]) -> String {
    render(&Snapshot {
        node_id,
        tier,
        uptime_seconds: 1,
        memory_budget_bytes: 1,
        workers,
        members: Members::default(),
        policy: None,
        now_ms: 0,
    })
}

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
}

#[test]
fn renders_counters_per_worker_and_one_histogram_for_the_node() {
    let workers = [worker(0, 5, &[30, 30, 700]), worker(1, 7, &[3_000])];
    let text = render(&Snapshot {
        node_id: "a\"b",
        tier: "memory",
        uptime_seconds: 9,
        memory_budget_bytes: 1 << 20,
        workers: &workers,
        members: Members {
            alive: 2,
            suspect: 0,
            dead: 1,
        },
        policy: None,
        now_ms: 0,
    });
    let l = r#"node="a\"b",tier="memory""#;
    assert_eq!(
        value(
            &text,
            &format!("latticekv_operations_total{{{l},worker=\"1\"}}")
        ),
        7.0
    );
    assert_eq!(
        value(&text, &format!("latticekv_keys{{{l},worker=\"0\"}}")),
        10.0
    );
    assert_eq!(
        value(
            &text,
            &format!("latticekv_cluster_members{{{l},status=\"dead\"}}")
        ),
        1.0
    );
    let bucket = |le: &str| {
        value(
            &text,
            &format!("latticekv_request_duration_seconds_bucket{{{l},le=\"{le}\"}}"),
        )
    };
    assert_eq!(bucket("0.00005"), 2.0);
    assert_eq!(bucket("0.001"), 3.0);
    assert_eq!(bucket("0.005"), 4.0);
    assert_eq!(bucket("+Inf"), 4.0);
    let count = value(
        &text,
        &format!("latticekv_request_duration_seconds_count{{{l}}}"),
    );
    assert_eq!(count, 4.0);
    let sum = value(
        &text,
        &format!("latticekv_request_duration_seconds_sum{{{l}}}"),
    );
    assert!((sum - 0.00376).abs() < 1e-9, "{sum}");
    // Every series has its TYPE line, and buckets never decrease.
    for name in [
        "operations_total",
        "keys",
        "request_duration_seconds",
        "build_info",
    ] {
        assert!(
            text.contains(&format!("# TYPE latticekv_{name} ")),
            "{name}"
        );
    }
    let mut last = 0.0;
    for le in LATENCY_BUCKETS_S {
        let b = bucket(&le.to_string());
        assert!(b >= last);
        last = b;
    }
}

#[test]
fn renders_the_log_and_the_backing_store_only_where_they_exist() {
    let bare = [worker(0, 1, &[])];
    let text = render_one("n", "memory", &bare);
    assert!(!text.contains("latticekv_wal_"), "{text}");
    assert!(!text.contains("latticekv_backing_"), "{text}");

    let mut w0 = worker(0, 1, &[]);
    let mut log = store::wal::WalStats {
        appends: 3,
        append_bytes: 300,
        fsyncs: 2,
        fsync_micros: 2_040,
        ..Default::default()
    };
    log.fsync_histogram[0] = 1; // ≤ 50 µs
    log.fsync_histogram[store::wal::stats::FSYNC_BUCKETS_US.len()] = 1; // > 1 s
    w0.wal = Some(crate::driver::journal::WalMetrics {
        log,
        waiting_bytes: 7,
        snapshots: 1,
        snapshot_micros: 1_500_000,
    });
    w0.backing = Some(pb::BackingStatus {
        mode: 1,
        dirty_keys: 4,
        applied_keys: 9,
        ..Default::default()
    });
    w0.backing_latency.record(2_000_000, 3);
    let text = render_one("n", "memory", &[w0]);
    let l = r#"node="n",tier="memory""#;
    let v = |s: &str| value(&text, &format!("latticekv_{s}"));
    assert_eq!(
        v(&format!("wal_appended_bytes_total{{{l},worker=\"0\"}}")),
        300.0
    );
    assert_eq!(v(&format!("wal_waiting_bytes{{{l},worker=\"0\"}}")), 7.0);
    assert_eq!(
        v(&format!(
            "wal_fsync_duration_seconds_bucket{{{l},le=\"0.00005\"}}"
        )),
        1.0
    );
    assert_eq!(
        v(&format!(
            "wal_fsync_duration_seconds_bucket{{{l},le=\"1\"}}"
        )),
        1.0
    );
    assert_eq!(
        v(&format!(
            "wal_fsync_duration_seconds_bucket{{{l},le=\"+Inf\"}}"
        )),
        2.0
    );
    assert_eq!(v(&format!("wal_snapshot_duration_seconds_sum{{{l}}}")), 1.5);
    assert_eq!(
        v(&format!("backing_mode{{{l},worker=\"0\",mode=\"failed\"}}")),
        1.0
    );
    assert_eq!(
        v(&format!("backing_mode{{{l},worker=\"0\",mode=\"normal\"}}")),
        0.0
    );
    assert_eq!(v(&format!("backing_dirty_keys{{{l},worker=\"0\"}}")), 4.0);
    assert_eq!(
        v(&format!("backing_apply_duration_seconds_count{{{l}}}")),
        3.0
    );
    assert!(text.contains("# TYPE latticekv_backing_applied_keys_total counter"));
    assert!(text.contains("# TYPE latticekv_wal_snapshot_duration_seconds summary"));
}

#[test]
fn renders_the_lsm_tables_and_anti_entropy_sessions() {
    let mut w0 = worker(0, 1, &[]);
    w0.core.entropy_sessions = 4;
    w0.lsm = Some(crate::driver::journal::LsmMetrics {
        fsyncs: 1,
        tables: 5,
        l0_tables: 2,
        ..Default::default()
    });
    w0.window = Arc::new(crate::stats::Window {
        disk_bytes: Some(123_456),
        ..Default::default()
    });
    let text = render_one("d", "disk", &[w0]);
    let l = r#"node="d",tier="disk""#;
    let v = |s: &str| value(&text, &format!("latticekv_{s}"));
    assert_eq!(v(&format!("disk_bytes{{{l},worker=\"0\"}}")), 123_456.0);
    // A memory-tier node has no such series.
    assert!(!render_one("m", "memory", &[worker(0, 1, &[])]).contains("latticekv_disk_bytes"));
    assert_eq!(v(&format!("lsm_tables{{{l}}}")), 5.0);
    assert_eq!(v(&format!("lsm_l0_tables{{{l}}}")), 2.0);
    assert_eq!(
        v(&format!("anti_entropy_sessions_total{{{l},worker=\"0\"}}")),
        4.0
    );
    assert!(text.contains("# TYPE latticekv_lsm_l0_tables gauge"));
}

#[test]
fn renders_the_monitors_report_once_one_came() {
    let workers = [worker(0, 1, &[])];
    let snapshot = |policy| Snapshot {
        node_id: "n",
        tier: "memory",
        uptime_seconds: 1,
        memory_budget_bytes: 1,
        workers: &workers,
        members: Members::default(),
        policy,
        now_ms: 10_000,
    };
    assert!(!render(&snapshot(None)).contains("latticekv_policy_"));
    let report = pb::PolicyReport {
        sent_ms: 7_500,
        rounds: 12,
        set_replication_total: 3,
        add_nodes_total: 1,
        failed_actions_total: 1,
        hot_keys: 2,
        observed_latency_us: 1_500.0,
        latency_objective_us: 2_500.0,
        ..Default::default()
    };
    let text = render(&snapshot(Some(&report)));
    let l = r#"node="n",tier="memory""#;
    let v = |s: &str| value(&text, &format!("latticekv_{s}"));
    assert_eq!(v(&format!("policy_rounds_total{{{l}}}")), 12.0);
    assert_eq!(
        v(&format!(
            "policy_actions_total{{{l},kind=\"set_replication\"}}"
        )),
        3.0
    );
    assert_eq!(
        v(&format!("policy_actions_total{{{l},kind=\"remove_node\"}}")),
        0.0
    );
    assert_eq!(v(&format!("policy_hot_keys{{{l}}}")), 2.0);
    assert_eq!(
        v(&format!("policy_observed_latency_seconds{{{l}}}")),
        0.0015
    );
    assert_eq!(v(&format!("policy_report_age_seconds{{{l}}}")), 2.5);
    assert!(text.contains("# TYPE latticekv_policy_actions_total counter"));
}
