use std::sync::Arc;

use bytes::Bytes;
use wire::pb;

use super::status::{build, render, StatusSnapshot, MAX_HOT_KEYS};
use crate::core::CoreStats;
use crate::driver::worker::WorkerStats;
use crate::stats::latency::{Cumulative, Histogram};
use crate::stats::{HotKey, Window};

fn histogram(latencies_us: &[u64]) -> Histogram {
    let mut h = Histogram::default();
    for us in latencies_us {
        h.counts[crate::stats::latency::bucket_of(us * 1000)] += 1;
        h.sum_ns += us * 1000;
        h.max_ns = h.max_ns.max(us * 1000);
    }
    h
}

fn worker(i: u32, requests: u64, latencies_us: &[u64], hot: &[(&str, u64)]) -> WorkerStats {
    let mut core = CoreStats::default();
    core.shard.requests = requests;
    core.shard.live_keys = 10 + u64::from(i);
    core.shard.bytes = 1000;
    let mut latency_total = Cumulative::default();
    for us in latencies_us {
        latency_total.record(us * 1000, 1);
    }
    let window = Window {
        seq: 3,
        window_ms: 2_000,
        accesses: 4_000 * u64::from(i + 1),
        occupancy: 0.25,
        latency: histogram(latencies_us),
        hot_keys: hot
            .iter()
            .map(|(k, n)| HotKey {
                key: Bytes::copy_from_slice(k.as_bytes()),
                accesses: *n,
            })
            .collect(),
        ..Window::default()
    };
    WorkerStats {
        worker: i,
        core,
        connections: 1,
        subscriptions: 0,
        window: Arc::new(window),
        backing: None,
        latency_total,
        wal: None,
        lsm: None,
        backing_latency: Cumulative::default(),
        requests: Default::default(),
    }
}

fn member(id: &str, role: &str, status: pb::NodeStatus) -> pb::Member {
    pb::Member {
        node_id: id.to_string(),
        role: role.to_string(),
        status: status as i32,
        front: format!("{id}:7700"),
        ..pb::Member::default()
    }
}

fn snapshot<'a>(
    workers: &'a [WorkerStats],
    members: &'a [pb::Member],
    show_keys: bool,
) -> StatusSnapshot<'a> {
    StatusSnapshot {
        node_id: "m1",
        tier: "memory",
        uptime_ms: 12_345,
        memory_budget_bytes: 1 << 20,
        workers,
        members,
        show_keys,
    }
}

#[test]
fn status_sums_workers_and_lists_members_with_their_health() {
    // Worker 0: 150 requests at 20 µs; worker 1: 50 at 1 ms.
    let workers = [
        worker(0, 100, &[20; 150], &[("a", 50), ("b", 7)]),
        worker(1, 100, &[1_000; 50], &[("c", 30)]),
    ];
    let members = [
        member("m2", "disk", pb::NodeStatus::Suspect),
        member("m1", "memory", pb::NodeStatus::Alive),
        member("m3", "memory", pb::NodeStatus::Dead),
    ];
    let s = build(&snapshot(&workers, &members, true));
    assert_eq!(s.node, "m1");
    assert_eq!(s.uptime_ms, 12_345);
    assert_eq!(s.operations, 200);
    let ids: Vec<(&str, &str, &str, bool)> = s
        .members
        .iter()
        .map(|m| (m.id.as_str(), m.tier.as_str(), m.health, m.is_self))
        .collect();
    assert_eq!(
        ids,
        [
            ("m1", "memory", "alive", true),
            ("m2", "disk", "suspect", false),
            ("m3", "memory", "dead", false),
        ]
    );
    // 4,000 and 8,000 accesses over 2 s.
    let rates: Vec<f64> = s.workers.iter().map(|w| w.ops_per_sec).collect();
    assert_eq!(rates, [2_000.0, 4_000.0]);
    // 200 requests: the median is a 20 µs one, the 99th percentile (rank 198) a 1 ms one.
    for l in [&s.latency, &s.latency_since_start] {
        assert_eq!(l.count, 200);
        assert!((20.0..=21.25).contains(&l.p50_us), "{l:?}");
        assert!((1_000.0..=1_062.5).contains(&l.p99_us), "{l:?}");
    }
    assert_eq!((s.storage.keys, s.storage.memory_bytes), (21, 2_000));
    assert_eq!(s.storage.disk_bytes, None);
    let hot: Vec<(Option<&str>, u64)> = s
        .hot_keys
        .iter()
        .map(|h| (h.key.as_deref(), h.accesses))
        .collect();
    assert_eq!(hot, [(Some("a"), 50), (Some("c"), 30), (Some("b"), 7)]);
}

#[test]
fn key_names_are_withheld_cut_and_escaped() {
    let long = "k".repeat(300);
    let many: Vec<(String, u64)> = (0..20).map(|i| (format!("x{i}"), 100 + i)).collect();
    let mut hot: Vec<(&str, u64)> = many.iter().map(|(k, n)| (k.as_str(), *n)).collect();
    hot.push((&long, 1_000));
    hot.push(("</script>\"\n", 999));
    let workers = [worker(0, 1, &[5], &hot)];
    let members = [member("m1", "memory", pb::NodeStatus::Alive)];

    let open = build(&snapshot(&workers, &members, true));
    assert_eq!(open.hot_keys.len(), MAX_HOT_KEYS);
    let first = open.hot_keys[0].key.as_deref().unwrap();
    assert!(first.starts_with("kkk") && first.ends_with('…'), "{first}");
    assert_eq!(first.chars().count(), 65);

    let closed = build(&snapshot(&workers, &members, false));
    assert!(!closed.hot_key_names);
    assert!(closed.hot_keys.iter().all(|h| h.key.is_none()));
    assert_eq!(closed.hot_keys[0].accesses, 1_000);

    // The JSON parses back, and a key cannot break out of its string.
    let text = render(&snapshot(&workers, &members, true));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["hot_keys"][1]["key"], "</script>\"\n");
    assert_eq!(v["members"][0]["self"], true);
    assert_eq!(v["storage"]["disk_bytes"], serde_json::Value::Null);
    assert_eq!(v["workers"][0]["operations"], 1);
}

#[test]
fn an_idle_node_reports_zeros_not_errors() {
    let workers = [worker(0, 0, &[], &[])];
    let s = build(&snapshot(&workers, &[], true));
    assert_eq!(
        (s.latency.count, s.latency.p50_us, s.latency.p99_us),
        (0, 0.0, 0.0)
    );
    assert!(s.members.is_empty() && s.hot_keys.is_empty());
}

#[test]
fn the_page_is_self_contained() {
    let page = super::status::PAGE;
    assert!(page.starts_with("<!doctype html>"));
    for external in ["src=\"http", "href=\"http", "@import", "<link"] {
        assert!(!page.contains(external), "{external}");
    }
    assert!(page.contains("fetch(\"status.json\""));
}
