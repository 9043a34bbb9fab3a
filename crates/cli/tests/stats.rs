//! Worker statistics against a real node: a known skewed load shows up in `status` (the
//! hot key and its count, occupancy, the latency histogram's count) and in
//! `latticekv status --json`.

mod common;

use std::time::{Duration, Instant};

use client::Client;
use common::NodeProc;
use testkit::rt;
use wire::pb;

/// The smallest window sequence number among the node's workers.
fn min_seq(s: &pb::Status) -> u64 {
    s.workers
        .iter()
        .map(|w| w.stats.as_ref().map_or(0, |st| st.window_seq))
        .min()
        .unwrap_or(0)
}

/// The largest window sequence number among the node's workers.
fn max_seq(s: &pb::Status) -> u64 {
    s.workers
        .iter()
        .map(|w| w.stats.as_ref().map_or(0, |st| st.window_seq))
        .max()
        .unwrap_or(0)
}

#[test]
fn status_reports_the_hot_key_of_a_skewed_load() {
    // Periods of 250 ms, a window of 15 s: the whole load fits in one window. Without the
    // embedded monitor, so that only this test's requests reach the node.
    let node = NodeProc::start(&[
        "--monitor",
        "false",
        "--disk-nodes",
        "0",
        "--workers",
        "2",
        "--stats-period-ms",
        "250",
        "--stats-window-ms",
        "15000",
    ]);
    const COLD: usize = 10_000;
    const HOT_GETS: u64 = 1_000;
    const CHUNK: usize = 500;
    let (status, polls) = rt().block_on(async {
        let c = Client::connect(&node.native.to_string()).await.unwrap();
        let started = c.status().await.unwrap();
        assert_eq!(started.tier, "memory");
        // 10,000 keys read once each (a few requests per chunk: one per worker)…
        let cold: Vec<String> = (0..COLD).map(|i| format!("cold:{i}")).collect();
        for chunk in cold.chunks(CHUNK) {
            let values = c.get_many(chunk).await.unwrap();
            assert!(values.iter().all(Option::is_none));
        }
        // …and one key written once and read 1,000 times.
        c.assign("hot", "v").await.unwrap();
        for _ in 0..HOT_GETS {
            assert!(c.get_lww("hot").await.unwrap().is_some());
        }
        // Wait for every worker to publish a window that closed after the load.
        let mut polls = 1u64;
        let loaded = c.status().await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            polls += 1;
            let s = c.status().await.unwrap();
            if min_seq(&s) > max_seq(&loaded) {
                return (s, polls);
            }
            assert!(Instant::now() < deadline, "no window closed: {s:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let stats: Vec<&pb::WorkerStats> = status
        .workers
        .iter()
        .map(|w| w.stats.as_ref().expect("statistics in the status"))
        .collect();
    let accesses: u64 = stats.iter().map(|s| s.accesses).sum();
    assert_eq!(
        accesses,
        COLD as u64 + 1 + HOT_GETS,
        "every access counted once"
    );
    // The hot key is its worker's top key, counted within the documented bound.
    let owner = stats
        .iter()
        .find(|s| s.hot_keys.first().is_some_and(|h| &h.key[..] == b"hot"))
        .unwrap_or_else(|| panic!("no worker reports the hot key: {stats:?}"));
    let truth = 1 + HOT_GETS;
    let bound = (std::f64::consts::E * owner.accesses as f64 / 1024.0).ceil() as u64;
    let reported = owner.hot_keys[0].accesses;
    assert!(
        (truth..=truth + bound).contains(&reported),
        "hot key counted {reported}, true {truth}, bound +{bound}"
    );
    // Distinct keys within three standard errors (3.3%).
    let distinct: u64 = stats.iter().map(|s| s.accessed_keys).sum();
    let want = COLD as f64 + 1.0;
    assert!(
        (distinct as f64 - want).abs() / want < 0.10,
        "{distinct} distinct keys"
    );
    // Keys accessed twice: only the hot key; the 10,000 read once do not count (each worker
    // saw ~5,000 distinct keys, so its sample holds about half of them: the hot key counts
    // 2 if its worker sampled it, else 0).
    let reused: u64 = stats
        .iter()
        .map(|s| s.reused_keys.expect("reused keys reported"))
        .sum();
    assert!(reused <= 2, "{reused} keys reused");
    for s in &stats {
        assert!(s.occupancy > 0.0 && s.occupancy <= 1.0, "{s:?}");
        assert!(s.window_ms > 0 && s.window_ms <= 15_000);
        assert_eq!(s.period_ms, 250);
        assert!(s.latency_p50_ns > 0 && s.latency_p50_ns <= s.latency_p99_ns);
    }
    // One latency per data request: the 1,001 single-key requests, one or two per chunk
    // (one per worker it touched), and a few more. The client's topology requests and the
    // status polls are informational: not timed (else a monitor's polls, slow next to a
    // Get, made up the mean of an idle node).
    let requests: u64 = stats.iter().map(|s| s.latency_count).sum();
    let chunks = COLD.div_ceil(CHUNK) as u64;
    let least = 1 + HOT_GETS + chunks;
    let most = 1 + HOT_GETS + 2 * chunks + 5;
    assert!(polls > 0);
    assert!(
        (least..=most).contains(&requests),
        "{requests} requests timed, expected {least}..={most}"
    );

    // The same through the CLI.
    let json: serde_json::Value =
        serde_json::from_str(&node.cli_ok(&["status", "--json"])).expect("status --json");
    assert_eq!(json["hot_keys"][0]["key"], "hot", "{json}");
    assert!(json["hot_keys"][0]["accesses"].as_u64().unwrap() >= truth);
    assert!(json["aggregate"]["accesses"].as_u64().unwrap() >= accesses);
    assert_eq!(json["workers"].as_array().unwrap().len(), 2);
    assert!(json["workers"][0]["stats"]["occupancy"].as_f64().unwrap() > 0.0);
    let text = node.cli_ok(&["status"]);
    assert!(text.contains("hot keys"), "{text}");
    assert!(text.contains(" hot\n"), "{text}");
    assert!(text.contains("occupancy %"), "{text}");
}
