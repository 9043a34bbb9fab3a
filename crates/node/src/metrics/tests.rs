use std::sync::Arc;

use super::*;
use crate::core::CoreStats;

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
    }
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
